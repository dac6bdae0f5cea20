"""Whether a task file can run as it is: its inputs (data files, vocabularies, model folders) are
there, or which are missing and which preparation script under the root makes them.

A preparation script is a ``prepare_*.py`` file under the root that names the missing file's
folder (``examples/prepare_sentiment_data.py`` writes ``examples/data/sentiment``): the studio
offers to run it as a job it watches, as it runs a training run.
"""
from __future__ import annotations

import os
import re
from typing import Any, Dict, Iterator, List, Optional, Tuple

# a problem of the loader that names a missing input: "KEY: data file not found: PATH", maybe with
# more after the path (" (also named by ...); download ...")
_MISSING = re.compile(r"^(?P<key>\S+): (?:data file|vocab file|model folder|file|folder) not found: "
                      r"(?P<path>.+?)(?: \(.*|; .*)?$")
MAX_SCRIPT_BYTES = 1 << 20
SCRIPT_PATTERN = re.compile(r"^prepare_[\w-]*\.py$")


def missing_inputs(problems: List[str]) -> List[Dict[str, str]]:
    """The inputs the loader's problems say are missing: ``{"key", "path"}`` each, each path once
    (the first key naming it: train and dev readers often name one model folder)."""
    found: Dict[str, Dict[str, str]] = {}
    for problem in problems:
        match = _MISSING.match(problem.strip())
        if match:
            found.setdefault(match["path"].strip(), {"key": match["key"], "path": match["path"].strip()})
    return list(found.values())


def other_problems(problems: List[str]) -> List[str]:
    """The loader's problems that are not a missing input (a GPU asked of a CPU build, a bad value)."""
    return [problem for problem in problems if not _MISSING.match(problem.strip())]


def preparation_scripts(root: str, skipped: Any = ()) -> Iterator[str]:
    """The ``prepare_*.py`` files under ``root`` (relative paths), folders in ``skipped`` left out."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in skipped)
        if folder[len(root):].count(os.sep) >= 4:
            dirs[:] = []
        for name in sorted(files):
            if SCRIPT_PATTERN.match(name):
                yield os.path.relpath(os.path.join(folder, name), root)


def _folder_of(path: str) -> str:
    """``./examples/data/sentiment/train.tsv`` -> ``examples/data/sentiment`` (a folder path stays)."""
    clean = os.path.normpath(path.strip())
    folder = clean if path.rstrip().endswith(("/", os.sep)) or not os.path.splitext(clean)[1] else \
        os.path.dirname(clean)
    return folder.replace(os.sep, "/")


def scripts_for(root: str, missing: List[Dict[str, str]], scripts: List[str]) -> Tuple[List[str], List[str]]:
    """The preparation scripts that make the missing inputs, in the order to run them, and the
    inputs no script makes (a model folder to download). A script makes an input when it names
    the input's folder (or, where none does, the folder that holds it), one named after the
    folder first; one that names another script (``prepare_sentiment_data.py first``) runs after
    it, and brings it along while the data that one writes are missing."""
    folders = {_folder_of(item["path"]): item["path"] for item in missing}
    texts = {}
    for script in scripts:
        try:
            with open(os.path.join(root, script), encoding="utf-8", errors="replace") as f:
                texts[script] = f.read(MAX_SCRIPT_BYTES)
        except OSError:
            continue
    chosen: List[str] = []
    unmade: List[str] = []
    for folder in sorted(folders):
        maker = None if folder in ("", ".") else next(
            (s for f in (folder, os.path.dirname(folder)) if f for s in _namers(texts, f)), None)
        if maker is None:
            unmade.append(folders[folder])
        elif maker not in chosen:
            chosen.append(maker)
    for script in list(chosen):  # a script that says another runs first: that one too, unless its data are there
        for other in texts:
            if other not in chosen and os.path.basename(other) in texts[script] and not _made(root, texts[other]):
                chosen.append(other)
    ordered = sorted(chosen, key=lambda s: sum(os.path.basename(other) in texts[s] for other in chosen if other != s))
    return ordered, unmade


def _namers(texts: Dict[str, str], folder: str) -> List[str]:
    """The scripts that name ``folder``, the one named after it first (``prepare_sentiment_data.py``
    writes ``examples/data/sentiment``; another that names it may only read it)."""
    namers = [script for script in texts if _names(texts[script], folder)]
    return sorted(namers, key=lambda script: os.path.basename(folder) not in os.path.basename(script))


_DATA_FOLDER = re.compile(r"examples/data/[\w-]+")


def _made(root: str, text: str) -> bool:
    """Whether the example data folders a script names all exist under ``root`` (False where it names none)."""
    folders = set(_DATA_FOLDER.findall(text))
    return bool(folders) and all(os.path.isdir(os.path.join(root, folder)) for folder in folders)


def trained_by(missing: List[Dict[str, str]], outputs: Dict[str, str]) -> Optional[str]:
    """The task file whose run writes a missing input (under its ``trainer.output_path``: the
    pretraining example's model and vocabulary, which the ERNIE classifier continues from), given
    each task file's output folder, or None."""
    for item in missing:
        path = os.path.normpath(item["path"].strip())
        for task, output in outputs.items():
            if output and (path == output or path.startswith(output + os.sep)):
                return task
    return None


def output_folder(document: Any) -> str:
    """A task document's ``trainer.output_path``, normalized ('' when it names none)."""
    trainer = document.get("trainer") if isinstance(document, dict) else None
    output = trainer.get("output_path") if isinstance(trainer, dict) else None
    return os.path.normpath(output) if isinstance(output, str) and output.strip() else ""


def _names(text: str, folder: str) -> bool:
    """Whether a script's text names ``folder`` itself (``examples/data/x`` or ``examples/data/x/``),
    not as the start of a longer path."""
    return re.search(re.escape(folder) + r"/?(?![\w.-])", text) is not None


def describe(document: Any) -> str:
    """A task file's line in the list: its ``studio.description``, else its task and model."""
    if not isinstance(document, dict):
        return ""
    studio = document.get("studio")
    if isinstance(studio, dict) and isinstance(studio.get("description"), str):
        return studio["description"][:200]
    model = document.get("model")
    model_type = model.get("type") if isinstance(model, dict) else None
    task = document.get("task")
    return " · ".join(str(part) for part in (task, model_type) if isinstance(part, str) and part)
