"""Context managers that switch Paddle between static-graph and eager mode for a block and then
restore whatever mode was active before."""
from __future__ import annotations

import contextlib
from typing import Iterator


@contextlib.contextmanager
def static_mode() -> Iterator[None]:
    """Static mode for the block (a static trainer never leaves the process in static mode)."""
    import paddle
    was_dynamic = paddle.in_dynamic_mode()
    if was_dynamic:
        paddle.enable_static()
    try:
        yield
    finally:
        if was_dynamic:
            paddle.disable_static()


@contextlib.contextmanager
def eager_mode() -> Iterator[None]:
    """Eager mode for the block, e.g. for collective calls made from inside a static loop."""
    import paddle
    was_static = not paddle.in_dynamic_mode()
    if was_static:
        paddle.disable_static()
    try:
        yield
    finally:
        if was_static:
            paddle.enable_static()
