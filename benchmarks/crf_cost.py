"""The CRF loss's cost: ``LinearChainCrf.negative_log_likelihood`` (a parallel scan over time,
ceil(log2 T) rounds) against the forward algorithm's step-by-step loop it replaced, forward and
backward, in eager mode, on the same batches in the same run.

    python benchmarks/crf_cost.py [--batch 128] [--tags 4] [--lengths 16 32 64 256] [--repeats 20]

Prints, for each length, milliseconds per call of each and their ratio (loop / scan), and checks
that both give the same loss.
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Tuple

import numpy as np
import paddle

from wenxin.models.crf import LinearChainCrf
from wenxin.models.modules import length_mask


def loop_nll(crf: LinearChainCrf, emissions: paddle.Tensor, tags: paddle.Tensor,
             seq_lens: paddle.Tensor) -> paddle.Tensor:
    """The forward algorithm one time step after another (the implementation before the scan)."""
    scores = crf._with_boundaries(emissions, seq_lens)  # [B, T, N]
    max_len = scores.shape[1]
    mask = length_mask(seq_lens, max_len, scores.dtype)  # [B, T]
    gold = (paddle.take_along_axis(scores, tags.unsqueeze(-1), axis=-1).squeeze(-1) * mask).sum(axis=1)
    pair_ids = tags[:, :-1] * crf.num_tags + tags[:, 1:]
    gold += (paddle.gather(crf.transitions.reshape([-1]), pair_ids.reshape([-1])).reshape(pair_ids.shape)
             * mask[:, 1:]).sum(axis=1)
    alpha = scores[:, 0]
    transitions = crf.transitions.unsqueeze(0)
    for t in range(1, max_len):
        step = paddle.logsumexp(alpha.unsqueeze(-1) + transitions, axis=1) + scores[:, t]
        keep = mask[:, t:t + 1]
        alpha = keep * step + (1.0 - keep) * alpha
    return paddle.logsumexp(alpha, axis=1) - gold


def timed(fn, repeats: int) -> Tuple[float, float]:  # noqa: ANN001
    """(CPU ms, wall ms) per call after one warm-up call."""
    fn()  # warm-up
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(repeats):
        fn()
    return (time.process_time() - cpu) / repeats * 1000, (time.perf_counter() - start) / repeats * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--tags", type=int, default=4)
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64, 256])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    paddle.seed(0)
    rng = np.random.RandomState(0)
    crf = LinearChainCrf(args.tags)
    print(f"CPU ms per step (wall ms); {os.getloadavg()[0]:.2f} load average on {os.cpu_count()} CPUs")
    print("| T | loop ms | scan ms | loop / scan (CPU) | loop / scan (wall) | max loss difference |")
    print("|---|---|---|---|---|---|")
    for length in args.lengths:
        emissions = paddle.to_tensor(rng.randn(args.batch, length, args.tags).astype("float32"), stop_gradient=False)
        tags = paddle.to_tensor(rng.randint(0, args.tags, (args.batch, length)))
        lens = paddle.to_tensor(rng.randint(1, length + 1, args.batch).astype("int64"))

        def run(nll, emissions=emissions, tags=tags, lens=lens):  # noqa: ANN001, ANN202 (this round's batch)
            def step() -> None:
                nll(emissions, tags, lens).mean().backward()
                emissions.clear_gradient()
                crf.clear_gradients()
            return step
        difference = float((loop_nll(crf, emissions, tags, lens)
                            - crf.negative_log_likelihood(emissions, tags, lens)).abs().max())
        loop_cpu, loop_wall = timed(run(lambda e, t, n: loop_nll(crf, e, t, n)), args.repeats)
        scan_cpu, scan_wall = timed(run(crf.negative_log_likelihood), args.repeats)
        print(f"| {length} | {loop_cpu:.2f} ({loop_wall:.2f}) | {scan_cpu:.2f} ({scan_wall:.2f}) | "
              f"{loop_cpu / scan_cpu:.2f} | {loop_wall / scan_wall:.2f} | {difference:.1e} |")


if __name__ == "__main__":
    main()
