"""Teacher against student: what serving one text costs each, end to end through the
``Predictor`` (text conversion, the model, the result), on the distillation example's test set.

    python benchmarks/distillation_speed.py TEACHER_MODEL STUDENT_MODEL [--batches 1 32] [--rounds 5]

The teacher reads the raw reviews (``examples/data/sentiment/test.tsv``), the student the same
reviews cut into words (``examples/data/distillation/test.tsv``). Each round predicts the whole
test set with each model in turn (A/B interleaved, one CPU thread each), at each batch size; the
medians of CPU time per text (robust on a shared machine) and of wall time are reported, with
the student's speed-up, and each model's accuracy on the same texts.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Dict, List, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("GLOG_minloglevel", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wenxin.common.process_settings import apply_process_settings  # noqa: E402

apply_process_settings()  # as wenxin's entry points do, before Paddle loads

from measure import load_note  # noqa: E402


def rows(path: str) -> Tuple[List[List[str]], List[str]]:
    with open(path, encoding="utf-8") as f:
        pairs = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    return [[text] for text, _ in pairs], [label for _, label in pairs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("teacher")
    parser.add_argument("student")
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 32])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from wenxin.inference.predictor import Predictor
    data = {"teacher": rows(os.path.join(REPO, "examples", "data", "sentiment", "test.tsv")),
            "student": rows(os.path.join(REPO, "examples", "data", "distillation", "test.tsv"))}
    models = {"teacher": Predictor(args.teacher, num_threads=1), "student": Predictor(args.student, num_threads=1)}
    for name, predictor in models.items():
        texts, gold = data[name]
        right = sum(str(r["label"]) == g for r, g in zip(predictor.predict(texts), gold))
        print(f"{name}: accuracy {right / len(gold):.4f} on {len(gold)} test reviews ({args.__dict__[name]})")
    print(f"{load_note()} at the start")
    print("| batch | teacher CPU ms/text | student CPU ms/text | student speed-up (CPU) | teacher wall ms/text | "
          "student wall ms/text | student speed-up (wall) |")
    print("|---|---|---|---|---|---|---|")
    for batch in args.batches:
        cpu: Dict[str, List[float]] = {"teacher": [], "student": []}
        wall: Dict[str, List[float]] = {"teacher": [], "student": []}
        for _ in range(args.rounds):
            for name, predictor in models.items():
                texts, _ = data[name]
                cpu_start, wall_start = time.process_time(), time.perf_counter()
                predictor.predict(texts, batch_size=batch)
                cpu[name].append((time.process_time() - cpu_start) * 1000 / len(texts))
                wall[name].append((time.perf_counter() - wall_start) * 1000 / len(texts))
        c = {name: statistics.median(values) for name, values in cpu.items()}
        w = {name: statistics.median(values) for name, values in wall.items()}
        print(f"| {batch} | {c['teacher']:.3f} | {c['student']:.3f} | {c['teacher'] / c['student']:.2f}x | "
              f"{w['teacher']:.3f} | {w['student']:.3f} | {w['teacher'] / w['student']:.2f}x |")


if __name__ == "__main__":
    main()
