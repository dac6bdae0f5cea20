"""What ``Predictor.run`` adds to the raw engine, per call, in one run.

    python benchmarks/predictor_overhead.py [--models bow ernie] [--batches 1 16] [--calls 2000] [--rounds 5]

For each model (``small_models.py``: trained one epoch on generated data and exported) and batch
size, one converted batch is run over and over by:

- ``raw``: Paddle Inference as its documentation shows it, the handles fetched once
  (``copy_from_cpu`` each input, ``run``, ``copy_to_cpu`` each output);
- ``predictor``: ``Predictor.run`` (the Paddle backend, oneDNN off, one thread, as ``raw``).

The two alternate ``--rounds`` times, ``--calls`` calls each; the table gives the median CPU time
per call (robust on a shared machine) and wall time, and the predictor's speed as a share of the
raw engine's (CPU time).
"""
from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))
os.environ.setdefault("GLOG_minloglevel", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wenxin.common.process_settings import apply_process_settings  # noqa: E402

apply_process_settings()  # as wenxin's entry points do, before Paddle loads

from measure import load_note  # noqa: E402


def timed(fn: Callable[[], object], calls: int) -> Tuple[float, float]:
    """(CPU seconds, wall seconds) per call."""
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.process_time() - cpu) / calls, (time.perf_counter() - wall) / calls


def raw_runner(model_dir: str, batch: Dict[str, object]) -> Callable[[], object]:
    from paddle import inference

    from wenxin.inference.paddle_backend import model_files
    graph, params = model_files(model_dir)
    config = inference.Config(graph, params)
    config.disable_gpu()
    config.set_cpu_math_library_num_threads(1)
    config.disable_mkldnn()
    config.disable_glog_info()
    predictor = inference.create_predictor(config)
    inputs = [(predictor.get_input_handle(name), batch[name]) for name in predictor.get_input_names()]
    outputs = [predictor.get_output_handle(name) for name in predictor.get_output_names()]

    def run() -> List[object]:
        for handle, array in inputs:
            handle.copy_from_cpu(array)
        predictor.run()
        return [handle.copy_to_cpu() for handle in outputs]
    return run


def main() -> None:
    from small_models import sample_texts, trained_model
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["bow", "ernie"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 16])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from wenxin.inference.predictor import Predictor
    print(f"{load_note()} at the start")
    print("| model | batch | raw: CPU µs/call (wall) | Predictor.run: CPU µs/call (wall) | Predictor / raw speed |")
    print("|---|---|---|---|---|")
    for name in args.models:
        model_dir = trained_model(name, tempfile.mkdtemp(prefix=f"overhead-{name}-"))
        predictor = Predictor(model_dir, backend="paddle", onednn="off", num_threads=1)
        texts = sample_texts(name)
        for size in args.batches:
            batch = predictor.convert([[t] for t in texts[:size]])
            runners = {"raw": raw_runner(model_dir, batch), "predictor": functools.partial(predictor.run, batch)}
            calls = max(20, args.calls // (1 if name == "bow" else 20))
            results: Dict[str, List[Tuple[float, float]]] = {k: [] for k in runners}
            for fn in runners.values():
                timed(fn, calls // 10 + 1)  # warm-up
            for _ in range(args.rounds):
                for key, fn in runners.items():
                    results[key].append(timed(fn, calls))
            med = {k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v))
                   for k, v in results.items()}
            print(f"| {name} | {size} | {med['raw'][0] * 1e6:.1f} ({med['raw'][1] * 1e6:.1f}) | "
                  f"{med['predictor'][0] * 1e6:.1f} ({med['predictor'][1] * 1e6:.1f}) | "
                  f"{med['raw'][0] / med['predictor'][0]:.3f} |", flush=True)


if __name__ == "__main__":
    main()
