"""The engines that run an exported model folder: a registry (``RegisterSet.inference_backends``).

Built in: ``paddle`` (Paddle Inference, ``wenxin.inference.paddle_backend``) and ``onnxruntime``
(ONNX Runtime on the folder's ``model.onnx``, ``wenxin.inference.onnx_backend``). ``auto`` takes
the first usable backend in ``auto_order``: ONNX Runtime where the folder has a model for it and
the package is installed, else Paddle. On this repository's 2-core CPU ONNX Runtime ran the BoW,
CNN, transformer and ERNIE models end to end 1.1 to 3.3 times faster than Paddle Inference with
its best oneDNN setting at batch 1 and 16, and within 8% of it at batch 128; outputs within
1.2e-7 (docs/performance.md, "Inference backends").

A backend of your own is one module::

    @RegisterSet.inference_backends.register("mine")
    class MyBackend(InferenceBackend):
        name = "mine"
        auto_order = 50                      # tried by auto before Paddle (100); 0: never by auto
        @classmethod
        def unusable(cls, model_dir, use_gpu): ...   # why it cannot run the folder, or None
        def __init__(self, model_dir, meta, options): ...  # load; set input_names
        def run(self, batch): ...            # {input name: array} -> the outputs, in order
        def splits_batch(self, rows): ...    # optional: False where a whole batch runs faster

imported before the Predictor starts (by a task package, say); ``--backend mine`` then picks it.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Dict, List, Mapping, Optional, Sequence, Type

import numpy as np

from wenxin.common.errors import WenxinError
from wenxin.common.registry import RegisterSet
from wenxin.models.advance_step import ADVANCE, PAIR, pair_runs_alone

logger = logging.getLogger("wenxin")
AUTO = "auto"


class BackendError(WenxinError):
    """A backend cannot run the model folder (missing file or package, a corrupt model)."""


@dataclasses.dataclass
class EngineOptions:
    """How a backend runs: the device, CPU threads, and settings of one backend or another
    (``{"onednn": "auto"}`` for Paddle's oneDNN; each backend reads the keys it knows)."""

    use_gpu: bool = False
    num_threads: int = 1
    settings: Mapping[str, str] = dataclasses.field(default_factory=dict)


class InferenceBackend:
    """An engine over an exported folder. Use it from the thread that created it.

    Subclasses set ``input_names`` when they load, and implement ``unusable`` and ``run``;
    ``choices`` tells what they decided (written to the log and ``/health``)."""

    name = ""  # the name it is registered under
    title = ""  # its name in the log
    setting_titles: Dict[str, str] = {}  # settings' names in the log
    auto_order = 0  # ``auto`` tries backends with a positive order, lowest first
    gpu = False  # whether it runs on a GPU (``use_gpu`` with ``auto`` takes only such backends)
    # whether a run holds Python's interpreter lock throughout (then ``wenxin serve`` decodes in a
    # process of its own: wenxin.inference.decode_process)
    holds_interpreter_lock = False
    # whether it imports Paddle (``wenxin serve`` then loads Paddle first, in the main thread, with
    # signals held: Paddle installs signal handlers of its own as it loads; wenxin.common.process)
    loads_paddle = False
    input_names: List[str]

    def __init__(self, model_dir: str, meta: Dict[str, Any], options: EngineOptions) -> None:
        raise NotImplementedError

    @classmethod
    def unusable(cls, model_dir: str, use_gpu: bool) -> Optional[str]:
        """Why this backend cannot run ``model_dir`` (a missing file or package), or None."""
        raise NotImplementedError

    def run(self, batch: Dict[str, np.ndarray]) -> List[np.ndarray]:
        raise NotImplementedError

    @classmethod
    def step_programs(cls, model_dir: str, steps: Mapping[str, Mapping[str, Any]]) -> List[str]:
        """Which of a generation export's step programs (``preprocess.json``'s ``steps``) it loads,
        an engine each, so that it holds the weights once: ``advance_pair`` instead of ``advance``
        where it holds the pair alone (``holds_pair_alone``: every call runs as the pair, a serving
        turn's decoding rows and prompt parts in one), else all but the pair."""
        left_out = ADVANCE if cls.holds_pair_alone(model_dir, steps) else PAIR
        return [name for name in steps if name != left_out]

    @classmethod
    def holds_pair_alone(cls, model_dir: str, steps: Mapping[str, Mapping[str, Any]]) -> bool:
        """Whether it loads ``advance_pair`` instead of ``advance``: where the pair runs a group of
        no rows (``advance_step.pair_runs_alone``)."""
        return pair_runs_alone(steps)

    @classmethod
    def runs_empty_caches(cls) -> bool:
        """Whether its step programs run after a key/value cache of no columns: an export of
        ``prefill``, ``prefill_chunk`` and ``extend`` then runs ``prefill`` as ``prefill_chunk``
        after an empty cache and loads one copy of the weights fewer (``predictor.step_engines``)."""
        return True

    def choices(self) -> Dict[str, str]:
        """What the backend decided, by setting, in words (``{"onednn": "off (set)"}``)."""
        return {}

    def splits_batch(self, rows: int) -> bool:
        """Whether a batch of ``rows`` may run as smaller batches of rows sorted by length, where the
        model's rule asks for it (``Predictor.sorted_batches``)."""
        return True


def backend_class(name: str, model_dir: str, use_gpu: bool = False) -> Type[InferenceBackend]:
    """The backend to run ``model_dir``: ``name``, or the first usable one for ``auto``. One that
    cannot run the folder is an error naming what is missing."""
    if name == AUTO:
        ordered = sorted(RegisterSet.inference_backends.registered().values(), key=lambda c: c.auto_order)
        for cls in ordered:
            if cls.auto_order > 0 and (cls.gpu or not use_gpu) and cls.unusable(model_dir, use_gpu) is None:
                return cls
        raise BackendError(f"{model_dir}: no backend can run it (tried {', '.join(c.name for c in ordered)})")
    try:
        cls = RegisterSet.inference_backends.get(name, None, "backend")
    except WenxinError as e:
        raise BackendError(f"{e} (or auto)") from None
    problem = cls.unusable(model_dir, use_gpu)
    if problem:
        raise BackendError(f"backend {name}: {problem}")
    return cls


def backend_names() -> List[str]:
    """``auto`` and every registered backend."""
    return [AUTO, *sorted(RegisterSet.inference_backends.registered())]


def largest_difference(expected: Sequence[np.ndarray], got: Sequence[np.ndarray]) -> float:
    """The largest absolute difference between two lists of outputs (inf for a shape mismatch)."""
    worst = 0.0
    for a, b in zip(expected, got):
        if a.shape != b.shape:
            return float("inf")
        if a.size:
            worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))))
    return worst
