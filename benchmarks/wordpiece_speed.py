"""WordPiece throughput: wenxin's ``FullTokenizer`` (the ``tokenizers`` library) against
PaddleNLP's pure-Python ``ErnieTokenizer``, on the parity fixture's strings, in one run.

    python benchmarks/wordpiece_speed.py            # wenxin alone
    /path/to/pnlp-venv/bin/python benchmarks/wordpiece_speed.py   # with PaddleNLP 2.8.1 and
                                                    # tokenizers installed: both, and the ratio

Prints strings per second and, when PaddleNLP is importable, the speed-up and whether every
string got the same ids.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Callable, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "ernie")


def rate(encode: Callable[[str], List[int]], texts: List[str], repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for text in texts:
            encode(text)
        best = min(best, time.perf_counter() - start)
    return len(texts) / best


def main() -> None:
    from wenxin.data.vocab import Vocab
    from wenxin.data.wordpiece import FullTokenizer

    with open(os.path.join(FIXTURES, "tokenizer_reference.json"), encoding="utf-8") as f:
        texts = [case["text"] for case in json.load(f)["singles"]] * 4
    tokenizer = FullTokenizer({"lowercase": True, "unk_token": "[UNK]"})
    tokenizer.bind_vocab(Vocab.load(os.path.join(FIXTURES, "vocab.txt"), "[UNK]"))
    ours = rate(tokenizer.to_ids, texts)
    print(f"wenxin FullTokenizer (tokenizers {__import__('tokenizers').__version__}): {ours:,.0f} strings/s")
    start = time.perf_counter()
    tokenizer.to_ids_batch(texts)
    print(f"wenxin FullTokenizer, batch of {len(texts)}: {len(texts) / (time.perf_counter() - start):,.0f} strings/s")
    try:
        from paddlenlp.transformers import ErnieTokenizer
    except ImportError:
        print("PaddleNLP not importable here: no baseline (see the module docstring)")
        return
    reference = ErnieTokenizer(os.path.join(FIXTURES, "vocab.txt"))
    theirs = rate(lambda t: reference.convert_tokens_to_ids(reference.tokenize(t)), texts)
    same = all(reference.convert_tokens_to_ids(reference.tokenize(t)) == tokenizer.to_ids(t) for t in texts)
    print(f"PaddleNLP ErnieTokenizer: {theirs:,.0f} strings/s")
    print(f"speed-up: {ours / theirs:.1f}x; same ids on every string: {same}")


if __name__ == "__main__":
    main()
