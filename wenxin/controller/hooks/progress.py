"""A training progress bar with ETA (on when stderr is a terminal; ``trainer.logging.progress_bar``)."""
from __future__ import annotations

from typing import Optional

from wenxin.common.registry import RegisterSet
from wenxin.controller.hooks.base import HookBase, Priority
from wenxin.common.progress import ProgressBar
from wenxin.controller.state import loss_value


@RegisterSet.hooks.register("ProgressBarHook")
class ProgressBarHook(HookBase):
    """Draws steps done, rate, ETA and the last loss. The loss is read only when the bar is redrawn
    (at most 5 times a second), so eager steps gain no extra device sync."""

    priority = Priority.NORMAL - 5  # closes before the final evaluation logs its results

    def before_train(self) -> None:
        state = self.trainer.state
        self.bar: Optional[ProgressBar] = ProgressBar(state.max_steps, "train", initial=state.global_step)

    def _postfix(self) -> str:
        loss = self.trainer.state.last_loss
        return f"loss {loss_value(loss):.4g}" if loss is not None else ""

    def after_step(self) -> None:
        if self.bar is not None:
            self.bar.update(self.trainer.state.global_step, self._postfix)

    def after_eval(self, reader_name: str, metrics: dict) -> None:
        if self.bar is not None:  # an evaluation bar replaced this one on screen
            ProgressBar.active = self.bar

    def after_train(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
