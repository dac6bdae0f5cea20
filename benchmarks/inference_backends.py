"""Inference backends: Paddle Inference against ONNX Runtime, per model and batch size, in one run.

    python benchmarks/inference_backends.py [--models bow cnn transformer] [--batches 1 16 128] [--seconds 3]

For each model it trains a small classifier on generated reviews (1 epoch), exports it with
``model.onnx`` (wenxin export's check included), and times, for each backend and batch size,
the model alone (``engine.run`` on a converted batch) and the whole ``Predictor.predict`` (text
conversion included). Both backends run with one CPU thread, alternating in each of 3 rounds;
medians are reported, and the speed-up of ONNX Runtime over Paddle Inference.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))
os.environ.setdefault("GLOG_minloglevel", "2")

MODELS = {
    "bow": {"type": "BowClassification"},
    "cnn": {"type": "CnnClassification", "num_filters": 64, "filter_sizes": [2, 3, 4]},
    "transformer": {"type": "TransformerClassification"},  # 2 layers, hidden 128, 4 heads (the defaults)
}


def trained_model(name: str, folder: str) -> str:
    from conftest import make_sentences, task_config, write_tsv
    from wenxin.config.loader import load_config
    from wenxin.inference.onnx_export import export_onnx
    from wenxin.runner import build_trainer
    data = os.path.join(folder, "data")
    for split, seed, n in (("train", 1, 1000), ("dev", 2, 100), ("test", 3, 100)):
        write_tsv(os.path.join(data, f"{split}.tsv"), make_sentences(n, seed))
    config = task_config(data, os.path.join(folder, "out"), model_type=MODELS[name]["type"], epoch=1,
                         visualdl=False, is_eval_test=0)
    config["model"].update({k: v for k, v in MODELS[name].items() if k != "type"})
    path = os.path.join(folder, "task.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f)
    trainer = build_trainer(load_config(path))
    trainer.do_train()
    model_dir = trainer.export_inference(os.path.join(folder, "model"))
    export_onnx(model_dir, trainer.readers["dev_reader"].collate_rows(list(range(16))))
    return model_dir


def per_second(fn: Callable[[], None], items: int, seconds: float) -> float:
    fn()
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        count += 1
    return items * count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 16, 128])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from wenxin.inference.predictor import Predictor
    rng = random.Random(0)
    texts = ["".join(rng.choice("好坏的了书质量很不错差东西") for _ in range(rng.randint(5, 60))) for _ in range(512)]
    print("| model | batch | Paddle model-only texts/s | ONNX Runtime model-only texts/s | speed-up | "
          "Paddle end-to-end texts/s | ONNX Runtime end-to-end texts/s | speed-up |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models:
        model_dir = trained_model(name, tempfile.mkdtemp())
        predictors = {b: Predictor(model_dir, backend=b) for b in ("paddle", "onnxruntime")}
        for batch in args.batches:
            rows = [[t] for t in texts[:batch]]
            arrays = predictors["paddle"].convert(rows)
            runs: Dict[str, List[float]] = {f"{b}-{k}": [] for b in predictors for k in ("model", "e2e")}
            for r in range(args.rounds):
                order = list(predictors) if r % 2 == 0 else list(reversed(list(predictors)))
                for b in order:
                    p = predictors[b]
                    runs[f"{b}-model"].append(per_second(lambda: p.run(arrays), batch, args.seconds))
                    runs[f"{b}-e2e"].append(per_second(lambda: p.predict(rows, batch_size=batch), batch, args.seconds))
            m = {k: statistics.median(v) for k, v in runs.items()}
            print(f"| {name} | {batch} | {m['paddle-model']:.0f} | {m['onnxruntime-model']:.0f} | "
                  f"{m['onnxruntime-model'] / m['paddle-model']:.2f}x | {m['paddle-e2e']:.0f} | "
                  f"{m['onnxruntime-e2e']:.0f} | {m['onnxruntime-e2e'] / m['paddle-e2e']:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
