"""Metric writers (VisualDL records read back by VisualDL) and the loss read."""
import json
import os

import numpy as np
import paddle
import pytest

from conftest import build, task_config
from wenxin.controller.hooks.writers import VisualDLWriter
from wenxin.controller.state import loss_value


def test_visualdl_records_are_complete_after_training(tmp_path, data_dir):
    from visualdl import LogReader
    out = str(tmp_path / "out")
    config = task_config(data_dir, out, max_steps=25, train_log_step=5, visualdl=True, is_eval_test=0)
    trainer = build(config, tmp_path)
    trainer.do_train()
    train = [json.loads(line) for line in open(os.path.join(out, "logs", "metrics.jsonl"))
             if json.loads(line)["tag"] == "train"]
    vdl_files = os.listdir(os.path.join(out, "vdl"))
    assert len(vdl_files) == 1
    reader = LogReader(file_path=os.path.join(out, "vdl", vdl_files[0]))
    assert {"train/loss", "train/lr", "train/step_time", "dev/acc"} <= set(reader.get_tags()["scalar"])
    losses = reader.get_data("scalar", "train/loss")
    assert [r.id for r in losses] == [r["step"] for r in train] == [5, 10, 15, 20, 25]
    np.testing.assert_allclose([r.value for r in losses], [r["loss"] for r in train], rtol=1e-6)


def test_visualdl_writers_sharing_a_folder_keep_separate_files(tmp_path):
    from visualdl import LogReader
    first, second = VisualDLWriter(str(tmp_path)), VisualDLWriter(str(tmp_path))
    assert first.path != second.path and len(os.listdir(tmp_path)) == 2
    first.write("train", 1, {"loss": 1.0, "skipped": float("nan"), "note": "text"})
    second.write("dev", 2, {"acc": 0.5})
    second.write("dev", 4, {"acc": 0.75})
    tags = LogReader(file_path=first.path).get_tags()["scalar"]
    assert tags == ["train/loss"]  # NaN and non-numbers are left out
    acc = LogReader(file_path=second.path).get_data("scalar", "dev/acc")
    assert [(r.id, r.value) for r in acc] == [(2, 0.5), (4, 0.75)]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_loss_value_reads_tensors_numpy_and_floats(dtype):
    assert loss_value(paddle.to_tensor(1.5).astype(dtype)) == 1.5
    assert loss_value(paddle.to_tensor([2.5]).astype(dtype)) == 2.5
    assert loss_value(np.float32(0.25)) == 0.25 and loss_value(np.array(0.75)) == 0.75
    assert loss_value(3) == 3.0 and isinstance(loss_value(3), float)
    assert np.isnan(loss_value(paddle.to_tensor(float("nan"))))


def test_visualdl_fast_path_can_be_switched_off(tmp_path, data_dir):
    from visualdl import LogReader
    from wenxin.compat.visualdl import LogWriterRecords
    out = str(tmp_path / "out")
    config = task_config(data_dir, out, max_steps=10, train_log_step=5, visualdl=True, is_eval_dev=0, is_eval_test=0,
                         fast_paths={"visualdl_records": False})
    trainer = build(config, tmp_path)
    writer = next(w for w in trainer.metric_logger.writers if isinstance(w, VisualDLWriter))
    assert isinstance(writer._records, LogWriterRecords)  # noqa: SLF001
    trainer.do_train()
    files = os.listdir(os.path.join(out, "vdl"))
    losses = LogReader(file_path=os.path.join(out, "vdl", files[0])).get_data("scalar", "train/loss")
    assert [r.id for r in losses] == [5, 10]


def test_visualdl_records_that_do_not_read_back_fall_back_to_logwriter(tmp_path, monkeypatch):
    import wenxin.compat.visualdl as compat_vdl
    monkeypatch.setattr(compat_vdl, "_records_verified", {})
    monkeypatch.setattr(compat_vdl.RecordFile, "write", lambda self, values, step: None)  # records lost
    writer = VisualDLWriter(str(tmp_path))
    assert isinstance(writer._records, compat_vdl.LogWriterRecords)  # noqa: SLF001
