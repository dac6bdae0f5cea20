"""``method: optuna``: each trial drawn from Optuna's TPE sampler (seeded) as it starts, with the
study in ``<output>/optuna.db``. With ``prune``, trials report their dev metric after every
evaluation and Optuna's median pruner stops those worse than the median of the earlier trials
at the same step."""
from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
from typing import Any, Dict, List

from wenxin.common.errors import ConfigError
from wenxin.common.registry import RegisterSet
from wenxin.sweep_methods.base import Parameter, SweepMethod, SweepSettings

logger = logging.getLogger("wenxin")
FINISHED = ("done", "failed", "pruned")


def distribution(parameter: Parameter) -> Any:
    """The Optuna distribution of a parameter."""
    import optuna
    if parameter.values is not None:
        return optuna.distributions.CategoricalDistribution(parameter.values)
    if parameter.integer:
        return optuna.distributions.IntDistribution(int(parameter.low), int(parameter.high), log=parameter.log)
    return optuna.distributions.FloatDistribution(parameter.low, parameter.high, log=parameter.log)


@RegisterSet.sweep_methods.register("optuna")
class OptunaSearch(SweepMethod):
    """Optuna's TPE sampler and median pruner (see the module docstring)."""

    study: Any = None

    @classmethod
    def check(cls, spec: SweepSettings, where: str) -> None:
        if importlib.util.find_spec("optuna") is None:
            raise ConfigError(f"{where}: method: optuna needs the optuna package: pip install \"wenxin[sweep]\" "
                              f"(or optuna)")

    @property
    def reports(self) -> bool:
        return bool(self.spec.prune)

    def open(self, output: str, trials: List[Dict[str, Any]]) -> None:
        import optuna
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        pruner = optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=0) if self.spec.prune \
            else optuna.pruners.NopPruner()
        self.study = optuna.create_study(
            study_name="sweep", storage=f"sqlite:///{os.path.join(output, 'optuna.db')}", load_if_exists=True,
            sampler=optuna.samplers.TPESampler(seed=self.spec.seed), pruner=pruner,
            direction="maximize" if self.spec.mode == "max" else "minimize")
        self._asked: Dict[int, Any] = {}  # our trial index -> its optuna.Trial
        for trial in trials:  # trials a killed sweep left running are asked again with their values
            if trial["status"] not in FINISHED and "optuna" in trial:
                with contextlib.suppress(Exception):  # already finished in the study
                    self.study.tell(trial["optuna"], state=optuna.trial.TrialState.FAIL)
                self.study.enqueue_trial(trial["values"], skip_if_exists=False)

    def ask(self, trial: Dict[str, Any]) -> None:
        asked = self.study.ask({p.key: distribution(p) for p in self.spec.parameters})
        self._asked[trial["trial"]] = asked
        trial["optuna"] = asked.number
        trial["values"] = {p.key: asked.params[p.key] for p in self.spec.parameters}

    def answer(self, trial: Dict[str, Any], step: int, value: float) -> bool:
        asked = self._asked[trial["trial"]]
        asked.report(value, step)
        return bool(asked.should_prune())

    def tell(self, trial: Dict[str, Any]) -> None:
        import optuna
        asked = self._asked.pop(trial["trial"])
        if trial["status"] == "done":
            self.study.tell(asked, trial["metric"])
        elif trial["status"] == "pruned":
            self.study.tell(asked, state=optuna.trial.TrialState.PRUNED)
        else:
            self.study.tell(asked, state=optuna.trial.TrialState.FAIL)
