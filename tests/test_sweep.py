"""``wenxin sweep``: a 4-trial grid through the CLI, its results table checked against the
trials' own logs, and the same table after the sweep is SIGKILLed and started again."""
import csv
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import REPO, task_config, write_config

GRID = {"model.hidden_size": [8, 16], "model.optimization.learning_rate": [0.01, 0.05]}


def loss_task(tmp_path, data_dir, **trainer):
    """The task file the sweeps run: dev loss decides, no test evaluation."""
    config = task_config(data_dir, str(tmp_path / "unused"), is_eval_test=0, metric="loss", metric_mode="min",
                         **trainer)
    return write_config(str(tmp_path / "task.json"), config)


def sweep_trials(folder):
    with open(os.path.join(folder, "sweep.json"), encoding="utf-8") as f:
        return json.load(f)["trials"]


def kill_while_second_trial_trains(proc, folder):
    """SIGKILL the sweep (one trial at a time) once its first trial is done and its second has
    saved a checkpoint; returns the trials as sweep.json had them then."""
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            trials = sweep_trials(folder)
        except (OSError, ValueError):
            trials = []
        if len(trials) >= 2 and trials[0]["status"] == "done" and trials[1]["status"] == "running" and \
                os.path.isfile(os.path.join(folder, "trial_001", "checkpoints", "latest")):
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    time.sleep(1.0)  # the orphaned trial got SIGTERM: it saves a checkpoint and stops
    return trials


def sweep_files(tmp_path, data_dir, name, parallel):
    task = loss_task(tmp_path, data_dir, max_steps=40, eval_step=10, save_model_step=5)
    spec = {"method": "grid", "parallel": parallel, "output": str(tmp_path / name), "parameters": GRID}
    return task, write_config(str(tmp_path / f"{name}.json"), spec)


def start(task, spec):
    return subprocess.Popen([sys.executable, "-m", "wenxin.cli", "sweep", "--param_path", task, "--sweep", spec],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "GLOG_minloglevel": "2", "PYTHONPATH": REPO})


def table(folder):
    with open(os.path.join(folder, "results.csv"), encoding="utf-8") as f:
        return list(csv.DictReader(f))


def dev_losses(trial_folder):
    with open(os.path.join(trial_folder, "logs", "metrics.jsonl"), encoding="utf-8") as f:
        return {r["step"]: r["loss"] for r in map(json.loads, f) if r["tag"] == "dev"}


def check_table(folder):
    """The table against the trials' own logs and configs; returns {trial: (loss, step)}."""
    rows = table(folder)
    assert [r["status"] for r in rows] == ["done"] * 4
    combos = [(h, lr) for h in GRID["model.hidden_size"] for lr in GRID["model.optimization.learning_rate"]]
    found = {}
    for row in rows:
        trial = int(row["trial"])
        hidden, lr = combos[trial]  # grid order: the first key varies slowest
        assert (int(row["model.hidden_size"]), float(row["model.optimization.learning_rate"])) == (hidden, lr)
        trial_folder = os.path.join(folder, row["folder"])
        with open(os.path.join(trial_folder, "config.json"), encoding="utf-8") as f:
            resolved = json.load(f)
        assert resolved["model"]["hidden_size"] == hidden
        assert resolved["model"]["optimization"]["learning_rate"] == lr
        losses = dev_losses(trial_folder)
        best_step = min(losses, key=lambda s: (losses[s], s))
        assert float(row["best dev loss"]) == pytest.approx(losses[best_step], rel=1e-5)
        assert int(row["step"]) == best_step
        found[trial] = (losses[best_step], best_step)
    losses_in_table = [float(r["best dev loss"]) for r in rows]
    assert losses_in_table == sorted(losses_in_table)  # best first
    best = min(found, key=lambda t: (found[t][0], t))
    with open(os.path.join(folder, "best_config.json"), encoding="utf-8") as f:
        best_config = json.load(f)
    assert best_config["model"]["hidden_size"] == combos[best][0]
    assert best_config["model"]["optimization"]["learning_rate"] == combos[best][1]
    markdown = open(os.path.join(folder, "results.md"), encoding="utf-8").read().splitlines()
    assert len(markdown) == 6 and markdown[2].startswith(f"| {best} | done |")
    return found


@pytest.mark.slow
def test_a_grid_sweep_and_its_resume_after_a_kill_give_the_same_table(tmp_path, data_dir):
    task, spec = sweep_files(tmp_path, data_dir, "straight", parallel=2)
    proc = start(task, spec)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert "sweep: 4 trials done, 0 failed" in out
    straight = check_table(str(tmp_path / "straight"))
    log = open(tmp_path / "straight" / "trial_000" / "sweep_trial.log", encoding="utf-8").read()
    assert "CPU kernels: 1 thread" in log  # 2 cores shared by 2 trials

    # one trial at a time; killed (SIGKILL) while a later trial trains
    task, spec = sweep_files(tmp_path, data_dir, "killed", parallel=1)
    folder = str(tmp_path / "killed")
    kill_while_second_trial_trains(start(task, spec), folder)
    first_log = open(os.path.join(folder, "trial_000", "sweep_trial.log"), encoding="utf-8").read()
    proc = start(task, spec)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert "1 of 4 trials finished before; running the other 3" in out + err
    assert open(os.path.join(folder, "trial_000", "sweep_trial.log"), encoding="utf-8").read() == first_log
    assert "resumed from" in open(os.path.join(folder, "trial_001", "sweep_trial.log"), encoding="utf-8").read()
    resumed = check_table(folder)
    for trial, (loss, step) in straight.items():  # the same runs: the same results
        assert resumed[trial][1] == step and resumed[trial][0] == pytest.approx(loss, rel=1e-5)


def test_bad_sweep_files_are_one_error_naming_the_key(tmp_path, data_dir):
    config = task_config(data_dir, str(tmp_path / "out"), max_steps=2, is_eval_test=0)
    task = write_config(str(tmp_path / "task.json"), config)
    cases = [({"parameters": {"model.hidden_size": {"min": 4, "max": 8}}}, "grid search needs a list of values"),
             ({"method": "bayes", "parameters": {"model.hidden_size": [4]}}, "method: grid, random or optuna"),
             ({"parameters": {"model.hidden_sise": [4, 8]}}, "model.hidden_sise"),
             ({"parameters": {"model.hidden_size": ["big"]}}, "model.hidden_size"),
             ({"parallel": 0, "parameters": {"model.hidden_size": [4]}}, "parallel: a positive integer")]
    for spec, message in cases:
        path = write_config(str(tmp_path / "sweep.json"), spec)
        proc = start(task, path)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2 and message in err and "Traceback" not in err, (spec, err)
        assert not os.path.exists(tmp_path / "out" / "sweep")


def test_an_optuna_sweep_prunes_weak_trials_from_their_dev_metric(tmp_path, data_dir):
    pytest.importorskip("optuna")
    import optuna
    task = loss_task(tmp_path, data_dir, max_steps=30, eval_step=5, save_model_step=10)
    folder = str(tmp_path / "optuna")
    # learning rates over 4 decades: the small ones barely move the loss, and are pruned
    spec = {"method": "optuna", "trials": 6, "seed": 3, "output": folder,
            "parameters": {"model.optimization.learning_rate": {"min": 1e-5, "max": 0.1, "log": True}}}
    proc = start(task, write_config(str(tmp_path / "optuna.json"), spec))
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    rows = table(folder)
    assert len(rows) == 6 and {r["status"] for r in rows} <= {"done", "pruned"}
    pruned = [r for r in rows if r["status"] == "pruned"]
    assert pruned, rows
    study = optuna.load_study(study_name="sweep", storage=f"sqlite:///{folder}/optuna.db")
    states = {t.number: t.state.name for t in study.trials}
    trials = sweep_trials(folder)
    for trial in trials:
        assert states[trial["optuna"]] == {"done": "COMPLETE", "pruned": "PRUNED"}[trial["status"]]
        losses = dev_losses(os.path.join(folder, f"trial_{trial['trial']:03d}"))
        reported = study.trials[trial["optuna"]].intermediate_values
        assert reported == {step: pytest.approx(loss, rel=1e-6) for step, loss in losses.items()}
        if trial["status"] == "pruned":
            # stopped at the step it was pruned: its best loss so far was worse than the median of
            # the earlier finished trials' losses at that step (Optuna's median pruner)
            last = max(losses)
            assert last < 30
            earlier = [study.trials[t["optuna"]].intermediate_values[last] for t in trials
                       if t["optuna"] < trial["optuna"] and t["status"] == "done"]
            assert earlier and min(losses.values()) > float(np.median(earlier))
    best = min((t for t in trials if t["status"] == "done"), key=lambda t: (t["metric"], t["trial"]))
    assert study.best_trial.number == best["optuna"]
    assert rows[0]["trial"] == str(best["trial"])


@pytest.mark.slow
def test_an_optuna_sweep_killed_mid_trial_resumes_that_trial_with_its_values(tmp_path, data_dir):
    pytest.importorskip("optuna")
    import optuna
    task = loss_task(tmp_path, data_dir, max_steps=40, eval_step=10, save_model_step=5)
    folder = str(tmp_path / "optuna")
    spec = write_config(str(tmp_path / "optuna.json"), {
        "method": "optuna", "trials": 3, "seed": 5, "output": folder, "prune": False,
        "parameters": {"model.optimization.learning_rate": {"min": 1e-3, "max": 0.1, "log": True}}})
    values = kill_while_second_trial_trains(start(task, spec), folder)[1]["values"]
    proc = start(task, spec)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert "1 of 3 trials finished before; running the other 2" in out + err
    trials = sweep_trials(folder)
    assert [t["status"] for t in trials] == ["done"] * 3
    assert trials[1]["values"] == values  # asked again with the values it had
    assert "resumed from" in open(os.path.join(folder, "trial_001", "sweep_trial.log"), encoding="utf-8").read()
    study = optuna.load_study(study_name="sweep", storage=f"sqlite:///{folder}/optuna.db")
    states = [t.state.name for t in study.trials]
    assert states.count("COMPLETE") == 3 and states.count("FAIL") == 1  # the killed one, told failed
    for trial in trials:
        assert study.trials[trial["optuna"]].state.name == "COMPLETE"
        assert study.trials[trial["optuna"]].value == pytest.approx(trial["metric"])
        assert study.trials[trial["optuna"]].params == trial["values"]
    assert len(table(folder)) == 3
