"""What a row leaving the decoding batch costs in cache copies (issue 69): one row in the middle of
16 leaves, at ERNIE-4.5-0.3B's cache shape (18 layers, 2 key/value heads of 128) after
``--columns`` tokens a row, three ways, alternating, CPU-ms the median of ``--repeat``:

- ``indexed``: the rows after it moved down by one numpy indexed copy (``store[:, :, order] =
  ...``: gathered into a new array, scattered back), as ``KVSlots.keep`` did;
- ``sliced``: the same rows moved one at a time by slicing, each its own columns (``KVSlots.keep``
  now);
- ``fewest moves``: the order ``BatchDecoder`` now hands ``keep`` (``fewest_moves``): the last row
  moves into the slot, the others stay.

    python benchmarks/kv_slots_keep.py --columns 150
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Dict, List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from measure import alternating_cpu, print_cpu_ms  # noqa: E402
from wenxin.models.batch_decoding import _Member, fewest_moves  # noqa: E402
from wenxin.models.kv_slots import KVSlots  # noqa: E402

ROWS, LEAVING = 16, 3


def filled(columns: int) -> KVSlots:
    slots = KVSlots(np.zeros((18, 2, 1, 2, 0, 128), np.float32))
    slots.append(np.random.default_rng(0).standard_normal((18, 2, ROWS, 2, columns, 128), dtype=np.float32))
    return slots


def indexed(slots: KVSlots, rows: List[int]) -> None:
    order = np.asarray(rows, dtype=np.int64)
    moved = np.flatnonzero(order != np.arange(len(order)))
    width = int(slots.lengths[order[moved]].max(initial=0))
    slots.store[:, :, moved, :, :width] = slots.store[:, :, order[moved], :, :width]
    slots.lengths = slots.lengths[order]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--columns", type=int, default=150)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    staying = [row for row in range(ROWS) if row != LEAVING]
    members = [_Member(row, None, 1) for row in staying]  # type: ignore[arg-type]
    fewest = fewest_moves(staying, members, staying)[0]
    ways: Dict[str, Callable[[KVSlots], None]] = {
        "indexed": lambda slots: indexed(slots, staying), "sliced": lambda slots: slots.keep(staying),
        "fewest moves": lambda slots: slots.keep(fewest)}
    cpu = alternating_cpu(ways, lambda: filled(args.columns), args.repeat)
    print_cpu_ms(f"row {LEAVING} of {ROWS} leaves after {args.columns} tokens a row (18 layers, 2 x 128 a token), "
                 f"median of {args.repeat}:", cpu)


if __name__ == "__main__":
    main()
