"""Periodic checkpoints, the final checkpoint, and the best and top-k checkpoints by a dev metric."""
from __future__ import annotations

import logging
import math
from typing import Any, Dict, Optional

from wenxin.common.errors import ConfigError
from wenxin.common.registry import RegisterSet
from wenxin.controller.checkpoint import BEST_DIR
from wenxin.controller.hooks.base import IntervalHook, Priority

logger = logging.getLogger("wenxin")


@RegisterSet.hooks.register("CheckpointHook")
class CheckpointHook(IntervalHook):
    """Saves ``step_<N>`` every ``save_model_step`` steps (or at each epoch end when it is 0) and
    at the end of training, keeping the newest ``keep_checkpoint_max``; saves ``best`` whenever the
    dev metric ``trainer.evaluation.metric`` improves (direction ``trainer.evaluation.metric_mode``), and with
    ``save_top_k: k`` keeps the k best evaluations as ``top_step_<N>`` (ties: the earlier step).

    The top k are read from the folders themselves (each holds its dev metrics), so they need no
    record of their own: a resumed run's checkpoint manager deletes the top-k folders of later
    steps, and the run writes them again when it gets there."""

    priority = Priority.LOW
    interval_key = ("checkpoints", "save_model_step")

    def state_dict(self) -> Optional[Dict[str, Any]]:
        return None

    def set_state_dict(self, state: Dict[str, Any]) -> None:
        """An older wenxin's checkpoint holds its top-k list here; the folders are read instead."""

    def before_train(self) -> None:
        super().before_train()
        self._last_saved = self.trainer.state.global_step  # a resumed run starts saved

    def trigger(self) -> None:
        step = self.trainer.state.global_step
        if step != self._last_saved:
            self.trainer.save_checkpoint(self.trainer.checkpoints.step_name(step))
            self._last_saved = step

    def after_train(self) -> None:
        self.trigger()

    def check_metrics(self, reader_name: str, metrics: Dict[str, float]) -> None:
        cfg = self.trainer.trainer_config
        metric = cfg["evaluation"]["metric"]
        if reader_name == "dev_reader" and cfg["checkpoints"]["save_best"] and metric not in metrics:
            raise ConfigError(f"trainer.evaluation.metric: '{metric}' is not a dev metric; "
                              f"available: {', '.join(sorted(metrics))}")

    def after_eval(self, reader_name: str, metrics: Dict[str, float]) -> None:
        cfg, state = self.trainer.trainer_config, self.trainer.state
        if reader_name != "dev_reader" or not cfg["checkpoints"]["save_best"]:
            return
        name = cfg["evaluation"]["metric"]
        if name not in metrics:
            raise ConfigError(f"trainer.evaluation.metric: '{name}' is not a dev metric; "
                              f"available: {', '.join(sorted(metrics))}")
        value = float(metrics[name])
        if math.isnan(value):
            return
        higher = cfg["evaluation"]["metric_mode"] == "max"
        better = (state.best_metric is None
                  or (value > state.best_metric if higher else value < state.best_metric))
        if cfg["checkpoints"]["save_top_k"] and self.trainer.is_writer:
            self._update_top(value)
        if better:
            state.best_metric, state.best_step = value, state.global_step
            path = self.trainer.save_checkpoint(BEST_DIR)
            if path:  # rank 0 writes; the other ranks only keep the score
                logger.info("new best dev %s %.6g at step %d -> %s", name, value, state.global_step, path)

    def _update_top(self, value: float) -> None:
        """Save this step's evaluation as a top-k folder when it ranks among the k best of the
        folders; the save prunes the one it pushes out."""
        step, manager = self.trainer.state.global_step, self.trainer.checkpoints
        others = [(s, v) for s, v in manager.top_ranking() if s != step]
        kept = manager.ranked(others + [(step, value)])[:manager.top_k]
        if (step, value) not in kept:
            return
        path = self.trainer.save_checkpoint(manager.top_name(step))
        rank = kept.index((step, value)) + 1
        logger.info("top-%d: dev %s %.6g at step %d is number %d -> %s", manager.top_k, manager.metric, value,
                    step, rank, path)
