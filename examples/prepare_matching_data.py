"""Build a text-matching data set from the review-sentiment split (run
``prepare_sentiment_data.py`` first): do two reviews express the same sentiment?

Pairs are drawn within each split with a fixed seed, so no review of dev or test is seen in
training. Writes to ``examples/data/matching``:

- ``train_pointwise.tsv``: ``text_a<TAB>text_b<TAB>label`` (1 same sentiment, 0 opposite), balanced;
- ``train_pairwise.tsv``: ``query<TAB>pos_title<TAB>neg_title`` (pos has the query's sentiment);
- ``dev.tsv`` / ``test.tsv``: ``text_a<TAB>text_b<TAB>label`` (the pairwise model reads them as
  ``query``, ``title``, ``label``).

    python examples/prepare_matching_data.py [--pairs 20000]
"""
from __future__ import annotations

import argparse
import os
import random
import sys
from typing import Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))


def read_split(path: str) -> Dict[int, List[str]]:
    by_label: Dict[int, List[str]] = {0: [], 1: []}
    with open(path, encoding="utf-8") as f:
        for line in f:
            text, label = line.rstrip("\n").rsplit("\t", 1)
            by_label[int(label)].append(text)
    return by_label


def pointwise(by_label: Dict[int, List[str]], n: int, rng: random.Random) -> List[Tuple[str, str, int]]:
    rows = []
    for i in range(n):
        a_label = rng.randint(0, 1)
        same = i % 2 == 0  # balanced
        b_label = a_label if same else 1 - a_label
        rows.append((rng.choice(by_label[a_label]), rng.choice(by_label[b_label]), int(same)))
    return rows


def pairwise(by_label: Dict[int, List[str]], n: int, rng: random.Random) -> List[Tuple[str, str, str]]:
    rows = []
    for _ in range(n):
        label = rng.randint(0, 1)
        rows.append((rng.choice(by_label[label]), rng.choice(by_label[label]), rng.choice(by_label[1 - label])))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=os.path.join(HERE, "data", "sentiment"))
    parser.add_argument("--output", default=os.path.join(HERE, "data", "matching"))
    parser.add_argument("--pairs", type=int, default=20000, help="training pairs / triples")
    args = parser.parse_args()
    rng = random.Random(2024)
    missing = [name for name in ("train.tsv", "dev.tsv", "test.tsv")
               if not os.path.isfile(os.path.join(args.source, name))]
    if missing:
        sys.exit(f"error: {os.path.join(args.source, missing[0])} not found: the matching pairs are drawn from the "
                 f"sentiment data; run examples/prepare_sentiment_data.py first (or pass --source)")
    os.makedirs(args.output, exist_ok=True)
    train = read_split(os.path.join(args.source, "train.tsv"))
    outputs = {"train_pointwise.tsv": pointwise(train, args.pairs, rng),
               "train_pairwise.tsv": pairwise(train, args.pairs, rng)}
    for split in ("dev", "test"):
        outputs[f"{split}.tsv"] = pointwise(read_split(os.path.join(args.source, f"{split}.tsv")), 2000, rng)
    for name, rows in outputs.items():
        with open(os.path.join(args.output, name), "w", encoding="utf-8") as f:
            f.writelines("\t".join(map(str, row)) + "\n" for row in rows)
        print(f"{name}: {len(rows)} rows")


if __name__ == "__main__":
    main()
