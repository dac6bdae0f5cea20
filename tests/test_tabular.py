"""Tabular classification: FloatVectorFieldReader and the MLP task in both modes."""
from __future__ import annotations

import os

import numpy as np
import pytest

from conftest import build, tabular_config
from wenxin.common.errors import DataError


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
    assert predictor.warm_up() is False  # made-up text is no row of numbers: the first real batch warms up
