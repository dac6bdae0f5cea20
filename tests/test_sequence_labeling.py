"""Sequence labeling: chunk metrics, the CRF against brute force, training in both modes,
export and prediction, and malformed tag lines."""
from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys

import numpy as np
import paddle
import pytest

from conftest import REPO, build, write_config, write_tsv
from wenxin.common.errors import ConfigError, DataError
from wenxin.inference.batching import BatchingPool
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


CHARACTERS = {"type": "CharTokenizer", "split_latin_digits": True, "lowercase": False}


def tagging_config(data_dir, output, mode="dynamic", decoder="crf", max_len=40, encoder=None):
    def fields():
        return [{"name": "text_a", "reader": {"type": "TextFieldReader"}, "max_seq_len": max_len,
                 "tokenizer": dict(CHARACTERS)},
                {"name": "label", "reader": {"type": "SequenceLabelFieldReader"}, "max_seq_len": max_len,
                 "align_with": "text_a"}]

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
    emissions = paddle.randn([3, max_len, num_tags])
    lengths = paddle.to_tensor([4, 2, 1], dtype="int64")  # odd and even lengths, and one token
    tags = paddle.to_tensor([[0, 2, 1, 1], [2, 0, 0, 0], [1, 0, 0, 0]], dtype="int64")
    e, trans = emissions.numpy(), crf.transitions.numpy()
    start, end = crf.start_scores.numpy(), crf.end_scores.numpy()

    def score(b, path):
        s = start[path[0]] + e[b, 0, path[0]] + end[path[-1]]
        return s + sum(trans[path[t - 1], path[t]] + e[b, t, path[t]] for t in range(1, len(path)))

    nll = crf.negative_log_likelihood(emissions, tags, lengths).numpy()
    for b, n in enumerate(lengths.tolist()):
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
    # raw sentences, as a user types them (the training data has a space between characters)
    rows = [[line.split("\t")[0].replace(" ", "")] for line in open(os.path.join(seg_dir, "dev.tsv"), encoding="utf-8")]
    results = predictor.predict(rows, batch_size=16)
    tags = trainer.model.tags
    for row, result, predicted, length in zip(rows, results, outputs["predictions"], outputs["seq_lens"]):
        assert result["tags"] == [tags[t] for t in predicted[:length]]  # the export decodes alike
        assert "".join(c["text"] for c in result["chunks"]) == row[0]  # BMES covers all
        assert all(row[0][c["start"]:c["end"]] == c["text"] for c in result["chunks"])


@pytest.mark.slow
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


def test_static_crf_trains_on_batches_of_any_length_with_bigrams_and_buckets(tmp_path, seg_dir):
    """No fixed length: the CRF's parallel scan runs any length in one static program; the
    hashed bigrams are computed in the graph, so the export needs nothing more."""
    config = tagging_config(seg_dir, str(tmp_path / "out"), "static")
    config["model"]["encoder"].update(bigram_buckets=101, bigram_dim=8, bigram_hashes=2, input_dropout=0.1)
    config["dataset_reader"]["train_reader"]["config"]["bucket_batches"] = 4
    with open(os.path.join(seg_dir, "dev.tsv"), "a", encoding="utf-8") as f:  # longer than any training line
        words = ["社会主义"] * 30
        f.write(" ".join(c for w in words for c in w) + "\t" + " ".join(t for w in words for t in bmes(w)) + "\n")
    for reader in config["dataset_reader"].values():
        for field in reader["fields"]:
            field["max_seq_len"] = 200
    trainer = build(config, tmp_path)
    assert trainer.do_train()["dev_reader"]["f1"] > 0.9
    outputs, _ = trainer.collect_outputs("dev_reader", "evaluate")
    result = Predictor(trainer.export_inference(str(tmp_path / "export"))).predict([["社会主义" * 30]])[0]
    assert len(result["tags"]) == 120 and result["tags"] == [trainer.model.tags[t] for t in outputs["predictions"][-1][:120]]


def test_hashed_bigrams_pair_each_token_with_its_neighbours():
    from wenxin.models.encoders import HashedBigrams
    paddle.seed(0)
    layer = HashedBigrams(vocab_size=50, padding_id=0, buckets=101, dim=4, hashes=2)
    assert layer.moduli == [101, 97]
    ids = paddle.to_tensor([[3, 7, 9, 0], [3, 7, 5, 5]])  # row 0 padded after 3 tokens
    out = layer(ids).numpy()  # [B, T, 8]: (previous, token) then (token, next)
    left, right = out[..., :4], out[..., 4:]
    assert np.allclose(left[:, 1:], right[:, :-1])  # a token's left bigram is its neighbour's right one
    assert np.allclose(left[0, 1], left[1, 1])  # the same bigram (3, 7), the same vector
    assert not np.allclose(right[0, 2], right[1, 2])  # (9, pad) and (5, 5) differ
    table = layer.table.weight.numpy()
    number = 3 * 50 + 7
    assert np.allclose(right[0, 0], table[number % 101] + table[number % 97])
    assert np.allclose(left[0, 0], table[3 % 101] + table[3 % 97])  # (pad, 3): the number 0 * 50 + 3
    assert np.allclose(right[0, 2], table[9 * 50 % 101] + table[9 * 50 % 97])  # (9, pad)
    # (1, 2) and (3, 3) are the numbers 52 and 153, equal modulo 101 but not modulo 97
    two = layer(paddle.to_tensor([[1, 2], [3, 3]])).numpy()[:, 0, 4:]
    assert not np.allclose(two[0], two[1])
    one = HashedBigrams(vocab_size=50, padding_id=0, buckets=101, dim=4, hashes=1)
    assert one.moduli == [101] and np.allclose(*one(paddle.to_tensor([[1, 2], [3, 3]])).numpy()[:, 0, 4:])


def test_a_tagger_that_cannot_tag_raw_text_is_an_error_before_training(tmp_path, seg_dir):
    """Characters separated by spaces, split on spaces: a raw sentence would be one token."""
    config = tagging_config(seg_dir, str(tmp_path / "out"))
    config["trainer"]["save_inference"] = True
    for reader in config["dataset_reader"].values():
        reader["fields"][0]["tokenizer"] = {"type": "WhitespaceTokenizer", "lowercase": False}
    with pytest.raises(ConfigError, match=r"train.tsv:1: its tokens \[.*\] \(from token 0\) come out of the raw "
                                          r"sentence .* as \['[^ ]+'\].*CharTokenizer with split_latin_digits"):
        build(config, tmp_path).do_train()
    assert not os.path.exists(tmp_path / "out" / "checkpoints")  # refused before the first step
    # data whose inference input is written like its training column trains and exports
    for reader in config["dataset_reader"].values():
        reader["fields"][0]["inference_text"] = "tokenized"
    trainer = build(config, tmp_path)
    trainer.do_train()
    rows = [[line.split("\t")[0]] for line in open(os.path.join(seg_dir, "dev.tsv"), encoding="utf-8")][:3]
    results = Predictor(str(tmp_path / "out" / "checkpoints" / "best" / "inference")).predict(rows)
    assert all(row[0][c["start"]:c["end"]] == c["text"] for row, r in zip(rows, results) for c in r["chunks"])


def test_raw_text_tags_every_character_with_offsets_in_the_input(tmp_path, seg_dir):
    """Digits, latin letters and full-width forms are one token per character, as in training
    lines such as ``１ ９ ９ ８``; chunk offsets index the raw input, end exclusive."""
    with open(os.path.join(seg_dir, "train.tsv"), "a", encoding="utf-8") as f:
        for _ in range(30):
            f.write("１ ９ ９ ８ 年 N B A\tB M M E S B M E\n")
            f.write("“ … … 中 国\tS S S B E\n")  # NFKC turns "…" into "...": still one token a character
    trainer = build(tagging_config(seg_dir, str(tmp_path / "out")), tmp_path)
    trainer.do_train()
    export_dir = trainer.export_inference(str(tmp_path / "export"))
    predictor = Predictor(export_dir)
    text = "１９９８年 NBA"
    result = predictor.predict([[text]])[0]
    assert len(result["tags"]) == 8
    assert [(c["text"], c["start"], c["end"]) for c in result["chunks"]] == \
        [("１９９８", 0, 4), ("年", 4, 5), ("NBA", 6, 9)]
    # longer than max_seq_len (40): split after sentence ends, tagged piece by piece, joined
    meta = json.load(open(os.path.join(export_dir, "preprocess.json"), encoding="utf-8"))
    assert meta["max_seq_len"] == {"text_a": {"tokens": 40, "longer": "split"}}
    long_text = "我是学生。" * 30
    whole, eight, six = predictor.predict([[long_text], ["我是学生。" * 8], ["我是学生。" * 6]])
    assert whole["tags"] == eight["tags"] * 3 + six["tags"]
    assert all(long_text[c["start"]:c["end"]] == c["text"] for c in whole["chunks"])
    assert [c["start"] for c in whole["chunks"][len(eight["chunks"]):][:2]] == \
        [40 + c["start"] for c in eight["chunks"][:2]]
    pool = BatchingPool(export_dir, max_batch=8, max_wait_ms=1)  # what the service runs
    try:
        assert pool.submit([[long_text], [text]]).result(timeout=60) == [whole, result]
    finally:
        pool.close()


def test_tagger_rejects_encoders_without_token_states(tmp_path, seg_dir):
    config = tagging_config(seg_dir, str(tmp_path / "out"), encoder={"type": "bow"})
    with pytest.raises(ConfigError, match="model.encoder.type: a tagger needs per-token states"):
        build(config, tmp_path)
