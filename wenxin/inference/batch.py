"""Batch prediction over raw text files: ``run_infer.py --param_path infer.json`` / ``wenxin infer``."""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Sequence

from wenxin.common.errors import DataError, Problems
from wenxin.common.files import open_atomically
from wenxin.common.progress import ProgressLog
from wenxin.common.paddle_support import require_gpu
from wenxin.config.infer_schema import INFER_SCHEMA
from wenxin.config.loader import apply_overrides, read_task_file
from wenxin.config.schema import validate
from wenxin.common.registry import RegisterSet
from wenxin.data.field_reader import BaseFieldReader
from wenxin.data.lines import FilePart
from wenxin.data.row_formats import RowFormat
from wenxin.inference.predictor import Predictor

logger = logging.getLogger("wenxin")



def read_rows(config: Dict[str, Any], fields: Sequence[BaseFieldReader]) -> List[List[str]]:
    """The rows to predict, read in the predict_reader's ``format`` (``wenxin.data.row_formats``)
    as the model's ``fields``. TSV keeps every line (empty ones too, so outputs stay aligned with
    input lines) and ignores extra columns (e.g. gold labels); a malformed row is an error."""
    format_cls = RegisterSet.data_formats.get(config["format"], None, "predict_reader.config.format")
    row_format: RowFormat = format_cls(config, fields, "predict_reader")
    rows: List[List[str]] = []
    for path in row_format.data_files():
        for lineno, columns, problem in row_format.predict_rows(FilePart(path, 0, None, 1)):
            if columns is None:
                raise DataError(f"{path}:{lineno}: {problem}")
            rows.append(columns)
    return rows


def _check_against_model(config: Dict[str, Any], predictor: Predictor) -> None:
    """The infer file's ``num_labels`` and ``field_names``, where given, must be the model's."""
    problems = Problems()
    labels = len(predictor.labels)
    if config["num_labels"] and labels and config["num_labels"] != labels:
        problems.add(f"num_labels: {config['num_labels']}, but the model in {config['model_dir']} has {labels} labels")
    names = [f.name for f in predictor.fields]
    if config["field_names"] and config["field_names"] != names:
        problems.add(f"predict_reader.fields: {config['field_names']}, but the model in {config['model_dir']} "
                     f"reads {names}")
    problems.raise_if_any()


def run_inference(param_path: str, overrides: Sequence[str] = ()) -> str:
    """Predict every line of the predict_reader's files; returns the output file path."""
    from wenxin.translation import erniekit_infer
    raw = read_task_file(param_path)
    place_key = "PADDLE_PLACE_TYPE"
    if erniekit_infer.is_erniekit_infer(raw):
        own, overrides = erniekit_infer.split_infer_overrides(raw, overrides)  # its own sections' keys: set first
        raw = apply_overrides(raw, own)
        place_key = "inference.PADDLE_PLACE_TYPE" if "PADDLE_PLACE_TYPE" in raw["inference"] else place_key
        raw, notes = erniekit_infer.translate_infer(raw)
        for note in notes:
            logger.info("ERNIE-kit infer file: %s", note)
    config = validate(apply_overrides(raw, overrides), INFER_SCHEMA)
    if config["PADDLE_PLACE_TYPE"] == "gpu":
        require_gpu(place_key)
    predictor = Predictor(config["model_dir"], use_gpu=config["PADDLE_PLACE_TYPE"] == "gpu",
                          num_threads=config["num_threads"], backend=config["backend"],
                          onednn=config["onednn"], task=config["task"])
    _check_against_model(config, predictor)
    rows = read_rows(config["predict_reader"]["config"], predictor.fields)
    # a long file (a generation model decodes each row) says how far it is, every 30 s
    results = predictor.predict(rows, batch_size=config["batch_size"],
                                progress=ProgressLog("predicting", len(rows), logger.info))
    erniekit_lines = config["output_format"] == "erniekit"
    out = config["output_file"]
    document = predictor.result_format.erniekit_document(results, rows) if erniekit_lines else None
    try:  # an interrupted run never leaves a half-written prediction file
        with open_atomically(out) as f:
            if document is not None:
                f.write(document)
            for r, row in zip(results, rows if document is None else ()):
                f.write((predictor.result_format.erniekit_line(r, row) if erniekit_lines
                         else predictor.result_format.line(r)) + "\n")
    except OSError as e:  # a full disk: no partial file, an earlier output stays
        raise DataError(f"output_file: cannot write {out} ({e.strerror or e}); nothing was written") from None
    return out
