"""ERNIE-Gen's data without training: the source and target field readers against a restatement
of ERNIE-kit's ``InfillingGenReader`` record rule on random texts, the translation of its reader
(and what it cannot honour, reported together), the result format, and detokenization."""
from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest

from wenxin.common.errors import ConfigError
from wenxin.config.schema import validate
from wenxin.config.task_schema import FIELD
from wenxin.data.field_reader import convert_row, link_fields
from wenxin.data.gen_fields import ErnieGenSourceFieldReader, ErnieGenTargetFieldReader
from wenxin.data.wordpiece import detokenize
from wenxin.translation import pretrained
from wenxin.translation.erniekit import translate
from wenxin.translation.erniekit_infer import translate_infer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(REPO, "tasks", "text_generation", "examples")
CHARS = "甲乙丙丁戊己庚辛"


@pytest.fixture
def vocab(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]", *CHARS]) + "\n", encoding="utf-8")
    return str(path)


def field(name, kind, vocab, **extra):
    return validate({"name": name, "reader": {"type": kind}, "vocab_path": vocab, **extra}, FIELD, f"fields.{name}")


def erniekit_record(sources, target, ids, max_src_len, max_tgt_len):
    """ERNIE-kit's convert_example_to_record (not decoding): ``[CLS]``, each source cut to
    max_src_len - 2 tokens and ended by [SEP] with its own type; then the target ``[CLS] t [SEP]``
    cut to max_tgt_len - 1 tokens after its [CLS]."""
    tokens, types = [1], [0]
    for kind, text in enumerate(sources):
        piece = [ids[c] for c in text][:max_src_len - 2] + [2]
        tokens += piece
        types += [kind] * len(piece)
    return tokens, types, [1] + ([ids[c] for c in target] + [2])[:max_tgt_len - 1]


def test_fields_build_erniekit_records(vocab):
    """300 random examples of 1 to 3 sources against ERNIE-kit's rule, with long texts cut."""
    ids = {c: 5 + i for i, c in enumerate(CHARS)}
    rng = random.Random(0)
    for _ in range(300):
        count, max_src_len, max_tgt_len = rng.randint(1, 3), rng.randint(3, 12), rng.randint(3, 10)
        fields = [ErnieGenSourceFieldReader(field(f"s{k}", "ErnieGenSourceFieldReader", vocab, max_seq_len=max_src_len),
                                            f"s{k}") for k in range(count)]
        fields.append(ErnieGenTargetFieldReader(field("tgt", "ErnieGenTargetFieldReader", vocab, max_seq_len=max_tgt_len),
                                                "tgt"))
        fields = link_fields(fields)
        texts = ["".join(rng.choice(CHARS) for _ in range(rng.randint(0, 14))) for _ in range(count + 1)]
        values = convert_row(fields, texts)
        tokens, types, target = erniekit_record(texts[:-1], texts[-1], ids, max_src_len, max_tgt_len)
        assert values[0][0].tolist() == tokens and values[0][1].tolist() == types
        assert all(v is None for v in values[1:count])  # the first source holds them all
        assert values[-1].tolist() == target
        batch = {}
        for f, column in zip(fields, zip(values)):
            batch.update(f.collate(list(column)))
        restarting = [0] + [i for text in texts[:-1] for i in range(1, min(len(text), max_src_len - 2) + 2)]
        assert values[0][2].tolist() == restarting  # ERNIE-kit's positions without continuous_position
        assert sorted(batch) == ["s0", "s0_pos_ids", "s0_sent_ids", "s0_seq_lens", "tgt", "tgt_seq_lens"]
        assert [s.name for f in fields for s in f.tensor_specs()] == ["s0", "s0_sent_ids", "s0_pos_ids", "s0_seq_lens",
                                                                      "tgt", "tgt_seq_lens"]


def test_the_whole_source_keeps_to_its_budget(vocab):
    first = ErnieGenSourceFieldReader(field("a", "ErnieGenSourceFieldReader", vocab, max_seq_len=10, source_budget=8), "a")
    second = ErnieGenSourceFieldReader(field("b", "ErnieGenSourceFieldReader", vocab, max_seq_len=10), "b")
    fields = link_fields([first, second])
    ids, types, positions = convert_row(fields, ["甲乙丙", "丁戊己庚辛"])[0]
    assert ids.tolist() == [1, 5, 6, 7, 2, 8, 9, 2] and types.tolist() == [0, 0, 0, 0, 0, 1, 1, 1]  # ends on [SEP]
    assert positions.tolist() == [0, 1, 2, 3, 4, 1, 2, 3]
    assert first.info()["max_seq_len"] == 8 and first.info()["sources"] == ["a", "b"]
    assert second.info()["source_of"] == "a"


def test_field_errors_name_their_key(vocab, tmp_path):
    with pytest.raises(ConfigError, match=r"fields.a.source_budget: 2 leaves no room"):
        ErnieGenSourceFieldReader(field("a", "ErnieGenSourceFieldReader", vocab, source_budget=2), "fields.a")
    with pytest.raises(ConfigError, match=r"fields.a.pair_with: a generation source is one text"):
        ErnieGenSourceFieldReader(field("a", "ErnieGenSourceFieldReader", vocab, pair_with="b"), "fields.a")
    no_mask = tmp_path / "no_mask.txt"
    no_mask.write_text("[PAD]\n[CLS]\n[SEP]\n[UNK]\n甲\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"fields.t.vocab_path: \[MASK\] not in .*ERNIE-Gen's query stream"):
        ErnieGenTargetFieldReader(field("t", "ErnieGenTargetFieldReader", str(no_mask)), "fields.t")


def erniekit_task(tmp_path, extra=None, header="answer\tparagraph\ttgt"):
    """ERNIE-kit's generation task file, its data at ``tmp_path/data`` with ``header``."""
    with open(os.path.join(EXAMPLES, "cls_ernie_gen_infilling_ch.json"), encoding="utf-8") as f:
        raw = json.load(f)
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    for name in ("train_reader", "dev_reader"):
        path = data / f"{name}.tsv"
        path.write_text(header + "\n", encoding="utf-8")
        config = raw["dataset_reader"][name]["config"]
        config["data_path"] = str(path)
        config["extra_params"].update(extra or {})
    return raw


def test_erniekit_generation_file_translates(tmp_path):
    config, notes = translate(erniekit_task(tmp_path))
    assert config["task"].endswith("text_generation") and config["trainer"]["type"] == "CustomTrainer"
    assert config["trainer"]["metric"] == "bleu4" and config["trainer"]["epoch"] == 20
    model = config["model"]
    assert (model["tgt_type_id"], model["max_dec_len"], model["mask_prob"]) == (7, 32, 0.5)
    assert (model["source_field"], model["target_field"], model["decoding"]) == ("answer", "tgt", "beam")
    assert model["encoder_config"].endswith("ernie_gen_ch_config.json") and model["beam_size"] == 4
    fields = config["dataset_reader"]["train_reader"]["fields"]
    assert [(f["name"], f["reader"]["type"], f["max_seq_len"]) for f in fields] == [
        ("answer", "ErnieGenSourceFieldReader", 320), ("paragraph", "ErnieGenSourceFieldReader", 320),
        ("tgt", "ErnieGenTargetFieldReader", 64)]
    assert fields[0]["source_budget"] == 512 - 64
    assert config["dataset_reader"]["train_reader"]["config"]["has_header"] is True
    assert any("CustomGenerationTrainer -> CustomTrainer" in n for n in notes)
    assert model["continuous_position"] is True
    config, _ = translate(erniekit_task(tmp_path, {"continuous_position": False}))
    assert config["model"]["continuous_position"] is False  # ERNIE-kit's positions restarting per text
    infer = json.load(open(os.path.join(EXAMPLES, "cls_ernie_gen_infilling_ch_infer.json"), encoding="utf-8"))
    native, _ = translate_infer(infer)
    assert native["predict_reader"]["config"]["has_header"] is True and native["output_format"] == "erniekit"


def test_what_erniekit_generation_cannot_honour_is_reported_together(tmp_path):
    raw = erniekit_task(tmp_path, {"two_stream": False, "in_tokens": True, "task_type": "dialog", "spm": 1},
                        header="knowledge\tsrc\ttgt")
    with pytest.raises(ConfigError) as info:
        translate(raw)
    text = str(info.value)
    for expected in ("extra_params.spm: not an InfillingGenReader setting", "extra_params.two_stream: false",
                     "extra_params.in_tokens: true", 'extra_params.task_type: "dialog"', "a 'knowledge' column"):
        assert expected in text
    raw = erniekit_task(tmp_path)
    raw["dataset_reader"]["dev_reader"]["config"]["data_path"] = str(tmp_path / "missing.tsv")
    with pytest.raises(ConfigError, match=r"dev_reader.config.data_path: cannot read the header line"):
        translate(raw)


def test_erniekit_generation_head_names_load_into_the_model():
    renamed, layout = pretrained.to_wenxin_names({"word_embedding": 1, "mask_lm_trans_fc.w_0": 2,
                                                  "mask_lm_trans_layer_norm_scale": 3, "mask_lm_out_fc.b_0": 4})
    assert layout == "erniekit"
    assert renamed == {"ernie.embeddings.word_embeddings.weight": 1, "lm_head.transform.weight": 2,
                       "lm_head.layer_norm.weight": 3, "lm_head.bias": 4}


def test_detokenize_and_the_generation_result_format(vocab):
    assert detokenize(["爬", "行", "x", "##pe", "mat", ",", "好", "1", "##0"]) == "爬行xpe mat,好10"
    from wenxin.inference.formatters import GenerationFormat
    source = ErnieGenSourceFieldReader(field("a", "ErnieGenSourceFieldReader", vocab), "a")
    fmt = GenerationFormat([], [source])
    results = fmt.results({"generated": np.array([[5, 6, -1], [9999, 7, 8]])}, {}, [["甲"], ["乙"]])
    assert results == [{"text": "甲乙", "tokens": ["甲", "乙"]}, {"text": "[UNK]丙丁", "tokens": ["[UNK]", "丙", "丁"]}]
    assert fmt.line(results[0]) == "甲乙" and fmt.erniekit_line(results[1], ["乙"]) == "[UNK]\t丙\t丁"


def test_an_unknown_character_is_one_token_that_nothing_generated_matches():
    """Scores over token ids with [UNK] equal the scores against the raw text, whose unknown
    character the model can never write (a generated [UNK] scores as a character that differs)."""
    import importlib.util  # the module alone: the task package's __init__ would load Paddle
    spec = importlib.util.spec_from_file_location("scoring", os.path.join(REPO, "tasks", "text_generation",
                                                                          "scoring.py"))
    scoring = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scoring)
    GENERATED_UNKNOWN, REFERENCE_UNKNOWN, metric_tokens = (scoring.GENERATED_UNKNOWN, scoring.REFERENCE_UNKNOWN,
                                                           scoring.metric_tokens)
    from wenxin.data.wordpiece import detokenize
    from wenxin.metrics.generation import basic_tokens, generation_metrics
    reference = metric_tokens(["鸟", "穷", "则", "[UNK]"], REFERENCE_UNKNOWN)  # 鸟穷则啄; 啄 is unknown
    assert reference == ["鸟", "穷", "则", REFERENCE_UNKNOWN]
    for words in (["鸟", "穷", "则", "[UNK]"], ["鸟", "穷", "则", "浊"]):
        scores = generation_metrics([reference], [metric_tokens(words, GENERATED_UNKNOWN)])
        as_raw_text = generation_metrics([basic_tokens("鸟穷则啄")],
                                         [basic_tokens(detokenize(words).replace("[UNK]", "?"))])
        assert scores == as_raw_text
        assert scores["rouge_l_p"] == scores["rouge_l_r"] == 0.75
    assert metric_tokens(["play", "##ing", "[UNK]", "ok"], GENERATED_UNKNOWN) == ["playing", GENERATED_UNKNOWN, "ok"]
