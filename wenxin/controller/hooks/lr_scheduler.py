"""Advances the learning-rate schedule once per optimizer step."""
from __future__ import annotations

from wenxin.common.registry import RegisterSet
from wenxin.controller.hooks.base import HookBase, Priority


@RegisterSet.hooks.register("LRSchedulerHook")
class LRSchedulerHook(HookBase):
    """Calls ``lr_scheduler.step()`` after every optimizer step (warmup included)."""

    priority = Priority.VERY_HIGH

    def after_step(self) -> None:
        if self.trainer.lr_scheduler is not None:
            self.trainer.lr_scheduler.step()
