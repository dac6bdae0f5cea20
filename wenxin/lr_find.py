"""The learning-rate range test (``wenxin lr-find``).

The task trains from its initial weights for up to ``steps`` optimizer steps while the learning
rate grows by the same factor every step, from ``min_lr`` to ``max_lr`` (the ``exponential``
schedule); the loss of every step is recorded. The test stops early once a running mean of the
loss exceeds ``diverge`` times its lowest value, or the loss is not finite. The suggested
learning rate is where the loss, averaged over a centred window of steps, falls fastest against
log(lr), before its lowest point (Smith, "Cyclical Learning Rates for Training Neural
Networks", 2017). A centred window does not lag: a running mean with the smoothing that one
batch's noise needs would shift the curve by a large part of a decade.

Everything else in the task file (model, data, optimizer, batch size, graph mode) is used as
it is; evaluation, checkpoints, extra hooks and resuming are off, and nothing is written to the
task's output_path except the results folder.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import logging
import math
import os
import tempfile
from typing import Any, Dict, Iterable, List, Optional

import numpy as np

from wenxin.common.errors import ConfigError
from wenxin.config.trainer_schema import set_keys
from wenxin.controller.hooks.base import HookBase, Priority
from wenxin.controller.state import loss_value

logger = logging.getLogger("wenxin")

SMOOTHING = 0.8  # weight of the past in the running mean the stop test uses (bias-corrected)
MIN_STEPS_BEFORE_STOP = 10


@dataclasses.dataclass
class RangeTestResult:
    """The recorded points and what they suggest."""

    learning_rates: List[float]
    losses: List[float]
    running: List[float]  # the running mean the stop test used
    smoothed: List[Optional[float]]  # the centred mean the suggestion used (None near the ends)
    suggested_lr: Optional[float]
    min_loss_lr: Optional[float]
    stop_reason: str
    folder: str = ""  # where the results were written

    def to_dict(self) -> Dict[str, Any]:
        return {"suggested_lr": self.suggested_lr, "min_loss_lr": self.min_loss_lr, "stop_reason": self.stop_reason,
                "steps": len(self.losses),
                "points": [{"step": i + 1, "lr": lr, "loss": loss, "running_loss": r, "smoothed_loss": s}
                           for i, (lr, loss, r, s) in enumerate(zip(self.learning_rates, self.losses, self.running,
                                                                    self.smoothed))]}


def centred_mean(losses: List[float]) -> List[Optional[float]]:
    """Each loss averaged with its neighbours over a window of a tenth of the points (at least
    3, odd); None where the window would leave the points."""
    window = max(3, (len(losses) // 10) | 1)
    if len(losses) < window:
        return [None] * len(losses)
    means = np.convolve(np.asarray(losses, dtype=np.float64), np.ones(window) / window, mode="valid")
    half = window // 2
    return [None] * half + [float(m) for m in means] + [None] * (len(losses) - half - len(means))


def suggest(learning_rates: List[float], smoothed: List[Optional[float]]) -> Optional[float]:
    """The learning rate where ``smoothed`` falls fastest against log10(lr), up to its lowest
    point; None when fewer than 3 points lead to it."""
    points = [(lr, s) for lr, s in zip(learning_rates, smoothed) if s is not None and math.isfinite(s)]
    if not points:
        return None
    lrs, values = np.asarray([p[0] for p in points]), np.asarray([p[1] for p in points])
    end = int(np.argmin(values)) + 1
    if end < 3:
        return None
    slope = np.gradient(values[:end], np.log10(lrs[:end]))
    return float(lrs[int(np.argmin(slope))])


class RangeTestHook(HookBase):
    """Records each step's learning rate and loss, and stops the run when the loss diverges."""

    priority = Priority.VERY_HIGH  # before the LR schedule steps and the logger reads the loss

    def __init__(self, min_lr: float, factor: float, diverge: float) -> None:
        self.min_lr, self.factor, self.diverge = min_lr, factor, diverge
        self.learning_rates: List[float] = []
        self.losses: List[float] = []
        self.running: List[float] = []
        self.stop_reason = "reached max_lr"
        self._mean = 0.0

    def after_step(self) -> None:
        state = self.trainer.state
        loss = loss_value(state.last_loss)
        self.learning_rates.append(self.min_lr * self.factor ** (state.global_step - 1))
        self.losses.append(loss)
        if not math.isfinite(loss):
            self.running.append(loss)
            self._stop(f"the loss is {loss} at lr {self.learning_rates[-1]:.3g}")
            return
        self._mean = SMOOTHING * self._mean + (1 - SMOOTHING) * loss
        self.running.append(self._mean / (1 - SMOOTHING ** len(self.losses)))
        lowest = min(r for r in self.running if math.isfinite(r))
        if len(self.losses) >= MIN_STEPS_BEFORE_STOP and self.running[-1] > self.diverge * lowest:
            self._stop(f"the running mean of the loss passed {self.diverge:g}x its lowest at lr "
                       f"{self.learning_rates[-1]:.3g}")

    def _stop(self, reason: str) -> None:
        self.stop_reason = reason
        self.trainer.state.should_stop = True
        self.trainer.state.stop_reason = f"lr-find: {reason}"

    def result(self) -> RangeTestResult:
        finite = [i for i, loss in enumerate(self.losses) if math.isfinite(loss)]
        smoothed: List[Optional[float]] = [None] * len(self.losses)
        for i, value in zip(finite, centred_mean([self.losses[i] for i in finite])):
            smoothed[i] = value
        known = [(s, self.learning_rates[i]) for i, s in enumerate(smoothed) if s is not None]
        return RangeTestResult(self.learning_rates, self.losses, self.running, smoothed,
                               suggest(self.learning_rates, smoothed), min(known)[1] if known else None,
                               self.stop_reason)


def range_test_config(config: Dict[str, Any], min_lr: float, max_lr: float, steps: int, scratch: str) -> None:
    """Turn a loaded task config into the range test's run (in place)."""
    config["model"].setdefault("optimization", {}).update(
        learning_rate=min_lr, end_learning_rate=max_lr, lr_scheduler="exponential", warmup_steps=0,
        warmup_proportion=0.0)
    set_keys(
        config["trainer"], max_steps=steps, is_eval_dev=False, is_eval_test=False, save_best=False, save_top_k=0,
        load_best_at_end=False, save_inference=False, output_layout="wenxin", output_path=scratch, resume="none",
        load_checkpoint="", visualdl=False, hooks=[], profile=None, nan_check_step=0, train_log_step=10 ** 9,
        save_model_step=10 ** 9, keep_optimizer_state="latest")


def run_range_test(param_path: str, overrides: Iterable[str] = (), min_lr: float = 1e-7, max_lr: float = 10.0,
                   steps: int = 100, diverge: float = 4.0, output: str = "") -> RangeTestResult:
    """Run the range test for a task file and write ``lr_find.csv``, ``lr_find.json`` and
    ``lr_find.png`` into ``output`` (default ``<trainer.output_path>/lr_find``)."""
    from wenxin.config.loader import load_config
    from wenxin.runner import build_trainer
    if not 0 < min_lr < max_lr:
        raise ConfigError(f"--min_lr/--max_lr: need 0 < min_lr < max_lr (got {min_lr:g} and {max_lr:g})")
    if steps < MIN_STEPS_BEFORE_STOP:
        raise ConfigError(f"--steps: at least {MIN_STEPS_BEFORE_STOP} (got {steps})")
    if diverge <= 1:
        raise ConfigError(f"--diverge: above 1 (got {diverge:g})")
    config = load_config(param_path, overrides)
    output = output or os.path.join(config["trainer"]["output_path"], "lr_find")
    with tempfile.TemporaryDirectory(prefix="wenxin-lr-find-") as scratch:
        range_test_config(config, min_lr, max_lr, steps, scratch)
        trainer = build_trainer(config)
        hook = RangeTestHook(min_lr, (max_lr / min_lr) ** (1.0 / (steps - 1)), diverge)
        trainer.register_hook(hook)
        trainer.do_train()
    result = hook.result()
    if trainer.is_writer:
        write_results(result, output)
        result.folder = output
    return result


def write_results(result: RangeTestResult, output: str) -> None:
    """``lr_find.csv`` (the raw points), ``lr_find.json`` (points and suggestion), ``lr_find.png``."""
    try:
        os.makedirs(output, exist_ok=True)
        with open(os.path.join(output, "lr_find.csv"), "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["step", "lr", "loss", "running_loss", "smoothed_loss"])
            for i, (lr, loss, r, s) in enumerate(zip(result.learning_rates, result.losses, result.running,
                                                     result.smoothed)):
                writer.writerow([i + 1, repr(lr), repr(loss), repr(r), "" if s is None else repr(s)])
        with open(os.path.join(output, "lr_find.json"), "w", encoding="utf-8") as f:
            json.dump(result.to_dict(), f, indent=2)
        plot(result, os.path.join(output, "lr_find.png"))
    except OSError as e:
        raise ConfigError(f"--output: cannot write to {output} ({e.strerror or e})") from None


def plot(result: RangeTestResult, path: str) -> None:
    """Loss and smoothed loss against the learning rate (log scale), the suggestion marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    raw = [(lr, loss) for lr, loss in zip(result.learning_rates, result.losses) if math.isfinite(loss)]
    smooth = [(lr, s) for lr, s in zip(result.learning_rates, result.smoothed) if s is not None]
    if raw:
        ax.plot(*zip(*raw), color="0.75", linewidth=1, label="loss of each step")
    if smooth:
        ax.plot(*zip(*smooth), color="C0", linewidth=2, label="centred mean")
        values = [s for _, s in smooth]
        lowest = int(np.argmin(values))
        if values[lowest] > 0:  # from the lowest point up to the start; the diverging tail leaves the top
            ax.set_ylim(values[lowest] * 0.8, max(values[:lowest + 1]) * 1.1)
    if result.suggested_lr:
        ax.axvline(result.suggested_lr, color="C3", linestyle="--", label=f"suggested {result.suggested_lr:.3g}")
    ax.set_xscale("log")
    ax.set_xlabel("learning rate")
    ax.set_ylabel("training loss")
    ax.set_title("learning-rate range test")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
