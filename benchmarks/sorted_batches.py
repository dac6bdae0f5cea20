"""Rows sorted by length into small batches, against batches in the callers' order, per model.

    python benchmarks/sorted_batches.py [--models bow cnn transformer ernie crf] [--rows 64] [--batch ROWS]
        [--chunks 8 16 32] [--backends paddle onnxruntime] [--seconds 2] [--rounds 3] [--texts generated|reviews]

For each model (``small_models.py``: trained for one epoch on generated data, exported with
``model.onnx`` where paddle2onnx converts it) and engine, it predicts groups of ``--rows`` texts
with ``Predictor.predict(rows, batch_size=--batch)`` (default: ``--rows``): once with the rows in
their order, in batches of ``--batch`` (no batching rule), and once for each ``--chunks`` size as the rule ``sorted_batch_rows``
would run them (sorted by length, batches of that many rows, each padded to its own longest),
even where the engine would veto it (``InferenceBackend.splits_batch``: Paddle running the whole
batch with oneDNN), so that the table shows what sorting costs there too.
The ways alternate in each round (A/B interleaved); medians are reported in texts per
CPU-second of this process (robust on a shared machine) beside texts per wall second, with each
sorted way's speed as a ratio to the ordered one. A model whose cost follows its padded length
(attention, convolutions over time) gains; one that costs less per row in larger batches (a bag
of words) loses. ``BaseModel.sorted_batch_rows`` is set from this table.

Results are compared too: the sorted way must give every row the label the ordered way gives
it, and probabilities within 1e-4 (padding changes only rounding).
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))
from wenxin.common.process_settings import apply_process_settings  # noqa: E402

apply_process_settings()  # as wenxin's entry points do, before Paddle loads
os.environ.setdefault("GLOG_minloglevel", "2")

from inference_backends import reviews  # noqa: E402
from measure import load_note  # noqa: E402


def rates(predictor: object, groups: List[List[List[str]]], rule: Optional[int], seconds: float,
          batch: int) -> Tuple[float, float]:
    """(texts per CPU-second, texts per wall second) of predicting ``groups`` in turn under ``rule``."""
    predictor.sorted_batch_rows = rule  # type: ignore[attr-defined]
    predict = predictor.predict  # type: ignore[attr-defined]
    predict(groups[0], batch_size=batch)
    count, start, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        predict(groups[count % len(groups)], batch_size=batch)
        count += 1
    texts = count * len(groups[0])
    return texts / max(time.process_time() - cpu, 1e-9), texts / (time.perf_counter() - start)


def check_results(predictor: object, groups: List[List[List[str]]], rule: int, batch: int) -> None:
    """The sorted way's results against the ordered way's: same labels, probabilities within 1e-4."""
    predictor.sorted_batch_rows = None  # type: ignore[attr-defined]
    ordered = [predictor.predict(g, batch_size=batch) for g in groups[:4]]  # type: ignore[attr-defined]
    predictor.sorted_batch_rows = rule  # type: ignore[attr-defined]
    for group, expected in zip(groups[:4], ordered):
        got = predictor.predict(group, batch_size=batch)  # type: ignore[attr-defined]
        for a, b in zip(expected, got):
            same = a.get("label") == b.get("label") and a.get("tags") == b.get("tags")
            far = max((abs(x - y) for x, y in zip(a.get("probs", []), b.get("probs", []))), default=0.0)
            if not same or far > 1e-4:
                raise SystemExit(f"sorted batches of {rule} changed a result: {a} -> {b}")


def main() -> None:
    from small_models import MODELS, sample_texts, trained_model
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS, choices=MODELS)
    parser.add_argument("--backends", nargs="+", default=["paddle", "onnxruntime"], choices=["paddle", "onnxruntime"])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--batch", type=int, default=0, help="predict's batch_size (default: --rows)")
    parser.add_argument("--chunks", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--texts", choices=["generated", "reviews"], default="generated")
    args = parser.parse_args()
    batch = args.batch or args.rows
    from wenxin.inference.predictor import Predictor
    print(f"groups of {args.rows} {args.texts} texts, Predictor.predict(batch_size={batch}) end to end, one thread; "
          f"{load_note()} at the start")
    print("| model | engine | in order: texts/CPU-s | " + " | ".join(f"sorted, {k} a batch: texts/CPU-s (ratio)"
                                                          for k in args.chunks) + " | in order: texts/s | "
          + " | ".join(f"sorted {k}: texts/s" for k in args.chunks) + " |")
    print("|---|---|---|" + "---|" * (2 * len(args.chunks) + 1))
    for name in args.models:
        model_dir = trained_model(name, tempfile.mkdtemp(prefix=f"sorted-{name}-"))
        pool = sample_texts(name) if args.texts == "generated" or name in ("ernie", "crf") else reviews(2000)
        rng = random.Random(0)
        groups = [[[t] for t in rng.sample(pool, args.rows)] for _ in range(20)]
        for backend in args.backends:
            if backend == "onnxruntime" and not os.path.isfile(os.path.join(model_dir, "model.onnx")):
                continue
            predictor = Predictor(model_dir, backend=backend)
            predictor.engine.splits_batch = lambda rows: True  # type: ignore[union-attr, method-assign]  # measure it anyway
            for k in args.chunks:
                check_results(predictor, groups, k, batch)
            ways: List[Optional[int]] = [None, *args.chunks]
            cpu: Dict[Optional[int], List[float]] = {w: [] for w in ways}
            wall: Dict[Optional[int], List[float]] = {w: [] for w in ways}
            for r in range(args.rounds):
                for way in (ways if r % 2 == 0 else list(reversed(ways))):
                    per_cpu, per_wall = rates(predictor, groups, way, args.seconds, batch)
                    cpu[way].append(per_cpu)
                    wall[way].append(per_wall)
            c = {w: statistics.median(v) for w, v in cpu.items()}
            s = {w: statistics.median(v) for w, v in wall.items()}
            cells = [f"{c[None]:.0f}"] + [f"{c[k]:.0f} ({c[k] / c[None]:.2f})" for k in args.chunks]
            cells += [f"{s[None]:.0f}"] + [f"{s[k]:.0f}" for k in args.chunks]
            print(f"| {name} | {backend} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
