"""The check of a converted ``model.onnx`` against the Paddle model it came from, run as a child
process of the export (``python -m wenxin.inference.onnx_check FOLDER ONNX_FILE BATCH_FILE``):
loading the Paddle model again and an ONNX Runtime session of it takes the model's memory twice
over, which the training process that exports its result must not hold on top of its own. Paddle
runs first and is let go before ONNX Runtime loads, so that the child holds one copy at a time.

It prints one JSON line: ``{"difference", "flips", "rows"}`` (the largest difference of the
outputs, how many integer outputs differ, and the batch's rows; for a generation export's step
function, ``python -m ... FOLDER ONNX_FILE BATCH_FILE advance``, the logits' ``scale`` too, and as
``flips`` the rows whose best next token differs), or ``{"error"}``. A batch file may hold several
batches (``batch_file_arrays``), compared one after the other on the same two engines: the largest
difference and scale, the flips and rows summed.
"""
from __future__ import annotations

import gc
import json
import sys
from typing import Any, Dict, List, Optional, Sequence

import numpy as np


def compare(folder: str, onnx_file: str, batches: Sequence[Dict[str, np.ndarray]], program: str = "") -> Dict[str, Any]:
    """Both engines on each of ``batches`` (``program``: a generation export's step function, else
    the folder's one graph); one result (see the module docstring)."""
    from wenxin.common.errors import WenxinError
    from wenxin.inference.backends import BackendError, largest_difference
    from wenxin.inference.onnx_backend import open_session
    from wenxin.inference.predictor import Predictor
    results = []
    try:
        paddle = Predictor(folder, backend="paddle", load_model=not program)
        engine = paddle.engine if not program else paddle_engine(folder, paddle.meta, program)
        assert engine is not None  # loaded: Predictor's default
        feeds = [{name: batch[name.split("__")[-1]] for name in engine.input_names}  # a static program's step__name
                 for batch in batches]
        expected = [engine.run(inputs) for inputs in feeds]
        del paddle, engine  # one engine's copy of the weights at a time
        gc.collect()
        session = open_session(onnx_file)
        for inputs, want in zip(feeds, expected):
            got = session.run([o.name for o in session.get_outputs()], inputs)
            flips = sum(int(np.sum(a != b)) for a, b in zip(want, got) if a.dtype.kind in "iu" and a.shape == b.shape)
            result = {"difference": float(largest_difference(want, got)), "flips": flips,
                      "rows": len(next(iter(inputs.values())))}
            if program:  # a step's first output is its logits [R, V]: their scale, and the rows whose best token moved
                result["scale"] = float(np.abs(want[0]).max())
                result["flips"] = int(np.sum(want[0].argmax(-1) != got[0].argmax(-1)))
            results.append(result)
    except (BackendError, WenxinError) as e:
        return {"error": str(e)}
    return merged(results)


def paddle_engine(folder: str, meta: Dict[str, Any], program: str) -> Any:
    """Paddle Inference on the step program ``program`` of the export in ``folder`` (any of them,
    ``advance_pair`` too, which a Predictor does not load)."""
    from wenxin.inference.backends import EngineOptions
    from wenxin.inference.paddle_backend import PaddleBackend
    return PaddleBackend(folder, meta, EngineOptions(False, 1, {"program": program}))


def batch_file_arrays(batches: Sequence[Dict[str, np.ndarray]]) -> Dict[str, np.ndarray]:
    """``batches`` as one batch file's arrays (``np.savez``): each input as ``<batch>:<name>``."""
    return {f"{index}:{name}": value for index, batch in enumerate(batches) for name, value in batch.items()}


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    folder, onnx_file, batch_file = args[:3]
    batches: Dict[str, Dict[str, np.ndarray]] = {}
    with np.load(batch_file) as loaded:
        for key in loaded.files:
            index, _, name = key.rpartition(":")
            batches.setdefault(index, {})[name] = loaded[key]
    print(json.dumps(compare(folder, onnx_file, list(batches.values()), args[3] if len(args) > 3 else "")))
    return 0


def merged(results: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """One result of several batches' (see the module docstring)."""
    out = {"difference": max(r["difference"] for r in results), "flips": sum(r["flips"] for r in results),
           "rows": sum(r["rows"] for r in results)}
    if "scale" in results[0]:
        out["scale"] = max(r["scale"] for r in results)
    return out


if __name__ == "__main__":
    sys.exit(main())
