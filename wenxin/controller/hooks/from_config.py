"""The hooks a trainer section asks for: the switches' hooks, as data (one ``FlagHook`` row per
key), and the ``trainer.hooks`` list.

A trainer registers ``DEFAULT_HOOKS`` always, then the hook of every row whose key asks for it,
then the ``trainer.hooks`` list. Adding a switch is one row here (and its key in the schema).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Tuple

from wenxin.common.errors import ConfigError
from wenxin.common.progress import progress_enabled
from wenxin.common.registry import RegisterSet
from wenxin.config.schema import validate
from wenxin.controller.hooks.base import HookBase
from wenxin.controller.hooks.best_model import LoadBestModelHook
from wenxin.controller.hooks.early_stopping import EarlyStoppingHook
from wenxin.controller.hooks.export import InferenceExportHook
from wenxin.controller.hooks.onnx_result import OnnxResultHook
from wenxin.controller.hooks.profiler import ProfilerHook
from wenxin.controller.hooks.progress import ProgressBarHook

TrainerSection = Dict[str, Any]  # the config's ``trainer`` section


@dataclasses.dataclass(frozen=True)
class FlagHook:
    """A hook that the trainer key ``key`` (a path in the trainer section) switches on (``wanted``),
    made by ``make``."""

    key: str
    wanted: Callable[[TrainerSection, bool], bool]  # (the trainer section, whether this rank writes)
    make: Callable[[TrainerSection], HookBase]


def _early_stopper(cfg: TrainerSection) -> HookBase:
    if any(spec["type"] == "EarlyStoppingHook" for spec in cfg["hooks"]):
        raise ConfigError("trainer.evaluation.early_stopping: set, and an EarlyStoppingHook in trainer.hooks too; "
                          "keep one of them")
    stopper = EarlyStoppingHook(**cfg["evaluation"]["early_stopping"])
    stopper.where = "trainer.evaluation.early_stopping"
    return stopper


FLAG_HOOKS = (
    FlagHook("evaluation.load_best_at_end", lambda cfg, _: bool(cfg["evaluation"]["load_best_at_end"]),
             lambda cfg: LoadBestModelHook()),
    FlagHook("logging.profile", lambda cfg, _: bool(cfg["logging"]["profile"]),
             lambda cfg: ProfilerHook(**cfg["logging"]["profile"])),
    FlagHook("evaluation.early_stopping", lambda cfg, _: cfg["evaluation"]["early_stopping"] is not None,
             _early_stopper),
    FlagHook("export.save_inference", lambda cfg, _: bool(cfg["export"]["save_inference"])
             or cfg["checkpoints"]["output_layout"] == "erniekit", lambda cfg: InferenceExportHook()),
    FlagHook("export.save_onnx", lambda cfg, _: bool(cfg["export"]["save_inference"] and cfg["export"]["save_onnx"]),
             lambda cfg: OnnxResultHook()),
    FlagHook("logging.progress_bar", lambda cfg, is_writer: is_writer
             and progress_enabled(cfg["logging"]["progress_bar"]), lambda cfg: ProgressBarHook()),
)


def hooks_from_flags(cfg: TrainerSection, is_writer: bool) -> List[HookBase]:
    """The hooks the trainer section's keys switch on, in ``FLAG_HOOKS``' order."""
    return [row.make(cfg) for row in FLAG_HOOKS if row.wanted(cfg, is_writer)]


def hooks_from_specs(specs: List[Dict[str, Any]], scope: Optional[str]) -> List[Tuple[HookBase, Optional[int]]]:
    """The hooks of the ``trainer.hooks`` list (registered names, looked up in the task package
    ``scope`` first), each with its priority; errors name the entry's key path."""
    hooks = []
    for i, spec in enumerate(specs):
        path = f"trainer.hooks[{i}]"
        cls = RegisterSet.hooks.get(spec["type"], scope, f"{path}.type")
        params = validate(spec["params"], cls.config_schema, f"{path}.params")
        try:
            hook = cls(**params)
        except ConfigError as e:  # e.g. a tracker whose library is not installed
            raise ConfigError(f"{path}: {e}") from None
        hooks.append((hook, spec["priority"]))
    return hooks
