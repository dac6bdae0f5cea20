"""``ModelMetricsMixin``: the ``do_train``/``do_evaluate`` most tasks need, for either trainer."""
from __future__ import annotations

from typing import Dict


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
