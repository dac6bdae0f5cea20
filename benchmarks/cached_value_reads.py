"""Reading a token-cache entry's values at random, as a shuffled epoch does: ``pread`` (what
``CachedExamples`` does where the system has it) against slicing the memory map (what it did),
interleaved, CPU seconds per 100,000 values and the pages each leaves mapped in the process.

    python benchmarks/cached_value_reads.py ENTRY_FOLDER [--values 100000] [--rounds 3]

``ENTRY_FOLDER``: an ``ex-*`` folder of a token cache (``benchmarks/data_scale.py`` builds one for
a 1M-line corpus). The mapped pages are read from ``/proc/self/smaps`` (Linux).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from wenxin.data.cached_examples import CachedExamples  # noqa: E402


def mapped_mb(path_part: str) -> float:
    """Resident MB of this process's mappings of files whose path holds ``path_part``."""
    total, current = 0, ""
    with open("/proc/self/smaps", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 5 and "-" in fields[0] and ":" not in fields[0]:
                current = fields[5] if len(fields) > 5 else ""
            elif line.startswith("Rss:") and path_part in current:
                total += int(fields[1])
    return total / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("entry")
    parser.add_argument("--values", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    results = {"pread": [], "map": []}
    for _ in range(args.rounds):
        for way in ("pread", "map"):  # interleaved, each on a fresh object
            examples = CachedExamples.open(args.entry)
            if way == "map":
                examples._files.clear()  # the memory map's slices, as before
            indices = rng.integers(0, len(examples), args.values)
            start = time.process_time()
            for i in indices:
                examples.value(0, int(i))
            results[way].append((time.process_time() - start) * 100_000 / args.values)
    for way, seconds in results.items():
        print(f"{way:6s} CPU s / 100k values: {', '.join(f'{s:.3f}' for s in seconds)} (median {np.median(seconds):.3f})")
    print(f"ratio pread / map: {np.median(results['pread']) / np.median(results['map']):.2f}")
    print(f"the entry's data mapped in this process after both: {mapped_mb('.data.npy'):.0f} MB (the map's reads)")


if __name__ == "__main__":
    main()
