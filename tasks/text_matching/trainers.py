"""Trainers of the text-matching task."""
from __future__ import annotations

from typing import Dict

from wenxin.common.registry import RegisterSet
from wenxin.controller.dynamic_trainer import BaseDynamicTrainer
from wenxin.controller.static_trainer import BaseStaticTrainer


class MatchingTrainerMixin:
    """``do_train``/``do_evaluate`` for matching, shared by the dynamic and static trainers.
    A pairwise model trains on triples but is evaluated on labelled pairs, so evaluation readers
    may have other fields than the train reader (the static trainer builds a program for each)."""

    def do_train(self) -> Dict[str, Dict[str, float]]:
        return self.train_loop()  # type: ignore[attr-defined]

    def do_evaluate(self, reader_name: str, phase: str, step: int) -> Dict[str, float]:
        outputs, meta_info = self.collect_outputs(reader_name, phase)  # type: ignore[attr-defined]
        return self.model.get_metrics(outputs, meta_info, phase)  # type: ignore[attr-defined]


@RegisterSet.trainers.register("CustomDynamicTrainer")
class CustomDynamicTrainer(MatchingTrainerMixin, BaseDynamicTrainer):
    """Eager-mode trainer for text matching."""


@RegisterSet.trainers.register("CustomStaticTrainer")
class CustomStaticTrainer(MatchingTrainerMixin, BaseStaticTrainer):
    """Static-graph trainer for text matching."""
