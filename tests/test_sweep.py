"""``wenxin sweep``: a 4-trial grid through the CLI, its results table checked against the
trials' own logs, and the same table after the sweep is SIGKILLed and started again."""
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import REPO, saved_checkpoint, task_config, write_config

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
                saved_checkpoint(os.path.join(folder, "trial_001", "checkpoints")):
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
    trial_log = tmp_path / "straight" / "trial_000" / "sweep_trial.log"
    assert "trial 0 started: " in err and f"; its log: {trial_log}" in err  # logs on stderr, the result on stdout
    assert re.search(r"trial \d: step \d+, dev \w+ [0-9.]+", err)  # progress while trials train
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
    from wenxin.common.errors import ConfigError
    from wenxin.sweep import Sweep
    config = task_config(data_dir, str(tmp_path / "out"), max_steps=2, is_eval_test=0)
    task = write_config(str(tmp_path / "task.json"), config)
    # through the CLI: exit code 2, one error, no traceback, nothing written
    path = write_config(str(tmp_path / "sweep.json"), {"parameters": {"model.hidden_sise": [4, 8]}})
    proc = start(task, path)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "model.hidden_sise" in err and "Traceback" not in err, err
    assert not os.path.exists(tmp_path / "out" / "sweep")
    cases = [({"parameters": {"model.hidden_size": {"min": 4, "max": 8}}}, "grid search needs a list of values"),
             ({"method": "bayes", "parameters": {"model.hidden_size": [4]}}, "method: unknown sweep method type 'bayes'"),
             ({"parameters": {"model.hidden_size": ["big"]}}, "model.hidden_size"),
             ({"parallel": 0, "parameters": {"model.hidden_size": [4]}}, "parallel: a positive integer")]
    for spec, message in cases:  # the same checks, in this process
        with pytest.raises(ConfigError, match=message):
            Sweep(task, write_config(str(tmp_path / "sweep.json"), spec))
    assert not os.path.exists(tmp_path / "out" / "sweep")


@pytest.mark.slow
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


def fold_best_losses(trial_folder, folds):
    """Each fold run's best dev loss, from its own log."""
    return [min(dev_losses(os.path.join(trial_folder, f"fold_{k}")).values()) for k in range(folds)]


@pytest.mark.slow
def test_a_cross_validated_grid_runs_every_fold_and_ranks_trials_by_the_mean(tmp_path, data_dir):
    task = loss_task(tmp_path, data_dir, max_steps=20, eval_step=10, save_model_step=10)
    folder = str(tmp_path / "cv")
    spec = write_config(str(tmp_path / "cv.json"), {
        "method": "grid", "folds": 3, "seed": 7, "parallel": 2, "output": folder,
        "parameters": {"model.optimization.learning_rate": [0.001, 0.05]}})
    proc = start(task, spec)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert "(the mean over 3 folds, std" in out

    # the split: three disjoint parts of the training lines, and each fold's data
    train_lines = sorted(open(os.path.join(data_dir, "train.tsv"), encoding="utf-8").read().splitlines())
    parts = [open(os.path.join(folder, "folds", f"part_{k}.tsv"), encoding="utf-8").read().splitlines()
             for k in range(3)]
    assert sorted(sum(parts, [])) == train_lines and [len(p) for p in parts] == [80, 80, 80]
    for k in range(3):
        assert sorted(os.listdir(os.path.join(folder, "folds", f"train_{k}"))) == \
            [f"part_{j}.tsv" for j in range(3) if j != k]
        with open(os.path.join(folder, "trial_000", f"fold_{k}", "config.json"), encoding="utf-8") as f:
            readers = json.load(f)["dataset_reader"]
        assert readers["train_reader"]["config"]["data_path"] == os.path.join(folder, "folds", f"train_{k}")
        assert readers["dev_reader"]["config"]["data_path"] == os.path.join(folder, "folds", f"part_{k}.tsv")

    # the table: each trial's mean (and spread) of its folds' best dev losses, best first
    rows = table(folder)
    means = {}
    for row in rows:
        losses = fold_best_losses(os.path.join(folder, row["folder"]), 3)
        means[int(row["trial"])] = float(np.mean(losses))
        assert row["status"] == "done"
        assert float(row["mean best dev loss"]) == pytest.approx(np.mean(losses), rel=1e-5)
        assert float(row["std"]) == pytest.approx(np.std(losses), rel=1e-4, abs=1e-6)
        assert [float(v) for v in row["best dev loss per fold"].split()] == pytest.approx(losses, rel=1e-5)
    best = min(means, key=means.get)
    assert [int(r["trial"]) for r in rows] == sorted(means, key=means.get)
    with open(os.path.join(folder, "best_config.json"), encoding="utf-8") as f:
        best_config = json.load(f)  # the best values on the original data
    assert best_config["model"]["optimization"]["learning_rate"] == [0.001, 0.05][best]
    assert best_config["dataset_reader"]["train_reader"]["config"]["data_path"] == os.path.join(data_dir, "train.tsv")

    # restarted: finished trials are skipped; a fold that never ran (as after a kill) runs alone
    state_path = os.path.join(folder, "sweep.json")
    state = json.load(open(state_path, encoding="utf-8"))
    state["trials"][1]["status"] = "running"
    state["trials"][1]["folds"][2] = {"fold": 2, "status": "running"}
    open(state_path, "w", encoding="utf-8").write(json.dumps(state))
    shutil.rmtree(os.path.join(folder, "trial_001", "fold_2"))
    kept = os.path.getmtime(os.path.join(folder, "trial_001", "fold_1", "sweep_trial.log"))
    proc = start(task, spec)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert "1 of 2 trials finished before; running the other 1" in out + err
    assert os.path.getmtime(os.path.join(folder, "trial_001", "fold_1", "sweep_trial.log")) == kept
    def without_time(table_rows):
        return [{k: v for k, v in row.items() if k != "seconds"} for row in table_rows]
    assert without_time(table(folder)) == without_time(rows)  # the rerun fold trains as it did


def test_folds_are_split_once_with_headers_and_a_changed_corpus_is_an_error(tmp_path):
    from wenxin.common.errors import ConfigError
    from wenxin.folds import split_folds
    data = tmp_path / "data"
    data.mkdir()
    lines = [f"text {i}\t{i % 2}" for i in range(10)]
    (data / "a.tsv").write_text("text_a\tlabel\n" + "\n".join(lines[:6]) + "\n\n", encoding="utf-8")
    (data / "b.tsv").write_text("text_a\tlabel\n" + "\n".join(lines[6:]), encoding="utf-8")  # no final newline
    folder = str(tmp_path / "folds")
    key = "dataset_reader.train_reader.config.data_path"
    split = split_folds(str(data), key, True, 4, 0, folder)
    parts = [open(p, encoding="utf-8").read().splitlines() for p in split.dev]
    assert all(p[0] == "text_a\tlabel" for p in parts)  # every part keeps the header
    assert sorted(line for p in parts for line in p[1:]) == sorted(lines)  # blank lines dropped
    assert sorted(len(p) - 1 for p in parts) == [2, 2, 3, 3]
    for k, train in enumerate(split.train):
        linked = sorted(os.path.join(train, n) for n in os.listdir(train))
        assert [os.path.realpath(p) for p in linked] == [os.path.realpath(p) for j, p in enumerate(split.dev) if j != k]
    before = os.path.getmtime(split.dev[0])
    time.sleep(0.01)
    assert split_folds(str(data), key, True, 4, 0, folder) == split  # written once
    assert os.path.getmtime(split.dev[0]) == before
    (data / "b.tsv").write_text("text_a\tlabel\nchanged\t1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="split from other training data"):
        split_folds(str(data), key, True, 4, 0, folder)
    with pytest.raises(ConfigError, match="need at least 20 lines"):
        split_folds(str(data), key, True, 20, 0, str(tmp_path / "more"))


def _flip_label(path):
    lines = open(path, encoding="utf-8").read().splitlines()
    text, label = lines[0].split("\t")
    lines[0] = f"{text}\t{1 - int(label)}"
    open(path, "w", encoding="utf-8").write("\n".join(lines) + "\n")


def _leak_dev(split):
    name = os.path.basename(split.dev[0])
    os.symlink(os.path.join("..", name), os.path.join(split.train[0], name))


def _relink(split):
    name = os.path.basename(split.dev[1])
    os.remove(os.path.join(split.train[0], name))
    os.symlink(os.path.join("..", os.path.basename(split.dev[2])), os.path.join(split.train[0], name))


FOLD_DAMAGE = {
    "a flipped label": (lambda split, record: _flip_label(split.dev[1]), "changed since the folds were split"),
    "a dev part linked into training": (lambda split, record: _leak_dev(split), "fold 0's training data links to"),
    "a link pointed elsewhere": (lambda split, record: _relink(split), "fold 0's training data links to"),
    "a part deleted": (lambda split, record: os.remove(split.dev[2]), "is missing"),
    "folds.json truncated": (lambda split, record: open(record, "r+").truncate(20), "folds.json: unreadable"),
    "folds.json an empty list": (lambda split, record: open(record, "w").write("[]"), "no parts table"),
}


@pytest.mark.parametrize("damage", sorted(FOLD_DAMAGE))
def test_a_changed_folds_split_is_an_error_not_a_different_score(tmp_path, damage):
    from wenxin.common.errors import DataError
    from wenxin.folds import split_folds
    data = tmp_path / "train.tsv"
    data.write_text("".join(f"text {i}\t{i % 2}\n" for i in range(12)), encoding="utf-8")
    folder = str(tmp_path / "folds")
    key = "dataset_reader.train_reader.config.data_path"
    split = split_folds(str(data), key, False, 3, 0, folder)
    change, message = FOLD_DAMAGE[damage]
    change(split, os.path.join(folder, "folds.json"))
    with pytest.raises(DataError, match=message):
        split_folds(str(data), key, False, 3, 0, folder)


def test_sweep_files_with_bad_folds_are_one_error(tmp_path):
    from wenxin.common.errors import ConfigError
    from wenxin.sweep import SweepSpec
    base = {"trainer": {"evaluation": {"metric": "acc", "metric_mode": "max"}, "output_path": str(tmp_path)}}
    parameters = {"model.hidden_size": [4]}
    for spec, message in [({"folds": 1}, "folds: an integer of at least 2"),
                          ({"folds": "5"}, "folds: an integer of at least 2"),
                          ({"folds": 3, "method": "optuna", "prune": True}, "prune and folds")]:
        if spec.get("method") == "optuna":
            pytest.importorskip("optuna")
        with pytest.raises(ConfigError, match=message):
            SweepSpec("sweep.yaml", {**spec, "parameters": parameters}, base)
    assert SweepSpec("sweep.yaml", {"folds": 3, "parameters": parameters}, base).prune is False


def test_trial_progress_tells_dev_evaluations_and_training_steps(tmp_path):
    from wenxin.sweep import TrialProgress
    folder = tmp_path / "trial_000"
    (folder / "logs").mkdir(parents=True)
    metrics = folder / "logs" / "metrics.jsonl"
    progress = TrialProgress(interval=0.0)
    assert progress.lines("trial 0", str(folder), "acc") == []  # nothing logged yet
    metrics.write_text(json.dumps({"tag": "train", "step": 5, "loss": 0.7}) + "\n"
                       + json.dumps({"tag": "dev", "step": 5, "acc": 0.75}) + "\n" + '{"tag": "tra', encoding="utf-8")
    assert progress.lines("trial 0", str(folder), "acc") == ["trial 0: step 5, dev acc 0.75", "trial 0: step 5, loss 0.7"]
    with open(metrics, "a", encoding="utf-8") as f:  # the cut line completes; each record is told once
        f.write('in", "step": 10, "loss": 0.5}\n')
    assert progress.lines("trial 0", str(folder), "acc") == ["trial 0: step 10, loss 0.5"]
    assert progress.lines("trial 0", str(folder), "acc") == []
    quiet = TrialProgress(interval=3600.0)  # training steps at most once an interval; dev results always
    assert quiet.lines("trial 1", str(folder), "acc") == ["trial 1: step 5, dev acc 0.75", "trial 1: step 10, loss 0.5"]
    with open(metrics, "a", encoding="utf-8") as f:
        f.write(json.dumps({"tag": "train", "step": 15, "loss": 0.4}) + "\n" + json.dumps({"tag": "dev", "step": 15, "acc": 0.8}) + "\n")
    assert quiet.lines("trial 1", str(folder), "acc") == ["trial 1: step 15, dev acc 0.8"]


METHOD = '''
import json
import os

from wenxin.common.registry import RegisterSet
from wenxin.sweep_methods.base import SweepMethod


@RegisterSet.sweep_methods.register("descending")
class Descending(SweepMethod):
    """Each listed value of the first parameter, largest first, asked as trials start; what each
    trial scored goes to told.jsonl."""

    def open(self, output, trials):
        self.output = output
        self.left = sorted(self.spec.parameters[0].values, reverse=True)[len(trials):]

    def ask(self, trial):
        trial["values"] = {self.spec.parameters[0].key: self.left.pop(0)}
        trial["descending"] = len(self.left)

    def tell(self, trial):
        with open(os.path.join(self.output, "told.jsonl"), "a") as f:
            f.write(json.dumps([trial["trial"], trial["status"], trial["descending"]]) + "\\n")
'''


def test_a_sweep_method_of_ones_own_is_one_module_of_the_task(tmp_path):
    """The sweep file names a method the task package registers: the sweep imports the task for
    it, asks it for each trial's values and tells it each result."""
    import shutil
    from test_custom_task import TASK_DIR, keyword_config
    task = tmp_path / "task_with_method"
    task.mkdir()
    shutil.copy(os.path.join(TASK_DIR, "model.py"), task / "model.py")
    (task / "descending.py").write_text(METHOD, encoding="utf-8")
    (task / "__init__.py").write_text("from . import descending, model  # noqa: F401\n")
    config = keyword_config(tmp_path, str(task))
    config["trainer"].update(epoch=1)
    folder = str(tmp_path / "mine")
    spec = write_config(str(tmp_path / "mine.json"), {
        "method": "descending", "trials": 2, "output": folder,
        "parameters": {"model.optimization.learning_rate": [0.01, 0.05, 0.1]}})
    proc = start(write_config(str(tmp_path / "task.json"), config), spec)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    trials = sweep_trials(folder)
    assert [t["values"]["model.optimization.learning_rate"] for t in trials] == [0.1, 0.05]
    assert [t["descending"] for t in trials] == [2, 1] and {t["status"] for t in trials} == {"done"}
    with open(os.path.join(folder, "told.jsonl"), encoding="utf-8") as f:
        assert sorted(json.loads(line) for line in f) == [[0, "done", 2], [1, "done", 1]]
