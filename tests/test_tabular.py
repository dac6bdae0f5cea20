"""Tabular classification: FloatVectorFieldReader and the MLP task in both modes."""
from __future__ import annotations

import os

import numpy as np
import pytest

from conftest import build, write_tsv
from wenxin.common.errors import DataError


def make_tabular(n, seed, dim=8):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, dim)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(int)
    return [(" ".join(f"{v:.4f}" for v in row), label) for row, label in zip(x, y)]


def tabular_config(folder, output, mode="dynamic", dim=8):
    fields = [{"name": "features", "reader": {"type": "FloatVectorFieldReader"}, "dim": dim},
              {"name": "label", "data_type": "int", "reader": {"type": "LabelFieldReader"}}]
    return {"task": "tabular_classification",
            "dataset_reader": {
                "train_reader": {"fields": fields, "config": {"data_path": os.path.join(folder, "train.tsv"),
                                                              "shuffle": True, "batch_size": 32}},
                "dev_reader": {"fields": fields, "config": {"data_path": os.path.join(folder, "dev.tsv"),
                                                            "batch_size": 64}}},
            "model": {"type": "MlpClassification", "hidden_sizes": [32], "is_dygraph": int(mode == "dynamic"),
                      "optimization": {"learning_rate": 0.01}},
            "trainer": {"type": "CustomDynamicTrainer" if mode == "dynamic" else "CustomStaticTrainer",
                        "epoch": 5, "is_eval_dev": 1, "output_path": output, "visualdl": False}}


@pytest.fixture
def tab_dir(tmp_path):
    folder = str(tmp_path / "tab")
    write_tsv(os.path.join(folder, "train.tsv"), make_tabular(400, 1))
    write_tsv(os.path.join(folder, "dev.tsv"), make_tabular(100, 2))
    return folder


@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_mlp_learns_a_linear_rule(tmp_path, tab_dir, mode):
    metrics = build(tabular_config(tab_dir, str(tmp_path / "out"), mode), tmp_path).do_train()["dev_reader"]
    assert metrics["acc"] > 0.9, metrics


def test_wrong_vector_length_names_the_line(tmp_path, tab_dir):
    with open(os.path.join(tab_dir, "dev.tsv"), "a", encoding="utf-8") as f:
        f.write("1 2 3\t0\n")
    with pytest.raises(DataError, match=r"dev.tsv:101: field 'features': expected 8 numbers, got 3"):
        build(tabular_config(tab_dir, str(tmp_path / "out")), tmp_path)


def test_exported_mlp_predicts_like_the_trainer(tmp_path, tab_dir):
    from wenxin.inference.predictor import Predictor
    trainer = build(tabular_config(tab_dir, str(tmp_path / "out")), tmp_path)
    trainer.do_train()
    outputs, _ = trainer.collect_outputs("dev_reader", "evaluate")
    predictor = Predictor(trainer.export_inference(str(tmp_path / "export")))
    rows = [[line.split("\t")[0]] for line in open(os.path.join(tab_dir, "dev.tsv"), encoding="utf-8")]
    probs = np.array([r["probs"] for r in predictor.predict(rows)])
    np.testing.assert_allclose(probs, outputs["probs"], atol=1e-5)
