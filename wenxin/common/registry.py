"""Registries that map the names used in task files to classes.

A class registered from inside a task package is scoped to that task, so two tasks may each
define a ``CustomDynamicTrainer``; a lookup made with ``scope`` prefers the task's own class,
then the framework's built-in class, then a class registered exactly once anywhere else.
"""
from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

from wenxin.common.errors import ConfigError

T = TypeVar("T")

BUILTIN_SCOPE = "wenxin"
# Modules whose import registers the built-in classes of every registry.
BUILTIN_MODULES = ("wenxin.data.tokenizers", "wenxin.data.wordpiece", "wenxin.data.field_reader",
                   "wenxin.data.label_fields", "wenxin.data.ernie_fields", "wenxin.data.ernie_m",
                   "wenxin.data.ie_fields", "wenxin.data.gen_fields", "wenxin.data.chat_fields",
                   "wenxin.data.row_formats", "wenxin.data.hf_datasets", "wenxin.data.dataset_reader",
                   "wenxin.controller.hooks", "wenxin.optim.optimizers", "wenxin.controller.task_trainers",
                   "wenxin.inference.formatters", "wenxin.inference.spo_format", "wenxin.inference.paddle_backend",
                   "wenxin.inference.onnx_backend")
# modules that plug themselves in when imported, each with the environment variable that keeps it
# out when "0": the text speed-ups (wenxin.data.text_speedups says what they replace)
OPTIONAL_MODULES = {"wenxin.speedups": "WENXIN_SPEEDUPS"}
_builtins_loaded = False
WITHOUT_PADDLE: List[str] = []  # built-in modules left out: Paddle is not installed


def load_builtins() -> None:
    """Import the modules that register wenxin's built-in classes, and the optional modules not
    switched off (once). Without Paddle installed (the fast tier's venv; the command line refuses
    to start without it), the modules that need it are left out and named in ``WITHOUT_PADDLE``."""
    global _builtins_loaded
    if not _builtins_loaded:
        _builtins_loaded = True
        wanted = list(BUILTIN_MODULES) + [m for m, switch in OPTIONAL_MODULES.items()
                                          if os.environ.get(switch, "1") != "0"]
        for module in wanted:
            _import_builtin(module)


def _import_builtin(module: str) -> None:
    """Import a module of built-ins; one that needs Paddle where Paddle is not installed is left
    out (named in ``WITHOUT_PADDLE``)."""
    try:
        importlib.import_module(module)
    except ImportError:  # ModuleNotFoundError, or wenxin's InstallError (paddle_required)
        if importlib.util.find_spec("paddle") is not None:  # installed, so this is another problem
            raise
        if module not in WITHOUT_PADDLE:
            WITHOUT_PADDLE.append(module)


def scope_of(module_name: str) -> str:
    """The scope of a module: its top-level package ("wenxin" or a task package name)."""
    return module_name.split(".")[0]


class Registry:
    """A named table of classes, filled by the ``register`` decorator."""

    def __init__(self, kind: str, builtin_modules: Tuple[str, ...] = ()) -> None:
        self.kind = kind
        self.builtin_modules = builtin_modules  # where its built-ins are, when they load without Paddle
        self._entries: Dict[str, List[Tuple[str, Any]]] = {}  # classes, or functions (optimizers, schedulers)

    def register(self, name: Optional[str] = None) -> Callable[[T], T]:
        def decorator(cls: T) -> T:
            key = name or cls.__name__  # type: ignore[attr-defined]
            scope = scope_of(cls.__module__)
            entries = [e for e in self._entries.get(key, []) if e[0] != scope]
            entries.append((scope, cls))  # re-registration in a scope replaces the old class
            self._entries[key] = entries
            return cls

        return decorator

    def _load_builtins(self) -> None:
        """Import the modules that register this registry's built-ins: its own
        ``builtin_modules``, else every built-in module."""
        if self.builtin_modules:
            for module in self.builtin_modules:
                _import_builtin(module)
        else:
            load_builtins()

    def names(self, scope: Optional[str] = None) -> List[str]:
        self._load_builtins()
        return sorted(k for k, entries in self._entries.items()
                      if any(s in (scope, BUILTIN_SCOPE) for s, _ in entries))

    def registered(self) -> Dict[str, Any]:
        """Every registered name with its class: the built-in one, else the newest registration
        (for registries whose users have no task scope, such as the inference backends)."""
        self._load_builtins()
        return {name: dict(entries).get(BUILTIN_SCOPE, entries[-1][1]) for name, entries in self._entries.items()}

    def builtin(self, name: str) -> Any:
        """The built-in class registered as ``name``, or None (the config check asks before
        Paddle loads: the data formats' modules load without it)."""
        self._load_builtins()
        return dict(self._entries.get(name, [])).get(BUILTIN_SCOPE)

    def get(self, name: str, scope: Optional[str] = None, key_path: str = "") -> Any:
        """Return the class registered as ``name``, preferring ``scope`` over built-ins."""
        self._load_builtins()
        entries = dict(self._entries.get(name, []))
        if scope in entries:
            return entries[scope]
        if BUILTIN_SCOPE in entries:
            return entries[BUILTIN_SCOPE]
        if len(entries) == 1:  # registered once, outside any task (e.g. a user's plugin module)
            return next(iter(entries.values()))
        known = self.names(scope)
        where = f"{key_path}: " if key_path else ""
        hint = difflib.get_close_matches(name, known, n=1)
        suggestion = f" (did you mean '{hint[0]}'?)" if hint else ""
        missing = f" (Paddle is not installed: {', '.join(WITHOUT_PADDLE)} not loaded)" if WITHOUT_PADDLE else ""
        raise ConfigError(f"{where}unknown {self.kind} type '{name}'{suggestion}; "
                          f"known: {', '.join(known) or 'none'}{missing}")


class RegisterSet:
    """All registries of the framework."""

    models = Registry("model")
    dataset_readers = Registry("dataset reader")
    data_formats = Registry("data format", ("wenxin.data.row_formats", "wenxin.data.hf_datasets"))
    field_readers = Registry("field reader")
    tokenizers = Registry("tokenizer")
    trainers = Registry("trainer")
    hooks = Registry("hook")
    result_formats = Registry("result format")
    optimizers = Registry("optimizer", ("wenxin.optim.optimizers",))
    lr_schedulers = Registry("LR scheduler", ("wenxin.optim.optimizers",))
    sweep_methods = Registry("sweep method", ("wenxin.sweep_methods.grid", "wenxin.sweep_methods.random_search",
                                              "wenxin.sweep_methods.optuna_search"))
    inference_backends = Registry("inference backend", ("wenxin.inference.paddle_backend",
                                                        "wenxin.inference.onnx_backend"))
    decoding_strategies = Registry("decoding strategy", ("wenxin.models.decoding",))
    # by mode: "dynamic" (eager) and "static"; a trainer names its mode, or model.is_dygraph does
    engines = Registry("execution engine", ("wenxin.controller.eager_engine", "wenxin.controller.static_engine"))
    model_hubs = Registry("model hub", ("wenxin.hubs.huggingface", "wenxin.hubs.modelscope",
                                                   "wenxin.hubs.aistudio"))  # where a model's name is downloaded from
