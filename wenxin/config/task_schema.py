"""The schema of a task file: sections ``dataset_reader``, ``model`` and ``trainer``.

The ``trainer`` section is ``trainer_schema``'s, grouped by the part that owns each key. Model
classes add their own keys through ``BaseModel.config_schema``; hooks declare theirs through
``HookBase.config_schema``. Both are checked once the task package is imported.
"""
from __future__ import annotations

from wenxin.common.constants import DEFAULT_MAX_LINE_BYTES
from wenxin.config.schema import Key, Schema, path_key
from wenxin.config.trainer_schema import TRAINER

TOKENIZER: Schema = {
    "type": Key(str, "CharTokenizer", doc="registered tokenizer: CharTokenizer, WhitespaceTokenizer, "
                                          "FullTokenizer (WordPiece over a pretrained model's vocab.txt)"),
    "split_char": Key(str, " ", doc="separator used by WhitespaceTokenizer (and skipped by CharTokenizer with "
                                    "split_latin_digits)"),
    "unk_token": Key(str, "[UNK]", doc="token for out-of-vocabulary pieces"),
    "lowercase": Key((bool, type(None)), None, doc="lower-case text before tokenizing (null: the tokenizer's "
                                                   "default, true but for ErnieMTokenizer)"),
    "spm_model_file": path_key("", doc="ErnieMTokenizer: ERNIE-M's SentencePiece model (sentencepiece.bpe.model)"),
    "piece_rules": Key(str, "paddlenlp", choices=["paddlenlp", "erniekit"],
                       doc="ErnieMTokenizer: how SentencePiece's pieces become tokens: paddlenlp (PaddleNLP's "
                           "ErnieMTokenizer: CJK characters, punctuation and digit runs apart) or erniekit "
                           "(ERNIE-kit's FullTokenizerErnieM: the pieces as they are; what an ERNIE-kit file gets)"),
    "split_latin_digits": Key(bool, False, doc="CharTokenizer: every character is a token, latin letters "
                                               "and digits too (character taggers); false: runs of them "
                                               "stay whole"),
    "ngram": Key(int, 1, minimum=1, maximum=5,
                 doc="also emit joined n-grams of up to N consecutive tokens (for bag-of-words models)"),
    "strip_accents": Key((bool, type(None)), None, doc="FullTokenizer: drop accents (null: when lower-casing)"),
    "split_symbols": Key(bool, True, doc="FullTokenizer: symbols such as emoji are tokens of their own "
                                         "(PaddleNLP 2.8; false: inside words, as ERNIE-kit and BERT)"),
    "max_input_chars_per_word": Key(int, 100, minimum=1, doc="FullTokenizer: longer words become unk_token"),
    "params": Key((dict, type(None)), None, open_keys=True, doc="extra tokenizer arguments"),
}

FIELD: Schema = {
    "name": Key(str, non_empty=True, doc="field name; tensors are named after it"),
    "column": Key(str, "", doc="format jsonl: the key this field reads; csv with has_header: the header of its "
                               "column; hf_dataset: its column (empty: the field's name)"),
    "data_type": Key(str, "string", choices=["string", "int", "float"]),
    "reader": Key(dict, children={"type": Key(str, doc="TextFieldReader, LabelFieldReader, "
                                                            "SequenceLabelFieldReader, ScalarFieldReader, "
                                                            "FloatVectorFieldReader")}),
    "tokenizer": Key((dict, type(None)), None, children=TOKENIZER),
    "need_convert": Key(bool, True, doc="convert tokens to ids through the vocab"),
    "vocab_path": path_key("", doc="vocab / label-map file, one token a line (or ERNIE-kit's token<TAB>id); "
                                   "empty: built from the training data"),
    "vocab_from": Key(str, "", doc="use the vocab of this train_reader field (built from both "
                                   "columns), e.g. text_b from text_a for a shared encoder"),
    "max_seq_len": Key(int, 128, minimum=1),
    "dim": Key(int, 0, minimum=0, doc="FloatVectorFieldReader: the vector length"),
    "label_names": Key(dict, {}, open_keys=True, items=Key(str, non_empty=True),
                       doc="LabelFieldReader: the name each label's predictions are shown with, e.g. "
                           "{\"0\": \"negative\", \"1\": \"positive\"} (the data keep their labels)"),
    "num_labels": Key(int, 0, minimum=0, doc="MultiLabelFieldReader: labels are the ids 0..num_labels-1 "
                                             "(0: the label map's or the training data's labels)"),
    "pad_to_max_seq_len": Key(bool, False, doc="pad every batch to max_seq_len (a fixed length in static graphs)"),
    "special_tokens": Key(list, [], items=Key(str), doc="extra tokens put in a built vocab after "
                                                         "[PAD] and [UNK], e.g. [\"[MASK]\"]"),
    "is_label": Key((bool, type(None)), None, doc="a gold answer, not an input of the exported model "
                                                  "(null: true for Label/SequenceLabelFieldReader)"),
    "align_with": Key(str, "", doc="SequenceLabelFieldReader: the text field whose tokens the tags "
                                   "label; every line must have one tag per token"),
    "inference_text": Key(str, "raw", choices=["raw", "tokenized"],
                          doc="TextFieldReader of a tagger: what inference input looks like: raw "
                              "sentences (the export checks that the tokenizer forms the training "
                              "tokens from them) or text written like the training column"),
    "pair_with": Key(str, "", doc="ErnieTextFieldReader: the field whose column is the second text of a "
                                  "pair, encoded with this one as [CLS] a [SEP] b [SEP]"),
    "source_budget": Key(int, 0, minimum=0, doc="ErnieGenSourceFieldReader (the first source): the most tokens "
                                                "of the whole source, [CLS] and [SEP]s included (0: no cut "
                                                "beyond each source's own)"),
    "model_dir": path_key("", doc="ChatFieldReader: the decoder's folder, whose tokenizer (tokenizer.model, "
                                  "tokenizer_config.json) writes the conversations"),
    "packing": Key(bool, False, doc="ChatFieldReader: put a batch's conversations one after another into rows of "
                                    "at most max_seq_len tokens (each attends only to itself)"),
    "reads_prompts": Key(bool, False, doc="ChatFieldReader: lines are prompts to answer (the last question has no "
                                          "answer); an export's field reads them, training data must not"),
    "chat_encoding": Key(str, "template", choices=["template", "erniekit"],
                         doc="ChatFieldReader: how a turn becomes ids: template (the prompt part of each turn "
                             "whole, then the answer: the ids of the chat template's text, as PaddleFormers "
                             "encodes) or erniekit (ERNIEKit's SFT reader: 'User: ', the question, "
                             "'\\nAssistant: ' and the answer each apart, stripped); an export serves prompts "
                             "encoded the same way"),
    "truncation_type": Key(int, 0, choices=[0, 1, 2], doc="0 keep head, 1 keep tail, 2 keep both ends"),
    "padding_id": Key(int, 0, minimum=0),
    "min_freq": Key(int, 1, minimum=1, doc="vocab building: drop rarer tokens"),
    "max_vocab_size": Key(int, 0, minimum=0, doc="vocab building: keep the most frequent N (0: all)"),
    "embedding": Key((dict, type(None)), None, open_keys=True, doc="accepted for Wenxin compatibility"),
}

READER_CONFIG: Schema = {
    "data_path": path_key(non_empty=True, doc="a data file or a folder of them (see format; hf_dataset: also a "
                                              "dataset name in the datasets cache)"),
    "format": Key(str, "tsv", doc="a registered data format: tsv (one column per field, in order), jsonl (a JSON "
                                  "object a line, fields by key), csv (quoted records; with has_header fields "
                                  "by header name), hf_dataset (a Hugging Face datasets split, fields by column)"),
    "split": Key(str, "", doc="format hf_dataset: the split to read (empty: the dataset's only split)"),
    "download": Key(bool, False, doc="format hf_dataset: let datasets download a dataset its cache lacks "
                                     "(off: offline, the cache only)"),
    "shuffle": Key(bool, False),
    "batch_size": Key(int, 32, minimum=1),
    "sampling_rate": Key(float, 1.0, minimum=0.0, maximum=1.0),
    "need_data_distribute": Key(bool, True, doc="shard across ranks in distributed training"),
    "need_generate_examples": Key(bool, False, doc="keep raw examples beside the tensors"),
    "drop_last": Key(bool, False),
    "bucket_batches": Key(int, 0, minimum=0, doc="training: sort examples by length within pools of this "
                                                 "many batches, then shuffle the batches, so batches hold "
                                                 "similar lengths and less padding (0: off)"),
    "has_header": Key(bool, False, doc="skip the first line of each file (csv: the header naming the columns)"),
    "separator": Key(str, "", doc="the column delimiter (empty: the format's own, a tab for tsv, a comma for csv)"),
    "skip_bad_lines": Key(bool, False, doc="skip and count malformed lines instead of failing"),
    "num_workers": Key(int, 0, minimum=0, doc="paddle.io.DataLoader worker processes"),
    "cache": Key((bool, str), "auto", choices=[True, False, "auto"],
                 doc="keep the converted examples in the token cache (memory-mapped arrays) for later "
                     "runs, resumes and readers of the same data; auto: for data files of 8 MB or more"),
    "cache_dir": path_key("", doc="the token cache's folder (empty: $WENXIN_CACHE_DIR, else ~/.cache/wenxin)"),
    "streaming": Key(bool, False, doc="train_reader: read batches from the files while training, never holding "
                                      "the corpus in memory (files in a seeded order, rows through shuffle_buffer)"),
    "shuffle_buffer": Key(int, 10000, minimum=1, doc="streaming with shuffle: rows mixed in a seeded buffer of "
                                                     "this many"),
    "cache_processes": Key(int, 0, minimum=0, doc="processes converting data into the token cache "
                                                   "(0: the CPU cores this process may use)"),
    "max_line_bytes": Key(int, DEFAULT_MAX_LINE_BYTES, minimum=16, doc="a longer line is malformed (an error naming "
                                                          "file:line, or skipped with skip_bad_lines)"),
}

READER: Schema = {
    "name": Key(str, ""),
    "type": Key(str, "BasicDataSetReader"),
    "fields": Key(list, items=Key(dict, children=FIELD)),
    "config": Key(dict, children=READER_CONFIG),
}

DATASET_READER: Schema = {
    name: Key((dict, type(None)), None, children=READER)
    for name in ("train_reader", "dev_reader", "test_reader", "predict_reader")
}

OPTIMIZATION: Schema = {
    "learning_rate": Key(float, 1e-3, minimum=0.0),
    "optimizer": Key(str, "adamw", doc="a registered optimizer: adamw, adam, sgd, momentum"),
    "lr_scheduler": Key(str, "linear_warmup_decay",
                        doc="a registered schedule after warmup: constant, linear_warmup_decay, "
                            "cosine_warmup_decay, exponential (learning_rate to end_learning_rate by a constant "
                            "factor a step)"),
    "warmup_steps": Key(int, 0, minimum=0),
    "warmup_proportion": Key(float, 0.0, minimum=0.0, maximum=1.0),
    "end_learning_rate": Key(float, 0.0, minimum=0.0, doc="learning rate reached at the last step"),
    "weight_decay": Key(float, 0.0, minimum=0.0, doc="not applied to biases and norm scales"),
    "max_grad_norm": Key(float, 0.0, minimum=0.0, doc="clip gradients by global norm (0: off)"),
    "beta1": Key(float, 0.9, minimum=0.0, maximum=1.0),
    "beta2": Key(float, 0.999, minimum=0.0, maximum=1.0),
    "epsilon": Key(float, 1e-8, minimum=0.0),
    "momentum": Key(float, 0.9, minimum=0.0),
}

MODEL_BASE: Schema = {
    "type": Key(str, non_empty=True, doc="registered model class"),
    "is_dygraph": Key(int, 1, choices=[0, 1], doc="1 eager (dynamic), 0 static graph"),
    "optimization": Key(dict, {}, children=OPTIMIZATION),
}

STUDIO: Schema = {
    "description": Key(str, "", doc="one line wenxin studio lists the task file with"),
    "form": Key(list, [], items=Key(str, non_empty=True),
                doc="the key paths wenxin studio's launch form shows for this task file (default: learning rate, "
                    "optimizer, schedule, epochs, batch size, graph mode, evaluation, save and logging steps, hooks)"),
}

ROOT: Schema = {
    "task": Key(str, non_empty=True, doc="task package: a name under tasks/ or a path to a task folder"),
    "dataset_reader": Key(dict, children=DATASET_READER),
    "model": Key(dict, open_keys=True),  # checked against MODEL_BASE + the model's own keys
    "trainer": Key(dict, {}, children=TRAINER),
    "studio": Key(dict, {}, children=STUDIO, doc="settings of wenxin studio's launch form (training ignores them)"),
}
