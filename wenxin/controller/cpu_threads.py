"""Setting the threads of Paddle's CPU kernels once a run's model is built.

The setup chooses a share of the cores (``wenxin.common.threads.choose_threads``, kept in the run
context as a ``ThreadChoice``); once the model exists, an automatic choice is fitted to its size and
to the machine's other work, or replaced by the count of the run this one resumes, and set before
any program runs (a static program's executor takes its mode from the count).
"""
from __future__ import annotations

import logging
import os
from typing import Any, Optional

import numpy as np

from wenxin.common import threads
from wenxin.common.errors import WenxinError
from wenxin.controller import checkpoint as ckpt
from wenxin.controller.run_context import ThreadChoice

logger = logging.getLogger("wenxin")
STRIDE_FLAG = "FLAGS_use_stride_kernel"  # Paddle's switch for strided views in eager mode


def threads_for_model(choice: Optional[ThreadChoice], model: Any, static: bool, resume_from: Optional[str]) -> int:
    """``apply_cpu_threads`` for ``model`` (a Paddle layer: its trainable parameters are counted)."""
    if choice is None:  # not on a CPU: Paddle's own setting stands
        return 0
    parameters = sum(int(np.prod(p.shape)) for p in model.parameters() if not p.stop_gradient)
    return apply_cpu_threads(choice, parameters, static, resume_from)


def apply_cpu_threads(choice: Optional[ThreadChoice], trainable_parameters: int, static: bool,
                      resume_from: Optional[str]) -> int:
    """Set the CPU kernels' threads by ``choice`` (nothing where it is None: not on a CPU) for a
    model of ``trainable_parameters``; returns the count set (0 for none)."""
    if choice is None:
        return 0
    import paddle

    from wenxin.compat.paddle_internals import set_cpu_threads
    count, reason = choice.count, choice.reason
    if choice.automatic:
        resumed = resumed_cpu_threads(resume_from)
        if resumed:
            count, reason = resumed, "as in the run this one resumes, so that it adds its sums in the same order"
        else:
            count, smaller = threads.fit_to_work(count, trainable_parameters, threads.busy_cores_of_others,
                                                 threads.available_cores(), static=static)
            reason = smaller or reason
    set_cpu_threads(count)
    logger.info("CPU kernels: %d thread%s (%s)", count, "s" * (count > 1), reason)
    if STRIDE_FLAG not in os.environ:  # the user's own setting stands
        # Paddle 3's eager views (transpose, reshape of a transposed tensor) keep strides, and
        # the kernels that read them, and their gradients, copy: measured, an ERNIE-nano eager
        # step took 18% less CPU with contiguous results (benchmarks/ernie_step.py), the same
        # losses to the bit. Static programs do not use stride kernels. Paddle's view-only
        # operations (a tensor's view as another dtype, as_strided) need them: a model that
        # uses those runs with FLAGS_use_stride_kernel=1 in its environment.
        paddle.set_flags({STRIDE_FLAG: False})
        logger.info("CPU: eager views are made contiguous (%s=0; set it to 1 in the environment for a model "
                    "that needs strided views)", STRIDE_FLAG)
    return count


def resumed_cpu_threads(source: Optional[str]) -> Optional[int]:
    """The thread count saved by the checkpoint ``source``, if it saved one."""
    try:
        count = ckpt.read_trainer_state(source).get("cpu_threads") if source and os.path.isdir(source) else None
    except WenxinError:
        return None  # the checkpoint's own check reports it when it loads
    return count if isinstance(count, int) and count > 0 else None
