"""The trainers every task gets, registered as built-ins: ``CustomTrainer`` runs the mode
``model.is_dygraph`` picks; ``CustomDynamicTrainer`` and ``CustomStaticTrainer`` (ERNIE-kit's
names) are bound to one. Each trains with the shared loop and evaluates by the model's
``get_metrics`` (``BaseTrainer.do_train`` / ``do_evaluate``). A task folder needs only its
models; a task that registers a trainer under the same name uses its own."""
from __future__ import annotations

from wenxin.common.registry import RegisterSet
from wenxin.controller.base_trainer import BaseTrainer
from wenxin.controller.dynamic_trainer import BaseDynamicTrainer
from wenxin.controller.static_trainer import BaseStaticTrainer


@RegisterSet.trainers.register("CustomTrainer")
class CustomTrainer(BaseTrainer):
    """The default trainer (``trainer.type``), for any task, in the mode ``model.is_dygraph`` picks."""


@RegisterSet.trainers.register("CustomDynamicTrainer")
class CustomDynamicTrainer(BaseDynamicTrainer):
    """The eager-mode trainer, for any task."""


@RegisterSet.trainers.register("CustomStaticTrainer")
class CustomStaticTrainer(BaseStaticTrainer):
    """The static-graph trainer, for any task."""
