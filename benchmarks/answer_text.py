"""A streamed chat answer's text as its tokens come: decoding a window of a few ids a token
(``wenxin.data.incremental_text``, what ``AnswerText`` does over ``ChatFormat``) against decoding
the whole answer again at every token (``RebuiltResult``, what it did before), in one run.

    python benchmarks/answer_text.py [--tokenizer FOLDER] [--lengths 72 500 2000] [--rounds 5]

Each answer length: the mean CPU-µs a token over the whole answer, both ways, in rounds that
alternate their order (median of the rounds), and whether both gave the same pieces. The answer is
the tokenizer's ids of this repository's README (English and Chinese), one id at a time; the
default tokenizer is the test fixture's ERNIE 4.5 SentencePiece model.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from measure import alternating_cpu, load_note  # noqa: E402
from wenxin.data.ernie45_tokenizer import Ernie45Tokenizer  # noqa: E402
from wenxin.inference.formatters import ChatFormat, RebuiltResult  # noqa: E402
from wenxin.inference.generator import AnswerText  # noqa: E402


class ChatField:
    """What ``ChatFormat`` reads of its field: the tokenizer."""

    def __init__(self, tokenizer: Ernie45Tokenizer) -> None:
        self.tokenizer = tokenizer


def streamed(chat: ChatFormat, ids: List[int], rebuilt: bool) -> List[Any]:
    answer = AnswerText(chat, ["row"])
    if rebuilt:
        answer.growing = RebuiltResult(chat, ["row"])
    return [answer.add(token_id) for token_id in ids]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokenizer", default=os.path.join(ROOT, "tests", "fixtures", "ernie45", "tied"))
    parser.add_argument("--lengths", type=int, nargs="+", default=[72, 500, 2000])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    tokenizer = Ernie45Tokenizer(args.tokenizer)
    chat = ChatFormat([], [ChatField(tokenizer)])
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        source = tokenizer.encode(f.read() * 4)
    print(f"# {load_note()} before; tokenizer {args.tokenizer} ({tokenizer.processor.GetPieceSize()} pieces)")
    print("| answer tokens | whole answer a token (CPU-µs) | window a token (CPU-µs) | ratio | same pieces |")
    print("|---|---|---|---|---|")
    for length in args.lengths:
        ids = source[:length]
        same = streamed(chat, ids, rebuilt=True) == streamed(chat, ids, rebuilt=False)
        ways: Dict[str, Callable[[Any], object]] = {
            "whole": lambda answer: streamed(chat, answer, rebuilt=True),
            "window": lambda answer: streamed(chat, answer, rebuilt=False)}
        cpu = alternating_cpu(ways, lambda answer=ids: answer, args.rounds)
        whole, window = (1e6 * cpu[name] / len(ids) for name in ("whole", "window"))
        print(f"| {len(ids)} | {whole:.1f} | {window:.1f} | {whole / window:.1f}x | {same} |")
    print(f"# {load_note()} after")


if __name__ == "__main__":
    main()
