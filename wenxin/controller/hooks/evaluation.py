"""Periodic evaluation on the dev and/or test readers."""
from __future__ import annotations

from typing import List

from wenxin.common.registry import RegisterSet
from wenxin.controller.hooks.base import HookBase, Priority


@RegisterSet.hooks.register("EvaluationHook")
class EvaluationHook(HookBase):
    """Evaluates every ``eval_step`` steps (or at each epoch end when it is 0) and after training."""

    priority = Priority.NORMAL

    def before_train(self) -> None:
        cfg = self.trainer.trainer_config
        self.readers: List[str] = [name for name, wanted in (("dev_reader", cfg["is_eval_dev"]),
                                                              ("test_reader", cfg["is_eval_test"])) if wanted]
        self.every = cfg["eval_step"]
        self._last_step = -1

    def _evaluate(self) -> None:
        for name in self.readers:
            self.trainer.evaluate(name)
        self._last_step = self.trainer.state.global_step

    def after_step(self) -> None:
        if self.every and self.trainer.state.global_step % self.every == 0:
            self._evaluate()

    def after_epoch(self) -> None:
        if not self.every:
            self._evaluate()

    def after_train(self) -> None:
        if self.readers and self._last_step != self.trainer.state.global_step:
            self._evaluate()
