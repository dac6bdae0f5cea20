"""A trial of an Optuna sweep reports its dev metric and stops when the sweep prunes it. The sweep
adds the hook to each trial's ``trainer.hooks`` (``{"type": "SweepReportHook", "params":
{"folder": ...}}``)."""
from __future__ import annotations

import json
import logging
import math
import os
import time
from typing import Dict

from wenxin.common.errors import ConfigError, TrainingError
from wenxin.common.files import write_text_atomically
from wenxin.common.registry import RegisterSet
from wenxin.config.schema import Key, path_key
from wenxin.controller.hooks.base import HookBase, Priority

logger = logging.getLogger("wenxin")

DECISION_TIMEOUT = 600.0


def report_path(folder: str, step: int) -> str:
    return os.path.join(folder, f"report_{step}.json")


def decision_path(folder: str, step: int) -> str:
    return os.path.join(folder, f"decision_{step}.json")


@RegisterSet.hooks.register("SweepReportHook")
class SweepReportHook(HookBase):
    """After each dev evaluation, writes ``report_<step>.json`` (the step and the sweep's
    metric) into the exchange ``folder`` and waits for the sweep's ``decision_<step>.json``. A
    pruned trial stops as a finished run does: its checkpoint is saved, the exit status is 0.
    Single-process trials only (the sweep starts them so)."""

    priority = Priority.LOW + 5  # after the checkpoint hook kept best/ and the top-k
    config_schema = {"folder": path_key(non_empty=True, doc="the folder the trial and the sweep exchange files in"),
                     "metric": Key(str, "", doc="the dev metric reported (empty: trainer.evaluation.metric)")}

    def __init__(self, folder: str, metric: str = "") -> None:
        self.folder, self.metric = folder, metric

    def before_train(self) -> None:
        if self.trainer.world_size != 1:
            raise ConfigError("trainer.hooks: SweepReportHook reports single-process trials; this run has "
                              f"{self.trainer.world_size} processes")
        self.metric = self.metric or self.trainer.trainer_config["evaluation"]["metric"]

    def after_eval(self, reader_name: str, metrics: Dict[str, float]) -> None:
        if reader_name != "dev_reader" or self.metric not in metrics:
            return
        value = float(metrics[self.metric])
        if not math.isfinite(value):
            return
        step = self.trainer.state.global_step
        decision = decision_path(self.folder, step)
        if not os.path.isfile(decision):  # a resumed trial repeats steps already decided
            write_text_atomically(report_path(self.folder, step), json.dumps({"step": step, "value": value}))
            deadline = time.time() + DECISION_TIMEOUT
            while not os.path.isfile(decision):
                if self.trainer.state.interrupted:  # SIGTERM (the sweep stops): save and stop, no answer needed
                    return
                if time.time() > deadline:
                    raise TrainingError(f"the sweep did not answer the report of step {step} in "
                                        f"{DECISION_TIMEOUT:.0f} s ({self.folder})")
                time.sleep(0.02)
        with open(decision, encoding="utf-8") as f:
            prune = bool(json.load(f).get("prune"))
        if prune:
            state = self.trainer.state
            state.should_stop = True
            state.stop_reason = f"pruned by the sweep at step {step} (dev {self.metric} {value:.6g})"
