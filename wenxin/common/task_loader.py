"""Finding and importing a task package: a folder anywhere on disk, one registered by an
installed distribution, or one of wenxin's built-in tasks."""
from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import re
import sys
from importlib import metadata
from typing import Any, Iterable, List, Optional, Tuple

from wenxin.common.bundled import bundled_folder
from wenxin.common.errors import ConfigError
from wenxin.common.registry import scope_of

TASK_MODULE_PREFIX = "wenxin_task_"
ENTRY_POINT_GROUP = "wenxin.tasks"  # name = the task name, value = the task package to import


def builtin_tasks_dir() -> str:
    """The folder of wenxin's built-in tasks: ``wenxin/tasks`` when installed, the repository's
    ``tasks/`` when wenxin runs from its checkout."""
    return bundled_folder("tasks")


def builtin_task_names() -> List[str]:
    folder = builtin_tasks_dir()
    return sorted(n for n in os.listdir(folder) if os.path.isfile(os.path.join(folder, n, "__init__.py")))


def _user_folders(task: str, config_path: str) -> List[str]:
    """Where a user's task folder may be, in order: the path itself, ``tasks/<name>`` under the
    working folder, the config file's folder and its ancestors, then ``$WENXIN_TASK_PATH``."""
    config_dir = os.path.dirname(os.path.abspath(config_path)) if config_path else os.getcwd()
    found = [task, os.path.join(config_dir, task)] if os.sep in task or task.startswith(".") else []
    bases = [os.getcwd(), config_dir]
    parent = config_dir
    while os.path.dirname(parent) != parent:  # ancestors of the config file
        parent = os.path.dirname(parent)
        bases.append(parent)
    found += [os.path.join(base, "tasks", task) for base in bases]
    for entry in filter(None, os.environ.get("WENXIN_TASK_PATH", "").split(os.pathsep)):
        found.append(os.path.join(entry, task))
    return found


def _entry_point(task: str) -> Optional[metadata.EntryPoint]:
    """The ``wenxin.tasks`` entry point named ``task`` of an installed distribution, if any."""
    group: Iterable[metadata.EntryPoint]
    if sys.version_info >= (3, 10):
        group = metadata.entry_points(group=ENTRY_POINT_GROUP)
    else:  # Python 3.9: a dict of lists
        group = metadata.entry_points().get(ENTRY_POINT_GROUP, ())
    return next((ep for ep in group if ep.name == task), None)


def locate_task(task: str, config_path: str = "") -> Tuple[str, Any]:
    """Where the task package named by the config's ``task`` key is, without importing it:
    ``("folder", path)`` or ``("entry_point", EntryPoint)``.

    ``task`` is a folder path, or a name looked up, in order, as ``tasks/<name>`` under the
    working folder, the config file's folder and its ancestors; in the folders of
    ``$WENXIN_TASK_PATH``; as a ``wenxin.tasks`` entry point of an installed package; and among
    wenxin's built-in tasks. The first found wins, so a user's folder can replace a built-in task.
    An unknown name is one ``ConfigError`` with the nearest built-in name."""
    tried = []
    for candidate in _user_folders(task, config_path):
        folder = os.path.normpath(os.path.abspath(candidate))
        tried.append(folder)
        if os.path.isfile(os.path.join(folder, "__init__.py")):
            return "folder", folder
    if os.sep not in task and not task.startswith("."):
        point = _entry_point(task)
        if point is not None:
            return "entry_point", point
        builtin = os.path.join(builtin_tasks_dir(), task)
        if os.path.isfile(os.path.join(builtin, "__init__.py")):
            return "folder", os.path.normpath(builtin)
        tried.append(f"{ENTRY_POINT_GROUP} entry points")
    names = builtin_task_names()
    close = difflib.get_close_matches(os.path.basename(task.rstrip(os.sep)), names, n=1, cutoff=0.6)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise ConfigError(f"task: cannot find task package '{task}'{hint} (a folder with __init__.py); built-in tasks: "
                      f"{', '.join(names)}; looked in: " + ", ".join(dict.fromkeys(tried)))


def import_task(task: str, config_path: str = "") -> str:
    """Import the task package named by the config's ``task`` key (found by ``locate_task``);
    returns its registry scope."""
    kind, where = locate_task(task, config_path)
    if kind == "folder":
        return _import_folder(where)
    try:
        module = importlib.import_module(where.value.split(":")[0])
    except ImportError as e:
        raise ConfigError(f"task: the '{task}' task registered by an installed package "
                          f"({ENTRY_POINT_GROUP} entry point '{where.value}') cannot be imported: {e}") from None
    return scope_of(module.__name__)


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
