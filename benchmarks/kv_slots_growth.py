"""What growing the decoding batch's cache by a step of columns costs (issue 69): 16 rows at
ERNIE-4.5-0.3B's cache shape (18 layers, 2 key/value heads of 128) after ``--columns`` tokens a
row, the array grown to the next room ``KVSlots`` gives them, two ways, alternating, CPU-ms the
median of ``--repeat``:

- ``fresh``: a new array of the grown shape, the rows copied into it (as ``KVSlots`` grew before);
- ``in place``: the rows laid out again in the block of memory the array lies in (``KVSlots`` now).

Each round starts from a filled cache whose memory has been written once (as a serving batch's
has); the fresh array's pages are the system's first touch.

    python benchmarks/kv_slots_growth.py --columns 160
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Dict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from measure import alternating_cpu, print_cpu_ms  # noqa: E402
from wenxin.models.advance_step import COLUMN_AXIS, ROW_AXIS  # noqa: E402
from wenxin.models.kv_slots import KVSlots  # noqa: E402

ROWS = 16


def filled(columns: int) -> KVSlots:
    slots = KVSlots(np.zeros((18, 2, 1, 2, 0, 128), np.float32))
    slots.append(np.random.default_rng(0).standard_normal((18, 2, ROWS, 2, columns, 128), dtype=np.float32))
    slots.memory[slots.store.size:] = 0.0  # the whole block written once, as a busy batch's is
    return slots


def fresh(slots: KVSlots, columns: int) -> None:
    shape = list(slots.store.shape)
    shape[COLUMN_AXIS] = columns
    store = np.zeros(shape, dtype=slots.store.dtype)
    width = int(slots.lengths.max())
    store[:, :, :slots.rows, :, :width] = slots.store[:, :, :slots.rows, :, :width]
    slots.store = store


def in_place(slots: KVSlots, columns: int) -> None:
    slots._resize(int(slots.store.shape[ROW_AXIS]), columns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--columns", type=int, default=160)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    probe = filled(args.columns)
    grown = probe.columns + 32
    if probe.memory.size < probe._size(int(probe.store.shape[ROW_AXIS]), grown):
        raise SystemExit(f"the block made for {args.columns} columns has no room for {grown}")
    del probe
    ways: Dict[str, Callable[[KVSlots], None]] = {"fresh": lambda slots: fresh(slots, grown),
                                                  "in place": lambda slots: in_place(slots, grown)}
    cpu = alternating_cpu(ways, lambda: filled(args.columns), args.repeat)
    print_cpu_ms(f"{ROWS} rows of {args.columns} tokens (18 layers, 2 x 128 a token) grown to {grown} columns, "
                 f"median of {args.repeat}:", cpu)


if __name__ == "__main__":
    main()
