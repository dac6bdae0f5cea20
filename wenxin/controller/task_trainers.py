"""The trainers every task gets: ``ModelMetricsMixin``'s ``do_train``/``do_evaluate`` on either
execution mode, registered as built-ins. A task folder needs only its models; a task that
registers a trainer under the same name uses its own."""
from __future__ import annotations

from typing import Dict

from wenxin.common.registry import RegisterSet
from wenxin.controller.dynamic_trainer import BaseDynamicTrainer
from wenxin.controller.static_trainer import BaseStaticTrainer


class ModelMetricsMixin:
    """Trains with the shared loop and evaluates a reader by the model's ``get_metrics`` over all
    of its outputs (sequence outputs of batches with different lengths are zero-padded to the
    longest). Mix it in before ``BaseDynamicTrainer`` or ``BaseStaticTrainer``; a task overrides
    either method when it needs more (see ``tests/test_tasks/keyword_spotting``)."""

    def do_train(self) -> Dict[str, Dict[str, float]]:
        return self.train_loop()  # type: ignore[attr-defined]

    def do_evaluate(self, reader_name: str, phase: str, step: int) -> Dict[str, float]:
        outputs, meta_info = self.collect_outputs(reader_name, phase)  # type: ignore[attr-defined]
        return self.model.get_metrics(outputs, meta_info, phase)  # type: ignore[attr-defined]


@RegisterSet.trainers.register("CustomDynamicTrainer")
class CustomDynamicTrainer(ModelMetricsMixin, BaseDynamicTrainer):
    """The default eager-mode trainer (``trainer.type``), for any task."""


@RegisterSet.trainers.register("CustomStaticTrainer")
class CustomStaticTrainer(ModelMetricsMixin, BaseStaticTrainer):
    """The default static-graph trainer, for any task."""


# ERNIE-kit's name for its static-graph trainer
RegisterSet.trainers.register("CustomTrainer")(CustomStaticTrainer)
