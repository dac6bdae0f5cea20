"""The task files under the studio's root: which they are, which can run as they are, their launch
forms and the commands a form's values run, and their data at a glance."""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

from wenxin.common.errors import ConfigError, WenxinError
from wenxin.studio import forms, readiness
from wenxin.studio.run_commands import display_command, override_text
from wenxin.studio.store import RUNS_DIR, STATE_DIR
from wenxin.studio.studio_error import StudioError

SKIPPED_DIRS = {RUNS_DIR, STATE_DIR, "output", "node_modules", "site-packages", "__pycache__", "venv", ".venv",
                "data", "vocab", "checkpoints", "dict"}
MAX_LISTED_FILES = 500
MAX_TASK_FILE_BYTES = 1024 * 1024


class TaskFiles:
    """The task and sweep files under ``root`` (a real path), as the launch page sees them."""

    def __init__(self, root: str) -> None:
        self.root = root

    def list_files(self) -> Dict[str, List[str]]:
        """Task files and sweep files under the root (a JSON/YAML file with a ``task`` and a
        ``dataset_reader``, or an ERNIE-kit task file; a sweep file has ``parameters``)."""
        from wenxin.translation.erniekit import is_erniekit
        from wenxin.translation.erniekit_infer import is_erniekit_infer
        tasks: List[str] = []
        sweeps: List[str] = []
        for folder, dirs, files in os.walk(self.root):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS)
            if folder[len(self.root):].count(os.sep) >= 4:
                dirs[:] = []
            for name in sorted(files):
                if not name.endswith((".json", ".yaml", ".yml")) or len(tasks) + len(sweeps) >= MAX_LISTED_FILES:
                    continue
                path = os.path.join(folder, name)
                if not self.under_root(path):  # a link out of the root
                    continue
                data = self.parse(path)
                rel = os.path.relpath(path, self.root)
                if isinstance(data, dict) and (("task" in data and "dataset_reader" in data)
                                               or (is_erniekit(data) and not is_erniekit_infer(data))):
                    tasks.append(rel)
                elif isinstance(data, dict) and isinstance(data.get("parameters"), dict):
                    sweeps.append(rel)
        return {"tasks": tasks, "sweeps": sweeps}

    @staticmethod
    def parse(path: str) -> Any:
        """A file's JSON or YAML document; None for one too large, unreadable or not parsed."""
        try:
            if os.path.getsize(path) > MAX_TASK_FILE_BYTES:
                return None
            from wenxin.config.document import read_document
            return read_document(path)
        except (OSError, WenxinError, ValueError):
            return None

    def task_path(self, rel: Any) -> str:
        return self.file_under_root(rel, "task")

    def file_under_root(self, rel: Any, what: str) -> str:
        """The real path of the file ``rel`` names (relative to the root), which must lie inside
        it; a ``StudioError`` naming ``what`` otherwise."""
        if not isinstance(rel, str) or not rel:
            raise StudioError(400, f"{what}: name a file inside the root")
        try:
            path = forms.inside_root(self.root, rel, what)
        except ConfigError as e:
            raise StudioError(400, str(e)) from None
        if not os.path.isfile(path):
            raise StudioError(404, f"{what}: {rel!r} is not a file under the root")
        return path

    def form(self, rel: Any) -> Dict[str, Any]:
        """The launch form of a task file: its fields and the command it runs as it is."""
        path = self.task_path(rel)
        config, model_schema, scope = self.load(path, [])
        fields = forms.form_fields(config, model_schema, scope)
        return {"task": os.path.relpath(path, self.root), "fields": fields,
                "command": display_command("train", os.path.relpath(path, self.root), {}, "")}

    @staticmethod
    def load(path: str, overrides: List[str]) -> Tuple[Dict[str, Any], Dict[str, Any], Optional[str]]:
        from wenxin.config.loader import load_config
        from wenxin.config.task_check import resolve_task
        try:
            config = load_config(path, overrides)
            classes = resolve_task(config)
        except WenxinError as e:
            raise StudioError(400, str(e)) from None
        return config, classes.model_cls.config_schema, classes.scope

    def task_status(self) -> Dict[str, Dict[str, Any]]:
        """For each task file: whether it loads as it is (``ready``), its problems, the inputs
        missing, the preparation scripts that make them (``prepare`` now, ``then`` after it) or
        the task file whose run writes them (``after``), and a one-line description."""
        from wenxin.config.loader import load_config
        from wenxin.config.task_check import resolve_task
        scripts = list(readiness.preparation_scripts(self.root, SKIPPED_DIRS))
        tasks = self.list_files()["tasks"]
        documents = {rel: self.parse(os.path.join(self.root, rel)) for rel in tasks}
        outputs = {rel: readiness.output_folder(document) for rel, document in documents.items()}
        status: Dict[str, Dict[str, Any]] = {}
        for rel in tasks:
            path = os.path.join(self.root, rel)
            problems: List[str] = []
            try:
                resolve_task(load_config(path, []))
            except WenxinError as e:
                problems = list(e.problems)
            missing = readiness.missing_inputs(problems)
            makers, unmade = readiness.scripts_for(self.root, missing, scripts) if missing else ([], [])
            # the first script to run now; the others after it (each run shows the next); the
            # task file whose run writes what is missing; and what nothing here makes
            status[rel] = {"ready": not problems, "problems": problems[:8], "missing": missing,
                           "others": readiness.other_problems(problems)[:8],
                           "prepare": makers[0] if makers else None, "then": makers[1:], "unmade": unmade,
                           "after": readiness.trained_by([m for m in missing if m["path"] in unmade],
                                                         {t: o for t, o in outputs.items() if t != rel}),
                           "description": readiness.describe(documents[rel])}
        return status

    def preview(self, rel: Any) -> Dict[str, Any]:
        """The task's data at a glance, as ``wenxin inspect`` shows it: each reader's examples,
        first rows, label counts and token lengths."""
        from wenxin.inspection import inspect_readers
        path = self.task_path(rel)
        config, _, _ = self.load(path, [])
        try:
            return {"task": os.path.relpath(path, self.root), "readers": inspect_readers(config, samples=5)}
        except WenxinError as e:
            raise StudioError(400, str(e)) from None

    def check_values(self, body: Dict[str, Any]) -> Dict[str, Any]:
        """The command a form's values would run, and each value's problem by its key (the page
        shows it beside the field) while the values are being edited."""
        path = self.task_path(body.get("task"))
        values = body.get("values", {})
        if not isinstance(values, dict):
            raise StudioError(400, "values: expected an object of key path -> value")
        config, model_schema, scope = self.load(path, [])
        fields = forms.form_fields(config, model_schema, scope)
        errors: Dict[str, str] = {}
        overrides: Dict[str, Any] = {}
        for key, value in values.items():
            try:
                overrides.update(forms.overrides_from_form(fields, {key: value}, self.root))
            except ConfigError as e:
                errors[key] = str(e)
        if not errors:
            from wenxin.config.loader import load_config
            from wenxin.config.task_check import resolve_task
            try:
                resolve_task(load_config(path, [override_text(k, v) for k, v in overrides.items()]))
            except WenxinError as e:
                for problem in e.problems:
                    key = problem.split(":", 1)[0].strip()
                    errors.setdefault(key if key in values else "", problem)
        return {"command": display_command("train", os.path.relpath(path, self.root), overrides, ""),
                "errors": errors}

    def under_root(self, path: str) -> bool:
        real = os.path.realpath(path)
        return os.path.commonpath([self.root, real]) == self.root
