"""Trainers of the pretraining task."""
from __future__ import annotations

from typing import Dict

from wenxin.common.registry import RegisterSet
from wenxin.controller.dynamic_trainer import BaseDynamicTrainer
from wenxin.controller.static_trainer import BaseStaticTrainer


class PretrainingTrainerMixin:
    """``do_train``/``do_evaluate`` for masked-language-model pretraining (dev metrics: masked
    token accuracy, loss and perplexity, on fresh random masks)."""

    def do_train(self) -> Dict[str, Dict[str, float]]:
        return self.train_loop()  # type: ignore[attr-defined]

    def do_evaluate(self, reader_name: str, phase: str, step: int) -> Dict[str, float]:
        outputs, meta_info = self.collect_outputs(reader_name, phase)  # type: ignore[attr-defined]
        return self.model.get_metrics(outputs, meta_info, phase)  # type: ignore[attr-defined]


@RegisterSet.trainers.register("CustomDynamicTrainer")
class CustomDynamicTrainer(PretrainingTrainerMixin, BaseDynamicTrainer):
    """Eager-mode pretraining."""


@RegisterSet.trainers.register("CustomStaticTrainer")
class CustomStaticTrainer(PretrainingTrainerMixin, BaseStaticTrainer):
    """Static-graph pretraining."""
