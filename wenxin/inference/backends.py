"""The engines that run an exported model: Paddle Inference and, for a folder that holds a
``model.onnx`` (``wenxin export --format onnx``), ONNX Runtime.

ONNX Runtime is the default where both are available: on this repository's 2-core CPU it ran the
BoW, CNN, transformer and ERNIE models end to end 1.1 to 3.3 times faster than Paddle Inference
with its best oneDNN setting at batch 1 and 16, and within 8% of it at batch 128 (where Paddle
with oneDNN is up to 8% faster for the transformer and ERNIE models); outputs within 1.2e-7
(docs/performance.md, "Inference backends").
"""
from __future__ import annotations

import importlib.util
import logging
import os
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from wenxin.common.constants import INFERENCE_BACKENDS, ONEDNN_SETTINGS
from wenxin.common.errors import WenxinError

ONNX_FILE = "model.onnx"
BACKENDS = INFERENCE_BACKENDS

logger = logging.getLogger("wenxin")


class BackendError(WenxinError):
    """A backend cannot run the model folder (missing file or package, a corrupt model)."""


def onnxruntime_available() -> bool:
    return importlib.util.find_spec("onnxruntime") is not None


def choose_backend(model_dir: str, backend: str = "auto") -> str:
    """``auto``: ONNX Runtime when the folder has ``model.onnx`` and onnxruntime is installed,
    else Paddle. An explicit choice that cannot work is an error naming what is missing."""
    if backend not in BACKENDS:
        raise BackendError(f"backend: {backend!r} is not one of {', '.join(BACKENDS)}")
    has_onnx = os.path.isfile(os.path.join(model_dir, ONNX_FILE))
    if backend == "auto":
        return "onnxruntime" if has_onnx and onnxruntime_available() else "paddle"
    if backend == "onnxruntime":
        if not has_onnx:
            raise BackendError(f"{model_dir}: no {ONNX_FILE}; export it with wenxin export --format onnx")
        if not onnxruntime_available():
            raise BackendError("backend onnxruntime: the onnxruntime package is not installed "
                               "(pip install \"wenxin[onnx]\")")
    return backend


class PaddleEngine:
    """``paddle.inference`` on CPU (or GPU 0). Use it from the thread that created it.

    oneDNN (``onednn``: ``auto``, ``on`` or ``off``). Paddle enables it by default on CPU. On this
    repository's 2-core CPU it made every model slower at batch 1 (0.37x to 0.83x), and BoW and
    the CRF tagger at any batch (0.5x, 0.9x); from batch 16 the CNN and transformer faster (1.3x
    to 3.0x) and ERNIE about even (0.93x at 16, 1.13x at 128); outputs moved by at most 4e-7
    (docs/performance.md). ``auto`` follows the exported model's rule (``onednn_min_rows``,
    declared by its class and recorded in ``preprocess.json``): batches of at least that many rows
    with oneDNN, smaller ones without; a model without a rule never uses it. The choice is a rule,
    never a timing, so the same input gives the same output on an idle or a busy machine.
    """

    def __init__(self, graph: str, params: str, use_gpu: bool = False, num_threads: int = 1,
                 onednn: str = "auto", onednn_min_rows: Optional[int] = None) -> None:
        if onednn not in ONEDNN_SETTINGS:
            raise BackendError(f"onednn: {onednn!r} is not one of {', '.join(ONEDNN_SETTINGS)}")
        self.graph, self.params, self.use_gpu, self.num_threads = graph, params, use_gpu, num_threads
        self.onednn = onednn
        self.onednn_min_rows = onednn_min_rows
        self._predictors: Dict[bool, Any] = {}
        self.input_names: List[str] = self._predictor(self.uses_onednn(1)).get_input_names()

    def _predictor(self, onednn: bool) -> Any:
        if onednn not in self._predictors:
            from paddle import inference
            config = inference.Config(self.graph, self.params)
            if self.use_gpu:
                config.enable_use_gpu(256, 0)
            else:
                config.disable_gpu()
                config.set_cpu_math_library_num_threads(self.num_threads)
                if onednn:
                    config.enable_mkldnn()
                else:
                    config.disable_mkldnn()
            config.disable_glog_info()
            try:
                self._predictors[onednn] = inference.create_predictor(config)
            except Exception as e:  # paddle raises RuntimeError/ValueError for corrupt files
                raise BackendError(f"{os.path.dirname(self.graph)}: cannot load the model "
                                   f"({type(e).__name__}: {e})") from None
        return self._predictors[onednn]

    def uses_onednn(self, rows: int) -> bool:
        """Whether a batch of ``rows`` runs with oneDNN."""
        if self.use_gpu or self.onednn == "off":
            return False
        if self.onednn == "on":
            return True
        return self.onednn_min_rows is not None and rows >= self.onednn_min_rows

    def onednn_choice(self) -> str:
        """What ``uses_onednn`` decides, in words (the log and ``/health`` say it)."""
        if self.use_gpu:
            return "off (GPU)"
        if self.onednn != "auto":
            return f"{self.onednn} (set)"
        if self.onednn_min_rows is None:
            return "off (the model's rule)"
        return f"on for batches of {self.onednn_min_rows} or more rows, off below (the model's rule)"

    def run(self, batch: Dict[str, np.ndarray]) -> List[np.ndarray]:
        rows = len(next(iter(batch.values()))) if batch else 0
        return self._run(self._predictor(self.uses_onednn(rows)), batch)

    def _run(self, predictor: Any, batch: Dict[str, np.ndarray]) -> List[np.ndarray]:
        for name in self.input_names:
            handle = predictor.get_input_handle(name)
            handle.reshape(batch[name].shape)
            handle.copy_from_cpu(batch[name])
        predictor.run()
        return [predictor.get_output_handle(h).copy_to_cpu() for h in predictor.get_output_names()]


class OnnxEngine:
    """ONNX Runtime's CPU execution provider on ``model.onnx``."""

    def __init__(self, model_file: str, num_threads: int = 1) -> None:
        import onnxruntime
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = num_threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        try:
            self.session = onnxruntime.InferenceSession(model_file, options, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 (onnxruntime raises its own exception types)
            raise BackendError(f"{model_file}: cannot load the model ({type(e).__name__}: {e})") from None
        self.input_names: List[str] = [i.name for i in self.session.get_inputs()]
        self.output_names: List[str] = [o.name for o in self.session.get_outputs()]

    def run(self, batch: Dict[str, np.ndarray]) -> List[np.ndarray]:
        return self.session.run(self.output_names, {name: batch[name] for name in self.input_names})


def largest_difference(expected: Sequence[np.ndarray], got: Sequence[np.ndarray]) -> float:
    """The largest absolute difference between two lists of outputs (inf for a shape mismatch)."""
    worst = 0.0
    for a, b in zip(expected, got):
        if a.shape != b.shape:
            return float("inf")
        if a.size:
            worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))))
    return worst
