"""The floor of a float32 decode step at one row on this CPU (issue 69): the CPU time one thread
takes to read a model's float32 weights once, which a one-row step must do. An engine whose step
costs about this is bound by memory, not by its code.

It reads ``--gb`` GB of float32 (default 1.44: ERNIE-4.5-0.3B's weights; or ``--export FOLDER``:
that export's ``steps.pdiparams``) in three ways, each the median of ``--repeat`` after one
warm-up: numpy's ``sum`` and ``max`` (streaming reads), and a matrix-vector product ``W @ x`` of
rows of 1,024 through numpy's BLAS (the product a step is made of). One math thread, as the
benchmarks beside it measure engines::

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/memory_floor.py --gb 1.44
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Callable, Dict

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")  # before numpy loads its BLAS

import numpy as np  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=1.44, help="GB of float32 to read")
    parser.add_argument("--export", default="", help="read as many bytes as this export's steps.pdiparams")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    size = os.path.getsize(os.path.join(args.export, "steps.pdiparams")) if args.export else int(args.gb * 1e9)
    weights = np.random.default_rng(0).standard_normal(size // 4 // 1024 * 1024, dtype=np.float32)
    matrix, vector = weights.reshape(-1, 1024), np.ones(1024, np.float32)
    reads: Dict[str, Callable[[], object]] = {"numpy sum": weights.sum, "numpy max": weights.max,
                                              "BLAS W @ x": lambda: matrix @ vector}
    print(f"{weights.nbytes / 1e9:.2f} GB of float32, one thread, median of {args.repeat}:")
    for name, read in reads.items():
        read()
        cpu = []
        for _ in range(args.repeat):
            started = time.process_time()
            read()
            cpu.append(time.process_time() - started)
        seconds = statistics.median(cpu)
        print(f"  {name}: {seconds * 1e3:.1f} CPU-ms ({weights.nbytes / seconds / 1e9:.1f} GB/s)")


if __name__ == "__main__":
    main()
