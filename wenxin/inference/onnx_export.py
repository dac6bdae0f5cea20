"""``wenxin export --format onnx``: the exported Paddle model converted to ``model.onnx`` with
paddle2onnx, kept only when ONNX Runtime reproduces Paddle Inference's outputs on real inputs."""
from __future__ import annotations

import contextlib
import io
import logging
import os
from typing import Dict

import numpy as np

from wenxin.inference.backends import ONNX_FILE, BackendError, OnnxEngine, largest_difference
from wenxin.inference.predictor import InferenceError, Predictor, _model_files

logger = logging.getLogger("wenxin")

OPSET = 13
TOLERANCE = 1e-5


def export_onnx(folder: str, check_batch: Dict[str, np.ndarray], tolerance: float = TOLERANCE) -> str:
    """Write ``folder/model.onnx`` beside the Paddle model in ``folder``; ``check_batch`` (input
    arrays by name, e.g. a collated dev batch) must give the same outputs in both within
    ``tolerance``, or nothing is written. Returns the ONNX file's path."""
    try:
        import paddle2onnx
    except ImportError:
        raise InferenceError('--format onnx needs paddle2onnx and onnxruntime: pip install "wenxin[onnx]"') from None
    graph, params = _model_files(folder)
    target = os.path.join(folder, ONNX_FILE)
    tmp = os.path.join(folder, f".{ONNX_FILE}.tmp")
    try:
        chatter = io.StringIO()  # paddle2onnx and polygraphy print their progress
        try:
            with contextlib.redirect_stdout(chatter), contextlib.redirect_stderr(chatter):
                paddle2onnx.export(graph, params, save_file=tmp, opset_version=OPSET, verbose=False)
        except Exception as e:  # noqa: BLE001 (paddle2onnx raises many types for an op it cannot convert)
            raise InferenceError(f"{folder}: paddle2onnx cannot convert this model ({type(e).__name__}: {e})") from None
        logger.debug("paddle2onnx: %s", chatter.getvalue())
        if not os.path.isfile(tmp):
            raise InferenceError(f"{folder}: paddle2onnx wrote no model ({chatter.getvalue().strip()[-500:]})")
        paddle = Predictor(folder, backend="paddle")
        batch = {name: check_batch[name] for name in paddle.input_names}
        try:
            got = OnnxEngine(tmp).run(batch)
        except BackendError as e:
            raise InferenceError(str(e)) from None
        expected = paddle.engine.run(batch)
        difference = largest_difference(expected, got)
        if not difference <= tolerance:
            raise InferenceError(f"{folder}: the ONNX model's outputs differ from Paddle's by {difference:.3g} "
                                 f"(more than {tolerance:g}) on {len(next(iter(batch.values())))} examples; "
                                 f"{ONNX_FILE} was not written")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    logger.info("exported %s (ONNX opset %d; outputs within %.2g of Paddle's on %d examples)", target, OPSET,
                difference, len(next(iter(batch.values()))))
    return target
