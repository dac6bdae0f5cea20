"""Inference backends: Paddle Inference against ONNX Runtime, per model and batch size, in one run.

    python benchmarks/inference_backends.py [--models bow cnn transformer ernie crf] [--batches 1 16 128]
        [--seconds 2] [--rounds 3] [--texts generated|reviews]

For each model (``small_models.py``: trained for one epoch on generated data, exported with
``model.onnx`` where paddle2onnx converts it) and batch size, it times the model alone
(``engine.run`` on a converted batch) with Paddle Inference, oneDNN off and on, and with ONNX
Runtime; and the whole ``Predictor.predict`` (text conversion included) with Paddle's ``auto``
oneDNN setting and with ONNX Runtime. Every engine runs with one CPU thread; they alternate in
each round, and medians are reported in texts per CPU-second (this process's CPU time, robust on
a shared machine), with the end-to-end speed as a share of the model's own on the same engine
(Paddle: the model alone with the oneDNN setting ``auto`` chose for the batch).

``--texts reviews`` predicts the sentiment example's real reviews (``examples/data/sentiment/dev.tsv``,
after ``python examples/prepare_sentiment_data.py``: Chinese with full-width punctuation, latin,
digits and spaces) instead of the generated review-like texts (Chinese characters only).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))
from wenxin.common.process_settings import apply_process_settings  # noqa: E402

apply_process_settings()  # as wenxin's entry points do, before Paddle loads
os.environ.setdefault("GLOG_minloglevel", "2")

from measure import load_note  # noqa: E402


def per_second(fn: Callable[[], None], items: int, seconds: float) -> float:
    """Items per CPU-second of ``fn`` over about ``seconds`` of wall time."""
    fn()
    count, start, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        fn()
        count += 1
    return items * count / max(time.process_time() - cpu, 1e-9)


def reviews(count: int) -> List[str]:
    """The first ``count`` reviews of the sentiment example's dev set."""
    path = os.path.join(REPO, "examples", "data", "sentiment", "dev.tsv")
    if not os.path.isfile(path):
        sys.exit(f"{path} not found: run python examples/prepare_sentiment_data.py first")
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t")[0] for line in f][:count]


def main() -> None:
    from small_models import MODELS, sample_texts, trained_model
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS, choices=MODELS)
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 16, 128])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--texts", choices=["generated", "reviews"], default="generated")
    args = parser.parse_args()
    from wenxin.inference.predictor import Predictor
    print(f"texts per CPU-second, {args.texts} texts; {load_note()} at the start")
    print("| model | batch | Paddle, oneDNN off | Paddle, oneDNN on | ONNX Runtime | ONNX Runtime / faster Paddle | "
          "Paddle (auto), end to end | end to end / model (Paddle) | ONNX Runtime, end to end | "
          "end to end / model (ONNX Runtime) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.models:
        model_dir = trained_model(name, tempfile.mkdtemp(prefix=f"backends-{name}-"))
        texts = sample_texts(name) if args.texts == "generated" else reviews(max(args.batches))
        engines = {"off": Predictor(model_dir, backend="paddle", onednn="off"),
                   "on": Predictor(model_dir, backend="paddle", onednn="on"),
                   "auto": Predictor(model_dir, backend="paddle")}
        if os.path.isfile(os.path.join(model_dir, "model.onnx")):
            engines["onnx"] = Predictor(model_dir, backend="onnxruntime")
        for batch in args.batches:
            rows = [[t] for t in texts[:batch]]
            arrays = engines["off"].convert(rows)
            engines["auto"].predict(rows, batch_size=batch)  # auto measures oneDNN at its first larger batch
            runs: Dict[str, List[float]] = {}
            for r in range(args.rounds):
                order = list(engines) if r % 2 == 0 else list(reversed(list(engines)))
                for key in order:
                    p = engines[key]
                    if key != "auto":
                        runs.setdefault(f"{key}-model", []).append(
                            per_second(lambda p=p, arrays=arrays: p.run(arrays), batch, args.seconds))
                    if key in ("auto", "onnx"):
                        runs.setdefault(f"{key}-e2e", []).append(
                            per_second(lambda p=p, rows=rows, batch=batch: p.predict(rows, batch_size=batch), batch,
                                       args.seconds))
            m = {k: statistics.median(v) for k, v in runs.items()}
            onnx = "onnx-model" in m
            best_paddle = max(m["off-model"], m["on-model"])
            auto_onednn = engines["auto"].engine.uses_onednn(batch)  # type: ignore[union-attr]
            auto_model = m["on-model"] if auto_onednn else m["off-model"]
            cells = [f"{m['off-model']:.0f}", f"{m['on-model']:.0f}",
                     f"{m['onnx-model']:.0f}" if onnx else "-",
                     f"{m['onnx-model'] / best_paddle:.2f}x" if onnx else "-",
                     f"{m['auto-e2e']:.0f}", f"{m['auto-e2e'] / auto_model:.2f}",
                     f"{m['onnx-e2e']:.0f}" if onnx else "-", f"{m['onnx-e2e'] / m['onnx-model']:.2f}" if onnx else "-"]
            print(f"| {name} | {batch} | " + " | ".join(cells) + " |", flush=True)

if __name__ == "__main__":
    main()
