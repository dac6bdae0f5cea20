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
from typing import Callable, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "ernie")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from measure import load_note, timed  # noqa: E402


def rate(encode: Callable[[str], List[int]], texts: List[str], repeat: int = 5) -> Tuple[float, float]:
    """Strings per CPU-second and per wall second, each the best of ``repeat`` passes."""
    best_cpu = best_wall = float("inf")
    for _ in range(repeat):
        start, cpu = time.perf_counter(), time.process_time()
        for text in texts:
            encode(text)
        best_cpu = min(best_cpu, time.process_time() - cpu)
        best_wall = min(best_wall, time.perf_counter() - start)
    return len(texts) / max(best_cpu, 1e-9), len(texts) / best_wall


def main() -> None:
    from wenxin.data.vocab import Vocab
    from wenxin.data.wordpiece import FullTokenizer

    with open(os.path.join(FIXTURES, "tokenizer_reference.json"), encoding="utf-8") as f:
        texts = [case["text"] for case in json.load(f)["singles"]] * 4
    tokenizer = FullTokenizer({"lowercase": True, "unk_token": "[UNK]"})
    tokenizer.bind_vocab(Vocab.load(os.path.join(FIXTURES, "vocab.txt"), "[UNK]"))
    print(load_note())
    ours, ours_wall = rate(tokenizer.to_ids, texts)
    print(f"wenxin FullTokenizer (tokenizers {__import__('tokenizers').__version__}): {ours:,.0f} strings per "
          f"CPU-second ({ours_wall:,.0f} a wall second)")
    cpu, wall = timed(lambda: tokenizer.to_ids_batch(texts))
    print(f"wenxin FullTokenizer, batch of {len(texts)}: {len(texts) / max(cpu, 1e-9):,.0f} strings per CPU-second "
          f"({len(texts) / wall:,.0f} a wall second)")
    try:
        from paddlenlp.transformers import ErnieTokenizer
    except ImportError:
        print("PaddleNLP not importable here: no baseline (see the module docstring)")
        return
    reference = ErnieTokenizer(os.path.join(FIXTURES, "vocab.txt"))
    theirs, theirs_wall = rate(lambda t: reference.convert_tokens_to_ids(reference.tokenize(t)), texts)
    same = all(reference.convert_tokens_to_ids(reference.tokenize(t)) == tokenizer.to_ids(t) for t in texts)
    print(f"PaddleNLP ErnieTokenizer: {theirs:,.0f} strings per CPU-second ({theirs_wall:,.0f} a wall second)")
    print(f"speed-up: {ours / theirs:.1f}x by CPU time ({ours_wall / theirs_wall:.1f}x by wall time); "
          f"same ids on every string: {same}")


if __name__ == "__main__":
    main()
