"""Hooks: optional behaviour attached to the training loop, run in priority order.

The loop calls, in order::

    before_train
      [before_epoch
         [before_step -> (the step) -> after_step]*
       after_epoch]*
    after_train

plus ``before_eval``/``after_eval`` around each evaluation and ``before_save``/``after_save``
around each checkpoint. Hooks with a lower priority number run first (as in mmengine).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Protocol, Tuple

import numpy as np

from wenxin.common.held_state import exact_array
from wenxin.config.schema import Schema

if TYPE_CHECKING:
    from wenxin.controller.checkpoint_folders import CheckpointManager
    from wenxin.controller.engine import ExecutionEngine
    from wenxin.controller.hooks.writers import MetricLogger
    from wenxin.controller.ranks import Ranks
    from wenxin.controller.state import TrainState
    from wenxin.data.dataset_reader import BasicDataSetReader
    from wenxin.models.base_model import BaseModel


class HookedTrainer(Protocol):
    """The trainer as its hooks see it (``BaseTrainer`` is one): a hook is handed this, the
    loop's state and the parts it acts on, and nothing of how the trainer is assembled."""

    config: Dict[str, Any]  # the task config
    trainer_config: Dict[str, Any]  # its trainer section
    readers: Dict[str, "BasicDataSetReader"]
    output_path: str
    rank: int
    world_size: int
    is_writer: bool  # rank 0: the process that writes files
    ranks: "Ranks"
    state: "TrainState"
    engine: "ExecutionEngine"
    hooks: "HookList"
    checkpoints: "CheckpointManager"
    metric_logger: "MetricLogger"
    capture_gradients: bool  # a gradient-norm hook sets it for the steps whose norms it reads

    @property
    def mode(self) -> str: ...

    @property
    def model(self) -> "BaseModel": ...

    @property
    def lr_scheduler(self) -> Any: ...

    def current_lr(self) -> float: ...

    def eval_readers(self) -> List[str]: ...

    def evaluate(self, reader_name: str, tag: Optional[str] = None, run_hooks: bool = True,
                 step: Optional[int] = None) -> Dict[str, float]: ...

    def save_checkpoint(self, name: str) -> str: ...

    def restore_model_params(self, params: Mapping[str, Any], source: str) -> None: ...

    def export_inference(self, folder: str, quiet: bool = False) -> str: ...

    def register_hook(self, hook: "HookBase", priority: Optional[int] = None) -> None: ...


def floating_weights(trainer: HookedTrainer) -> Dict[str, np.ndarray]:
    """The model's floating-point parameters and buffers as arrays (in either graph mode), by name."""
    state = trainer.engine.model_state_dict()
    arrays = {k: exact_array(v) for k, v in state.items()}  # bfloat16 as float32
    return {k: a for k, a in arrays.items() if np.issubdtype(a.dtype, np.floating)}


class Priority:
    """Named priorities; any int works."""

    HIGHEST = 0
    VERY_HIGH = 10
    HIGH = 30
    ABOVE_NORMAL = 40
    NORMAL = 50
    BELOW_NORMAL = 60
    LOW = 70
    VERY_LOW = 90
    LOWEST = 100


class HookBase:
    """Base class of hooks. Override the events you need (in the class: which events a hook
    handles is looked up when it is registered); ``self.trainer`` is set on registration.

    ``config_schema`` lists the keys a hook accepts in ``trainer.hooks[i].params``; a hook that
    keeps state across a resume implements ``state_dict``/``set_state_dict``.
    """

    priority: int = Priority.NORMAL
    config_schema: Schema = {}
    trainer: HookedTrainer

    def before_train(self) -> None: ...
    def after_train(self) -> None: ...
    def before_epoch(self) -> None: ...
    def after_epoch(self) -> None: ...
    def before_step(self) -> None: ...
    def after_step(self) -> None: ...
    def before_eval(self, reader_name: str) -> None: ...
    def after_eval(self, reader_name: str, metrics: Dict[str, float]) -> None: ...
    def before_save(self, name: str) -> None: ...
    def after_save(self, name: str, path: str) -> None: ...

    def check_metrics(self, reader_name: str, metrics: Dict[str, float]) -> None:
        """Called before the first step with the metrics one batch of ``reader_name`` gives;
        raise ``ConfigError`` when a metric this hook will need is not among them."""

    def state_dict(self) -> Optional[Dict[str, Any]]:
        return None

    def set_state_dict(self, state: Dict[str, Any]) -> None: ...


class IntervalHook(HookBase):
    """Calls ``trigger()`` every ``trainer.<group>.<key>`` steps (``interval_key``: the group and
    the key), or at each epoch end when that key is 0 (the Wenxin convention for ``eval_step`` and
    ``save_model_step``)."""

    interval_key: Tuple[str, str] = ("", "")

    def before_train(self) -> None:
        group, key = self.interval_key
        self.every: int = self.trainer.trainer_config[group][key]

    def trigger(self) -> None:
        raise NotImplementedError

    def after_step(self) -> None:
        if self.every and self.trainer.state.global_step % self.every == 0:
            self.trigger()

    def after_epoch(self) -> None:
        if not self.every:
            self.trigger()


EVENTS = ("before_train", "after_train", "before_epoch", "after_epoch", "before_step", "after_step",
          "before_eval", "after_eval", "before_save", "after_save")


def _handles(hook: HookBase, event: str) -> bool:
    """Whether ``hook`` does anything on ``event`` (its method is not HookBase's no-op)."""
    method = getattr(hook, event)
    return getattr(method, "__func__", method) is not getattr(HookBase, event)


class HookList:
    """Hooks sorted by priority (stable for equal priorities) and dispatched by event name.

    Each event calls only the hooks whose class overrides it (resolved when a hook is added),
    so the many hooks that ignore ``before_step`` cost a step nothing.
    """

    def __init__(self) -> None:
        self.hooks: List[HookBase] = []
        self._handlers: Dict[str, List[Callable[..., None]]] = {event: [] for event in EVENTS}

    def add(self, hook: HookBase, priority: Optional[int] = None) -> None:
        if priority is not None:
            hook.priority = priority
        self.hooks.append(hook)
        self.hooks.sort(key=lambda h: h.priority)
        self._handlers = {event: [getattr(h, event) for h in self.hooks if _handles(h, event)] for event in EVENTS}

    def call(self, event: str, *args: Any) -> None:
        for handler in self._handlers[event]:
            handler(*args)

    def find(self, cls: type) -> Optional[HookBase]:
        return next((h for h in self.hooks if isinstance(h, cls)), None)

    def _keyed(self) -> List[tuple]:
        """(key, hook) with one key per hook instance: its class name and, for a second or later
        hook of the same class, its position among them (``EarlyStoppingHook#2``)."""
        seen: Dict[str, int] = {}
        keyed = []
        for hook in self.hooks:
            name = type(hook).__name__
            seen[name] = seen.get(name, 0) + 1
            keyed.append((name if seen[name] == 1 else f"{name}#{seen[name]}", hook))
        return keyed

    def state_dict(self) -> Dict[str, Any]:
        states = {}
        for key, hook in self._keyed():
            state = hook.state_dict()
            if state is not None:
                states[key] = state
        return states

    def set_state_dict(self, states: Dict[str, Any]) -> None:
        for key, hook in self._keyed():
            if key in states:
                hook.set_state_dict(states[key])
