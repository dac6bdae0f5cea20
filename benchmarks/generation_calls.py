"""A/B of two generation exports' decoding calls in one process: ``prefill`` of one prompt and
``extend`` of R rows after N cached columns, each export's Predictor (Paddle backend) in turn, so
that the two see the same machine. For exports of one model in two layouts, e.g. an ERNIE-Gen
export of ``infill`` against one of ``prefill`` and ``extend`` (``generation_serving.erniegen_export``
builds one at ERNIE 3.0-medium's shape)::

    python benchmarks/generation_calls.py EXPORT_A EXPORT_B --rows 1 16 --rounds 40

Prints, per call, the median CPU and wall milliseconds of each export and B/A (below 1: B is
cheaper), with the load average (``--steps N``: also N steps of each export's batch decoder at
each ``--rows``, alternating step by step, the rows' caches in place where the export allows);
the prompt is ``--row`` (a row of the export's fields), by default two sources of 12 and 20 letters.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Callable, Dict, List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402

from wenxin.inference.predictor import Predictor  # noqa: E402


def timed(call: Callable[[], object]) -> tuple:
    cpu, wall = time.process_time(), time.perf_counter()
    call()
    return (time.process_time() - cpu) * 1000, (time.perf_counter() - wall) * 1000


def calls(predictor: Predictor, row: List[str], rows: int, columns: int) -> Dict[str, Callable[[], object]]:
    """The calls to time: ``prefill`` of ``row``, and ``extend`` of ``rows`` rows after ``columns``."""
    prompt = predictor.prompt(row)
    first = predictor.run_step("prefill", prompt)
    cache = np.repeat(np.resize(first["cache"], first["cache"].shape[:4] + (columns,) + first["cache"].shape[5:]),
                      rows, axis=2)
    step = {"tokens": np.full(rows, 5, dtype=np.int64), "positions": np.full(rows, columns, dtype=np.int64),
            "cache": np.ascontiguousarray(cache), "visible": np.ones((rows, columns + 1), dtype=np.float32)}
    return {"prefill": lambda: predictor.run_step("prefill", prompt),
            f"extend {rows} rows": lambda: predictor.run_step("extend", step)}


def decoding_steps(predictors: List[Predictor], row: List[str], rows: int, steps: int) -> Dict[str, object]:
    """``steps`` decoding steps of a batch of ``rows`` copies of ``row`` in each export's own
    decoder (its rows' caches in place where the export allows: ``Predictor.in_place_cache``),
    alternating step by step; the median CPU- and wall-ms a step."""
    from wenxin.models.batch_decoding import BatchDecoder
    from wenxin.models.decoding import DecodeSettings, new_search
    settings = DecodeSettings("greedy", max_new_tokens=steps + 8, eos_id=None)
    decoders = []
    for predictor in predictors:
        decoder = BatchDecoder(predictor.run_step, True, predictor.in_place_cache)
        for key in range(rows):
            decoder.add(key, predictor.prompt(row), new_search(settings))
        for _ in range(3):  # warm up
            decoder.step()
        decoders.append(decoder)
    times: List[List[tuple]] = [[], []]
    for _ in range(steps):
        for index, decoder in enumerate(decoders):
            times[index].append(timed(decoder.step))
    cpu = [statistics.median(t[0] for t in series) for series in times]
    wall = [statistics.median(t[1] for t in series) for series in times]
    return {"call": f"{steps} decoding steps of {rows} rows", "cpu_ms": [round(c, 2) for c in cpu],
            "wall_ms": [round(w, 2) for w in wall], "cpu_b_over_a": round(cpu[1] / cpu[0], 3),
            "wall_b_over_a": round(wall[1] / wall[0], 3), "load": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--columns", type=int, default=60, help="cached columns before an extend")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--steps", type=int, default=0,
                        help="also time this many steps of each export's batch decoder at each --rows")
    parser.add_argument("--row", nargs="+", default=["a b c d e f g h a b c d", "e f g h a b c d e f g h a b c d e f g h"])
    args = parser.parse_args()
    predictors = [Predictor(args.a, num_threads=1), Predictor(args.b, num_threads=1)]
    for rows in args.rows if args.steps else []:
        print(json.dumps(decoding_steps(predictors, args.row, rows, args.steps)))
    for rows in args.rows:
        chosen = [calls(p, args.row, rows, args.columns) for p in predictors]
        for name in chosen[0]:
            if name == "prefill" and rows != args.rows[0]:
                continue
            for variant in chosen:  # warm up
                variant[name]()
            times: List[List[tuple]] = [[], []]
            for _ in range(args.rounds):
                for index, variant in enumerate(chosen):  # A/B interleaved
                    times[index].append(timed(variant[name]))
            cpu = [statistics.median(t[0] for t in series) for series in times]
            wall = [statistics.median(t[1] for t in series) for series in times]
            print(json.dumps({"call": name, "cpu_ms": [round(c, 2) for c in cpu], "wall_ms": [round(w, 2) for w in wall],
                              "cpu_b_over_a": round(cpu[1] / cpu[0], 3), "wall_b_over_a": round(wall[1] / wall[0], 3),
                              "load": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
