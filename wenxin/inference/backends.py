"""The engines that run an exported model: Paddle Inference and, for a folder that holds a
``model.onnx`` (``wenxin export --format onnx``), ONNX Runtime.

ONNX Runtime is the default where both are available: on this repository's 2-core CPU it ran the
BoW, CNN and ERNIE-style models 1.2 to 21 times faster than Paddle Inference's default
configuration, with outputs within 1.2e-7 (issue 20's measurements; benchmarks/README.md).
"""
from __future__ import annotations

import importlib.util
import os
from typing import Dict, List, Sequence

import numpy as np

from wenxin.common.constants import INFERENCE_BACKENDS
from wenxin.common.errors import WenxinError

ONNX_FILE = "model.onnx"
BACKENDS = INFERENCE_BACKENDS


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
    """``paddle.inference`` on CPU (or GPU 0). Use it from the thread that created it."""

    def __init__(self, graph: str, params: str, use_gpu: bool = False, num_threads: int = 1) -> None:
        from paddle import inference
        config = inference.Config(graph, params)
        if use_gpu:
            config.enable_use_gpu(256, 0)
        else:
            config.disable_gpu()
            config.set_cpu_math_library_num_threads(num_threads)
        config.disable_glog_info()
        try:
            self.predictor = inference.create_predictor(config)
        except Exception as e:  # paddle raises RuntimeError/ValueError for corrupt files
            raise BackendError(f"{os.path.dirname(graph)}: cannot load the model ({type(e).__name__}: {e})") from None
        self.input_names: List[str] = self.predictor.get_input_names()

    def run(self, batch: Dict[str, np.ndarray]) -> List[np.ndarray]:
        for name in self.input_names:
            handle = self.predictor.get_input_handle(name)
            handle.reshape(batch[name].shape)
            handle.copy_from_cpu(batch[name])
        self.predictor.run()
        return [self.predictor.get_output_handle(h).copy_to_cpu() for h in self.predictor.get_output_names()]


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
