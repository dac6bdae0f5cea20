"""The command lines of studio runs: the argument list a run starts with (no shell ever reads a
user's value) and the line a user types for the same run."""
from __future__ import annotations

import json
import os
import re
import unicodedata
import shlex
import sys
from typing import Any, Dict, List

PREPARE = "prepare"  # a run's kind: a preparation script, run as a job (train and sweep are the others)


def override_text(key: str, value: Any) -> str:
    """``key=value`` as ``--set`` reads it back: JSON, except a string that JSON would not read
    (``adam``), which goes as it is."""
    if isinstance(value, str):
        try:
            json.loads(value)
        except ValueError:
            return f"{key}={value}"
    return f"{key}={json.dumps(value, ensure_ascii=False)}"


def slug(name: str) -> str:
    """A run's name as part of its folder's: letters and digits of any script (a Chinese name stays
    Chinese), ``_``, ``.`` and ``-``; anything else becomes ``-``."""
    return re.sub(r"[^\w.-]+", "-", unicodedata.normalize("NFC", name)).strip("-.")[:40] or "run"


def command_words(kind: str, task: str, overrides: Dict[str, Any], folder: str, sweep: str = "") -> List[str]:
    """A run's command after ``wenxin``: the task, the sweep, the overrides, and (with a run
    folder) where it writes and that it continues from its checkpoints."""
    words = [kind, "--param_path", task] + (["--sweep", sweep] if sweep else [])
    for key, value in overrides.items():
        words += ["--set", override_text(key, value)]
    if folder:
        words += ["--set", f"trainer.output_path={os.path.join(folder, 'output')}"]
        if kind == "train":
            words += ["--set", "trainer.checkpoints.resume=auto"]
    return words


def run_command(kind: str, task: str, overrides: Dict[str, Any], folder: str, sweep: str = "") -> List[str]:
    """The argument list of a run (never a shell line)."""
    return [sys.executable, "-m", "wenxin.cli", *command_words(kind, task, overrides, folder, sweep)]


def display_command(kind: str, task: str, overrides: Dict[str, Any], folder: str, sweep: str = "") -> str:
    """The command line a user types for the same run (run from the root)."""
    if kind == PREPARE:
        return f"python {shlex.quote(task)}"
    return " ".join(shlex.quote(word) for word in ["wenxin", *command_words(kind, task, overrides, folder, sweep)])
