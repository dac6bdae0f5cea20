"""Red team, signals: Ctrl-C and SIGTERM end a run at any moment with one error line (before
training) or a checkpoint (during training, tests/test_checkpoint.py); never a traceback or a hang."""
import os
import signal
import subprocess
import sys

import pytest

from conftest import (REPO, assert_one_error_block, make_sentences, read_until, task_config, without_log, write_config,
                      write_tsv)


def listening_to_sigint() -> None:
    """(in the child) SIGINT at its default: a suite started as a background job of a
    non-interactive shell passes on SIG_IGN for SIGINT, which wenxin rightly keeps."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="module")
def big_train_file(tmp_path_factory):
    """400,000 training lines (several seconds to read): written once for the module."""
    path = str(tmp_path_factory.mktemp("big") / "train.tsv")
    write_tsv(path, make_sentences(400_000, seed=5))
    return path


@pytest.mark.parametrize("sig,code,message", [("SIGINT", 130, "error: interrupted"),
                                              ("SIGTERM", 143, "error: terminated (SIGTERM)")])
@pytest.mark.parametrize("stage", ["; loading Paddle", "train_reader: loading data from"])  # the log line before it
def test_a_signal_before_training_ends_the_run_cleanly(tmp_path, data_dir, big_train_file, sig, code, message, stage):
    """The signal is sent once the run says it has reached ``stage`` (Paddle loading: 1-3 s;
    reading 400,000 lines: several seconds), not after a fixed time, so a busy machine sends it
    in the same stage."""
    config = task_config(data_dir, str(tmp_path / "out"))
    config["dataset_reader"]["train_reader"]["config"]["data_path"] = big_train_file
    path = write_config(str(tmp_path / "task.json"), config)
    proc = subprocess.Popen([sys.executable, os.path.join(REPO, "run_trainer.py"), "--param_path", path],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "GLOG_minloglevel": "2"}, preexec_fn=listening_to_sigint)
    try:
        before = read_until(proc.stderr, stage)
        proc.send_signal(getattr(signal, sig))
        out, err = proc.communicate(timeout=120)
    finally:  # never leave a run training behind the rest of the suite
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    err = before + err
    assert stage in before, err[-2000:]
    assert "training (" not in err, err[-2000:]  # the stage holds until the signal has been taken
    assert_one_error_block(proc.returncode if proc.returncode != code else 2, out, err, message)
    assert proc.returncode == code and without_log(err) == [message]
    assert not os.path.exists(tmp_path / "out" / "checkpoints")


@pytest.mark.slow
def test_a_run_started_ignoring_sigint_keeps_ignoring_it(tmp_path, data_dir, big_train_file):
    """A background job of a non-interactive shell starts with SIGINT ignored: wenxin keeps it so
    while Paddle loads, while data is read and while it trains (it used to catch it in some
    stages only)."""
    config = task_config(data_dir, str(tmp_path / "out"), max_steps=400)
    config["dataset_reader"]["train_reader"]["config"]["data_path"] = big_train_file
    path = write_config(str(tmp_path / "task.json"), config)
    proc = subprocess.Popen([sys.executable, os.path.join(REPO, "run_trainer.py"), "--param_path", path],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "GLOG_minloglevel": "2"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    read = ""
    try:
        for stage in ("; loading Paddle", "train_reader: loading data from", "training ("):
            read += read_until(proc.stderr, stage)
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    err = read + err
    assert proc.returncode == 0, err[-2000:]
    assert "received SIGINT" not in out + err and "done: step 400 of 400" in out


def test_a_signal_held_while_paddle_loads_survives_a_handler_installed_meanwhile(tmp_path):
    """``import paddle`` installs C signal handlers part way through; a SIGTERM arriving after
    that must still end the command with wenxin's own error, not Paddle's handler (or the default
    action a library leaves). Stood in for by a block that sets SIGTERM to its default action and
    then receives it."""
    code = ("import os, signal, sys\n"
            "from wenxin.common.process import Terminated, deferred_signals\n"
            "try:\n"
            "    with deferred_signals():\n"
            "        signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
            "        os.kill(os.getpid(), signal.SIGTERM)\n"
            "        print('still running', flush=True)\n"
            "except Terminated:\n"
            "    print('terminated after the block', flush=True)\n"
            "    sys.exit(143)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": REPO})
    assert proc.returncode == 143 and proc.stdout.split() == ["still", "running", "terminated", "after", "the", "block"], \
        proc
