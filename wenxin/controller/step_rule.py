"""The step rule: how the batches of one optimizer step become one update, for every engine.

One optimizer step runs ``accumulate`` micro-batches. Each micro-batch differentiates its loss
divided by ``accumulate`` (``micro_objective``), so the gradients add up to the mean gradient
of the step's batches; data parallelism then averages them over the ``world_size`` processes.
The optimizer clips the result by its global norm (``model.optimization.max_grad_norm``, in the
optimizer itself: ``wenxin.optim``) and applies it. A step whose loss is checked
(``checks_loss``: every ``trainer.step.nan_check_step`` steps) and found NaN/Inf on any process
(``skips``) applies nothing, and its optimizer state stays as it was; the NaN guard hook counts
it. The loss a step reports is the mean of its micro-batches' losses. The LR schedule moves on
after every step, applied or skipped (``LRSchedulerHook``). With float16 loss scaling, the
scaler also skips a step whose scaled gradients overflow, and lowers its scale.

The eager engine (``EagerOptimizerStep``), the static engine (``static_step.build_step``) and the
fast tier's numpy engine each run this rule with their own operations; a test checks the three
give the same losses and parameters.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence


@dataclasses.dataclass(frozen=True)
class StepRule:
    """The rule's settings (see the module docstring)."""

    accumulate: int = 1  # micro-batches a step (trainer.step.gradient_accumulation_steps)
    world_size: int = 1  # processes whose gradients are averaged
    nan_check_every: int = 1  # trainer.step.nan_check_step (0: the loss is never checked)

    def micro_objective(self, loss: Any) -> Any:
        """What one micro-batch differentiates (a tensor of either mode, or a number)."""
        return loss / self.accumulate if self.accumulate > 1 else loss

    def checks_loss(self, step: int) -> bool:
        """Whether the step with 0-based index ``step`` checks its loss for NaN/Inf."""
        return bool(self.nan_check_every) and (step + 1) % self.nan_check_every == 0

    @staticmethod
    def skips(checked: bool, nonfinite: bool) -> bool:
        """Whether a step applies nothing: its loss was checked and is NaN/Inf (on any process)."""
        return checked and nonfinite

    @staticmethod
    def step_loss(losses: Sequence[float]) -> float:
        """The loss a step reports: the mean of its micro-batches' losses."""
        return sum(losses) / len(losses)
