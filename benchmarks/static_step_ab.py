"""In-process A/B of one static training step: wenxin's static trainer against a plain
Program/Executor step, alternating in the same process, for a framework_overhead workload.

    python benchmarks/static_step_ab.py [--workload mlp] [--steps 300]

Separate processes differ by up to ±10% on a small VM (memory placement, frequency), which hides
differences of a few percent between the variants of framework_overhead.py. Alternating the two
steps in one process removes that noise: it reports the median milliseconds of
``trainer.run_step`` (one update, loss fetched) and of the plain ``Executor.run`` (the same)."""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np
import paddle

import framework_overhead as fo
from wenxin.config.loader import load_config
from wenxin.controller.graph_mode import static_mode
from wenxin.runner import build_trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="mlp", choices=list(fo.WORKLOADS))
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    w = fo.WORKLOADS[args.workload]
    data, out = tempfile.mkdtemp(), tempfile.mkdtemp()
    fo.make_data(data, w["data"], w["batch"] * args.steps)
    config = fo.task_config(args.workload, data, "static", os.path.join(out, "run"))
    config["trainer"]["max_steps"] = args.steps
    path = os.path.join(out, "task.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f)
    trainer = build_trainer(load_config(path))
    make_model, arrays = fo.build_model(args.workload, data)
    with static_mode():
        main_program, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main_program, startup):
            model = make_model()
            feeds = {k: paddle.static.data(k, [-1, *v.shape[1:]], str(v.dtype)) for k, v in arrays.items()}
            loss = model(feeds, "training")["loss"]
            paddle.optimizer.AdamW(learning_rate=fo.LEARNING_RATE).minimize(loss)
        plain_scope, executor = paddle.static.Scope(), paddle.static.Executor(paddle.CPUPlace())
        with paddle.static.scope_guard(plain_scope):
            executor.run(startup)
        order = np.random.RandomState(fo.SEED).permutation(len(arrays["label"]))
        batches = iter(trainer.train_loader)
        wenxin_ms, plain_ms = [], []
        for step in range(args.steps):
            rows = order[step * w["batch"]:(step + 1) * w["batch"]]
            batch = next(batches)
            start = time.perf_counter()
            trainer.run_step([batch])
            wenxin_ms.append((time.perf_counter() - start) * 1000)
            with paddle.static.scope_guard(plain_scope):
                start = time.perf_counter()
                executor.run(main_program, feed={k: v[rows] for k, v in arrays.items()}, fetch_list=[loss])
                plain_ms.append((time.perf_counter() - start) * 1000)
    skip = min(20, args.steps // 10)
    wx, pl = float(np.median(wenxin_ms[skip:])), float(np.median(plain_ms[skip:]))
    print(f"{args.workload}: wenxin static step {wx:.2f} ms, plain static step {pl:.2f} ms, ratio {pl / wx:.3f}")


if __name__ == "__main__":
    main()
