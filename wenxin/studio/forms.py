"""The launch form of a task file, generated from the task schema, and the overrides a filled form
gives.

Each shown key becomes a control by what its schema ``Key`` says: a drop-down where it has
choices (and for the registered names of ``model.type``, ``model.optimization.optimizer`` and
``model.optimization.lr_scheduler``), a check box for a flag, a number field with the key's bounds,
text otherwise (a path field, one whose key the schema marks ``path``, must name a place inside
the studio's root), and check boxes of the
registered hooks for ``trainer.hooks``. Its starting value is the task file's resolved value, its
help the schema's one-line doc.

Which keys: the task file's ``studio.form`` list, else ``DEFAULT_KEYS`` (those the task has).
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, Callable, Dict, List, Optional, Sequence

from wenxin.common.errors import ConfigError
from wenxin.config.task_config import source_of
from wenxin.common.registry import RegisterSet
from wenxin.config.schema import REQUIRED, Key, Schema
from wenxin.config.task_schema import MODEL_BASE, ROOT
from wenxin.config.trainer_schema import canonical_path

DEFAULT_KEYS = ("model.optimization.learning_rate", "model.optimization.optimizer",
                "model.optimization.lr_scheduler", "model.optimization.warmup_proportion",
                "model.optimization.weight_decay", "trainer.epoch", "dataset_reader.train_reader.config.batch_size",
                "model.is_dygraph", "trainer.evaluation.eval_step", "trainer.checkpoints.save_model_step",
                "trainer.logging.train_log_step", "trainer.hooks", "trainer.logging.visualdl")
REGISTERED = {"model.type": RegisterSet.models, "model.optimization.optimizer": RegisterSet.optimizers,
              "model.optimization.lr_scheduler": RegisterSet.lr_schedulers}
HOOK_KEYS = {"trainer.hooks"}
# hooks the trainer adds by itself (always, or from a setting of its own), and the sweep's
SETTING_HOOKS = {"LoadBestModelHook", "ProfilerHook", "InferenceExportHook", "OnnxResultHook", "ProgressBarHook",
                 "EarlyStoppingHook", "SweepReportHook"}


def checkable_hooks(scope: Optional[str]) -> List[str]:
    """The registered hooks a check box may add to ``trainer.hooks``."""
    from wenxin.controller.hooks import DEFAULT_HOOKS
    always = {cls.__name__ for cls in DEFAULT_HOOKS} | SETTING_HOOKS
    return sorted(name for name in RegisterSet.hooks.names(scope) if name not in always)


def canonical_key(path: str) -> str:
    """A form's key path with a flat trainer key in its group (a task file's ``studio.form`` or an
    older run's overrides may name ``trainer.save_model_step``)."""
    return ".".join(canonical_path(path.split(".")))


def _schema_key(path: str, model_schema: Schema) -> Optional[Key]:
    """The schema ``Key`` of a key path (``trainer.epoch``, ``dataset_reader.train_reader.config.
    batch_size``); None for a path no schema knows (a list element, a model's open key)."""
    parts = path.split(".")
    schema: Optional[Schema] = ROOT
    key: Optional[Key] = None
    for i, part in enumerate(parts):
        if i == 1 and parts[0] == "model":
            schema = {**MODEL_BASE, **model_schema}
        if schema is None:
            return None
        key = schema.get(part)
        if key is None:
            return None
        schema = key.children
    return key


def _value_at(config: Dict[str, Any], path: str) -> Any:
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _finite(value: Optional[float]) -> Optional[float]:
    return value if value is not None and math.isfinite(value) and abs(value) < 2**53 else None


def form_fields(config: Dict[str, Any], model_schema: Schema, scope: Optional[str],
                keys: Sequence[str] = ()) -> List[Dict[str, Any]]:
    """The form of a resolved task config: one dict a control (``key``, ``control``: select /
    checkbox / number / text / path / hooks, ``value``, ``help``, and ``choices``, ``min``, ``max``,
    ``step`` where they apply). ``keys`` default to the task's ``studio.form`` or ``DEFAULT_KEYS``."""
    wanted = [canonical_key(path) for path in list(keys) or list(config.get("studio", {}).get("form") or DEFAULT_KEYS)]
    explicit = bool(keys) or bool(config.get("studio", {}).get("form"))
    fields = []
    for path in wanted:
        key = _schema_key(path, model_schema)
        value = _value_at(config, path)
        if key is None or (value is None and not explicit and path not in HOOK_KEYS):
            if explicit:
                raise ConfigError(f"studio.form: {path!r} is not a key of this task ({source_of(config)})")
            continue
        field: Dict[str, Any] = {"key": path, "help": key.doc, "value": value,
                                 "default": None if key.default is REQUIRED else key.default}
        if path in HOOK_KEYS:
            chosen = [hook.get("type") for hook in value or [] if isinstance(hook, dict)]
            field.update(control="hooks", value=chosen, choices=checkable_hooks(scope))
        elif path in REGISTERED:
            field.update(control="select", choices=sorted(REGISTERED[path].names(scope)))
        elif key.choices is not None:
            field.update(control="select", choices=list(key.choices))
        elif bool in key.types:
            field.update(control="checkbox", value=bool(value))
        elif int in key.types or float in key.types:
            integer = float not in key.types
            field.update(control="number", min=_finite(key.minimum), max=_finite(key.maximum),
                         step=1 if integer else "any", integer=integer)
        elif key.path:  # by its schema type, whatever its name (load_parameters, load_checkpoint)
            field.update(control="path")
        else:
            field.update(control="text")
        fields.append(field)
    return fields


def overrides_from_form(fields: List[Dict[str, Any]], values: Dict[str, Any], root: str) -> Dict[str, Any]:
    """The overrides (key path -> value) of a submitted form: only the shown keys, and only those
    whose value differs from the task file's. Values are checked against their control; raises
    ``ConfigError`` naming the key. A flat trainer key (an older page's, a script's) means the
    key in its group."""
    values = {canonical_key(key) if isinstance(key, str) else key: value for key, value in values.items()}
    by_key = {field["key"]: field for field in fields}
    unknown = sorted(set(values) - set(by_key))
    if unknown:
        raise ConfigError(f"{unknown[0]}: not a key of this form (it shows {', '.join(sorted(by_key))})")
    overrides: Dict[str, Any] = {}
    for key, raw in values.items():
        field = by_key[key]
        value = _checked(field, raw, root)
        if field["control"] == "hooks":
            current = list(field["value"])
            if sorted(value) != sorted(current):
                overrides[key] = [{"type": name} for name in value]
        elif value != field["value"]:
            overrides[key] = value
    return overrides


def _checked(field: Dict[str, Any], raw: Any, root: str) -> Any:
    """A form value checked by its field's control (``_CHECKS``; text and paths otherwise)."""
    check = _CHECKS.get(field["control"])
    if check is not None:
        return check(field, raw)
    key = field["key"]
    if not isinstance(raw, str) or len(raw) > 4096 or "\x00" in raw:
        raise ConfigError(f"{key}: expected a text of at most 4096 characters")
    if field["control"] == "path" and raw:
        inside_root(root, raw, key)
    return raw


def _checked_hooks(field: Dict[str, Any], raw: Any) -> Any:
    key = field["key"]
    if not isinstance(raw, list) or not all(isinstance(name, str) for name in raw):
        raise ConfigError(f"{key}: expected a list of hook names")
    bad = [name for name in raw if name not in field["choices"] and name not in field["value"]]
    if bad:
        raise ConfigError(f"{key}: {bad[0]!r} is not a registered hook")
    return raw


def _checked_choice(field: Dict[str, Any], raw: Any) -> Any:
    if raw not in field["choices"]:
        raise ConfigError(f"{field['key']}: {raw!r} is not one of {field['choices']}")
    return raw


def _checked_bool(field: Dict[str, Any], raw: Any) -> Any:
    if not isinstance(raw, bool):
        raise ConfigError(f"{field['key']}: expected true or false, got {json.dumps(raw)[:40]}")
    return raw


def _checked_number(field: Dict[str, Any], raw: Any) -> Any:
    key = field["key"]
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
        raise ConfigError(f"{key}: expected a number, got {json.dumps(raw)[:40]}")
    if field["integer"]:
        if raw != int(raw):
            raise ConfigError(f"{key}: expected a whole number, got {raw}")
        raw = int(raw)
    if field["min"] is not None and raw < field["min"]:
        raise ConfigError(f"{key}: {raw} is below its minimum {field['min']}")
    if field["max"] is not None and raw > field["max"]:
        raise ConfigError(f"{key}: {raw} is above its maximum {field['max']}")
    return raw


# a form control -> the check of its values (text and path fields: ``_checked`` itself)
_CHECKS: Dict[str, Callable[[Dict[str, Any], Any], Any]] = {
    "hooks": _checked_hooks, "select": _checked_choice, "checkbox": _checked_bool, "number": _checked_number}


def inside_root(root: str, path: str, what: str) -> str:
    """The real path of ``path`` (relative to ``root``, or absolute) when it lies inside ``root``;
    raises ``ConfigError`` naming ``what`` otherwise (``..``, a symbolic link out, another disk)."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(real_root, path))
    if os.path.commonpath([real_root, real]) != real_root:
        raise ConfigError(f"{what}: {path!r} is outside the studio's root {real_root}")
    return real
