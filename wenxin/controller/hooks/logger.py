"""Training-progress logging every ``train_log_step`` steps."""
from __future__ import annotations

from typing import List

import numpy as np

from wenxin.common.registry import RegisterSet
from wenxin.controller.hooks.base import HookBase, Priority
from wenxin.controller.hooks.timer import IterationTimerHook
from wenxin.controller.state import loss_value


@RegisterSet.hooks.register("LoggerHook")
class LoggerHook(HookBase):
    """Logs mean loss, learning rate, timing and ETA to every metric writer.

    Losses are kept as they come (tensors in eager mode) and read once per interval, so logging
    adds no device-to-host sync to the other steps.
    """

    priority = Priority.BELOW_NORMAL

    def before_train(self) -> None:
        self._losses: List = []

    def after_step(self) -> None:
        state = self.trainer.state
        if state.last_loss is not None:
            self._losses.append(state.last_loss)
        every = self.trainer.trainer_config["logging"]["train_log_step"]
        if state.global_step % every and state.global_step != state.max_steps:
            return
        if not self._losses:
            return
        losses = np.array([loss_value(x) for x in self._losses])
        self._losses = []
        loss = self.trainer.ranks.mean(float(losses.mean()))  # every rank's batches
        scalars = {"epoch": state.epoch + 1, "loss": loss, "lr": self.trainer.current_lr()}
        scaler_value = self.trainer.engine.loss_scale()
        if scaler_value is not None:
            scalars["loss_scale"] = scaler_value
        scalars.update(state.timing)
        self.trainer.metric_logger.write("train", state.global_step, scalars)
        timer = self.trainer.hooks.find(IterationTimerHook)
        if isinstance(timer, IterationTimerHook):
            timer.reset_interval()
