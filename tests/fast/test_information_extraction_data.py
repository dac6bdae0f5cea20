"""Many-to-many extraction without Paddle: words, labels and gold triples against ERNIE-kit's
labelling rule, the label map's rules, decoding and its pairing, triple F1, the ``spo`` result
format and ERNIE-kit's prediction file, JSON-valued columns, and the translation of ERNIE-kit's
IEReader task and infer files."""
from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest

from wenxin.common.constants import InstanceName
from wenxin.common.errors import ConfigError, DataError
from wenxin.config.schema import validate
from wenxin.config.task_schema import FIELD
from wenxin.data.field_reader import UnknownLabelError
from wenxin.data.ie_fields import ErnieIeTextFieldReader, IeSpoLabelFieldReader
from wenxin.inference.spo_format import SpoFormat
from wenxin.metrics.spo import decode_triples, gold_triples, tidy_marks, triple_f1
from wenxin.translation.erniekit import translate
from wenxin.translation.erniekit_infer import translate_infer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(REPO, "tasks", "information_extraction_many_to_many", "examples")
LABELS = {"O": 0, "I": 1, "B-出生地@S": 2, "B-出生地@O": 3, "B-国籍@S": 4, "B-国籍@O": 5}
CHARS = "甲乙丙丁戊，abc12 "


@pytest.fixture
def fields(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[CLS]", "[SEP]", "[UNK]", *"甲乙丙丁戊，", "a", "b", "c", "1", "2",
                                "##a", "##b", "##c", "##1", "##2"]) + "\n", encoding="utf-8")
    label_map = tmp_path / "labels.json"
    label_map.write_text(json.dumps(LABELS, ensure_ascii=False), encoding="utf-8")
    return make_fields(str(vocab), str(label_map))


def make_fields(vocab, label_map, max_seq_len=512):
    text = ErnieIeTextFieldReader(validate({"name": "text_a", "reader": {"type": "ErnieIeTextFieldReader"},
                                            "vocab_path": vocab, "max_seq_len": max_seq_len}, FIELD, "t"), "t")
    label = IeSpoLabelFieldReader(validate({"name": "label", "reader": {"type": "IeSpoLabelFieldReader"},
                                            "vocab_path": label_map}, FIELD, "l"), "l")
    label.link([text])
    return text, label


def encode(text_field, label_field, record):
    text_value = text_field.convert(record["text"])
    value = label_field.combine(label_field.convert(json.dumps(record["spo_list"], ensure_ascii=False)),
                                {"text_a": text_value})
    return text_value, label_field.collate([value])


def erniekit_marks(text, spo_list, tokenize, max_pieces):
    """ERNIE-kit's IEReader labelling, restated: per piece of each word (a run of ASCII letters and
    digits, or one other character), B where the piece's word starts an entity and it is the
    word's first piece, I where a later piece's word starts it or the word lies inside it."""
    words, word = [], ""
    for char in text:
        if char.isascii() and char.isalnum():
            word += char
            continue
        if word:
            words.append(word)
            word = ""
        words.append(char)
    if word:
        words.append(word)
    rows, position = [], 0
    for word in words:
        begin, last = position, position + len(word) - 1
        position += len(word)
        for i, _ in enumerate(tokenize(word)):
            marks = set()
            for spo in spo_list:
                for role, offset in (("subject", 0), ("object", 1)):
                    start, end = spo[role]
                    if begin == start:
                        marks.add(LABELS[f"B-{spo['predicate']}@S"] + offset if i == 0 else 1)
                    elif start < begin and last < end:
                        marks.add(1)
            rows.append(marks or {0})
            if len(rows) >= max_pieces:
                return rows
    return rows


def random_record(rng):
    text = "".join(rng.choice(CHARS) for _ in range(rng.randint(1, 30)))
    spo_list = []
    for _ in range(rng.randint(0, 3)):
        spans = []
        for _ in range(2):
            start = rng.randrange(len(text))
            spans.append([start, rng.randint(start + 1, len(text))])
        spo_list.append({"predicate": rng.choice(["出生地", "国籍"]), "subject": spans[0], "object": spans[1]})
    return {"text": text, "spo_list": spo_list}


def test_words_are_cut_as_erniekit_cuts_them(fields):
    text_field, _ = fields
    assert text_field.words("Kurtis Blow，1959年") == ["Kurtis", " ", "Blow", "，", "1959", "年"]
    ids, types, pieces, starts, ends = text_field.convert("甲ab 12乙")
    assert pieces == [1, 2, 0, 2, 1]  # the space has no piece
    assert starts.tolist() == [0, 1, 1, 4, 4, 6] and ends.tolist() == [1, 3, 3, 6, 6, 7]
    assert len(ids) == 8 and types.tolist() == [0] * 8


@pytest.mark.parametrize("max_seq_len", [512, 9])
def test_labels_follow_erniekits_rule_on_random_records(fields, tmp_path, max_seq_len):
    """Random texts and entity spans (starting inside words, ending inside words, overlapping,
    cut off by max_seq_len): the [B, T, N] marks are ERNIE-kit's, with O at [CLS], [SEP] and
    pieces without a mark."""
    text_field, label_field = make_fields(fields[0].config["vocab_path"], fields[1].config["vocab_path"], max_seq_len)
    rng = random.Random(3)
    for _ in range(300):
        record = random_record(rng)
        _, batch = encode(text_field, label_field, record)
        marks = batch["label"][0]
        got = [set(np.flatnonzero(row).tolist()) for row in marks]
        pieces = erniekit_marks(record["text"], record["spo_list"], text_field.tokenizer.tokenize, max_seq_len - 2)
        assert got == [{0}] + pieces + [{0}], record


def test_gold_triples_decode_back_from_the_marks(fields):
    """Where the entities start at words and ERNIE-kit's pairing can tell the pairs apart (one
    subject and several objects, several subjects and one object), decoding the gold marks gives
    the gold triples, in piece positions and in character offsets."""
    text_field, label_field = fields
    records = [
        {"text": "甲乙，丙丁1", "spo_list": [{"predicate": "出生地", "subject": [0, 2], "object": [3, 5]},
                                           {"predicate": "国籍", "subject": [0, 2], "object": [5, 6]}]},
        {"text": "ab，c是戊12", "spo_list": [{"predicate": "国籍", "subject": [0, 2], "object": [6, 8]},
                                           {"predicate": "国籍", "subject": [3, 4], "object": [6, 8]}]},
        {"text": "甲乙丙", "spo_list": []},
    ]
    for record in records:
        text_value, batch = encode(text_field, label_field, record)
        length = len(text_value[0])
        marks = tidy_marks(batch["label"][0], batch["label"][0])[1:length - 1]
        assert set(decode_triples(marks, range(len(marks)))) == gold_triples(batch["label_triples"][0])
        starts, ends = text_value[3], text_value[4]
        spo = {(LABELS[f"B-{s['predicate']}@S"], *s["subject"], *s["object"]) for s in record["spo_list"]}
        assert {(label, int(starts[a]), int(ends[b]), int(starts[c]), int(ends[d]))
                for label, a, b, c, d in decode_triples(marks, starts.tolist())} == spo


def test_pairing_tidying_and_triple_f1():
    n = len(LABELS)

    def marks(*rows):
        array = np.zeros((len(rows), n), dtype=np.int64)
        for i, row in enumerate(rows):
            array[i, list(row)] = 1
        return array

    # two subjects and two objects of one predicate: each subject takes the object starting nearest it
    two_by_two = marks({2}, {0}, {3}, {0}, {0}, {0}, {2}, {1}, {3})
    assert decode_triples(two_by_two, range(9)) == [(2, 0, 0, 2, 2), (2, 6, 7, 8, 8)]
    assert decode_triples(two_by_two, [0, 1, 2, 3, 4, 5, 20, 21, 40]) == [(2, 0, 0, 2, 2), (2, 6, 7, 2, 2)]
    # a predicate whose object label never occurs gives no triple
    assert decode_triples(marks({2}, {0}, {5}), range(3)) == []
    probs = np.full((5, n), 0.1)
    probs[2, 4] = 0.4  # an unmarked token before an I takes its most probable entity label
    tidy = tidy_marks(marks({0}, {0, 2}, set(), {1}, {0}), probs)
    assert tidy[1].tolist() == marks({0})[0].tolist()  # O and B without a following I: B goes
    assert np.flatnonzero(tidy[2]).tolist() == [4]
    tidy = tidy_marks(marks({0}, {0, 2}, {1}, {0}), probs[:4])
    assert np.flatnonzero(tidy[1]).tolist() == [2]  # O and B before an I: O goes
    gold = [{(2, 0, 0, 2, 2), (2, -1, -1, 4, 4)}, set()]
    predicted = [{(2, 0, 0, 2, 2)}, {(4, 1, 1, 3, 3)}]
    assert triple_f1(gold, predicted) == {"precision": 0.5, "recall": 0.5, "f1": 0.5}
    assert triple_f1([set()], [set()]) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}


def test_entities_that_cannot_be_labelled_count_as_missed(fields):
    """A subject starting inside a word, or not found in the text (ERNIE-kit's DuIE conversion
    writes start -1), labels nothing; its triple is gold with span -1."""
    text_field, label_field = fields
    record = {"text": "abc甲乙", "spo_list": [{"predicate": "国籍", "subject": [1, 3], "object": [3, 5]},
                                               {"predicate": "出生地", "subject": [-1, 4], "object": [3, 4]}]}
    _, batch = encode(text_field, label_field, record)
    assert gold_triples(batch["label_triples"][0]) == {(4, -1, -1, 3, 4), (2, -1, -1, 3, 3)}


@pytest.mark.parametrize("spo, problem", [
    ('[{"predicate": "国籍", "subject": [0, 1]}]', "must be an object with predicate, subject and object"),
    ('{"predicate": "国籍"}', "must be a list"),
    ('[{"predicate": "国籍", "subject": [2, 1], "object": [0, 1]}]', "spo_list[0].subject must be [start, end]"),
    ('[{"predicate": "国籍", "subject": [0, 1.5], "object": [0, 1]}]', "spo_list[0].subject must be [start, end]"),
    ('[{"predicate": "国籍", "subject": [0, 1], "object": [-2, 1]}]', "spo_list[0].object must be [start, end]"),
    ("[{", "spo_list is not JSON"),
])
def test_malformed_spo_lists_are_one_line_problems(fields, spo, problem):
    with pytest.raises(ValueError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        fields[1].convert(spo)


def test_an_unknown_predicate_names_the_known_ones(fields):
    with pytest.raises(UnknownLabelError, match=r"'毕业院校' is not in the label map \(predicates: 出生地, 国籍\)"):
        fields[1].convert('[{"predicate": "毕业院校", "subject": [0, 1], "object": [1, 2]}]')


@pytest.mark.parametrize("label_map, problem", [
    ({"I": 0, "O": 1, "B-a@S": 2, "B-a@O": 3}, "ids 0 and 1 must be 'O' and 'I'"),
    ({"O": 0, "I": 1, "B-a@O": 2, "B-a@S": 3}, "id 2 must be a subject label"),
    ({"O": 0, "I": 1, "B-a@S": 2, "B-b@O": 3}, "id 3 must be 'B-a@O'"),
    ({"O": 0, "I": 1, "B-a@S": 2, "B-a@O": 4}, "ids must be the integers 0..3"),
    ({"O": 0, "I": 1}, "no predicate"),
])
def test_label_maps_are_checked_against_erniekits_rules(tmp_path, fields, label_map, problem):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(label_map), encoding="utf-8")
    with pytest.raises(DataError, match=problem):
        make_fields(fields[0].config["vocab_path"], str(path))


def test_a_label_map_of_another_size_than_num_labels_is_refused(fields):
    config = validate({"name": "label", "reader": {"type": "IeSpoLabelFieldReader"}, "num_labels": 12,
                       "vocab_path": fields[1].config["vocab_path"]}, FIELD, "dataset_reader.train_reader.fields[1]")
    with pytest.raises(ConfigError, match=r"fields\[1\].num_labels: 12, but the label map .* has 6 labels"):
        IeSpoLabelFieldReader(config, "dataset_reader.train_reader.fields[1]")


def test_jsonl_gives_a_json_valued_field_its_json_text(fields, tmp_path):
    from wenxin.data.lines import FilePart
    from wenxin.data.row_formats import JsonLinesFormat
    from wenxin.config.task_schema import READER_CONFIG
    data = tmp_path / "train.json"
    data.write_text('{"text": "甲乙", "spo_list": [{"predicate": "国籍", "subject": [0, 1], "object": [1, 2]}]}\n'
                    '{"text": "丙"}\n', encoding="utf-8")
    config = validate({"data_path": str(data), "format": "jsonl"}, READER_CONFIG, "r")
    text_field, label_field = fields
    label_field.config = {**label_field.config, "column": "spo_list"}
    text_field.config = {**text_field.config, "column": "text"}
    rows = list(JsonLinesFormat(config, [text_field, label_field], "r").rows(FilePart(str(data), 0, None, 1)))
    assert json.loads(rows[0][1][1]) == [{"predicate": "国籍", "subject": [0, 1], "object": [1, 2]}]
    assert rows[1][1] is None and "no key 'spo_list'" in rows[1][2]


def test_the_spo_format_reports_character_offsets_and_erniekits_file(fields):
    text_field, label_field = fields
    fmt = SpoFormat(list(LABELS), [text_field])
    text = "ab，c是戊12"
    _, batch = encode(text_field, label_field, {"text": text, "spo_list": [
        {"predicate": "国籍", "subject": [0, 2], "object": [6, 8]}]})
    marks = batch["label"].astype(np.int64)
    (result,) = fmt.results({InstanceName.PREDICTIONS: marks, InstanceName.PROBS: batch["label"]}, {}, [[text]])
    assert result == {"text": text, "spo_list": [{"predicate": "国籍", "subject": [0, 2], "object": [6, 8]}]}
    assert json.loads(fmt.line(result)) == result
    document = fmt.erniekit_document([result, result], [[text], [text]])
    assert json.loads(document) == [[result], [result]] and document.startswith("[\n [\n  {")


def test_erniekit_ie_files_translate_to_jsonl_readers_and_the_built_in_task():
    with open(os.path.join(EXAMPLES, "many_to_many_ie_relation_ernie_fc_ch.json"), encoding="utf-8") as f:
        config, notes = translate(json.load(f))
    assert config["task"].endswith("information_extraction_many_to_many")
    train = config["dataset_reader"]["train_reader"]
    assert train["type"] == "BasicDataSetReader" and train["config"]["format"] == "jsonl"
    assert "extra_params" not in train["config"] and train["config"]["need_data_distribute"] is True
    text, label = train["fields"]
    assert text["reader"]["type"] == "ErnieIeTextFieldReader" and text["column"] == "text"
    assert text["vocab_path"] == "../../models_hub/ernie_3.0_base_ch_dir/vocab.txt" and text["max_seq_len"] == 512
    assert text["tokenizer"] == {"type": "FullTokenizer", "lowercase": True, "split_symbols": False}
    assert label == {"name": "label", "column": "spo_list", "reader": {"type": "IeSpoLabelFieldReader"},
                     "vocab_path": "./dict/entity_relation_label_map.json", "num_labels": 12}
    assert config["model"]["encoder_config"].endswith("ernie_config.json") and config["trainer"]["metric"] == "f1"
    with open(os.path.join(EXAMPLES, "many_to_many_ie_relation_ernie_fc_ch_infer.json"), encoding="utf-8") as f:
        raw = json.load(f)
    raw["inference"]["label_map_config"] = os.path.join(os.path.dirname(__file__), "missing.json")
    with pytest.raises(ConfigError, match="inference.label_map_config: cannot read"):
        translate_infer(raw)


def test_ie_reader_settings_wenxin_cannot_honour_are_reported_together(tmp_path):
    with open(os.path.join(EXAMPLES, "many_to_many_ie_attribute_ernie_fc_ch.json"), encoding="utf-8") as f:
        raw = json.load(f)
    extra = raw["dataset_reader"]["train_reader"]["config"]["extra_params"]
    extra.update({"in_tokens": True, "tokenizer": "SentencePieceTokenizer", "bogus": 1})
    with pytest.raises(ConfigError) as error:
        translate(raw)
    for problem in ("extra_params.in_tokens: true (batches counted in tokens) is not supported",
                    "extra_params.tokenizer: 'SentencePieceTokenizer'", "extra_params.bogus: not an IEReader setting"):
        assert problem in str(error.value)


def test_a_label_field_without_its_text_field_is_one_error(fields):
    text_field, _ = fields
    config = validate({"name": "label", "reader": {"type": "IeSpoLabelFieldReader"}, "align_with": "text_b",
                       "vocab_path": fields[1].config["vocab_path"]}, FIELD, "r.fields[1]")
    with pytest.raises(ConfigError, match=r"r.fields\[1\].align_with: no ErnieIeTextFieldReader field 'text_b' in "
                                          r"this reader to label"):
        IeSpoLabelFieldReader(config, "r.fields[1]").link([text_field])
    with pytest.raises(ConfigError, match=r"align_with: no ErnieIeTextFieldReader field in this reader to label"):
        IeSpoLabelFieldReader({**config, "align_with": ""}, "r.fields[1]").link([])


def test_a_span_past_the_end_of_the_text_is_a_problem(fields):
    """Offsets past the text's end are a data error (they were labelled nothing, silently); a text
    ending in characters without pieces (a space) still counts them."""
    text_field, label_field = fields
    with pytest.raises(ValueError, match=r"spo_list\[0\]\.object ends at character 3, past the end of the text "
                                         r"\(2 characters\)"):
        encode(text_field, label_field, {"text": "甲乙", "spo_list": [
            {"predicate": "国籍", "subject": [0, 1], "object": [1, 3]}]})
    encode(text_field, label_field, {"text": "甲乙 ", "spo_list": [  # 3 characters: fits
        {"predicate": "国籍", "subject": [0, 1], "object": [1, 3]}]})
    short = make_fields(text_field.config["vocab_path"], label_field.config["vocab_path"], max_seq_len=4)
    encode(*short, {"text": "甲乙丙丁戊", "spo_list": [  # cut to 2 pieces: a span beyond them is missed, not wrong
        {"predicate": "国籍", "subject": [0, 1], "object": [4, 5]}]})


def test_jsonl_refuses_an_extraction_text_that_is_not_a_string(fields, tmp_path):
    from wenxin.config.task_schema import READER_CONFIG
    from wenxin.data.lines import FilePart
    from wenxin.data.row_formats import JsonLinesFormat
    data = tmp_path / "train.json"
    data.write_text('{"text": 5, "spo_list": []}\n{"text": ["甲", "乙"], "spo_list": []}\n', encoding="utf-8")
    config = validate({"data_path": str(data), "format": "jsonl"}, READER_CONFIG, "r")
    text_field, label_field = fields
    text_field.config = {**text_field.config, "column": "text"}
    label_field.config = {**label_field.config, "column": "spo_list"}
    rows = list(JsonLinesFormat(config, [text_field, label_field], "r").rows(FilePart(str(data), 0, None, 1)))
    assert [(columns, problem) for _, columns, problem in rows] == [
        (None, "key 'text': expected a string (a text that character offsets point into), got 5"),
        (None, 'key \'text\': expected a string (a text that character offsets point into), got ["甲", "乙"]')]
