"""ONNX Runtime: the ``onnxruntime`` backend, for a folder that holds a ``model.onnx`` or, for a
generation model, its step program (``wenxin export --format onnx``): ``advance_pair.onnx``, or
``advance.onnx`` in exports before the pair ran a group of no rows, or ERNIE-Gen's ``infill.onnx``;
``onnxruntime-int8`` runs the int8 copy beside it (``advance_pair.int8.onnx``, or
``advance.int8.onnx`` in exports before issue 69's fused turns, ``infill.int8.onnx``: weights
quantized per output channel, activations per token, ``wenxin.inference.onnx_quantize``). A large
program is loaded from its copy with the weights packed on disk (``wenxin.inference.onnx_prepacked``)."""
from __future__ import annotations

import importlib.util
import logging
import os
from typing import Any, Dict, List, Mapping, Optional

import numpy as np

from wenxin.common.registry import RegisterSet
from wenxin.data.export_bundle import ADVANCE_STEP, INFILL_STEP, MODEL_PREFIX
from wenxin.inference.backends import BackendError, EngineOptions, InferenceBackend
from wenxin.inference.onnx_prepacked import discard, prepacked_program
from wenxin.inference.paddle_backend import generation_files
from wenxin.models.advance_step import PAIR

logger = logging.getLogger("wenxin")
ONNX_FILE = "model.onnx"
INT8 = ".int8"  # the int8 copy of a program: advance.int8.onnx beside advance.onnx


def onnx_file(program: str, variant: str = "") -> str:
    """The ONNX file of a folder's ``program`` (``inference``: ``model.onnx``; a step function:
    ``<name>.onnx``), or of its ``variant`` (``INT8``)."""
    return f"{'model' if program == MODEL_PREFIX else program}{variant}.onnx"


@RegisterSet.inference_backends.register("onnxruntime")
class OnnxBackend(InferenceBackend):
    """ONNX Runtime's CPU execution provider on ``model.onnx`` (setting ``program``: the step
    function of a generation export, ``advance``)."""

    name = "onnxruntime"
    title = "ONNX Runtime"
    auto_order = 10  # before Paddle where the folder has its model (faster, see wenxin.inference.backends)
    variant = ""  # which copy of the program it runs ("": float32)

    def __init__(self, model_dir: str, meta: Dict[str, Any], options: EngineOptions) -> None:
        program = options.settings.get("program", MODEL_PREFIX)
        self.session = open_program(model_dir, onnx_file(program, self.variant), options.num_threads)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names: List[str] = [o.name for o in self.session.get_outputs()]

    @classmethod
    def unusable(cls, model_dir: str, use_gpu: bool) -> Optional[str]:
        if use_gpu:
            return "wenxin runs ONNX Runtime on the CPU only"
        programs = (PAIR, ADVANCE_STEP, INFILL_STEP) if generation_files(model_dir) else (MODEL_PREFIX,)
        names = [onnx_file(program, cls.variant) for program in programs]
        if not any(os.path.isfile(os.path.join(model_dir, name)) for name in names):
            return f"{model_dir}: no {' or '.join(names)}; export it with wenxin export --format onnx"
        if importlib.util.find_spec("onnxruntime") is None:
            return "the onnxruntime package is not installed (pip install \"wenxin[onnx]\")"
        return None

    def run(self, batch: Dict[str, np.ndarray]) -> List[np.ndarray]:
        return self.session.run(self.output_names, {name: batch[name] for name in self.input_names})

    @classmethod
    def holds_pair_alone(cls, model_dir: str, steps: Mapping[str, Mapping[str, Any]]) -> bool:
        """Where the export holds the pair's ONNX file (``advance_pair.onnx``, or
        ``advance_pair.int8.onnx``, which older exports have beside ``advance.onnx``: the int8
        engine runs their pair beside a lone row)."""
        return PAIR in steps and os.path.isfile(os.path.join(model_dir, onnx_file(PAIR, cls.variant)))


@RegisterSet.inference_backends.register("onnxruntime-int8")
class OnnxInt8Backend(OnnxBackend):
    """ONNX Runtime on a generation export's int8 copy (``advance_pair.int8.onnx``). Never chosen by
    ``auto``: its numbers are not the float32 model's (docs/serving.md states how far)."""

    name = "onnxruntime-int8"
    title = "ONNX Runtime int8"
    auto_order = 0
    variant = INT8


def open_program(model_dir: str, name: str, num_threads: int = 1) -> Any:
    """A session on the export's program ``name``: on its copy with the weights packed on disk where
    there is one (``wenxin.inference.onnx_prepacked``), else on the program as it is."""
    program_file = os.path.join(model_dir, name)
    packed = prepacked_program(model_dir, name)
    if packed is not None:
        try:
            return open_session(packed, num_threads)
        except BackendError as e:
            logger.warning("%s; loading %s as it is (the packed copy is deleted)", e, program_file)
            discard(packed)
    return open_session(program_file, num_threads)


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
