"""Loading task files (JSON or YAML), command-line overrides and validation."""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterable, List

import yaml

from wenxin.common.errors import ConfigError
from wenxin.config.schema import Schema, validate, validate_value
from wenxin.config.task_schema import MODEL_BASE, PRETRAINED, ROOT


def read_task_file(path: str) -> Dict[str, Any]:
    """Parse a JSON or YAML task file; syntax errors name the file, line and column."""
    if not os.path.isfile(path):
        raise ConfigError(f"task file not found: {path}")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith((".yaml", ".yml")):
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise ConfigError(f"{path}{where}: invalid YAML: {problem}") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be an object")
    return data


def parse_override(text: str) -> tuple[List[str], Any]:
    """``a.b.0.c=value`` -> (["a", "b", "0", "c"], value); the value is parsed as JSON if it can be."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected key.path=value")
    path, raw = text.split("=", 1)
    if not path.strip():
        raise ConfigError(f"--set {text!r}: empty key path")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return path.strip().split("."), value


def apply_overrides(config: Dict[str, Any], overrides: Iterable[str]) -> Dict[str, Any]:
    for text in overrides:
        keys, value = parse_override(text)
        node: Any = config
        for depth, key in enumerate(keys[:-1]):
            node = _child(node, key, keys[:depth + 1], create=True)
        last = keys[-1]
        if isinstance(node, list):
            node[_index(node, last, keys)] = value
        elif isinstance(node, dict):
            node[last] = value
        else:
            raise ConfigError(f"--set {'.'.join(keys)}: {'.'.join(keys[:-1])} is not an object")
    return config


def _index(node: list, key: str, keys: List[str]) -> int:
    if not key.isdigit() or int(key) >= len(node):
        raise ConfigError(f"--set {'.'.join(keys)}: '{key}' is not an index of a list of {len(node)}")
    return int(key)


def _child(node: Any, key: str, keys: List[str], create: bool) -> Any:
    if isinstance(node, list):
        return node[_index(node, key, keys)]
    if not isinstance(node, dict):
        raise ConfigError(f"--set {'.'.join(keys)}: {'.'.join(keys[:-1])} is not an object")
    if key not in node or node[key] is None:
        node[key] = {}
    return node[key]


def load_config(path: str, overrides: Iterable[str] = ()) -> Dict[str, Any]:
    """Read, override and validate a task file (everything but model-specific keys).

    Relative data paths are kept relative to the working directory, as in Wenxin.
    """
    raw = apply_overrides(read_task_file(path), overrides)
    config = validate(raw, ROOT)
    config["model"] = dict(config["model"])
    if "type" not in config["model"]:
        raise ConfigError("model.type: required key is missing")
    validate_value(config["model"]["type"], MODEL_BASE["type"], "model.type")  # needed to find the class
    if config["dataset_reader"].get("train_reader") is None:
        raise ConfigError("dataset_reader.train_reader: required section is missing")
    trainer = config["trainer"]
    trainer["pre_train_model"] = normalize_pretrained(trainer["pre_train_model"])
    if trainer["load_checkpoint"] and trainer["resume"] == "auto":
        raise ConfigError("trainer.resume: 'auto' cannot be combined with trainer.load_checkpoint")
    config["_source"] = os.path.abspath(path)
    return config


def normalize_pretrained(value: Any) -> List[Dict[str, Any]]:
    """``pre_train_model`` may be a path or a list of {name, params_path, prefix_map}."""
    if isinstance(value, str):
        value = [{"params_path": value}] if value else []
    return [validate(v, PRETRAINED, f"trainer.pre_train_model[{i}]") for i, v in enumerate(value)]


def validate_model_section(model: Dict[str, Any], model_schema: Schema) -> Dict[str, Any]:
    """Check ``model`` against the base keys plus the model class's own ``config_schema``."""
    return validate(model, {**MODEL_BASE, **model_schema}, "model")
