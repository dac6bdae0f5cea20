"""``EagerEngine``: training steps in Paddle's eager (dynamic graph) mode."""
from __future__ import annotations

import contextlib
import math
import os
import warnings
from typing import Any, Callable, Dict, List, Mapping, Optional

import numpy as np
import wenxin.common.paddle_required  # noqa: F401 (before Paddle: one clear line if it cannot run wenxin)
import paddle

from wenxin.common.registry import RegisterSet
from wenxin.common.constants import InstanceName, Phase
from wenxin.compat.paddle_internals import grad_scaler_scale
from wenxin.controller.parameters import rename_state_keys
from wenxin.controller.engine import Batch, ExecutionEngine, StepOutcome, model_step_meta
from wenxin.controller.state import loss_value
from wenxin.controller.step_rule import StepRule
from wenxin.models.held_dtype import to_held


class _PredictGraph(paddle.nn.Layer):
    """The model in the predict phase, taking one dict of inputs and returning a tuple of
    outputs in a fixed order (what ``paddle.jit.save`` can trace)."""

    def __init__(self, model: paddle.nn.Layer, output_names: List[str]) -> None:
        super().__init__()
        self.model = model
        self.output_names = output_names

    def forward(self, fields):  # noqa: ANN001, ANN201 (traced by dy2static)
        outputs = self.model(fields, Phase.PREDICT)
        return tuple(outputs[name] for name in self.output_names)


class _StepGraph(paddle.nn.Layer):
    """One step function of a generation model (``step_specs``), as a layer ``paddle.jit.save`` traces."""

    def __init__(self, model: paddle.nn.Layer, name: str, input_names: List[str]) -> None:
        super().__init__()
        self.model = model
        self.step = name
        self.input_names = input_names

    def forward(self, inputs):  # noqa: ANN001, ANN201 (traced by dy2static; a dict, as _PredictGraph's)
        return tuple(getattr(self.model, self.step)(*[inputs[name] for name in self.input_names]))


class EagerOptimizerStep:
    """The step rule (``wenxin.controller.step_rule``) in eager mode: each micro-batch's
    ``rule.micro_objective`` is scaled by the ``GradScaler`` (float16 AMP) before ``backward``;
    data parallel all-reduces the gradients only at the last micro-batch; a skipped step applies
    nothing, otherwise the optimizer applies the update (its ``grad_clip`` clips by the global
    norm, see ``wenxin.optim``) and the scaler updates its scale."""

    def __init__(self, optimizer: Any, scaler: Optional[paddle.amp.GradScaler], train_model: Any,
                 rule: StepRule) -> None:
        self.optimizer, self.scaler, self.train_model, self.rule = optimizer, scaler, train_model, rule

    def accumulating(self, index: int, count: int) -> contextlib.AbstractContextManager:
        """The context of micro-batch ``index`` of ``count``: data parallel synchronizes only the last."""
        last = index == count - 1
        return contextlib.nullcontext() if last or self.rule.world_size == 1 else self.train_model.no_sync()

    def backward(self, loss: paddle.Tensor) -> None:
        scaled = self.rule.micro_objective(loss)
        if self.scaler is not None:
            self.scaler.scale(scaled).backward()
        else:
            scaled.backward()

    def apply(self, skip: bool) -> None:
        """Apply the accumulated gradients (unless ``skip``), then clear them."""
        if skip:
            pass  # the NaN guard decides whether to stop
        elif self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.clear_grad(set_to_zero=False)


@RegisterSet.engines.register("dynamic")
class EagerEngine(ExecutionEngine):
    """Eager training: ``paddle.amp.auto_cast`` + ``GradScaler``, gradient accumulation and
    global-norm clipping in one optimizer step (``EagerOptimizerStep``), data parallel through
    ``fleet.distributed_model``."""

    mode = "dynamic"

    def setup(self) -> None:
        inputs, amp = self.inputs, self.amp
        self.model = inputs.model_builder()
        inputs.on_model_built(self.model)
        self.optimizer, self.lr_scheduler = self.model.set_optimizer(inputs.max_steps)
        if amp.enabled and amp.level == "O2":
            self.model, self.optimizer = paddle.amp.decorate(models=self.model, optimizers=self.optimizer,
                                                             level="O2", dtype=amp.dtype)
        self.scaler = amp.make_scaler()
        self.train_model: paddle.nn.Layer = self.model
        if inputs.rule.world_size > 1:  # data parallel: gradients are averaged across ranks
            from paddle.distributed import fleet
            self.train_model = fleet.distributed_model(self.model)
            self.optimizer = fleet.distributed_optimizer(self.optimizer)
        self.step = EagerOptimizerStep(self.optimizer, self.scaler, self.train_model, inputs.rule)
        self.model.train()

    def run_step(self, batches: List[Batch], check_loss: bool, capture_gradients: bool = False) -> StepOutcome:
        losses = []
        for i, batch in enumerate(batches):
            with self.step.accumulating(i, len(batches)):
                with self.amp.autocast():
                    outputs = self.train_model(batch, Phase.TRAINING)
                loss = outputs[InstanceName.LOSS]
                self.step.backward(loss)
            losses.append(loss.detach())
        loss = losses[0] if len(losses) == 1 else paddle.stack(losses).mean()
        nonfinite = False
        if check_loss:  # one device-to-host read, which the logger then reuses
            loss = loss_value(loss)
            nonfinite = not math.isfinite(loss)
            if self.inputs.rule.world_size > 1:  # every rank skips the same steps (the gradients were all-reduced)
                flag = paddle.to_tensor([1.0 if nonfinite else 0.0])
                paddle.distributed.all_reduce(flag)
                nonfinite = float(flag.numpy()[0]) > 0  # flag: [1]
        skip = self.inputs.rule.skips(check_loss, nonfinite)
        if capture_gradients:
            self._capture_gradient_square_sums()
        self.step.apply(skip=skip)
        return StepOutcome(loss, skip)

    def _capture_gradient_square_sums(self) -> None:
        scale = self.loss_scale() if self.scaler is not None else None
        sums = {}
        for name, param in self.model.named_parameters():
            if param.grad is not None:
                sums[name] = float(paddle.sum(paddle.square(param.grad.astype("float32"))))
                if scale:
                    sums[name] /= scale * scale
        self._gradient_square_sums = sums

    def gradient_square_sums(self) -> Dict[str, float]:
        return dict(getattr(self, "_gradient_square_sums", {}))

    def eval_step(self, batch: Batch, phase: str, reader_name: str) -> Dict[str, np.ndarray]:
        with paddle.no_grad(), self.amp.eval_autocast():
            outputs = self.model(batch, phase)
        return {k: v.numpy() for k, v in outputs.items() if isinstance(v, paddle.Tensor)}

    def run_step_function(self, name: str, inputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        specs, output_names = self.model.step_specs()[name]
        with paddle.no_grad():
            values = getattr(self.model, name)(*[paddle.to_tensor(inputs[s.name]) for s in specs])
        return {n: v.numpy() for n, v in zip(output_names, values)}

    def begin_eval(self) -> None:
        self.model.eval()

    def end_eval(self) -> None:
        self.model.train()

    # ---- export ---------------------------------------------------------------------------
    def save_inference_graph(self, prefix: str, fields: List[Any], sample: Callable[[], Batch]) -> List[str]:
        """``paddle.jit.save`` of the model in the predict phase, with ``InputSpec``s from the
        field readers' tensor specs (the output names come from a forward of ``sample()``)."""
        specs = {s.name: paddle.static.InputSpec(s.shape, s.dtype, s.name) for f in fields for s in f.tensor_specs()}
        batch = sample()
        self.model.eval()
        try:
            with paddle.no_grad():
                names = sorted(self.model({k: batch[k] for k in specs}, Phase.PREDICT))
            paddle.jit.save(_PredictGraph(self.model, names), prefix, input_spec=[specs])
        finally:
            self.model.train()
        return names

    def save_step_functions(self, folder: str) -> Dict[str, Dict[str, Any]]:
        """``paddle.jit.save`` of each step function, its inputs from ``step_specs``."""
        steps: Dict[str, Dict[str, Any]] = {}
        self.model.eval()
        try:
            for name, (specs, outputs) in self.model.step_specs().items():
                with warnings.catch_warnings():  # PIR warns on each probe of Tensor.place while tracing
                    warnings.filterwarnings("ignore", message="Tensor do not have 'place' interface")
                    # a step function may bypass LoRA adapters in a with block (its Python flags are
                    # read while tracing, which the export's tests check)
                    warnings.filterwarnings("ignore", message="Dy2Static : A context manager decorator")
                    paddle.jit.save(_StepGraph(self.model, name, [s.name for s in specs]), os.path.join(folder, name),
                                    input_spec=[{s.name: paddle.static.InputSpec(s.shape, s.dtype, s.name)
                                                 for s in specs}])
                steps[name] = model_step_meta(self.model, name, specs, outputs)
        finally:
            self.model.train()
        return steps

    # ---- state ---------------------------------------------------------------------------
    def _param_names(self) -> Dict[str, str]:
        """Internal parameter name (``linear_0.w_0``) -> structured name (``fc.weight``)."""
        return {p.name: n for n, p in self.model.named_parameters()}

    def model_state_dict(self) -> Dict[str, Any]:
        return dict(self.model.state_dict())

    def set_model_state_dict(self, state: Mapping[str, Any]) -> None:
        with warnings.catch_warnings():  # a partial warm start is reported by LoadReport instead
            warnings.filterwarnings("ignore", message="Skip loading for")
            parameters = dict(self.model.named_parameters())
            self.model.set_state_dict({name: to_held(value, parameters[name]) if name in parameters else value
                                       for name, value in state.items()})  # bfloat16 parameters: rounded

    def optimizer_state_dict(self) -> Dict[str, Any]:
        return rename_state_keys(self.optimizer.state_dict(), self._param_names())

    def set_optimizer_state_dict(self, state: Mapping[str, Any]) -> None:
        to_internal = {structured: internal for internal, structured in self._param_names().items()}
        internal = rename_state_keys(state, to_internal)
        if "LR_Scheduler" not in internal and self.lr_scheduler is not None:
            # a static-mode checkpoint keeps the schedule in its extra state (restored after this);
            # Paddle's eager optimizer insists on an entry
            internal["LR_Scheduler"] = self.lr_scheduler.state_dict()
        self.optimizer.set_state_dict(internal)

    def scaler_state_dict(self) -> Optional[Dict[str, Any]]:
        return dict(self.scaler.state_dict()) if self.scaler is not None else None

    def set_scaler_state_dict(self, state: Optional[Dict[str, Any]]) -> None:
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)  # type: ignore[arg-type]  # the dict scaler_state_dict saved

    def loss_scale(self) -> Optional[float]:
        """The current loss scale; None without a scaler or where Paddle disables it
        (GradScaler only scales float16 on GPU/XPU; on CPU it passes gradients through)."""
        if self.scaler is None or not self.scaler.is_enable():
            return None
        return grad_scaler_scale(self.scaler)
