"""``ProgramRunner``: runs one static program, with fixed inputs and outputs, step after step.

``paddle.static.Executor.run`` finds its cached PIR interpreter for a program by a key that, in
Paddle 3.3, includes ``str(program)``: the whole program is printed to a string on every call.
That costs ~0.8 ms per step for a 3-layer MLP (5–10% of its step on a 2-core CPU) and grows with
the program. The trainer runs the same few programs with the same feeds and fetches every step, so
a runner looks the interpreter up once, through the Executor's own cache, then per step does what
``Executor.run`` does after that lookup: feed (with Paddle's shape and dtype checks), set the
learning rate of an LR schedule, run and fetch.

Those steps use Executor internals (``_executor_cache``, ``_pir_feed_data``). Where they differ
(another Paddle version), the runner falls back to ``Executor.run``, which is only slower. So it
does where its own checks fail: a program with an LR schedule whose learning-rate variable it
cannot find and set (it would silently freeze the learning rate), or, for a read-only program, a
first run whose outputs differ from ``Executor.run``'s on the same feed. ``fast=False``
(``trainer.fast_paths.program_runner``) always uses ``Executor.run``.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Mapping, Optional

import numpy as np
import paddle
from paddle.base.data_feeder import convert_dtype

from wenxin.compat import warn_if_untested

logger = logging.getLogger("wenxin")


class ProgramRunner:
    """Runs ``program`` on ``executor`` in ``scope`` with the given feed names, fetching
    ``fetch_list``; returns the fetched values as numpy arrays.

    Args:
        read_only: the program changes no state (an evaluation program), so its first run is
            also run by ``Executor.run`` and the outputs compared.
        fast: use the fast path at all (``trainer.fast_paths.program_runner``).
        has_lr_schedule: the program's optimizer has an LR schedule, which the runner must be
            able to set (else it falls back rather than train with a frozen learning rate).
    """

    def __init__(self, executor: paddle.static.Executor, program: paddle.static.Program,
                 feed_names: List[str], fetch_list: List[Any], scope: Any, read_only: bool = False,
                 fast: bool = True, has_lr_schedule: bool = False) -> None:
        self.executor = executor
        self.program = program
        self.feed_names = list(feed_names)
        self.fetch_list = list(fetch_list)
        self.scope = scope
        self.read_only = read_only
        self._interpreter: Optional[Any] = None
        self._data_ops: List[Any] = []
        self._lr_tensor: Any = None  # the learning-rate variable's DenseTensor (Paddle internal), if any
        self._lr_scheduler: Any = None  # the program's LRScheduler, called for the current rate
        self._lr_dtype: Any = np.float32
        self._checked = False
        self.has_lr_schedule = has_lr_schedule
        if not fast:
            return
        warn_if_untested("paddle", paddle.__version__)
        try:
            self._look_up_interpreter()
            self._check_learning_rate()
        except (AttributeError, TypeError, ValueError, RuntimeError) as error:  # other Executor internals
            self._fall_back(str(error))

    def _fall_back(self, why: str) -> None:
        logger.warning("ProgramRunner uses Executor.run (slower): %s", why)
        self._interpreter = None

    @property
    def fast(self) -> bool:
        """Whether runs take the fast path."""
        return self._interpreter is not None

    def _check_learning_rate(self) -> None:
        """A program with an LR schedule must have a learning-rate variable this runner sets, or
        the fast path would train with a frozen learning rate."""
        if getattr(self.program, "lr_scheduler", None) is None and not self.has_lr_schedule:
            return
        if self._lr_tensor is None:
            raise ValueError(f"cannot find the program's learning-rate variable "
                             f"({getattr(self.program, 'lr_name', None)!r})")
        probe = 0.125 if float(self._lr_scheduler()) != 0.125 else 0.25
        self._set_learning_rate(probe)
        lr_name = getattr(self.program, "lr_name", None)
        read_back = np.array(self.scope.find_var(lr_name).get_tensor()).reshape(-1)
        self._set_learning_rate()
        if read_back.size != 1 or float(read_back[0]) != probe:
            raise ValueError("setting the learning-rate variable does not reach the program")

    def _set_learning_rate(self, value: Optional[float] = None) -> None:
        lr = self._lr_scheduler() if value is None else value
        self._lr_tensor.set(np.full(self._lr_tensor.shape(), lr, self._lr_dtype), self.executor.place)

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
            self._set_learning_rate()
        outputs = self._interpreter.run(self.feed_names, True)
        if self.read_only and not self._checked:
            self._checked = True
            with paddle.static.scope_guard(self.scope):
                expected = self.executor.run(self.program, feed=feed_dict, fetch_list=self.fetch_list)
            if not all(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
                       for a, b in zip(outputs, expected)):
                self._fall_back("its outputs differ from Executor.run's on the same feed")
                return expected
        return outputs
