"""Text matching: pointwise and pairwise models in both modes, shared vocabularies, export."""
from __future__ import annotations

import os
import random

import pytest

from conftest import build, make_sentences, write_tsv
from wenxin.common.errors import ConfigError
from wenxin.inference.predictor import Predictor


def _pools(n, seed):
    rows = make_sentences(n, seed)
    return {label: [text for text, row_label in rows if row_label == label] for label in (0, 1)}


def make_pairs(n, seed):
    """(text_a, text_b, 1 if both have the same sentiment else 0), balanced."""
    rng, pools = random.Random(seed), _pools(4 * n, seed)
    rows = []
    for i in range(n):
        a = rng.randint(0, 1)
        b = a if i % 2 == 0 else 1 - a
        rows.append((rng.choice(pools[a]), rng.choice(pools[b]), int(a == b)))
    return rows


def make_triples(n, seed):
    rng, pools = random.Random(seed), _pools(4 * n, seed)
    rows = []
    for _ in range(n):
        a = rng.randint(0, 1)
        rows.append((rng.choice(pools[a]), rng.choice(pools[a]), rng.choice(pools[1 - a])))
    return rows


@pytest.fixture
def match_dir(tmp_path):
    folder = str(tmp_path / "match")
    write_tsv(os.path.join(folder, "pointwise.tsv"), make_pairs(300, 1))
    write_tsv(os.path.join(folder, "pairwise.tsv"), make_triples(300, 1))
    write_tsv(os.path.join(folder, "dev.tsv"), make_pairs(80, 2))
    return folder


def text(name, vocab_from=""):
    return {"name": name, "reader": {"type": "TextFieldReader"}, "max_seq_len": 32, "vocab_from": vocab_from}


def matching_config(folder, output, kind, mode="dynamic"):
    if kind == "pointwise":
        fields = [text("text_a"), text("text_b", "text_a"), {"name": "label", "reader": {"type": "LabelFieldReader"}}]
        train, dev, model = fields, fields, {"type": "PointwiseMatching", "hidden_size": 32}
    else:
        train = [text("query"), text("pos_title", "query"), text("neg_title", "query")]
        dev = [text("query"), text("title", "query"),
               {"name": "label", "data_type": "int", "reader": {"type": "ScalarFieldReader"}, "is_label": True}]
        model = {"type": "PairwiseMatching", "margin": 0.3}
    model.update(is_dygraph=int(mode == "dynamic"), encoder={"type": "bow", "emb_dim": 32},
                 optimization={"learning_rate": 0.03})
    return {
        "task": "text_matching",
        "dataset_reader": {
            "train_reader": {"fields": train, "config": {"data_path": os.path.join(folder, f"{kind}.tsv"),
                                                         "shuffle": True, "batch_size": 16}},
            "dev_reader": {"fields": dev, "config": {"data_path": os.path.join(folder, "dev.tsv"), "batch_size": 32}}},
        "model": model,
        "trainer": {"type": "CustomDynamicTrainer" if mode == "dynamic" else "CustomStaticTrainer", "epoch": 6,
                    "is_eval_dev": 1, "metric": "auc", "output_path": output, "visualdl": False,
                    "train_log_step": 100},
    }


@pytest.mark.parametrize("mode", ["dynamic", "static"])
@pytest.mark.parametrize("kind", ["pointwise", "pairwise"])
def test_matching_learns_and_exports(tmp_path, match_dir, kind, mode):
    trainer = build(matching_config(match_dir, str(tmp_path / "out"), kind, mode), tmp_path)
    metrics = trainer.do_train()["dev_reader"]
    assert metrics["auc"] > 0.8 and metrics["acc"] > 0.7, metrics
    outputs, _ = trainer.collect_outputs("dev_reader", "evaluate")
    predictor = Predictor(trainer.export_inference(str(tmp_path / "export")))
    assert [f.name for f in predictor.fields] == (["text_a", "text_b"] if kind == "pointwise" else ["query", "title"])
    rows = [line.rstrip("\n").split("\t")[:2] for line in open(os.path.join(match_dir, "dev.tsv"), encoding="utf-8")]
    results = predictor.predict(rows)
    if kind == "pointwise":
        got = [r["probs"][1] for r in results]
        expected = outputs["probs"][:, 1]
    else:
        got, expected = [r["score"] for r in results], outputs["scores"]
    assert got == pytest.approx(list(expected), abs=1e-5)


def test_shared_encoder_needs_a_shared_vocab(tmp_path, match_dir):
    config = matching_config(match_dir, str(tmp_path / "out"), "pointwise")
    for reader in config["dataset_reader"].values():
        reader["fields"][1]["vocab_from"] = ""
    with pytest.raises(ConfigError, match=r"model.text_b_field: 'text_b' has its own vocab.*vocab_from"):
        build(config, tmp_path)


def test_vocab_from_builds_one_vocab_from_both_columns(tmp_path, match_dir):
    trainer = build(matching_config(match_dir, str(tmp_path / "out"), "pairwise"), tmp_path)
    reader = trainer.readers["train_reader"]
    query, neg = reader.field("query"), reader.field("neg_title")
    assert query.vocab is neg.vocab
    neg_only = {c for line in open(os.path.join(match_dir, "pairwise.tsv"), encoding="utf-8")
                for c in line.rstrip("\n").split("\t")[2]}
    assert all(c in query.vocab for c in neg_only)
    assert trainer.readers["dev_reader"].field("title").vocab is query.vocab


def test_pairwise_model_says_which_fields_evaluation_needs(tmp_path, match_dir):
    config = matching_config(match_dir, str(tmp_path / "out"), "pairwise")
    config["dataset_reader"]["dev_reader"]["fields"][1]["name"] = "doc"
    config["dataset_reader"]["dev_reader"]["fields"][1]["vocab_from"] = "query"
    with pytest.raises(ConfigError, match="needs fields 'query' and 'title'"):
        build(config, tmp_path).do_train()
