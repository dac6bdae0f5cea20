"""Checkpoints of a run: what is saved and restored, resuming, warm starts from pretrained
weights (``Checkpointer``, held by the trainer), and the checkpoint a run continues. The files
themselves (layout, manifest, verification) are ``wenxin.controller.checkpoint``'s."""
from __future__ import annotations

import json
import logging
import os
import time
import warnings
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Protocol

import numpy as np

from wenxin.common.errors import CheckpointError, ConfigError
from wenxin.common.parsed import dict_at
from wenxin.controller import checkpoint as ckpt
from wenxin.controller import parameters
from wenxin.controller.checkpoint_folders import CheckpointManager
from wenxin.controller.engine import ExecutionEngine
from wenxin.config.task_config import source_of, translations_of
from wenxin.controller.env import paddle_rank, paddle_world_size, rng_state, set_rng_state
from wenxin.controller.run_context import RunContext
from wenxin.controller.state import TrainState
from wenxin.data.vocab import Vocab

if TYPE_CHECKING:
    from wenxin.data.dataset_reader import BasicDataSetReader

logger = logging.getLogger("wenxin")


def prepare_output_path(cfg: Dict[str, Any], is_writer: bool = True) -> None:
    """Create ``trainer.output_path``; never train over an earlier run's checkpoints unless
    asked to resume it, and fail clearly when the folder cannot be used. The writing process of
    a run that continues first finishes a change to the checkpoint folders a killed process left,
    so that every process then finds the same checkpoint."""
    path = cfg["output_path"]
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"trainer.output_path: {path} exists and is not a folder")
    if is_writer:
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"trainer.output_path: cannot create {path}: {e.strerror}") from None
        if not os.access(path, os.W_OK):
            raise ConfigError(f"trainer.output_path: folder is not writable: {path}")
    manager, kept = CheckpointManager.for_trainer(cfg), cfg["checkpoints"]
    if manager.has_checkpoints() and kept["resume"] == "none" and not kept["load_checkpoint"]:
        raise ConfigError(f"trainer.output_path: {path} already holds checkpoints of an earlier run; "
                          f"to continue it set trainer.checkpoints.resume=auto (--set "
                          f"trainer.checkpoints.resume=auto); "
                          f"to start afresh choose another output_path or move {path} away")
    if is_writer and (kept["resume"] != "none" or kept["load_checkpoint"]):
        try:
            manager.recover()
        except OSError as e:
            raise CheckpointError(f"{manager.root}: cannot finish the change to the checkpoints a stopped "
                                  f"process left ({e.strerror or e})") from None


class CheckpointedHooks(Protocol):
    """What a checkpoint needs of the trainer's hooks (``HookList``): their events around a save,
    and their state."""

    def call(self, event: str, *args: Any) -> None: ...

    def state_dict(self) -> Dict[str, Any]: ...

    def set_state_dict(self, state: Dict[str, Any]) -> None: ...


class Checkpointer:
    """Saves and restores a run's complete state (model, optimizer, LR schedule, loss scaler,
    RNG, hooks, progress), refuses a checkpoint of another run, and loads pretrained weights.

    Args:
        engine: the set-up engine (the model, optimizer, schedule and scaler state).
        hooks: the trainer's hooks (their state is saved; they hear ``before_save`` / ``after_save``).
        state: the run's progress.
        checkpoints: the run's checkpoint folders.
        config: the task config (saved with each checkpoint; a checkpoint of another model,
            optimizer or vocabulary is refused).
        train_reader: the train reader (its vocabularies are saved and compared).
        context: the run context (which rank writes, the checkpoint the run continues).
        run_facts: saved with each checkpoint's progress (the sampler's seed, the CPU threads).
    """

    def __init__(self, engine: ExecutionEngine, hooks: CheckpointedHooks, state: TrainState,
                 checkpoints: CheckpointManager, config: Dict[str, Any], train_reader: "BasicDataSetReader",
                 context: RunContext, run_facts: Mapping[str, Any]) -> None:
        self.engine, self.hooks, self.state, self.checkpoints = engine, hooks, state, checkpoints
        self.config, self.train_reader, self.context, self.run_facts = config, train_reader, context, dict(run_facts)
        self.output_path: str = config["trainer"]["output_path"]

    def save(self, name: str) -> str:
        """Write a complete checkpoint ``<output_path>/checkpoints/<name>`` (rank 0 only)."""
        if not self.context.is_writer:
            return ""
        engine, state = self.engine, self.state
        self.hooks.call("before_save", name)
        extra = {"scaler": engine.scaler_state_dict(), "rng": rng_state(), "hooks": self.hooks.state_dict(),
                 "lr_scheduler": engine.lr_scheduler.state_dict() if engine.lr_scheduler else None,
                 "sampler_seed": self.run_facts.get("sampler_seed")}
        trainer_state = {**state.to_dict(), "mode": engine.mode, "time": time.time(),
                         "dev_metrics": state.metrics_now("dev_reader"),
                         "cpu_threads": self.run_facts.get("cpu_threads")}

        def write(folder: str) -> None:
            ckpt.write_checkpoint(folder, self.checkpointed_state(), engine.optimizer_state_dict(), extra,
                                  trainer_state, self.config, self.train_reader.save_vocabs)

        path = self.checkpoints.save(name, write)
        self.hooks.call("after_save", name, path)
        return path

    def checkpointed_state(self) -> Dict[str, Any]:
        """The model parameters a checkpoint holds: all, or those the model names
        (``BaseModel.checkpointed_names``: what trains, when the rest is frozen and reloaded)."""
        state = self.engine.model_state_dict()
        names = self.engine.model.checkpointed_names()
        return state if names is None else {name: value for name, value in state.items() if name in names}

    def load(self, folder: str) -> None:
        """Restore model, optimizer, LR schedule, scaler, RNG, hook state and progress from a
        verified checkpoint; one with another model, optimizer or vocabulary is refused."""
        parts = ckpt.read_checkpoint(folder)
        self._refuse_different_run(folder, parts["config"])
        self.load_params(parts["model"], folder, strict=True)
        with warnings.catch_warnings():  # LinearWarmup restores its nested schedule, yet warns
            warnings.filterwarnings("ignore", message="There are some unused values in state_dict")
            self._load_training_state(folder, parts)
        s = self.state
        s.load(parts["trainer_state"])
        if s.finished:
            logger.info("resumed from %s: the run already finished at step %d", folder, s.global_step)
        else:
            logger.info("resumed from %s at step %d (epoch %d, step %d in epoch)", folder, s.global_step,
                        min(s.epoch + 1, max(s.num_epochs, 1)), s.step_in_epoch)

    def _load_training_state(self, folder: str, parts: Mapping[str, Any]) -> None:
        """Optimizer, LR schedule, loss scaler, hooks and RNG from a checkpoint's parts."""
        try:
            self.engine.set_optimizer_state_dict(parts["optimizer"])
        except Exception as e:  # noqa: BLE001 (Paddle raises many types for a state that does not fit)
            raise CheckpointError(f"{folder}: optimizer state does not fit this model/optimizer ({e})") from None
        extra = parts["extra"]
        try:
            if self.engine.lr_scheduler is not None and extra.get("lr_scheduler"):
                self.engine.lr_scheduler.set_state_dict(extra["lr_scheduler"])
            self.engine.set_scaler_state_dict(extra.get("scaler"))
            self.hooks.set_state_dict(extra.get("hooks") or {})
            set_rng_state(extra["rng"])
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
            path = os.path.join(folder, ckpt.EXTRA_STATE + ".json")
            raise CheckpointError(f"checkpoint extra state is malformed: {path} ({type(e).__name__}: {e})") from None

    def _refuse_different_run(self, folder: str, saved: Dict[str, Any]) -> None:
        """A checkpoint continues only the run it came from: the same model type, optimizer and
        vocabularies. Lists every difference."""
        differences = []
        saved_model = dict_at(saved, "model")
        model = self.config["model"]
        if saved_model.get("type") != model["type"]:
            differences.append(f"model.type: checkpoint {saved_model.get('type')!r}, now {model['type']!r}")
        saved_opt = (saved_model.get("optimization") or {}).get("optimizer", "adamw")
        if saved_opt != model["optimization"]["optimizer"]:
            differences.append(f"model.optimization.optimizer: checkpoint {saved_opt!r}, "
                               f"now {model['optimization']['optimizer']!r}")
        vocab_dir = os.path.join(folder, ckpt.VOCAB_DIR)
        for field in self.train_reader.fields:
            path = os.path.join(vocab_dir, f"{field.name}.txt")
            if field.vocab is None or not os.path.isfile(path):
                continue
            saved_tokens = Vocab.load(path).tokens
            if saved_tokens != field.vocab.tokens:
                first = next((i for i, (a, b) in enumerate(zip(saved_tokens, field.vocab.tokens)) if a != b),
                             min(len(saved_tokens), len(field.vocab.tokens)))
                differences.append(f"vocabulary of '{field.name}': checkpoint {len(saved_tokens)} tokens, now "
                                   f"{len(field.vocab.tokens)}; first difference at id {first}")
        if differences:
            raise CheckpointError(f"{folder}: this checkpoint is of another run; differences:\n  "
                                  + "\n  ".join(differences))

    def load_params(self, loaded: Mapping[str, Any], source: str, strict: bool = False,
                           prefix_map: Optional[Mapping[str, str]] = None) -> parameters.LoadReport:
        current = self.engine.model_state_dict()
        if strict:  # a checkpoint: it holds what the model checkpoints (all, or what trains)
            names = self.engine.model.checkpointed_names()
            current = current if names is None else {k: v for k, v in current.items() if k in names}
        matched, report = parameters.match_parameters(current, loaded, source, prefix_map)
        bad = [name for name, value in matched.items() if not np.isfinite(value).all()]
        if bad:
            raise CheckpointError(f"{source}: parameters hold NaN/Inf: {', '.join(bad[:5])}")
        if strict and (report.missing or report.mismatched or report.unexpected):
            raise CheckpointError(f"{source}: checkpoint does not match the model:\n{report.summary()}")
        self.engine.set_model_state_dict(matched)
        return report

    def restore_model_params(self, params: Mapping[str, Any], source: str) -> None:
        """Load a complete set of model parameters (e.g. the best checkpoint's)."""
        self.load_params(params, source, strict=True)

    def load_pretrained(self, params_path: str,
                        prefix_map: Optional[Mapping[str, str]] = None) -> parameters.LoadReport:
        """Warm-start from a params file, a checkpoint folder, or a PaddleNLP / ERNIE-kit model
        folder (ERNIE/BERT weights are renamed to ``ernie.*``, see ``wenxin.translation.pretrained``);
        logs what matched and what did not. A pickled ``.pdparams`` (or ERNIE-kit ``params``) file
        is read with ``wenxin.common.pickled_weights``, which refuses anything but arrays."""
        params, path, layout = parameters.load_pretrained_params(params_path, self.engine.model.state_dict().keys())
        if layout != "wenxin":
            path = f"{path} ({layout} layout)"
        report = self.load_params(params, path, prefix_map=prefix_map)
        if not report.loaded:
            raise CheckpointError(f"{path}: no parameter matches the model:\n{report.summary()}")
        logger.info(report.summary())
        return report

    def load_initial_state(self) -> None:
        """Pretrained weights, then the checkpoint the run continues (if any); rank 0 writes the
        run's resolved config and vocabularies."""
        cfg = self.config["trainer"]["checkpoints"]
        self._load_own_pretrained_weights()
        for entry in cfg["pre_train_model"]:
            self.load_pretrained(entry["params_path"], entry["prefix_map"])
        if cfg["load_parameters"]:
            self.load_pretrained(cfg["load_parameters"])
        if self.context.resume_from:
            self._resume(self.context.resume_from, explicit=bool(cfg["load_checkpoint"]) or cfg["resume"] == "best")
        elif cfg["resume"] == "auto":
            logger.info("resume=auto: no checkpoint in %s, starting fresh", self.checkpoints.root)
        if self.context.is_writer:
            self._write_run_files()

    def _load_own_pretrained_weights(self) -> None:
        """The weights a model brings itself (an ERNIE 4.5 folder), if it brings any."""
        own = self.engine.model.own_pretrained_weights()
        if own is None:
            return
        source, weights = own
        report = self.load_params(weights, source)
        # parameters the folder cannot have (LoRA adapters) start from their initialization
        added = set(report.missing) & (self.engine.model.checkpointed_names() or set())
        report.missing = [name for name in report.missing if name not in added]
        if not report.loaded or report.mismatched or report.missing or report.unexpected:
            # a folder is the model: a weight missing would train from noise, one left over (a stray
            # tensor, another model's) would be dropped unseen
            raise CheckpointError(f"{source}: the model's pretrained weights do not fit it:\n{report.summary()}")
        logger.info("%s%s", report.summary(), f"\n  the model's own parameters ({len(added)}, e.g. adapters) start "
                    f"from their initialization" if added else "")

    def _resume(self, folder: str, explicit: bool) -> None:
        """Continue from ``folder``; rank 0 then puts this run's checkpoint folders in order: the
        folders of later steps belong to the run it abandons (``CheckpointManager.continue_from``)."""
        self.load(folder)
        if not self.context.is_writer or not self.checkpoints.holds(folder):
            return
        try:
            aside = self.checkpoints.continue_from(folder, self.state.global_step, explicit)
        except OSError as e:
            raise CheckpointError(f"{self.checkpoints.root}: cannot put the checkpoints after step "
                                  f"{self.state.global_step} aside ({e.strerror or e})") from None
        if aside:
            logger.warning("resume: the checkpoints after step %d were moved to %s", self.state.global_step, aside)

    def _write_run_files(self) -> None:
        """The run's resolved config and vocabularies in its output folder."""
        try:
            with open(os.path.join(self.output_path, "config.json"), "w", encoding="utf-8") as f:
                json.dump(self.config, f, indent=2, ensure_ascii=False)
            self.train_reader.save_vocabs(os.path.join(self.output_path, "vocab"))
        except OSError as e:
            raise ConfigError(f"trainer.output_path: cannot write to {self.output_path} "
                              f"({e.strerror or e})") from None

def context_of(config: Dict[str, Any]) -> RunContext:
    """The run context of a trainer made without ``wenxin.runner.setup_environment`` (a script's
    own): its task file, this process's rank, the checkpoint its ``trainer.checkpoints.resume`` keys name,
    and Paddle's CPU threads as they are."""
    rank = paddle_rank()
    prepare_output_path(config["trainer"], is_writer=rank == 0)  # before the checkpoint is chosen
    return RunContext(source=source_of(config), translations=translations_of(config),
                      resume_from=resume_checkpoint(config["trainer"]), rank=rank, world_size=paddle_world_size())


def resume_checkpoint(cfg: Dict[str, Any]) -> Optional[str]:
    """The checkpoint the run of the trainer section ``cfg`` continues: ``checkpoints.load_checkpoint``;
    with ``resume: auto`` the newest one in ``output_path`` whose checksums match (damaged ones are
    skipped with a warning); with ``resume: best`` the best one, which must be whole and hold its
    optimizer state."""
    kept = cfg["checkpoints"]
    if kept["load_checkpoint"]:
        ckpt.verify(kept["load_checkpoint"])  # before its vocabularies are used
        return kept["load_checkpoint"]
    if kept["resume"] == "best":
        manager = CheckpointManager.for_trainer(cfg)
        best = os.path.join(manager.root, ckpt.BEST_DIR)
        if not os.path.isdir(best):
            raise CheckpointError(f"trainer.checkpoints.resume: best: there is no best checkpoint in {manager.root} "
                                  f"(it is saved when the dev trainer.evaluation.metric improves, with "
                                  f"trainer.checkpoints.save_best)")
        problem = ckpt.is_valid(best)
        if problem is not None:
            raise CheckpointError(f"trainer.checkpoints.resume: best: {problem}")
        if not ckpt.has_optimizer_state(best):
            raise CheckpointError(f"trainer.checkpoints.resume: best: {best} holds no optimizer state, so a run "
                                  f"cannot continue from it; keep it with trainer.checkpoints.keep_optimizer_state: "
                                  f"latest_and_best (or all), or start a new run from its weights with "
                                  f"trainer.checkpoints.load_parameters")
        return best
    if kept["resume"] == "auto":
        manager = CheckpointManager.for_trainer(cfg)
        latest = manager.latest()
        if latest is None and manager.has_checkpoints():  # never train over damaged results
            raise CheckpointError(f"trainer.checkpoints.resume: no usable checkpoint in {manager.root}: every "
                                  f"one is damaged, "
                                  f"incomplete or without optimizer state (see the warnings); move them away "
                                  f"to start afresh")
        return latest
    return None
