"""The studio's state behind its pages: the root's task files (which can run, their forms and data),
launching runs and preparation jobs, watching them, and trying their models. ``app`` serves it."""
from __future__ import annotations

import json
import os
import shutil
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from wenxin.common.errors import ConfigError, WenxinError
from wenxin.studio import forms, readiness, run_files, trying
from wenxin.studio.i18n import notice
from wenxin.studio.machine import process_use
from wenxin.studio.run_commands import PREPARE, display_command, override_text, run_command, slug
from wenxin.studio.store import ACTIVE, DEFAULT_BACKOFF, RUNNING, RUNS_DIR, STATE_DIR, Store
from wenxin.studio.studio_error import StudioError
from wenxin.studio.supervisor import Supervisor
from wenxin.studio.task_files import TaskFiles
from wenxin.studio.viewers import VIEWER_KINDS, ViewerPool, installed, view_prefix

MAX_NAME = 80
MAX_TEXTS = 32
MAX_TEXT_CHARS = 4096


class Studio:
    """The studio's state behind the pages: the root, the store, the supervisor, and the models
    tried so far."""

    def __init__(self, root: str, supervisor: Supervisor, restart_budget: int = 3,
                 restart_backoff: Sequence[float] = DEFAULT_BACKOFF) -> None:
        self.root = os.path.realpath(root)
        self.store: Store = supervisor.store
        self.supervisor = supervisor
        self.restart_budget = restart_budget
        self.restart_backoff = list(restart_backoff)
        self.models = trying.ModelShelf()
        self.viewers = ViewerPool(os.path.join(self.root, STATE_DIR))
        self.tasks = TaskFiles(self.root)

    def close(self) -> None:
        """Stop the viewers and the supervisor (the runs' keepers go on)."""
        self.viewers.close()
        self.models.close()
        self.supervisor.close()

    # ---- launching ----
    def launch(self, body: Dict[str, Any], source: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """Queue a run of a task file (or a sweep, with ``sweep``) with the form's ``values``;
        returns its id and command. The values are checked against the form, and the task with
        them against the schema, before anything is queued."""
        task_rel = source["task_path"] if source else body.get("task")
        path = self.tasks.task_path(task_rel)
        values = body.get("values", {})
        if not isinstance(values, dict):
            raise StudioError(400, "values: expected an object of key path -> value")
        config, model_schema, scope = self.tasks.load(path, [])
        fields = forms.form_fields(config, model_schema, scope)
        try:
            overrides = forms.overrides_from_form(fields, values, self.root)
        except ConfigError as e:
            raise StudioError(400, str(e)) from None
        if source:  # the clone keeps the source's values of keys the form does not show
            shown = {field["key"] for field in fields}
            kept = {forms.canonical_key(k): v for k, v in source["overrides"].items()}  # an older run's: flat
            overrides = {**{k: v for k, v in kept.items() if k not in shown}, **overrides}
        settings = [override_text(key, value) for key, value in overrides.items()]
        self.tasks.load(path, settings)  # the task with these values must load, before it is queued
        sweep_rel = source["sweep_path"] if source else body.get("sweep") or ""
        sweep_path = self.tasks.file_under_root(sweep_rel, "sweep") if sweep_rel else ""
        name = body.get("name") or os.path.splitext(os.path.basename(path))[0]
        if not isinstance(name, str) or len(name) > MAX_NAME or not name.strip():
            raise StudioError(400, notice("notice.name_length", most=MAX_NAME))
        kind = "sweep" if sweep_path else "train"
        run_id = self.store.add_run(name=name.strip(), kind=kind, task_path=os.path.relpath(path, self.root),
                                    sweep_path=os.path.relpath(sweep_path, self.root) if sweep_path else "",
                                    overrides=overrides, command=[], folder="", restart_budget=self.restart_budget,
                                    restart_backoff=self.restart_backoff)
        folder = os.path.join(RUNS_DIR, f"{run_id:04d}-{slug(name)}")
        command = run_command(kind, path, overrides, os.path.join(self.root, folder), sweep_path)
        self.store.set_folder_and_command(run_id, folder, command)
        self.supervisor.wake()
        return {"id": run_id, "command": display_command(kind, os.path.relpath(path, self.root), overrides,
                                                          folder, os.path.relpath(sweep_path, self.root)
                                                          if sweep_path else "")}

    def prepare(self, body: Dict[str, Any]) -> Dict[str, Any]:
        """Run a preparation script (``prepare_*.py`` under the root) as a job the studio watches."""
        script = self.tasks.file_under_root(body.get("script"), "script")
        rel = os.path.relpath(script, self.root)
        if not readiness.SCRIPT_PATTERN.match(os.path.basename(script)):
            raise StudioError(400, f"script: {rel!r} is not a preparation script (prepare_*.py)")
        name = os.path.splitext(os.path.basename(script))[0]
        run_id = self.store.add_run(name=name, kind=PREPARE, task_path=rel, sweep_path="", overrides={},
                                    command=[], folder="", restart_budget=0, restart_backoff=[0])
        folder = os.path.join(RUNS_DIR, f"{run_id:04d}-{slug(name)}")
        self.store.set_folder_and_command(run_id, folder, [sys.executable, script])
        self.supervisor.wake()
        return {"id": run_id, "command": display_command(PREPARE, rel, {}, folder)}

    # ---- watching ----
    def run_or_404(self, run_id: int) -> Dict[str, Any]:
        run = self.store.run(run_id)
        if run is None:
            raise StudioError(404, notice("notice.no_run", id=run_id))
        return run

    def folder(self, run: Dict[str, Any]) -> str:
        return os.path.join(self.root, run["folder"])

    def summary(self, run: Dict[str, Any], index: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """What the runs list shows of a run. ``index``: its checkpoint index, when read already
        (the file is read once a request)."""
        folder = self.folder(run)
        index = index if index is not None else run_files.checkpoints(folder)
        records = run_files.latest_records(folder)
        latest = records.get("train", {})
        saved = run_files.saved_step(folder, index)
        logged = latest.get("step")
        # a record from before the current process started is stale: the run is reloading its data
        fresh = run["status"] == RUNNING and latest.get("time", 0.0) >= (run["attempt_started"] or 0.0)
        return {key: run[key] for key in ("id", "name", "kind", "task_path", "sweep_path", "overrides", "status",
                                          "cause", "cause_notice", "restarts", "restart_budget", "created",
                                          "started", "ended", "restart_at")} | {
            "best": run_files.best_metric(folder, index),
            # the furthest it got: a stopped run saved a checkpoint after its last logged step
            "step": max((s for s in (logged, saved) if s is not None), default=None),
            "saved_step": saved,
            "total_steps": int(latest["total_steps"]) if "total_steps" in latest else None,
            "eta_sec": latest.get("eta_sec") if fresh else None,
            # the outcome: the final dev and test metrics, CPU and wall time, speed
            "final": {tag: metric_values(records[tag]) for tag in ("dev", "test") if tag in records},
            "cpu_seconds": run["cpu_seconds"], "steps_per_sec": latest.get("mean_steps_per_sec"),
            "command": display_command(run["kind"], run["task_path"], run["overrides"], run["folder"],
                                       run["sweep_path"])}

    def details(self, run_id: int) -> Dict[str, Any]:
        run = self.run_or_404(run_id)
        folder = self.folder(run)
        index = run_files.checkpoints(folder)
        exports = trying.exports(folder, index)
        return {**self.summary(run, index), "events": self.store.events(run_id), "process": process_use(run),
                "checkpoints": index, "trackers": self.trackers(run_id, folder),
                "exported": bool(exports), "exports": exports,
                "export_kind": trying.export_kind(os.path.join(folder, exports[0]["path"])) if exports else None,
                "sweep": run_files.sweep_table(folder, self._sweep_output(run)) if run["kind"] == "sweep" else None,
                "config": (run_files.resolved_config(folder) or {})}

    def trackers(self, run_id: int, folder: str) -> List[Dict[str, str]]:
        """The run's trackers; a VisualDL or TensorBoard one whose records lie under the root gets
        a link to its viewer, when the viewer's package is installed."""
        found = run_files.trackers(folder, self.root)
        for tracker in found:
            kind = tracker.get("view", "")
            if kind and installed(kind) and self.tasks.under_root(tracker["logdir"]):
                tracker["url"] = view_prefix(run_id, kind) + "/"
        return found

    def viewer_logdir(self, run_id: int, kind: str) -> str:
        """The folder the run's ``kind`` viewer reads; a ``StudioError`` when the run has none."""
        run = self.run_or_404(run_id)
        if kind not in VIEWER_KINDS:
            raise StudioError(404, f"no viewer {kind!r}: one of {', '.join(sorted(VIEWER_KINDS))}")
        name = VIEWER_KINDS[kind].name
        for tracker in run_files.trackers(self.folder(run), self.root):
            if tracker.get("view") == kind:
                if not self.tasks.under_root(tracker["logdir"]):
                    raise StudioError(403, f"{name}: the run's records ({tracker['logdir']}) lie outside the root")
                if not installed(kind):
                    raise StudioError(404, f"{name} is not installed here (pip install {VIEWER_KINDS[kind].module})")
                if not os.path.isdir(tracker["logdir"]):
                    raise StudioError(404, f"{name}: the run has written no records yet ({tracker['logdir']})")
                return os.path.realpath(tracker["logdir"])
        raise StudioError(404, f"run {run_id} keeps no {name} records")

    def _sweep_output(self, run: Dict[str, Any]) -> str:
        """Where a sweep file with its own ``output`` writes (relative to the root), else ""."""
        spec = self.tasks.parse(os.path.join(self.root, run["sweep_path"]))
        output = spec.get("output") if isinstance(spec, dict) else None
        return os.path.join(self.root, output) if isinstance(output, str) and output else ""

    # ---- control ----
    def delete(self, run_id: int, confirm: Any) -> None:
        run = self.run_or_404(run_id)
        if confirm != run["name"]:
            raise StudioError(400, notice("notice.confirm_delete"))
        if run["status"] in ACTIVE:
            raise StudioError(409, notice("notice.stop_first", id=run_id, status=notice(f"status.{run['status']}")))
        folder = self.folder(run)
        try:
            real = forms.inside_root(os.path.join(self.root, RUNS_DIR), folder, "run folder")
        except ConfigError as e:
            raise StudioError(400, str(e)) from None
        self.viewers.stop_run(run_id)
        if real != os.path.realpath(os.path.join(self.root, RUNS_DIR)) and os.path.isdir(real):
            shutil.rmtree(real)
        self.store.delete(run_id)

    def chosen_export(self, run_id: int, checkpoint: Any) -> Tuple[str, Dict[str, Any]]:
        """The folder of the export to try: the named checkpoint's, else the first (the best)."""
        run = self.run_or_404(run_id)
        found = trying.exports(self.folder(run))
        if not found:
            raise StudioError(409, notice("notice.no_export", id=run_id))
        if checkpoint in (None, ""):
            chosen = found[0]
        else:
            named = [e for e in found if e["name"] == checkpoint]
            if not named:
                raise StudioError(400, f"checkpoint: {str(checkpoint)[:80]!r} has no export (these do: "
                                       f"{', '.join(e['name'] for e in found)})")
            chosen = named[0]
        return os.path.join(self.folder(run), chosen["path"]), chosen

    def predict(self, run_id: int, texts: Any, checkpoint: Any = None) -> Dict[str, Any]:
        if not isinstance(texts, list) or not texts or len(texts) > MAX_TEXTS \
                or not all(isinstance(t, str) and 0 < len(t) <= MAX_TEXT_CHARS for t in texts):
            raise StudioError(400, notice("notice.texts", most=MAX_TEXTS, chars=MAX_TEXT_CHARS))
        model_dir, chosen = self.chosen_export(run_id, checkpoint)
        try:  # a text's tab-separated parts are the model's columns (a matching pair: two)
            answered = self.models.predict(model_dir, [text.split("\t") for text in texts])
        except WenxinError as e:
            raise StudioError(400, str(e)) from None
        plain = json.loads(json.dumps(answered, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))
        return {"model_dir": os.path.relpath(model_dir, self.root), "checkpoint": chosen, **plain}


def metric_values(record: Dict[str, Any]) -> Dict[str, float]:
    """A dev or test record's metrics (its step, time and epoch left out)."""
    return {k: v for k, v in record.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
            and k not in ("step", "time", "epoch", "elapsed_sec")}


def open_studio(root: str, max_runs: int = 0, restart_budget: int = 3,
                restart_backoff: Sequence[float] = DEFAULT_BACKOFF) -> Studio:
    """A studio over ``root`` (created if missing) with its supervisor started."""
    os.makedirs(root, exist_ok=True)
    supervisor = Supervisor(os.path.realpath(root), max_runs)
    supervisor.start()
    return Studio(root, supervisor, restart_budget, restart_backoff)
