"""Inference export: the model graph plus the preprocessing it needs, in one movable folder.

Layout of an export folder::

    inference.json / inference.pdiparams   the graph and weights (paddle.jit.save or
                                           paddle.static.save_inference_model)
    preprocess.json                        field reader configs, output names, label names
    vocab/<field>.txt                      the vocabularies the field readers use
    manifest.json                          every file's size and SHA-256 (``wenxin.data.export_bundle``)
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Any, Dict, List, Mapping, Optional, Sequence

from wenxin.data.dataset_reader import BasicDataSetReader
from wenxin.data.export_bundle import FORMAT_VERSION, KIND, MODEL_PREFIX, PREPROCESS_FILE, seal_export
from wenxin.data.field_reader import BaseFieldReader, TextFieldReader
from wenxin.data.label_fields import LabelFieldReader

__all__ = ["KIND", "MODEL_PREFIX", "PREPROCESS_FILE", "inference_fields", "label_names", "seal_export",
           "write_preprocessing"]


def inference_fields(readers: Mapping[str, BasicDataSetReader]) -> List[BaseFieldReader]:
    """The fields an exported model reads: the predict_reader's if configured, else the
    non-label fields of the dev reader (or, without one, of the train reader). A model trained
    on other inputs than it predicts from (pairwise matching) reads its evaluation inputs."""
    if "predict_reader" in readers:
        return list(readers["predict_reader"].fields)
    source = readers.get("dev_reader") or readers["train_reader"]
    return [f for f in source.fields if not f.is_label]


def label_names(readers: Dict[str, BasicDataSetReader]) -> List[str]:
    labels = [f for f in readers["train_reader"].fields if isinstance(f, LabelFieldReader)]
    return list(labels[0].vocab.tokens) if labels and labels[0].vocab else []


def shown_label_names(readers: Dict[str, BasicDataSetReader]) -> List[str]:
    """The names predictions are shown with, by label id (the field's ``label_names``), or []."""
    labels = [f for f in readers["train_reader"].fields if isinstance(f, LabelFieldReader)]
    return labels[0].display_names() if labels and labels[0].vocab else []


def max_lengths(fields: Sequence[BaseFieldReader], result_format: str) -> Dict[str, Any]:
    """Each text field's token limit (for ERNIE fields, word pieces with ``[CLS]`` and ``[SEP]``)
    and what happens to longer inputs: a tagger's are split into pieces at sentence ends and tagged
    piece by piece (``TaggingFormat.split_rows``); others are truncated (``truncation_type``)."""
    limits: Dict[str, Any] = {}
    for field in fields:
        if isinstance(field, TextFieldReader):
            longer = "split" if result_format in ("tagging", "spo") else "truncated"
            limits[field.name] = {"tokens": field.max_seq_len, "longer": longer}
    return limits


def write_preprocessing(folder: str, fields: Sequence[BaseFieldReader], output_names: Sequence[str],
                        labels: Sequence[str], config: Dict[str, Any], result_format: str = "classification",
                        rules: Optional[Dict[str, Optional[int]]] = None,
                        extra: Optional[Dict[str, Any]] = None) -> None:
    """Copy vocabs into ``folder/vocab`` and describe the fields with paths relative to ``folder``
    (``rules``: the model's ``onednn_min_rows`` and ``sorted_batch_rows``; ``extra``: more keys of
    ``preprocess.json``, a generation model's ``steps`` and ``generation``)."""
    field_configs = []
    for field in fields:
        cfg = dict(field.config)
        if field.save_vocab(os.path.join(folder, "vocab")):
            cfg["vocab_path"] = os.path.join("vocab", f"{field.name}.txt")
        model_file = (cfg.get("tokenizer") or {}).get("spm_model_file")
        if model_file:  # a SentencePiece model (ERNIE-M) travels with the export
            copied = os.path.join("vocab", f"{field.name}.spm.model")
            os.makedirs(os.path.join(folder, "vocab"), exist_ok=True)
            shutil.copyfile(model_file, os.path.join(folder, copied))
            cfg["tokenizer"] = {**cfg["tokenizer"], "spm_model_file": copied}
        cfg.update(field.export_files(folder))
        field_configs.append(cfg)
    meta = {"format": FORMAT_VERSION, "task": config.get("task"), "model_type": config["model"]["type"],
            "fields": field_configs, "outputs": list(output_names), "labels": list(labels),
            "result_format": result_format, "max_seq_len": max_lengths(fields, result_format),
            "onednn_min_rows": (rules or {}).get("onednn_min_rows"),
            "sorted_batch_rows": (rules or {}).get("sorted_batch_rows"),
            "tensors": [{"name": s.name, "shape": s.shape, "dtype": s.dtype}
                        for f in fields for s in f.tensor_specs()], **(extra or {})}
    with open(os.path.join(folder, PREPROCESS_FILE), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2, ensure_ascii=False)
