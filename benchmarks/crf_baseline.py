"""A classical baseline for the segmentation example: a linear-chain CRF over character n-gram
window features (sklearn-crfsuite, a benchmark dependency: ``pip install sklearn-crfsuite``).

    python examples/prepare_segmentation_data.py            # examples/data/segmentation
    python benchmarks/crf_baseline.py [--data examples/data/segmentation] [--max_iterations 100]

Features of character i (the usual window set for Chinese segmentation): the characters at
offsets -2..+2, the bigrams (-2,-1), (-1,0), (0,1), (1,2) and (-1,+1), whether the character is a
digit, a Latin letter or punctuation, and sentence begin/end marks. Training is L-BFGS with
L1 and L2 penalties (``--c1``, ``--c2``) for ``--max_iterations`` passes, on the train split;
the model is scored on the test split with wenxin's own chunk F1 (``wenxin.metrics.chunking``),
the metric the example's trainer reports. Wall time covers feature extraction, training and
tagging the test split.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import unicodedata
from typing import Dict, List, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from wenxin.metrics.chunking import chunk_f1  # noqa: E402  (Paddle-free)


def read_split(path: str) -> List[Tuple[List[str], List[str]]]:
    """``chars<TAB>tags`` lines, both space-separated."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            chars, _, tags = line.rstrip("\n").partition("\t")
            chars_list, tags_list = chars.split(" "), tags.split(" ")
            if len(chars_list) != len(tags_list):
                raise SystemExit(f"{path}:{lineno}: {len(chars_list)} characters, {len(tags_list)} tags")
            rows.append((chars_list, tags_list))
    return rows


def char_kind(char: str) -> str:
    if char.isdigit():
        return "digit"
    if char.isascii() and char.isalpha():
        return "latin"
    if unicodedata.category(char).startswith("P"):
        return "punct"
    return "other"


def features(chars: List[str]) -> List[Dict[str, object]]:
    padded = ["<s2>", "<s1>"] + chars + ["</s1>", "</s2>"]
    out = []
    for i in range(len(chars)):
        at = i + 2  # index in padded
        window = {f"c{k}": padded[at + k] for k in (-2, -1, 0, 1, 2)}
        bigrams = {f"b{a}{b}": padded[at + a] + padded[at + b] for a, b in ((-2, -1), (-1, 0), (0, 1), (1, 2), (-1, 1))}
        out.append({"bias": 1.0, **window, **bigrams, "kind": char_kind(chars[i]),
                    "kind-1": char_kind(padded[at - 1]) if at - 1 >= 2 else "begin",
                    "kind+1": char_kind(padded[at + 1]) if at + 1 < len(chars) + 2 else "end"})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join(REPO, "examples", "data", "segmentation"))
    parser.add_argument("--max_iterations", type=int, default=100)
    parser.add_argument("--c1", type=float, default=0.05)
    parser.add_argument("--c2", type=float, default=0.01)
    args = parser.parse_args()
    try:
        import sklearn_crfsuite
    except ImportError:
        raise SystemExit("this benchmark needs sklearn-crfsuite: pip install sklearn-crfsuite") from None
    train = read_split(os.path.join(args.data, "train.tsv"))
    test = read_split(os.path.join(args.data, "test.tsv"))
    start, cpu = time.perf_counter(), time.process_time()
    x_train = [features(chars) for chars, _ in train]
    y_train = [tags for _, tags in train]
    featurized = time.perf_counter()
    crf = sklearn_crfsuite.CRF(algorithm="lbfgs", c1=args.c1, c2=args.c2, max_iterations=args.max_iterations,
                               all_possible_transitions=True)
    crf.fit(x_train, y_train)
    trained = time.perf_counter()
    predicted = crf.predict([features(chars) for chars, _ in test])
    done = time.perf_counter()
    scores = chunk_f1([tags for _, tags in test], predicted)
    print(f"train {len(train)} clauses, test {len(test)}; features {featurized - start:.1f} s, "
          f"training {trained - featurized:.1f} s ({args.max_iterations} L-BFGS iterations), "
          f"tagging the test split {done - trained:.1f} s; wall {done - start:.1f} s, CPU "
          f"{time.process_time() - cpu:.1f} s; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"test precision {scores['precision']:.4f} recall {scores['recall']:.4f} F1 {scores['f1']:.4f} "
          f"char accuracy {scores['token_acc']:.4f}")


if __name__ == "__main__":
    main()
