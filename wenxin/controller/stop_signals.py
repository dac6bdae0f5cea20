"""Stopping a training run cleanly on SIGTERM or Ctrl-C."""
from __future__ import annotations

import contextlib
import logging
import signal
import threading
from typing import Any, Dict, Iterator

from wenxin.common.process import ignored
from wenxin.controller.state import TrainState

logger = logging.getLogger("wenxin")


@contextlib.contextmanager
def stop_signals_caught(state: TrainState) -> Iterator[None]:
    """Inside: SIGTERM / SIGINT mark ``state`` to stop after the current step (the trainer then
    saves a checkpoint and returns normally); a second signal while stopping interrupts at once
    (the checkpoint write is atomic). The previous handlers come back after. Only the main
    thread can catch signals; elsewhere this does nothing."""
    previous: Dict[int, Any] = {}

    def on_signal(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if state.interrupted:
            raise KeyboardInterrupt(f"second {name} while stopping")
        state.interrupted = state.should_stop = True
        state.stop_reason = (f"received {name}: checkpoint saved at the current step; continue with "
                             f"trainer.checkpoints.resume=auto")
        logger.warning("received %s: stopping after this step", name)

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            if not ignored(sig):  # a signal the process was started ignoring stays ignored
                previous[sig] = signal.signal(sig, on_signal)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
