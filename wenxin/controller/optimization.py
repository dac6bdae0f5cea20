"""Optimizers and learning-rate schedules (with warmup) built from ``model.optimization``."""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Optional, Tuple

import paddle
from paddle.optimizer import lr as lr_sched

from wenxin.common.errors import ConfigError


def warmup_steps_of(opt: Dict[str, Any], total_steps: int) -> int:
    if opt["warmup_steps"] and opt["warmup_proportion"]:
        raise ConfigError("model.optimization: set warmup_steps or warmup_proportion, not both")
    return opt["warmup_steps"] or int(opt["warmup_proportion"] * total_steps)


def build_lr_scheduler(opt: Dict[str, Any], total_steps: int) -> lr_sched.LRScheduler:
    """Linear warmup from 0 to ``learning_rate`` then constant / linear / cosine decay."""
    base, warmup = opt["learning_rate"], warmup_steps_of(opt, total_steps)
    decay_steps = max(1, total_steps - warmup)
    kind = opt["lr_scheduler"]
    if kind == "constant":
        after: Any = base
    elif kind == "linear_warmup_decay":
        after = lr_sched.PolynomialDecay(base, decay_steps, end_lr=opt["end_learning_rate"], power=1.0)
    else:
        after = lr_sched.CosineAnnealingDecay(base, T_max=decay_steps, eta_min=opt["end_learning_rate"])
    if warmup == 0:
        return after if isinstance(after, lr_sched.LRScheduler) else lr_sched.LambdaDecay(base, _one)
    return lr_sched.LinearWarmup(after, warmup_steps=warmup, start_lr=0.0, end_lr=base)


def _one(_: int) -> float:
    return 1.0


def build_optimizer(opt: Dict[str, Any], parameters: Iterable[paddle.Tensor], total_steps: int,
                    decay_filter: Optional[Callable[[str], bool]] = None
                    ) -> Tuple[paddle.optimizer.Optimizer, lr_sched.LRScheduler]:
    """The optimizer named by ``opt["optimizer"]`` with global-norm clipping and weight decay."""
    scheduler = build_lr_scheduler(opt, total_steps)
    clip = paddle.nn.ClipGradByGlobalNorm(opt["max_grad_norm"]) if opt["max_grad_norm"] > 0 else None
    params = list(parameters)
    kind, wd = opt["optimizer"], opt["weight_decay"]
    if kind == "adamw":
        optimizer: paddle.optimizer.Optimizer = paddle.optimizer.AdamW(
            learning_rate=scheduler, parameters=params, beta1=opt["beta1"], beta2=opt["beta2"],
            epsilon=opt["epsilon"], weight_decay=wd, apply_decay_param_fun=decay_filter, grad_clip=clip)
    elif kind == "adam":
        optimizer = paddle.optimizer.Adam(
            learning_rate=scheduler, parameters=params, beta1=opt["beta1"], beta2=opt["beta2"],
            epsilon=opt["epsilon"], weight_decay=paddle.regularizer.L2Decay(wd) if wd else None, grad_clip=clip)
    elif kind == "sgd":
        optimizer = paddle.optimizer.SGD(learning_rate=scheduler, parameters=params, grad_clip=clip,
                                         weight_decay=paddle.regularizer.L2Decay(wd) if wd else None)
    else:
        optimizer = paddle.optimizer.Momentum(learning_rate=scheduler, momentum=opt["momentum"],
                                              parameters=params, grad_clip=clip,
                                              weight_decay=paddle.regularizer.L2Decay(wd) if wd else None)
    return optimizer, scheduler
