"""Profile a window of training steps with ``paddle.profiler`` (``trainer.logging.profile``)."""
from __future__ import annotations

import contextlib
import io
import logging
import os
from typing import Any, Optional

from wenxin.common.registry import RegisterSet
from wenxin.controller.hooks.base import HookBase, Priority

logger = logging.getLogger("wenxin")

PROFILE_DIR = "profile"
SUMMARY_FILE = "summary.txt"
TOP_OPERATORS = 15
# Paddle 3.3's profiler registers each thread's event recorder without a lock: a static program's
# executor, running ops on threads of its own, crashed the process (SIGSEGV in the registration of
# a ThreadEventRecorder, or glibc's "unaligned tcache chunk" abort) in 2 of 430 profiled runs here,
# and in none of 243 without the profiler. A static run with a profile window therefore runs its
# ops on the calling thread (the executor's serial mode). The executor reads the flag when it
# builds a program's interpreter (at its first run), so it is set before training, not at the window.
SERIAL_FLAG = "FLAGS_new_executor_serial_run"


@RegisterSet.hooks.register("ProfilerHook")
class ProfilerHook(HookBase):
    """Records training steps ``start_step`` .. ``start_step + steps - 1`` (global steps, so a
    resumed run records the same ones) with ``paddle.profiler``, then writes
    ``<output_path>/profile/rank<r>_*.paddle_trace.json`` (a Chrome trace: chrome://tracing or
    https://ui.perfetto.dev) and ``profile/summary.txt`` (Paddle's summary tables), and logs
    the operator table sorted by total CPU time.

    Evaluation and checkpoint saves of the last recorded step are outside the window: it closes
    before the hooks of lower priority run. A static run profiled runs its ops on one thread
    (``SERIAL_FLAG``: Paddle's profiler is not safe with the executor's own threads)."""

    priority = Priority.VERY_HIGH

    def __init__(self, start_step: int, steps: int) -> None:
        self.start_step, self.steps = start_step, steps
        self.profiler: Optional[Any] = None
        self.folder = ""
        self._serial_before: Optional[bool] = None  # the executor's serial mode before this run

    def before_train(self) -> None:
        if self.trainer.mode == "static":
            import paddle
            self._serial_before = bool(paddle.get_flags([SERIAL_FLAG])[SERIAL_FLAG])
            if not self._serial_before:
                logger.info("trainer.logging.profile: the static program runs its ops on one thread (Paddle's "
                            "profiler is not safe with the executor's own threads)")
            paddle.set_flags({SERIAL_FLAG: True})

    @property
    def last_step(self) -> int:
        return self.start_step + self.steps - 1

    def before_step(self) -> None:
        if self.profiler is None and self.trainer.state.global_step + 1 == self.start_step:
            import paddle.profiler as profiler
            self.folder = os.path.join(self.trainer.output_path, PROFILE_DIR)
            targets = [profiler.ProfilerTarget.CPU]
            if self.trainer.trainer_config["environment"]["PADDLE_PLACE_TYPE"] == "gpu":
                targets.append(profiler.ProfilerTarget.GPU)
            self.profiler = profiler.Profiler(
                targets=targets, on_trace_ready=profiler.export_chrome_tracing(self.folder,
                                                                               worker_name=f"rank{self.trainer.rank}"))
            self.profiler.start()

    def after_step(self) -> None:
        if self.profiler is None:
            return
        if self.trainer.state.global_step >= self.last_step:
            self._finish()  # stop() closes the last step
        else:
            self.profiler.step()

    def after_train(self) -> None:
        if self.profiler is not None:  # the run ended inside the window
            logger.warning("trainer.logging.profile: training ended at step %d, inside the window (steps %d-%d)",
                           self.trainer.state.global_step, self.start_step, self.last_step)
            self._finish()
        if self._serial_before is not None:
            import paddle
            paddle.set_flags({SERIAL_FLAG: self._serial_before})
            self._serial_before = None

    def _finish(self) -> None:
        import paddle.profiler as profiler
        prof, self.profiler = self.profiler, None
        if prof is None:
            return
        prof.stop()  # writes the trace
        full, operators = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(full):  # Paddle prints its tables
            prof.summary(sorted_by=profiler.SortedKeys.CPUTotal, op_detail=True, thread_sep=False, time_unit="ms")
        with contextlib.redirect_stdout(operators):
            prof.summary(sorted_by=profiler.SortedKeys.CPUTotal, op_detail=False, thread_sep=False, time_unit="ms",
                         views=[profiler.SummaryView.OperatorView])
        name = f"rank{self.trainer.rank}_{SUMMARY_FILE}" if self.trainer.rank else SUMMARY_FILE
        path = os.path.join(self.folder, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(full.getvalue())
        logger.info("profile of steps %d-%d: trace and %s in %s; the top %d operators:\n%s", self.start_step,
                    min(self.last_step, self.trainer.state.global_step), os.path.basename(path), self.folder,
                    TOP_OPERATORS, _top_rows(operators.getvalue(), TOP_OPERATORS))


def _top_rows(table: str, rows: int) -> str:
    """Paddle's operator table cut after its first ``rows`` operators (they come sorted)."""
    lines = table.strip().splitlines()
    start = next((i + 1 for i, line in enumerate(lines) if "Thread:" in line), len(lines))
    kept = lines[:start] + [line for line in lines[start:start + rows] if line.strip() and not line.startswith("---")]
    return "\n".join(kept)
