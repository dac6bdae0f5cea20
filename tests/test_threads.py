"""trainer.environment.cpu_threads: each training process gets its share of the cores it may use, unless the
task file or the user's OMP_NUM_THREADS says otherwise."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import REPO, run_script, task_config, write_config
from wenxin.common import threads


def test_automatic_threads_share_the_cores_among_the_local_processes():
    assert threads.choose_threads(0, {}, cores=2) == (2, "the 2 cores this process may use")
    assert threads.choose_threads(0, {"PADDLE_LOCAL_SIZE": "2"}, cores=8)[0] == 4
    assert threads.choose_threads(0, {"PADDLE_LOCAL_SIZE": "3"}, cores=2)[0] == 1  # never 0
    assert threads.choose_threads(0, {"PADDLE_LOCAL_SIZE": "x"}, cores=2)[0] == 2


def test_a_parents_share_caps_the_automatic_threads():
    """wenxin sweep gives each of its parallel trials cores // parallel (WENXIN_CPU_SHARE)."""
    assert threads.choose_threads(0, {"WENXIN_CPU_SHARE": "1"}, cores=2) == \
        (1, "the share of 1 core its parent gave it (WENXIN_CPU_SHARE)")
    assert threads.choose_threads(0, {"WENXIN_CPU_SHARE": "3"}, cores=8)[0] == 3
    assert threads.choose_threads(0, {"WENXIN_CPU_SHARE": "8"}, cores=2)[0] == 2  # never above the cores
    for bad in ("0", "-1", "x", ""):
        assert threads.choose_threads(0, {"WENXIN_CPU_SHARE": bad}, cores=2)[0] == 2
    assert threads.choose_threads(2, {"WENXIN_CPU_SHARE": "1"}, cores=2)[0] == 2  # the task file's count wins


def test_the_task_file_and_then_the_users_variable_win():
    assert threads.choose_threads(3, {"PADDLE_LOCAL_SIZE": "2"}, cores=8, user=5) == (3, "trainer.environment.cpu_threads")
    assert threads.choose_threads(0, {}, cores=8, user=5) == (5, "OMP_NUM_THREADS set by the user")


def test_a_cgroup_quota_caps_the_cores(tmp_path):
    affinity = len(os.sched_getaffinity(0))
    quota = tmp_path / "cpu.max"
    quota.write_text("100000 100000\n")
    assert threads.available_cores(str(quota)) == 1
    quota.write_text("50000 100000\n")  # half a core is still one thread
    assert threads.available_cores(str(quota)) == 1
    quota.write_text("max 100000\n")
    assert threads.available_cores(str(quota)) == affinity
    assert threads.available_cores(str(tmp_path / "missing")) == affinity


def test_only_the_users_own_variable_counts():
    assert threads.user_threads({"OMP_NUM_THREADS": "3"}) == 3
    for value in ("1", "0", "x", ""):  # 1 is what Paddle writes when it loads, and its children inherit
        assert threads.user_threads({"OMP_NUM_THREADS": value}) is None
    assert threads.user_threads({}) is None
    code = "import wenxin, paddle, os; from wenxin.common import threads; print(threads.USER_THREADS)"
    env = {**os.environ, "PYTHONPATH": REPO, "OMP_NUM_THREADS": "3"}
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=env).stdout.split() == ["3"]


def test_a_small_model_or_a_busy_machine_gets_fewer_threads():
    """The share stands for a large model on free cores; a small model gets one thread; other work
    keeping cores busy (the load average) leaves the threads the free cores, at least one."""
    big = threads.SMALL_MODEL_PARAMETERS
    def busy(cores):
        return lambda: cores

    def unasked():
        raise AssertionError("the machine is measured only where its load decides")

    big = threads.SMALL_MODEL_PARAMETERS
    assert threads.fit_to_work(2, big, busy(0.2), 2) == (2, "")
    assert threads.fit_to_work(2, big - 1, unasked, 2)[0] == 1
    assert "a model of 999,999 parameters" in threads.fit_to_work(2, big - 1, unasked, 2)[1]
    assert threads.fit_to_work(2, big, busy(1.2), 2) == (1, "2 cores, 1.2 of them busy with other work")
    assert threads.fit_to_work(2, big, busy(5.0), 2)[0] == 1  # never 0
    assert threads.fit_to_work(8, big, busy(3.0), 8) == (5, "8 cores, 3.0 of them busy with other work")
    assert threads.fit_to_work(4, big, busy(3.0), 8) == (4, "")  # 4 of 8 cores, 5 free: the share stands
    assert threads.fit_to_work(1, 10, unasked, 8) == (1, "")
    static_big = threads.STATIC_MODEL_PARAMETERS
    assert threads.fit_to_work(2, static_big - 1, unasked, 2, static=True)[0] == 1  # the executor's own threads
    assert "a static program of 7,999,999 parameters" in threads.fit_to_work(2, static_big - 1, unasked, 2,
                                                                               static=True)[1]
    assert threads.fit_to_work(2, static_big, busy(0.0), 2, static=True) == (2, "")
    assert threads.fit_to_work(2, static_big, busy(2.0), 2, static=True)[0] == 1


def test_other_processes_cpu_time_counts_as_busy_cores(tmp_path, monkeypatch):
    """/proc/stat's busy ticks (user, nice, system, irq, softirq, steal) less this process's own."""
    stat = tmp_path / "stat"
    samples = iter(["cpu  100 0 100 900 50 0 0 0 0 0\n", "cpu  250 0 150 1000 60 0 0 0 0 0\n"])

    def fake_open(path, *args, **kwargs):
        assert path == str(stat)
        stat.write_text(next(samples))
        return open(stat, *args, **kwargs)

    monkeypatch.setattr(threads, "PROC_STAT", str(stat))
    monkeypatch.setattr(threads, "open", fake_open, raising=False)
    monkeypatch.setattr(threads.os, "sysconf", lambda name: 100)
    own = iter([(1.0, 0.5, 0, 0, 0), (1.2, 0.55, 0, 0, 0)])
    monkeypatch.setattr(threads.os, "times", lambda: next(own))
    monkeypatch.setattr(threads.time, "sleep", lambda seconds: None)
    # 200 busy ticks = 2.0 s of CPU, 0.25 s of it this process's, over 0.5 s: 3.5 cores of others
    assert threads.busy_cores_of_others(0.5) == pytest.approx(3.5)
    monkeypatch.setattr(threads, "PROC_STAT", str(tmp_path / "missing"))
    monkeypatch.setattr(threads, "open", open, raising=False)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (0.7, 0, 0))
    assert threads.busy_cores_of_others(0.5) == 0.7  # no /proc/stat: the load average


def test_a_training_run_says_how_many_threads_it_uses(tmp_path, data_dir):
    config = task_config(data_dir, str(tmp_path / "out"), epoch=1, is_eval_dev=0, is_eval_test=0, cpu_threads=1)
    path = write_config(str(tmp_path / "task.json"), config)
    proc = run_script(tmp_path, ["--param_path", path])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "CPU kernels: 1 thread (trainer.environment.cpu_threads)" in proc.stderr + proc.stdout
    proc = run_script(tmp_path, ["--param_path", path, "--set", "trainer.cpu_threads=0",
                                 "--set", f"trainer.output_path={tmp_path / 'out2'}"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    if threads.available_cores() > 1:  # the test's model is small
        assert "CPU kernels: 1 thread (a model of " in proc.stderr


def test_a_resumed_run_keeps_the_thread_count_of_the_run_it_continues(tmp_path, data_dir, monkeypatch):
    """Automatic threads of a large model depend on the machine's load; the resumed run must add
    its sums in the same order as the run it continues, whatever the load is now."""
    from conftest import build, wenxin_log
    from wenxin.controller.checkpoint import read_trainer_state
    monkeypatch.setattr(threads, "SMALL_MODEL_PARAMETERS", 0)  # the test's model counts as large
    monkeypatch.setattr(threads, "available_cores", lambda *a: 4)
    monkeypatch.setattr(threads, "busy_cores_of_others", lambda: 1.0)  # 3 cores free
    monkeypatch.setattr(threads, "USER_THREADS", None)
    monkeypatch.delenv("PADDLE_LOCAL_SIZE", raising=False)
    config = task_config(data_dir, str(tmp_path / "out"), max_steps=4, save_model_step=2, is_eval_dev=0,
                         is_eval_test=0, resume="auto")
    first = build(config, tmp_path)
    assert first.cpu_threads == 3
    first.do_train()
    assert read_trainer_state(str(tmp_path / "out" / "checkpoints" / "step_4"))["cpu_threads"] == 3
    monkeypatch.setattr(threads, "busy_cores_of_others", lambda: 0.0)  # idle now: 4 would be the choice
    config["trainer"]["max_steps"] = 6
    with wenxin_log() as log:
        assert build(config, tmp_path).cpu_threads == 3
    assert any("CPU kernels: 3 threads (as in the run this one resumes" in line for line in log)
    monkeypatch.setattr(threads, "busy_cores_of_others", lambda: 3.0)
    assert build(task_config(data_dir, str(tmp_path / "fresh"), max_steps=2, is_eval_dev=0, is_eval_test=0),
                 tmp_path).cpu_threads == 1


def test_static_programs_run_their_ops_on_the_thread_that_set_the_count(tmp_path, data_dir):
    """OpenMP's thread count holds per thread; the static executor's own threads would keep 1."""
    import paddle

    from conftest import build
    config = task_config(data_dir, str(tmp_path / "out"), epoch=1, is_eval_dev=0, is_eval_test=0, cpu_threads=2)
    config["model"]["is_dygraph"] = 0
    config["trainer"]["type"] = "CustomStaticTrainer"
    paddle.set_flags({"FLAGS_new_executor_serial_run": False})
    build(config, tmp_path)
    assert paddle.get_flags(["FLAGS_new_executor_serial_run"])["FLAGS_new_executor_serial_run"] is True


@pytest.mark.parametrize("users_setting", [None, "1"])
def test_eager_views_are_made_contiguous_on_cpu_unless_the_user_set_the_flag(tmp_path, data_dir, monkeypatch,
                                                                               users_setting):
    import paddle
    from conftest import build
    flag = "FLAGS_use_stride_kernel"
    before = paddle.get_flags([flag])[flag]
    if users_setting is not None:
        monkeypatch.setenv(flag, users_setting)
    paddle.set_flags({flag: True})
    try:
        trainer = build(task_config(data_dir, str(tmp_path / "out"), epoch=1, is_eval_dev=0, is_eval_test=0,
                                    cpu_threads=1), tmp_path)
        trainer.do_train()
        assert paddle.get_flags([flag])[flag] is (users_setting is not None)
    finally:
        paddle.set_flags({flag: before})
