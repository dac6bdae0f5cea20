"""Trainers of the tabular-classification task."""
from __future__ import annotations

from typing import Dict

from wenxin.common.registry import RegisterSet
from wenxin.controller.dynamic_trainer import BaseDynamicTrainer
from wenxin.controller.static_trainer import BaseStaticTrainer


class TabularTrainerMixin:
    """``do_train``/``do_evaluate`` for tabular classification, shared by both modes."""

    def do_train(self) -> Dict[str, Dict[str, float]]:
        return self.train_loop()  # type: ignore[attr-defined]

    def do_evaluate(self, reader_name: str, phase: str, step: int) -> Dict[str, float]:
        outputs, meta_info = self.collect_outputs(reader_name, phase)  # type: ignore[attr-defined]
        return self.model.get_metrics(outputs, meta_info, phase)  # type: ignore[attr-defined]


@RegisterSet.trainers.register("CustomDynamicTrainer")
class CustomDynamicTrainer(TabularTrainerMixin, BaseDynamicTrainer):
    """Eager-mode trainer for tabular classification."""


@RegisterSet.trainers.register("CustomStaticTrainer")
class CustomStaticTrainer(TabularTrainerMixin, BaseStaticTrainer):
    """Static-graph trainer for tabular classification."""
