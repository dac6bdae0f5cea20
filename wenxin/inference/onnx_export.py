"""``wenxin export --format onnx``: the exported Paddle model converted to ``model.onnx`` with
paddle2onnx, kept only when ONNX Runtime reproduces Paddle Inference's outputs on real inputs."""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
from typing import Any, Dict

import numpy as np

from wenxin.common.errors import InferenceError
from wenxin.data.export_bundle import seal_export
from wenxin.inference.onnx_backend import ONNX_FILE
from wenxin.inference.paddle_backend import generation_files, model_files

logger = logging.getLogger("wenxin")

OPSET = 13
TOLERANCE = 1e-5
CHECK_ROWS = 32  # dev examples both engines must agree on before model.onnx is kept


# paddle2onnx aborts the whole process (SIGABRT) on an operator it does not support, as it does
# for the CRF taggers' decoding; it runs in a child process so that this is one error line.
# Its default graph optimizer is Polygraphy, which paddle2onnx runs with POLYGRAPHY_AUTOINSTALL_DEPS=1:
# Polygraphy then pip-installs what it misses (sympy, for ONNX Runtime's shape inference). Nothing
# may install packages at run time, so the optimizer is onnxoptimizer (a dependency of paddle2onnx),
# and the child cannot reach a package index (PIP_NO_INDEX) should anything else try.
CONVERT = ("import inspect, sys, paddle2onnx\n"
           "settings = dict(save_file=sys.argv[3], opset_version=int(sys.argv[4]), verbose=False)\n"
           "if 'optimize_tool' in inspect.signature(paddle2onnx.export).parameters:\n"
           "    settings['optimize_tool'] = 'onnxoptimizer'\n"
           "paddle2onnx.export(sys.argv[1], sys.argv[2], **settings)\n")


def convert_in_subprocess(graph: str, params: str, target: str, folder: str) -> None:
    """Run paddle2onnx on the Paddle model files in a child process; raise one InferenceError,
    with paddle2onnx's own error line, when it fails or crashes."""
    env = {**os.environ, "GLOG_minloglevel": "2", "PIP_NO_INDEX": "1", "POLYGRAPHY_AUTOINSTALL_DEPS": "0"}
    try:
        proc = subprocess.run([sys.executable, "-c", CONVERT, graph, params, target, str(OPSET)], env=env,
                              capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        raise InferenceError(f"{folder}: paddle2onnx did not finish within 30 minutes") from None
    output = proc.stdout + proc.stderr
    logger.debug("paddle2onnx: %s", output)
    if proc.returncode == 0 and os.path.isfile(target):
        return
    errors = [line.split("]")[-1].strip() for line in output.splitlines() if "[ERROR]" in line]
    last = [line.strip() for line in output.splitlines() if line.strip()][-1:] or [f"exit status {proc.returncode}"]
    detail = "; ".join(dict.fromkeys(errors)) or last[0]
    raise InferenceError(f"{folder}: paddle2onnx cannot convert this model ({detail}); the Paddle model is "
                         f"exported and runs with the paddle backend")


def check_in_subprocess(folder: str, onnx_file: str, batch: Dict[str, np.ndarray]) -> Dict[str, Any]:
    """ONNX Runtime's outputs against Paddle Inference's on ``batch``, compared in a child process
    (``wenxin.inference.onnx_check``): the two engines' copies of the model stay out of the
    exporting process (a training run's), whose peak memory they would otherwise raise by about
    twice the model's size."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="wenxin-onnx-check-") as scratch:
        batch_file = os.path.join(scratch, "batch.npz")
        np.savez(batch_file, **batch)  # type: ignore[arg-type]  # (numpy stubs read **kwds as allow_pickle)
        env = {**os.environ, "GLOG_minloglevel": "2"}
        try:
            proc = subprocess.run([sys.executable, "-m", "wenxin.inference.onnx_check", folder, onnx_file, batch_file],
                                  env=env, capture_output=True, text=True, timeout=1800)
        except subprocess.TimeoutExpired:
            raise InferenceError(f"{folder}: checking {ONNX_FILE} against Paddle did not finish within 30 minutes") \
                from None
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        last = [line.strip() for line in proc.stderr.splitlines() if line.strip()][-1:] or [f"exit {proc.returncode}"]
        raise InferenceError(f"{folder}: checking {ONNX_FILE} against Paddle failed ({last[0][:300]})")
    result: Dict[str, Any] = json.loads(lines[-1])
    if "error" in result:
        raise InferenceError(str(result["error"]))
    return result


def check_batch(readers: Dict[str, Any], rows: int = CHECK_ROWS) -> Dict[str, np.ndarray]:
    """The batch both engines must agree on: the first ``rows`` dev examples (else training's)."""
    reader = readers.get("dev_reader") or readers["train_reader"]
    return reader.collate_rows(list(range(min(rows, len(reader)))))


def export_onnx(folder: str, check_batch: Dict[str, np.ndarray], tolerance: float = TOLERANCE) -> str:
    """Write ``folder/model.onnx`` beside the Paddle model in ``folder``; ``check_batch`` (input
    arrays by name, e.g. a collated dev batch) must give the same outputs in both within
    ``tolerance``, or nothing is written. Returns the ONNX file's path."""
    if importlib.util.find_spec("paddle2onnx") is None:
        raise InferenceError('--format onnx needs paddle2onnx and onnxruntime: pip install "wenxin[onnx]"')
    files = model_files(folder)
    steps = generation_files(folder)
    if files is None and steps is not None:
        raise InferenceError(f"{folder}: a generation model's export (step programs such as "
                             f"{os.path.basename(steps[0])}) "
                             f"is written and runs with the paddle backend; converting it to ONNX is not supported")
    if files is None:
        raise InferenceError(f"{folder}: no exported Paddle model to convert")
    graph, params = files
    target = os.path.join(folder, ONNX_FILE)
    tmp = os.path.join(folder, f".{ONNX_FILE}.tmp")
    try:
        convert_in_subprocess(graph, params, tmp, folder)
        checked = check_in_subprocess(folder, tmp, check_batch)
        difference, rows = checked["difference"], checked["rows"]
        if not difference <= tolerance:
            why = (f"; {checked['flips']} predicted ids differ, as a near-tie between two labels can under float "
                   f"rounding") if checked["flips"] else ""
            raise InferenceError(f"{folder}: the ONNX model's outputs differ from Paddle's by {difference:.3g} "
                                 f"(more than {tolerance:g}) on {rows} examples{why}; {ONNX_FILE} was not written")
        os.replace(tmp, target)
        seal_export(folder)  # the manifest now covers model.onnx too
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    logger.info("exported %s (ONNX opset %d; outputs within %.2g of Paddle's on %d examples)", target, OPSET,
                difference, rows)
    return target
