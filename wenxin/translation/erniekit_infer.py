"""ERNIE-kit infer files (``inference`` and ``dataset_reader.predict_reader`` sections), translated
onto wenxin's infer schema; predictions are written in ERNIE-kit's format for the task. The train
files' translation, whose reader helpers these share, is ``wenxin.translation.erniekit``."""
from __future__ import annotations

import json
from typing import Any, Dict, List, Sequence, Tuple

from wenxin.common.errors import Problems
from wenxin.common.parsed import dict_at, plain
from wenxin.translation.erniekit import GEN_READER, IE_READER, _translate_ie_reader


def is_erniekit_infer(raw: Dict[str, Any]) -> bool:
    """Whether a parsed infer file is ERNIE-kit's (an ``inference`` section, no ``model_dir``)."""
    return isinstance(raw, dict) and isinstance(raw.get("inference"), dict) and "model_dir" not in raw


def split_infer_overrides(raw: Dict[str, Any], overrides: Sequence[str]) -> Tuple[List[str], List[str]]:
    """An ERNIE-kit infer file's ``--set`` options: those that name the file's own sections
    (``inference.PADDLE_PLACE_TYPE=cpu``, ``dataset_reader...``), applied before it is translated,
    and the others (native keys: ``PADDLE_PLACE_TYPE=cpu``, ``batch_size=8``), applied after."""
    before: List[str] = []
    after: List[str] = []
    for text in overrides:
        first = text.split("=", 1)[0].strip().split(".", 1)[0]  # (the config floor's parse_override is above)
        (before if first in raw and first in ("inference", "dataset_reader") else after).append(text)
    return before, after


def translate_infer(raw: Dict[str, Any]) -> Tuple[Dict[str, Any], List[str]]:
    """The native infer config of an ERNIE-kit infer file, and the translations made. Predictions
    are written in ERNIE-kit's format for the task (``output_format: erniekit``)."""
    problems = Problems()
    notes: List[str] = []
    reader = ((raw.get("dataset_reader") or {}).get("predict_reader") or {})
    native: Dict[str, Any] = {"output_format": "erniekit",
                              "predict_reader": {"config": {"separator": "\t"}}}
    _translate_inference(raw["inference"], native, notes, problems)
    _translate_predict_reader(reader, native, notes, problems)
    notes.append("output_format: erniekit (each line as ERNIE-kit's inference wrote it: "
                 + ("the generated tokens, tab-separated)" if reader.get("type") == GEN_READER else
                    "one JSON list of every text's record)" if reader.get("type") == IE_READER else
                    "the input columns, then the result)"))
    problems.raise_if_any()
    return native, notes


def _translate_inference(inference: Dict[str, Any], native: Dict[str, Any], notes: List[str],
                         problems: Problems) -> None:
    """The ``inference`` section: the model folder, output file, threads and device."""
    for key, target in (("inference_model_path", "model_dir"), ("output_path", "output_file"),
                        ("thread_num", "num_threads"), ("PADDLE_PLACE_TYPE", "PADDLE_PLACE_TYPE"),
                        ("num_labels", "num_labels")):
        if key in inference:
            native[target] = inference[key]
            notes.append(f"inference.{key} -> {target}")
    native.setdefault("output_file", "./output/predict_result.txt")  # ERNIE-kit's default
    if inference.get("type", "CustomInference") != "CustomInference":
        problems.add(f"inference.type: {inference['type']!r} is not supported (CustomInference is)")
    if inference.get("PADDLE_IS_LOCAL", 1) in (0, False):
        problems.add("inference.PADDLE_IS_LOCAL: 0 (a distributed inference job) is not supported; wenxin infer "
                     "runs in one process")
    for key in ("PADDLE_IS_LOCAL", "is_ernie"):
        if key in inference:
            notes.append(f"inference.{key}: dropped (the exported model says what it is; inference is local)")
    if "label_map_config" in inference:
        _infer_label_map(str(inference["label_map_config"]), native, notes, problems)
    extra = set(inference) - {"type", "inference_model_path", "output_path", "thread_num", "PADDLE_PLACE_TYPE",
                              "num_labels", "extra_param", "PADDLE_IS_LOCAL", "is_ernie", "label_map_config"}
    for key in sorted(extra):
        problems.add(f"inference.{key}: not an ERNIE-kit inference key wenxin knows")


def _translate_predict_reader(reader: Dict[str, Any], native: Dict[str, Any], notes: List[str],
                              problems: Problems) -> None:
    """The ``predict_reader``: its data file, batch size, kind (extraction, generation) and fields."""
    reader_config = dict_at(reader, "config")
    if "data_path" in reader_config:
        native["predict_reader"]["config"]["data_path"] = reader_config["data_path"]
    if "batch_size" in reader_config:
        native["batch_size"] = reader_config["batch_size"]
    if reader_config.get("key_tag") not in (None, False, 0):
        problems.add("dataset_reader.predict_reader.config.key_tag: true is not supported")
    if reader.get("type") == IE_READER:
        ie_reader = plain(reader)
        _translate_ie_reader("predict_reader", ie_reader, notes, problems)
        native["predict_reader"]["config"]["format"] = "jsonl"
        notes.append("dataset_reader.predict_reader.config.extra_params: the exported model carries its own "
                     "text settings (vocab, max_seq_len, lower-casing); the JSON lines' 'text' is read")
    elif reader.get("type") == GEN_READER:
        native["predict_reader"]["config"]["has_header"] = True
        notes.append("dataset_reader.predict_reader: InfillingGenReader -> a TSV whose header line is skipped; its "
                     "columns are the exported model's sources, in order. config.extra_params: the exported model "
                     "carries its own settings (vocab, lengths, max_dec_len, beam search)")
    elif reader_config.get("extra_params"):
        problems.add("dataset_reader.predict_reader.config.extra_params: cannot be honoured")
    names = [f.get("name") for f in reader.get("fields") or [] if isinstance(f, dict)]
    if names:
        native["field_names"] = names
        notes.append(f"dataset_reader.predict_reader.fields {names}: checked against the exported model's "
                     f"(which carries its own preprocessing)")


def _infer_label_map(path: str, native: Dict[str, Any], notes: List[str], problems: Problems) -> None:
    """``inference.label_map_config`` (extraction): the exported model carries its labels; the
    map's size is checked against them (``num_labels``)."""
    try:
        with open(path, encoding="utf-8") as f:
            mapping = json.load(f)
    except (OSError, ValueError) as e:
        problems.add(f"inference.label_map_config: cannot read {path} ({e})")
        return
    if not isinstance(mapping, dict):
        problems.add(f"inference.label_map_config: {path} is not a JSON label map (label -> id)")
        return
    native.setdefault("num_labels", len(mapping))
    notes.append(f"inference.label_map_config: the labels are the exported model's; its {len(mapping)} labels are "
                 f"checked against them")
