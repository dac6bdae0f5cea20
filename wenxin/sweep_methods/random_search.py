"""``method: random``: ``trials`` draws of every parameter (uniform, or log-uniform), seeded."""
from __future__ import annotations

import random
from typing import Any, Dict, List

from wenxin.common.registry import RegisterSet
from wenxin.sweep_methods.base import SweepMethod


@RegisterSet.sweep_methods.register("random")
class RandomSearch(SweepMethod):
    """Values drawn from ``seed``: the same trials on every start of the sweep."""

    def planned(self) -> List[Dict[str, Any]]:
        rng = random.Random(self.spec.seed)
        return [{p.key: p.draw(rng) for p in self.spec.parameters} for _ in range(self.spec.trials)]
