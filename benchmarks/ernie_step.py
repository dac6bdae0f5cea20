"""ERNIE fine-tuning against the machine's GEMM limit: what share of a training step's CPU time
the step's matrix products would need at the machine's own GEMM speed, in one run.

    python benchmarks/ernie_step.py [--shapes nano base] [--modes dynamic static] [--steps 4]
        [--threads 1] [--profile]

For each ERNIE 3.0 shape (random-init weights in PaddleNLP's layout; ``nano``: hidden 312, 4
layers, 12 heads, FFN 1248; ``base``: hidden 768, 12 layers, 12 heads, FFN 3072; both with a
40,000-row vocabulary) it fine-tunes ``ErnieClassification`` with wenxin's trainer (AdamW,
weight decay, warm-up schedule, gradient clipping, dropout 0.1: a real fine-tuning step) on
batches of 16 texts of 128 tokens, and reports per step:

- CPU seconds (this process, all its threads: robust on a shared machine) and wall seconds;
- the step's GEMM work, counted from the shapes: every matrix product of the encoder's forward
  pass (Q, K, V and output projections, attention scores and sums, both FFN layers, pooler and
  classifier), three times (forward, and the two products of each backward);
- GFLOP per CPU-second, and that against the GEMM limit: the step's own product shapes at the
  faster of ``paddle.matmul`` and numpy's BLAS, one thread, measured in the same process (the
  flops-weighted speed over its products);
- with ``--profile``, the share of the step's operator time in matrix products, from
  ``paddle.profiler`` (Paddle's operator summary: ``matmul``/``linear``/``fc`` operators and their
  gradients against every operator).

Above 1 would mean faster than the step's own matrix products alone could run.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import random
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests"))
from wenxin.common.process_settings import apply_process_settings  # noqa: E402

apply_process_settings()  # as wenxin's entry points do, before Paddle loads
os.environ.setdefault("GLOG_minloglevel", "2")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # numpy's BLAS, for the GEMM limit: one thread

import numpy as np  # noqa: E402
import wenxin  # noqa: E402,F401  (before Paddle: the fast BLAS path)
import paddle  # noqa: E402
from measure import load_note  # noqa: E402

SHAPES: Dict[str, Dict[str, int]] = {
    "nano": {"hidden_size": 312, "num_hidden_layers": 4, "num_attention_heads": 12, "intermediate_size": 1248},
    "base": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072},
}
VOCAB, BATCH, TOKENS = 40000, 16, 128


def products(shape: Dict[str, int]) -> List[Tuple[int, int, int, int]]:
    """The forward pass's matrix products as ``(count, m, k, n)``."""
    h, layers, heads, ffn = (shape["hidden_size"], shape["num_hidden_layers"], shape["num_attention_heads"],
                             shape["intermediate_size"])
    rows, head = BATCH * TOKENS, h // heads
    per_layer = [(4, rows, h, h),  # Q, K, V, output projections
                 (2 * BATCH * heads, TOKENS, head, TOKENS),  # scores Q K^T and weighted sums P V (same flops)
                 (1, rows, h, ffn), (1, rows, ffn, h)]  # the FFN
    return [(count * layers, m, k, n) for count, m, k, n in per_layer] + [(1, BATCH, h, h), (1, BATCH, h, 2)]


def step_gemm_flops(shape: Dict[str, int]) -> float:
    return 3 * sum(2.0 * count * m * k * n for count, m, k, n in products(shape))


def gemm_limit(shape: Dict[str, int]) -> float:
    """GFLOP per CPU-second of the step's products at the machine's GEMM speed: for each product
    shape, the faster of ``paddle.matmul`` and numpy's BLAS (one thread each), weighted by flops."""
    seconds = flops = 0.0
    for count, m, k, n in products(shape):
        if m * k * n < 10 ** 6:
            continue  # pooler and classifier: no weight in the total
        a, b = paddle.randn([m, k]), paddle.randn([k, n])
        calls = max(3, int(2e9 / (2 * m * k * n)))
        best = min(cpu_seconds(functools.partial(paddle.matmul, a, b), calls),
                   cpu_seconds(functools.partial(np.matmul, a.numpy(), b.numpy()), calls))
        seconds += best * count
        flops += 2.0 * m * k * n * count
    return flops / seconds / 1e9


def cpu_seconds(product: Callable[[], object], calls: int) -> float:
    product()
    start = time.process_time()
    for _ in range(calls):
        product()
    return (time.process_time() - start) / calls


def task_file(shape_name: str, mode: str, work: str, threads: int) -> str:
    from conftest import NEUTRAL, write_tsv
    from ernie_helpers import ernie_config, ernie_text, make_ernie_model
    model_dir = os.path.join(work, f"ernie-{shape_name}")
    if not os.path.isdir(model_dir):
        make_ernie_model(model_dir, "paddlenlp", vocab_size=VOCAB, max_position_embeddings=512,
                         **SHAPES[shape_name])
    data = os.path.join(work, "data")
    if not os.path.isdir(data):
        rng = random.Random(0)
        rows = [("".join(rng.choice(NEUTRAL) for _ in range(200)), str(rng.randint(0, 1))) for _ in range(400)]
        write_tsv(os.path.join(data, "train.tsv"), rows)
        write_tsv(os.path.join(data, "dev.tsv"), rows[:16])
    label = {"name": "label", "data_type": "int", "reader": {"type": "LabelFieldReader"}}
    config = ernie_config(data, model_dir, os.path.join(work, f"out-{shape_name}-{mode}"),
                          {"type": "ErnieClassification"}, "text_classification",
                          [ernie_text("text_a", model_dir, max_seq_len=TOKENS), label], mode=mode, epoch=1,
                          is_eval_dev=0, cpu_threads=threads, save_model_step=10 ** 6, train_log_step=10 ** 6)
    path = os.path.join(work, f"{shape_name}-{mode}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f)
    return path


def measure(path: str, steps: int, profile: bool) -> Dict[str, float]:
    from wenxin.config.loader import load_config
    from wenxin.common.graph_mode import static_mode
    from wenxin.runner import build_trainer
    config = load_config(path)
    guard = static_mode() if not config["model"]["is_dygraph"] else contextlib.nullcontext()
    with guard:
        trainer = build_trainer(config)
        trainer.model.train()
        batches = iter(trainer.train_loader)
        for _ in range(2):  # warm-up: kernels, programs, caches
            float(trainer.run_step([next(batches)]))
        cpu, wall = [], []
        for _ in range(steps):
            batch = next(batches)
            start, cpu_start = time.perf_counter(), time.process_time()
            float(trainer.run_step([batch]))
            cpu.append(time.process_time() - cpu_start)
            wall.append(time.perf_counter() - start)
        result = {"cpu": statistics.median(cpu), "wall": statistics.median(wall)}
        if profile:
            result["gemm_share"] = profiled_gemm_share(lambda: float(trainer.run_step([next(batches)])))
    return result


GEMM_OPERATORS = ("matmul", "linear", "fc", "mul", "bmm")


def profiled_gemm_share(step) -> float:  # noqa: ANN001
    """The share of operator CPU time spent in matrix-product operators over 2 steps."""
    import paddle.profiler as profiler
    from paddle.profiler.profiler_statistic import SortedKeys  # noqa: F401  (the summary's sort keys)
    with profiler.Profiler(targets=[profiler.ProfilerTarget.CPU]) as prof:
        for _ in range(2):
            step()
            prof.step()
    totals: Dict[str, float] = {}
    statistic = profiler.profiler_statistic.StatisticData(prof.profiler_result.get_data(),
                                                          prof.profiler_result.get_extra_info())
    for name, item in statistic.event_summary.items.items():
        totals[name] = item.cpu_time
    gemm = sum(t for name, t in totals.items() if any(op in name.lower().split("_grad")[0].split("(")[0]
                                                    for op in GEMM_OPERATORS))
    return gemm / max(sum(totals.values()), 1e-9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["nano"], choices=list(SHAPES))
    parser.add_argument("--modes", nargs="+", default=["dynamic", "static"], choices=["dynamic", "static"])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="the trainer's cpu_threads")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="wenxin-ernie-step-")
    print(f"paddle {paddle.__version__}; {load_note()} at the start; batch {BATCH} x {TOKENS} tokens, "
          f"{args.threads} thread(s)")
    print("| shape | mode | CPU s/step | wall s/step | GEMM GFLOP/step | GFLOP per CPU-s | GEMM limit (GFLOP/CPU-s) "
          "| share of the limit | matrix products' share of operator time |")
    print("|---|---|---|---|---|---|---|---|---|")
    for shape_name in args.shapes:
        shape = SHAPES[shape_name]
        limit = gemm_limit(shape)
        flops = step_gemm_flops(shape)
        for mode in args.modes:
            result = measure(task_file(shape_name, mode, work, args.threads), args.steps, args.profile)
            rate = flops / result["cpu"] / 1e9
            share = f"{result['gemm_share']:.2f}" if "gemm_share" in result else "-"
            print(f"| {shape_name} | {mode} | {result['cpu']:.3f} | {result['wall']:.3f} | {flops / 1e9:.1f} | "
                  f"{rate:.1f} | {limit:.1f} | {rate / limit:.2f} | {share} |", flush=True)
    print(f"\n{load_note()} at the end")


if __name__ == "__main__":
    main()
