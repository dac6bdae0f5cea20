"""The run's result in ONNX too (``trainer.export.save_onnx``, on by default with ``save_inference``):
the fastest engine by default, wherever the ``onnx`` extra is installed."""
from __future__ import annotations

import importlib.util
import logging
import os

from wenxin.common.errors import InferenceError
from wenxin.common.registry import RegisterSet
from wenxin.controller.hooks.base import HookBase, Priority

logger = logging.getLogger("wenxin")


def onnx_installed() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in ("paddle2onnx", "onnxruntime"))


@RegisterSet.hooks.register("OnnxResultHook")
class OnnxResultHook(HookBase):
    """When training ends (not stopped), converts the inference model of the run's result (its
    best checkpoint with ``load_best_at_end``, else the final one) to ``model.onnx``, as
    ``wenxin export --format onnx`` does: kept only when ONNX Runtime gives Paddle's outputs on
    a dev batch. Once a run, not at every checkpoint: the conversion and its check run in child
    processes and take seconds to a minute (13 s for a 45 MB model, 40 s for 358 MB, measured with
    ``benchmarks/onnx_export_memory.py``). A model paddle2onnx cannot convert, or whose outputs
    differ, keeps its Paddle model and logs why. paddle2onnx's process needs about 9 times the
    model's size, so a model above ``trainer.export.save_onnx_max_mb`` is skipped with a log line.
    Without paddle2onnx and onnxruntime it does nothing."""

    priority = Priority.LOWEST + 5  # after the final checkpoint and the best model's reload

    def after_train(self) -> None:
        trainer = self.trainer
        if not trainer.is_writer or trainer.state.interrupted or not onnx_installed():
            return
        if getattr(trainer.model, "step_specs", None) is not None:
            return  # generation step programs: on demand (wenxin export --format onnx; with its int8 copy minutes)
        from wenxin.controller.summary import result_checkpoint
        from wenxin.inference.onnx_export import check_batch, export_onnx
        from wenxin.inference.paddle_backend import model_files
        result, _, _ = result_checkpoint(trainer)
        if result is None:
            return
        folder = trainer.checkpoints.export_folder(os.path.basename(result), result)
        if not os.path.isdir(folder):
            return
        limit = trainer.trainer_config["export"]["save_onnx_max_mb"]
        files = model_files(folder)  # none: export_onnx says so below
        size_mb = os.path.getsize(files[1]) / 2**20 if files else 0.0
        if limit and size_mb > limit:
            logger.info("trainer.export.save_onnx: not converting %s to ONNX: its parameters are %.0f MB, above "
                        "trainer.export.save_onnx_max_mb (%g; the conversion needs about 9 times that); convert "
                        "it later "
                        "with wenxin export --format onnx", folder, size_mb, limit)
            return
        try:
            export_onnx(folder, check_batch(trainer.readers))
        except InferenceError as e:
            logger.warning("trainer.export.save_onnx: %s (set trainer.export.save_onnx false to skip the "
                           "conversion)", e)
