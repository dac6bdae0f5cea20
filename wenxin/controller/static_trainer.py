"""``BaseStaticTrainer``: the trainer bound to the static engine (ERNIE-kit's and users' name)."""
from __future__ import annotations

from wenxin.controller.base_trainer import BaseTrainer


class BaseStaticTrainer(BaseTrainer):
    """``BaseTrainer`` on the static-graph engine, whatever ``model.is_dygraph`` says (the config
    check refuses a task file where they disagree). A trainer that works in both modes
    subclasses ``BaseTrainer`` instead."""

    engine_mode = "static"
