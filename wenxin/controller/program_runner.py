"""``ProgramRunner``: runs one static program, with fixed inputs and outputs, step after step.

``paddle.static.Executor.run`` finds its cached PIR interpreter for a program by a key that, in
Paddle 3.3, includes ``str(program)``: the whole program is printed to a string on every call.
That costs ~0.8 ms per step for a 3-layer MLP (5–10% of its step on a 2-core CPU) and grows with
the program. The trainer runs the same few programs with the same feeds and fetches every step, so
a runner looks the interpreter up once, through the Executor's own cache, then per step does what
``Executor.run`` does after that lookup: feed (with Paddle's shape and dtype checks), set the
learning rate of an LR schedule, run and fetch.

Those steps use Executor internals (``_executor_cache``, ``_pir_feed_data``). Where they differ
(another Paddle version), the runner falls back to ``Executor.run``, which is only slower.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Mapping, Optional

import numpy as np
import paddle
from paddle.base.data_feeder import convert_dtype

logger = logging.getLogger("wenxin")


class ProgramRunner:
    """Runs ``program`` on ``executor`` in ``scope`` with the given feed names, fetching
    ``fetch_list``; returns the fetched values as numpy arrays."""

    def __init__(self, executor: paddle.static.Executor, program: paddle.static.Program,
                 feed_names: List[str], fetch_list: List[Any], scope: Any) -> None:
        self.executor = executor
        self.program = program
        self.feed_names = list(feed_names)
        self.fetch_list = list(fetch_list)
        self.scope = scope
        self._interpreter: Optional[Any] = None
        self._data_ops: List[Any] = []
        self._lr_tensor: Optional[Any] = None
        self._lr_dtype: Any = np.float32
        try:
            self._look_up_interpreter()
        except (AttributeError, TypeError, ValueError) as error:  # other Executor internals
            logger.debug("ProgramRunner falls back to Executor.run: %s", error)
            self._interpreter = None

    def _look_up_interpreter(self) -> None:
        placeholder = {name: None for name in self.feed_names}  # only the names enter the cache key
        cached, self._interpreter, self._data_ops = self.executor._executor_cache.get_pir_program_and_executor(  # noqa: SLF001
            self.program, placeholder, self.fetch_list, "feed", "fetch", self.executor.place, self.scope,
            self.executor.plan)
        self._cached_program = cached
        scheduler = getattr(self.program, "lr_scheduler", None)
        lr_name = getattr(self.program, "lr_name", None)
        lr_var = self.scope.find_var(lr_name) if scheduler is not None and lr_name else None
        if lr_var is not None:
            self._lr_scheduler = scheduler
            self._lr_tensor = lr_var.get_tensor()
            self._lr_dtype = np.dtype(convert_dtype(self._lr_tensor._dtype()))  # noqa: SLF001

    def run(self, feed: Mapping[str, Any]) -> List[np.ndarray]:
        """One run on ``feed`` (a batch; only the program's inputs are taken from it)."""
        feed_dict: Dict[str, Any] = {name: feed[name] for name in self.feed_names}
        if self._interpreter is None:
            with paddle.static.scope_guard(self.scope):
                return self.executor.run(self.program, feed=feed_dict, fetch_list=self.fetch_list)
        self.executor._pir_feed_data(self._cached_program, feed_dict, self.scope, self._data_ops)  # noqa: SLF001
        if self._lr_tensor is not None:
            self._lr_tensor.set(np.full(self._lr_tensor.shape(), self._lr_scheduler(), self._lr_dtype),
                                self.executor.place)
        return self._interpreter.run(self.feed_names, True)
