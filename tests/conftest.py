"""Shared helpers: small generated data sets and task files for the text-classification task."""
from __future__ import annotations

import atexit
import contextlib
import copy
import json
import logging
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

os.environ.setdefault("GLOG_minloglevel", "2")
os.environ.setdefault("GLOG_v", "0")
# readers with cache: auto and large data, and runs started by tests, keep the token cache here
# (removed when the test session ends)
if "WENXIN_CACHE_DIR" not in os.environ:
    os.environ["WENXIN_CACHE_DIR"] = tempfile.mkdtemp(prefix="wenxin-test-cache-")
    atexit.register(shutil.rmtree, os.environ["WENXIN_CACHE_DIR"], True)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
# the tests' own trainers run as wenxin's entry points run theirs (the BLAS path on AMD CPUs changes
# float rounding, and tests compare in-process runs with command-line ones)
from wenxin.common.process_settings import apply_process_settings  # noqa: E402

apply_process_settings()

try:
    import paddle  # noqa: F401
    PADDLE_INSTALLED = True
except ModuleNotFoundError:  # the fast tier's venv (.ci/run): tests marked "paddle" are skipped
    PADDLE_INSTALLED = False


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "slow: takes over ~20 s; a fast local loop skips them with -m 'not slow'")
    config.addinivalue_line("markers", "paddle: needs Paddle installed (the command line; a real task's model "
                                       "classes); skipped where Paddle is not, as in .ci/run's Paddle-free fast tier")
    import signal
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        # a suite started as a background job of a non-interactive shell ignores SIGINT, and its
        # child processes would inherit that (wenxin keeps a signal the process was started
        # ignoring); a handler is reset to the default in children, so the tests that interrupt
        # a run behave as run from a terminal
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config, items) -> None:
    """The tests marked slow run first: started early, the two xdist workers fill the rest of
    the time around them instead of waiting for one at the end."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    if not PADDLE_INSTALLED:
        skip = pytest.mark.skip(reason="needs Paddle, which is not installed")
        for item in items:
            if item.get_closest_marker("paddle") is not None:
                item.add_marker(skip)


POSITIVE = list("好棒赞优美爱喜乐")
NEGATIVE = list("差烂坏丑慢贵怒悲")
NEUTRAL = list("的了是在我有这个书买东西质量")


def make_sentences(n: int, seed: int) -> List[tuple]:
    """Separable synthetic reviews: the label is which sentiment characters dominate."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        label = rng.randint(0, 1)
        chars = [rng.choice(NEUTRAL) for _ in range(rng.randint(3, 12))]
        chars += [rng.choice(POSITIVE if label else NEGATIVE) for _ in range(rng.randint(1, 3))]
        rng.shuffle(chars)
        rows.append(("".join(chars), label))
    return rows


def write_tsv(path: str, rows: List[tuple]) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write("\t".join(str(c) for c in row) + "\n")
    return path


def fields(max_seq_len: int = 32) -> List[Dict[str, Any]]:
    return [
        {"name": "text_a", "data_type": "string", "reader": {"type": "TextFieldReader"},
         "tokenizer": {"type": "CharTokenizer"}, "max_seq_len": max_seq_len},
        {"name": "label", "data_type": "int", "reader": {"type": "LabelFieldReader"}},
    ]


def task_config(data_dir: str, output: str, model_type: str = "BowClassification", **trainer: Any) -> Dict[str, Any]:
    """A small, fast text-classification config over ``data_dir/{train,dev,test}.tsv``."""
    def reader(name: str, shuffle: bool, batch_size: int) -> Dict[str, Any]:
        return {"name": f"{name}_reader", "type": "BasicDataSetReader", "fields": fields(),
                "config": {"data_path": os.path.join(data_dir, f"{name}.tsv"), "shuffle": shuffle,
                           "batch_size": batch_size}}
    config = {
        "task": "text_classification",
        "dataset_reader": {"train_reader": reader("train", True, 16), "dev_reader": reader("dev", False, 32),
                           "test_reader": reader("test", False, 32)},
        "model": {"type": model_type, "is_dygraph": 1, "embedding": {"emb_dim": 16}, "hidden_size": 16,
                  "dropout": 0.1, "optimization": {"learning_rate": 0.01, "warmup_steps": 3,
                                                   "max_grad_norm": 1.0, "weight_decay": 0.01}},
        "trainer": {"type": "CustomDynamicTrainer", "epoch": 3, "train_log_step": 5, "is_eval_dev": 1,
                    "is_eval_test": 1, "output_path": output, "visualdl": False},
    }
    if model_type == "CnnClassification":
        config["model"].update(num_filters=16, filter_sizes=[2, 3])
    if model_type == "LstmClassification":
        config["model"].update(rnn_hidden_size=16)
    config["trainer"].update(trainer)
    return config


def write_sentence_splits(folder: str, train: int, dev: int, test: int) -> str:
    """``folder/{train,dev,test}.tsv`` of that many labelled sentences (seeds 1, 2, 3); returns it."""
    for name, seed, count in (("train", 1, train), ("dev", 2, dev), ("test", 3, test)):
        write_tsv(os.path.join(folder, f"{name}.tsv"), make_sentences(count, seed=seed))
    return folder


@pytest.fixture
def data_dir(tmp_path) -> str:
    return write_sentence_splits(str(tmp_path / "data"), 240, 60, 60)


@pytest.fixture(scope="module")
def exported_classifier(tmp_path_factory) -> str:
    """A small text classifier, trained for 2 epochs and exported (shared by a test module)."""
    tmp = tmp_path_factory.mktemp("exported")
    data = str(tmp / "data")
    for name, seed, n in (("train", 1, 240), ("dev", 2, 60), ("test", 3, 60)):
        write_tsv(os.path.join(data, f"{name}.tsv"), make_sentences(n, seed))
    trainer = build(task_config(data, str(tmp / "out"), epoch=2, is_eval_test=0), tmp)
    trainer.do_train()
    return trainer.export_inference(str(tmp / "model"))


def with_rules(exported: str, folder: Any, **rules: Any) -> str:
    """A copy of the export whose preprocess.json states ``rules`` (the model class's batching
    and oneDNN rules), sealed again; Paddle's model only."""
    from wenxin.data.export_bundle import seal_export
    shutil.copytree(exported, folder)
    if os.path.exists(os.path.join(folder, "model.onnx")):
        os.remove(os.path.join(folder, "model.onnx"))
    path = os.path.join(folder, "preprocess.json")
    with open(path, encoding="utf-8") as f:
        meta = json.load(f)
    meta.update(rules)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(meta, f)
    seal_export(str(folder))
    return str(folder)


# a script that has not ended by then hangs: a guard, not a timing (the chat example's training took over
# 600 s beside two CPU-bound processes and a busy suite on 2 cores)
SCRIPT_SECONDS = int(os.environ.get("WENXIN_TEST_SCRIPT_SECONDS", "1800"))


def run_script(cwd: Any, args: List[str], script: str = "run_trainer.py") -> subprocess.CompletedProcess:
    """A script of this checkout (``wenxin/cli.py`` for ``wenxin ...``) run in ``cwd``, importing
    this checkout's wenxin."""
    env = {**os.environ, "GLOG_minloglevel": "2", "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, os.path.join(REPO, script), *args], cwd=str(cwd), capture_output=True,
                          text=True, timeout=SCRIPT_SECONDS, env=env)


def write_config(path: str, config: Dict[str, Any]) -> str:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
    return path


def build(config: Dict[str, Any], tmp_path, overrides: Optional[List[str]] = None):
    """Validate a config dict through the real loader and build its trainer."""
    from wenxin.config.loader import load_config
    from wenxin.runner import build_trainer
    path = write_config(str(tmp_path / f"task_{random.random():.8f}.json"), copy.deepcopy(config))
    return build_trainer(load_config(path, overrides or []))


LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING) [\w.]+: ")  # logs.LOG_FORMAT


def read_until(stream: Any, marker: str, timeout: float = 300.0) -> str:
    """Read lines from ``stream`` (a child's stderr, text mode) until one holds ``marker`` (a state
    the child has reached, e.g. a log line), or the stream ends; returns what was read. A child
    that neither says it nor ends within ``timeout`` seconds fails the test (a hang)."""
    import threading
    read: List[str] = []
    found = threading.Event()

    def reader() -> None:
        for line in iter(stream.readline, ""):
            read.append(line)
            if marker in line:
                break
        found.set()
    threading.Thread(target=reader, daemon=True).start()
    assert found.wait(timeout), f"no {marker!r} within {timeout} s; read so far:\n{''.join(read)[-2000:]}"
    return "".join(read)


def without_log(text: str) -> List[str]:
    """The lines of ``text`` (a command's stderr) that are not log records (a record's indented
    continuation lines included)."""
    kept: List[str] = []
    in_record = False
    for line in text.strip().splitlines():
        if LOG_LINE.match(line):
            in_record = True
        elif not (in_record and line.startswith("  ")):
            in_record = False
            kept.append(line)
    return kept


def assert_one_error_block(code: int, out: str, err: str, expected: Any = (), started: bool = False) -> List[str]:
    """A command that refused its input: exit 2, 3 or 4 (a task-file, data or checkpoint problem),
    stderr is exactly one ``error:`` block (one line, or a header and indented problem lines)
    holding every ``expected`` text, no traceback, and (unless ``started``: a problem only a
    running loop can meet) no training started. Returns the block's lines."""
    assert code in (2, 3, 4), (code, out[-2000:], err[-2000:])
    lines = without_log(err)  # the log goes to stderr too
    assert lines and lines[0].startswith("error: "), err[-3000:]
    assert all(line.startswith("  ") for line in lines[1:]), err[-3000:]
    assert "Traceback" not in err and "Traceback" not in out
    assert started or ("training (" not in err and "training (" not in out)
    for text in ([expected] if isinstance(expected, str) else expected):
        assert text in err, (text, err)
    return lines


@pytest.fixture
def hang_guard():
    """Fails a test (instead of hanging CI) if it runs longer than the given seconds."""
    import signal

    def on_alarm(signum, frame):
        raise TimeoutError("the case hung")

    previous = signal.signal(signal.SIGALRM, on_alarm)

    def arm(seconds: int = 60) -> None:
        signal.alarm(seconds)

    yield arm
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def checkpoint_params(folder: str) -> Dict[str, Any]:
    """A checkpoint's parameters (numpy arrays by structured name)."""
    from wenxin.controller.checkpoint import MODEL_FILE
    from wenxin.common.state_io import load_arrays
    return load_arrays(os.path.join(str(folder), MODEL_FILE), "model")


def checkpoint_state(folder: str, name: str = "extra") -> Dict[str, Any]:
    """A checkpoint's extra (``"extra"``) or optimizer (``"optimizer"``) state."""
    from wenxin.common.state_io import load_state
    return load_state(str(folder), name, name)


# ---- helpers shared by several test modules ---------------------------------------------------------
from wenxin.common.registry import RegisterSet  # noqa: E402
from wenxin.controller.hooks import HookBase  # noqa: E402


@RegisterSet.hooks.register("StopAtStepHook")
class StopAtStepHook(HookBase):
    """Test hook: asks the trainer to stop after a given step (a clean interruption)."""

    from wenxin.config.schema import Key
    config_schema = {"step": Key(int)}

    def __init__(self, step: int) -> None:
        self.step = step

    def after_step(self) -> None:
        if self.trainer.state.global_step == self.step:
            self.trainer.state.should_stop = True
            self.trainer.state.stop_reason = f"test stop at {self.step}"



def saved_checkpoint(checkpoints: str) -> Optional[str]:
    """The checkpoint a run would continue from, as the published ``index.json`` in the
    ``checkpoints`` folder names it (None before the first save)."""
    try:
        with open(os.path.join(checkpoints, "index.json"), encoding="utf-8") as f:
            return json.load(f).get("latest")
    except (OSError, ValueError):
        return None


def start_training(path: str) -> subprocess.Popen:
    """``run_trainer.py --param_path path`` in the background (stderr kept for the assertion)."""
    return subprocess.Popen([sys.executable, os.path.join(REPO, "run_trainer.py"), "--param_path", path],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "GLOG_minloglevel": "2"})


def sigkill_at_random_moments(path: str, out: str, rng: random.Random, runs: int = 4) -> int:
    """Start the run of task file ``path`` (``resume: auto``, checkpoints in ``out``) ``runs``
    times; each time wait until it has saved once, then SIGKILL it somewhere in a step or a save.
    Returns how many runs were killed (a run may finish first)."""
    import signal
    import time
    checkpoints = os.path.join(out, "checkpoints")
    kills = 0
    for _ in range(runs):
        before = saved_checkpoint(checkpoints)
        proc = start_training(path)
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:  # wait until this run has saved once
            if saved_checkpoint(checkpoints) not in (None, before):
                break
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.4))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait(timeout=60)
    return kills


def resumed_run_matches_reference(tmp_path: Any, config_of: Callable[[str], Dict[str, Any]], steps: int,
                                  rng: random.Random, runs: int = 3, min_kills: int = 1) -> Dict[str, Any]:
    """The exact-resume check: the task ``config_of(out)`` (``resume: auto``, saving every few
    steps, ending at ``steps``) runs once uninterrupted into ``tmp_path/reference``, then into
    ``tmp_path/killed`` SIGKILLed at random moments ``runs`` times (at least ``min_kills`` of them
    killed) and resumed to the end. The two final checkpoints must hold the same parameters bit
    for bit. Returns the reference's parameters (its output folder is ``tmp_path/reference``)."""
    import numpy as np
    reference, out = str(tmp_path / "reference"), str(tmp_path / "killed")
    proc = start_training(write_config(str(tmp_path / "reference.json"), config_of(reference)))
    assert proc.wait(timeout=600) == 0, proc.stderr.read()
    path = write_config(str(tmp_path / "killed.json"), config_of(out))
    assert sigkill_at_random_moments(path, out, rng, runs=runs) >= min_kills
    proc = start_training(path)  # resume to the end
    assert proc.wait(timeout=600) == 0, proc.stderr.read()
    expected = checkpoint_params(os.path.join(reference, "checkpoints", f"step_{steps}"))
    got = checkpoint_params(os.path.join(out, "checkpoints", f"step_{steps}"))
    assert sorted(got) == sorted(expected)
    for name in expected:
        np.testing.assert_array_equal(np.asarray(got[name]), np.asarray(expected[name]), err_msg=name)
    return expected


def write_jsonl(path: str, rows: List[Any]) -> str:
    """JSON lines at ``path`` (folders made): each row dumped, or written as it is if a string."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write((row if isinstance(row, str) else json.dumps(row, ensure_ascii=False)) + "\n")
    return path


def losses_of(out: str) -> Dict[int, float]:
    """The logged training loss of each step of a run (from its metrics.jsonl)."""
    with open(os.path.join(out, "logs", "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    return {r["step"]: r["loss"] for r in records if r["tag"] == "train"}


def losses_in_both_modes(tmp_path: Any, config_of: Callable[[str, str], Dict[str, Any]]) -> Dict[int, float]:
    """Train ``config_of(mode, out)`` in eager and static mode (into ``tmp_path/<mode>``); each
    step's loss must agree to 1e-4 (relative above 1). Returns the eager run's losses by step."""
    losses = {}
    for mode in ("dynamic", "static"):
        out = str(tmp_path / mode)
        build(config_of(mode, out), tmp_path).do_train()
        losses[mode] = losses_of(out)
    assert sorted(losses["dynamic"]) == sorted(losses["static"])
    for step, loss in losses["dynamic"].items():
        assert abs(loss - losses["static"][step]) <= 1e-4 * max(1.0, abs(loss)), (step, loss, losses["static"][step])
    return losses["dynamic"]


def resume_config(data_dir, out, **extra):
    config = task_config(data_dir, out, epoch=3, train_log_step=1, save_model_step=7, is_eval_test=0,
                         eval_step=10, **extra)
    config["model"]["dropout"] = 0.3  # dropout makes the RNG state part of what must resume
    return config


def plain_sgd(config, lr=0.1, **opt):
    config["model"]["dropout"] = 0.0
    config["model"]["optimization"] = {"optimizer": "sgd", "learning_rate": lr, "lr_scheduler": "constant", **opt}
    config["dataset_reader"]["train_reader"]["config"]["shuffle"] = False
    return config



def make_tabular(n: int, seed: int, dim: int = 8) -> List[tuple]:
    """Separable tabular rows: ``"x1 x2 ... xd"`` and a label from the first two features."""
    import numpy as np
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
def tab_dir(tmp_path) -> str:
    """Generated tabular train/dev data (8 features, 2 classes)."""
    folder = str(tmp_path / "tab")
    write_tsv(os.path.join(folder, "train.tsv"), make_tabular(400, 1))
    write_tsv(os.path.join(folder, "dev.tsv"), make_tabular(100, 2))
    return folder


def wait_for(predicate: Callable[[], bool], seconds: float = 120.0, what: str = "", poll: float = 0.1) -> None:
    """Call ``predicate`` until it is true (a state, not a time); fail after ``seconds`` (a hang)."""
    import time
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(poll)
    raise AssertionError(f"timed out waiting for {what}")


def wait_until_serving(server: Any, port: int, log_path: str, seconds: float = 300.0) -> None:
    """Ask a ``wenxin serve`` process's /health until it answers 200 (its state, not a fixed wait);
    fail with its log if it exits first or never does."""
    import urllib.request

    def serving() -> bool:
        if server.poll() is not None:
            with open(log_path, encoding="utf-8") as f:
                raise AssertionError(f"the service exited:\n{f.read()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
                return response.status == 200
        except OSError:
            return False
    wait_for(serving, seconds, f"the service on port {port} to serve", poll=0.2)


def metric_value(port: int, name: str) -> Optional[float]:
    """The sample ``name`` of a service's /metrics (None when it has none)."""
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
        text = answer.read().decode("utf-8")
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")]
    return values[0] if values else None


def wait_for_metric(port: int, name: str, at_least: float, timeout: float = 120.0) -> None:
    """Ask a service's /metrics until the sample ``name`` reaches ``at_least``."""
    def reached() -> bool:
        value = metric_value(port, name)
        return value is not None and value >= at_least
    wait_for(reached, timeout, f"{name} to reach {at_least}", poll=0.02)


def wait_until_refused(port: int, timeout: float = 120.0) -> None:
    """Connect to ``port`` until the connection is refused: the service has stopped listening."""
    import socket

    def refused() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=30).close()
        except ConnectionRefusedError:
            return True
        return False
    wait_for(refused, timeout, f"port {port} to refuse connections", poll=0.02)


def answer_across_sigterm(proc: subprocess.Popen, port: int) -> bytes:
    """Send half of a /predict request to a ``wenxin serve`` process; once the service counts it
    in flight, SIGTERM it; once it has stopped listening, send the rest; return what came back (a
    draining service answers it)."""
    import signal
    import socket
    good = json.dumps({"texts": ["好"]}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(good) + good[:5])
        wait_for_metric(port, "wenxin_predict_in_flight", 1)
        proc.send_signal(signal.SIGTERM)
        wait_until_refused(port)
        sock.sendall(good[5:])
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    return answer


@contextlib.contextmanager
def wenxin_log(level: int = logging.INFO) -> Iterator[List[str]]:
    """The messages the ``wenxin`` logger emits inside the block. (pytest's caplog listens on the
    root logger, which ``setup_logging`` stops ``wenxin``'s records from reaching.)"""
    logger, messages = logging.getLogger("wenxin"), []
    handler = logging.Handler(level)
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


FAST_TIER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fast") + os.sep


@pytest.fixture(autouse=True)
def no_paddle_operations_in_the_fast_tier(request, monkeypatch):
    """The fast tier (tests/fast) runs no Paddle operation: building a layer, making a tensor,
    an executor, a DataLoader, saving or exporting with Paddle fails the test there."""
    if not str(request.node.fspath).startswith(FAST_TIER):
        yield
        return
    try:
        import paddle
    except ImportError:  # a venv without Paddle (.ci/run's fast tier): nothing to refuse
        yield
        return

    def refuse(what):
        def refused(*args, **kwargs):
            raise AssertionError(f"the fast tier runs no Paddle operation, and this test called {what}: move it to "
                                 f"tests/ (or give it the numpy engine, tests/fast/fake_engine.py)")
        return refused

    for owner, name in ((paddle, "to_tensor"), (paddle.nn.Layer, "__init__"), (paddle.static, "Executor"),
                        (paddle.static, "program_guard"), (paddle.jit, "save"), (paddle, "save"),
                        (paddle.io, "DataLoader"), (paddle.inference, "create_predictor")):
        monkeypatch.setattr(owner, name, refuse(f"paddle{'' if owner is paddle else '.' + owner.__name__.split('.')[-1]}"
                                                f".{name}"))
    yield
