"""The Paddle backend reads its inputs where they lie (issue 69, point 2): a decoding step hands
Paddle Inference each layer's key/value cache as the service's own array (``share_external_data``),
not a copy; a handle is never fed by copy after shared memory (which would write into the earlier
array: the corruption that kept this path out before); arrays NumPy calls contiguous but Paddle
does not (a 0 stride on a new axis, a read-only or strided view) are fed right."""
import os

import numpy as np
import pytest

pytest.importorskip("sentencepiece")

from test_chat_sft import FOLDER  # noqa: E402
from wenxin.inference.backends import EngineOptions  # noqa: E402
from wenxin.inference.generator import Generator  # noqa: E402
from wenxin.inference.paddle_backend import PaddleBackend  # noqa: E402
from wenxin.inference.predictor import Predictor  # noqa: E402
from wenxin.model_folders import FolderSettings, export_of_folder  # noqa: E402
from wenxin.models.decoding import DecodeSettings, new_search  # noqa: E402
from wenxin.models.kv_slots import KVSlots  # noqa: E402

ROWS = [["你好"], ["今天天气很好吗？"], ["hi"]]


@pytest.fixture(scope="module")
def predictor(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WENXIN_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield Predictor(export_of_folder(FOLDER, FolderSettings(graph_mode="dynamic")), backend="paddle")


def step_engine(predictor) -> PaddleBackend:
    """The predictor's one step engine (of ``advance_pair``: every call runs as the pair)."""
    (engine,) = predictor.step_engines.values()
    return engine


def advance_engine(predictor, shares_inputs: bool) -> PaddleBackend:
    """A Paddle engine of the export's ``advance`` program of its own."""
    engine = step_engine(predictor)
    backend = PaddleBackend(os.path.dirname(engine.graph), predictor.meta,
                            EngineOptions(False, 1, {"program": "advance"}))
    backend.shares_inputs = shares_inputs
    return backend


def step_inputs(predictor, rows: int, cached: int, seed: int) -> dict:
    """``advance``'s inputs for one new token after ``cached`` random cached tokens a row."""
    slots = KVSlots(predictor.in_place_cache)
    shape = list(predictor.in_place_cache.shape)
    shape[2], shape[4] = rows, cached
    slots.append(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))
    tokens = np.arange(5, 5 + rows, dtype=np.int64)
    return {"tokens": tokens[:, None], "positions": np.full((rows, 1), cached, np.int64), **slots.inputs(1)}


def fed(backend: PaddleBackend, inputs: dict) -> dict:
    """``inputs`` by the program's names (a static program's are ``advance__<name>``)."""
    return {name: inputs[name.rsplit("__", 1)[-1]] for name in backend.input_names}


def test_a_decoding_step_hands_the_program_the_cache_where_it_lies(predictor):
    decoder = Generator(predictor).decoder()
    settings = DecodeSettings("greedy", max_new_tokens=20, eos_id=None)
    for key, row in enumerate(ROWS):
        decoder.add(key, predictor.prompt(row), new_search(settings))
    engine = step_engine(predictor)
    for _ in range(3):
        decoder.step()
        slots = decoder.cohorts[0].slots
        names = [name for name in engine.input_names if name.rsplit("__", 1)[-1].startswith(("keys_", "values_"))]
        assert names and len(engine.fed) == len(engine.input_names)
        for name, array in zip(engine.input_names, engine.fed):
            if name in names:  # the store's own memory, not a copy
                assert np.shares_memory(array, slots.store), name


def test_a_run_never_writes_into_the_arrays_of_an_earlier_run(predictor):
    backend = advance_engine(predictor, shares_inputs=True)
    first = step_inputs(predictor, rows=4, cached=9, seed=1)
    kept = {name: array.copy() for name, array in first.items()}
    backend.run(fed(backend, first))  # the handles now point at first's arrays
    backend.run(fed(backend, step_inputs(predictor, rows=1, cached=3, seed=2)))  # smaller: fits in them
    for name, array in first.items():
        assert np.array_equal(array, kept[name]), name


def test_shared_inputs_give_what_copied_ones_give_whatever_their_strides(predictor):
    sharing, copying = advance_engine(predictor, True), advance_engine(predictor, False)
    inputs = step_inputs(predictor, rows=3, cached=7, seed=3)
    assert inputs["tokens"].strides[1] == 0  # tokens[:, None]: NumPy calls it contiguous, Paddle does not
    expected = copying.run(fed(copying, inputs))
    odd = dict(inputs)
    odd["positions"] = np.asfortranarray(np.repeat(inputs["positions"], 2, axis=1))[:, :1]  # strided
    odd["visible"] = inputs["visible"].copy()
    odd["visible"].flags.writeable = False  # read-only: shared as it is
    for case in (inputs, odd):
        got = sharing.run(fed(sharing, case))
        assert len(got) == len(expected)
        for mine, theirs in zip(got, expected):
            np.testing.assert_array_equal(mine, theirs)


def test_the_tensor_handed_over_is_the_arrays_memory():
    from wenxin.compat.paddle_internals import cpu_tensor_on
    for array in (np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(4, dtype=np.int64)[:, None]):
        tensor = cpu_tensor_on(array)
        array[-1] = 99
        assert np.array_equal(np.array(tensor), array)  # the change is seen: not a copy
    base = np.arange(6, dtype=np.float32)
    read_only = base.view()
    read_only.flags.writeable = False
    tensor = cpu_tensor_on(read_only)
    base[0] = 99
    assert np.array(tensor)[0] == 99  # a read-only array is shared too
