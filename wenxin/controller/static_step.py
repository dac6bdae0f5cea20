"""The step rule (``wenxin.controller.step_rule``) as static-graph program ops: mixed precision and
loss scaling, gradient accumulation, the data-parallel mean and the NaN/Inf skip, built into the
main program by ``build_step`` for ``StaticEngine``."""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

import wenxin.common.paddle_required  # noqa: F401 (before Paddle: one clear line if it cannot run wenxin)
import paddle

from wenxin.common.errors import ConfigError
from wenxin.compat.paddle_internals import skip_update_when, static_scaler_values, use_static_loss_scaling
from wenxin.compat.pir_programs import clone_program, persistable_value
from wenxin.controller.amp import AmpSettings
from wenxin.controller.step_rule import StepRule

GRAD_BUFFER_SUFFIX = "@GRAD_BUFFER"
GRADIENT_SQUARE_SUM_SUFFIX = "@GRAD_SQUARE_SUM"  # what a gradient-norm hook reads
CHECK_LOSS_FEED = "wenxin_check_loss"  # fed 1 where the step checks its loss (the step rule), else 0


@dataclasses.dataclass
class StaticStep:
    """What ``build_step`` added to the main program: the optimizer (wrapped for mixed
    precision), the flag a step's run fetches (1 when the update was skipped), the program of an
    accumulated step's earlier micro-batches and its loss (None without accumulation), the
    gradient square sums by parameter variable (only when asked for), and the loss-scaling
    variables by ``GradScaler.state_dict`` key (empty without loss scaling)."""

    optimizer: Any
    nonfinite_flag: Any
    micro_program: Optional[paddle.static.Program] = None
    micro_loss: Any = None
    gradient_sum_names: Dict[str, str] = dataclasses.field(default_factory=dict)
    scaler_vars: Dict[str, str] = dataclasses.field(default_factory=dict)


def scales_loss(amp: AmpSettings) -> bool:
    """Whether the program scales the loss (float16 AMP), whose optimizer skips overflows itself."""
    return amp.enabled and amp.use_loss_scaling and amp.dtype == "float16"


def build_step(main_program: paddle.static.Program, loss: Any, optimizer: Any, amp: AmpSettings, rule: StepRule,
               gradient_norms_wanted: bool) -> StaticStep:
    """Add one optimizer step of ``loss`` to ``main_program`` (inside its program guard): backward
    of each micro-batch's objective, then (gradient accumulation) add the gradients into
    persistable buffers, and (data parallelism) average them over the ranks, before the optimizer
    applies them; a step that checks its loss (``CHECK_LOSS_FEED``) and finds it NaN/Inf (on any
    rank, in any micro-batch) skips the update, as in eager mode.

    With accumulation, the program up to the buffer update is cloned as ``micro_program`` and
    run for the first k-1 batches of a step; the main program runs the k-th batch and applies the
    buffers' mean, then zeroes them. So each batch is forwarded once and memory stays that of one
    batch. (Paddle 3.3's ``GradientMergeOptimizer`` and static ``fleet.distributed_optimizer`` do
    not support PIR programs.)

    Adam and AdamW skip through their ops' own ``found_inf`` input; other optimizers' ops sit in a
    ``cond``. Either way parameters and every accumulator stay exactly as they were. With float16
    loss scaling the mixed-precision optimizer skips overflowing steps itself (and lowers the
    scale)."""
    objective = loss
    if amp.enabled:
        optimizer, objective = _mixed_precision(optimizer, loss, amp)
    step = StaticStep(optimizer, nonfinite_flag=None)
    params_grads = optimizer.backward(rule.micro_objective(objective))
    bad = 1.0 - paddle.isfinite(loss.astype("float32")).all().astype("float32")  # 1: NaN/Inf loss
    buffers: List[Tuple[Any, Any]] = []
    if rule.accumulate > 1:
        for param, grad in params_grads:
            buffer = persistable_value(f"{param.name}{GRAD_BUFFER_SUFFIX}", param.dtype, param.shape)
            paddle.assign(buffer + grad, output=buffer)
            buffers.append((param, buffer))
        bad_buffer = persistable_value(f"nonfinite_losses{GRAD_BUFFER_SUFFIX}", "float32", [])
        paddle.assign(bad_buffer + bad, output=bad_buffer)
        step.micro_program, look_up = clone_program(main_program)
        step.micro_loss = look_up(loss)
        params_grads = list(buffers)  # each micro-batch's objective was already divided (the rule)
        bad = bad_buffer + 0.0
    if rule.world_size > 1:
        for _, grad in params_grads:
            paddle.distributed.all_reduce(grad)
        params_grads = [(param, grad / rule.world_size) for param, grad in params_grads]
        paddle.distributed.all_reduce(bad)  # every rank skips the same steps
    check = paddle.static.data(CHECK_LOSS_FEED, [1], "float32")  # not in the micro program: made after it
    bad = bad * check.sum()  # the rule: only a checked step skips
    step.nonfinite_flag = bad
    if gradient_norms_wanted:
        step.gradient_sum_names = _record_gradient_square_sums(params_grads, amp)
    _apply(optimizer, params_grads, bad, skips_itself=scales_loss(amp))
    if rule.accumulate > 1:
        for _, buffer in buffers:
            paddle.assign(paddle.zeros_like(buffer), output=buffer)
        paddle.assign(paddle.zeros_like(bad_buffer), output=bad_buffer)
    step.scaler_vars = {role: value.name for role, value in static_scaler_values(optimizer).items()}
    return step


def _apply(optimizer: Any, params_grads: List[Tuple[Any, Any]], bad: Any, skips_itself: bool) -> None:
    """The optimizer's update, skipped where ``bad`` (the step's NaN/Inf flag) is set."""
    if skips_itself or skip_update_when(optimizer, paddle.reshape(bad > 0.0, [1])):
        optimizer.apply_gradients(params_grads)
        return

    def update() -> Any:
        optimizer.apply_gradients(params_grads)
        return paddle.zeros([1])

    paddle.static.nn.cond(bad == 0.0, update, lambda: paddle.zeros([1]))


def _mixed_precision(optimizer: Any, loss: Any, amp: AmpSettings) -> Tuple[Any, Any]:
    """The optimizer wrapped for mixed precision, and the loss to differentiate.

    With float16 and loss scaling, the loss is multiplied by a persistable loss scale; the
    optimizer unscales the gradients, skips the update when any is NaN/Inf, and (dynamic scaling)
    updates the scale by the ``incr_every_n_steps`` / ``decr_every_n_nan_or_inf`` rules. bfloat16
    has float32's range and is not scaled (as in eager mode)."""
    settings = amp.scaler_kwargs
    scaling = scales_loss(amp)
    optimizer = paddle.static.amp.decorate(
        optimizer, level=amp.level, dtype=amp.dtype,
        init_loss_scaling=settings["init_loss_scaling"] if scaling else 1.0,
        use_dynamic_loss_scaling=scaling and settings["use_dynamic_loss_scaling"],
        incr_every_n_steps=settings["incr_every_n_steps"],
        decr_every_n_nan_or_inf=settings["decr_every_n_nan_or_inf"],
        incr_ratio=settings["incr_ratio"], decr_ratio=settings["decr_ratio"])
    objective = loss.astype("float32")
    if not scaling:
        return optimizer, objective
    loss_scaling = persistable_value(paddle.utils.unique_name.generate("loss_scaling"), "float32", [1],
                                     settings["init_loss_scaling"])
    use_static_loss_scaling(optimizer, loss_scaling)  # see wenxin.compat.paddle_internals
    return optimizer, objective * loss_scaling


def _record_gradient_square_sums(params_grads: List[Tuple[Any, Any]], amp: AmpSettings) -> Dict[str, str]:
    """Every step writes each gradient's sum of squares to a persistable value, which
    ``StaticEngine.gradient_square_sums`` reads (only when a hook asked for gradient norms);
    returns their names by parameter variable."""
    if scales_loss(amp):
        raise ConfigError("trainer.hooks: gradient norms are not available in static mode with float16 loss "
                          "scaling (the program's gradients are of the scaled loss)")
    names: Dict[str, str] = {}
    for param, grad in params_grads:
        if grad is None:
            continue
        name = f"{param.name}{GRADIENT_SQUARE_SUM_SUFFIX}"
        value = persistable_value(name, "float32", [])
        paddle.assign(paddle.sum(paddle.square(grad.astype("float32"))), output=value)
        names[param.name] = name
    return names
