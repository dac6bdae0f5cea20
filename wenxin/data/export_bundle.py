"""The inference export folder's format, shared by the exporter (training) and the predictor
(serving) so neither imports the other::

    inference.json / inference.pdiparams   the graph and weights (a generation model: each step
                                           function's graph, prefill.json, extend.json..., and one
                                           steps.pdiparams they share, or, in older exports and where
                                           their weights differ, a .pdiparams each)
    preprocess.json                        field reader configs, output names, label names
    vocab/<field>.txt                      the vocabularies the field readers use
    model.onnx                             optional (wenxin export --format onnx)
    manifest.json                          size and SHA-256 of every file above, written last

An export is sealed like a checkpoint (``wenxin.common.manifest``) and verified before a
predictor reads it; ``preprocess.json`` is checked against a schema, so a damaged or malformed
folder is one error naming the file, never a traceback or a silently different prediction.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Tuple

from wenxin.common import manifest
from wenxin.common.errors import ConfigError, ExportError
from wenxin.config.schema import Key, Schema, validate
from wenxin.config.task_schema import FIELD

MODEL_PREFIX = "inference"
FIRST_STEP = "prefill"  # the first step function of a generation export of several (its steps are in preprocess.json)
ADVANCE_STEP = "advance"  # the one step function of a generation export that has one (wenxin.models.advance_step)
INFILL_STEP = "infill"  # ERNIE-Gen's (wenxin.models.infill_step)
GENERATION_PROGRAMS = (ADVANCE_STEP, INFILL_STEP, FIRST_STEP)  # one of them is in every generation export
SHARED_PARAMS = "steps.pdiparams"  # the one parameters file of step functions whose parameters are the same
PREPROCESS_FILE = "preprocess.json"
FORMAT_VERSION = 1
WHAT = "export"
KIND = "inference"  # the manifest's record of the writer (``wenxin.common.owned_folders``)

PREPROCESS: Schema = {
    "format": Key(int, minimum=1, maximum=FORMAT_VERSION),
    "task": Key((str, type(None)), None),
    "model_type": Key(str, non_empty=True),
    "fields": Key(list, items=Key(dict, children=FIELD)),
    "outputs": Key(list, items=Key(str, non_empty=True)),
    "labels": Key(list, items=Key(str)),
    "label_names": Key(list, [], items=Key(str), doc="what each label is shown as (the field's label_names)"),
    "result_format": Key(str, "classification", non_empty=True),
    "max_seq_len": Key(dict, {}, open_keys=True),
    "tensors": Key(list, [], items=Key(dict, open_keys=True)),
    "onednn_min_rows": Key((int, type(None)), None, minimum=1),  # the model's oneDNN rule (PaddleBackend)
    "sorted_batch_rows": Key((int, type(None)), None, minimum=1),  # the model's batching rule (Predictor)
    # a generation model: each step function's program (its file prefix) with its inputs and outputs
    # (``params``: the parameters file its program reads, when the steps share one: ``SHARED_PARAMS``)
    "steps": Key(dict, {}, items=Key(dict, children={
        "inputs": Key(list, items=Key(dict, open_keys=True)), "outputs": Key(list, items=Key(str, non_empty=True)),
        "params": Key((str, type(None)), None),
        # advance_pair's: its second group may have no rows (wenxin.models.advance_step.EMPTY_SECOND)
        "empty_second": Key(bool, False),
        # infill's: the target's [CLS] every prefill ends with (wenxin.models.infill_step.TARGET_START)
        "target_start": Key((dict, type(None)), None, children={
            "id": Key(int, minimum=0), "type": Key(int, minimum=0), "continuous": Key(bool)})})),
    # and how it decodes (wenxin.models.decoding.DecodeSettings' fields)
    "generation": Key((dict, type(None)), None, open_keys=True),
}

_verified = manifest.VerifiedCache()


def seal_export(folder: str) -> None:
    """Write the manifest of a finished export folder (again after a file is added)."""
    manifest.write_manifest(folder, FORMAT_VERSION, kind=KIND)


def verify_export(folder: str) -> None:
    """Check every file of an export against its manifest (once per process while the manifest
    is unchanged); an older export without one is refused with how to export it again."""
    if os.path.isdir(folder) and not os.path.isfile(os.path.join(folder, manifest.MANIFEST_FILE)):
        raise ExportError(f"{folder}: an export without {manifest.MANIFEST_FILE} (made by an older wenxin, or "
                          f"incomplete), so it cannot be checked; export it again: wenxin export --param_path "
                          f"TASK_FILE --checkpoint CHECKPOINT")
    _verified.verify(folder, lambda: manifest.verify_folder(folder, WHAT, ExportError, (PREPROCESS_FILE,)))


def read_preprocessing(folder: str) -> Dict[str, Any]:
    """``preprocess.json``, checked: one ``ExportError`` naming the file and every bad key."""
    path = os.path.join(folder, PREPROCESS_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
    except FileNotFoundError:
        raise ExportError(f"{path}: not found") from None
    except (OSError, ValueError, RecursionError) as e:
        raise ExportError(f"{path}: unreadable preprocessing description ({type(e).__name__}: {e})") from None
    try:
        checked = validate(meta, PREPROCESS)
    except ConfigError as e:
        raise ExportError(problems=[f"{path}: {problem}" for problem in e.problems]) from None
    if checked["label_names"] and len(checked["label_names"]) != len(checked["labels"]):
        raise ExportError(f"{path}: label_names names {len(checked['label_names'])} labels, labels has "
                          f"{len(checked['labels'])}")
    if INFILL_STEP in checked["steps"] and not checked["steps"][INFILL_STEP].get("target_start"):
        raise ExportError(f"{path}: steps.{INFILL_STEP}.target_start: missing (the target's [CLS], which every "
                          f"prefill ends with)")
    for i, field in enumerate(checked["fields"]):
        vocab = field.get("vocab_path") or ""
        if vocab and manifest.outside(vocab):
            raise ExportError(f"{path}: fields[{i}].vocab_path: {vocab!r} is outside the export folder")
        model_file = (field.get("tokenizer") or {}).get("spm_model_file") or ""
        if model_file and manifest.outside(model_file):
            raise ExportError(f"{path}: fields[{i}].tokenizer.spm_model_file: {model_file!r} is outside the export "
                              f"folder")
    return checked


INFERENCE_DIR = "inference"  # <checkpoint>/inference: a checkpoint's export, sealed by a manifest of its own
MAX_EXPORTS_NAMED = 5
MAX_FOLDERS_LOOKED_AT = 2000  # a model path typed wrong must not start a walk of a whole disk


def exports_near(path: str, depth: int = 4) -> Tuple[str, List[str]]:
    """Where to look when ``path`` is not an exported model: its nearest existing folder (itself,
    or the closest one above it), and the exported models under that folder (folders holding
    ``preprocess.json``, at most ``depth`` levels down), the newest first, paths as given."""
    near = os.path.normpath(path) if path else "."
    while not os.path.isdir(near) and os.path.dirname(near) not in ("", near):
        near = os.path.dirname(near)
    if not os.path.isdir(near):
        near = "."
    found: List[Tuple[float, str]] = []
    looked = 0
    for folder, subfolders, names in os.walk(near):
        looked += 1
        if PREPROCESS_FILE in names and os.path.normpath(folder) != os.path.normpath(path):
            found.append((os.path.getmtime(os.path.join(folder, PREPROCESS_FILE)), folder))
        if folder.count(os.sep) - near.count(os.sep) >= depth or looked >= MAX_FOLDERS_LOOKED_AT:
            subfolders[:] = []
        else:
            subfolders.sort()
    return near, [folder for _, folder in sorted(found, reverse=True)[:MAX_EXPORTS_NAMED]]


def where_exports_are(path: str, nearby: Optional[Tuple[str, List[str]]] = None) -> str:
    """A sentence for an error about ``path``: the exported models near it, or that there are none.
    ``nearby``: ``exports_near(path)``, when the caller has looked already."""
    near, found = nearby or exports_near(path)
    if found:
        return f"exported models under {near}: {', '.join(found)}"
    return f"no exported model under {near} (export one with wenxin export, or set trainer.export.save_inference)"


def inference_folder(path: str, key: str = "--model_dir") -> str:
    """An exported folder, or the one inside a checkpoint folder (``<checkpoint>/inference``).
    Anything else is one error naming ``key`` and the exported models near ``path`` (a run's
    folder holds them under ``checkpoints/``); found before Paddle is imported."""
    if os.path.isfile(os.path.join(path, PREPROCESS_FILE)):
        return path
    inner = os.path.join(path, INFERENCE_DIR)
    if os.path.isfile(os.path.join(inner, PREPROCESS_FILE)):
        return inner
    nearby = exports_near(path)
    found = nearby[1]
    if os.path.isdir(path):
        if found:
            raise ConfigError(f"{key}: {path} is not an exported model (no {PREPROCESS_FILE}); the exported models "
                              f"in it: {', '.join(found)}")
        raise ConfigError(f"{key}: {path} is not an exported model and holds none (no {PREPROCESS_FILE}), nor a "
                          f"model folder (an ERNIE 4.5 config.json); export a checkpoint first: wenxin export "
                          f"--param_path TASK_FILE --checkpoint CHECKPOINT_FOLDER")
    raise ConfigError(f"{key}: folder not found: {path}; {where_exports_are(path, nearby)}")
