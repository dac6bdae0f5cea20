"""Experiment trackers as hooks: TensorBoard (through tensorboardX), MLflow and Weights & Biases.

Each tracker receives every record the run logs (train, dev, test, norms: the same records as
``metrics.jsonl``), the resolved config when training starts, and the final metrics when it
ends. Only rank 0 writes. The libraries are optional: a tracker whose library is missing is one
error naming the extra to install.
"""
from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import pathlib
from typing import Any, Dict, List, Optional

from wenxin.common.errors import ConfigError
from wenxin.common.registry import RegisterSet
from wenxin.config.schema import Key, path_key
from wenxin.controller.hooks.base import HookBase, Priority
from wenxin.controller.hooks.writers import MetricWriter, numeric_scalars

logger = logging.getLogger("wenxin")
WANDB_URL_FILE = "wenxin-run-url.txt"  # in <dir>/wandb/: an online run's address, for the studio's link


def _require(module: str, extra: str, hook: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(f"{hook} needs the {module} package: pip install \"wenxin[{extra}]\"") from None


def flat_config(config: Dict[str, Any], prefix: str = "") -> Dict[str, str]:
    """``{"model": {"type": "Bow"}}`` -> ``{"model.type": "Bow"}``; lists become JSON text."""
    flat: Dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flat_config(value, f"{name}."))
        else:
            flat[name] = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return flat


class _Forward(MetricWriter):
    """The metric logger's records, passed on to a tracker hook."""

    def __init__(self, hook: "TrackerHook") -> None:
        self.hook = hook

    def write(self, tag: str, step: int, scalars: Dict[str, float]) -> None:
        values = numeric_scalars(scalars)
        if values:
            self.hook.log_scalars(tag, step, values)

    def flush(self) -> None:
        self.hook.flush()


class TrackerHook(HookBase):
    """Opens the tracker when training starts, forwards every metric record to it, logs the
    resolved config, and at the end the final metrics (``final/<reader>/<metric>``)."""

    priority = Priority.LOWEST  # after_train: after the final evaluation and the best model's
    run_id: Optional[str] = None  # a tracker's run, checkpointed so that a resume continues it

    def state_dict(self) -> Optional[Dict[str, Any]]:
        return {"run_id": self.run_id} if self.run_id else None

    def set_state_dict(self, state: Dict[str, Any]) -> None:
        self.run_id = state.get("run_id") or None

    def before_train(self) -> None:
        if not self.trainer.is_writer:
            return
        self.open()
        self.log_config(dict(self.trainer.config))
        self._forward = _Forward(self)
        self.trainer.metric_logger.writers.append(self._forward)

    def after_train(self) -> None:
        if not self.trainer.is_writer:
            return
        final = {f"{reader}/{name}": value for reader, metrics in self.trainer.state.metrics.items()
                 for name, value in numeric_scalars(metrics).items()}
        self.log_final(final, self.trainer.state.global_step)
        self.trainer.metric_logger.writers.remove(self._forward)
        self.close()

    # implemented by each tracker
    def open(self) -> None: ...
    def log_config(self, config: Dict[str, Any]) -> None: ...
    def log_scalars(self, tag: str, step: int, values: Dict[str, float]) -> None: ...
    def log_final(self, metrics: Dict[str, float], step: int) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


@RegisterSet.hooks.register("TensorBoardHook")
class TensorBoardHook(TrackerHook):
    """TensorBoard event files (``tensorboard --logdir <logdir>``), written with tensorboardX:
    scalars as ``<tag>/<name>``, the config as text ``config``, the final metrics as
    ``final/<reader>/<metric>`` at the last step."""

    config_schema = {"logdir": path_key("", doc="default: <trainer.output_path>/tensorboard")}

    def __init__(self, logdir: str = "") -> None:
        self.tensorboardX = _require("tensorboardX", "tensorboard", "TensorBoardHook")
        self.logdir = logdir
        self.writer: Any = None

    def open(self) -> None:
        self.logdir = self.logdir or os.path.join(self.trainer.output_path, "tensorboard")
        self.writer = self.tensorboardX.SummaryWriter(self.logdir)

    def log_config(self, config: Dict[str, Any]) -> None:
        text = json.dumps(config, indent=2, ensure_ascii=False)
        self.writer.add_text("config", f"```\n{text}\n```", self.trainer.state.global_step)

    def log_scalars(self, tag: str, step: int, values: Dict[str, float]) -> None:
        for name, value in values.items():
            self.writer.add_scalar(f"{tag}/{name}", value, step)

    def log_final(self, metrics: Dict[str, float], step: int) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(f"final/{name}", value, step)

    def flush(self) -> None:
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        self.writer.close()
        self.writer = None


@RegisterSet.hooks.register("MLflowHook")
class MLflowHook(TrackerHook):
    """An MLflow run: the flattened config as parameters (and ``config.json`` as an artifact),
    every record as metrics ``<tag>/<name>`` by step, the final metrics as ``final/<reader>/<metric>``.
    The run id is checkpointed, so a resumed training continues the same MLflow run. MLflow keeps
    a parameter's first value: a resume with changed settings warns, and ``config.json`` holds
    the latest start's config."""

    config_schema = {
        "tracking_uri": Key(str, "", doc="an MLflow store, e.g. sqlite:///path/mlflow.db or http://host:5000 "
                                         "(default: sqlite:///<trainer.output_path>/mlflow.db, artifacts in "
                                         "<trainer.output_path>/mlflow-artifacts)"),
        "experiment": Key(str, "wenxin", doc="the MLflow experiment"),
        "run_name": Key(str, "", doc="default: the output folder's name"),
    }

    def __init__(self, tracking_uri: str = "", experiment: str = "wenxin", run_name: str = "") -> None:
        self.mlflow = _require("mlflow", "mlflow", "MLflowHook")
        self.tracking_uri, self.experiment, self.run_name = tracking_uri, experiment, run_name
        self.client: Any = None

    def open(self) -> None:
        uri = self.tracking_uri or "sqlite:///" + os.path.abspath(os.path.join(self.trainer.output_path, "mlflow.db"))
        stray = os.path.abspath("mlruns")  # MLflow's default artifact root, in the working folder
        stray_before = os.path.exists(stray)
        try:
            self.client = self.mlflow.tracking.MlflowClient(uri)
            self.client.search_experiments(max_results=1)  # opens (and creates) the store
        except Exception as e:  # noqa: BLE001 (MLflow raises many types for a store it cannot use)
            reason = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
            raise ConfigError(f"MLflowHook params.tracking_uri: cannot use {uri} ({reason})") from None
        finally:  # MLflow before 3.2 creates it, empty, on opening a SQL store; wenxin's artifacts go elsewhere
            if not stray_before:
                with contextlib.suppress(OSError):
                    os.rmdir(stray)  # only if empty
        if self.run_id is not None:
            try:
                self.client.update_run(self.run_id, status="RUNNING")
                return
            except Exception:  # noqa: BLE001 (another store, or the run was deleted): a new run
                logger.warning("MLflowHook: run %s not found in %s; starting a new run", self.run_id, uri)
        experiment = self.client.get_experiment_by_name(self.experiment)
        # with the default store, artifacts go beside it (MLflow's own default is ./mlruns in the
        # working folder); a store the user names keeps its own artifact root
        artifacts = None if self.tracking_uri else \
            pathlib.Path(os.path.abspath(os.path.join(self.trainer.output_path, "mlflow-artifacts"))).as_uri()
        experiment_id = experiment.experiment_id if experiment else \
            self.client.create_experiment(self.experiment, artifact_location=artifacts)
        name = self.run_name or os.path.basename(os.path.abspath(self.trainer.output_path))
        self.run_id = self.client.create_run(experiment_id, run_name=name).info.run_id
        logger.info("MLflow run %s (%s) in %s", self.run_id, name, uri)

    def log_config(self, config: Dict[str, Any]) -> None:
        from mlflow.entities import Param
        values = {k: str(v)[:6000] for k, v in flat_config(config).items()}
        logged = self.client.get_run(self.run_id).data.params  # a resumed run logged them before
        changed = sorted(k for k, v in values.items() if k in logged and logged[k] != v)
        if changed:  # MLflow keeps a parameter's first value; config.json below is this start's
            logger.warning("MLflowHook: run %s keeps the first values of %s; config.json has this start's",
                           self.run_id, ", ".join(changed))
        params: List[Any] = [Param(k, v) for k, v in values.items() if k not in logged]
        for start in range(0, len(params), 100):  # MLflow takes at most 100 parameters a batch
            self.client.log_batch(self.run_id, params=params[start:start + 100])
        self.client.log_dict(self.run_id, config, "config.json")

    def log_scalars(self, tag: str, step: int, values: Dict[str, float]) -> None:
        from mlflow.entities import Metric
        import time
        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(f"{tag}/{name}", value, now, step)
                                                    for name, value in values.items()])

    def log_final(self, metrics: Dict[str, float], step: int) -> None:
        if metrics:
            self.log_scalars("final", step, metrics)

    def close(self) -> None:
        status = "KILLED" if self.trainer.state.interrupted else "FINISHED"
        self.client.set_terminated(self.run_id, status=status)


@RegisterSet.hooks.register("WandbHook")
class WandbHook(TrackerHook):
    """A Weights & Biases run, offline by default: the run is written under ``<dir>/wandb/`` and
    ``wandb sync <dir>/wandb/offline-run-*`` uploads it later. The resolved config is the run's
    config, every record is logged as ``<tag>/<name>`` at its step, and the final metrics go to
    the run's summary as ``final/<reader>/<metric>``. The run id is checkpointed: a resumed
    training writes a new offline folder with the same id, and ``wandb sync`` joins them into one
    run, in order of their start."""

    config_schema = {
        "project": Key(str, "wenxin", doc="the W&B project"),
        "mode": Key(str, "offline", choices=["offline", "online"],
                    doc="offline: files only; online: also uploads (needs `wandb login`)"),
        "dir": path_key("", doc="default: <trainer.output_path> (the run goes to <dir>/wandb/)"),
        "run_name": Key(str, "", doc="default: the output folder's name"),
    }

    def __init__(self, project: str = "wenxin", mode: str = "offline", dir: str = "",  # noqa: A002 (wandb's name)
                 run_name: str = "") -> None:
        self.wandb = _require("wandb", "wandb", "WandbHook")
        self.project, self.mode, self.dir, self.run_name = project, mode, dir, run_name
        self.run: Any = None

    def open(self) -> None:
        folder = os.path.abspath(self.dir or self.trainer.output_path)
        os.makedirs(folder, exist_ok=True)
        resumed = self.run_id is not None
        name = self.run_name or os.path.basename(os.path.abspath(self.trainer.output_path))
        try:  # console off: wandb would otherwise wrap this process's stdout and stderr
            self.run = self.wandb.init(project=self.project, dir=folder, mode=self.mode, id=self.run_id, name=name,
                                       resume="allow" if resumed else None,
                                       settings=self.wandb.Settings(console="off", silent=True))
        except Exception as e:  # noqa: BLE001 (wandb raises its own errors for a login or network problem)
            reason = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
            raise ConfigError(f"WandbHook: cannot start a {self.mode} run in {folder} ({reason})") from None
        self.run_id = self.run.id  # wandb's new id, or the resumed one
        logger.info("W&B %s run %s (%s) in %s", self.mode, self.run_id, name, self.run.dir)
        url = getattr(self.run, "url", None) if self.mode == "online" else None
        if url:
            os.makedirs(os.path.join(folder, "wandb"), exist_ok=True)
            with open(os.path.join(folder, "wandb", WANDB_URL_FILE), "w", encoding="utf-8") as f:
                f.write(str(url) + "\n")

    def log_config(self, config: Dict[str, Any]) -> None:
        self.run.config.update(config, allow_val_change=True)  # a resume may change settings

    def log_scalars(self, tag: str, step: int, values: Dict[str, float]) -> None:
        self.run.log({f"{tag}/{name}": value for name, value in values.items()}, step=step)

    def log_final(self, metrics: Dict[str, float], step: int) -> None:
        self.run.summary.update({f"final/{name}": value for name, value in metrics.items()})

    def close(self) -> None:
        self.run.finish(exit_code=1 if self.trainer.state.interrupted else 0)
        self.run = None
