"""Stops training when a dev metric stops improving."""
from __future__ import annotations

import logging
import math
from typing import Any, Dict, Optional

from wenxin.common.errors import ConfigError
from wenxin.common.registry import RegisterSet
from wenxin.config.trainer_schema import EARLY_STOPPING
from wenxin.controller.hooks.base import HookBase, Priority

logger = logging.getLogger("wenxin")


@RegisterSet.hooks.register("EarlyStoppingHook")
class EarlyStoppingHook(HookBase):
    """Stops after ``patience`` dev evaluations without an improvement of at least ``min_delta``.

    Params: ``metric`` and ``mode`` (default: ``trainer.evaluation.metric`` / ``trainer.evaluation.metric_mode``),
    ``patience``, ``min_delta``.
    """

    priority = Priority.ABOVE_NORMAL
    config_schema = EARLY_STOPPING
    where = "trainer.hooks"  # the config key it came from, for its errors (or trainer.evaluation.early_stopping)

    def __init__(self, metric: Optional[str] = None, mode: Optional[str] = None, patience: int = 3,
                 min_delta: float = 0.0) -> None:
        self.metric, self.mode, self.patience, self.min_delta = metric, mode, patience, min_delta
        self.best: Optional[float] = None
        self.bad_evals = 0

    def before_train(self) -> None:
        evaluation = self.trainer.trainer_config["evaluation"]
        self.metric = self.metric or evaluation["metric"]
        self.mode = self.mode or evaluation["metric_mode"]
        if not evaluation["is_eval_dev"]:
            raise ConfigError(f"{self.where}: EarlyStoppingHook needs trainer.evaluation.is_eval_dev = 1")

    def check_metrics(self, reader_name: str, metrics: Dict[str, float]) -> None:
        if reader_name == "dev_reader" and self.metric not in metrics:
            raise ConfigError(f"{self.where}: EarlyStoppingHook metric '{self.metric}' is not a dev "
                              f"metric; available: {', '.join(sorted(metrics))}")

    def after_eval(self, reader_name: str, metrics: Dict[str, float]) -> None:
        if reader_name != "dev_reader":
            return
        if self.metric not in metrics:
            raise ConfigError(f"{self.where}: EarlyStoppingHook metric '{self.metric}' is not a dev "
                              f"metric; available: {', '.join(sorted(metrics))}")
        value = float(metrics[self.metric])
        sign = 1.0 if self.mode == "max" else -1.0
        if not math.isnan(value) and (self.best is None or sign * (value - self.best) > self.min_delta):
            self.best, self.bad_evals = value, 0
            return
        self.bad_evals += 1
        if self.bad_evals >= self.patience:
            state = self.trainer.state
            state.should_stop = True
            state.stop_reason = (f"early stopping: dev {self.metric} did not improve for "
                                 f"{self.bad_evals} evaluations (best {self.best})")
            logger.info(state.stop_reason)

    def state_dict(self) -> Dict[str, Any]:
        return {"best": self.best, "bad_evals": self.bad_evals}

    def set_state_dict(self, state: Dict[str, Any]) -> None:
        self.best, self.bad_evals = state["best"], state["bad_evals"]
