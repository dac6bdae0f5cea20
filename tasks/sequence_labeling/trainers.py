"""Trainers of the sequence-labeling task: the shared loop, and evaluation through the model's
chunk metrics."""
from __future__ import annotations

from typing import Dict

from wenxin.common.registry import RegisterSet
from wenxin.controller.dynamic_trainer import BaseDynamicTrainer
from wenxin.controller.static_trainer import BaseStaticTrainer


class TaggingTrainerMixin:
    """``do_train``/``do_evaluate`` for tagging, shared by the dynamic and static trainers."""

    def do_train(self) -> Dict[str, Dict[str, float]]:
        return self.train_loop()  # type: ignore[attr-defined]

    def do_evaluate(self, reader_name: str, phase: str, step: int) -> Dict[str, float]:
        # predictions and labels come back [examples, longest T] (shorter batches zero-padded);
        # the model's metrics read each example up to its seq_lens
        outputs, meta_info = self.collect_outputs(reader_name, phase)  # type: ignore[attr-defined]
        return self.model.get_metrics(outputs, meta_info, phase)  # type: ignore[attr-defined]


@RegisterSet.trainers.register("CustomDynamicTrainer")
class CustomDynamicTrainer(TaggingTrainerMixin, BaseDynamicTrainer):
    """Eager-mode trainer for sequence labeling."""


@RegisterSet.trainers.register("CustomStaticTrainer")
class CustomStaticTrainer(TaggingTrainerMixin, BaseStaticTrainer):
    """Static-graph trainer for sequence labeling (fields need ``pad_to_max_seq_len`` for a CRF)."""
