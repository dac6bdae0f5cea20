"""Periodic checkpoints, the final checkpoint, and the best and top-k checkpoints by a dev metric."""
from __future__ import annotations

import logging
import math
import os
from typing import Any, Dict, List, Optional, Tuple

from wenxin.common.errors import ConfigError
from wenxin.common.registry import RegisterSet
from wenxin.controller.checkpoint import BEST_DIR, is_complete
from wenxin.controller.hooks.base import IntervalHook, Priority

logger = logging.getLogger("wenxin")


@RegisterSet.hooks.register("CheckpointHook")
class CheckpointHook(IntervalHook):
    """Saves ``step_<N>`` every ``save_model_step`` steps (or at each epoch end when it is 0) and
    at the end of training, keeping the newest ``keep_checkpoint_max``; saves ``best`` whenever the
    dev metric ``trainer.metric`` improves (direction ``trainer.metric_mode``), and with
    ``save_top_k: k`` keeps the k best evaluations as ``top_step_<N>`` (ties: the earlier step).

    The top-k list is part of the hook's checkpointed state, so a resumed run ranks exactly as an
    uninterrupted one; top-k folders the resumed checkpoint does not list (written after it, or
    dropped but not yet deleted when the process died) are removed when training starts, and the
    resumed run writes them again when it gets there."""

    priority = Priority.LOW
    interval_key = "save_model_step"

    def __init__(self) -> None:
        self.top: List[Tuple[int, float]] = []  # (step, metric), best first

    def state_dict(self) -> Optional[Dict[str, Any]]:
        if not self.trainer.trainer_config["save_top_k"]:
            return None
        return {"top": [[step, value] for step, value in self.top]}

    def set_state_dict(self, state: Dict[str, Any]) -> None:
        self.top = [(int(step), float(value)) for step, value in state.get("top", [])]

    def before_train(self) -> None:
        super().before_train()
        self._last_saved = self.trainer.state.global_step  # a resumed run starts saved
        if self.trainer.trainer_config["save_top_k"] and self.trainer.is_writer:
            self._match_top_folders()

    def _match_top_folders(self) -> None:
        """Make the top-k folders on disk those the (restored) list names."""
        manager = self.trainer.checkpoints
        self.top = [(step, value) for step, value in self.top
                    if is_complete(os.path.join(manager.root, manager.top_name(step)))]
        for path in manager.remove_top_except({step for step, _ in self.top}):
            logger.info("top-k: removed %s (not among the top %d at the step this run continues from)", path,
                        self.trainer.trainer_config["save_top_k"])

    def trigger(self) -> None:
        step = self.trainer.state.global_step
        if step != self._last_saved:
            self.trainer.save_checkpoint(self.trainer.checkpoints.step_name(step))
            self._last_saved = step

    def after_train(self) -> None:
        self.trigger()

    def check_metrics(self, reader_name: str, metrics: Dict[str, float]) -> None:
        cfg = self.trainer.trainer_config
        if reader_name == "dev_reader" and cfg["save_best"] and cfg["metric"] not in metrics:
            raise ConfigError(f"trainer.metric: '{cfg['metric']}' is not a dev metric; "
                              f"available: {', '.join(sorted(metrics))}")

    def after_eval(self, reader_name: str, metrics: Dict[str, float]) -> None:
        cfg, state = self.trainer.trainer_config, self.trainer.state
        if reader_name != "dev_reader" or not cfg["save_best"]:
            return
        name = cfg["metric"]
        if name not in metrics:
            raise ConfigError(f"trainer.metric: '{name}' is not a dev metric; "
                              f"available: {', '.join(sorted(metrics))}")
        value = float(metrics[name])
        if math.isnan(value):
            return
        better = (state.best_metric is None
                  or (value > state.best_metric if cfg["metric_mode"] == "max" else value < state.best_metric))
        if cfg["save_top_k"]:
            self._update_top(value)
        if better:
            state.best_metric, state.best_step = value, state.global_step
            path = self.trainer.save_checkpoint(BEST_DIR, update_latest=False)
            if path:  # rank 0 writes; the other ranks only keep the score
                logger.info("new best dev %s %.6g at step %d -> %s", name, value, state.global_step, path)

    def _update_top(self, value: float) -> None:
        """Enter this step's evaluation into the top k: save its folder first, then delete the one
        it pushed out (a crash in between leaves one folder too many, which the next start removes)."""
        cfg, step = self.trainer.trainer_config, self.trainer.state.global_step
        sign = -1.0 if cfg["metric_mode"] == "max" else 1.0
        ranked = sorted([entry for entry in self.top if entry[0] != step] + [(step, value)],
                        key=lambda entry: (sign * entry[1], entry[0]))
        kept = ranked[:cfg["save_top_k"]]
        if (step, value) not in kept:
            return
        dropped = [s for s, _ in self.top if s not in {k for k, _ in kept}]
        self.top = kept
        manager = self.trainer.checkpoints
        path = self.trainer.save_checkpoint(manager.top_name(step), update_latest=False)
        if not path:  # rank 0 writes; the other ranks only keep the list
            return
        for old in dropped:
            manager.remove(manager.top_name(old))
        rank = kept.index((step, value)) + 1
        logger.info("top-%d: dev %s %.6g at step %d is number %d -> %s", cfg["save_top_k"], cfg["metric"], value,
                    step, rank, path)
