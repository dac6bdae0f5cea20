"""Process environment: device, distribution and seeds (logging: ``wenxin.common.logs``)."""
from __future__ import annotations

import os
import random
import sys
from typing import Any, Dict

import numpy as np

from wenxin.common.paddle_support import require_gpu

def setup_device(place_type: str) -> str:
    import paddle
    if place_type == "gpu":
        require_gpu("trainer.environment.PADDLE_PLACE_TYPE")
        device = f"gpu:{int(os.environ.get('FLAGS_selected_gpus', os.environ.get('PADDLE_LOCAL_RANK', '0')))}"
    else:
        device = "cpu"
    paddle.set_device(device)
    return device


def init_distributed(use_fleet: bool) -> None:
    """Initialize ``paddle.distributed.fleet`` (collective mode) when asked to
    (``trainer.environment.PADDLE_IS_FLEET``) or when launched by ``paddle.distributed.launch`` with more than
    one process."""
    if use_fleet or int(os.environ.get("PADDLE_TRAINERS_NUM", "1")) > 1:
        from paddle.distributed import fleet
        fleet.init(is_collective=True)


def paddle_rank() -> int:
    """This process's rank among the processes of a distributed run (0 alone)."""
    import paddle
    return int(paddle.distributed.get_rank())


def paddle_world_size() -> int:
    """The number of processes of a distributed run (1 alone)."""
    import paddle
    return int(paddle.distributed.get_world_size())


def set_seed(seed: int) -> None:
    import paddle
    random.seed(seed)
    np.random.seed(seed)
    paddle.seed(seed)


def rng_state() -> Dict[str, Any]:
    """Paddle's, NumPy's and Python's random states, as values a checkpoint stores without pickle
    (JSON, tuples and arrays). Paddle's where Paddle is loaded: a run on the fast tier's numpy
    engine never loads it, and has no Paddle generator to restore."""
    paddle_states = None
    if "paddle" in sys.modules:
        from wenxin.compat.rng import generator_states
        paddle_states = generator_states()
    return {"paddle": paddle_states, "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(state: Dict[str, Any]) -> None:
    if state["paddle"] is not None:
        from wenxin.compat.rng import set_generator_states
        set_generator_states(state["paddle"])
    numpy_state = state["numpy"]
    np.random.set_state((numpy_state[0], np.asarray(numpy_state[1], dtype=np.uint32), *numpy_state[2:]))
    python_state = state["python"]
    random.setstate((python_state[0], tuple(python_state[1]), python_state[2]))
