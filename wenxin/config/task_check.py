"""The checks of a task file that need the task package: registered names, the model's and the
hooks' own keys, the paths the config names, and limits that need several keys at once.

``check_task`` records every problem into a ``Problems`` collector, so that ``load_config``
reports them all in one run.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import sys
import traceback
from typing import Any, Dict, List, Optional, Tuple

from wenxin.common.errors import ConfigError, DataError, InstallError, Problems, WenxinError
from wenxin.hubs.model_names import resolve_model
from wenxin.common.paddle_support import cpu_build_problem
from wenxin.common.registry import RegisterSet
from wenxin.config.schema import Schema, validate, validate_value
from wenxin.config.task_config import source_of
from wenxin.config.task_schema import MODEL_BASE
from wenxin.config.trainer_schema import PRETRAINED

logger = logging.getLogger("wenxin")

# A padded batch of more int64 values than this (2 GiB) cannot be what the user meant.
MAX_BATCH_VALUES = 1 << 28
READER_NAMES = ("train_reader", "dev_reader", "test_reader", "predict_reader")
EVAL_FLAGS = (("dev_reader", "is_eval_dev"), ("test_reader", "is_eval_test"))


@dataclasses.dataclass
class TaskClasses:
    """What a task file resolves to."""

    scope: str
    model_cls: Any  # a BaseModel subclass (a registry entry)
    trainer_cls: Any  # a BaseTrainer subclass


def check_settings(config: Dict[str, Any], problems: Problems) -> None:
    """The checks that need neither the task package nor Paddle: required sections, flag
    combinations, and that every named file exists."""
    trainer = config.get("trainer", {})
    checkpoints, evaluation = trainer.get("checkpoints", {}), trainer.get("evaluation", {})
    dataset = config.get("dataset_reader", {})
    if "dataset_reader" in config and dataset.get("train_reader") is None:
        problems.add("dataset_reader.train_reader: required section is missing", key="dataset_reader.train_reader")
    _fill_from_pretrained_folder(config, problems)
    if "pre_train_model" in checkpoints:
        checkpoints["pre_train_model"] = normalize_pretrained(checkpoints["pre_train_model"], problems)
    if checkpoints.get("load_checkpoint") and checkpoints.get("resume", "none") != "none":
        problems.add(f"trainer.checkpoints.resume: {checkpoints.get('resume')!r} cannot be combined with "
                     "trainer.checkpoints.load_checkpoint")
    for reader, flag in EVAL_FLAGS:
        if evaluation.get(flag) and "dataset_reader" in config and dataset.get(reader) is None:
            problems.add(f"trainer.evaluation.{flag}: set, but dataset_reader.{reader} is not configured")
    _check_readers(dataset, evaluation.get("eval_batch_size", 0), problems)
    _check_paths(checkpoints, problems)
    _check_model_folders(config, problems)
    if (trainer.get("environment") or {}).get("PADDLE_PLACE_TYPE") == "gpu":
        problem = cpu_build_problem("trainer.environment.PADDLE_PLACE_TYPE")
        if problem:
            problems.add(problem, kind=InstallError)


# the field readers whose vocabulary is the pretrained model's vocab.txt
PRETRAINED_VOCAB_READERS = ("ErnieTextFieldReader",)


def _fill_from_pretrained_folder(config: Dict[str, Any], problems: Problems) -> None:
    """``model.pretrained: DIR`` (a PaddleNLP or ERNIE-kit model folder) fills, where they are not
    set: ``model.encoder_config``, ``trainer.checkpoints.pre_train_model`` and the ``vocab_path`` of every
    ERNIE text field. Keys set explicitly are kept."""
    model, trainer = config.get("model"), config.get("trainer")
    if not isinstance(model, dict) or not isinstance(trainer, dict) or not isinstance(trainer.get("checkpoints"), dict):
        return
    checkpoints = trainer["checkpoints"]
    name = model.get("pretrained")
    if not name or not isinstance(name, str):
        return
    try:
        folder = resolve_model(name, download=model.get("pretrained_download") is True)
    except ConfigError as e:
        problems.add(str(e))
        return
    if folder != name:
        logger.info("model.pretrained: '%s' is %s", name, folder)
        model["pretrained"] = folder
    model.setdefault("encoder_config", folder)
    if not checkpoints.get("pre_train_model") and not checkpoints.get("load_parameters"):
        checkpoints["pre_train_model"] = folder
    vocab = os.path.join(folder, "vocab.txt")
    for name in READER_NAMES:
        reader = (config.get("dataset_reader") or {}).get(name)
        for i, field in enumerate(reader.get("fields", []) if isinstance(reader, dict) else []):
            kind = (field.get("reader") or {}).get("type") if isinstance(field, dict) else None
            if kind in PRETRAINED_VOCAB_READERS and not field.get("vocab_path"):
                if not os.path.isfile(vocab):
                    problems.add(f"model.pretrained: {folder} has no vocab.txt for dataset_reader.{name}.fields[{i}]; "
                                 f"set its vocab_path")
                    continue
                field["vocab_path"] = vocab


def check_task(config: Dict[str, Any], problems: Problems) -> Optional[TaskClasses]:
    """Check a schema-validated config (in place: the model section gets its defaults,
    ``pre_train_model`` its list form); returns the resolved classes when the task loaded."""
    check_settings(config, problems)
    model = config.get("model")
    model_type = None
    if isinstance(model, dict):
        if "type" not in model:
            problems.add("model.type: required key is missing", key="model.type")
        else:
            model_type = validate_value(model["type"], MODEL_BASE["type"], "model.type", problems)
    classes = None
    scope = _import_task(config, problems) if "task" in config else None
    if scope is not None and model_type is not None:
        classes = _resolve(config, scope, model_type, problems)
    if isinstance(model, dict):
        if classes is not None:
            with problems.catch():
                config["model"] = validate_model_section(model, classes.model_cls.config_schema, problems)
        else:  # the model class is unknown: check the keys every model shares
            base = {k: v for k, v in model.items() if k in MODEL_BASE}
            config["model"] = {**model, **validate(base, MODEL_BASE, "model", problems)}
        _check_optimization(config["model"].get("optimization"), scope, problems)
    return classes


def _import_task(config: Dict[str, Any], problems: Problems) -> Optional[str]:
    from wenxin.common.task_loader import import_task
    try:
        return import_task(config["task"], source_of(config))
    except ConfigError as e:
        for message in e.problems:
            problems.add(message, key="task")
    except Exception as e:  # noqa: BLE001 (the task's own code failed to import)
        frames = [f for f in traceback.extract_tb(sys.exc_info()[2]) if "wenxin/" not in f.filename.replace(os.sep, "/")
                  or "/tasks/" in f.filename.replace(os.sep, "/")]
        where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        problems.add(f"task: importing task package '{config['task']}' failed{where}: {type(e).__name__}: {e}",
                     key="task")
    return None


def _resolve(config: Dict[str, Any], scope: str, model_type: str, problems: Problems) -> Optional[TaskClasses]:
    model_cls = trainer_cls = None
    with problems.catch():
        model_cls = RegisterSet.models.get(model_type, scope, "model.type")
    trainer = config.get("trainer", {})
    if "type" in trainer:
        with problems.catch():
            trainer_cls = RegisterSet.trainers.get(trainer["type"], scope, "trainer.type")
    model = config.get("model", {})
    bound = getattr(trainer_cls, "engine_mode", None)  # a trainer bound to one engine (BaseDynamicTrainer)
    if bound is not None and isinstance(model.get("is_dygraph", 1), int):
        wanted = "dynamic" if model.get("is_dygraph", 1) else "static"
        if bound != wanted:
            problems.add(f"trainer.type: '{trainer['type']}' is a {bound}-mode trainer but "
                         f"model.is_dygraph={model.get('is_dygraph', 1)} asks for {wanted} (trainer.type "
                         f"CustomTrainer, or a task trainer on BaseTrainer, runs either mode)",
                         key="trainer.type")
    _check_hook_specs(trainer.get("hooks", []), scope, problems)
    dataset = config.get("dataset_reader")
    readers = [(name, dataset.get(name)) for name in READER_NAMES] if isinstance(dataset, dict) else []
    for name, reader in readers:
        reader_config = reader.get("config") if isinstance(reader, dict) else None
        if isinstance(reader_config, dict) and isinstance(reader_config.get("format"), str):
            with problems.catch():
                row_format = RegisterSet.data_formats.get(reader_config["format"], scope,
                                                          f"dataset_reader.{name}.config.format")
                if _builtin_format(reader_config["format"]) is not row_format:  # the task's own
                    problem = row_format.source_problem(reader_config, f"dataset_reader.{name}")
                    if problem:
                        problems.add(problem, kind=DataError)
    if model_cls is None or trainer_cls is None:
        return None
    return TaskClasses(scope, model_cls, trainer_cls)


def _check_hook_specs(specs: List[Dict[str, Any]], scope: str, problems: Problems) -> None:
    """Each ``trainer.hooks`` entry names a registered hook, and its params fit the hook's schema."""
    for i, spec in enumerate(specs):
        if "type" not in spec:
            continue
        hook_cls = None
        with problems.catch():
            hook_cls = RegisterSet.hooks.get(spec["type"], scope, f"trainer.hooks[{i}].type")
        if hook_cls is not None:
            validate(spec.get("params", {}), hook_cls.config_schema, f"trainer.hooks[{i}].params", problems)


def _check_optimization(opt: Any, scope: Optional[str], problems: Problems) -> None:
    if not isinstance(opt, dict):
        return
    for key, registry in (("optimizer", RegisterSet.optimizers), ("lr_scheduler", RegisterSet.lr_schedulers)):
        if key in opt:
            with problems.catch():
                registry.get(opt[key], scope, f"model.optimization.{key}")
    if opt.get("warmup_steps") and opt.get("warmup_proportion"):
        problems.add("model.optimization: set warmup_steps or warmup_proportion, not both")


def _check_readers(dataset: Dict[str, Any], eval_batch_size: int, problems: Problems) -> None:
    """Data and vocab files exist; padded batches fit in memory (``eval_batch_size``: the
    evaluation's, 0 for the readers' own)."""
    for name in READER_NAMES:
        reader = dataset.get(name)
        if not isinstance(reader, dict):
            continue
        path = f"dataset_reader.{name}"
        rc = reader.get("config", {})
        row_format = _builtin_format(rc.get("format", "tsv"))
        problem = row_format.source_problem(rc, path) if row_format is not None else None
        if problem:
            problems.add(problem, kind=DataError)
        batch = max(rc.get("batch_size", 1), eval_batch_size if name != "train_reader" else 0)
        for i, field in enumerate(reader.get("fields", [])):
            vocab = field.get("vocab_path")
            if vocab and not os.path.isfile(vocab):
                problems.add(f"{path}.fields[{i}].vocab_path: vocab file not found: {vocab}")
            if field.get("pad_to_max_seq_len") and batch * field.get("max_seq_len", 1) > MAX_BATCH_VALUES:
                problems.add(f"{path}.fields[{i}].max_seq_len: {field['max_seq_len']} padded for every one of "
                             f"{batch} examples is more than {MAX_BATCH_VALUES} values a batch; "
                             f"lower max_seq_len or the batch size")


def _builtin_format(name: Any) -> Any:
    """The built-in data format class named ``name`` (a task's own formats are checked once the
    task is imported), or None."""
    return RegisterSet.data_formats.builtin(name) if isinstance(name, str) else None


def _check_paths(checkpoints: Dict[str, Any], problems: Problems) -> None:
    """The files ``trainer.checkpoints`` starts from exist."""
    for i, entry in enumerate(checkpoints.get("pre_train_model", [])):
        params = entry.get("params_path") if isinstance(entry, dict) else None
        if params and not os.path.exists(params):
            problems.add(f"trainer.checkpoints.pre_train_model[{i}].params_path: pretrained params file not "
                         f"found: {params}")
    if checkpoints.get("load_parameters") and not os.path.exists(checkpoints["load_parameters"]):
        problems.add(f"trainer.checkpoints.load_parameters: params file not found: {checkpoints['load_parameters']}")
    if checkpoints.get("load_checkpoint") and not os.path.isdir(checkpoints["load_checkpoint"]):
        problems.add(f"trainer.checkpoints.load_checkpoint: checkpoint folder not found: "
                     f"{checkpoints['load_checkpoint']}")


def _check_model_folders(config: Dict[str, Any], problems: Problems) -> None:
    """Each model folder a task file names (a field's or the model's ``model_dir``) exists, so a
    recipe run before its model was downloaded says so at once, with its other problems."""
    holders = [("model.model_dir", config.get("model") or {})]
    dataset = config.get("dataset_reader") or {}
    for name in READER_NAMES:
        reader = dataset.get(name)
        for i, field in enumerate(reader.get("fields", []) if isinstance(reader, dict) else []):
            if isinstance(field, dict):
                holders.append((f"dataset_reader.{name}.fields[{i}].model_dir", field))
    named = _resolve_model_names(holders, problems)
    keys_of: Dict[str, List[str]] = {}  # each missing folder once, with every key that names it
    for key, folder in named:
        if isinstance(folder, str) and folder and not os.path.isdir(folder):
            keys_of.setdefault(folder, []).append(key)
    for folder, keys in keys_of.items():
        what = "is a file, not a model folder" if os.path.exists(folder) else "folder not found"
        also = f" (also named by {', '.join(keys[1:])})" if len(keys) > 1 else ""
        problems.add(f"{keys[0]}: {what}: {folder}{also}; download the model there first (docs/chat.md)", key=keys[0])


def _resolve_model_names(holders: List[Tuple[str, Dict[str, Any]]], problems: Problems) -> List[Tuple[str, Any]]:
    """Each ``model_dir`` that is a model's name on a hub (``owner/model``, no such path) replaced
    by its downloaded folder (``wenxin.hubs``); returns (key, value) of every ``model_dir``."""
    from wenxin.hubs import looks_like_name, task_model_folder
    folders: Dict[str, str] = {}
    named = []
    for key, holder in holders:
        value = holder.get("model_dir")
        if isinstance(value, str) and looks_like_name(value):
            try:
                if value not in folders:
                    folders[value] = task_model_folder(value)
                holder["model_dir"] = folders[value]
            except WenxinError as e:
                problems.add(f"{key}: {e}", key=key)
                continue
        named.append((key, holder.get("model_dir")))
    return named


def resolve_task(config: Dict[str, Any]) -> TaskClasses:
    """The task's classes for a config ``load_config`` accepted (raises on any problem)."""
    problems = Problems()
    classes = check_task(config, problems)
    problems.raise_if_any()
    assert classes is not None
    return classes


def normalize_pretrained(value: Any, problems: Optional[Problems] = None) -> List[Dict[str, Any]]:
    """``pre_train_model`` may be a path or a list of {name, params_path, prefix_map}."""
    if isinstance(value, str):
        value = [{"params_path": value}] if value else []
    return [validate(v, PRETRAINED, f"trainer.checkpoints.pre_train_model[{i}]", problems) for i, v in enumerate(value)]


def validate_model_section(model: Dict[str, Any], model_schema: Schema,
                           problems: Optional[Problems] = None) -> Dict[str, Any]:
    """Check ``model`` against the base keys plus the model class's own ``config_schema``."""
    return validate(model, {**MODEL_BASE, **model_schema}, "model", problems)
