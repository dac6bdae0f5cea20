"""Steps/second of wenxin's dynamic vs static trainer on the example models (same data, same run).

    python benchmarks/dynamic_vs_static.py [--rounds 3] [--steps 60] [--models BowClassification CnnClassification]

Runs are interleaved over several rounds and the median is reported. Each run trains through the
real trainer (data loading, hooks, logging at the usual interval) with evaluation off; the clock
runs from the end of the warm-up steps to the last step. Uses the sentiment example data when it
has been prepared (examples/prepare_sentiment_data.py), else generated data of the same shape.
Set FLAGS_use_onednn=1 to measure with oneDNN kernels.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import sys
import tempfile
import time
from typing import Dict, List, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("GLOG_minloglevel", "2")

from wenxin.config.loader import load_config  # noqa: E402
from wenxin.controller.hooks import HookBase, Priority  # noqa: E402
from wenxin.runner import build_trainer  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wenxin.common.process_settings import apply_process_settings  # noqa: E402

apply_process_settings()  # as wenxin's entry points do, before Paddle loads
from measure import load_note  # noqa: E402

EXAMPLE = os.path.join(REPO, "examples", "text_classification_bow.json")
DATA = os.path.join(REPO, "examples", "data", "sentiment")


class StepClock(HookBase):
    """Records the wall and CPU time of every step end."""

    priority = Priority.LOWEST

    def __init__(self) -> None:
        self.times: List[float] = []
        self.cpu: List[float] = []

    def after_step(self) -> None:
        self.times.append(time.perf_counter())
        self.cpu.append(time.process_time())


def synthetic_data(folder: str) -> str:
    rng = random.Random(0)
    chars = [chr(0x4E00 + i) for i in range(3000)]
    for name, n in (("train", 4000), ("dev", 10), ("test", 10)):
        with open(os.path.join(folder, f"{name}.tsv"), "w", encoding="utf-8") as f:
            for _ in range(n):
                text = "".join(rng.choice(chars) for _ in range(rng.randint(10, 150)))
                f.write(f"{text}\t{rng.randint(0, 1)}\n")
    return folder


def bench_config(model_type: str, mode: str, data: str, out: str, max_steps: int) -> str:
    """The example task file, switched to ``model_type`` and ``mode``, written to ``out``."""
    with open(EXAMPLE, encoding="utf-8") as f:
        config = json.load(f)
    for name in ("train", "dev", "test"):
        reader = config["dataset_reader"][f"{name}_reader"]
        reader["config"]["data_path"] = os.path.join(data, f"{name}.tsv")
        if model_type != "BowClassification":  # sequence models read characters, not n-gram bags
            reader["fields"][0]["tokenizer"]["ngram"] = 1
    model = config["model"]
    if model_type != "BowClassification":
        model.pop("pooling", None)
        model.pop("token_dropout", None)
    model.update(type=model_type, is_dygraph=1 if mode == "dynamic" else 0)
    config["trainer"].update(type="CustomDynamicTrainer" if mode == "dynamic" else "CustomStaticTrainer",
                             output_path=os.path.join(out, "run"), max_steps=max_steps, is_eval_dev=0,
                             is_eval_test=0, visualdl=False)
    path = os.path.join(out, "task.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False)
    return path


def steps_per_second(model_type: str, mode: str, data: str, steps: int, warmup: int) -> Tuple[float, float]:
    """Steps per wall second and per CPU-second after ``warmup`` steps."""
    with tempfile.TemporaryDirectory() as out:
        trainer = build_trainer(load_config(bench_config(model_type, mode, data, out, warmup + steps)))
        logging.getLogger("wenxin").setLevel(logging.WARNING)
        clock = StepClock()
        trainer.register_hook(clock)
        trainer.do_train()
        return (steps / (clock.times[-1] - clock.times[warmup - 1]),
                steps / max(clock.cpu[-1] - clock.cpu[warmup - 1], 1e-9))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--models", nargs="+", default=["BowClassification", "CnnClassification"])
    args = parser.parse_args()
    data = DATA if os.path.isfile(os.path.join(DATA, "train.tsv")) else synthetic_data(tempfile.mkdtemp())
    results: Dict[tuple, List[Tuple[float, float]]] = {}
    load_before = load_note()
    for _ in range(args.rounds):
        for model_type in args.models:
            for mode in ("dynamic", "static"):
                results.setdefault((model_type, mode), []).append(
                    steps_per_second(model_type, mode, data, args.steps, args.warmup))
    print(f"data: {data}; FLAGS_use_onednn={os.environ.get('FLAGS_use_onednn', '0')}; "
          f"{args.rounds} rounds x {args.steps} steps (median); before: {load_before}; after: {load_note()}")
    print("| model | dynamic steps/s | static steps/s | static / dynamic | dynamic steps/CPU-s | static steps/CPU-s "
          "| static / dynamic (CPU) |")
    print("|---|---|---|---|---|---|---|")
    for model_type in args.models:
        d = statistics.median(wall for wall, _ in results[(model_type, "dynamic")])
        s = statistics.median(wall for wall, _ in results[(model_type, "static")])
        dc = statistics.median(cpu for _, cpu in results[(model_type, "dynamic")])
        sc = statistics.median(cpu for _, cpu in results[(model_type, "static")])
        print(f"| {model_type} | {d:.1f} | {s:.1f} | {s / d:.2f} | {dc:.1f} | {sc:.1f} | {sc / dc:.2f} |")


if __name__ == "__main__":
    main()
