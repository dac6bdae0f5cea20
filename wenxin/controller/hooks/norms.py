"""Watch training: gradient norms, weight norms and update/weight ratios (``NormsHook``)."""
from __future__ import annotations

import math
from typing import Dict, Iterable, Optional, Tuple

import numpy as np

from wenxin.common.registry import RegisterSet
from wenxin.config.schema import Key
from wenxin.controller.hooks.base import HookBase, Priority, floating_weights


def layer_of(name: str) -> str:
    """The layer a parameter belongs to: its structured name without the last part
    (``encoder.layers.0.linear1.weight`` -> ``encoder.layers.0.linear1``)."""
    return name.rsplit(".", 1)[0] if "." in name else name


def _by_layer(square_sums: Iterable[Tuple[str, float]]) -> Dict[str, float]:
    layers: Dict[str, float] = {}
    for name, value in square_sums:
        layers[layer_of(name)] = layers.get(layer_of(name), 0.0) + value
    return layers


@RegisterSet.hooks.register("NormsHook")
class NormsHook(HookBase):
    """Every ``interval`` steps, logs as tag ``norms``:

    - ``grad_norm``: the global L2 norm of the gradients the optimizer received (after
      accumulation and all-reduce, before clipping and the loss scale);
    - ``weight_norm``: the global L2 norm of the parameters after the step;
    - ``update_norm``: the L2 norm of the step's change of the parameters;
    - ``update_ratio``: ||w_after - w_before|| / ||w_before|| over all parameters (about 1e-3 a
      step is the usual healthy order; far above it, steps are too large).

    With ``per_layer``, the same three per layer (``grad_norm/<layer>``, ...) go to
    ``metrics.jsonl`` and VisualDL, not the console. Reading the weights costs a copy of the
    parameters at those steps; the gradient norms cost one reduction per parameter (every step in
    static mode, where the program computes them)."""

    priority = Priority.HIGH
    wants_gradient_norms = True
    config_schema = {
        "interval": Key(int, 50, minimum=1, doc="log every this many steps"),
        "per_layer": Key(bool, True, doc="also log each layer's values (metrics.jsonl and VisualDL)"),
    }

    def __init__(self, interval: int = 50, per_layer: bool = True) -> None:
        self.interval, self.per_layer = interval, per_layer
        self._before: Optional[Dict[str, np.ndarray]] = None

    def before_step(self) -> None:
        due = (self.trainer.state.global_step + 1) % self.interval == 0
        self.trainer.capture_gradients = due
        self._before = {k: np.array(v, dtype=np.float64) for k, v in floating_weights(self.trainer).items()} \
            if due else None

    def after_step(self) -> None:
        if self._before is None:
            return
        before, self._before = self._before, None
        self.trainer.capture_gradients = False
        after = floating_weights(self.trainer)
        grads = self.trainer.engine.gradient_square_sums()
        weights = {k: float(np.sum(np.square(after[k], dtype=np.float64))) for k in before}
        updates = {k: float(np.sum(np.square(after[k] - before[k]))) for k in before}
        olds = {k: float(np.sum(np.square(before[k]))) for k in before}
        record = {"grad_norm": math.sqrt(sum(grads.values())), "weight_norm": math.sqrt(sum(weights.values())),
                  "update_norm": math.sqrt(sum(updates.values())),
                  "update_ratio": _ratio(sum(updates.values()), sum(olds.values()))}
        step = self.trainer.state.global_step
        self.trainer.metric_logger.write("norms", step, record)
        if self.per_layer:
            layers: Dict[str, float] = {}
            for layer, value in _by_layer(grads.items()).items():
                layers[f"grad_norm/{layer}"] = math.sqrt(value)
            for layer, value in _by_layer(weights.items()).items():
                layers[f"weight_norm/{layer}"] = math.sqrt(value)
            old_by_layer = _by_layer(olds.items())
            for layer, value in _by_layer(updates.items()).items():
                layers[f"update_ratio/{layer}"] = _ratio(value, old_by_layer[layer])
            self.trainer.metric_logger.write("norms_per_layer", step, layers, console=False)


def _ratio(update_square_sum: float, weight_square_sum: float) -> float:
    return math.sqrt(update_square_sum / weight_square_sum) if weight_square_sum > 0 else math.inf
