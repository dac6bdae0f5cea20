"""Before the first step, meet what training would otherwise meet only at its first evaluation
or save, and report every problem together."""
from __future__ import annotations

import os
import tempfile
from typing import Any, Callable, Dict, Optional, Sequence

from wenxin.common.errors import ConfigError, Problems, WenxinError
from wenxin.common.process import describe_failure, first_line
from wenxin.controller.env import rng_state, set_rng_state
from wenxin.controller.hooks import HookBase


def preflight(reader_names: Sequence[str], evaluate_first_batch: Callable[[str], Dict[str, float]],
              hooks: Sequence[HookBase], export: Optional[Callable[[str], Any]] = None) -> None:
    """One batch of each evaluated reader in ``reader_names`` goes through
    ``evaluate_first_batch`` (the task's ``do_evaluate`` over it), every hook checks the metrics
    it will need (``check_metrics``), and ``export`` (given with ``save_inference`` on the
    writing rank) exports the model to a scratch folder. Raises one error with all problems.
    The RNG states are put back, so the run trains exactly as without this."""
    problems = Problems()
    saved = rng_state()
    try:
        for name in reader_names:
            metrics = _first_batch_metrics(name, evaluate_first_batch, problems)
            if metrics is None:
                continue
            for hook in hooks:
                with problems.catch():
                    hook.check_metrics(name, metrics)
        if export is not None and not problems:
            with problems.catch(), tempfile.TemporaryDirectory(prefix="wenxin-export-check-") as scratch:
                _check_export(export, os.path.join(scratch, "inference"))
    finally:
        set_rng_state(saved)
    problems.raise_if_any()


def _first_batch_metrics(reader_name: str, evaluate_first_batch: Callable[[str], Dict[str, float]],
                         problems: Problems) -> Optional[Dict[str, float]]:
    """The task's metrics over the first batch of ``reader_name`` (None after a problem)."""
    try:
        return evaluate_first_batch(reader_name)
    except WenxinError as e:
        for message in e.problems:
            problems.add(message)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 (the task's code; reported instead of after an epoch)
        problems.add(f"dataset_reader.{reader_name}: evaluating its first batch before training failed "
                     f"({describe_failure(e)})")
    return None


def _check_export(export: Callable[[str], Any], folder: str) -> None:
    try:
        export(folder)
    except (WenxinError, KeyboardInterrupt):
        raise
    except Exception as e:  # noqa: BLE001 (Paddle's exporters raise many types)
        raise ConfigError(f"trainer.export.save_inference: exporting this model fails ({type(e).__name__}: "
                          f"{first_line(e)})") from None
