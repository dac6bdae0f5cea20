"""Loading task files (JSON or YAML), command-line overrides and validation.

``load_config`` checks everything that can be checked without reading data: the file itself,
every key against the schema, the task package, the model's and the hooks' own keys, registered
names (models, trainers, hooks, optimizers, LR schedulers) and the paths the config names. All
problems are reported together in one ``ConfigError``.
"""
from __future__ import annotations

import copy
import json
import os
from typing import Any, Dict, Iterable, List, Optional, Tuple

from wenxin.common.errors import ConfigError, Problems
from wenxin.common.parsed import plain
from wenxin.config.document import MAX_DEPTH, check_structure, check_values, read_document
from wenxin.config.schema import validate
from wenxin.config.task_check import check_settings, check_task
from wenxin.config.task_config import TaskConfig
from wenxin.config.task_schema import ROOT
from wenxin.config.trainer_schema import as_written, canonical_path, group_keys, grouping_note
from wenxin.translation import erniekit


def read_task_file(path: str) -> Dict[str, Any]:
    """Parse a JSON or YAML task file and check its values; errors name the file and position
    or the key path."""
    data = read_document(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be an object")
    problems = Problems()
    check_values(data, problems)
    problems.raise_if_any()
    return plain(data)


def parse_override(text: str) -> tuple[List[str], Any]:
    """``a.b.0.c=value`` -> (["a", "b", "0", "c"], value); the value is parsed as JSON if it can be."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected key.path=value")
    path, raw = text.split("=", 1)
    keys = path.strip().split(".")
    if not path.strip() or not all(keys):
        raise ConfigError(f"--set {text!r}: empty key path or empty key")
    if len(keys) > MAX_DEPTH:
        raise ConfigError(f"--set {path[:60]}...: a key path of {len(keys)} levels; a task file nests at most "
                          f"{MAX_DEPTH}")
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        value = raw
    check_structure(f"--set {path}", value)
    return keys, value


def apply_overrides(config: Dict[str, Any], overrides: Iterable[str], problems: Optional[Problems] = None,
                    moved: Optional[List[str]] = None) -> Dict[str, Any]:
    """Set ``key.path=value`` overrides in place (problems are collected when ``problems`` is given).
    A flat trainer key's path sets the key in its group (``trainer_schema.canonical_path``); the
    keys so moved are added to ``moved``."""
    own = problems if problems is not None else Problems()
    written_as: Dict[Tuple[str, ...], str] = {}  # each key set, by where it lives: the path as written
    for text in overrides:
        with own.catch():
            written = ".".join(parse_override(text)[0])
            path = tuple(canonical_path(written.split(".")))
            earlier = written_as.setdefault(path, written)
            if earlier != written:  # one key set flat and in its group: which was meant is unclear
                raise ConfigError(f"--set {earlier} and --set {written}: the same key set twice; keep "
                                  f"--set {'.'.join(path)}")
            flat = _apply_override(config, text)
            if flat and moved is not None:
                moved.append(flat)
    if problems is None:
        own.raise_if_any()
    return config


def _apply_override(config: Dict[str, Any], text: str) -> str:
    """Apply one override; returns the flat trainer key it named ('' when none)."""
    written, value = parse_override(text)
    keys = canonical_path(written)
    node: Any = config
    for depth, key in enumerate(keys[:-1]):
        node = _child(node, key, keys[:depth + 1])
    last = keys[-1]
    if isinstance(node, list):
        node[_index(node, last, keys)] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ConfigError(f"--set {'.'.join(keys)}: {'.'.join(keys[:-1])} is not an object")
    return written[1] if len(keys) > len(written) else ""


def _index(node: list, key: str, keys: List[str]) -> int:
    if not key.isdigit() or int(key) >= len(node):
        raise ConfigError(f"--set {'.'.join(keys)}: '{key}' is not an index of a list of {len(node)}")
    return int(key)


def _child(node: Any, key: str, keys: List[str]) -> Any:
    if isinstance(node, list):
        return node[_index(node, key, keys)]
    if not isinstance(node, dict):
        raise ConfigError(f"--set {'.'.join(keys)}: {'.'.join(keys[:-1])} is not an object")
    if key not in node or node[key] is None:
        node[key] = {}
    return node[key]


def load_config(path: str, overrides: Iterable[str] = (), with_task: bool = True) -> TaskConfig:
    """Read, override and validate a task file; raises one ``ConfigError`` with every problem.

    ``with_task=False`` checks only what needs neither the task package nor Paddle (syntax,
    overrides, keys and values of the schema): the command line runs it before Paddle loads, so
    those errors come at once. Relative data paths are kept relative to the working directory,
    as in Wenxin.
    """
    raw = read_document(path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be an object")
    if "parameters" in raw and not {"task", "dataset_reader", "model"} & set(raw):
        raise ConfigError(f"{path}: a sweep file (its parameters say which keys to vary), not a task file: run it "
                          f"with wenxin sweep --param_path TASK_FILE --sweep {path}")
    return config_from_dict(raw, path, overrides, with_task)


def config_from_dict(raw: Dict[str, Any], path: str, overrides: Iterable[str] = (),
                     with_task: bool = True) -> TaskConfig:
    """``load_config`` of a task already read into ``raw`` (a notebook's dict, say); ``path`` is
    where it counts as written (its folder is searched for the task package). ``raw`` is not
    changed."""
    raw = copy.deepcopy(raw)
    problems = Problems()
    translations: List[str] = []
    if erniekit.is_erniekit(raw):  # an ERNIE-kit task file: onto the native schema first
        check_values(raw, problems)
        problems.raise_if_any()
        raw, notes = erniekit.translate(plain(raw), path)
        translations = [f"ERNIE-kit task file: {note}" for note in notes]
    moved = group_keys(raw.get("trainer"), problems)  # a file of flat trainer keys, before its overrides
    apply_overrides(raw, overrides, problems, moved)
    moved += group_keys(raw.get("trainer"), problems)  # a whole trainer section set by --set
    if moved:
        translations.append(grouping_note(sorted(set(moved), key=moved.index)))
    check_values(raw, problems)
    config = TaskConfig(validate(plain(raw), ROOT, "", problems), os.path.abspath(path), translations)
    if with_task:
        check_task(config, problems)
    else:
        check_settings(config, problems)
        if isinstance(config.get("task"), str) and config["task"]:
            from wenxin.common.task_loader import locate_task
            with problems.catch():  # an unknown task at once, before Paddle loads
                locate_task(config["task"], path)
    problems.messages = [as_written(message, moved) for message in problems.messages]  # the paths as written
    problems.raise_if_any()
    return config
