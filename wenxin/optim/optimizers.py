"""Optimizers and learning-rate schedules (with warmup) built from ``model.optimization``.

Both are registries (``RegisterSet.optimizers`` / ``RegisterSet.lr_schedulers``): adding one
means registering a builder function under the name a task file uses, e.g.::

    @RegisterSet.optimizers.register("lamb")
    def lamb(opt, parameters, learning_rate, grad_clip, decay_filter): ...

Paddle is imported by the builders themselves, so the names load without it (the config check
lists them on a machine without Paddle, and the fast tier's numpy engine needs no optimizer).

Weight decay never applies to biases and normalization scales (``decay_filter``), whatever the
optimizer: AdamW decays decoupled from the gradient (``apply_decay_param_fun``); the others add
L2 decay to the gradient through each decayed parameter's own regularizer, which Paddle honours
in both graph modes.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Tuple


from wenxin.common.errors import ConfigError
from wenxin.common.registry import RegisterSet

if TYPE_CHECKING:
    import paddle
    from paddle.optimizer import lr as lr_sched

DecayFilter = Callable[[str], bool]


def warmup_steps_of(opt: Dict[str, Any], total_steps: int) -> int:
    if opt["warmup_steps"] and opt["warmup_proportion"]:
        raise ConfigError("model.optimization: set warmup_steps or warmup_proportion, not both")
    return opt["warmup_steps"] or int(opt["warmup_proportion"] * total_steps)


# ---- LR schedules after warmup: (optimization config, base lr, decay steps) -> schedule or float ----
@RegisterSet.lr_schedulers.register("constant")
def constant(opt: Dict[str, Any], base: float, decay_steps: int) -> Any:
    """The learning rate stays at ``learning_rate``."""
    return base


@RegisterSet.lr_schedulers.register("linear_warmup_decay")
def linear_decay(opt: Dict[str, Any], base: float, decay_steps: int) -> Any:
    """Linear decay to ``end_learning_rate`` at the last step."""
    import paddle
    return paddle.optimizer.lr.PolynomialDecay(base, decay_steps, end_lr=opt["end_learning_rate"], power=1.0)


@RegisterSet.lr_schedulers.register("cosine_warmup_decay")
def cosine_decay(opt: Dict[str, Any], base: float, decay_steps: int) -> Any:
    """Half a cosine from ``learning_rate`` down to ``end_learning_rate`` at the last step."""
    import paddle
    return paddle.optimizer.lr.CosineAnnealingDecay(base, T_max=decay_steps, eta_min=opt["end_learning_rate"])


@RegisterSet.lr_schedulers.register("exponential")
def exponential(opt: Dict[str, Any], base: float, decay_steps: int) -> Any:
    """Multiplied by the same factor every step, from ``learning_rate`` at the first step to
    ``end_learning_rate`` at the last (the schedule of ``wenxin lr-find``)."""
    import paddle
    end = opt["end_learning_rate"]
    if base <= 0 or end <= 0:
        raise ConfigError("model.optimization: the exponential schedule needs learning_rate and end_learning_rate "
                          f"above 0 (got {base:g} and {end:g})")
    # Paddle's ExponentialDecay only decays (gamma < 1); a growing rate goes through LambdaDecay
    return paddle.optimizer.lr.LambdaDecay(base, _Geometric((end / base) ** (1.0 / max(1, decay_steps - 1))))


class _Geometric:
    """``factor ** step``: the multiplier of the exponential schedule."""

    def __init__(self, factor: float) -> None:
        self.factor = factor

    def __call__(self, step: int) -> float:
        return self.factor ** step


def build_lr_scheduler(opt: Dict[str, Any], total_steps: int, scope: Optional[str] = None) -> lr_sched.LRScheduler:
    """Linear warmup from 0 to ``learning_rate``, then the registered schedule ``lr_scheduler``."""
    from paddle.optimizer import lr as schedules
    base, warmup = opt["learning_rate"], warmup_steps_of(opt, total_steps)
    decay_steps = max(1, total_steps - warmup)
    make = RegisterSet.lr_schedulers.get(opt["lr_scheduler"], scope, "model.optimization.lr_scheduler")
    after = make(opt, base, decay_steps)
    if warmup == 0:
        return after if isinstance(after, schedules.LRScheduler) else schedules.LambdaDecay(after, _one)
    return schedules.LinearWarmup(after, warmup_steps=warmup, start_lr=0.0, end_lr=base)


def _one(_: int) -> float:
    return 1.0


# ---- optimizers: (optimization config, parameters, lr, clip, decay filter) -> optimizer ----------
def _l2_decay(params: List[Any], weight_decay: float, decay_filter: Optional[DecayFilter]) -> None:
    """L2 decay on the parameters that ``decay_filter`` selects, none on the others."""
    import paddle
    regularizer = paddle.regularizer.L2Decay(weight_decay) if weight_decay else None
    for p in params:
        p.regularizer = regularizer if decay_filter is None or decay_filter(p.name) else None


@RegisterSet.optimizers.register("adamw")
def adamw(opt: Dict[str, Any], params: List[Any], lr: Any, clip: Any,
          decay_filter: Optional[DecayFilter]) -> paddle.optimizer.Optimizer:
    import paddle
    return paddle.optimizer.AdamW(learning_rate=lr, parameters=params, beta1=opt["beta1"], beta2=opt["beta2"],
                                  epsilon=opt["epsilon"], weight_decay=opt["weight_decay"],
                                  apply_decay_param_fun=decay_filter, grad_clip=clip)


@RegisterSet.optimizers.register("adam")
def adam(opt: Dict[str, Any], params: List[Any], lr: Any, clip: Any,
         decay_filter: Optional[DecayFilter]) -> paddle.optimizer.Optimizer:
    import paddle
    _l2_decay(params, opt["weight_decay"], decay_filter)
    return paddle.optimizer.Adam(learning_rate=lr, parameters=params, beta1=opt["beta1"], beta2=opt["beta2"],
                                 epsilon=opt["epsilon"], grad_clip=clip)


@RegisterSet.optimizers.register("sgd")
def sgd(opt: Dict[str, Any], params: List[Any], lr: Any, clip: Any,
        decay_filter: Optional[DecayFilter]) -> paddle.optimizer.Optimizer:
    import paddle
    _l2_decay(params, opt["weight_decay"], decay_filter)
    return paddle.optimizer.SGD(learning_rate=lr, parameters=params, grad_clip=clip)


@RegisterSet.optimizers.register("momentum")
def momentum(opt: Dict[str, Any], params: List[Any], lr: Any, clip: Any,
             decay_filter: Optional[DecayFilter]) -> paddle.optimizer.Optimizer:
    import paddle
    _l2_decay(params, opt["weight_decay"], decay_filter)
    return paddle.optimizer.Momentum(learning_rate=lr, momentum=opt["momentum"], parameters=params,
                                     grad_clip=clip)


def build_optimizer(opt: Dict[str, Any], parameters: Iterable[paddle.Tensor], total_steps: int,
                    decay_filter: Optional[DecayFilter] = None, scope: Optional[str] = None
                    ) -> Tuple[paddle.optimizer.Optimizer, lr_sched.LRScheduler]:
    """The registered optimizer ``opt["optimizer"]`` with global-norm clipping, weight decay
    (not on biases and norm scales) and the LR schedule."""
    import paddle
    scheduler = build_lr_scheduler(opt, total_steps, scope)
    clip = paddle.nn.ClipGradByGlobalNorm(opt["max_grad_norm"]) if opt["max_grad_norm"] > 0 else None
    make = RegisterSet.optimizers.get(opt["optimizer"], scope, "model.optimization.optimizer")
    return make(opt, list(parameters), scheduler, clip, decay_filter), scheduler
