"""How a training step executes: the execution engine a trainer holds.

``BaseTrainer`` owns everything about training that does not depend on how a step runs (the
loop, hooks, evaluation, checkpoints, export's folder, resume). Its engine owns what does:
building the model and optimizer (and, statically, the programs), one optimizer step over a
group of batches with mixed precision, gradient accumulation and the NaN/Inf skip, one
evaluation forward, the prediction graph an export saves, and the state a checkpoint holds.

``model.is_dygraph`` picks the engine: ``EagerEngine`` (``wenxin.controller.eager_engine``) or
``StaticEngine`` (``wenxin.controller.static_engine``). An engine reaches the trainer's settings
and state through ``self.trainer``.
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, ContextManager, Dict, List, Mapping, Optional

import numpy as np

if TYPE_CHECKING:
    from wenxin.controller.base_trainer import BaseTrainer
    from wenxin.models.base_model import BaseModel

Batch = Dict[str, Any]  # input name -> a tensor (eager) or a numpy array (static)


def step_meta(specs: List[Any], outputs: List[str]) -> Dict[str, Any]:
    """A step function's entry in ``preprocess.json``'s ``steps``: its inputs and output names."""
    return {"inputs": [{"name": s.name, "shape": s.shape, "dtype": s.dtype} for s in specs], "outputs": list(outputs)}


class ExecutionEngine:
    """The execution primitives of one mode (see the module docstring).

    ``setup`` builds ``model``, ``optimizer`` and ``lr_scheduler``; everything else runs after it.
    """

    mode = ""  # "dynamic" or "static": written to checkpoints and logs
    numpy_batches = False  # whether batches come as numpy arrays instead of tensors

    def __init__(self, trainer: "BaseTrainer") -> None:
        self.trainer = trainer
        self.model: "BaseModel"
        self.optimizer: Any = None
        self.lr_scheduler: Any = None

    def setup(self) -> None:
        """Build the model (``trainer.model_builder()``), optimizer, LR schedule and loss
        scaler (and the programs in static mode); set the CPU threads (``trainer.apply_cpu_threads``)
        once the model exists and before anything runs."""
        raise NotImplementedError

    def running(self) -> ContextManager[Any]:
        """The context the training and evaluation loops run in (the static graph mode)."""
        return contextlib.nullcontext()

    def run_step(self, batches: List[Batch]) -> Any:
        """One optimizer update over ``batches`` (gradient accumulation); returns the mean loss
        (a tensor or float) and sets ``trainer.state.nonfinite_loss`` when it checked and found
        NaN/Inf (the update is then skipped)."""
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

    def save_inference_graph(self, prefix: str, fields: List[Any]) -> List[str]:
        """Save the prediction graph for ``fields`` at ``prefix``; returns the output names in order."""
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
        loss scale. Only for steps a hook asked for (``trainer.capture_gradients``)."""
        raise NotImplementedError
