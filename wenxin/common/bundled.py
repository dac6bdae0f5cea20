"""Folders that ship inside the package, mapped there by setup.py (``wenxin.tasks``,
``wenxin.examples``), and sit at the repository's top level in a checkout (``tasks/``,
``examples/``)."""
from __future__ import annotations

import importlib.util
import os

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def bundled_folder(name: str) -> str:
    """Where ``name`` (``tasks`` or ``examples``) is: inside the installed package, else in the
    checkout wenxin runs from."""
    spec = importlib.util.find_spec(f"wenxin.{name}")
    if spec is not None and spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    return os.path.join(REPOSITORY, name)
