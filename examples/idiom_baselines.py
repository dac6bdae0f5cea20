"""Baselines for the idiom example (``examples/text_generation_idiom.json``), scored as its
evaluation scores (BLEU-4 and ROUGE-L over ``wenxin.metrics.generation.basic_tokens``), with the
share of idioms written exactly:

- ``unigram``: each syllable's most frequent character in the training idioms (what a pinyin
  input method without context types);
- ``bigram``: the most likely idiom under a character bigram model of the training idioms
  (add-0.1 smoothing) and each syllable's character frequencies, found by Viterbi search.

    python examples/idiom_baselines.py [--data examples/data/idiom] [--split test]
"""
from __future__ import annotations

import argparse
import collections
import math
import os
from typing import Counter, Dict, List, Tuple

from wenxin.metrics.generation import basic_tokens, generation_metrics

HERE = os.path.dirname(os.path.abspath(__file__))
Row = Tuple[List[str], str]  # (syllables, idiom)


def read_rows(path: str) -> List[Row]:
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()[1:]  # the header
    return [(pinyin.split(), idiom) for pinyin, idiom in (line.split("\t") for line in lines)]


def syllable_characters(train: List[Row]) -> Dict[str, Counter[str]]:
    """How often each syllable was written as each character."""
    counts: Dict[str, Counter[str]] = collections.defaultdict(collections.Counter)
    for syllables, idiom in train:
        for syllable, char in zip(syllables, idiom):
            counts[syllable][char] += 1
    return counts


def unigram(train: List[Row], test: List[Row]) -> List[str]:
    counts = syllable_characters(train)
    return ["".join(counts[s].most_common(1)[0][0] if s in counts else "" for s in syllables)
            for syllables, _ in test]


def bigram(train: List[Row], test: List[Row], smoothing: float = 0.1) -> List[str]:
    counts = syllable_characters(train)
    pairs: Counter[Tuple[str, str]] = collections.Counter()
    before: Counter[str] = collections.Counter()
    for _, idiom in train:
        sequence = ["<s>", *idiom, "</s>"]
        pairs.update(zip(sequence, sequence[1:]))
        before.update(sequence[:-1])
    characters = len({c for _, idiom in train for c in idiom}) + 1

    def transition(previous: str, char: str) -> float:
        return math.log((pairs[previous, char] + smoothing) / (before[previous] + smoothing * characters))

    answers = []
    for syllables, _ in test:
        best: Dict[str, Tuple[float, str]] = {"<s>": (0.0, "")}  # last character -> (log-probability, text)
        for syllable in syllables:
            options = counts.get(syllable)
            if not options:  # a syllable the training idioms never had: skip it
                continue
            total = sum(options.values())
            best = {char: max((score + transition(last, char) + math.log(n / total), text + char)
                              for last, (score, text) in best.items())
                    for char, n in options.items()}
        answers.append(max((score + transition(last, "</s>"), text) for last, (score, text) in best.items())[1])
    return answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=os.path.join(HERE, "data", "idiom"))
    parser.add_argument("--split", default="test", choices=["dev", "test"])
    args = parser.parse_args()
    train = read_rows(os.path.join(args.data, "train.tsv"))
    test = read_rows(os.path.join(args.data, f"{args.split}.tsv"))
    references = [basic_tokens(idiom) for _, idiom in test]
    for name, baseline in (("unigram", unigram), ("bigram", bigram)):
        answers = baseline(train, test)
        scores = generation_metrics(references, [basic_tokens(answer) for answer in answers])
        exact = sum(answer == idiom for answer, (_, idiom) in zip(answers, test)) / len(test)
        print(f"{name:8s} {args.split}: bleu4 {scores['bleu4']:.3f}  rouge_l {scores['rouge_l']:.3f}  "
              f"exact {exact:.3f}")


if __name__ == "__main__":
    main()
