"""The check of a converted ``model.onnx`` against the Paddle model it came from, run as a child
process of the export (``python -m wenxin.inference.onnx_check FOLDER ONNX_FILE BATCH_FILE``):
loading the Paddle model again and an ONNX Runtime session of it takes about twice the model's
memory, which the training process that exports its result must not hold on top of its own.

It prints one JSON line: ``{"difference", "flips", "rows"}`` (the largest difference of the
outputs, how many integer outputs differ, and the batch's rows), or ``{"error"}``.
"""
from __future__ import annotations

import json
import sys
from typing import Any, Dict, List, Optional

import numpy as np


def compare(folder: str, onnx_file: str, batch: Dict[str, np.ndarray]) -> Dict[str, Any]:
    from wenxin.common.errors import WenxinError
    from wenxin.inference.backends import BackendError, largest_difference
    from wenxin.inference.onnx_backend import open_session
    from wenxin.inference.predictor import Predictor
    try:
        paddle = Predictor(folder, backend="paddle")
        inputs = {name: batch[name] for name in paddle.input_names}
        session = open_session(onnx_file)
        got = session.run([o.name for o in session.get_outputs()], inputs)
        assert paddle.engine is not None  # loaded: Predictor's default
        expected = paddle.engine.run(inputs)
    except (BackendError, WenxinError) as e:
        return {"error": str(e)}
    flips = sum(int(np.sum(a != b)) for a, b in zip(expected, got) if a.dtype.kind in "iu" and a.shape == b.shape)
    return {"difference": float(largest_difference(expected, got)), "flips": flips,
            "rows": len(next(iter(inputs.values())))}


def main(argv: Optional[List[str]] = None) -> int:
    folder, onnx_file, batch_file = (sys.argv[1:] if argv is None else argv)[:3]
    with np.load(batch_file) as loaded:
        batch = {name: loaded[name] for name in loaded.files}
    print(json.dumps(compare(folder, onnx_file, batch)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
