"""Export an inference model beside every checkpoint (``trainer.export.save_inference``)."""
from __future__ import annotations


from wenxin.common.registry import RegisterSet
from wenxin.controller.hooks.base import HookBase, Priority


@RegisterSet.hooks.register("InferenceExportHook")
class InferenceExportHook(HookBase):
    """After each checkpoint ``<ckpt>`` is written, exports ``<ckpt>/inference`` (ERNIE-kit's
    layout: ``<output_path>/save_inference_model/inference_step_<N>``)."""

    priority = Priority.LOW

    def after_save(self, name: str, path: str) -> None:
        if path:
            self.trainer.export_inference(self.trainer.checkpoints.export_folder(name, path))
