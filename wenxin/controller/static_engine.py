"""``StaticEngine``: training steps as static-graph (PIR Program + Executor) programs.

The same model Layer as in eager mode is called under ``paddle.static.program_guard`` with
``paddle.static.data`` inputs derived from the field readers' tensor specs: once for training,
and once in evaluation mode for each distinct set of evaluation (and export) inputs. Those
evaluation forwards are cloned into pruned programs before the optimizer is added, and removed
from the training program. Parameters and optimizer state live in the Executor's
scope; checkpoints name them by structured parameter names, like the eager engine, so a
checkpoint of one mode loads in the other. Each program runs through a ``ProgramRunner``,
which skips ``Executor.run``'s per-call program lookup. With ``trainer.precision.use_amp`` the training
forward is built under ``paddle.amp.auto_cast`` and float16 loss scaling is part of the program.
"""
from __future__ import annotations

import dataclasses
import os
import random
import warnings
from typing import Any, Callable, ContextManager, Dict, List, Mapping, Optional, Tuple

import numpy as np
import wenxin.common.paddle_required  # noqa: F401 (before Paddle: one clear line if it cannot run wenxin)
import paddle

from wenxin.common.registry import RegisterSet
from wenxin.common.constants import InstanceName, Phase
from wenxin.common.errors import ConfigError
from wenxin.controller.amp import AmpSettings
from wenxin.controller.parameters import rename_state_keys
from wenxin.controller.engine import Batch, ExecutionEngine, StepOutcome, model_step_meta
from wenxin.common.graph_mode import static_mode
from wenxin.compat.paddle_internals import dense_tensor_dtype, dtype_name, prune_program
from wenxin.compat.pir_programs import (clone_program, created_by_startup, data_values, keep_only_ops,
                                        program_ops, set_inference_mode)
from wenxin.compat.program_runner import ProgramRunner
from wenxin.controller.static_step import CHECK_LOSS_FEED, GRAD_BUFFER_SUFFIX, GRADIENT_SQUARE_SUM_SUFFIX, build_step
from wenxin.data.field_reader import TensorSpec


EXPORT_VARIANT = "predict"  # the evaluation program of the exported model's inputs
STEP = "step"  # the programs of a generation model's step functions: (STEP, name)


def step_input(function: str, name: str) -> str:
    """The program input of a step function's input (they share the program with the fields)."""
    return f"{function}__{name}"


@dataclasses.dataclass
class _EvalProgram:
    """A forward-only program, the values it can fetch by output name, and its inputs."""

    program: paddle.static.Program
    fetch: Dict[str, Any]
    feed_names: List[str]
    runner: Optional[ProgramRunner] = None  # made on first use


def eager_initial_state(model_builder: Callable[[], Any]) -> Dict[str, np.ndarray]:
    """The parameters a model starts from in eager mode, with the seed set as the eager engine
    sets it. Static initializers draw from the startup program's own random streams, so the same
    task file would otherwise start each mode from other weights; taking the eager ones makes a
    run's graph mode a switch that keeps its numbers (dropout masks still come from each mode's
    own streams). NumPy's and Python's random states are restored: the data order stays."""
    numpy_state, python_state = np.random.get_state(), random.getstate()
    try:
        twin = model_builder()
        return {name: value.numpy() for name, value in twin.state_dict().items()}
    finally:
        np.random.set_state(numpy_state)
        random.setstate(python_state)


@RegisterSet.engines.register("static")
class StaticEngine(ExecutionEngine):
    """Static-graph training: startup/train/eval programs built from one model Layer, run by an
    Executor, with the optimizer (LR schedule with warmup, weight decay, global-norm clipping)
    added by ``minimize``. The program's optimizer step (``static_step.build_step``) holds mixed
    precision, gradient accumulation and the NaN/Inf skip in one place."""

    mode = "static"
    numpy_batches = True  # the Executor takes numpy arrays

    @classmethod
    def amp_for(cls, amp: AmpSettings) -> AmpSettings:
        """Where AMP cannot compute (logged by the trainer), float32 programs."""
        return amp.disabled() if amp.unavailable_reason(cls.mode) else amp

    def setup(self) -> None:
        inputs = self.inputs
        self.place = paddle.CPUPlace() if paddle.get_device() == "cpu" else paddle.CUDAPlace(
            int(paddle.get_device().split(":")[1]))
        with static_mode(), warnings.catch_warnings():
            # Paddle's own layers probe Tensor.place while building; PIR warns on each probe
            warnings.filterwarnings("ignore", message="Tensor do not have 'place' interface")
            self._build_programs()
            inputs.on_model_built(self.model)  # the CPU threads, before the executor: its mode follows the count
            self.executor = paddle.static.Executor(self.place)
            self.executor.run(self.startup_program)
        self.paddle_scope = paddle.static.global_scope()  # the variables
        if self.model.draws_initial_weights():
            self.set_model_state_dict(eager_initial_state(self.inputs.model_builder))
        with static_mode():
            fast = inputs.fast_program_runner
            self._train_runner = ProgramRunner(self.executor, self.main_program, [*self.feed_names, CHECK_LOSS_FEED],
                                               [self.loss, self.step.nonfinite_flag], self.paddle_scope, fast=fast,
                                               has_lr_schedule=self.lr_scheduler is not None)
            micro = self.step.micro_program
            self._micro_runner = (ProgramRunner(self.executor, micro, self.feed_names, [self.step.micro_loss],
                                                self.paddle_scope, fast=fast) if micro is not None else None)

    def running(self) -> ContextManager[Any]:
        return static_mode()

    def _build_programs(self) -> None:
        """One program holds the training forward and, for every distinct set of input tensors
        the evaluation readers and the export need, a forward in evaluation mode. It is cloned
        into pruned evaluation programs; then the main program is pruned to the training forward
        and the optimizer is added."""
        self.main_program = paddle.static.Program()
        self.startup_program = paddle.static.Program()
        # Program.random_seed has a setter; Paddle's type hints call it read-only
        self.main_program.random_seed = self.startup_program.random_seed = self.inputs.seed  # type: ignore[misc]
        data: Dict[str, Any] = {}  # one paddle.static.data per tensor name, shared by the forwards
        with paddle.static.program_guard(self.main_program, self.startup_program):
            self.model = self.inputs.model_builder()
            if self.amp.enabled and self.amp.level == "O2":  # parameters in low precision
                self.model = paddle.amp.decorate(models=self.model, level="O2", dtype=self.amp.dtype)  # type: ignore[assignment]
            self.model.train()
            with self.amp.autocast():
                outputs = self.model(self._data(data, self.inputs.train_specs, "train_reader"), Phase.TRAINING)
            self.feed_names = list(data_values(self.main_program))
            train_ops = program_ops(self.main_program)
            self.model.eval()
            forwards: Dict[Tuple[str, ...], Dict[str, Any]] = {}
            self._eval_variant_of: Dict[str, Tuple[str, ...]] = {}
            for reader_name, specs in self._eval_spec_sets().items():
                phase = Phase.PREDICT if reader_name == EXPORT_VARIANT else Phase.EVALUATE
                key = (phase, *sorted(s.name for s in specs))
                if key not in forwards:
                    with self.amp.eval_autocast():
                        forwards[key] = self.model(self._data(data, specs, reader_name), phase)
                self._eval_variant_of[reader_name] = key
            for name, (specs, output_names) in self.step_specs().items():  # a generation model's decoding steps
                inputs = [paddle.static.data(step_input(name, s.name), s.shape, s.dtype) for s in specs]
                forwards[(STEP, name)] = dict(zip(output_names, getattr(self.model, name)(*inputs)))
            self.model.train()
            evaluation, look_up = clone_program(self.main_program)
            self._eval_programs = {key: self._pruned_clone(evaluation, {k: look_up(v) for k, v in outs.items()})
                                   for key, outs in forwards.items()}
            keep_only_ops(self.main_program, train_ops)  # drop the evaluation forwards again
            self.loss = outputs[InstanceName.LOSS]
            optimizer, self.lr_scheduler = self.model.set_optimizer(self.inputs.max_steps)
            self.step = build_step(self.main_program, self.loss, optimizer, self.amp, self.inputs.rule,
                                   self.inputs.gradient_norms_wanted)
            self.optimizer = self.step.optimizer
            self._scaler_vars = self.step.scaler_vars
        # structured name ("fc.weight") <-> program variable name ("linear_2.w_0")
        self.var_names = {k: v.name for k, v in self.model.state_dict().items()}

    @staticmethod
    def _data(data: Dict[str, Any], specs: List[TensorSpec], reader_name: str) -> Dict[str, Any]:
        """``paddle.static.data`` for ``specs``, reusing those already made for the same name."""
        for s in specs:
            if s.name not in data:
                data[s.name] = paddle.static.data(s.name, s.shape, s.dtype)
            elif list(data[s.name].shape) != list(s.shape) or dtype_name(data[s.name].dtype) != s.dtype:
                raise ConfigError(f"dataset_reader.{reader_name}: tensor '{s.name}' {s.shape} {s.dtype} differs "
                                  f"from the train_reader's {list(data[s.name].shape)} "
                                  f"{dtype_name(data[s.name].dtype)}")
        return {s.name: data[s.name] for s in specs}

    def _eval_spec_sets(self) -> Dict[str, List[TensorSpec]]:
        """Input tensors by evaluated reader, plus those of the exported model (``predict``)."""
        sets: Dict[str, List[TensorSpec]] = dict(self.inputs.eval_specs)
        if not sets:
            sets["train_reader"] = self.inputs.train_specs
        if not self.step_specs():  # a generation model exports its step functions instead
            sets[EXPORT_VARIANT] = [s for f in self.inputs.export_fields for s in f.tensor_specs()]
        return sets

    @staticmethod
    def _pruned_clone(program: paddle.static.Program, fetch: Dict[str, Any]) -> "_EvalProgram":
        clone, look_up = clone_program(program)
        fetch = {k: look_up(v) for k, v in fetch.items()}
        prune_program(clone, list(fetch.values()))
        set_inference_mode(clone)
        return _EvalProgram(clone, fetch, list(data_values(clone)))

    def gradient_square_sums(self) -> Dict[str, float]:
        by_var = {var: name for name, var in self.var_names.items()}
        return {by_var[param]: float(self._read(name)) for param, name in self.step.gradient_sum_names.items()
                if param in by_var}

    def run_step(self, batches: List[Batch], check_loss: bool, capture_gradients: bool = False) -> StepOutcome:
        # gradient accumulation: the micro program takes all but the last batch
        micro = self._micro_runner
        assert micro is not None or len(batches) == 1, "several batches a step need the micro program"
        losses = [float(np.asarray(micro.run(batch)[0]).reshape(-1)[0]) for batch in batches[:-1]] if micro else []
        check = np.array([1.0 if check_loss else 0.0], dtype=np.float32)
        last_loss, nonfinite = self._train_runner.run({**batches[-1], CHECK_LOSS_FEED: check})
        losses.append(float(np.asarray(last_loss).reshape(-1)[0]))
        # the program skipped the update already (only where it checked); the NaN guard counts what it skipped
        return StepOutcome(self.inputs.rule.step_loss(losses), float(np.asarray(nonfinite).reshape(-1)[0]) > 0)

    def eval_program(self, reader_name: str) -> _EvalProgram:
        """The evaluation program for a reader's inputs (``predict``: the exported model's)."""
        variants = self._eval_variant_of  # a reader without a program of its own uses an evaluated one's
        key = variants.get(reader_name) or next(variants[name] for name in ("dev_reader", "test_reader", "train_reader")
                                                if name in variants)
        return self._eval_programs[key]

    def step_specs(self) -> Dict[str, Tuple[List[TensorSpec], List[str]]]:
        """The model's step functions (none but a generation model's)."""
        specs = getattr(self.model, "step_specs", None)
        return specs() if specs is not None else {}

    def _run(self, evaluation: _EvalProgram, feed: Batch) -> Dict[str, np.ndarray]:
        if evaluation.runner is None:
            evaluation.runner = ProgramRunner(self.executor, evaluation.program, evaluation.feed_names,
                                              list(evaluation.fetch.values()), self.paddle_scope, read_only=True,
                                              fast=self.inputs.fast_program_runner)
        return dict(zip(evaluation.fetch, (np.asarray(v) for v in evaluation.runner.run(feed))))

    def eval_step(self, batch: Batch, phase: str, reader_name: str) -> Dict[str, np.ndarray]:
        return self._run(self.eval_program(reader_name), batch)

    def run_step_function(self, name: str, inputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        return self._run(self._eval_programs[(STEP, name)], {step_input(name, k): v for k, v in inputs.items()})

    # ---- export ---------------------------------------------------------------------------
    def save_inference_graph(self, prefix: str, fields: List[Any], sample: Callable[[], Batch]) -> List[str]:
        """``paddle.static.save_inference_model`` from the prediction-phase forward (dropout
        off), pruned to the inference fields and its outputs."""
        evaluation = self.eval_program(EXPORT_VARIANT)
        names = sorted(k for k in evaluation.fetch if k not in (InstanceName.LOSS, InstanceName.LABELS))
        feeds = data_values(evaluation.program)
        feed_names = [s.name for f in fields for s in f.tensor_specs() if s.name in feeds]
        with static_mode():
            paddle.static.save_inference_model(prefix, [feeds[n] for n in feed_names],
                                               [evaluation.fetch[n] for n in names], self.executor,
                                               program=evaluation.program)
        return names

    def save_step_functions(self, folder: str) -> Dict[str, Dict[str, Any]]:
        """``paddle.static.save_inference_model`` of each step function's program."""
        steps: Dict[str, Dict[str, Any]] = {}
        for name, (specs, outputs) in self.step_specs().items():
            evaluation = self._eval_programs[(STEP, name)]
            feeds = data_values(evaluation.program)
            with static_mode():
                paddle.static.save_inference_model(os.path.join(folder, name),
                                                   [feeds[step_input(name, s.name)] for s in specs],
                                                   [evaluation.fetch[o] for o in outputs], self.executor,
                                                   program=evaluation.program)
            steps[name] = model_step_meta(self.model, name, specs, outputs)
        return steps

    # ---- state ---------------------------------------------------------------------------
    def _read(self, var_name: str) -> np.ndarray:
        return np.array(self.paddle_scope.find_var(var_name).get_tensor())

    def _write(self, var_name: str, value: Any) -> None:
        tensor = self.paddle_scope.find_var(var_name).get_tensor()
        array = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
        dtype = dense_tensor_dtype(tensor)
        tensor.set(array.astype(dtype, copy=False), self.place)

    def model_state_dict(self) -> Dict[str, Any]:
        return {name: self._read(var) for name, var in self.var_names.items()}

    def set_model_state_dict(self, state: Mapping[str, Any]) -> None:
        for name, value in state.items():
            self._write(self.var_names[name], value)

    def _optimizer_var_names(self) -> List[str]:
        """Optimizer state in the scope; gradient buffers (zero at every step end) and gradient
        norms (recomputed every step) are left out."""
        scaler_vars = set(self._scaler_vars.values())
        # the persistable values the startup program creates, other than parameters (the
        # optimizer's ops sit inside the NaN guard's cond, where Program.state_dict does not look)
        created = created_by_startup(self.startup_program)
        return [n for n in created if not n.endswith((GRAD_BUFFER_SUFFIX, GRADIENT_SQUARE_SUM_SUFFIX))
                and n not in scaler_vars
                and self.paddle_scope.find_var(n) is not None]

    def optimizer_state_dict(self) -> Dict[str, Any]:
        state = {name: self._read(name) for name in self._optimizer_var_names()}
        return rename_state_keys(state, {var: name for name, var in self.var_names.items()})

    def set_optimizer_state_dict(self, state: Mapping[str, Any]) -> None:
        internal = rename_state_keys({k: v for k, v in state.items() if not isinstance(v, Mapping)},
                                self.var_names)
        expected = set(self._optimizer_var_names())
        missing = expected - set(internal)
        if missing:
            raise ValueError(f"missing optimizer state: {', '.join(sorted(missing)[:5])}")
        for name in expected:
            self._write(name, internal[name])

    def scaler_state_dict(self) -> Optional[Dict[str, Any]]:
        """The loss-scaling state in ``paddle.amp.GradScaler.state_dict``'s layout, so either
        mode can resume it."""
        if not self._scaler_vars:
            return None
        settings = self.amp.scaler_kwargs
        state: Dict[str, Any] = {key: settings[key] for key in
                                 ("incr_ratio", "decr_ratio", "incr_every_n_steps", "decr_every_n_nan_or_inf")}
        state["use_dynamic_loss_scaling"] = "incr_count" in self._scaler_vars
        state["scale"] = self._read(self._scaler_vars["scale"]).reshape([1])
        for key in ("incr_count", "decr_count"):
            state[key] = int(self._read(self._scaler_vars[key])[0]) if key in self._scaler_vars else 0
        return state

    def set_scaler_state_dict(self, state: Optional[Dict[str, Any]]) -> None:
        if not self._scaler_vars or not state:
            return
        self._write(self._scaler_vars["scale"], np.asarray(state["scale"], dtype=np.float32).reshape([1]))
        for key in ("incr_count", "decr_count"):
            if key in self._scaler_vars:
                self._write(self._scaler_vars[key], np.array([state.get(key, 0)], dtype=np.int32))

    def loss_scale(self) -> Optional[float]:
        return float(self._read(self._scaler_vars["scale"])[0]) if self._scaler_vars else None
