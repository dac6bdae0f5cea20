"""Sequence labeling: chunk metrics, the CRF against brute force, training in both modes,
export and prediction, and malformed tag lines."""
from __future__ import annotations

import itertools
import os
import random
import subprocess
import sys

import numpy as np
import paddle
import pytest

from conftest import REPO, build, write_config, write_tsv
from wenxin.common.errors import ConfigError, DataError
from wenxin.inference.predictor import Predictor
from wenxin.metrics.chunking import chunk_f1, extract_chunks
from wenxin.models.crf import LinearChainCrf

WORDS = ["中国", "人民", "银行", "北京", "大学", "我", "的", "是", "经济", "发展", "社会主义", "在", "工作", "学生"]


def bmes(word):
    return ["S"] if len(word) == 1 else ["B"] + ["M"] * (len(word) - 2) + ["E"]


def make_segmentation(n, seed):
    """Sentences of lexicon words as (space-separated chars, space-separated BMES tags)."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(2, 7))]
        rows.append((" ".join(c for w in words for c in w), " ".join(t for w in words for t in bmes(w))))
    return rows


def tagging_config(data_dir, output, mode="dynamic", decoder="crf", max_len=40, encoder=None):
    pad = mode == "static"

    def fields():
        return [{"name": "text_a", "reader": {"type": "TextFieldReader"}, "max_seq_len": max_len,
                 "tokenizer": {"type": "WhitespaceTokenizer", "lowercase": False}, "pad_to_max_seq_len": pad},
                {"name": "label", "reader": {"type": "SequenceLabelFieldReader"}, "max_seq_len": max_len,
                 "pad_to_max_seq_len": pad, "align_with": "text_a"}]

    def reader(name, shuffle, batch_size):
        return {"fields": fields(), "config": {"data_path": os.path.join(data_dir, f"{name}.tsv"),
                                               "shuffle": shuffle, "batch_size": batch_size}}
    return {
        "task": "sequence_labeling",
        "dataset_reader": {"train_reader": reader("train", True, 16), "dev_reader": reader("dev", False, 32)},
        "model": {"type": "SequenceTagger", "is_dygraph": int(mode == "dynamic"), "decoder": decoder,
                  "encoder": encoder or {"type": "gru", "emb_dim": 24, "hidden_size": 24},
                  "optimization": {"learning_rate": 0.01}},
        "trainer": {"type": "CustomDynamicTrainer" if mode == "dynamic" else "CustomStaticTrainer",
                    "epoch": 4, "is_eval_dev": 1, "metric": "f1", "output_path": output,
                    "visualdl": False, "train_log_step": 100},
    }


@pytest.fixture
def seg_dir(tmp_path):
    folder = str(tmp_path / "seg")
    write_tsv(os.path.join(folder, "train.tsv"), make_segmentation(240, 1))
    write_tsv(os.path.join(folder, "dev.tsv"), make_segmentation(50, 2))
    return folder


# ---- chunks ------------------------------------------------------------------------------------
def test_extract_chunks_for_bio_bioes_and_bmes():
    assert extract_chunks(["B-PER", "I-PER", "O", "B-LOC"]) == [("PER", 0, 1), ("LOC", 3, 3)]
    assert extract_chunks(["S-PER", "B-ORG", "I-ORG", "E-ORG", "O"]) == [("PER", 0, 0), ("ORG", 1, 3)]
    assert extract_chunks(list("bmesbe")) == [("", 0, 2), ("", 3, 3), ("", 4, 5)]
    # conlleval: an I of another type (or without a B) starts a new chunk
    assert extract_chunks(["I-PER", "I-LOC", "I-LOC"]) == [("PER", 0, 0), ("LOC", 1, 2)]


def test_chunk_f1_counts_whole_chunks_only():
    gold = [["B", "E", "S"], ["B", "M", "E"]]
    predicted = [["B", "E", "S"], ["B", "E", "S"]]  # 2 of 3 predicted... first sentence right
    metrics = chunk_f1(gold, predicted)
    assert metrics["precision"] == pytest.approx(2 / 4)
    assert metrics["recall"] == pytest.approx(2 / 3)
    assert metrics["f1"] == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
    assert metrics["token_acc"] == pytest.approx(4 / 6)
    with pytest.raises(ValueError, match="differ in length"):
        chunk_f1([["B"]], [["B", "E"]])


# ---- the CRF -------------------------------------------------------------------------------------
def test_crf_likelihood_and_viterbi_match_brute_force():
    paddle.seed(3)
    num_tags, max_len = 3, 4
    crf = LinearChainCrf(num_tags)
    emissions = paddle.randn([2, max_len, num_tags])
    lengths = paddle.to_tensor([4, 2], dtype="int64")
    tags = paddle.to_tensor([[0, 2, 1, 1], [2, 0, 0, 0]], dtype="int64")
    e, trans = emissions.numpy(), crf.transitions.numpy()
    start, end = crf.start_scores.numpy(), crf.end_scores.numpy()

    def score(b, path):
        s = start[path[0]] + e[b, 0, path[0]] + end[path[-1]]
        return s + sum(trans[path[t - 1], path[t]] + e[b, t, path[t]] for t in range(1, len(path)))

    nll = crf.negative_log_likelihood(emissions, tags, lengths).numpy()
    for b, n in enumerate([4, 2]):
        paths = list(itertools.product(range(num_tags), repeat=n))
        scores = np.array([score(b, p) for p in paths])
        log_z = np.log(np.exp(scores - scores.max()).sum()) + scores.max()
        assert nll[b] == pytest.approx(log_z - score(b, tags.numpy()[b, :n]), abs=1e-4)
        best = list(paths[int(np.argmax(scores))])
        decoded = crf.decode(emissions, lengths).numpy()[b]
        assert list(decoded[:n]) == best and not decoded[n:].any()


# ---- training, export, prediction -----------------------------------------------------------------
@pytest.mark.parametrize("mode,decoder", [("dynamic", "crf"), ("dynamic", "softmax"), ("static", "crf")])
def test_tagger_trains_exports_and_predicts(tmp_path, seg_dir, mode, decoder):
    trainer = build(tagging_config(seg_dir, str(tmp_path / "out"), mode, decoder), tmp_path)
    metrics = trainer.do_train()
    assert metrics["dev_reader"]["f1"] > 0.9, metrics
    outputs, _ = trainer.collect_outputs("dev_reader", "evaluate")
    folder = trainer.export_inference(str(tmp_path / "export"))
    predictor = Predictor(folder)
    rows = [[line.split("\t")[0]] for line in open(os.path.join(seg_dir, "dev.tsv"), encoding="utf-8")]
    results = predictor.predict(rows, batch_size=16)
    tags = trainer.model.tags
    for row, result, predicted, length in zip(rows, results, outputs["predictions"], outputs["seq_lens"]):
        assert result["tags"] == [tags[t] for t in predicted[:length]]  # the export decodes alike
        assert "".join(c["text"] for c in result["chunks"]) == row[0].replace(" ", "")  # BMES covers all


def test_transformer_tagger_and_run_infer(tmp_path, seg_dir):
    encoder = {"type": "transformer", "transformer": {"hidden_size": 32, "num_heads": 2, "num_layers": 1,
                                                      "max_position": 64}}
    config = tagging_config(seg_dir, str(tmp_path / "out"), "dynamic", "crf", encoder=encoder)
    config["trainer"]["epoch"] = 6
    config["trainer"]["save_inference"] = True
    metrics = build(config, tmp_path).do_train()
    assert metrics["dev_reader"]["f1"] > 0.8, metrics
    infer = write_config(str(tmp_path / "infer.json"), {
        "model_dir": str(tmp_path / "out" / "checkpoints" / "best" / "inference"),
        "predict_reader": {"config": {"data_path": os.path.join(seg_dir, "dev.tsv")}},
        "output_file": str(tmp_path / "pred.txt")})
    subprocess.run([sys.executable, os.path.join(REPO, "run_infer.py"), "--param_path", infer], check=True,
                   capture_output=True)
    lines = open(tmp_path / "pred.txt", encoding="utf-8").read().splitlines()
    assert len(lines) == 50
    tags, words = lines[0].split("\t")
    first = open(os.path.join(seg_dir, "dev.tsv"), encoding="utf-8").readline().split("\t")[0].split()
    assert len(tags.split()) == len(first) and words.replace(" ", "") == "".join(first)


# ---- bad input -------------------------------------------------------------------------------------
def test_tag_count_mismatch_names_file_and_line(tmp_path, seg_dir):
    with open(os.path.join(seg_dir, "train.tsv"), "a", encoding="utf-8") as f:
        f.write("中 国 人\tB E\n")
    with pytest.raises(DataError, match=r"train.tsv:241: 2 tags in 'label' for 3 tokens in 'text_a'"):
        build(tagging_config(seg_dir, str(tmp_path / "out")), tmp_path)


def test_unknown_dev_tag_and_bad_align_with(tmp_path, seg_dir):
    with open(os.path.join(seg_dir, "dev.tsv"), "a", encoding="utf-8") as f:
        f.write("中 国\tB X\n")
    with pytest.raises(DataError, match=r"dev.tsv:51: tag 'X' is not in the tag map"):
        build(tagging_config(seg_dir, str(tmp_path / "out")), tmp_path)
    config = tagging_config(seg_dir, str(tmp_path / "out2"))
    config["dataset_reader"]["train_reader"]["fields"][1]["align_with"] = "txt"
    with pytest.raises(ConfigError, match=r"fields\[1\].align_with: no field named 'txt'"):
        build(config, tmp_path)


def test_static_crf_needs_fixed_length(tmp_path, seg_dir):
    config = tagging_config(seg_dir, str(tmp_path / "out"), "static")
    for reader in config["dataset_reader"].values():
        for field in reader["fields"]:
            field["pad_to_max_seq_len"] = False
    with pytest.raises(ConfigError, match="pad_to_max_seq_len"):
        build(config, tmp_path)
    config["model"]["decoder"] = "softmax"  # needs no fixed length
    assert build(config, tmp_path).do_train()["dev_reader"]["f1"] > 0.8


def test_tagger_rejects_encoders_without_token_states(tmp_path, seg_dir):
    config = tagging_config(seg_dir, str(tmp_path / "out"), encoder={"type": "bow"})
    with pytest.raises(ConfigError, match="model.encoder.type: a tagger needs per-token states"):
        build(config, tmp_path)
