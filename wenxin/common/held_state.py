"""A model's parameters changed for a block and put back after it, bit for bit."""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, Iterator, Mapping

import numpy as np


@contextlib.contextmanager
def state_held(state: Mapping[str, Any], changes: Mapping[str, Any],
               set_state: Callable[[Dict[str, Any]], None]) -> Iterator[None]:
    """Inside: ``changes`` set through ``set_state``. After: the changed entries of ``state`` (a
    model's parameters by structured name, live tensors or arrays) as they were, bit for bit;
    only those are copied."""
    originals = {name: np.array(state[name]) for name in changes}
    set_state(dict(changes))
    try:
        yield
    finally:
        set_state(originals)
