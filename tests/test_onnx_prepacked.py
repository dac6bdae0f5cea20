"""ONNX Runtime's packed weights kept on disk (issue 69, point 1: the weights once in memory):
a program is packed once into the cache, in a child process, and then loaded from there with the
same outputs; its weights are then pages of a mapped file instead of the heap (measured in a
process of its own); a damaged or unloadable copy is made again or passed over,
never a different answer; ``$WENXIN_ONNX_PREPACKED`` chooses, and ``wenxin cache`` lists and
clears the copies."""
import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")

from conftest import wenxin_log  # noqa: E402
from wenxin.common.errors import ConfigError  # noqa: E402
from wenxin.common.files import file_sha256  # noqa: E402
from wenxin.common.manifest import sealed_sha256, write_manifest  # noqa: E402
from wenxin.inference import onnx_prepacked  # noqa: E402
from wenxin.inference.onnx_backend import open_program, open_session  # noqa: E402

pytestmark = pytest.mark.skipif(not onnx_prepacked.runtime_writes_packed(onnxruntime.__version__),
                                reason="this ONNX Runtime does not write packed weights (1.21 and later do)")


def write_program(path: str, width: int = 256, depth: int = 3, seed: int = 0) -> None:
    """A chain of ``depth`` float32 products ``x @ W_i`` (``W_i`` [width, width]) with a ``Relu`` between."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    nodes, weights, last = [], [], "x"
    for i in range(depth):
        weights.append(numpy_helper.from_array((rng.standard_normal((width, width)) / width ** 0.5).astype(np.float32),
                                               f"w{i}"))
        nodes.append(helper.make_node("MatMul", [last, f"w{i}"], [f"p{i}"]))
        nodes.append(helper.make_node("Relu", [f"p{i}"], [f"h{i}"]))
        last = f"h{i}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, width])],
                              [helper.make_tensor_value_info(last, TensorProto.FLOAT, [None, width])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.fixture
def sealed(tmp_path, monkeypatch):
    """A sealed folder holding ``program.onnx``, a cache of its own and packing on for every size."""
    folder = tmp_path / "export"
    folder.mkdir()
    write_program(str(folder / "program.onnx"))
    write_manifest(str(folder), 1)
    monkeypatch.setenv("WENXIN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(onnx_prepacked.SETTING_ENV, "on")
    return str(folder)


def outputs(session, rows: int = 4) -> np.ndarray:
    x = np.random.default_rng(1).standard_normal((rows, 256)).astype(np.float32)
    return session.run(None, {"x": x})[0]


def test_a_program_is_packed_once_into_the_cache_and_answers_the_same(sealed, monkeypatch):
    plain = outputs(open_session(os.path.join(sealed, "program.onnx")))
    with wenxin_log() as messages:
        packed = outputs(open_program(sealed, "program.onnx"))
    assert any("packing its weights for this CPU once" in m for m in messages)
    assert any("packed in" in m for m in messages)
    np.testing.assert_array_equal(packed, plain)
    [entry] = onnx_prepacked.cached_programs()
    assert entry["program"] == os.path.join(sealed, "program.onnx")
    described = json.load(open(os.path.join(entry["entry"], onnx_prepacked.ENTRY)))
    assert described["sha256"] == file_sha256(os.path.join(sealed, "program.onnx")) == sealed_sha256(sealed,
                                                                                                    "program.onnx")
    # the packed program reads its weights from the data file beside it, the original's are inline
    assert os.path.getsize(os.path.join(entry["entry"], onnx_prepacked.DATA)) > 3 * 256 * 256 * 4

    def no_child(*args, **kwargs):
        raise AssertionError("packed again")

    monkeypatch.setattr(onnx_prepacked.subprocess, "run", no_child)  # found in the cache the second time
    np.testing.assert_array_equal(outputs(open_program(sealed, "program.onnx")), plain)


def test_a_program_made_again_in_its_place_leaves_one_packed_copy(sealed):
    program = os.path.join(sealed, "program.onnx")
    open_program(sealed, "program.onnx")
    write_program(program, seed=5)  # exported again into the same folder
    write_manifest(sealed, 1)
    np.testing.assert_array_equal(outputs(open_program(sealed, "program.onnx")), outputs(open_session(program)))
    [entry] = onnx_prepacked.cached_programs()  # the first program's copy is gone
    assert json.load(open(os.path.join(entry["entry"], onnx_prepacked.ENTRY)))["sha256"] == file_sha256(program)


def test_the_setting_and_the_rules_that_leave_a_program_as_it_is(sealed, monkeypatch):
    program = os.path.join(sealed, "program.onnx")
    monkeypatch.setenv(onnx_prepacked.SETTING_ENV, "off")
    assert onnx_prepacked.prepacked_program(sealed, "program.onnx") is None
    monkeypatch.setenv(onnx_prepacked.SETTING_ENV, "auto")  # small programs are loaded as they are
    assert os.path.getsize(program) < onnx_prepacked.PREPACKED_MIN_BYTES
    assert onnx_prepacked.prepacked_program(sealed, "program.onnx") is None
    monkeypatch.setenv(onnx_prepacked.SETTING_ENV, "on")
    os.remove(os.path.join(sealed, "manifest.json"))  # not sealed (an export checking itself)
    assert onnx_prepacked.prepacked_program(sealed, "program.onnx") is None
    assert onnx_prepacked.cached_programs() == []
    monkeypatch.setenv(onnx_prepacked.SETTING_ENV, "sometimes")
    with pytest.raises(ConfigError, match=r"\$WENXIN_ONNX_PREPACKED: 'sometimes' is not one of auto, on, off"):
        onnx_prepacked.prepacked_program(sealed, "program.onnx")
    assert [onnx_prepacked.runtime_writes_packed(v) for v in ("1.19.2", "1.20.1", "1.21.0", "1.32.0", "dev")] == [
        False, False, True, True, False]


def test_a_damaged_copy_is_made_again_and_one_that_cannot_load_is_passed_over(sealed):
    plain = outputs(open_session(os.path.join(sealed, "program.onnx")))
    open_program(sealed, "program.onnx")
    [entry] = [e["entry"] for e in onnx_prepacked.cached_programs()]
    data = os.path.join(entry, onnx_prepacked.DATA)
    with open(data, "r+b") as f:  # cut short (a full disk, a copy interrupted): not complete, made again
        f.truncate(os.path.getsize(data) // 2)
    np.testing.assert_array_equal(outputs(open_program(sealed, "program.onnx")), plain)
    assert onnx_prepacked.complete(entry)
    left = entry + ".a_killed_build"  # what a process killed while packing leaves: deleted by the next build
    os.makedirs(left)
    shutil.rmtree(entry)
    np.testing.assert_array_equal(outputs(open_program(sealed, "program.onnx")), plain)
    assert onnx_prepacked.complete(entry) and not os.path.exists(left)
    with open(os.path.join(entry, onnx_prepacked.MODEL), "wb") as f:  # whole in size, but not a program
        f.write(b"not a program")
    with wenxin_log(logging.WARNING) as messages:
        np.testing.assert_array_equal(outputs(open_program(sealed, "program.onnx")), plain)
    assert any("cannot load the model" in m and "the packed copy is deleted" in m for m in messages)
    assert not os.path.exists(entry)


def test_a_copy_that_cannot_be_made_leaves_the_program_as_it_is(sealed, tmp_path, monkeypatch):
    plain = outputs(open_session(os.path.join(sealed, "program.onnx")))
    blocked = tmp_path / "a file"
    blocked.write_text("")
    monkeypatch.setenv("WENXIN_CACHE", str(blocked))  # the cache cannot be a folder there
    with wenxin_log(logging.WARNING) as messages:
        np.testing.assert_array_equal(outputs(open_program(sealed, "program.onnx")), plain)
    assert any("loaded as it is, without its weights packed on disk" in m for m in messages)
    monkeypatch.setenv("WENXIN_CACHE", str(tmp_path / "cache2"))
    failed = subprocess.CompletedProcess([], 1, "", "Traceback ...\nMemoryError: no room\n")
    monkeypatch.setattr(onnx_prepacked.subprocess, "run", lambda *a, **k: failed)
    with wenxin_log(logging.WARNING) as messages:
        np.testing.assert_array_equal(outputs(open_program(sealed, "program.onnx")), plain)
    assert any("packing failed: MemoryError: no room" in m for m in messages)
    assert onnx_prepacked.cached_programs() == []
    left = os.listdir(tmp_path / "cache2" / "onnx")
    assert len(left) == 1 and left[0].endswith(".lock")  # nothing half made is left


def test_wenxin_cache_lists_and_clears_the_packed_programs(sealed):
    open_program(sealed, "program.onnx")
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    listed = subprocess.run([sys.executable, "-m", "wenxin", "cache"], capture_output=True, text=True, env=env)
    assert listed.returncode == 0 and "program.onnx" in listed.stdout and "1 packed ONNX program" in listed.stderr
    cleared = subprocess.run([sys.executable, "-m", "wenxin", "cache", "--clear"], capture_output=True, text=True,
                             env=env)
    assert cleared.returncode == 0 and "1 packed ONNX programs deleted" in cleared.stdout
    assert onnx_prepacked.cached_programs() == []


MEMORY = textwrap.dedent("""
    import sys
    import numpy as np
    from wenxin.inference.onnx_backend import open_program, open_session
    def anonymous():
        for line in open("/proc/self/status"):
            if line.startswith("RssAnon"):
                return int(line.split()[1]) * 1024
    folder, how = sys.argv[1], sys.argv[2]
    before = anonymous()
    session = open_program(folder, "program.onnx") if how == "packed" else open_session(folder + "/program.onnx")
    session.run(None, {"x": np.ones((1, 4096), np.float32)})
    print(anonymous() - before)
""")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads Linux's /proc")
def test_the_packed_program_holds_its_weights_in_a_mapped_file_not_on_the_heap(sealed):
    program = os.path.join(sealed, "program.onnx")
    write_program(program, width=4096, depth=2)  # 128 MiB of weights (ONNX Runtime maps tensors this large)
    write_manifest(sealed, 1)
    weights = 2 * 4096 * 4096 * 4
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    held = {}
    for how in ("plain", "packed", "packed"):  # the second packed run finds the copy made by the first
        done = subprocess.run([sys.executable, "-c", MEMORY, sealed, how], capture_output=True, text=True, env=env,
                              check=True)
        held[how] = int(done.stdout.split()[-1])
    assert held["plain"] > 0.9 * weights  # the weights on the heap
    assert held["packed"] < 0.2 * weights  # the packed weights are pages of the mapped file
