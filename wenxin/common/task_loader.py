"""Finding and importing a task package (a folder under ``tasks/`` or anywhere on disk)."""
from __future__ import annotations

import importlib.util
import os
import re
import sys
from typing import List

from wenxin.common.errors import ConfigError

TASK_MODULE_PREFIX = "wenxin_task_"


def _candidates(task: str, config_path: str) -> List[str]:
    config_dir = os.path.dirname(os.path.abspath(config_path)) if config_path else os.getcwd()
    found = [task, os.path.join(config_dir, task)] if os.sep in task or task.startswith(".") else []
    bases = [os.getcwd(), config_dir]
    parent = config_dir
    while os.path.dirname(parent) != parent:  # ancestors of the config file
        parent = os.path.dirname(parent)
        bases.append(parent)
    bases.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repo
    found += [os.path.join(base, "tasks", task) for base in bases]
    if os.environ.get("WENXIN_TASK_PATH"):
        found += [os.path.join(p, task) for p in os.environ["WENXIN_TASK_PATH"].split(os.pathsep)]
    return found


def import_task(task: str, config_path: str = "") -> str:
    """Import the task package named by the config's ``task`` key; returns its registry scope.

    ``task`` is a folder path, or a name looked up as ``tasks/<name>`` under the working
    directory, the config file's folder and its ancestors, the wenxin repository, and the
    folders in ``$WENXIN_TASK_PATH``.
    """
    tried = []
    for candidate in _candidates(task, config_path):
        folder = os.path.normpath(os.path.abspath(candidate))
        tried.append(folder)
        if os.path.isfile(os.path.join(folder, "__init__.py")):
            return _import_folder(folder)
    raise ConfigError(f"task: cannot find task package '{task}' (a folder with __init__.py); looked in: "
                      + ", ".join(dict.fromkeys(tried)))


def _import_folder(folder: str) -> str:
    name = TASK_MODULE_PREFIX + re.sub(r"\W", "_", os.path.basename(folder))
    module = sys.modules.get(name)
    if module is not None and os.path.dirname(os.path.abspath(module.__file__ or "")) == folder:
        return name
    spec = importlib.util.spec_from_file_location(name, os.path.join(folder, "__init__.py"),
                                                  submodule_search_locations=[folder])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception:
        del sys.modules[name]
        raise
    return name
