"""How a training step executes: the execution engine a trainer holds.

``BaseTrainer`` owns everything about training that does not depend on how a step runs (the
loop, hooks, evaluation, checkpoints, export's folder, resume). Its engine owns what does:
building the model and optimizer (and, statically, the programs), one optimizer step over a
group of batches with mixed precision, gradient accumulation and the NaN/Inf skip, one
evaluation forward, the prediction graph an export saves, and the state a checkpoint holds.

``model.is_dygraph`` picks the engine: ``EagerEngine`` (``wenxin.controller.eager_engine``) or
``StaticEngine`` (``wenxin.controller.static_engine``). An engine is handed what it reads, in one
``EngineInputs``; it never sees the trainer. What changes from step to step (whether to check the
loss, whether a hook reads this step's gradients) comes with each ``run_step`` call, and the step's
outcome comes back in a ``StepOutcome``.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Dict, List, Mapping, NamedTuple, Optional

import numpy as np

from wenxin.controller.amp import AmpSettings
from wenxin.controller.export import inference_fields
from wenxin.controller.step_rule import StepRule
from wenxin.models.advance_step import EMPTY_SECOND, PAIR

if TYPE_CHECKING:
    from wenxin.data.dataset_reader import BasicDataSetReader
    from wenxin.data.field_reader import TensorSpec
    from wenxin.models.base_model import BaseModel

Batch = Dict[str, Any]  # input name -> a tensor (eager) or a numpy array (static)


def _nothing(model: "BaseModel") -> None:
    return None


@dataclasses.dataclass(frozen=True)
class EngineInputs:
    """Everything an engine reads, handed to it once (detectron2's direction: a part takes its
    inputs, not the object that happens to hold them)."""

    model_builder: Callable[[], "BaseModel"]  # the task model; the static engine calls it in its program guard
    amp: AmpSettings  # mixed precision as configured (an engine where it cannot compute uses float32)
    rule: StepRule  # how a step's batches become one update (accumulation, ranks, the NaN/Inf skip)
    seed: int  # the static programs' random seed
    max_steps: int  # the LR schedule's length (``BaseModel.set_optimizer``)
    train_specs: List["TensorSpec"]  # the training inputs
    eval_specs: Dict[str, List["TensorSpec"]]  # the inputs of each evaluated reader (dev_reader, test_reader)
    export_fields: List[Any]  # the field readers an exported model takes (their ``tensor_specs``)
    gradient_norms_wanted: bool = False  # a hook reads gradient norms (static programs record them)
    fast_program_runner: bool = True  # ``trainer.fast_paths.program_runner``
    on_model_built: Callable[["BaseModel"], None] = _nothing  # once the model exists, before anything runs


def readers_inputs(readers: Mapping[str, "BasicDataSetReader"]) -> Dict[str, Any]:
    """``EngineInputs``' fields that come from the dataset readers: the training inputs, each
    evaluated reader's, and the exported model's fields."""
    return {"train_specs": readers["train_reader"].tensor_specs(),
            "eval_specs": {name: readers[name].tensor_specs() for name in ("dev_reader", "test_reader")
                           if name in readers},
            "export_fields": inference_fields(readers)}


class StepOutcome(NamedTuple):
    """What one optimizer step gives back."""

    loss: Any  # the mean loss of its batches: a tensor (eager) or a float
    nonfinite: bool  # the loss was checked and is NaN/Inf: the update was skipped


def step_meta(name: str, specs: List[Any], outputs: List[str], notes: Optional[Mapping[str, Any]] = None
              ) -> Dict[str, Any]:
    """A step function's entry in ``preprocess.json``'s ``steps``: its inputs and output names,
    for ``advance_pair`` that its second group may have no rows (``advance_step.EMPTY_SECOND``:
    true of every pair this wenxin exports), and what the model notes for its callers
    (``notes``: the entry of its ``step_notes``, e.g. ERNIE-Gen's ``[CLS]``)."""
    entry: Dict[str, Any] = {"inputs": [{"name": s.name, "shape": s.shape, "dtype": s.dtype} for s in specs],
                             "outputs": list(outputs)}
    if name == PAIR:
        entry[EMPTY_SECOND] = True
    return {**entry, **(notes or {})}


def model_step_meta(model: Any, name: str, specs: List[Any], outputs: List[str]) -> Dict[str, Any]:
    """``step_meta`` of ``model``'s step function ``name``, with the model's notes for it
    (``step_notes``, where the model has them)."""
    notes = getattr(model, "step_notes", None)
    return step_meta(name, specs, outputs, (notes() if notes is not None else {}).get(name))


class ExecutionEngine:
    """The execution primitives of one mode (see the module docstring).

    ``setup`` builds ``model``, ``optimizer`` and ``lr_scheduler``; everything else runs after it.
    """

    mode = ""  # "dynamic" or "static": written to checkpoints and logs
    numpy_batches = False  # whether batches come as numpy arrays instead of tensors

    def __init__(self, inputs: EngineInputs) -> None:
        self.inputs = inputs
        self.amp = self.amp_for(inputs.amp)
        self.model: "BaseModel"
        self.optimizer: Any = None
        self.lr_scheduler: Any = None

    @classmethod
    def amp_for(cls, amp: AmpSettings) -> AmpSettings:
        """The mixed-precision settings this engine computes with, given the configured ones."""
        return amp

    def setup(self) -> None:
        """Build the model (``inputs.model_builder()``), optimizer, LR schedule and loss scaler
        (and the programs in static mode); call ``inputs.on_model_built`` once the model exists
        and before anything runs."""
        raise NotImplementedError

    def running(self) -> ContextManager[Any]:
        """The context the training and evaluation loops run in (the static graph mode)."""
        return contextlib.nullcontext()

    def run_step(self, batches: List[Batch], check_loss: bool, capture_gradients: bool = False) -> StepOutcome:
        """One optimizer update over ``batches`` by ``inputs.rule`` (``wenxin.controller.step_rule``).
        With ``check_loss`` the loss is checked for NaN/Inf and the update skipped where it is
        (``nonfinite``); with ``capture_gradients`` the step's gradients are kept for
        ``gradient_square_sums``."""
        raise NotImplementedError

    def eval_step(self, batch: Batch, phase: str, reader_name: str) -> Dict[str, np.ndarray]:
        """The model's outputs for one batch of ``reader_name``, as numpy arrays."""
        raise NotImplementedError

    def run_step_function(self, name: str, inputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Run the model's step function ``name`` (a generation model's ``prefill``/``extend``,
        declared by its ``step_specs``) on numpy inputs, in evaluation mode."""
        raise NotImplementedError

    def save_step_functions(self, folder: str) -> Dict[str, Dict[str, Any]]:
        """Save each of the model's step functions as an inference program ``folder/<name>``;
        returns ``preprocess.json``'s ``steps`` (each step's inputs and output names)."""
        raise NotImplementedError

    def begin_eval(self) -> None:
        """Before the evaluation batches of a reader."""

    def end_eval(self) -> None:
        """After them (back to training)."""

    def save_inference_graph(self, prefix: str, fields: List[Any], sample: Callable[[], Batch]) -> List[str]:
        """Save the prediction graph for ``fields`` at ``prefix``; returns the output names in
        order. ``sample`` gives a batch to trace with, where the engine needs one."""
        raise NotImplementedError

    # ---- state ----
    def model_state_dict(self) -> Dict[str, Any]:
        """Parameters and buffers by structured name (``encoder.fc.weight``)."""
        raise NotImplementedError

    def set_model_state_dict(self, state: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def optimizer_state_dict(self) -> Dict[str, Any]:
        """Optimizer accumulators keyed by structured parameter names (either mode loads them)."""
        raise NotImplementedError

    def set_optimizer_state_dict(self, state: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def scaler_state_dict(self) -> Optional[Dict[str, Any]]:
        """The loss scaler's state in ``paddle.amp.GradScaler.state_dict``'s layout, or None."""
        return None

    def set_scaler_state_dict(self, state: Optional[Dict[str, Any]]) -> None:
        """Restore ``scaler_state_dict``'s state (nothing without a scaler)."""

    def loss_scale(self) -> Optional[float]:
        """The current loss scale, or None without loss scaling."""
        return None

    def gradient_square_sums(self) -> Dict[str, float]:
        """The sum of squares of each parameter's gradient (by structured name) in the last step,
        as the optimizer received it: after accumulation and all-reduce, before clipping and the
        loss scale. Only for steps run with ``capture_gradients``."""
        raise NotImplementedError
