"""An exponential moving average of the weights (``EMAHook``)."""
from __future__ import annotations

import logging
from typing import Any, Dict, Optional

import numpy as np

from wenxin.common.errors import CheckpointError
from wenxin.common.registry import RegisterSet
from wenxin.config.schema import Key
from wenxin.controller.hooks.base import HookBase, Priority, floating_weights

logger = logging.getLogger("wenxin")


@RegisterSet.hooks.register("EMAHook")
class EMAHook(HookBase):
    """Keeps ``ema = decay * ema + (1 - decay) * w`` of every floating-point parameter, updated
    after each optimizer step; the first step's weights start it.

    With ``evaluate`` (the default) every dev/test evaluation runs on the averaged weights, so
    the dev metric, ``best/``, the top-k checkpoints and their exports are the average's. The
    periodic checkpoints ``step_<N>`` keep the trained weights (what a resumed run continues
    from); the average itself is part of every checkpoint's hook state, so a resumed run
    continues it exactly. A run continued from ``best`` (``resume: best``) continues from the
    averaged weights it holds."""

    priority = Priority.HIGH  # updated before the evaluation and checkpoint hooks of the same step
    config_schema = {
        "decay": Key(float, 0.999, minimum=0.0, maximum=1.0, doc="weight of the average in each update"),
        "evaluate": Key(bool, True, doc="evaluate, select best/top-k and export with the averaged weights"),
    }

    def __init__(self, decay: float = 0.999, evaluate: bool = True) -> None:
        self.decay, self.evaluate = decay, evaluate
        self.average: Optional[Dict[str, np.ndarray]] = None
        self._trained: Optional[Dict[str, Any]] = None  # the trained weights while the average is in the model

    def state_dict(self) -> Optional[Dict[str, Any]]:
        if self.average is None:
            return None
        return {"decay": self.decay, "average": dict(self.average)}

    def set_state_dict(self, state: Dict[str, Any]) -> None:
        average = state.get("average")
        if not isinstance(average, dict):
            raise CheckpointError("EMAHook: the checkpoint's average is malformed")
        self.average = {name: np.array(value, dtype=np.float32) for name, value in average.items()}

    def before_step(self) -> None:
        self._put_back_trained()

    def after_step(self) -> None:
        if self.trainer.state.nonfinite_loss:
            return  # the step changed nothing
        weights = floating_weights(self.trainer)
        if self.average is None:
            self.average = {k: v.astype(np.float32, copy=True) for k, v in weights.items()}
            return
        for name, value in weights.items():
            average = self.average[name]
            average *= self.decay
            average += (1.0 - self.decay) * value.astype(np.float32, copy=False)

    def before_eval(self, reader_name: str) -> None:
        if self.evaluate and self.average is not None and self._trained is None:
            self._trained = floating_weights(self.trainer)
            self.trainer.engine.set_model_state_dict(self.average)

    def before_save(self, name: str) -> None:
        if name.startswith(self.trainer.checkpoints.prefix):  # a periodic checkpoint holds the trained weights
            self._put_back_trained()

    def after_train(self) -> None:
        self._put_back_trained()

    def _put_back_trained(self) -> None:
        if self._trained is not None:
            trained, self._trained = self._trained, None
            self.trainer.engine.set_model_state_dict(trained)
