"""Metric writers: the background writer's ordering, flushing and errors, and the loss read."""
import json
import os
import threading

import numpy as np
import paddle
import pytest

from conftest import build, task_config
from wenxin.controller.hooks.writers import BackgroundWriter, JsonlWriter, MetricWriter
from wenxin.controller.state import loss_value


class SlowList(MetricWriter):
    """Records what it is given, slowly, and from which thread."""

    def __init__(self, gate=None):
        self.records, self.threads, self.flushes, self.gate = [], set(), 0, gate

    def write(self, tag, step, scalars):
        if self.gate is not None:
            self.gate.wait(5)
        self.records.append((tag, step, scalars))
        self.threads.add(threading.current_thread().name)

    def flush(self):
        self.flushes += 1


def test_background_writer_keeps_order_and_flush_waits_for_every_record():
    gate = threading.Event()
    inner = SlowList(gate)
    writer = BackgroundWriter(inner)
    scalars = {"loss": 1.0}
    for step in range(50):
        writer.write("train", step, scalars)
    scalars["loss"] = 2.0  # the writer copied the record: later changes by the caller do not leak in
    assert inner.records == []  # the caller did not wait for the slow writer
    gate.set()
    writer.flush()
    assert [r[1] for r in inner.records] == list(range(50))
    assert all(r[2] == {"loss": 1.0} for r in inner.records)
    assert inner.threads == {"wenxin-SlowList"} and inner.flushes == 1
    writer.write("dev", 50, {"acc": 0.5})
    writer.close()
    assert inner.records[-1] == ("dev", 50, {"acc": 0.5}) and inner.flushes == 2


def test_background_writer_reports_a_failed_write_by_writer_name(tmp_path):
    target = tmp_path / "logs" / "metrics.jsonl"
    inner = JsonlWriter(str(target))
    writer = BackgroundWriter(inner)
    writer.write("train", 1, {"loss": 1.0})
    writer.flush()
    os.remove(target)
    os.rmdir(target.parent)
    target.parent.write_text("not a folder")  # the next append fails in the writer thread
    writer.write("train", 2, {"loss": 0.5})
    with pytest.raises(RuntimeError, match="JsonlWriter failed to write a metric record"):
        writer.flush()
    writer.close()  # the error was reported once; closing does not raise it again


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


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_loss_value_reads_tensors_numpy_and_floats(dtype):
    assert loss_value(paddle.to_tensor(1.5).astype(dtype)) == 1.5
    assert loss_value(paddle.to_tensor([2.5]).astype(dtype)) == 2.5
    assert loss_value(np.float32(0.25)) == 0.25 and loss_value(np.array(0.75)) == 0.75
    assert loss_value(3) == 3.0 and isinstance(loss_value(3), float)
    assert np.isnan(loss_value(paddle.to_tensor(float("nan"))))


def test_background_writer_writes_its_queue_before_the_interpreter_exits(tmp_path):
    import subprocess
    import sys
    target = tmp_path / "m.jsonl"
    script = (
        "import time\n"
        "from wenxin.controller.hooks.writers import BackgroundWriter, JsonlWriter\n"
        "class Slow(JsonlWriter):\n"
        "    def write(self, *record):\n"
        "        time.sleep(0.01)\n"
        "        super().write(*record)\n"
        f"writer = BackgroundWriter(Slow({str(target)!r}))\n"
        "for step in range(30):\n"
        "    writer.write('train', step, {'loss': 1.0})\n")  # no flush: the exit hook writes the rest
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    assert [json.loads(line)["step"] for line in open(target)] == list(range(30))
