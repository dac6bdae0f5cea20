"""Reload the best checkpoint's weights when training ends (``trainer.evaluation.load_best_at_end``)."""
from __future__ import annotations

import logging
import os

from wenxin.common.registry import RegisterSet
from wenxin.controller import checkpoint as ckpt
from wenxin.controller import parameters
from wenxin.controller.evaluator import EvaluationInterrupted
from wenxin.controller.hooks.base import HookBase, Priority

logger = logging.getLogger("wenxin")


@RegisterSet.hooks.register("LoadBestModelHook")
class LoadBestModelHook(HookBase):
    """After the final checkpoint is written, loads the parameters of ``checkpoints/best`` (the
    best dev ``trainer.evaluation.metric``) into the model and evaluates dev/test again, logged as
    ``best_dev``/``best_test``; ``do_train`` then returns these metrics and the model in memory
    is the selected one."""

    priority = Priority.LOWEST  # after CheckpointHook saved the true final state

    def after_train(self) -> None:
        trainer, state = self.trainer, self.trainer.state
        if state.interrupted or state.best_step < 0 or state.best_step == state.global_step:
            return  # no best checkpoint, or the final weights are the best ones
        folder = os.path.join(trainer.checkpoints.root, ckpt.BEST_DIR)
        params = parameters.load_model_params(folder, "best checkpoint model file")
        trainer.restore_model_params(params, folder)
        logger.info("loaded the best checkpoint (step %d, dev %s %.6g) from %s", state.best_step,
                    trainer.trainer_config["evaluation"]["metric"], state.best_metric, folder)
        try:
            for name in trainer.eval_readers():
                trainer.evaluate(name, tag=f"best_{name.replace('_reader', '')}", run_hooks=False,
                                 step=state.best_step)
        except EvaluationInterrupted:
            logger.warning("stopped for the signal while evaluating the best checkpoint again (wenxin evaluate "
                           "--checkpoint %s scores it)", folder)
