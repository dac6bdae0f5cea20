"""Periodic evaluation on the dev and/or test readers."""
from __future__ import annotations

import logging
from typing import List

from wenxin.common.registry import RegisterSet
from wenxin.controller.evaluator import EvaluationInterrupted
from wenxin.controller.hooks.base import IntervalHook, Priority

logger = logging.getLogger("wenxin")


@RegisterSet.hooks.register("EvaluationHook")
class EvaluationHook(IntervalHook):
    """Evaluates every ``eval_step`` steps (or at each epoch end when it is 0) and after training.
    A stop signal during an evaluation ends it at the next batch or decoding step; the checkpoint
    saved then says so, and the resumed run evaluates that step first, as the run would have."""

    priority = Priority.NORMAL
    interval_key = ("evaluation", "eval_step")

    def before_train(self) -> None:
        super().before_train()
        self.readers: List[str] = self.trainer.eval_readers()
        self._last_step = -1
        state = self.trainer.state
        if state.evaluation_pending:
            logger.info("evaluating step %d first: a stop signal cut its evaluation short", state.global_step)
            state.evaluation_pending = False
            self.trigger()

    def trigger(self) -> None:
        state = self.trainer.state
        try:
            for name in self.readers:
                self.trainer.evaluate(name)
        except EvaluationInterrupted:
            state.evaluation_pending = True
            logger.warning("the evaluation at step %d stopped for the signal: it runs when the run resumes",
                           state.global_step)
            return
        self._last_step = state.global_step

    def after_train(self) -> None:
        if self.trainer.state.interrupted:
            return  # a signal asked to stop: save quickly, evaluate on resume
        if self.readers and self._last_step != self.trainer.state.global_step:
            self.trigger()
