"""The task's own trainer, written once on ``BaseTrainer``: it runs the mode ``model.is_dygraph``
picks, registered under the same name as the built-in one."""
from typing import Dict

from wenxin.common.registry import RegisterSet
from wenxin.controller.base_trainer import BaseTrainer


@RegisterSet.trainers.register("CustomTrainer")
class KeywordTrainer(BaseTrainer):
    """Trains, then writes a marker (with the mode it ran in) so the test can see that this class
    (not another task's) ran; evaluates through the model's metrics plus the share of positives."""

    def do_train(self) -> Dict[str, Dict[str, float]]:
        metrics = self.train_loop()
        with open(f"{self.output_path}/keyword_trainer_ran", "w") as f:
            f.write(f"yes, {self.mode}")
        return metrics

    def do_evaluate(self, reader_name: str, phase: str, step: int) -> Dict[str, float]:
        outputs, meta_info = self.collect_outputs(reader_name, phase)
        metrics = self.model.get_metrics(outputs, meta_info, phase)
        metrics["predicted_positive"] = float(outputs["predictions"].mean())
        return metrics
