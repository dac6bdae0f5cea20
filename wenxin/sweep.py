"""Hyperparameter sweeps (``wenxin sweep --param_path task.json --sweep sweep.yaml``).

A sweep file names config keys (the key paths of ``--set``) and their values::

    method: grid            # grid | random | optuna
    trials: 8               # random, optuna: how many trials
    prune: true             # optuna: stop weak trials early (median of the earlier trials' dev metric)
    parallel: 2             # trials run at once, each in its own process
    seed: 0                 # random: the draws
    metric: acc             # default: trainer.evaluation.metric (a dev metric)
    mode: max               # default: trainer.evaluation.metric_mode
    output: ./output/sweep  # default: <trainer.output_path>/sweep
    folds: 5                # optional: K-fold cross-validation of every trial (see below)
    parameters:
      model.optimization.learning_rate: [0.001, 0.003]        # values (grid: every combination)
      model.hidden_size: {values: [64, 128]}
      model.dropout: {min: 0.0, max: 0.5}                     # random: uniform
      model.optimization.weight_decay: {min: 1e-4, max: 1e-1, log: true}
      model.rnn_hidden_size: {min: 32, max: 256, type: int}

Each trial is ``wenxin train`` with the trial's overrides, ``trainer.output_path`` set to
``<output>/trial_<NNN>`` and ``trainer.checkpoints.resume: auto``, in a process of its own. The processes
share the machine's cores: each gets a share of ``cores // parallel`` (``WENXIN_CPU_SHARE``), within
which its automatic thread count fits its model and the machine's load. ``sweep.json`` records every
trial, rewritten atomically as trials finish. A sweep started again with the same output (after a
kill or Ctrl-C) skips the finished trials, and an unfinished trial continues from its own
checkpoint. The results go to ``results.csv`` and ``results.md`` (best first), and the best
trial's resolved config to ``best_config.json``.

``method: optuna`` (when the optuna package is installed) draws each trial from Optuna's TPE
sampler, seeded, with the study in ``<output>/optuna.db``. With ``prune``, each trial reports its
dev metric after every evaluation (``SweepReportHook``, through files in its folder) and waits
for the sweep's answer; Optuna's median pruner stops trials whose metric is worse than the
median of the earlier trials at the same step. The decision is made while the trial waits, so
it does not depend on timing.

``folds: K`` cross-validates every trial: the training data is split once into K parts
(``wenxin.folds``), and the trial runs K times, in ``trial_<NNN>/fold_<k>``, training on all parts
but part k and evaluating on part k. Runs of (trial, fold) are the sweep's unit of work: they run
in parallel, and a restarted sweep skips the finished ones. A trial's metric is the mean of its
folds' best dev metrics (the table also gives their standard deviation and each fold's value),
and ``best_config.json`` is the task with the best trial's values, on the original data. Optuna
gets the mean; pruning needs one run per trial, so ``folds`` turns it off.
"""
from __future__ import annotations

import contextlib
import csv
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from wenxin.common.child_logs import last_error
from wenxin.common.errors import ConfigError
from wenxin.common.files import write_text_atomically
from wenxin.common.process import parent_death_signal
from wenxin.common.registry import RegisterSet
from wenxin.common.threads import SHARE_VARIABLE
from wenxin.config.document import read_document
from wenxin.config.task_config import source_of
from wenxin.controller.hooks.sweep_report import decision_path
from wenxin.folds import FoldData, split_folds
from wenxin.sweep_methods.base import Parameter, SweepMethod

logger = logging.getLogger("wenxin")

STATE_FILE = "sweep.json"
SPEC_KEYS = {"method", "trials", "parallel", "seed", "metric", "mode", "output", "parameters", "prune", "folds"}
FINISHED = ("done", "failed", "pruned")
RECORD_KEYS = {"trial", "values", "status", "folds", "returncode", "metric", "std", "step", "seconds", "error"}


# every trial resumes its own folder (after a sweep's restart) and draws no progress bar
TRIAL_SETTINGS = ('trainer.checkpoints.resume="auto"', 'trainer.logging.progress_bar="off"')


# the trials (or folds) running: (trial, fold) -> (process, start time, trial record)
Running = Dict[Tuple[int, Optional[int]], Tuple[subprocess.Popen, float, Dict[str, Any]]]


def _set_status(trial: Dict[str, Any], fold: Optional[int], status: str) -> None:
    trial["status"] = status
    if fold is not None:
        trial["folds"][fold]["status"] = status


def _interrupt(running: Running) -> None:
    """Ask every running trial to save and stop (SIGTERM), wait for each (a minute at most), and
    mark it interrupted."""
    for proc, _, _ in running.values():
        with contextlib.suppress(OSError):
            proc.send_signal(signal.SIGTERM)
    for (_, fold), (proc, _, trial) in running.items():
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=60)
        _set_status(trial, fold, "interrupted")


# ---- the sweep file -----------------------------------------------------------------------------

class SweepSpec:
    """A parsed and checked sweep file."""

    def __init__(self, path: str, data: Any, base: Dict[str, Any], scope: Optional[str] = None) -> None:
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the top level must be an object")
        unknown = set(data) - SPEC_KEYS
        if unknown:
            raise ConfigError(f"{path}: unknown key(s) {sorted(unknown)}; known: {sorted(SPEC_KEYS)}")
        self.method = data.get("method", "grid")
        if not isinstance(self.method, str):
            raise ConfigError(f"{path}: method: a name (got {self.method!r})")
        method_cls = RegisterSet.sweep_methods.get(self.method, scope, f"{path}: method")
        self.folds = data.get("folds")
        if self.folds is not None and (not isinstance(self.folds, int) or isinstance(self.folds, bool)
                                       or self.folds < 2):
            raise ConfigError(f"{path}: folds: an integer of at least 2 (got {self.folds!r})")
        self.prune = data.get("prune", self.folds is None)
        if not isinstance(self.prune, bool):
            raise ConfigError(f"{path}: prune: true or false (got {self.prune!r})")
        if self.prune and self.folds is not None:
            raise ConfigError(f"{path}: prune and folds: pruning compares one run per trial, and folds make "
                              f"several; set prune: false")
        self.trials = _positive(data.get("trials", 10), f"{path}: trials")
        self.parallel = _positive(data.get("parallel", 1), f"{path}: parallel")
        self.seed = data.get("seed", 0)
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ConfigError(f"{path}: seed: an integer (got {self.seed!r})")
        evaluation = base["trainer"]["evaluation"]
        self.metric = data.get("metric", evaluation["metric"])
        self.mode = data.get("mode", evaluation["metric_mode"])
        if self.mode not in ("max", "min"):
            raise ConfigError(f"{path}: mode: max or min (got {self.mode!r})")
        self.output = data.get("output") or os.path.join(base["trainer"]["output_path"], "sweep")
        parameters = data.get("parameters")
        if not isinstance(parameters, dict) or not parameters:
            raise ConfigError(f"{path}: parameters: an object of config keys and their values")
        self.parameters = [Parameter(key, spec, f"{path}: parameters.{key}") for key, spec in parameters.items()]
        method_cls.check(self, path)
        self.raw = data
        self.search: SweepMethod = method_cls(self)


def _positive(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{where}: a positive integer (got {value!r})")
    return value


def overrides_of(values: Dict[str, Any]) -> List[str]:
    """``--set`` arguments for a trial's values (JSON values, which the override parser reads)."""
    return [f"{key}={json.dumps(value)}" for key, value in values.items()]


# ---- results ------------------------------------------------------------------------------------
def best_dev(folder: str, metric: str, mode: str) -> Tuple[Optional[float], Optional[int]]:
    """The best dev ``metric`` a trial logged and its step (None when it logged none)."""
    path = os.path.join(folder, "logs", "metrics.jsonl")
    best: Tuple[Optional[float], Optional[int]] = (None, None)
    if not os.path.isfile(path):
        return best
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line cut by a kill
            if record.get("tag") != "dev" or not isinstance(record.get(metric), (int, float)):
                continue
            value = float(record[metric])
            if best[0] is None or (value > best[0] if mode == "max" else value < best[0]):
                best = (value, record["step"])
    return best


class TrialProgress:
    """What a running trial has logged so far (its ``metrics.jsonl``), told as it comes: every
    dev evaluation, and its newest training step every ``interval`` seconds, so a sweep is never
    silent while a trial trains. Only what is printed depends on the clock."""

    def __init__(self, interval: float = 15.0) -> None:
        self.interval = interval
        self._offsets: Dict[str, int] = {}
        self._told: Dict[str, float] = {}

    def lines(self, name: str, folder: str, metric: str) -> List[str]:
        path = os.path.join(folder, "logs", "metrics.jsonl")
        try:
            with open(path, "rb") as f:
                f.seek(self._offsets.get(folder, 0))
                data = f.read()
        except OSError:
            return []
        complete = data[:data.rfind(b"\n") + 1]  # a line still being written waits for the next look
        self._offsets[folder] = self._offsets.get(folder, 0) + len(complete)
        told, newest_train = [], None
        for line in complete.splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("tag") == "dev" and isinstance(record.get(metric), (int, float)):
                told.append(f"{name}: step {record.get('step')}, dev {metric} {record[metric]:.6g}")
            elif record.get("tag") == "train":
                newest_train = record
        now = time.monotonic()
        if newest_train is not None and now - self._told.get(folder, float("-inf")) >= self.interval:
            loss = newest_train.get("loss")
            told.append(f"{name}: step {newest_train.get('step')}"
                        + (f", loss {loss:.6g}" if isinstance(loss, (int, float)) else ""))
        if told:
            self._told[folder] = now
        return told


def _number(value: Optional[float]) -> str:
    return "" if value is None else f"{value:.6g}"


def write_result_tables(folder: str, header: List[str], rows: List[List[Any]]) -> None:
    """``results.csv`` and ``results.md`` in ``folder``: the header, then one row per trial."""
    with open(os.path.join(folder, "results.csv"), "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    write_text_atomically(os.path.join(folder, "results.md"), "\n".join(lines) + "\n")

class Sweep:
    """Runs the trials of a sweep (see the module docstring)."""

    def __init__(self, param_path: str, sweep_path: str, overrides: Sequence[str] = ()) -> None:
        from wenxin.config.loader import load_config
        self.param_path, self.overrides = os.path.abspath(param_path), list(overrides)
        base = load_config(param_path, overrides, with_task=False)
        if not base["trainer"]["evaluation"]["is_eval_dev"]:
            raise ConfigError("trainer.evaluation.is_eval_dev: a sweep compares trials by their dev metric; set "
                              "it to true")
        data = read_document(sweep_path, "sweep file")
        self.spec = SweepSpec(sweep_path, data, base, _method_scope(data, base))
        data_format = base["dataset_reader"]["train_reader"]["config"]["format"]
        format_cls = RegisterSet.data_formats.builtin(data_format)  # None: a task's own, taken to read lines
        if self.spec.folds is not None and format_cls is not None and not format_cls.line_based:
            raise ConfigError(f"{sweep_path}: folds: cross-validation splits data files by line or record, and "
                              f"format {data_format!r} reads no lines; write the training split as JSON lines "
                              f"(datasets: Dataset.to_json) and read it with format: jsonl to cross-validate")
        self.output = os.path.abspath(self.spec.output)
        self.search = self.spec.search
        planned = self.search.planned()
        values = planned or []
        # every trial's overrides must make a valid task file (a method that plans nothing: the
        # first value or the lower end of each parameter, for its keys and types)
        probes = values or [{p.key: p.first() for p in self.spec.parameters}]
        for i, trial in enumerate(probes):
            try:
                load_config(param_path, self.overrides + overrides_of(trial))
            except ConfigError as e:
                raise ConfigError(f"{sweep_path}: trial {i} ({', '.join(overrides_of(trial))}): {e}") from None
        self.base = base
        self.trials: List[Dict[str, Any]] = [self._fresh(i, v) for i, v in enumerate(values)]
        self.fold_data: Optional[FoldData] = None
        self.threads = max(1, len(os.sched_getaffinity(0)) // self.spec.parallel)
        self.asks = planned is None  # the method is asked for each trial's values as it starts
        self.total = self.spec.trials if self.asks else len(values)
        self._asked: set = set()  # trials the method was asked for in this process
        self._pruning: set = set()

    def _fresh(self, index: int, values: Dict[str, Any]) -> Dict[str, Any]:
        trial: Dict[str, Any] = {"trial": index, "values": values, "status": "pending"}
        if self.spec.folds is not None:
            trial["folds"] = [{"fold": k, "status": "pending"} for k in range(self.spec.folds)]
        return trial

    # ---- state ----
    def _load_state(self) -> None:
        path = os.path.join(self.output, STATE_FILE)
        if not os.path.isfile(path):
            return
        try:
            with open(path, encoding="utf-8") as f:
                saved = json.load(f)
            same = saved["task"] == self.param_path and saved["sweep"] == self.spec.raw and \
                saved["overrides"] == self.overrides
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"{path}: unreadable ({type(e).__name__}); move {self.output} away to start "
                              f"the sweep afresh") from None
        if not same:
            raise ConfigError(f"{self.output} holds another sweep (a different task file, sweep file or --set); "
                              f"set output in the sweep file, or move the folder away")
        if self.asks:  # the trials asked for so far
            self.trials = [self._fresh(old["trial"], old["values"]) for old in saved["trials"]]
        for trial, old in zip(self.trials, saved["trials"]):
            if old.get("status") in FINISHED:
                trial.update(old)
                continue
            trial.update({k: v for k, v in old.items() if k not in RECORD_KEYS})  # the method's own (Optuna's number)
            for fold, old_fold in zip(trial.get("folds", []), old.get("folds", [])):
                if old_fold.get("status") in FINISHED:  # the finished folds of an unfinished trial
                    fold.update(old_fold)

    def _save_state(self) -> None:
        state = {"task": self.param_path, "sweep": self.spec.raw, "overrides": self.overrides, "trials": self.trials}
        write_text_atomically(os.path.join(self.output, STATE_FILE), json.dumps(state, indent=2, ensure_ascii=False))

    # ---- running ----
    def folder(self, trial: Dict[str, Any], fold: Optional[int] = None) -> str:
        """The output folder of a trial, or of one of its folds."""
        folder = os.path.join(self.output, f"trial_{trial['trial']:03d}")
        return folder if fold is None else os.path.join(folder, f"fold_{fold}")

    def _fold_overrides(self, fold: Optional[int]) -> List[str]:
        """Fold ``fold``'s data: its training parts, and its held-out part read as training lines are."""
        if fold is None:
            return []
        assert self.fold_data is not None
        line_format = self.base["dataset_reader"]["train_reader"]["config"]
        return overrides_of({"dataset_reader.train_reader.config.data_path": self.fold_data.train[fold],
                             "dataset_reader.dev_reader.config.data_path": self.fold_data.dev[fold],
                             "dataset_reader.dev_reader.config.has_header": line_format["has_header"],
                             "dataset_reader.dev_reader.config.separator": line_format["separator"],
                             "dataset_reader.dev_reader.config.format": line_format["format"]})

    def _split_folds(self) -> None:
        reader = self.base["dataset_reader"]["train_reader"]["config"]
        assert self.spec.folds is not None, "called for a cross-validating sweep only"
        row_format = RegisterSet.data_formats.get(reader["format"], None, "dataset_reader.train_reader.config.format")
        self.fold_data = split_folds(reader["data_path"], "dataset_reader.train_reader.config.data_path",
                                     reader["has_header"], self.spec.folds, self.spec.seed,
                                     os.path.join(self.output, "folds"), reader["format"],
                                     lambda lines: row_format.group_lines(lines, reader))

    def _report_overrides(self, folder: str) -> List[str]:
        """A pruning sweep's trials report to it through a ``SweepReportHook`` added to their
        ``trainer.hooks`` (the task's own hooks kept, before any trial value that sets theirs)."""
        if not self.search.reports:
            return []
        hooks = self.base["trainer"]["hooks"] + [{"type": "SweepReportHook", "params": {"folder": folder}}]
        return [f"trainer.hooks={json.dumps(hooks, ensure_ascii=False)}"]

    def _start(self, trial: Dict[str, Any], fold: Optional[int]) -> subprocess.Popen:
        folder = self.folder(trial, fold)
        os.makedirs(folder, exist_ok=True)
        args = [a for o in self.overrides + self._report_overrides(folder) + overrides_of(trial["values"]) +
                self._fold_overrides(fold) +
                [f"trainer.output_path={json.dumps(folder)}", *TRIAL_SETTINGS,
                 f"trainer.evaluation.metric={json.dumps(self.spec.metric)}",
                 f"trainer.evaluation.metric_mode={json.dumps(self.spec.mode)}"]
                for a in ("--set", o)]
        log_path = os.path.join(folder, "sweep_trial.log")
        logger.info("%s started: %s; its log: %s", self._name(trial, fold),
                    " ".join(overrides_of(trial["values"])) or "the task's own values", log_path)
        log = open(log_path, "ab")
        # the trial's automatic threads fit its share of the cores (wenxin.common.threads)
        env = {**os.environ, SHARE_VARIABLE: str(self.threads), "OMP_NUM_THREADS": "1", "CPU_NUM": "1"}
        try:
            return subprocess.Popen([sys.executable, "-m", "wenxin.cli", "train", "--param_path", self.param_path,
                                     *args], stdout=log, stderr=subprocess.STDOUT, env=env,
                                    preexec_fn=_die_with_parent)
        finally:
            log.close()

    def _finish(self, trial: Dict[str, Any], fold: Optional[int], code: int, seconds: float) -> None:
        """Record a run that ended: the trial's, or one fold's (the trial ends with its last fold)."""
        record = trial if fold is None else trial["folds"][fold]
        folder = self.folder(trial, fold)
        value, step = best_dev(folder, self.spec.metric, self.spec.mode)
        record.update(status="done" if code == 0 else "failed", returncode=code, metric=value, step=step,
                      seconds=round(record.get("seconds", 0.0) + seconds, 1))
        if code == 0 and value is None:
            record.update(status="failed", error=f"no dev {self.spec.metric} was logged")
        elif code != 0:
            record["error"] = last_error(os.path.join(folder, "sweep_trial.log"))
        elif trial["trial"] in self._pruning:
            record["status"] = "pruned"
        logger.info("%s %s: %s, dev %s %s at step %s (%.0f s)", self._name(trial, fold), record["status"],
                    " ".join(overrides_of(trial["values"])), self.spec.metric,
                    "none" if value is None else f"{value:.6g}", step, seconds)
        if fold is not None:
            if any(f["status"] not in FINISHED for f in trial["folds"]):
                return
            self._summarize_folds(trial)
        self.search.tell(trial)

    @staticmethod
    def _name(trial: Dict[str, Any], fold: Optional[int]) -> str:
        return f"trial {trial['trial']}" + ("" if fold is None else f" fold {fold}")

    def _summarize_folds(self, trial: Dict[str, Any]) -> None:
        """A cross-validated trial's result: the mean and standard deviation of its folds' metrics."""
        folds = trial["folds"]
        trial["seconds"] = round(sum(f.get("seconds", 0.0) for f in folds), 1)
        failed = [f for f in folds if f["status"] != "done"]
        if failed:
            trial.update(status="failed", metric=None, std=None,
                         error=f"fold {failed[0]['fold']}: {failed[0].get('error', failed[0]['status'])}")
        else:
            values = [f["metric"] for f in folds]  # the spread of the folds themselves: the population std
            trial.update(status="done", metric=statistics.fmean(values), std=statistics.pstdev(values), step=None)
        logger.info("trial %d %s: %s, dev %s %s over %d folds", trial["trial"], trial["status"],
                    " ".join(overrides_of(trial["values"])), self.spec.metric,
                    "none" if failed else f"{trial['metric']:.6g} (std {trial['std']:.3g})", len(folds))

    def _units(self, trial: Dict[str, Any]) -> List[Tuple[Dict[str, Any], Optional[int]]]:
        """The runs a trial still needs: itself, or its unfinished folds."""
        if "folds" not in trial:
            return [(trial, None)]
        return [(trial, f["fold"]) for f in trial["folds"] if f["status"] not in FINISHED]

    def run(self) -> List[Dict[str, Any]]:
        os.makedirs(self.output, exist_ok=True)
        self._load_state()
        if self.spec.folds is not None:
            self._split_folds()
        self.search.open(self.output, self.trials)
        self._save_state()
        waiting = [unit for t in self.trials if t["status"] not in FINISHED for unit in self._units(t)]
        done = sum(t["status"] in FINISHED for t in self.trials)
        total = self.total
        if done:
            logger.info("sweep: %d of %d trials finished before; running the other %d", done, total, total - done)
        running: Running = {}
        progress = TrialProgress()
        try:
            while waiting or running or len(self.trials) < total:
                while len(running) < self.spec.parallel and (waiting or len(self.trials) < total):
                    waiting = waiting or self._units(self._new_trial())
                    self._start_unit(*waiting.pop(0), running)
                for (_, fold), (proc, started, trial) in list(running.items()):
                    if self.search.reports:
                        self._answer_reports(trial)
                    for line in progress.lines(self._name(trial, fold), self.folder(trial, fold), self.spec.metric):
                        logger.info("%s", line)
                    if proc.poll() is not None:
                        del running[(trial["trial"], fold)]
                        self._finish(trial, fold, proc.returncode, time.time() - started)
                        self._save_state()
                        self.write_results()
                time.sleep(0.02 if self.search.reports else 0.2)  # a reporting trial waits for its answer
        finally:
            if running:  # Ctrl-C or an error: the trials save and stop
                _interrupt(running)
                self._save_state()
        self.write_results()
        return self.trials

    def _start_unit(self, trial: Dict[str, Any], fold: Optional[int], running: Running) -> None:
        """Start one trial (or one fold of it), asking the method for its values first."""
        if self.asks and trial["trial"] not in self._asked:
            self.search.ask(trial)
            self._asked.add(trial["trial"])
        _set_status(trial, fold, "running")
        running[(trial["trial"], fold)] = (self._start(trial, fold), time.time(), trial)
        self._save_state()

    # ---- a method's answers to reporting trials ----
    def _new_trial(self) -> Dict[str, Any]:
        trial = self._fresh(len(self.trials), {})
        self.trials.append(trial)
        return trial

    def _answer_reports(self, trial: Dict[str, Any]) -> None:
        """Give the method the trial's new dev metrics and write its decisions."""
        folder = self.folder(trial)
        for name in os.listdir(folder):
            if not (name.startswith("report_") and name.endswith(".json")):
                continue
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                report = json.load(f)
            step = int(report["step"])
            if os.path.isfile(decision_path(folder, step)):
                continue
            prune = self.search.answer(trial, step, float(report["value"]))
            if prune:
                self._pruning.add(trial["trial"])
                logger.info("trial %d pruned at step %d (dev %s %.6g)", trial["trial"], step, self.spec.metric,
                            report["value"])
            write_text_atomically(decision_path(folder, step), json.dumps({"prune": prune}))

    # ---- tables ----
    def ranked(self) -> List[Dict[str, Any]]:
        """Finished trials, best first (ties: the earlier trial)."""
        sign = -1.0 if self.spec.mode == "max" else 1.0
        done = [t for t in self.trials if t["status"] == "done"]
        return sorted(done, key=lambda t: (sign * t["metric"], t["trial"]))

    def write_results(self) -> None:
        keys = [p.key for p in self.spec.parameters]
        metric_name = self.spec.metric
        if self.spec.folds is None:
            scores = [f"best dev {metric_name}", "step"]
        else:
            scores = [f"mean best dev {metric_name}", "std", f"best dev {metric_name} per fold"]
        header = ["trial", "status", *keys, *scores, "seconds", "folder"]
        ranked = self.ranked()

        def cells(t: Dict[str, Any]) -> List[Any]:
            if "folds" in t:
                per_fold = " ".join(_number(f.get("metric")) or f["status"] for f in t["folds"])
                score = [_number(t.get("metric")), _number(t.get("std")), per_fold]
            else:
                score = [_number(t.get("metric")), t.get("step", "") or ""]
            return [t["trial"], t["status"], *[t["values"][k] for k in keys], *score, t.get("seconds", ""),
                    os.path.relpath(self.folder(t), self.output)]

        write_result_tables(self.output, header, [cells(t) for t in ranked + [t for t in self.trials
                                                                               if t not in ranked]])
        if ranked:
            config = self._config_of(ranked[0])
            write_text_atomically(os.path.join(self.output, "best_config.json"),
                                  json.dumps(config, indent=2, ensure_ascii=False))

    def _config_of(self, trial: Dict[str, Any]) -> Dict[str, Any]:
        """The resolved config a trial trained with; for a cross-validated one, the task with its
        values on the original data (to train the final model on all of it)."""
        if "folds" not in trial:
            with open(os.path.join(self.folder(trial), "config.json"), encoding="utf-8") as f:
                return json.load(f)
        from wenxin.config.loader import load_config
        return load_config(self.param_path, self.overrides + overrides_of(trial["values"]) + overrides_of(
            {"trainer.evaluation.metric": self.spec.metric, "trainer.evaluation.metric_mode": self.spec.mode}))


def _method_scope(data: Any, base: Dict[str, Any]) -> Optional[str]:
    """The task package's scope when the sweep file names a method that is not built in (a task
    may register its own), else None: the task and Paddle load only then."""
    method = data.get("method") if isinstance(data, dict) else None
    if not isinstance(method, str) or method in RegisterSet.sweep_methods.registered() or "task" not in base:
        return None
    from wenxin.common.task_loader import import_task
    return import_task(base["task"], source_of(base))


def _die_with_parent() -> None:
    """A trial gets SIGTERM (it saves a checkpoint and stops) when the sweep dies, even by SIGKILL."""
    parent_death_signal(signal.SIGTERM)
