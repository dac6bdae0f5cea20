"""The parameters of a sweep file and the base of sweep methods."""
from __future__ import annotations

import math
import random
from typing import Any, Dict, List, Optional, Protocol

from wenxin.common.errors import ConfigError


class Parameter:
    """One swept key: a list of values, or a numeric range (``min``, ``max``, ``log``, ``type``)."""

    def __init__(self, key: str, spec: Any, where: str) -> None:
        self.key = key
        self.values: Optional[List[Any]] = None
        self.low = self.high = 0.0
        self.log = False
        self.integer = False
        if isinstance(spec, list):
            spec = {"values": spec}
        if not isinstance(spec, dict):
            raise ConfigError(f"{where}: a list of values, or {{values: [...]}} or {{min, max}} (got {spec!r})")
        unknown = set(spec) - {"values", "min", "max", "log", "type"}
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}; use values, or min, max, log and type")
        if "values" in spec:
            if not isinstance(spec["values"], list) or not spec["values"]:
                raise ConfigError(f"{where}.values: a non-empty list")
            self.values = list(spec["values"])
            return
        low, high = spec.get("min"), spec.get("max")
        if not isinstance(low, (int, float)) or not isinstance(high, (int, float)) or isinstance(low, bool) \
                or isinstance(high, bool) or not low < high:
            raise ConfigError(f"{where}: min and max must be numbers with min < max (got {low!r}, {high!r})")
        self.low, self.high = float(low), float(high)
        self.log = bool(spec.get("log", False))
        if self.log and self.low <= 0:
            raise ConfigError(f"{where}: log: true needs min > 0")
        kind = spec.get("type", "float")
        if kind not in ("float", "int"):
            raise ConfigError(f"{where}.type: float or int (got {kind!r})")
        self.integer = kind == "int"

    def first(self) -> Any:
        """The first value, or the lower end of the range (a probe of the task file's keys and types)."""
        if self.values is not None:
            return self.values[0]
        return int(self.low) if self.integer else self.low

    def draw(self, rng: random.Random) -> Any:
        """A value drawn uniformly (log-uniformly with ``log``)."""
        if self.values is not None:
            return rng.choice(self.values)
        if self.log:
            value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            value = rng.uniform(self.low, self.high)
        return int(round(value)) if self.integer else value


class SweepSettings(Protocol):
    """What a method reads of the sweep file (``wenxin.sweep.SweepSpec``)."""

    parameters: List[Parameter]
    trials: int  # how many trials, for methods that draw them
    seed: int
    prune: bool  # whether weak trials may be stopped early
    mode: str  # max or min: which way the metric improves


class SweepMethod:
    """How a sweep picks its trials' values.

    A method either plans every trial up front (``planned``) or is asked for each trial's values
    as it starts (``ask``), and hears how each ended (``tell``). One whose trials report their dev
    metric while they train (``reports``) answers each report (``answer``) with whether to stop
    the trial (pruning). ``trial`` is the sweep's record of a trial (``sweep.json``): a method
    may keep its own keys there (Optuna keeps its trial number), and the sweep restores them
    when it starts again.
    """

    def __init__(self, spec: SweepSettings) -> None:
        self.spec = spec

    @classmethod
    def check(cls, spec: SweepSettings, where: str) -> None:
        """Refuse a sweep file this method cannot run (``where``: the file, for errors)."""

    def planned(self) -> Optional[List[Dict[str, Any]]]:
        """Every trial's values in order, the same on every start; None: asked as trials start."""
        return None

    @property
    def reports(self) -> bool:
        """Whether trials report their dev metric to the method while they train."""
        return False

    def open(self, output: str, trials: List[Dict[str, Any]]) -> None:
        """Start (or continue) with the trials recorded so far; ``output`` is the sweep's folder."""

    def ask(self, trial: Dict[str, Any]) -> None:
        """Set ``trial["values"]`` for a trial about to start (methods that plan nothing)."""
        raise NotImplementedError

    def answer(self, trial: Dict[str, Any], step: int, value: float) -> bool:
        """Whether to stop ``trial``, which reported ``value`` at ``step``."""
        return False

    def tell(self, trial: Dict[str, Any]) -> None:
        """``trial`` ended: its ``status`` and ``metric`` say how."""
