"""A turn's decoding rows and prompt part in one call (``advance_pair``) or two (``advance`` twice),
on ONNX Runtime (float32, one thread) at a model folder's shape: CPU-ms a turn, A/B interleaved.

Both programs are traced from the same weights (``paddle.jit.save``), converted by paddle2onnx as
``wenxin export --format onnx`` converts ``advance`` (``convert_in_subprocess``), and run side by
side in one process; each measurement is the median of ``--repeats`` alternating calls of each
kind. ``turn`` rows: ``ROWS`` decoding rows after ``--context`` cached tokens plus one prompt part
of ``P`` tokens (after one hidden column), as two calls and as one; ``part`` 0: the decoding rows
alone (``advance``)::

    python benchmarks/advance_pair_step.py /tmp/b03/folder /tmp/pair-work --rows 1 16 --parts 16 32 64
"""
import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Dict, List

import numpy as np


def trace(folder: str, work: str) -> Dict[str, str]:
    """Save ``advance`` and ``advance_pair`` of the folder's decoder, then convert each to ONNX."""
    import paddle
    from paddle.static import InputSpec

    from wenxin.inference.onnx_export import convert_in_subprocess
    from wenxin.models.advance_pair import StepRows, advance_pair
    from wenxin.models.advance_step import layer_cache_names
    from wenxin.models.ernie45 import advance_step, load_ernie45

    model = load_ernie45(folder)
    model.eval()
    config = model.config
    layers = config.num_hidden_layers

    def group_specs(prefix: str) -> List[InputSpec]:
        return [InputSpec([-1, -1], "int64", f"{prefix}tokens"), InputSpec([-1, -1], "int64", f"{prefix}positions"),
                InputSpec([-1, -1, -1], "float32", f"{prefix}visible"),
                *[InputSpec([-1, config.num_key_value_heads, -1, config.head_dim], "float32", f"{prefix}{name}")
                  for name in layer_cache_names(layers)]]

    def rows(inputs, prefix: str) -> "StepRows":  # type: ignore[no-untyped-def]
        names = layer_cache_names(layers)
        past = [(inputs[prefix + names[i]], inputs[prefix + names[i + 1]]) for i in range(0, len(names), 2)]
        return StepRows(inputs[prefix + "tokens"], inputs[prefix + "positions"], inputs[prefix + "visible"], past)

    class One(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, inputs):  # type: ignore[no-untyped-def]  # a dict, as the export's step graphs
            group = rows(inputs, "")
            return advance_step(self.m.model, self.m.output_weight(), group.tokens, group.positions, group.visible,
                                group.past)

    class Pair(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, inputs):  # type: ignore[no-untyped-def]
            return advance_pair(self.m.model, self.m.output_weight(), rows(inputs, "a_"), rows(inputs, "b_"))

    files = {}
    for name, layer, specs in (("advance", One(), group_specs("")),
                               ("pair", Pair(), group_specs("a_") + group_specs("b_"))):
        target = os.path.join(work, f"{name}.onnx")
        if not os.path.isfile(target):
            prefix = os.path.join(work, name)
            with paddle.no_grad():
                paddle.jit.save(layer, prefix, input_spec=[{spec.name: spec for spec in specs}])
            convert_in_subprocess(prefix + ".json", prefix + ".pdiparams", target, work)
            for suffix in (".json", ".pdiparams"):
                os.remove(prefix + suffix)
        files[name] = target
    return files


def group(session_inputs: List[Any], prefix: str, rows: int, new: int, context: int,
          rng: np.random.Generator) -> Dict[str, np.ndarray]:
    """A group's inputs: ``rows`` rows of ``new`` tokens after ``context`` cached columns (the
    caches' heads and width as the session's inputs declare them)."""
    feeds = {f"{prefix}tokens": rng.integers(3, 256, (rows, new)).astype(np.int64),  # ids any vocabulary has
             f"{prefix}positions": (context + np.arange(new))[None].repeat(rows, 0).astype(np.int64)}
    visible = np.ones((rows, new, context + new), np.float32)
    visible[:, :, context:] = np.tril(np.ones((new, new), np.float32))
    feeds[f"{prefix}visible"] = visible
    for spec in session_inputs:
        if spec.name.startswith(prefix + "keys_") or spec.name.startswith(prefix + "values_"):
            heads, width = spec.shape[1], spec.shape[3]  # [R, KV, N, D]
            feeds[spec.name] = rng.standard_normal((rows, heads, context, width)).astype(np.float32)
    return feeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder")
    parser.add_argument("work")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--parts", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    files = trace(args.folder, args.work)
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3
    sessions = {name: ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
                for name, path in files.items()}
    inputs = {name: s.get_inputs() for name, s in sessions.items()}
    rng = np.random.default_rng(0)

    def timed(runs: Dict[str, List]) -> Dict[str, float]:
        """Alternate the kinds' calls; the median CPU-ms of each kind's whole list of calls."""
        spent: Dict[str, List[float]] = {kind: [] for kind in runs}
        for calls in runs.values():  # a warm-up each
            for session, feeds in calls:
                session.run(None, feeds)
        for _ in range(args.repeats):
            for kind, calls in runs.items():
                start = time.process_time()
                for session, feeds in calls:
                    session.run(None, feeds)
                spent[kind].append((time.process_time() - start) * 1e3)
        return {kind: round(statistics.median(times), 1) for kind, times in spent.items()}

    one, pair = sessions["advance"], sessions["pair"]
    for rows in args.rows:
        decoding = group(inputs["advance"], "", rows, 1, args.context, rng)
        as_first = {f"a_{k}": v for k, v in decoding.items()}
        print(json.dumps({"rows": rows, "part": 0, **timed({"advance": [(one, decoding)]})}), flush=True)
        for part in args.parts:
            prompt = group(inputs["advance"], "", 1, part, 1, rng)
            prompt["visible"][:, :, 0] = 0.0  # the hidden column before an empty cache
            second = {f"b_{k}": v for k, v in prompt.items()}
            result = timed({"two_calls": [(one, decoding), (one, prompt)],
                            "one_pair_call": [(pair, {**as_first, **second})]})
            print(json.dumps({"rows": rows, "part": part, **result,
                              "ratio": round(result["two_calls"] / result["one_pair_call"], 2)}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
