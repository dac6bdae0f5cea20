"""Prepare the distillation example from the review data (``examples/prepare_sentiment_data.py``
first): each review cut into words with their parts of speech by ``snownlp`` (MIT licensed, the
``examples`` extra), the student's data (words split by spaces) and the unlabeled texts the
teacher labels, made by ``wenxin.data.augment`` from the training reviews (Tang et al.'s noise,
same-POS replacement and n-gram sampling).

    python examples/prepare_distillation_data.py [--copies 3]

Writes ``examples/data/distillation/``: ``student_train/part.0`` (the labelled training reviews),
``dev.tsv``, ``test.tsv`` (words<TAB>label) and ``unlabeled.tsv`` (student words<TAB>teacher text).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "data", "sentiment")
TARGET = os.path.join(HERE, "data", "distillation")


def tagged(text: str) -> List[Tuple[str, str]]:
    """The words of a review and their parts of speech (snownlp's tagger), spaces dropped."""
    from snownlp import SnowNLP
    return [(word, tag) for word, tag in SnowNLP(text).tags if word.strip()]


def read(split: str) -> List[Tuple[str, str]]:
    path = os.path.join(SOURCE, f"{split}.tsv")
    if not os.path.isfile(path):
        sys.exit(f"error: {path} not found: run python examples/prepare_sentiment_data.py first")
    with open(path, encoding="utf-8") as f:
        return [tuple(line.rstrip("\n").split("\t")) for line in f if line.strip()]  # type: ignore[misc]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=3, help="augmented copies tried per training review")
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(HERE))
    from wenxin.data.augment import AugmentSettings, augment, teacher_text
    os.makedirs(os.path.join(TARGET, "student_train"), exist_ok=True)
    train_words = []
    for split, out in (("train", "student_train/part.0"), ("dev", "dev.tsv"), ("test", "test.tsv")):
        rows = read(split)
        with open(os.path.join(TARGET, out), "w", encoding="utf-8") as f:
            for text, label in rows:
                words = tagged(text)
                f.write(" ".join(word for word, _ in words) + "\t" + label + "\n")
                if split == "train":
                    train_words.append(words)
        print(f"{split}: {len(rows)} reviews", flush=True)
    written = 0
    with open(os.path.join(TARGET, "unlabeled.tsv"), "w", encoding="utf-8") as f:
        for _, words in augment(train_words, AugmentSettings(copies=args.copies)):
            if len(words) > 0 and teacher_text(words, ""):
                f.write(" ".join(words) + "\t" + teacher_text(words, "") + "\n")
                written += 1
    print(f"unlabeled: {written} augmented texts from {len(train_words)} training reviews")


if __name__ == "__main__":
    main()
