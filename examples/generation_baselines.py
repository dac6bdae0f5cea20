"""Simple baselines for the generation example (``examples/text_generation_ernie.json``), scored
as its evaluation scores (BLEU-4 and ROUGE-L over ``wenxin.metrics.generation.basic_tokens``):

- ``lead``: the paragraph's first characters, as many as the median training question has;
- ``answer``: the answer itself (questions often name it);
- ``retrieval``: the question of the training paragraph most like the test paragraph (cosine of
  character-bigram TF-IDF vectors).

    python examples/generation_baselines.py [--data examples/data/generation] [--split test]
"""
from __future__ import annotations

import argparse
import collections
import math
import os
from typing import Counter, Dict, List, Tuple

from wenxin.metrics.generation import basic_tokens, generation_metrics

HERE = os.path.dirname(os.path.abspath(__file__))


def read_rows(path: str) -> List[Tuple[str, str, str]]:
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()[1:]  # the header
    return [tuple(line.split("\t")) for line in lines]  # type: ignore[misc]


def bigrams(text: str) -> Counter[str]:
    return collections.Counter(text[i:i + 2] for i in range(len(text) - 1))


def tfidf(counts: Counter[str], idf: Dict[str, float]) -> Dict[str, float]:
    vector = {gram: n * idf.get(gram, 0.0) for gram, n in counts.items()}
    norm = math.sqrt(sum(v * v for v in vector.values())) or 1.0
    return {gram: v / norm for gram, v in vector.items()}


def retrieval(train: List[Tuple[str, str, str]], test: List[Tuple[str, str, str]]) -> List[str]:
    """Each test row's answer: the question of the most similar training paragraph."""
    documents = [bigrams(row[1]) for row in train]
    frequency: Counter[str] = collections.Counter(gram for doc in documents for gram in doc)
    idf = {gram: math.log(len(documents) / n) for gram, n in frequency.items()}
    vectors = [tfidf(doc, idf) for doc in documents]
    index: Dict[str, List[Tuple[int, float]]] = collections.defaultdict(list)
    for i, vector in enumerate(vectors):
        for gram, value in vector.items():
            index[gram].append((i, value))
    answers = []
    for row in test:
        scores: Counter[int] = collections.Counter()
        for gram, value in tfidf(bigrams(row[1]), idf).items():
            for i, other in index.get(gram, ()):
                scores[i] += value * other
        best = scores.most_common(1)[0][0] if scores else 0
        answers.append(train[best][2])
    return answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=os.path.join(HERE, "data", "generation"))
    parser.add_argument("--split", default="test")
    args = parser.parse_args()
    train = read_rows(os.path.join(args.data, "train.tsv"))
    test = read_rows(os.path.join(args.data, f"{args.split}.tsv"))
    length = sorted(len(row[2]) for row in train)[len(train) // 2]
    references = [basic_tokens(row[2]) for row in test]
    for name, answers in (("lead", [row[1][:length] for row in test]), ("answer", [row[0] for row in test]),
                          ("retrieval", retrieval(train, test))):
        metrics = generation_metrics(references, [basic_tokens(a) for a in answers])
        print(f"{name:10s} BLEU-4 {metrics['bleu4']:.4f}  ROUGE-L {metrics['rouge_l']:.4f}")


if __name__ == "__main__":
    main()
