"""``BaseTrainer``: everything about training that does not depend on how a step executes.

A trainer holds an execution engine (``wenxin.controller.engine``), chosen by
``model.is_dygraph``: the eager or the static one. The engine builds the model and optimizer and
runs steps; the loop, hooks, evaluation, logging, checkpoint policy, resume and parameter loading
live here once. ``BaseDynamicTrainer`` and ``BaseStaticTrainer`` are this trainer bound to one
engine (``wenxin.controller.dynamic_trainer``, ``wenxin.controller.static_trainer``).
"""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple, Type

import numpy as np
import paddle

from wenxin.common import threads
from wenxin.common.constants import Phase
from wenxin.common.errors import CheckpointError, ConfigError, DataError, Problems, WenxinError
from wenxin.common.registry import RegisterSet
from wenxin.config.task_check import EVAL_FLAGS
from wenxin.compat.paddle_internals import set_cpu_threads
from wenxin.config.schema import validate
from wenxin.controller import checkpoint as ckpt
from wenxin.controller import export
from wenxin.controller.amp import AmpSettings
from wenxin.controller.checkpointer import Checkpointer, prepare_output_path
from wenxin.controller.eager_engine import EagerEngine
from wenxin.controller.engine import Batch, ExecutionEngine
from wenxin.controller.evaluator import Evaluator, stop_if_interrupted
from wenxin.controller.static_engine import StaticEngine
from wenxin.common.process import ignored, last_thread_failure
from wenxin.controller.env import rng_state, set_rng_state
from wenxin.controller.graph_mode import eager_mode
from wenxin.controller.hooks import (DEFAULT_HOOKS, EarlyStoppingHook, HookBase, HookList, InferenceExportHook,
                                     LoadBestModelHook, OnnxResultHook, ProfilerHook, ProgressBarHook)
from wenxin.controller.hooks.writers import METRICS_FILE, ConsoleWriter, JsonlWriter, MetricLogger, MetricWriter, \
    VisualDLWriter
from wenxin.common.progress import progress_enabled
from wenxin.controller.state import TrainState
from wenxin.data.dataset_reader import BasicDataSetReader, BatchLoader
from wenxin.models.base_model import BaseModel, state_held

logger = logging.getLogger("wenxin")
STRIDE_FLAG = "FLAGS_use_stride_kernel"  # Paddle's switch for strided views in eager mode (see apply_cpu_threads)
__all__ = ["Batch", "BaseTrainer"]  # Batch: the engines' (tasks import it from here)


def _first_line(error: BaseException) -> str:
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return lines[0].strip() if lines else ""


def _failure(error: BaseException) -> str:
    """What failed: a background thread's own exception (a DataLoader's, which the main thread
    sees only as a dead queue), else ``error``'s type and first line."""
    return last_thread_failure() or f"{type(error).__name__}: {_first_line(error)}"


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

    engine_class: Optional[Type[ExecutionEngine]] = None  # None: model.is_dygraph chooses

    def __init__(self, config: Dict[str, Any], model_builder: Callable[[], BaseModel],
                 readers: Dict[str, BasicDataSetReader], scope: Optional[str] = None) -> None:
        self.config = config
        self.trainer_config: Dict[str, Any] = config["trainer"]
        self.model_builder = model_builder
        self.readers = readers
        self.scope = scope
        self.engine: ExecutionEngine = self.engine_for(config)(self)
        self.output_path: str = self.trainer_config["output_path"]
        self.rank, self.world_size = paddle.distributed.get_rank(), paddle.distributed.get_world_size()
        self.is_writer = self.rank == 0
        self.amp = AmpSettings.from_config(self.trainer_config)
        self.amp_unavailable = self.amp.unavailable_reason(self.mode)  # None where AMP computes
        if self.amp_unavailable:
            logger.warning("trainer.use_amp: %s; this run computes in float32", self.amp_unavailable)
        self.state = TrainState()
        self.cpu_threads = 0  # the threads of Paddle's CPU kernels (``apply_cpu_threads``; 0: not on CPU)
        self.checkpoints = ckpt.CheckpointManager.for_trainer(self.trainer_config)
        prepare_output_path(self.trainer_config, self.is_writer)
        self._setup_train_data()
        self.evaluator = Evaluator(self)
        self.checkpointer = Checkpointer(self)
        self.metric_logger = MetricLogger(self._make_writers())
        self.hooks = HookList()
        self._setup_hooks()
        # a hook that reads gradient norms asks for them before the step is built (static programs)
        self.gradient_norms_wanted = any(getattr(h, "wants_gradient_norms", False) for h in self.hooks.hooks)
        self.capture_gradients = False  # set by such a hook for the steps whose norms it reads
        self.engine.setup()
        self.checkpointer.load_initial_state()

    @classmethod
    def engine_for(cls, config: Dict[str, Any]) -> Type[ExecutionEngine]:
        """The engine class: the one this trainer is bound to, else ``model.is_dygraph``'s."""
        if cls.engine_class is not None:
            return cls.engine_class
        return EagerEngine if config["model"].get("is_dygraph", 1) else StaticEngine

    # ---- what the engine holds -------------------------------------------------------------
    @property
    def mode(self) -> str:
        """``dynamic`` or ``static``: the engine's mode."""
        return self.engine.mode

    @property
    def numpy_batches(self) -> bool:
        return self.engine.numpy_batches

    @property
    def model(self) -> BaseModel:
        return self.engine.model

    @property
    def optimizer(self) -> Any:
        return self.engine.optimizer

    @property
    def lr_scheduler(self) -> Optional[paddle.optimizer.lr.LRScheduler]:
        return self.engine.lr_scheduler

    # ---- setup ---------------------------------------------------------------------------
    def _setup_train_data(self) -> None:
        cfg, reader = self.trainer_config, self.readers["train_reader"]
        rc = reader.reader_config
        self.accumulate: int = cfg["gradient_accumulation_steps"]
        distribute = rc["need_data_distribute"] and self.world_size > 1
        self.train_sampler = reader.make_sampler(rc["batch_size"], rc["shuffle"], cfg["seed"],
                                                 rank=self.rank if distribute else 0,
                                                 num_replicas=self.world_size if distribute else 1,
                                                 bucket_batches=rc["bucket_batches"])
        self.train_loader = reader.make_loader(self.train_sampler, self.numpy_batches)
        steps_per_epoch = len(self.train_sampler) // self.accumulate
        if steps_per_epoch == 0:
            raise ConfigError(f"trainer.gradient_accumulation_steps: {self.accumulate} is more than the "
                              f"{len(self.train_sampler)} batches of one epoch")
        s = self.state
        s.steps_per_epoch = steps_per_epoch
        if cfg["max_steps"] > 0:
            s.max_steps = cfg["max_steps"]
            s.num_epochs = -(-s.max_steps // steps_per_epoch)
        else:
            s.num_epochs = cfg["epoch"]
            s.max_steps = cfg["epoch"] * steps_per_epoch
        for name, flag in EVAL_FLAGS:
            if cfg[flag] and name not in self.readers:
                raise ConfigError(f"trainer.{flag}: set, but dataset_reader.{name} is not configured")

    def eval_readers(self) -> List[str]:
        """The readers to evaluate, by ``trainer.is_eval_dev`` / ``is_eval_test``."""
        return [name for name, flag in EVAL_FLAGS if self.trainer_config[flag]]

    def _make_writers(self) -> List[MetricWriter]:
        writers: List[MetricWriter] = [ConsoleWriter()]
        if self.is_writer:
            writers.append(JsonlWriter(os.path.join(self.output_path, METRICS_FILE)))
            if self.trainer_config["visualdl"]:
                writers.append(VisualDLWriter(os.path.join(self.output_path, "vdl"),
                                              fast=self.trainer_config["fast_paths"]["visualdl_records"]))
        return writers

    def _setup_hooks(self) -> None:
        for cls in DEFAULT_HOOKS:
            self.register_hook(cls())
        if self.trainer_config["load_best_at_end"]:
            self.register_hook(LoadBestModelHook())
        if self.trainer_config["profile"]:
            self.register_hook(ProfilerHook(**self.trainer_config["profile"]))
        if self.trainer_config["early_stopping"] is not None:
            if any(spec["type"] == "EarlyStoppingHook" for spec in self.trainer_config["hooks"]):
                raise ConfigError("trainer.early_stopping: set, and an EarlyStoppingHook in trainer.hooks too; "
                                  "keep one of them")
            stopper = EarlyStoppingHook(**self.trainer_config["early_stopping"])
            stopper.where = "trainer.early_stopping"
            self.register_hook(stopper)
        if self.trainer_config["save_inference"] or self.trainer_config["output_layout"] == "erniekit":
            self.register_hook(InferenceExportHook())
        if self.trainer_config["save_inference"] and self.trainer_config["save_onnx"]:
            self.register_hook(OnnxResultHook())
        self.show_progress = self.is_writer and progress_enabled(self.trainer_config["progress_bar"])
        if self.show_progress:
            self.register_hook(ProgressBarHook())
        for i, spec in enumerate(self.trainer_config["hooks"]):
            path = f"trainer.hooks[{i}]"
            cls = RegisterSet.hooks.get(spec["type"], self.scope, f"{path}.type")
            params = validate(spec["params"], cls.config_schema, f"{path}.params")
            try:
                hook = cls(**params)
            except ConfigError as e:  # e.g. a tracker whose library is not installed
                raise ConfigError(f"{path}: {e}") from None
            self.register_hook(hook, spec["priority"])

    def register_hook(self, hook: HookBase, priority: Optional[int] = None) -> None:
        hook.trainer = self
        self.hooks.add(hook, priority)

    # ---- execution primitives (the engine's) ------------------------------------------------
    def run_step(self, batches: List[Batch]) -> Any:
        """One optimizer update over ``batches`` (see ``ExecutionEngine.run_step``)."""
        return self.engine.run_step(batches)

    def eval_step(self, batch: Batch, phase: str, reader_name: str) -> Dict[str, np.ndarray]:
        """The model's outputs for one batch of ``reader_name``, as numpy arrays; a generation
        model (one with ``generate_outputs``) adds what it decodes through the engine's step functions."""
        outputs = self.engine.eval_step(batch, phase, reader_name)
        generate = getattr(self.model, "generate_outputs", None)
        if generate is not None:
            arrays = {k: v.numpy() if isinstance(v, paddle.Tensor) else np.asarray(v) for k, v in batch.items()}

            def run_step(name: str, inputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
                stop_if_interrupted(self.state)  # a stop signal ends a long decoding at its next step
                return self.engine.run_step_function(name, inputs)
            outputs.update(generate(arrays, run_step))
        return outputs

    def model_state_dict(self) -> Dict[str, Any]:
        """Parameters and buffers by structured name (``encoder.fc.weight``)."""
        return self.engine.model_state_dict()

    def set_model_state_dict(self, state: Mapping[str, Any]) -> None:
        self.engine.set_model_state_dict(state)

    def optimizer_state_dict(self) -> Dict[str, Any]:
        """Optimizer accumulators keyed by structured parameter names."""
        return self.engine.optimizer_state_dict()

    def set_optimizer_state_dict(self, state: Mapping[str, Any]) -> None:
        self.engine.set_optimizer_state_dict(state)

    def scaler_state_dict(self) -> Optional[Dict[str, Any]]:
        return self.engine.scaler_state_dict()

    def set_scaler_state_dict(self, state: Optional[Dict[str, Any]]) -> None:
        self.engine.set_scaler_state_dict(state)

    def loss_scale(self) -> Optional[float]:
        """The current loss scale; None without loss scaling."""
        return self.engine.loss_scale()

    def gradient_square_sums(self) -> Dict[str, float]:
        """The sum of squares of each parameter's gradient in the last step (see the engine's)."""
        return self.engine.gradient_square_sums()

    def save_inference_graph(self, prefix: str, fields: List[Any]) -> List[str]:
        """Save the prediction graph for ``fields`` at ``prefix``; returns the output names in order."""
        return self.engine.save_inference_graph(prefix, fields)

    def reduce_over_ranks(self, values: List[float], op: str = "sum") -> List[float]:
        """``values`` reduced elementwise over all ranks (``sum`` or ``max``; themselves in a
        single process), in float64."""
        if self.world_size == 1:
            return list(values)
        reduce_op = {"sum": paddle.distributed.ReduceOp.SUM, "max": paddle.distributed.ReduceOp.MAX}[op]
        with eager_mode():  # collectives on eager tensors, also in a static loop
            tensor = paddle.to_tensor(values, dtype="float64")
            paddle.distributed.all_reduce(tensor, op=reduce_op)  # type: ignore[arg-type]  # a ReduceOp value
            return [float(v) for v in tensor.numpy()]

    def mean_over_ranks(self, value: float) -> float:
        """The mean of ``value`` over all ranks (itself in a single process)."""
        return self.reduce_over_ranks([value])[0] / self.world_size

    def check_ranks_start_together(self) -> None:
        """Every rank must start from the same step: a rank that found no checkpoint to resume
        (another machine's disk) would train from scratch beside the others. One clear error
        on every rank instead."""
        step = self.state.global_step
        highest, negated_lowest = self.reduce_over_ranks([step, -step], op="max")
        lowest = -int(negated_lowest)
        if int(highest) != lowest:
            raise CheckpointError(f"trainer.output_path: the {self.world_size} ranks start from different steps "
                                  f"({lowest} to {int(highest)}; this rank {step}): every rank resumes from "
                                  f"{self.trainer_config['output_path']}, so on several machines it must be "
                                  f"storage they share (or hold the same checkpoint on each)")

    def current_lr(self) -> float:
        return float(self.lr_scheduler.get_lr()) if self.lr_scheduler is not None else 0.0

    def should_check_loss(self) -> bool:
        """Whether the step about to run checks its loss for NaN/Inf (``trainer.nan_check_step``)."""
        every = self.trainer_config["nan_check_step"]
        return bool(every) and (self.state.global_step + 1) % every == 0

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
        self.check_ranks_start_together()
        if s.finished and not s.evaluation_pending:  # resumed from the end of a finished run
            logger.info("nothing to train: step %d of %d is done (raise trainer.epoch or trainer.max_steps to "
                        "train on; wenxin evaluate scores a checkpoint again)", s.global_step, s.max_steps)
            return s.metrics
        self.hooks.call("before_train")
        self.preflight()
        logger.info("training (%s): %d steps, %d per epoch, %d epochs, batch %d x %d accumulation",
                    self.mode, s.max_steps, s.steps_per_epoch, s.num_epochs,
                    self.readers["train_reader"].reader_config["batch_size"], self.accumulate)
        previous_handlers = self._catch_stop_signals()
        try:
            self._run_epochs()
            self.hooks.call("after_train")
        finally:
            for sig, handler in previous_handlers.items():
                signal.signal(sig, handler)
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
                group = self._next_batches(batches)
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
        """Before the first step, meet what training would otherwise meet only at its first
        evaluation or save: one batch of each evaluated reader goes through the task's
        ``do_evaluate``, every hook checks the metrics it will need (``check_metrics``), and with
        ``save_inference`` the model is exported to a scratch folder. All problems are reported
        together. The RNG states are put back, so the run trains exactly as without this."""
        problems = Problems()
        saved = rng_state()
        try:
            for name in self.eval_readers():
                metrics = self._evaluate_first_batch(name, problems)
                if metrics is None:
                    continue
                for hook in self.hooks.hooks:
                    with problems.catch():
                        hook.check_metrics(name, metrics)
            if self.trainer_config["save_inference"] and self.is_writer and not problems:
                with problems.catch(), tempfile.TemporaryDirectory(prefix="wenxin-export-check-") as scratch:
                    try:
                        self.export_inference(os.path.join(scratch, "inference"), quiet=True)
                    except (WenxinError, KeyboardInterrupt):
                        raise
                    except Exception as e:  # noqa: BLE001 (Paddle's exporters raise many types)
                        raise ConfigError(f"trainer.save_inference: exporting this model fails ({type(e).__name__}: "
                                          f"{_first_line(e)})") from None
        finally:
            set_rng_state(saved)
        problems.raise_if_any()

    def _evaluate_first_batch(self, reader_name: str, problems: Problems) -> Optional[Dict[str, float]]:
        """The task's metrics over the first batch of ``reader_name`` (None after a problem)."""
        phase = Phase.EVALUATE if reader_name == "dev_reader" else Phase.TEST
        try:
            with self.evaluator.first_batch_only(reader_name):
                return self.do_evaluate(reader_name, phase, self.state.global_step)
        except WenxinError as e:
            for message in e.problems:
                problems.add(message)
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 (the task's code; reported instead of after an epoch)
            problems.add(f"dataset_reader.{reader_name}: evaluating its first batch before training failed "
                         f"({_failure(e)})")
        return None

    def _next_batches(self, batches: Iterator[Batch]) -> List[Batch]:
        """The next ``accumulate`` training batches; a loader that fails ends the run with an
        ``error:`` naming the reader, never a wait."""
        try:
            return [next(batches) for _ in range(self.accumulate)]
        except (WenxinError, KeyboardInterrupt):
            raise
        except Exception as e:  # noqa: BLE001 (DataLoader workers raise many types)
            raise DataError(f"dataset_reader.train_reader: loading a batch failed ({_failure(e)})") from None

    def _catch_stop_signals(self) -> Dict[int, Any]:
        """SIGTERM / Ctrl-C: finish the current step, save a checkpoint, and return normally.
        A second signal while stopping interrupts at once (the checkpoint write is atomic)."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous: Dict[int, Any] = {}

        def on_signal(signum: int, frame: Any) -> None:
            if self.state.interrupted:
                raise KeyboardInterrupt(f"second {signal.Signals(signum).name} while stopping")
            self.state.interrupted = self.state.should_stop = True
            self.state.stop_reason = (f"received {signal.Signals(signum).name}: checkpoint saved at the "
                                      f"current step; continue with trainer.resume=auto")
            logger.warning("received %s: stopping after this step", signal.Signals(signum).name)

        for sig in (signal.SIGTERM, signal.SIGINT):
            if not ignored(sig):  # a signal the process was started ignoring stays ignored
                previous[sig] = signal.signal(sig, on_signal)
        return previous

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

    def apply_cpu_threads(self) -> None:
        """Set the threads of Paddle's CPU kernels, once the model is built and before any program
        runs (a static program's executor takes its mode from the count): the runner's choice
        (``config["_cpu_threads"]``), fitted to the model and the machine where it is automatic,
        or the count of the run this one resumes (see ``wenxin.common.threads``)."""
        choice = self.config.get("_cpu_threads")
        if not choice:
            return
        count, reason = choice["count"], choice["reason"]
        if choice["automatic"]:
            resumed = self._resumed_cpu_threads()
            if resumed:
                count, reason = resumed, "as in the run this one resumes, so that it adds its sums in the same order"
            else:
                count, smaller = threads.fit_to_work(count, self.trainable_parameters(), threads.busy_cores_of_others,
                                                     threads.available_cores(), static=self.mode == "static")
                reason = smaller or reason
        set_cpu_threads(count)
        self.cpu_threads = count
        logger.info("CPU kernels: %d thread%s (%s)", count, "s" * (count > 1), reason)
        if STRIDE_FLAG not in os.environ:  # the user's own setting stands
            # Paddle 3's eager views (transpose, reshape of a transposed tensor) keep strides, and
            # the kernels that read them, and their gradients, copy: measured, an ERNIE-nano eager
            # step took 18% less CPU with contiguous results (benchmarks/ernie_step.py), the same
            # losses to the bit. Static programs do not use stride kernels. Paddle's view-only
            # operations (a tensor's view as another dtype, as_strided) need them: a model that
            # uses those runs with FLAGS_use_stride_kernel=1 in its environment.
            paddle.set_flags({STRIDE_FLAG: False})
            logger.info("CPU: eager views are made contiguous (%s=0; set it to 1 in the environment for a model "
                        "that needs strided views)", STRIDE_FLAG)

    def _resumed_cpu_threads(self) -> Optional[int]:
        """The thread count saved by the checkpoint this run resumes, if it saved one."""
        source = self.config.get("_resume_from")
        try:
            count = ckpt.read_trainer_state(source).get("cpu_threads") if source and os.path.isdir(source) else None
        except WenxinError:
            return None  # the checkpoint's own check reports it when it loads
        return count if isinstance(count, int) and count > 0 else None

    def trainable_parameters(self) -> int:
        """The number of trainable parameters of the model."""
        return sum(int(np.prod(p.shape)) for p in self.model.parameters() if not p.stop_gradient)

    # ---- checkpoints (the checkpointer's) ----------------------------------------------------
    def save_checkpoint(self, name: str, update_latest: bool = True) -> str:
        """Write a complete checkpoint ``<output_path>/checkpoints/<name>`` (rank 0 only)."""
        return self.checkpointer.save(name, update_latest)

    def load_checkpoint(self, folder: str) -> None:
        """Restore the whole training state from a verified checkpoint of this run."""
        self.checkpointer.load(folder)

    def restore_model_params(self, params: Mapping[str, Any], source: str) -> None:
        """Load a complete set of model parameters (e.g. the best checkpoint's)."""
        self.checkpointer.load_params(params, source, strict=True)

    def load_pretrained(self, params_path: str, prefix_map: Optional[Mapping[str, str]] = None) -> ckpt.LoadReport:
        """Warm-start from a params file, a checkpoint folder, or a PaddleNLP / ERNIE-kit model
        folder; logs what matched and what did not (see ``Checkpointer.load_pretrained``)."""
        return self.checkpointer.load_pretrained(params_path, prefix_map)

    # ---- export ---------------------------------------------------------------------------
    def export_inference(self, folder: str, quiet: bool = False) -> str:
        """Write a self-contained inference folder (graph, weights, preprocessing) to ``folder``."""
        if not self.is_writer:
            return folder
        self._check_raw_text_input()
        tmp = ""
        try:
            os.makedirs(os.path.dirname(os.path.abspath(folder)), exist_ok=True)
            tmp = tempfile.mkdtemp(prefix=".export-", dir=os.path.dirname(os.path.abspath(folder)))
            fields = export.inference_fields(self.readers)
            extra: Dict[str, Any] = {}
            with self._export_weights():
                if getattr(self.model, "step_specs", None) is not None:  # generation: its step functions
                    prompt = self.model.prompt_source()
                    extra = {"steps": self.engine.save_step_functions(tmp),
                             "generation": {"settings": self.model.decode_settings().as_dict(),
                                            "prompt": {"inputs": dict(prompt.inputs), "lengths": prompt.lengths},
                                            "max_new_tokens_limit": self.model.max_new_tokens_limit}}
                    outputs = list(self.model.prediction_outputs)
                else:
                    outputs = self.save_inference_graph(os.path.join(tmp, export.MODEL_PREFIX), fields)
            export.write_preprocessing(tmp, fields, outputs, export.label_names(self.readers), self.config,
                                      self.model.prediction_format,
                                      {"onednn_min_rows": self.model.onednn_min_rows,
                                       "sorted_batch_rows": self.model.sorted_batch_rows}, extra)
            export.seal_export(tmp)
            ckpt.replace_folder(tmp, folder)
        except OSError as e:  # a full disk: no partial export, an earlier one stays
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)
            raise CheckpointError(f"{folder}: cannot write the inference model ({e.strerror or e})") from None
        except BaseException:
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)
            raise
        if not quiet:
            logger.info("exported inference model to %s (outputs: %s)", folder, ", ".join(outputs))
        return folder

    @contextlib.contextmanager
    def _export_weights(self) -> Iterator[None]:
        """Inside: the parameters the model exports with (``BaseModel.export_state``, e.g. LoRA
        adapters merged). After: every changed parameter as it was, bit for bit, so training and
        its checkpoints go on unchanged."""
        state = self.model_state_dict()  # eager: the live parameters; only the changed ones are copied
        with state_held(state, self.model.export_state(state), self.set_model_state_dict):
            yield

    def _check_raw_text_input(self) -> None:
        """A tagger is exported only if it can tag raw sentences as it was trained (or its text
        field says inference input is tokenized like the training data)."""
        if self.model.prediction_format != "tagging":
            return
        for field in export.inference_fields(self.readers):
            trained = self.readers["train_reader"].field(field.name)
            issue = getattr(trained, "raw_text_issue", None)
            if issue:
                raise ConfigError(f"export: {issue}")

    def save_vocabs(self, folder: str) -> None:
        """Write the training fields' vocabularies and label maps into ``folder``."""
        for field in self.readers["train_reader"].fields:
            field.save_vocab(folder)
