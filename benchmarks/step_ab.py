"""In-process A/B of one training step: a wenxin trainer's step against a plain Paddle step of the
same model, alternating in the same process, for a framework_overhead workload.

    python benchmarks/step_ab.py [--mode static|dynamic] [--workload mlp] [--steps 300]

Separate processes differ by up to ±10% on a small VM (thread placement, memory), which hides
differences of a few percent between the variants of framework_overhead.py. Alternating the two
steps in one process removes that noise. Each timed step includes fetching its batch from the
variant's own data loader and reading the loss on the host:

    static   the static trainer's ``run_step`` against a plain ``Executor.run`` (batches sliced
             from arrays, as in framework_overhead's plain static loop)
    dynamic  the dynamic trainer's ``run_step`` against forward, backward, AdamW step and
             ``clear_grad`` over a plain ``paddle.io.DataLoader`` (as in its plain eager loop)

It reports the median milliseconds of each and their ratio (above 1: wenxin is faster), in CPU
time and in wall time, and the load average."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import time
from typing import Callable, List, Tuple

import framework_overhead as fo  # first: it imports wenxin (the fast BLAS path) before Paddle
import numpy as np
import paddle
from wenxin.config.loader import load_config
from wenxin.common.graph_mode import static_mode
from measure import load_note
from wenxin.runner import build_trainer


def wenxin_step(workload: str, data: str, mode: str, steps: int) -> Callable[[], float]:
    """One step of the wenxin trainer (its loader's next batch, ``run_step``, the loss read)."""
    out = tempfile.mkdtemp()
    config = fo.task_config(workload, data, mode, os.path.join(out, "run"))
    config["trainer"]["max_steps"] = steps
    path = os.path.join(out, "task.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f)
    trainer = build_trainer(load_config(path))
    trainer.model.train()
    batches = iter(trainer.train_loader)
    return lambda: float(trainer.run_step([next(batches)]))


def plain_static_step(workload: str, data: str) -> Callable[[], float]:
    make_model, arrays = fo.build_model(workload, data)
    with static_mode():
        main_program, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main_program, startup):
            model = make_model()
            feeds = {k: paddle.static.data(k, [-1, *v.shape[1:]], str(v.dtype)) for k, v in arrays.items()}
            loss = model(feeds, "training")["loss"]
            paddle.optimizer.AdamW(learning_rate=fo.LEARNING_RATE).minimize(loss)
        scope, executor = paddle.static.Scope(), paddle.static.Executor(paddle.CPUPlace())
        with paddle.static.scope_guard(scope):
            executor.run(startup)
    batch = fo.WORKLOADS[workload]["batch"]
    order = np.random.RandomState(fo.SEED).permutation(len(arrays["label"]))
    step = iter(range(len(order) // batch))

    def run() -> float:
        rows = order[next(step) * batch:][:batch]
        with static_mode(), paddle.static.scope_guard(scope):
            value, = executor.run(main_program, feed={k: v[rows] for k, v in arrays.items()}, fetch_list=[loss])
        return float(value)
    return run


def plain_eager_step(workload: str, data: str) -> Callable[[], float]:
    make_model, arrays = fo.build_model(workload, data)
    model = make_model()
    model.train()
    optimizer = paddle.optimizer.AdamW(learning_rate=fo.LEARNING_RATE, parameters=model.parameters())
    names = list(arrays)
    loader = paddle.io.DataLoader(fo.ArrayDataset(arrays, names), batch_size=fo.WORKLOADS[workload]["batch"],
                                  shuffle=True, drop_last=True)
    batches = iter(loader)

    def run() -> float:
        loss = model(dict(zip(names, next(batches))), "training")["loss"]
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        return float(loss)
    return run


def alternate(first: Callable[[], float], second: Callable[[], float],
              steps: int) -> Tuple[Tuple[List[float], List[float]], Tuple[List[float], List[float]]]:
    """Wall and CPU milliseconds of each step, the two alternating (and swapping who goes first
    each step): ``((first wall, second wall), (first CPU, second CPU))``."""
    wall: Tuple[List[float], List[float]] = ([], [])
    cpu: Tuple[List[float], List[float]] = ([], [])
    for step in range(steps):
        order = [(0, first), (1, second)] if step % 2 == 0 else [(1, second), (0, first)]
        for index, run in order:
            start, cpu_start = time.perf_counter(), time.process_time()
            run()
            cpu[index].append((time.process_time() - cpu_start) * 1000)
            wall[index].append((time.perf_counter() - start) * 1000)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="static", choices=["static", "dynamic"])
    parser.add_argument("--workload", default="mlp", choices=list(fo.WORKLOADS))
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    w = fo.WORKLOADS[args.workload]
    data = tempfile.mkdtemp()
    fo.make_data(data, w["data"], w["batch"] * args.steps)
    paddle.seed(fo.SEED)
    wenxin = wenxin_step(args.workload, data, args.mode, args.steps)
    plain = (plain_static_step if args.mode == "static" else plain_eager_step)(args.workload, data)
    with static_mode() if args.mode == "static" else contextlib.nullcontext():
        wall, cpu = alternate(wenxin, plain, args.steps)
    skip = min(20, args.steps // 10)
    print(f"{args.workload} ({args.mode}), {load_note()}:")
    for clock, (wenxin_ms, plain_ms) in (("CPU", cpu), ("wall", wall)):
        wx, pl = float(np.median(wenxin_ms[skip:])), float(np.median(plain_ms[skip:]))
        print(f"  {clock} time: wenxin step {wx:.2f} ms, plain step {pl:.2f} ms, ratio {pl / wx:.3f}")


if __name__ == "__main__":
    main()
