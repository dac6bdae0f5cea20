"""``method: grid``: every combination of the parameters' values, in order."""
from __future__ import annotations

import itertools
from typing import Any, Dict, List

from wenxin.common.errors import ConfigError
from wenxin.common.registry import RegisterSet
from wenxin.sweep_methods.base import SweepMethod, SweepSettings


@RegisterSet.sweep_methods.register("grid")
class GridSearch(SweepMethod):
    """Every combination of the listed values."""

    @classmethod
    def check(cls, spec: SweepSettings, where: str) -> None:
        ranged = [p.key for p in spec.parameters if p.values is None]
        if ranged:
            raise ConfigError(f"{where}: parameters.{ranged[0]}: grid search needs a list of values "
                              f"(ranges are for method: random)")

    def planned(self) -> List[Dict[str, Any]]:
        keys = [p.key for p in self.spec.parameters]
        return [dict(zip(keys, combo)) for combo in itertools.product(*(p.values or [] for p in self.spec.parameters))]
