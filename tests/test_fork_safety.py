"""Processes wenxin forks (DataLoader workers, in memory and streamed; the workers converting
parts of data files) never collect the parent's garbage: its finalizers would run without the
parent's threads (an ONNX Runtime session's killed such a worker with SIGSEGV in the suite)."""
import contextlib
import gc
import os

import numpy as np
import pytest

from conftest import fields, make_sentences, write_tsv
from wenxin.config.schema import validate
from wenxin.config.task_schema import READER
from wenxin.data import part_pool, streaming
from wenxin.data.dataset_reader import build_readers


class Finalized:
    """Garbage in a reference cycle: its finalizer writes the id of the process it runs in."""

    def __init__(self, path):
        self.me, self.path = self, path

    def __del__(self):
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()}\n")


@contextlib.contextmanager
def collector_off():
    """Garbage made inside stays uncollected until the block ends (then it is collected)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.collect()
        if was_enabled:
            gc.enable()


@pytest.fixture
def garbage(tmp_path):
    """A ``Finalized`` left uncollected (the collector off until the test ends); yields the
    file that names where it was finalized."""
    path = str(tmp_path / "finalized_in")
    with collector_off():
        Finalized(path)
        yield path


def finalized_in(path):
    gc.collect()  # the parent collects it, after the workers are done
    with open(path, encoding="utf-8") as f:
        return [int(line) for line in f]


def collecting(function):
    """``function``, with a full collection first (run in a worker, it finds the parent's garbage)."""
    def wrapped(*args, **kwargs):
        gc.collect()
        return function(*args, **kwargs)
    return wrapped


def reader(data_dir, **config):
    return build_readers({"train_reader": validate({"fields": fields(), "config": {"data_path": data_dir, **config}},
                                                   READER, "dataset_reader.train_reader")}, None)["train_reader"]


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("WENXIN_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "data"
    write_tsv(str(folder / "a.tsv"), make_sentences(60, seed=1))
    write_tsv(str(folder / "b.tsv"), make_sentences(40, seed=2))
    return str(folder)


def test_streamed_dataloader_workers_leave_the_parents_garbage(data_dir, garbage, monkeypatch):
    monkeypatch.setattr(streaming, "convert_batch", collecting(streaming.convert_batch))
    loaded = reader(data_dir, streaming=True, shuffle_buffer=16, num_workers=2)
    batches = list(loaded.make_loader(loaded.make_sampler(8, True, 1), numpy_batches=True))
    assert len(batches) == 13 and sum(len(np.asarray(b["label"])) for b in batches) == 100
    assert finalized_in(garbage) == [os.getpid()]


def test_in_memory_dataloader_workers_leave_the_parents_garbage(data_dir, garbage):
    loaded = reader(data_dir, num_workers=2)
    loaded.collate = collecting(loaded.collate)  # the DataLoader's collate_fn, run in the workers
    batches = list(loaded.make_loader(loaded.make_sampler(8, True, 1), numpy_batches=True))
    assert len(batches) == 13
    assert finalized_in(garbage) == [os.getpid()]


def collect_then_square(task):
    gc.collect()
    return task * task


def test_part_workers_leave_the_parents_garbage(garbage):
    assert part_pool.run_parts(collect_then_square, list(range(6)), processes=2, shared=None) == [0, 1, 4, 9, 16, 25]
    assert finalized_in(garbage) == [os.getpid()]


def test_a_worker_forked_beside_an_onnx_session_in_garbage_lives(data_dir, monkeypatch):
    """The failure seen: a DataLoader worker that collected a dropped ONNX Runtime session died
    of SIGSEGV ("Blocking queue is killed because the data reader raises an exception")."""
    ort = pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    with collector_off():
        for _ in range(4):
            holder = Finalized(os.devnull)
            holder.session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            holder.session.run(None, {"x": np.ones((2, 4), np.float32)})  # its threads have started
            del holder
        monkeypatch.setattr(streaming, "convert_batch", collecting(streaming.convert_batch))
        loaded = reader(data_dir, streaming=True, shuffle_buffer=16, num_workers=2)
        assert len(list(loaded.make_loader(loaded.make_sampler(8, True, 1), numpy_batches=True))) == 13
