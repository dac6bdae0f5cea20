"""Small Paddle internals the trainers need, each because Paddle 3.3 has no public way:

- ``grad_scaler_scale``: ``GradScaler``'s current loss scale (no public getter);
- ``use_static_loss_scaling`` / ``static_scaler_values``: the static mixed-precision optimizer
  takes its loss scale from a ``GradScaler`` under PIR, setting ``_loss_scaling`` in
  ``GradScaler.minimize``; setting it here lets backward and ``apply_gradients`` be called apart
  (gradient accumulation, all-reduce), and the scale and its counters are checkpointed;
- ``skip_update_when``: the ``found_inf`` input of Adam/AdamW's ops, which skips an update
  without a control-flow op (a ``cond`` costs a small program about 0.6 ms a step);
- ``prune_program``: ``paddle.static.pir_io.pir_prune_with_input`` (evaluation programs);
- ``set_cpu_threads``: the thread count of Paddle's CPU math (MKL and OpenMP kernels), which Paddle
  fixes at load time from ``OMP_NUM_THREADS`` (``paddle.base.core.set_num_threads``). OpenMP's
  count holds for the thread that sets it, and the static executor runs ops on threads of its own,
  so with more than one thread static programs are also made to run their ops on the calling
  thread (``FLAGS_new_executor_serial_run``; with one, Paddle's default executor stays): measured,
  a static BoW step took 0.30 s with the count set, 0.23 s with ``OMP_NUM_THREADS=2`` before Paddle
  loaded, and 0.21 s with both;
- ``dtype_name``: a dtype as numpy's name (``paddle.base.data_feeder.convert_dtype``), and a
  ``DenseTensor``'s dtype without copying it (``_dtype()``);
- ``onednn_flag_on``: Paddle's oneDNN flag, under 3.0's name (``FLAGS_use_mkldnn``) or 3.1's
  (``FLAGS_use_onednn``): ``paddle.get_flags`` refuses a name its version does not have;
- ``cpu_supports_bfloat16``: whether oneDNN has bfloat16 kernels on this CPU
  (``paddle.base.core.supports_bfloat16``);
- ``stop_loader_workers``: a multi-process DataLoader iterator's ``_try_shutdown_all``. One whose
  worker failed stays referenced by its own reader thread, so it is not collected when the loop
  drops it; its ``__del__`` then runs at interpreter exit, when Paddle's modules are half torn
  down, and prints a traceback after wenxin's one-line error;
- ``cpu_tensor_on``: a CPU ``DenseTensor`` on a NumPy array's memory (``set`` with ``zero_copy``),
  which the Paddle backend hands its input handles (``share_external_data``) instead of a copy:
  1.2 us an input, where the public ``paddle.utils.dlpack.from_dlpack`` takes 7 (and refuses
  NumPy's 0 stride on an axis of size 1), which cost a bag-of-words model's call 0.98 -> 0.62 of
  the raw engine's speed.
"""
from __future__ import annotations

from typing import Any, Dict, List

import numpy as np
import paddle
from paddle.base.data_feeder import convert_dtype


def grad_scaler_scale(scaler: paddle.amp.GradScaler) -> float:
    scale = scaler._scale  # noqa: SLF001  (a tensor once the scaler is enabled)
    if scale is None:
        raise ValueError("the GradScaler is disabled: it has no loss scale")
    return float(scale)


def use_static_loss_scaling(optimizer: Any, loss_scaling: Any) -> None:
    optimizer._loss_scaling = loss_scaling  # noqa: SLF001


def static_scaler_values(optimizer: Any) -> Dict[str, Any]:
    """The loss-scaling values of a static mixed-precision optimizer by ``GradScaler.state_dict``
    key (empty without loss scaling)."""
    if getattr(optimizer, "_loss_scaling", None) is None:
        return {}
    roles = {"scale": optimizer._loss_scaling, "incr_count": getattr(optimizer, "_num_good_steps", None),  # noqa: SLF001
             "decr_count": getattr(optimizer, "_num_bad_steps", None)}
    return {role: value for role, value in roles.items() if value is not None}


def skip_update_when(optimizer: Any, found_inf: Any) -> bool:
    """Make Adam/AdamW skip their whole update (parameters, moments, beta powers) when the bool
    value ``found_inf`` ([1]) is true, as the static mixed-precision optimizer does; False for
    optimizers whose ops cannot skip (the caller wraps them in a ``cond``)."""
    if not isinstance(optimizer, (paddle.optimizer.Adam, paddle.optimizer.AdamW)):
        return False
    optimizer._set_auxiliary_var("found_inf", found_inf)  # noqa: SLF001
    return True


def prune_program(program: paddle.static.Program, targets: List[Any]) -> None:
    """Remove, in place, the ops that ``targets`` do not depend on (inputs included)."""
    from paddle.static.pir_io import pir_prune_with_input
    pir_prune_with_input(program, [], targets)


def dtype_name(dtype: Any) -> str:
    """A Paddle dtype as numpy's name (``"float32"``)."""
    return convert_dtype(dtype)


def dense_tensor_dtype(tensor: Any) -> str:
    """The dtype of a scope's ``DenseTensor``, without copying it as ``np.array`` would."""
    return convert_dtype(tensor._dtype())  # noqa: SLF001


def set_cpu_threads(count: int) -> None:
    paddle.base.core.set_num_threads(count)
    # more than one: static programs must run their ops on this thread, whose count it is
    paddle.set_flags({"FLAGS_new_executor_serial_run": count > 1})


# Paddle's oneDNN switch: FLAGS_use_onednn from 3.1 (and the name wenxin documents); Paddle 3.0
# calls it FLAGS_use_mkldnn and refuses the new name
ONEDNN_FLAGS = ("FLAGS_use_onednn", "FLAGS_use_mkldnn")


def onednn_flag_on() -> bool:
    """Whether Paddle's oneDNN flag is on, under whichever name this Paddle has."""
    for name in ONEDNN_FLAGS:
        try:
            return bool(paddle.get_flags([name])[name])
        except ValueError:  # this Paddle does not know the name
            continue
    return False


def cpu_supports_bfloat16() -> bool:
    """Whether this CPU runs oneDNN's bfloat16 kernels (AVX512-BF16 or AMX)."""
    return bool(paddle.base.core.supports_bfloat16())


def stop_loader_workers(iterator: Any) -> None:
    """Stop a DataLoader iterator's worker processes and reader thread now (nothing where it has
    none: a single-process iterator)."""
    stop = getattr(iterator, "_try_shutdown_all", None)
    if stop is not None:
        stop()


def cpu_tensor_on(array: np.ndarray) -> Any:
    """A CPU ``DenseTensor`` on ``array``'s memory, not a copy; ``array`` must be C-contiguous and
    stays the caller's to keep alive while the tensor is used."""
    tensor = paddle.base.core.DenseTensor()
    tensor.set(array, paddle.CPUPlace(), True)  # True: zero_copy
    return tensor
