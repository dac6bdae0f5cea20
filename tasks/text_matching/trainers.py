"""Trainers of the text-matching task: the shared loop, evaluated by the model's metrics."""
from __future__ import annotations

from wenxin.common.registry import RegisterSet
from wenxin.controller.dynamic_trainer import BaseDynamicTrainer
from wenxin.controller.static_trainer import BaseStaticTrainer
from wenxin.controller.task_trainers import ModelMetricsMixin


@RegisterSet.trainers.register("CustomDynamicTrainer")
class CustomDynamicTrainer(ModelMetricsMixin, BaseDynamicTrainer):
    """Eager-mode trainer for text matching (evaluation readers may read other fields than the train reader)."""


@RegisterSet.trainers.register("CustomStaticTrainer")
class CustomStaticTrainer(ModelMetricsMixin, BaseStaticTrainer):
    """Static-graph trainer for text matching (evaluation readers may read other fields than the train reader)."""
