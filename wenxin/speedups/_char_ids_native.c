/* Character-tokenizer ids for a batch of texts, in one pass of C (wenxin.speedups.char_ids).

Hand-written for a measured reason (issue 39): on the sentiment example's reviews, the numpy
batch path still spent about 50 us converting 16 texts (77 characters each) against the BoW
model's 18 us on ONNX Runtime, in some 40 numpy calls whose fixed costs no vectorizing removes;
the `tokenizers` library took 340-477 us for the same batch. This kernel does what
`CharBatchIds._general` and `_pad` do, text by text, from tables that Python builds from the
running interpreter's own `unicodedata` and the field's vocab, so it gives exactly the ids of
`CharTokenizer.tokenize`, `Vocab.to_ids` and `TextFieldReader.truncate` (tests compare them):

  - NFKC, a character at a time through `wenxin.speedups.nfkc`'s tables (exact where every
    character is context-free; a batch with any other character is refused), then `str.lower`
    through a table of single-character lower cases (a character whose lower case is not one
    character, or depends on its neighbours, makes the batch refused);
  - tokens, by one of two rules: `CharTokenizer`'s (a run of [A-Za-z0-9_] is one, whitespace is
    none, any other character is one) or `WhitespaceTokenizer`'s (the runs between separators:
    whitespace, or one given character);
  - ids: a token or n-gram of one code point from a table, of two or three from `KeyTable`'s hash
    tables of the vocab's tokens of that length (same hash, same probing), a longer one from the
    vocab's dict;
  - each text's unigrams, then its bigrams, ..., truncated (head, tail or both ends) and padded.

A refused batch (None) takes the numpy path, which handles every text. The kernel holds the GIL
throughout and calls no Python code (dict lookups with str keys), so it is safe from threads.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BASE 0x110000ULL
#define MULTIPLIER 0x9E3779B97F4A7C15ULL /* KeyTable._MULTIPLIER */
#define MAX_NGRAM 3
#define NO_LOWER 0xFFFFFFFFu /* in the lower table: a character the kernel does not lowercase */
enum { OTHER = 0, WORD = 1, SPACE = 2 };                       /* char_ids._KINDS */
enum { UNCHANGED = 0, ONE = 1, MANY = 2, CONTEXT = 3 };        /* nfkc's classes */
enum { CHAR_RULE = -1, SPLIT_AT_SPACE = -2 };                  /* Kernel.split, else a separator's code point */

typedef struct {
    PyObject_HEAD
    Py_buffer kinds, classes, one, lower, single_ids;
    Py_buffer gram_keys[MAX_NGRAM + 1], gram_values[MAX_NGRAM + 1]; /* [n]: vocab tokens of n code points, 2..3 */
    uint64_t gram_shift[MAX_NGRAM + 1], gram_mask[MAX_NGRAM + 1];
    int held; /* how many of the buffers above are held: released in that order */
    PyObject *many;        /* dict: code point -> its NFKC string (more than one character) */
    PyObject *token_to_id; /* dict: token -> id */
    long long unk_id, padding_id;
    Py_ssize_t max_seq_len, width;
    int ngram, truncation_type, lowercase;
    long split; /* CHAR_RULE, SPLIT_AT_SPACE or the code point text is split at */
} Kernel;

/* Growable arrays, freed at the end of a call. */
typedef struct { uint32_t *data; Py_ssize_t size, room; } Chars;
typedef struct { int64_t *data; Py_ssize_t size, room; } Int64s;

static int grow(void **data, Py_ssize_t *room, Py_ssize_t need, size_t item) {
    Py_ssize_t size = *room ? 2 * *room : 256;
    if (size < need) size = need;
    void *grown = realloc(*data, (size_t)size * item);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *data = grown;
    *room = size;
    return 0;
}

static inline int push_char(Chars *b, uint32_t value) {
    if (b->size == b->room && grow((void **)&b->data, &b->room, b->size + 1, sizeof(uint32_t)) < 0) return -1;
    b->data[b->size++] = value;
    return 0;
}

static inline int push_int64(Int64s *b, int64_t value) {
    if (b->size == b->room && grow((void **)&b->data, &b->room, b->size + 1, sizeof(int64_t)) < 0) return -1;
    b->data[b->size++] = value;
    return 0;
}

static Py_buffer *buffer_slot(Kernel *k, int index) {
    switch (index) {
        case 0: return &k->kinds;
        case 1: return &k->classes;
        case 2: return &k->one;
        case 3: return &k->lower;
        case 4: return &k->single_ids;
        default: {
            int n = 2 + (index - 5) / 2;
            return (index - 5) % 2 == 0 ? &k->gram_keys[n] : &k->gram_values[n];
        }
    }
}

static void Kernel_dealloc(Kernel *k) {
    for (int i = 0; i < k->held; i++) PyBuffer_Release(buffer_slot(k, i));
    Py_XDECREF(k->many);
    Py_XDECREF(k->token_to_id);
    PyTypeObject *type = Py_TYPE(k);
    type->tp_free((PyObject *)k);
    Py_DECREF(type);
}

/* Take a C-contiguous buffer of `itemsize`-byte items (and hold it) as the kernel's `index`th. */
static int hold(Kernel *k, PyObject *array, int index, Py_ssize_t itemsize, const char *name) {
    Py_buffer *view = buffer_slot(k, index);
    if (PyObject_GetBuffer(array, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    k->held = index + 1;
    if (view->itemsize != itemsize || view->ndim != 1 || view->len == 0) {
        PyErr_Format(PyExc_ValueError, "%s: a non-empty 1-d array of %zd-byte items expected", name, itemsize);
        return -1;
    }
    return 0;
}

static PyObject *Kernel_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"kinds", "classes", "one", "lower", "single_ids", "gram_tables", "many", "token_to_id",
                            "unk_id", "padding_id", "max_seq_len", "width", "ngram", "truncation_type",
                            "lowercase", "split", NULL};
    PyObject *kinds, *classes, *one, *lower, *single_ids, *gram_tables, *many, *token_to_id;
    long long unk_id, padding_id;
    Py_ssize_t max_seq_len, width;
    int ngram, truncation_type, lowercase;
    long split = CHAR_RULE;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOO!O!O!LLnniip|l", names, &kinds, &classes, &one, &lower,
                                     &single_ids, &PyTuple_Type, &gram_tables, &PyDict_Type, &many, &PyDict_Type,
                                     &token_to_id, &unk_id, &padding_id, &max_seq_len, &width, &ngram,
                                     &truncation_type, &lowercase, &split))
        return NULL;
    if (ngram < 1 || ngram > MAX_NGRAM || PyTuple_GET_SIZE(gram_tables) != MAX_NGRAM - 1 || max_seq_len < 1 ||
        width < 0 || truncation_type < 0 || truncation_type > 2 || split < SPLIT_AT_SPACE || split >= (long)BASE) {
        PyErr_SetString(PyExc_ValueError, "ngram 1-3, a (keys, values, shift, mask) for each n of 2 and 3, "
                                          "max_seq_len >= 1, width >= 0, truncation_type 0-2 and split -2 to 0x10FFFF "
                                          "expected");
        return NULL;
    }
    Kernel *k = (Kernel *)type->tp_alloc(type, 0);
    if (k == NULL) return NULL;
    Py_INCREF(many);
    Py_INCREF(token_to_id);
    k->many = many;
    k->token_to_id = token_to_id;
    k->unk_id = unk_id;
    k->padding_id = padding_id;
    k->max_seq_len = max_seq_len;
    k->width = width;
    k->ngram = ngram;
    k->truncation_type = truncation_type;
    k->lowercase = lowercase;
    k->split = split;
    if (hold(k, kinds, 0, 1, "kinds") < 0 || hold(k, classes, 1, 1, "classes") < 0 || hold(k, one, 2, 4, "one") < 0 ||
        hold(k, lower, 3, 4, "lower") < 0 || hold(k, single_ids, 4, 8, "single_ids") < 0)
        goto fail;
    if (k->kinds.len < (Py_ssize_t)BASE || k->classes.len < (Py_ssize_t)BASE || k->one.len < 4 * (Py_ssize_t)BASE) {
        PyErr_SetString(PyExc_ValueError, "kinds, classes and one need an entry for every code point");
        goto fail;
    }
    for (int n = 2; n <= MAX_NGRAM; n++) {
        PyObject *table = PyTuple_GET_ITEM(gram_tables, n - 2);
        PyObject *keys, *values;
        unsigned long long shift, mask;
        if (!PyArg_ParseTuple(table, "OOKK", &keys, &values, &shift, &mask)) goto fail;
        if (hold(k, keys, 5 + 2 * (n - 2), 8, "gram keys") < 0 || hold(k, values, 6 + 2 * (n - 2), 8, "gram values") < 0)
            goto fail;
        if (shift >= 64 || k->gram_keys[n].len != k->gram_values[n].len ||
            (Py_ssize_t)(mask + 1) * 8 != k->gram_keys[n].len) {
            PyErr_SetString(PyExc_ValueError, "a gram table's keys and values must have mask + 1 slots each");
            goto fail;
        }
        k->gram_shift[n] = shift;
        k->gram_mask[n] = mask;
    }
    return (PyObject *)k;
fail:
    Py_DECREF(k);
    return NULL;
}

/* The id of the token of `size` code points at `codes`, looked up in the vocab's dict. */
static int dict_id(Kernel *k, const uint32_t *codes, Py_ssize_t size, long long *id) {
    PyObject *token = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, codes, size);
    if (token == NULL) return -1;
    PyObject *value = PyDict_GetItemWithError(k->token_to_id, token); /* borrowed */
    Py_DECREF(token);
    if (value == NULL) {
        if (PyErr_Occurred()) return -1;
        *id = k->unk_id;
        return 0;
    }
    *id = PyLong_AsLongLong(value);
    return (*id == -1 && PyErr_Occurred()) ? -1 : 0;
}

static long long gram_id(Kernel *k, int n, uint64_t key);

/* The id of the token of `size` code points at `codes`: one from the table of one-character
   tokens, two or three from the hash tables of the vocab's tokens of that many, longer from the dict. */
static long long single_id(Kernel *k, uint32_t code);
static int token_id(Kernel *k, const uint32_t *codes, Py_ssize_t size, long long *id) {
    if (size == 1) {
        *id = single_id(k, codes[0]);
        return 0;
    }
    if (size <= MAX_NGRAM) {
        uint64_t key = 0;
        for (Py_ssize_t i = 0; i < size; i++) key = key * BASE + codes[i];
        *id = gram_id(k, (int)size, key);
        return 0;
    }
    return dict_id(k, codes, size, id);
}

static long long single_id(Kernel *k, uint32_t code) {
    const long long *table = (const long long *)k->single_ids.buf;
    Py_ssize_t size = k->single_ids.len / 8;
    return table[(Py_ssize_t)code < size ? (Py_ssize_t)code : size - 1]; /* beyond: the last entry, unknown */
}

static long long gram_id(Kernel *k, int n, uint64_t key) {
    const long long *keys = (const long long *)k->gram_keys[n].buf, *values = (const long long *)k->gram_values[n].buf;
    uint64_t slot = (key * MULTIPLIER) >> k->gram_shift[n];
    while (keys[slot] != -1) {
        if ((uint64_t)keys[slot] == key) return values[slot];
        slot = (slot + 1) & k->gram_mask[n];
    }
    return k->unk_id;
}

/* The tokens of `text` as (start in `chars`) << 32 | length in `tokens`, their characters
   normalized (NFKC, then lowercased) in `chars`, one token after another (separators left out). With `limit`, it may stop
   once it has `limit` tokens, where the next one begins at a raw character: that character is
   context-free, so NFKC and lower case of the text before it are those of the whole text's start.
   1: done; 0: the text holds a character the kernel refuses; -1: an error. */
static int text_tokens(Kernel *k, PyObject *text, Py_ssize_t limit, Chars *chars, Int64s *tokens) {
    const int8_t *kinds = (const int8_t *)k->kinds.buf;
    const uint8_t *classes = (const uint8_t *)k->classes.buf;
    const uint32_t *one = (const uint32_t *)k->one.buf, *lower = (const uint32_t *)k->lower.buf;
    Py_ssize_t lower_size = k->lower.len / 4;
    int kind = PyUnicode_KIND(text), in_word = 0;
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t length = PyUnicode_GET_LENGTH(text);
    chars->size = tokens->size = 0;
    for (Py_ssize_t i = 0; i < length; i++) {
        uint32_t code = PyUnicode_READ(kind, data, i);
        uint32_t expanded[32];
        Py_ssize_t count = 1;
        if (code >= 0xD800 && code <= 0xDFFF) return 0; /* a lone surrogate */
        switch (classes[code]) {
            case UNCHANGED: expanded[0] = code; break;
            case ONE: expanded[0] = one[code]; break;
            case MANY: {
                PyObject *key = PyLong_FromUnsignedLong(code);
                if (key == NULL) return -1;
                PyObject *value = PyDict_GetItemWithError(k->many, key); /* borrowed */
                Py_DECREF(key);
                if (value == NULL || !PyUnicode_Check(value)) {
                    if (!PyErr_Occurred()) PyErr_Format(PyExc_KeyError, "no NFKC form for U+%04X", code);
                    return -1;
                }
                count = PyUnicode_GET_LENGTH(value);
                if (count > 32) return 0;
                for (Py_ssize_t j = 0; j < count; j++) expanded[j] = PyUnicode_READ_CHAR(value, j);
                break;
            }
            default: return 0; /* context: NFKC of this character depends on its neighbours */
        }
        for (Py_ssize_t j = 0; j < count; j++) {
            uint32_t c = expanded[j];
            if (k->lowercase && (Py_ssize_t)c < lower_size && (c = lower[c]) == NO_LOWER) return 0;
            int c_kind = kinds[c], char_rule = k->split == CHAR_RULE;
            if (k->split < 0 ? c_kind == SPACE : c == (uint32_t)k->split) { /* a separator */
                in_word = 0;
                continue;
            }
            if (in_word && (c_kind == WORD || !char_rule)) {
                tokens->data[tokens->size - 1]++; /* the word goes on */
            } else {
                if (limit && tokens->size >= limit && j == 0) return 1; /* the kept tokens are all here */
                if (push_int64(tokens, ((int64_t)chars->size << 32) | 1) < 0) return -1;
                in_word = c_kind == WORD || !char_rule;
            }
            if (push_char(chars, c) < 0) return -1;
        }
    }
    return 1;
}

/* kernel(texts, out, lengths) -> width, or None where the batch is refused.
   texts: a list of str; out: int64, room for len(texts) * max(width, max_seq_len) ids, filled with
   the padded ids [len(texts), width] from its start; lengths: int64 [len(texts)]. */
static PyObject *Kernel_call(Kernel *k, PyObject *args, PyObject *kwargs) {
    PyObject *texts, *out_array, *lengths_array, *result = NULL;
    if (!PyArg_ParseTuple(args, "O!OO", &PyList_Type, &texts, &out_array, &lengths_array)) return NULL;
    Py_buffer out, lengths_view;
    if (PyObject_GetBuffer(out_array, &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    if (PyObject_GetBuffer(lengths_array, &lengths_view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&out);
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(texts);
    Py_ssize_t limit = k->truncation_type == 0 ? k->max_seq_len : 0; /* keeping the head: no more tokens needed */
    Chars chars = {NULL, 0, 0};   /* a text's normalized characters */
    Int64s tokens = {NULL, 0, 0}; /* a text's tokens */
    Int64s ids = {NULL, 0, 0};    /* every text's ids, unigrams then n-grams, before truncation */
    Int64s starts = {NULL, 0, 0}; /* [count + 1] where each text's ids start in `ids` */
    int64_t *row_lengths = (int64_t *)lengths_view.buf;
    if (out.itemsize != 8 || lengths_view.itemsize != 8 || lengths_view.len / 8 < count) {
        PyErr_SetString(PyExc_ValueError, "out and lengths: int64 arrays, lengths of one per text");
        goto done;
    }
    for (Py_ssize_t t = 0; t < count; t++) {
        PyObject *text = PyList_GET_ITEM(texts, t);
        if (push_int64(&starts, ids.size) < 0) goto done;
        if (!PyUnicode_Check(text)) goto refuse;
        int found = text_tokens(k, text, limit, &chars, &tokens);
        if (found < 0) goto done;
        if (found == 0) goto refuse;
        const uint32_t *c = chars.data;
        const int64_t *tok = tokens.data;
        Py_ssize_t n_tokens = tokens.size;
        int grams = k->ngram > 1 && !(limit && n_tokens >= limit); /* n-grams come after the unigrams */
        if (limit && n_tokens > limit) n_tokens = limit;
        if (ids.size + n_tokens * k->ngram > ids.room &&
            grow((void **)&ids.data, &ids.room, ids.size + n_tokens * k->ngram, sizeof(int64_t)) < 0)
            goto done;
        for (Py_ssize_t i = 0; i < n_tokens; i++) {
            Py_ssize_t start = (Py_ssize_t)(tok[i] >> 32), size = (Py_ssize_t)(tok[i] & 0xFFFFFFFF);
            long long id;
            if (token_id(k, c + start, size, &id) < 0) goto done;
            ids.data[ids.size++] = id;
        }
        for (int n = 2; grams && n <= k->ngram; n++) {
            for (Py_ssize_t i = 0; i + n <= n_tokens; i++) {
                uint64_t key = 0;
                int singles = 1;
                for (int j = 0; j < n; j++) {
                    if ((tok[i + j] & 0xFFFFFFFF) != 1) {
                        singles = 0;
                        break;
                    }
                    key = key * BASE + c[tok[i + j] >> 32];
                }
                long long id;
                if (singles) {
                    id = gram_id(k, n, key);
                } else { /* "".join(tokens): a text's tokens lie one after another in `chars` */
                    Py_ssize_t total = 0;
                    for (int j = 0; j < n; j++) total += (Py_ssize_t)(tok[i + j] & 0xFFFFFFFF);
                    if (token_id(k, c + (tok[i] >> 32), total, &id) < 0) goto done;
                }
                ids.data[ids.size++] = id;
            }
        }
    }
    if (push_int64(&starts, ids.size) < 0) goto done;
    /* truncate and pad */
    const int64_t *all = ids.data, *start_of = starts.data;
    Py_ssize_t longest = 0;
    for (Py_ssize_t t = 0; t < count; t++) {
        Py_ssize_t total = (Py_ssize_t)(start_of[t + 1] - start_of[t]);
        row_lengths[t] = total < k->max_seq_len ? total : k->max_seq_len;
        if (row_lengths[t] > longest) longest = (Py_ssize_t)row_lengths[t];
    }
    Py_ssize_t width = k->width ? k->width : (longest > 1 ? longest : 1);
    if (width < longest || out.len / 8 < count * width) goto refuse;
    int64_t *rows = (int64_t *)out.buf;
    Py_ssize_t head = (k->max_seq_len + 1) / 2;
    for (Py_ssize_t t = 0; t < count; t++) {
        const int64_t *text_ids = all + start_of[t];
        Py_ssize_t total = (Py_ssize_t)(start_of[t + 1] - start_of[t]), length = (Py_ssize_t)row_lengths[t];
        int64_t *row = rows + t * width;
        if (k->truncation_type == 0 || total <= length) {
            memcpy(row, text_ids, (size_t)length * 8);
        } else if (k->truncation_type == 1) {
            memcpy(row, text_ids + total - length, (size_t)length * 8);
        } else {
            memcpy(row, text_ids, (size_t)head * 8);
            memcpy(row + head, text_ids + total - (length - head), (size_t)(length - head) * 8);
        }
        for (Py_ssize_t i = length; i < width; i++) row[i] = k->padding_id;
    }
    result = PyLong_FromSsize_t(width);
    goto done;
refuse:
    Py_INCREF(Py_None);
    result = Py_None;
done:
    free(chars.data);
    free(tokens.data);
    free(ids.data);
    free(starts.data);
    PyBuffer_Release(&out);
    PyBuffer_Release(&lengths_view);
    return result;
}

static PyType_Slot kernel_slots[] = {
    {Py_tp_doc, "Kernel(kinds, classes, one, lower, single_ids, gram_tables, many, token_to_id, unk_id, padding_id, "
                "max_seq_len, width, ngram, truncation_type, lowercase, split=-1): call it with (texts, out, lengths) to "
                "convert a batch; see wenxin.speedups.char_ids.NativeIds."},
    {Py_tp_new, Kernel_new},
    {Py_tp_dealloc, Kernel_dealloc},
    {Py_tp_call, Kernel_call},
    {0, NULL},
};

static PyType_Spec kernel_spec = {"wenxin.speedups._char_ids_native.Kernel", sizeof(Kernel), 0, Py_TPFLAGS_DEFAULT,
                                  kernel_slots};

static int module_exec(PyObject *module) {
    PyObject *type = PyType_FromSpec(&kernel_spec);
    if (type == NULL) return -1;
    if (PyModule_AddObject(module, "Kernel", type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    if (PyModule_AddIntConstant(module, "CHAR_RULE", CHAR_RULE) < 0 ||
        PyModule_AddIntConstant(module, "SPLIT_AT_SPACE", SPLIT_AT_SPACE) < 0)
        return -1;
    return PyModule_AddIntConstant(module, "NO_LOWER", (long)NO_LOWER) < 0 ? -1 : 0;
}

static PyModuleDef_Slot module_slots[] = {{Py_mod_exec, module_exec}, {0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_char_ids_native",
    "Character-tokenizer ids for a batch of texts in C (see wenxin.speedups.char_ids).", 0, NULL, module_slots,
};

PyMODINIT_FUNC PyInit__char_ids_native(void) { return PyModuleDef_Init(&module_def); }
