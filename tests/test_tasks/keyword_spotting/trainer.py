"""The task's own trainer, registered under the same name as text_classification's."""
from typing import Dict

from wenxin.common.registry import RegisterSet
from wenxin.controller.dynamic_trainer import BaseDynamicTrainer


@RegisterSet.trainers.register("CustomDynamicTrainer")
class CustomDynamicTrainer(BaseDynamicTrainer):
    """Trains, then writes a marker so the test can see that this class (not another task's) ran."""

    def do_train(self) -> Dict[str, Dict[str, float]]:
        metrics = self.train_loop()
        with open(f"{self.output_path}/keyword_trainer_ran", "w") as f:
            f.write("yes")
        return metrics

    def do_evaluate(self, reader_name: str, phase: str, step: int) -> Dict[str, float]:
        outputs, meta_info = self.collect_outputs(reader_name, phase)
        return self.model.get_metrics(outputs, meta_info, phase)
