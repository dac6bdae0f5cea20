"""The fast BLAS path (``wenxin.common.blas``): training speed with ``MKL_DEBUG_CPU_TYPE=5``
against Paddle's default MKL path, on framework_overhead's synthetic workloads, in one run.

    python benchmarks/fast_blas.py [--rounds 3] [--workloads bow cnn transformer mlp] [--steps 40]
    python benchmarks/fast_blas.py --inference [--models transformer ernie] [--rounds 3]

Each measurement is a ``wenxin train`` process of the dynamic trainer, with ``WENXIN_FAST_BLAS=0``
(Paddle's default) or unset (wenxin's choice: the AVX2 kernels on an AMD CPU). Within a round the
two run back to back, in alternating order, and the ratio is taken per round (the median
logged step time after the first logging interval), which cancels most of the machine's drift.
Above 1: the fast path trains faster.

``--inference`` does the same for prediction: ``small_models.py``'s models, exported, each timed by
a fresh process running ``Predictor.predict`` on batches of 16 texts with the Paddle backend and
oneDNN off (with oneDNN on, matrix products run in oneDNN's own kernels, not MKL's).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, HERE)

import framework_overhead as fo  # noqa: E402
from measure import load_note  # noqa: E402


def step_time(name: str, data: str, work: str, fast: bool, steps: int) -> Tuple[float, float]:
    """Median seconds per step of one training process (after its first logging interval): CPU
    time (the trainer's ``step_cpu_time``) and wall time (``step_time``)."""
    out = tempfile.mkdtemp(dir=work)
    config = fo.task_config(name, data, "dynamic", out)
    config["trainer"].update(max_steps=fo.LOG_EVERY + steps, visualdl=False, save_model_step=10 ** 6)
    path = os.path.join(out, "task.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f)
    env = {k: v for k, v in os.environ.items() if k not in ("MKL_DEBUG_CPU_TYPE", "WENXIN_FAST_BLAS")}
    env.update(GLOG_minloglevel="2", PYTHONPATH=REPO, **({} if fast else {"WENXIN_FAST_BLAS": "0"}))
    proc = subprocess.run([sys.executable, "-m", "wenxin.cli", "train", "--param_path", path], env=env,
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"{name}: training failed\n{proc.stderr[-2000:]}")
    if fast != ("MKL_DEBUG_CPU_TYPE=5 set" in proc.stdout):
        print(f"note: {name}: the fast path was {'not ' if fast else ''}chosen (not an AMD CPU with AVX2?)")
    with open(os.path.join(out, "logs", "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    timed = [r for r in records if r["tag"] == "train" and r["step"] > fo.LOG_EVERY]
    return statistics.median(r["step_cpu_time"] for r in timed), statistics.median(r["step_time"] for r in timed)


def predict_rate(model_dir: str, model: str, fast: bool, seconds: float) -> float:
    """Texts per CPU-second of a fresh process predicting batches of 16 (one thread, oneDNN off)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MKL_DEBUG_CPU_TYPE", "WENXIN_FAST_BLAS")}
    env.update(GLOG_minloglevel="2", PYTHONPATH=REPO, **({} if fast else {"WENXIN_FAST_BLAS": "0"}))
    code = (f"import sys, time; sys.path.insert(0, {HERE!r}); import small_models as sm; "
            f"from wenxin.inference.predictor import Predictor; "
            f"p = Predictor({model_dir!r}, backend='paddle', onednn='off'); rows = [[t] for t in sm.sample_texts({model!r})[:16]]; "
            f"p.predict(rows, batch_size=16); n, start, cpu = 0, time.perf_counter(), time.process_time()\n"
            f"while time.perf_counter() - start < {seconds}:\n    p.predict(rows, batch_size=16); n += 1\n"
            f"print(16 * n / (time.process_time() - cpu))")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"{model}: prediction failed\n{proc.stderr[-2000:]}")
    return float(proc.stdout.split()[-1])


def inference_main(models: List[str], rounds: int, seconds: float) -> None:
    from small_models import trained_model
    print(f"{load_note()} at the start")
    print("| model (Paddle backend, oneDNN off, batch 16) | Paddle's default MKL path (texts per CPU-s) | "
          "MKL_DEBUG_CPU_TYPE=5 (texts per CPU-s) | speed-up (median of rounds) |")
    print("|---|---|---|---|")
    for model in models:
        model_dir = trained_model(model, tempfile.mkdtemp(prefix=f"blas-{model}-"))
        runs: Dict[bool, List[float]] = {False: [], True: []}
        for r in range(rounds):
            for fast in ([False, True] if r % 2 == 0 else [True, False]):
                runs[fast].append(predict_rate(model_dir, model, fast, seconds))
        ratios = [f / d for f, d in zip(runs[True], runs[False])]
        print(f"| {model} | {statistics.median(runs[False]):.0f} | {statistics.median(runs[True]):.0f} | "
              f"{statistics.median(ratios):.2f}x (rounds: {', '.join(f'{x:.2f}' for x in ratios)}) |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inference", action="store_true", help="time prediction instead of training")
    parser.add_argument("--models", nargs="+", default=["cnn", "transformer", "ernie"],
                        help="with --inference: small_models.py's models")
    parser.add_argument("--seconds", type=float, default=4.0, help="with --inference: seconds per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workloads", nargs="+", default=["bow", "cnn", "transformer", "mlp"],
                        choices=list(fo.WORKLOADS))
    parser.add_argument("--steps", type=int, default=40, help="timed steps per process (after 10 warm-up steps)")
    args = parser.parse_args()
    if args.inference:
        inference_main(args.models, args.rounds, args.seconds)
        return
    results: Dict[str, Dict[str, List[float]]] = {}
    load_before = load_note()
    with tempfile.TemporaryDirectory() as work:
        for name in args.workloads:
            data = os.path.join(work, f"data_{fo.WORKLOADS[name]['data']}")
            if not os.path.isdir(data):
                fo.make_data(data, fo.WORKLOADS[name]["data"], rows=4096)
            runs = results[name] = {key: [] for key in ("default", "fast", "ratio", "default wall", "fast wall",
                                                        "wall ratio")}
            for r in range(args.rounds):
                order = [False, True] if r % 2 == 0 else [True, False]
                times = {fast: step_time(name, data, work, fast, args.steps) for fast in order}
                (default, default_wall), (fast, fast_wall) = times[False], times[True]
                for key, value in (("default", default), ("fast", fast), ("ratio", default / fast),
                                   ("default wall", default_wall), ("fast wall", fast_wall),
                                   ("wall ratio", default_wall / fast_wall)):
                    runs[key].append(value)
                print(f"{name} round {r + 1}: default {default * 1000:.1f} ms, fast {fast * 1000:.1f} ms of CPU "
                      f"a step ({default / fast:.2f}x; wall time {default_wall / fast_wall:.2f}x)", flush=True)
    print(f"\nbefore: {load_before}; after: {load_note()}")
    print("| workload | Paddle's default MKL path (CPU ms/step) | MKL_DEBUG_CPU_TYPE=5 (CPU ms/step) | "
          "speed-up by CPU time (median of rounds) | speed-up by wall time |")
    print("|---|---|---|---|---|")
    for name, runs in results.items():
        print(f"| {name} | {statistics.median(runs['default']) * 1000:.1f} | {statistics.median(runs['fast']) * 1000:.1f} "
              f"| {statistics.median(runs['ratio']):.2f}x (rounds: {', '.join(f'{x:.2f}' for x in runs['ratio'])}) "
              f"| {statistics.median(runs['wall ratio']):.2f}x |")

if __name__ == "__main__":
    main()
