"""Inference backends are a registry: a backend of one's own is one module, picked by name or by
auto in its order; an unknown name is one clear error."""
import importlib.util
import sys

import numpy as np
import pytest

from conftest import wenxin_log
from wenxin.common.errors import InferenceError
from wenxin.common.registry import RegisterSet
from wenxin.inference.predictor import Predictor

MODULE = '''
from wenxin.common.registry import RegisterSet
from wenxin.inference.backends import InferenceBackend
from wenxin.inference.paddle_backend import PaddleBackend

CALLS = []


@RegisterSet.inference_backends.register("recording")
class RecordingBackend(InferenceBackend):
    """Paddle's outputs, counting the batches it runs."""

    name = "recording"
    title = "Recording"
    auto_order = AUTO_ORDER

    def __init__(self, model_dir, meta, options):
        self.inner = PaddleBackend(model_dir, meta, options)
        self.input_names = self.inner.input_names

    @classmethod
    def unusable(cls, model_dir, use_gpu):
        return "it records CPU runs only" if use_gpu else None

    def run(self, batch):
        CALLS.append(len(next(iter(batch.values()))))
        return self.inner.run(batch)

    def choices(self):
        return {"mode": "recording"}
'''


@pytest.fixture
def backend_module(tmp_path, monkeypatch):
    """A backend written in a module of its own, imported as a user's plugin would be."""
    def load(auto_order):
        path = tmp_path / f"recording_backend_{auto_order}.py"
        path.write_text(MODULE.replace("AUTO_ORDER", str(auto_order)), encoding="utf-8")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, path.stem, module)
        spec.loader.exec_module(module)
        return module
    yield load
    RegisterSet.inference_backends._entries.pop("recording", None)


def test_a_backend_of_ones_own_is_one_module(exported_classifier, backend_module):
    module = backend_module(auto_order=0)  # by name only
    texts = [["这本书很好"], ["太差了"], ["一般"]]
    expected = Predictor(exported_classifier, backend="paddle").predict(texts)
    assert Predictor(exported_classifier).backend == "paddle"  # auto never takes an order-0 backend
    with wenxin_log() as messages:
        mine = Predictor(exported_classifier, backend="recording")
    assert mine.backend == "recording" and "Recording backend: mode recording" in messages
    got = mine.predict(texts)
    assert module.CALLS == [3]
    for a, b in zip(expected, got):
        assert a["label"] == b["label"] and np.allclose(a["probs"], b["probs"])
    with pytest.raises(InferenceError, match="backend recording: it records CPU runs only"):
        Predictor(exported_classifier, backend="recording", use_gpu=True)


def test_auto_takes_the_first_usable_backend_in_its_order(exported_classifier, backend_module):
    backend_module(auto_order=1)  # before ONNX Runtime (10) and Paddle (100)
    assert Predictor(exported_classifier).backend == "recording"


def test_an_unknown_backend_is_one_error_with_a_suggestion(exported_classifier):
    with pytest.raises(InferenceError, match=r"^backend: unknown inference backend type 'paddel' \(did you mean "
                                             r"'paddle'\?\); known: onnxruntime, onnxruntime-int8, paddle \(or auto\)$"):
        Predictor(exported_classifier, backend="paddel")


def test_each_engine_loads_the_pair_alone_where_it_runs_a_group_of_no_rows(tmp_path):
    """Every engine holds ``advance_pair`` alone (the weights once) where the export's pair runs a
    group of no rows (``empty_second``) and the engine has its program; an older export's pair only
    the int8 engine loads, where its int8 copy exists, and the others ``advance``."""
    from wenxin.inference.onnx_backend import OnnxBackend, OnnxInt8Backend
    from wenxin.inference.paddle_backend import PaddleBackend
    folder = str(tmp_path)
    older = {"advance": {}, "advance_pair": {}}
    newer = {"advance": {}, "advance_pair": {"empty_second": True}}
    from wenxin.inference.paddle_backend import runs_empty_groups
    assert PaddleBackend.step_programs(folder, older) == ["advance"]
    # an older Paddle (3.0 crashes on a group of no rows) loads advance, as before
    assert PaddleBackend.step_programs(folder, newer) == (["advance_pair"] if runs_empty_groups() else ["advance"])
    for steps in (older, newer):  # ONNX Runtime: the programs the export holds a file of
        assert OnnxBackend.step_programs(folder, steps) == OnnxInt8Backend.step_programs(folder, steps) == ["advance"]
    (tmp_path / "advance_pair.int8.onnx").write_bytes(b"")
    assert OnnxInt8Backend.step_programs(folder, older) == ["advance_pair"]  # every call as the pair: weights once
    assert OnnxBackend.step_programs(folder, older) == ["advance"]
    (tmp_path / "advance_pair.onnx").write_bytes(b"")
    assert OnnxBackend.step_programs(folder, newer) == ["advance_pair"]
    older_steps = {"prefill": {}, "extend": {}}  # an export before advance
    for backend in (PaddleBackend, OnnxBackend, OnnxInt8Backend):
        assert backend.step_programs(folder, older_steps) == ["prefill", "extend"]


@pytest.mark.parametrize("version, runs", [("3.0.0", False), ("3.2.2", False), ("3.3.1", True), ("3.10.0", True),
                                           ("0.0.0", True)])
def test_a_paddle_that_crashes_on_a_group_of_no_rows_loads_advance(tmp_path, monkeypatch, version, runs):
    """Paddle 3.0 dies of a segmentation fault on a group of no rows: there the Paddle backend
    loads ``advance`` (two calls a prefilling turn), as before the pair could run one."""
    import paddle
    from wenxin.inference.paddle_backend import PaddleBackend, runs_empty_groups
    monkeypatch.setattr(paddle, "__version__", version)
    assert runs_empty_groups() is runs
    steps = {"advance": {}, "advance_pair": {"empty_second": True}}
    assert PaddleBackend.step_programs(str(tmp_path), steps) == (["advance_pair"] if runs else ["advance"])
    # nor a cache of no columns: an export of three programs runs its own prefill there
    assert PaddleBackend.runs_empty_caches() is runs


def test_a_step_programs_feed_takes_declared_names_or_the_static_prefix_and_names_an_unknown_input():
    from wenxin.common.errors import ExportError
    from wenxin.inference.predictor import program_feed
    tokens, cache = np.zeros((1, 2), dtype=np.int64), np.ones((1, 3), dtype=np.float32)
    feed = program_feed("advance", ["tokens", "advance__cache"], ["tokens", "cache"], {"tokens": tokens, "cache": cache})
    assert feed == {"tokens": tokens, "advance__cache": cache}
    with pytest.raises(ExportError, match=r"advance: the program's input 'extend__cache' is none of the declared "
                                          r"\['cache', 'tokens'\]"):
        program_feed("advance", ["tokens", "extend__cache"], ["tokens", "cache"], {"tokens": tokens, "cache": cache})
