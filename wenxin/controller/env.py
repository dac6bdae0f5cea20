"""Process environment: device, seeds and logging."""
from __future__ import annotations

import logging
import os
import random
import sys
from typing import Any, Dict

import numpy as np
import paddle

from wenxin.common.errors import ConfigError
from wenxin.compat.rng import generator_states, set_generator_states

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup_device(place_type: str) -> str:
    if place_type == "gpu":
        if not paddle.is_compiled_with_cuda():
            raise ConfigError("trainer.PADDLE_PLACE_TYPE: 'gpu' requested but this paddle has no CUDA "
                              "support (install paddlepaddle-gpu, or use 'cpu')")
        device = f"gpu:{int(os.environ.get('FLAGS_selected_gpus', os.environ.get('PADDLE_LOCAL_RANK', '0')))}"
    else:
        device = "cpu"
    paddle.set_device(device)
    return device


def init_distributed(use_fleet: bool) -> None:
    """Initialize ``paddle.distributed.fleet`` (collective mode) when asked to
    (``trainer.PADDLE_IS_FLEET``) or when launched by ``paddle.distributed.launch`` with more than
    one process."""
    if use_fleet or int(os.environ.get("PADDLE_TRAINERS_NUM", "1")) > 1:
        from paddle.distributed import fleet
        fleet.init(is_collective=True)


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    paddle.seed(seed)


class _CurrentStdoutHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stdout`` is at the time of each record (it may be replaced after
    logging is set up: notebooks, test capture, redirection)."""

    def __init__(self) -> None:
        super().__init__(sys.stdout)

    @property  # type: ignore[override]
    def stream(self):  # noqa: ANN201
        return sys.stdout

    @stream.setter
    def stream(self, value) -> None:  # noqa: ANN001
        pass

    def emit(self, record: logging.LogRecord) -> None:
        from wenxin.controller.progress import ProgressBar
        if ProgressBar.active is not None:
            ProgressBar.active.clear()  # the bar redraws below the record at its next update
        super().emit(record)


def setup_logging(log_file: str | None = None, level: int = logging.INFO) -> None:
    """Console logging for the ``wenxin`` logger, plus a file when ``log_file`` is given."""
    root = logging.getLogger("wenxin")
    root.setLevel(level)
    root.propagate = False
    formatter = logging.Formatter(LOG_FORMAT)
    if not any(getattr(h, "_wenxin_console", False) for h in root.handlers):
        console = _CurrentStdoutHandler()
        console.setFormatter(formatter)
        console._wenxin_console = True  # type: ignore[attr-defined]
        root.addHandler(console)
    for h in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
        root.removeHandler(h)
        h.close()
    if log_file:
        os.makedirs(os.path.dirname(log_file), exist_ok=True)
        handler = logging.FileHandler(log_file, encoding="utf-8")
        handler.setFormatter(formatter)
        root.addHandler(handler)


def rng_state() -> Dict[str, Any]:
    """Paddle's, NumPy's and Python's random states, as values a checkpoint stores without pickle
    (JSON, tuples and arrays)."""
    return {"paddle": generator_states(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(state: Dict[str, Any]) -> None:
    set_generator_states(state["paddle"])
    numpy_state = state["numpy"]
    np.random.set_state((numpy_state[0], np.asarray(numpy_state[1], dtype=np.uint32), *numpy_state[2:]))
    python_state = state["python"]
    random.setstate((python_state[0], tuple(python_state[1]), python_state[2]))
