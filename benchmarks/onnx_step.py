"""The ``advance`` step of an export on ONNX Runtime or Paddle Inference, program against program,
in one run: CPU-ms a token for a decode step of 1 and of 16 rows and for a prompt of 64 tokens
(issue 69).

Each ``--program`` (a file of the export folder, or a path: a Paddle program's ``.json`` runs on
Paddle Inference, ``advance.json`` or ``advance_pair.json``; an ONNX file on ONNX Runtime:
``advance_pair.onnx`` or
``advance_pair.int8.onnx``, run as ``advance`` beside a group of no rows as the engines run it
where the export's pair takes one, else beside a lone row; ``FILE:lone`` or ``FILE:none`` picks;
``advance.onnx`` and ``advance.int8.onnx`` of older exports; or another variant made beside them,
such as an older export's program with one ``cache`` array) gets its own session with
``--threads`` threads; the programs are timed in rounds that alternate which goes first, each
shape ``--repeat`` times, after one warm-up call. It prints CPU and wall milliseconds a token
(medians over rounds) and each program's largest logits difference from the first one at every
shape, and whether a row batched gets its logits alone.

    python benchmarks/onnx_step.py FOLDER --program advance_pair.int8.onnx:lone advance_pair.int8.onnx:none
    python benchmarks/onnx_step.py FOLDER --program OLDER_EXPORT/advance.onnx advance_pair.onnx advance.json \
        advance_pair.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Callable, Dict, List, NamedTuple

import numpy as np

# the first output of ``advance`` is its logits [rows, vocab]


def shapes(empty: np.ndarray, context: int) -> Dict[str, Dict[str, np.ndarray]]:
    """Inputs of ``advance`` for each measured case, with one ``cache`` array (``as_fed`` gives a
    program its own form): after a cache of ``context`` columns of random values, 1 and 16 rows
    of one token, and one row of a 64-token prompt. ``empty``: ``advance_step.empty_cache``."""
    rng = np.random.default_rng(0)
    layers, two, _, heads, _, dim = empty.shape

    def case(rows: int, new: int, before: int) -> Dict[str, np.ndarray]:
        cache = rng.standard_normal((layers, two, rows, heads, before, dim)).astype(np.float32)
        columns = np.arange(before + new)[None, :]
        visible = (columns <= before + np.arange(new)[:, None]).astype(np.float32)
        return {"tokens": rng.integers(3, 1000, (rows, new)).astype(np.int64),
                "positions": np.broadcast_to(before + np.arange(new), (rows, new)).astype(np.int64).copy(),
                "cache": cache, "visible": np.broadcast_to(visible, (rows, new, before + new)).copy()}

    return {"decode 1 row": case(1, 1, context), "decode 16 rows": case(16, 1, context),
            "prompt of 64": case(1, 64, 0)}


def as_fed(feed: Dict[str, np.ndarray], inputs: List[str], second: str) -> Dict[str, np.ndarray]:
    """``feed`` as a program with ``inputs`` takes it: one ``cache`` array (exports before the
    cache stayed in place), each layer's keys and values (``advance_step.layer_inputs``), or those
    as ``advance_pair``'s first group beside ``second``: ``none`` (``advance_step.no_rows``) or
    ``lone`` (``advance_step.lone_row``, whose logits are one row more)."""
    from wenxin.models.advance_step import SECOND, layer_inputs, lone_row, no_rows, pair_feed, with_hidden_column
    if "cache" in inputs:
        return feed
    cache, visible = with_hidden_column(feed["cache"], feed["visible"])
    fed = {"tokens": feed["tokens"], "positions": feed["positions"], "visible": visible, **layer_inputs(cache)}
    if f"{SECOND}tokens" not in inputs:
        return fed
    return pair_feed(fed, no_rows(fed) if second == "none" else lone_row(fed))


class Program(NamedTuple):
    """One program's input names (as ``advance`` names them) and a call of it on such a feed."""

    inputs: List[str]
    run: Callable[[Dict[str, np.ndarray]], List[np.ndarray]]


def opened(path: str, threads: int) -> Program:
    """An ONNX Runtime session on an ``.onnx`` file, else Paddle Inference on a ``.json`` program
    (as the ``paddle`` backend runs it: a static program's inputs are named ``<step>__<name>``)."""
    if path.endswith(".json"):
        from wenxin.inference.backends import EngineOptions
        from wenxin.inference.paddle_backend import PaddleBackend
        folder, program = os.path.dirname(path), os.path.basename(path)[:-len(".json")]
        with open(os.path.join(folder, "preprocess.json"), encoding="utf-8") as f:
            meta = json.load(f)
        engine = PaddleBackend(folder, meta, EngineOptions(False, threads, {"program": program}))
        names = list(engine.input_names)
        return Program([n.rsplit("__", 1)[-1] for n in names],
                       lambda feed: engine.run({n: np.ascontiguousarray(feed[n.rsplit("__", 1)[-1]]) for n in names}))
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = threads
    options.log_severity_level = 3  # not paddle2onnx's unused constants
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return Program([i.name for i in session.get_inputs()], lambda feed: session.run(None, feed))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    parser.add_argument("--program", nargs="+", default=["advance_pair.onnx", "advance_pair.int8.onnx"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--context", type=int, default=64, help="cached columns before a decode step")
    args = parser.parse_args()
    with open(os.path.join(args.folder, "preprocess.json"), encoding="utf-8") as f:
        steps = json.load(f)["steps"]
    from wenxin.models.advance_step import empty_cache, pair_runs_alone
    cases = shapes(empty_cache(steps), args.context)
    programs, seconds = {}, {}
    for name in args.program:
        file, _, second = name.partition(":")
        seconds[name] = second or ("none" if pair_runs_alone(steps) else "lone")
        programs[name] = opened(os.path.join(args.folder, file), args.threads)
    feeds = {name: {case: as_fed(feed, program.inputs, seconds[name]) for case, feed in cases.items()}
             for name, program in programs.items()}
    logits: Dict[str, Dict[str, np.ndarray]] = {name: {} for name in programs}
    for name, program in programs.items():  # warm-up, and each program's logits
        for case, feed in feeds[name].items():
            logits[name][case] = program.run(feed)[0][:len(feed["tokens"])]  # a pair's lone row dropped
    cpu: Dict[str, Dict[str, List[float]]] = {n: {c: [] for c in cases} for n in programs}
    wall: Dict[str, Dict[str, List[float]]] = {n: {c: [] for c in cases} for n in programs}
    for round_ in range(args.rounds):
        order = list(programs) if round_ % 2 == 0 else list(reversed(list(programs)))
        for name in order:
            for case, feed in feeds[name].items():
                tokens = feed["tokens"].size
                c0, w0 = time.process_time(), time.perf_counter()
                for _ in range(args.repeat):
                    programs[name].run(feed)
                cpu[name][case].append((time.process_time() - c0) * 1e3 / args.repeat / tokens)
                wall[name][case].append((time.perf_counter() - w0) * 1e3 / args.repeat / tokens)
    first = args.program[0]
    print(f"{args.threads} thread(s), {args.rounds} rounds x {args.repeat}, decode after {args.context} columns")
    print("| program | " + " | ".join(f"{c}: CPU-ms/token (wall)" for c in cases) + " | largest logits difference from "
          f"{first} | 16 rows batched vs alone |")
    print("|---" * (len(cases) + 3) + "|")
    lone_feed = {k: (v[:, :, :1] if k == "cache" else v[:1]) for k, v in cases["decode 16 rows"].items()}  # row 0
    for name, program in programs.items():
        cells = [f"{statistics.median(cpu[name][c]):.2f} ({statistics.median(wall[name][c]):.2f})" for c in cases]
        difference = max(float(np.abs(logits[name][c] - logits[first][c]).max()) for c in cases)
        lone = program.run(as_fed(lone_feed, program.inputs, seconds[name]))[0][:1]
        batched = float(np.abs(logits[name]["decode 16 rows"][:1] - lone).max())
        print(f"| {name} | " + " | ".join(cells) + f" | {difference:.3g} | {batched:.3g} |")


if __name__ == "__main__":
    main()
