"""``BaseTrainer``: everything about training that does not depend on how a step executes.

A trainer holds an execution engine (``wenxin.controller.engine``), chosen by
``model.is_dygraph``: the eager or the static one. The engine builds the model and optimizer and
runs steps; the loop, hooks, evaluation, logging, checkpoint policy, resume and parameter loading
live here once. ``BaseDynamicTrainer`` and ``BaseStaticTrainer`` are this trainer bound to one
engine (``wenxin.controller.dynamic_trainer``, ``wenxin.controller.static_trainer``).
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Tuple, Type

import numpy as np

from wenxin.common.constants import Phase
from wenxin.common.registry import RegisterSet
from wenxin.config.task_check import EVAL_FLAGS
from wenxin.config.trainer_schema import refuse_flat_keys
from wenxin.controller import parameters
from wenxin.controller.amp import AmpSettings
from wenxin.controller.checkpoint_folders import CheckpointManager
from wenxin.controller.checkpointer import Checkpointer, context_of, prepare_output_path
from wenxin.controller.cpu_threads import threads_for_model
from wenxin.controller.engine import Batch, EngineInputs, ExecutionEngine, readers_inputs
from wenxin.controller.evaluator import Evaluator
from wenxin.controller.inference_exporter import InferenceExporter
from wenxin.controller.hooks import DEFAULT_HOOKS, HookBase, HookList, ProgressBarHook
from wenxin.controller.hooks.from_config import hooks_from_flags, hooks_from_specs
from wenxin.controller.hooks.writers import MetricLogger, make_writers
from wenxin.controller.preflight import preflight
from wenxin.controller.ranks import Ranks
from wenxin.controller.run_context import RunContext
from wenxin.controller.state import TrainState
from wenxin.controller.step_rule import StepRule
from wenxin.controller.stop_signals import stop_signals_caught
from wenxin.controller.train_plan import next_batches, plan_steps, train_data
from wenxin.data.dataset_reader import BasicDataSetReader, BatchLoader

if TYPE_CHECKING:
    import paddle

    from wenxin.models.base_model import BaseModel

logger = logging.getLogger("wenxin")
__all__ = ["Batch", "BaseTrainer"]  # Batch: the engines' (tasks import it from here)


class BaseTrainer:
    """The shared training loop, over the execution engine ``model.is_dygraph`` picks.

    A task's trainer subclasses it once and works in both modes. Its entry points are
    ``do_train`` (by default ``return self.train_loop()``) and ``do_evaluate`` (by default the
    model's ``get_metrics`` over all of a reader's outputs, ``collect_outputs``), as in Wenxin.

    Args:
        config: the validated task config.
        model_builder: creates the task model (a ``BaseModel``); the static engine calls it
            inside its program guard, so the same model class serves both modes.
        readers: loaded dataset readers by name (``train_reader``, ``dev_reader``, ...).
        scope: the task package, for task-registered hooks.
    """

    engine_mode: Optional[str] = None  # a registered engine ("dynamic", "static"); None: model.is_dygraph chooses

    def __init__(self, config: Dict[str, Any], model_builder: Callable[[], BaseModel],
                 readers: Dict[str, BasicDataSetReader], scope: Optional[str] = None,
                 context: Optional[RunContext] = None) -> None:
        self.config, self.readers, self.scope = config, readers, scope
        self.trainer_config: Dict[str, Any] = config["trainer"]
        cfg = self.trainer_config
        refuse_flat_keys(cfg)
        self.context = context if context is not None else context_of(config)
        self.output_path: str = cfg["output_path"]
        self.rank, self.world_size, self.is_writer = self.context.rank, self.context.world_size, self.context.is_writer
        self.ranks = Ranks(self.rank, self.world_size)
        engine_class = self.engine_for(config)
        amp = AmpSettings.from_config(cfg["precision"], cfg["environment"]["PADDLE_PLACE_TYPE"])
        if (amp_unavailable := amp.unavailable_reason(engine_class.mode)) is not None:
            logger.warning("trainer.precision.use_amp: %s; this run computes in float32", amp_unavailable)
        self.state = TrainState()
        self.cpu_threads = 0  # the threads of Paddle's CPU kernels (0: not set, not on a CPU)
        self.checkpoints = CheckpointManager.for_trainer(cfg)
        prepare_output_path(cfg, self.is_writer)
        data = train_data(readers["train_reader"], cfg["seed"], cfg["step"]["gradient_accumulation_steps"], self.ranks,
                          engine_class.numpy_batches)
        self.train_sampler, self.train_loader, self.accumulate = data.sampler, data.loader, data.accumulate
        plan_steps(self.state, data, cfg["epoch"], cfg["max_steps"], self.eval_readers(), list(readers))
        self.rule = StepRule(self.accumulate, self.world_size, cfg["step"]["nan_check_step"])
        self.metric_logger = MetricLogger(make_writers(self.output_path, self.is_writer, cfg["logging"]["visualdl"],
                                                       cfg["fast_paths"]["visualdl_records"]))
        self.hooks = HookList()
        self._setup_hooks()
        self.capture_gradients = False  # set by a hook that reads gradient norms, for the steps it reads
        self.engine: ExecutionEngine = engine_class(EngineInputs(
            model_builder=model_builder, amp=amp, rule=self.rule, seed=cfg["seed"], max_steps=self.state.max_steps,
            **readers_inputs(readers),
            # a hook that reads gradient norms asks for them before the step is built (static programs)
            gradient_norms_wanted=any(getattr(h, "wants_gradient_norms", False) for h in self.hooks.hooks),
            fast_program_runner=cfg["fast_paths"]["program_runner"], on_model_built=self._set_cpu_threads))
        self.evaluator = Evaluator(self.engine, readers, self.ranks, self.state,
                                   cfg["evaluation"]["eval_batch_size"],
                                   self.show_progress)
        self.engine.setup()
        self.checkpointer = Checkpointer(self.engine, self.hooks, self.state, self.checkpoints, config,
                                         readers["train_reader"], self.context,
                                         {"sampler_seed": self.train_sampler.seed, "cpu_threads": self.cpu_threads})
        self.checkpointer.load_initial_state()

    @classmethod
    def engine_for(cls, config: Dict[str, Any]) -> Type[ExecutionEngine]:
        """The engine class (``RegisterSet.engines``): the mode this trainer is bound to, else
        ``model.is_dygraph``'s. (The registry imports the Paddle engines when one is asked for,
        so a trainer on another engine loads no Paddle.)"""
        mode = cls.engine_mode or ("dynamic" if config["model"].get("is_dygraph", 1) else "static")
        engine: Type[ExecutionEngine] = RegisterSet.engines.get(mode, key_path="trainer.type")
        return engine

    # ---- what the engine holds -------------------------------------------------------------
    @property
    def mode(self) -> str:
        """``dynamic`` or ``static``: the engine's mode."""
        return self.engine.mode

    @property
    def amp(self) -> AmpSettings:
        """The mixed-precision settings the engine computes with."""
        return self.engine.amp

    @property
    def model(self) -> BaseModel:
        return self.engine.model

    @property
    def optimizer(self) -> Any:
        return self.engine.optimizer

    @property
    def lr_scheduler(self) -> Optional[paddle.optimizer.lr.LRScheduler]:
        return self.engine.lr_scheduler

    def eval_readers(self) -> List[str]:
        """The readers to evaluate, by ``trainer.evaluation.is_eval_dev`` / ``is_eval_test``."""
        return [name for name, flag in EVAL_FLAGS if self.trainer_config["evaluation"][flag]]

    def _setup_hooks(self) -> None:
        for hook in [cls() for cls in DEFAULT_HOOKS] + hooks_from_flags(self.trainer_config, self.is_writer):
            self.register_hook(hook)
        self.show_progress = any(isinstance(hook, ProgressBarHook) for hook in self.hooks.hooks)
        for hook, priority in hooks_from_specs(self.trainer_config["hooks"], self.scope):
            self.register_hook(hook, priority)

    def register_hook(self, hook: HookBase, priority: Optional[int] = None) -> None:
        hook.trainer = self
        self.hooks.add(hook, priority)

    def run_step(self, batches: List[Batch]) -> Any:
        """One optimizer update over ``batches`` (see ``ExecutionEngine.run_step``); returns the
        mean loss and sets ``state.nonfinite_loss`` (whether the update was skipped)."""
        outcome = self.engine.run_step(batches, self.should_check_loss(), self.capture_gradients)
        self.state.nonfinite_loss = outcome.nonfinite
        return outcome.loss

    def current_lr(self) -> float:
        return float(self.lr_scheduler.get_lr()) if self.lr_scheduler is not None else 0.0

    def should_check_loss(self) -> bool:
        """Whether the step about to run checks its loss for NaN/Inf (``trainer.step.nan_check_step``)."""
        return self.rule.checks_loss(self.state.global_step)

    # ---- task entry points ---------------------------------------------------------------
    def do_train(self) -> Dict[str, Dict[str, float]]:
        """Train; returns the last metrics by reader. A task may do more around ``train_loop``."""
        return self.train_loop()

    def do_evaluate(self, reader_name: str, phase: str, step: int) -> Dict[str, float]:
        """The metrics of a reader: the model's ``get_metrics`` over all of its outputs
        (sequence outputs of batches of different lengths are zero-padded to the longest)."""
        outputs, meta_info = self.collect_outputs(reader_name, phase)
        return self.model.get_metrics(outputs, meta_info, phase)

    # ---- the loop ------------------------------------------------------------------------
    def train_loop(self) -> Dict[str, Dict[str, float]]:
        """Run until ``max_steps`` or a hook asks to stop; returns the last metrics by reader."""
        with self.engine.running():
            return self._train_loop()

    def _train_loop(self) -> Dict[str, Dict[str, float]]:
        s = self.state
        self.ranks.check_start_together(s.global_step, self.output_path)
        if s.finished and not s.evaluation_pending:  # resumed from the end of a finished run
            logger.info("nothing to train: step %d of %d is done (raise trainer.epoch or trainer.max_steps to "
                        "train on; wenxin evaluate scores a checkpoint again)", s.global_step, s.max_steps)
            return s.metrics
        self.hooks.call("before_train")
        self.preflight()
        logger.info("training (%s): %d steps, %d per epoch, %d epochs, batch %d x %d accumulation",
                    self.mode, s.max_steps, s.steps_per_epoch, s.num_epochs,
                    self.readers["train_reader"].reader_config["batch_size"], self.accumulate)
        try:
            with stop_signals_caught(s):
                self._run_epochs()
                self.hooks.call("after_train")
        finally:
            self.metric_logger.flush()
        if s.stop_reason:
            logger.info("stopped: %s", s.stop_reason)
        return s.metrics

    def _run_epochs(self) -> None:
        s = self.state
        while s.global_step < s.max_steps and not s.should_stop:
            self.train_sampler.set_epoch(s.epoch, s.step_in_epoch * self.accumulate)
            if s.step_in_epoch == 0:
                self.hooks.call("before_epoch")
            batches = iter(self.train_loader)
            while s.step_in_epoch < s.steps_per_epoch and s.global_step < s.max_steps and not s.should_stop:
                self.hooks.call("before_step")
                start = time.perf_counter()
                group = next_batches(batches, self.accumulate)
                s.last_data_time = time.perf_counter() - start
                s.last_loss = self.run_step(group)
                s.global_step += 1
                s.step_in_epoch += 1
                self.hooks.call("after_step")
            if s.step_in_epoch >= s.steps_per_epoch:
                self.hooks.call("after_epoch")
                s.epoch += 1
                s.step_in_epoch = 0

    def preflight(self) -> None:
        """Before the first step: the first batch of each evaluated reader through
        ``do_evaluate``, the hooks' metric checks and, with ``save_inference``, an export to a
        scratch folder; every problem together (``wenxin.controller.preflight``)."""
        def first_batch(reader_name: str) -> Dict[str, float]:
            phase = Phase.EVALUATE if reader_name == "dev_reader" else Phase.TEST
            with self.evaluator.first_batch_only(reader_name):
                return self.do_evaluate(reader_name, phase, self.state.global_step)

        export = None
        if self.trainer_config["export"]["save_inference"] and self.is_writer:
            def export(folder: str) -> str:
                return self.export_inference(folder, quiet=True)
        preflight(self.eval_readers(), first_batch, self.hooks.hooks, export)

    # ---- evaluation ----------------------------------------------------------------------
    def evaluate(self, reader_name: str, tag: Optional[str] = None, run_hooks: bool = True,
                 step: Optional[int] = None) -> Dict[str, float]:
        """Evaluate on a reader through the task's ``do_evaluate``; logs (as ``tag``, default the
        reader name without ``_reader``, at ``step``, default the current one: the step of the
        weights evaluated) and returns the metrics."""
        phase = Phase.EVALUATE if reader_name == "dev_reader" else Phase.TEST
        if run_hooks:
            self.hooks.call("before_eval", reader_name)
        metrics = self.do_evaluate(reader_name, phase, self.state.global_step)
        self.state.metrics[reader_name] = metrics
        self.state.metrics_step[reader_name] = self.state.global_step
        self.metric_logger.write(tag or reader_name.replace("_reader", ""),
                                 self.state.global_step if step is None else step, metrics)
        if run_hooks:
            self.hooks.call("after_eval", reader_name, metrics)
        return metrics

    def eval_loader(self, reader_name: str) -> BatchLoader:
        """The batches of an evaluation reader (this rank's shard)."""
        return self.evaluator.loader(reader_name)

    def collect_outputs(self, reader_name: str, phase: str) -> Tuple[Dict[str, np.ndarray], Dict[str, Any]]:
        """Run the model over a whole reader (all ranks' shards, in the reader's order);
        per-example outputs are concatenated, scalar outputs (like ``loss``) become one value per
        batch, weighted by ``meta_info["batch_sizes"]``."""
        return self.evaluator.collect_outputs(reader_name, phase)

    def _set_cpu_threads(self, model: BaseModel) -> None:
        """Once the model exists, the CPU kernels' threads by the run context's choice."""
        self.cpu_threads = threads_for_model(self.context.cpu_threads, model, self.mode == "static",
                                             self.context.resume_from)

    # ---- checkpoints (the checkpointer's) ----------------------------------------------------
    def save_checkpoint(self, name: str) -> str:
        """Write a complete checkpoint ``<output_path>/checkpoints/<name>`` (rank 0 only)."""
        return self.checkpointer.save(name)

    def load_checkpoint(self, folder: str) -> None:
        """Restore the whole training state from a verified checkpoint of this run."""
        self.checkpointer.load(folder)

    def restore_model_params(self, params: Mapping[str, Any], source: str) -> None:
        """Load a complete set of model parameters (e.g. the best checkpoint's)."""
        self.checkpointer.load_params(params, source, strict=True)

    def load_pretrained(self, params_path: str,
                        prefix_map: Optional[Mapping[str, str]] = None) -> parameters.LoadReport:
        """Warm-start from a params file, a checkpoint folder, or a PaddleNLP / ERNIE-kit model
        folder; logs what matched and what did not (see ``Checkpointer.load_pretrained``)."""
        return self.checkpointer.load_pretrained(params_path, prefix_map)

    def export_inference(self, folder: str, quiet: bool = False) -> str:
        """Write a self-contained inference folder (graph, weights, preprocessing) to ``folder``
        (rank 0; see ``wenxin.controller.inference_exporter``)."""
        if not self.is_writer:
            return folder
        readers = self.readers
        sample_reader = "dev_reader" if "dev_reader" in readers else "train_reader"
        exporter = InferenceExporter(self.engine, readers, self.config,
                                     lambda: next(iter(self.eval_loader(sample_reader))))
        return exporter.export(folder, quiet)
