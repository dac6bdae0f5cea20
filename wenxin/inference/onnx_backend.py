"""ONNX Runtime: the ``onnxruntime`` backend, for a folder that holds a ``model.onnx``
(``wenxin export --format onnx``)."""
from __future__ import annotations

import importlib.util
import os
from typing import Any, Dict, List, Optional

import numpy as np

from wenxin.common.registry import RegisterSet
from wenxin.inference.backends import BackendError, EngineOptions, InferenceBackend

ONNX_FILE = "model.onnx"


@RegisterSet.inference_backends.register("onnxruntime")
class OnnxBackend(InferenceBackend):
    """ONNX Runtime's CPU execution provider on ``model.onnx``."""

    name = "onnxruntime"
    title = "ONNX Runtime"
    auto_order = 10  # before Paddle where the folder has its model (faster, see wenxin.inference.backends)

    def __init__(self, model_dir: str, meta: Dict[str, Any], options: EngineOptions) -> None:
        self.session = open_session(os.path.join(model_dir, ONNX_FILE), options.num_threads)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names: List[str] = [o.name for o in self.session.get_outputs()]

    @classmethod
    def unusable(cls, model_dir: str, use_gpu: bool) -> Optional[str]:
        if use_gpu:
            return "wenxin runs ONNX Runtime on the CPU only"
        if not os.path.isfile(os.path.join(model_dir, ONNX_FILE)):
            return f"{model_dir}: no {ONNX_FILE}; export it with wenxin export --format onnx"
        if importlib.util.find_spec("onnxruntime") is None:
            return "the onnxruntime package is not installed (pip install \"wenxin[onnx]\")"
        return None

    def run(self, batch: Dict[str, np.ndarray]) -> List[np.ndarray]:
        return self.session.run(self.output_names, {name: batch[name] for name in self.input_names})


def open_session(model_file: str, num_threads: int = 1) -> Any:
    """An ONNX Runtime session on ``model_file`` (CPU)."""
    import onnxruntime
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = num_threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    try:
        return onnxruntime.InferenceSession(model_file, options, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 (onnxruntime raises its own exception types)
        raise BackendError(f"{model_file}: cannot load the model ({type(e).__name__}: {e})") from None
