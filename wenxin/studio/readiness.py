"""Whether a task file can run as it is: its inputs (data files, vocabularies, model folders) are
there, or which are missing and which preparation script under the root makes them.

A preparation script is a ``prepare_*.py`` file under the root that names the missing file's
folder (``examples/prepare_sentiment_data.py`` writes ``examples/data/sentiment``): the studio
offers to run it as a job it watches, as it runs a training run.
"""
from __future__ import annotations

import os
import re
from typing import Any, Dict, Iterator, List, Optional

# a problem of the loader that names a missing input: "KEY: data file not found: PATH"
_MISSING = re.compile(r"^(?P<key>\S+): (?:data file|vocab file|model folder|file|folder) not found: (?P<path>.+)$")
MAX_SCRIPT_BYTES = 1 << 20
SCRIPT_PATTERN = re.compile(r"^prepare_[\w-]*\.py$")


def missing_inputs(problems: List[str]) -> List[Dict[str, str]]:
    """The inputs the loader's problems say are missing: ``{"key", "path"}`` each."""
    found = []
    for problem in problems:
        match = _MISSING.match(problem.strip())
        if match:
            found.append({"key": match["key"], "path": match["path"].strip()})
    return found


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


def script_for(root: str, missing: List[Dict[str, str]], scripts: List[str]) -> Optional[str]:
    """The preparation script that names the folder of every missing input (the first found), or
    None."""
    folders = {_folder_of(item["path"]) for item in missing}
    if not folders or any(folder in ("", ".") for folder in folders):
        return None
    for script in scripts:
        try:
            with open(os.path.join(root, script), encoding="utf-8", errors="replace") as f:
                text = f.read(MAX_SCRIPT_BYTES)
        except OSError:
            continue
        if all(folder in text for folder in folders):
            return script
    return None


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
