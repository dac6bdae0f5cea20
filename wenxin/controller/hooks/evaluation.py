"""Periodic evaluation on the dev and/or test readers."""
from __future__ import annotations

from typing import List

from wenxin.common.registry import RegisterSet
from wenxin.controller.hooks.base import IntervalHook, Priority


@RegisterSet.hooks.register("EvaluationHook")
class EvaluationHook(IntervalHook):
    """Evaluates every ``eval_step`` steps (or at each epoch end when it is 0) and after training."""

    priority = Priority.NORMAL
    interval_key = "eval_step"

    def before_train(self) -> None:
        super().before_train()
        self.readers: List[str] = self.trainer.eval_readers()
        self._last_step = -1

    def trigger(self) -> None:
        for name in self.readers:
            self.trainer.evaluate(name)
        self._last_step = self.trainer.state.global_step

    def after_train(self) -> None:
        if self.trainer.state.interrupted:
            return  # a signal asked to stop: save quickly, evaluate on resume
        if self.readers and self._last_step != self.trainer.state.global_step:
            self.trigger()
