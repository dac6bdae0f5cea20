"""Step timing: data-loading time, step time (wall and this process's CPU time), throughput and ETA."""
from __future__ import annotations

import time

from wenxin.common.registry import RegisterSet
from wenxin.controller.hooks.base import HookBase, Priority


@RegisterSet.hooks.register("IterationTimerHook")
class IterationTimerHook(HookBase):
    """Measures each step; keeps interval averages in ``trainer.state.timing`` for the logger.
    ``step_cpu_time`` is the process's CPU time a step (all its threads): unlike ``step_time`` it
    does not grow when other processes share the cores."""

    priority = Priority.HIGHEST

    def before_train(self) -> None:
        self._train_start = time.perf_counter()
        self._start_step = self.trainer.state.global_step
        self.reset_interval()

    def reset_interval(self) -> None:
        self._steps = 0
        self._step_time = 0.0
        self._step_cpu_time = 0.0
        self._data_time = 0.0

    def before_step(self) -> None:
        self._step_start = time.perf_counter()
        self._step_cpu_start = time.process_time()

    def after_step(self) -> None:
        state = self.trainer.state
        self._steps += 1
        self._step_time += time.perf_counter() - self._step_start
        self._step_cpu_time += time.process_time() - self._step_cpu_start
        self._data_time += state.last_data_time
        done = state.global_step - self._start_step
        elapsed = time.perf_counter() - self._train_start
        remaining = max(0, state.max_steps - state.global_step)
        state.timing = {
            "step_time": self._step_time / self._steps,
            "step_cpu_time": self._step_cpu_time / self._steps,
            "data_time": self._data_time / self._steps,
            "steps_per_sec": self._steps / self._step_time if self._step_time > 0 else 0.0,
            "eta_sec": elapsed / done * remaining if done else 0.0,
            "total_steps": float(state.max_steps),  # for a progress bar: step of total
        }
