"""Data distillation, ERNIE-kit's flow in one command (``wenxin distill``): a teacher (e.g. a
fine-tuned ERNIE) labels unlabeled, typically augmented, texts, and a small student (BoW, CNN)
trains on them beside the labelled data, for fast serving.

The steps are those of ERNIE-kit's ``run_distill.sh``, from its own files:

1. train the teacher (``--teacher``, a task file; skipped with ``--teacher_model``);
2. predict the unlabeled file's teacher column with the teacher's export (the teacher run's
   result, ``--teacher_model``, or the ``inference_model_path`` of ``--teacher_infer``) and write
   ``student text<TAB>label`` lines (hard labels: the most probable class, as ERNIE-kit);
3. train the student (``--student``), whose training data includes that file.

ERNIE-kit's unlabeled files have two columns, the text as the student reads it (words split by
spaces) and the raw text the teacher reads; a file of one column serves both.
"""
from __future__ import annotations

import itertools
import logging
import os
from dataclasses import dataclass
from typing import Dict, Iterator, Optional, Sequence, Tuple

from wenxin.common.errors import ConfigError, DataError
from wenxin.common.files import open_atomically
from wenxin.data.lines import DEFAULT_MAX_LINE_BYTES, iter_lines, list_data_files

logger = logging.getLogger("wenxin")

BATCH = 64


@dataclass
class DistillResult:
    """What a distillation produced: the teacher's export, the labelled file, how many lines it
    labelled per label, and the student's final metrics and export."""

    teacher_model: str
    labels_file: str
    label_counts: Dict[str, int]
    student_metrics: Dict[str, Dict[str, float]]
    student_model: Optional[str]


def unlabeled_rows(path: str, student_column: int, teacher_column: int) -> Iterator[Tuple[str, str]]:
    """``(student text, teacher text)`` of each non-empty line of a file or of every file in a
    folder (sorted); a line without the columns is an error naming ``file:line``."""
    for name in list_data_files(path, "--unlabeled"):
        for lineno, line, problem in iter_lines(name, DEFAULT_MAX_LINE_BYTES):
            if problem is not None:
                raise DataError(f"{name}:{lineno}: {problem}")
            if not line.strip():
                continue
            columns = line.split("\t")
            try:
                yield columns[student_column], columns[teacher_column]
            except IndexError:
                raise DataError(f"{name}:{lineno}: {len(columns)} column(s), but the student reads column "
                                f"{student_column} and the teacher column {teacher_column} (0-based, tab-separated)"
                                ) from None


def label_with_teacher(model_dir: str, unlabeled: str, output: str, student_column: int = 0,
                       teacher_column: int = -1, task: str = "") -> Dict[str, int]:
    """Write ``student text<TAB>teacher's label`` for each unlabeled line into ``output``
    (atomically: an interrupted run leaves no half file); returns the count of each label."""
    from wenxin.inference.predictor import Predictor
    predictor = Predictor(model_dir, task=task)
    if predictor.meta["result_format"] != "classification":
        raise ConfigError(f"--teacher_model: {model_dir} is a {predictor.meta['result_format']} model; distillation "
                          f"labels texts with a classifier")
    counts: Dict[str, int] = {}
    rows = unlabeled_rows(unlabeled, student_column, teacher_column)
    with open_atomically(output) as f:
        while True:
            batch = list(itertools.islice(rows, BATCH))
            if not batch:
                break
            results = predictor.predict([[teacher] for _, teacher in batch], batch_size=BATCH)
            for (student, _), result in zip(batch, results):
                label = str(result["label"])
                counts[label] = counts.get(label, 0) + 1
                f.write(f"{student}\t{label}\n")
    return counts


def teacher_model_of(infer_file: str) -> str:
    """The exported model an infer file (ERNIE-kit's or wenxin's) predicts with."""
    from wenxin.config.loader import read_task_file
    from wenxin.translation import erniekit_infer
    raw = read_task_file(infer_file)
    if erniekit_infer.is_erniekit_infer(raw):
        raw, _ = erniekit_infer.translate_infer(raw)
    model_dir = raw.get("model_dir") if isinstance(raw, dict) else None
    if not isinstance(model_dir, str) or not model_dir:
        raise ConfigError(f"--teacher_infer: {infer_file} names no model (inference.inference_model_path)")
    return model_dir


def distill(teacher: str, student: str, unlabeled: str, labels_out: str, teacher_model: str = "",
            teacher_infer: str = "", student_column: int = 0, teacher_column: int = -1,
            teacher_overrides: Sequence[str] = (), student_overrides: Sequence[str] = ()) -> DistillResult:
    """Run the three steps (see the module docstring)."""
    from wenxin.runner import train_for_export
    if not teacher_model:
        if not teacher:
            raise ConfigError("--teacher: a teacher task file is needed unless --teacher_model names its export")
        logger.info("distill, step 1 of 3: training the teacher (%s)", teacher)
        _, exported = train_for_export(teacher, teacher_overrides)
        teacher_model = teacher_model_of(teacher_infer) if teacher_infer else (exported or "")
        if not teacher_model:
            raise ConfigError(f"--teacher: the run of {teacher} exported no model (set trainer.export.save_inference)")
    if not os.path.isdir(teacher_model):
        raise ConfigError(f"the teacher's model {teacher_model} does not exist (was the teacher trained to that step?)")
    from wenxin.data.export_bundle import inference_folder
    teacher_model = inference_folder(teacher_model)
    logger.info("distill, step 2 of 3: the teacher (%s) labels %s into %s", teacher_model, unlabeled, labels_out)
    counts = label_with_teacher(teacher_model, unlabeled, labels_out, student_column, teacher_column)
    logger.info("distill: %d lines labelled (%s)", sum(counts.values()),
                ", ".join(f"{label}: {n}" for label, n in sorted(counts.items())))
    logger.info("distill, step 3 of 3: training the student (%s)", student)
    metrics, student_model = train_for_export(student, student_overrides)
    return DistillResult(teacher_model, labels_out, counts, metrics, student_model)
