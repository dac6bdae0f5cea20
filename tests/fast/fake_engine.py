"""A numpy execution engine for the fast tier: a bag-of-words softmax classifier trained with
momentum SGD in numpy, so the trainer's loop, hooks, evaluation, checkpoints, resume and signal
handling run with real readers and real files but without one Paddle operation (each test takes
milliseconds to a second). Every step is deterministic, so resumed runs must match exactly."""
from __future__ import annotations

import copy
import os
import random
from typing import Any, Callable, Dict, List, Mapping, Optional, Set

import numpy as np
from wenxin.common.registry import RegisterSet
from wenxin.controller.base_trainer import BaseTrainer
from wenxin.controller.engine import Batch, ExecutionEngine, StepOutcome

from conftest import write_config


class NumpyBow:
    """The model: ``softmax(mean of the tokens' rows of W + b)``, and the task's metrics."""

    prediction_format = "classification"
    onednn_min_rows = None
    sorted_batch_rows = None

    def __init__(self, vocab_size: int, num_labels: int, seed: int, learning_rate: float,
                 max_grad_norm: float = 0.0) -> None:
        rng = np.random.RandomState(seed)
        self.learning_rate, self.max_grad_norm = learning_rate, max_grad_norm
        self.params = {"embedding.weight": rng.normal(0.0, 0.1, (vocab_size, num_labels)),
                       "out.bias": np.zeros(num_labels)}

    def forward(self, batch: Batch) -> Dict[str, np.ndarray]:
        ids, lengths = np.asarray(batch["text_a"]), np.asarray(batch["text_a_seq_lens"])
        mask = (np.arange(ids.shape[1])[None, :] < lengths[:, None]).astype(np.float64)  # [B, T]
        pooled = (self.params["embedding.weight"][ids] * mask[:, :, None]).sum(1) / lengths[:, None]  # [B, C]
        logits = pooled + self.params["out.bias"]
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        return {"probs": probs, "mask": mask, "ids": ids, "lengths": lengths}

    def loss_and_grads(self, batch: Batch) -> tuple:
        out = self.forward(batch)
        labels = np.asarray(batch["label"]).reshape(-1)
        size = len(labels)
        loss = float(-np.log(out["probs"][np.arange(size), labels] + 1e-12).mean())
        dlogits = out["probs"].copy()
        dlogits[np.arange(size), labels] -= 1.0
        dlogits /= size  # [B, C]
        weights = out["mask"] / out["lengths"][:, None]  # [B, T]
        grad_w = np.zeros_like(self.params["embedding.weight"])
        np.add.at(grad_w, out["ids"], weights[:, :, None] * dlogits[:, None, :])
        return loss, {"embedding.weight": grad_w, "out.bias": dlogits.sum(0)}

    def set_optimizer(self, total_steps: int) -> tuple:
        """Momentum SGD's velocities, and a linear decay over ``total_steps``."""
        return ({name: np.zeros_like(value) for name, value in self.params.items()},
                LinearDecay(self.learning_rate, total_steps))

    # BaseModel's hooks for what a checkpoint holds and what the model brings or exports: the defaults
    def own_pretrained_weights(self) -> None:
        return None

    def checkpointed_names(self) -> None:
        return None

    def export_state(self, state: Dict[str, Any]) -> Dict[str, Any]:
        return {}

    def get_metrics(self, outputs: Dict[str, Any], meta_info: Dict[str, Any], phase: str) -> Dict[str, float]:
        sizes = meta_info["batch_sizes"]
        return {"acc": float((outputs["predictions"] == outputs["labels"]).mean()),
                "loss": float(np.sum(outputs["loss"] * sizes) / np.sum(sizes)), "examples": float(np.sum(sizes))}


class LinearDecay:
    """An LR schedule with Paddle's scheduler interface (``step``, ``get_lr``, state dicts)."""

    def __init__(self, base: float, total: int) -> None:
        self.base, self.total, self.last_epoch = base, total, 0

    def step(self) -> None:
        self.last_epoch += 1

    def get_lr(self) -> float:
        return self.base * max(0.0, 1.0 - self.last_epoch / max(1, self.total))

    def state_dict(self) -> Dict[str, Any]:
        return {"last_epoch": self.last_epoch}

    def set_state_dict(self, state: Dict[str, Any]) -> None:
        self.last_epoch = int(state["last_epoch"])


def clip_by_global_norm(grads: Dict[str, np.ndarray], clip: float) -> Dict[str, np.ndarray]:
    """``grads`` scaled by ``clip / max(norm, clip)`` (the norm of all of them), as Paddle's
    ``ClipGradByGlobalNorm`` does; unchanged where ``clip`` is 0."""
    if clip <= 0:
        return grads
    norm = float(np.sqrt(sum(float(np.square(g).sum()) for g in grads.values())))
    scale = clip / max(norm, clip)
    return {name: g * scale for name, g in grads.items()}


@RegisterSet.engines.register("numpy")
class NumpyEngine(ExecutionEngine):
    """Momentum SGD over the micro-batches' mean gradient; a step whose loss is NaN/Inf (or that a
    test poisons through ``poisoned_steps``: the engine's own step numbers, 1 its first) skips its update,
    as the real engines do."""

    mode = "numpy"
    numpy_batches = True
    MOMENTUM = 0.9

    def setup(self) -> None:
        self.model = self.inputs.model_builder()
        self.inputs.on_model_built(self.model)
        self.optimizer, self.lr_scheduler = self.model.set_optimizer(self.inputs.max_steps)
        self.poisoned_steps: Set[int] = set()
        self._grads: Dict[str, np.ndarray] = {}
        self.steps_run = 0

    def run_step(self, batches: List[Batch], check_loss: bool, capture_gradients: bool = False) -> StepOutcome:
        model, rule = self.model, self.inputs.rule
        losses, grads = [], {name: np.zeros_like(v) for name, v in model.params.items()}
        for batch in batches:
            loss, part = model.loss_and_grads(batch)  # the gradients of the micro-batch's loss
            losses.append(loss)
            for name, g in part.items():
                grads[name] += rule.micro_objective(g)  # linear: the gradient of the micro objective
        loss = rule.step_loss(losses)
        self.steps_run += 1
        if self.steps_run in self.poisoned_steps:
            loss = float("nan")
        nonfinite = rule.skips(check_loss, not np.isfinite(loss))
        self._grads = grads
        if not nonfinite:
            grads = clip_by_global_norm(grads, model.max_grad_norm)
            lr = self.lr_scheduler.get_lr()
            for name, g in grads.items():
                self.optimizer[name] = self.MOMENTUM * self.optimizer[name] + g
                model.params[name] = model.params[name] - lr * self.optimizer[name]
        return StepOutcome(loss, nonfinite)

    def eval_step(self, batch: Batch, phase: str, reader_name: str) -> Dict[str, np.ndarray]:
        loss, _ = self.model.loss_and_grads(batch)
        probs = self.model.forward(batch)["probs"]
        return {"loss": np.asarray(loss), "predictions": probs.argmax(1), "labels": np.asarray(batch["label"]),
                "probs": probs}

    def save_inference_graph(self, prefix: str, fields: List[Any], sample: Callable[[], Batch]) -> List[str]:
        np.savez(prefix + ".npz", **self.model.params)
        return ["probs"]

    def model_state_dict(self) -> Dict[str, Any]:
        return {k: v.copy() for k, v in self.model.params.items()}

    def set_model_state_dict(self, state: Mapping[str, Any]) -> None:
        for name, value in state.items():
            self.model.params[name] = np.array(value, dtype=np.float64)

    def optimizer_state_dict(self) -> Dict[str, Any]:
        return {f"{k}.velocity": v.copy() for k, v in self.optimizer.items()}

    def set_optimizer_state_dict(self, state: Mapping[str, Any]) -> None:
        missing = [f"{k}.velocity" for k in self.optimizer if f"{k}.velocity" not in state]
        if missing:
            raise ValueError(f"missing optimizer state: {', '.join(missing)}")
        for name in self.optimizer:
            self.optimizer[name] = np.array(state[f"{name}.velocity"], dtype=np.float64)

    def gradient_square_sums(self) -> Dict[str, float]:
        return {name: float(np.square(g).sum()) for name, g in self._grads.items()}


class NumpyTrainer(BaseTrainer):
    """The trainer on the numpy engine."""

    engine_mode = "numpy"


NUMPY_TASK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "numpy_task")


def numpy_task(config: Dict[str, Any]) -> Dict[str, Any]:
    """``config`` (a ``conftest.task_config``) as a task of the numpy engine's model
    (``numpy_task``): its optimization settings kept, the rest of the model section dropped."""
    config = copy.deepcopy(config)
    config["task"] = NUMPY_TASK
    config["model"] = {"type": "NumpyBow", "is_dygraph": 1, "optimization": config["model"]["optimization"]}
    return config


def numpy_trainer(config: Dict[str, Any], tmp_path: Any, overrides: Optional[List[str]] = None) -> NumpyTrainer:
    """A trainer on the numpy engine for ``config``, assembled as ``wenxin.runner.build_trainer``
    assembles one (``assemble_trainer``: the readers, with the vocabularies of the checkpoint a run
    resumes, and the model builder), in a process set up without Paddle: the seeds, the output
    folder and the checkpoint to resume."""
    from wenxin.config.loader import load_config
    from wenxin.config.task_check import TaskClasses
    from wenxin.controller.checkpointer import prepare_output_path, resume_checkpoint
    from wenxin.controller.run_context import RunContext
    from wenxin.runner import assemble_trainer
    path = write_config(os.path.join(str(tmp_path), f"task_{random.random():.8f}.json"), numpy_task(config))
    config = load_config(path, overrides or [])
    cfg = config["trainer"]
    prepare_output_path(cfg)
    np.random.seed(cfg["seed"])
    random.seed(cfg["seed"])
    context = RunContext(source=config.source, resume_from=resume_checkpoint(cfg))

    def numpy_model(model_config: Dict[str, Any], data_info: Dict[str, Any]) -> NumpyBow:
        opt = model_config["optimization"]
        return NumpyBow(data_info["text_a"]["vocab_size"], data_info["label"]["num_labels"], cfg["seed"],
                        opt["learning_rate"], opt["max_grad_norm"])

    trainer = assemble_trainer(config, context, TaskClasses(scope="", model_cls=numpy_model, trainer_cls=NumpyTrainer))
    assert isinstance(trainer, NumpyTrainer)
    return trainer
