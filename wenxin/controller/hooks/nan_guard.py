"""Stops training when the loss stays NaN/Inf."""
from __future__ import annotations

import logging

from wenxin.common.errors import TrainingError
from wenxin.common.registry import RegisterSet
from wenxin.controller.hooks.base import HookBase, Priority

logger = logging.getLogger("wenxin")


@RegisterSet.hooks.register("NaNGuardHook")
class NaNGuardHook(HookBase):
    """The trainer skips the update of a step whose loss is not finite (checked every
    ``nan_check_step`` steps); this hook counts such steps in a row and stops training after
    ``max_nan_steps`` of them, before any hook can checkpoint the bad state."""

    priority = Priority.HIGH

    def before_train(self) -> None:
        self._bad_in_a_row = 0

    def after_step(self) -> None:
        state = self.trainer.state
        if not state.nonfinite_loss:
            self._bad_in_a_row = 0
            return
        self._bad_in_a_row += 1
        limit = self.trainer.trainer_config["step"]["max_nan_steps"]
        logger.warning("step %d: loss is not finite; update skipped (%d/%d in a row)",
                       state.global_step, self._bad_in_a_row, limit)
        if self._bad_in_a_row >= limit:
            latest = self.trainer.checkpoints.latest()
            raise TrainingError(
                f"loss was NaN/Inf for {self._bad_in_a_row} step(s) in a row at step {state.global_step}; "
                f"training stopped (trainer.step.max_nan_steps={limit}). Last good checkpoint: "
                f"{latest or 'none saved yet'}. Try a lower learning rate or gradient clipping "
                f"(model.optimization.max_grad_norm).")
