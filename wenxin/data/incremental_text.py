"""An answer's text as its token ids come, each id decoding a few ids instead of the whole answer.

Decoding the whole answer again for every new id costs a stream O(n) a token and an answer O(n^2):
on ERNIE 4.5's tokenizer 38 CPU-µs a token over a 72-token answer, 798 over 2,000 (this way 10 and
20; ``benchmarks/answer_text.py``): 16 rows at their 2,000th token spent about 25 ms a step on their
text (1.6 ms each), beside a 16-row int8 step at 0.3B's shape of about 60 ms. Here each new id is decoded in a
short window that starts at the ids shown last, and the window's text beyond its head's (those
ids' text) is what the new ones add. SentencePiece drops a leading space only at the start of what
it decodes, so the window and its head drop the same one (the method of Hugging Face's text
streamer and vLLM's detokenizer).
"""
from __future__ import annotations

from typing import Callable, List, Sequence

Decode = Callable[[Sequence[int]], str]
Tail = Callable[[Sequence[int]], int]


class IncrementalText:
    """The text of ``decode(ids)`` as ids are added one at a time, without the bytes of a last
    character not complete yet.

    Args:
        decode: ids -> text (``Ernie45Tokenizer.decode`` leaving special tokens out).
        incomplete_tail: how many ids at the end are bytes of a character not complete yet
            (``Ernie45Tokenizer.incomplete_tail``); they wait in the window until it is.

    ``text`` equals ``decode`` of the ids without that tail (``Ernie45Tokenizer.decode_complete``)
    where later ids do not change the text of ids before the window (SentencePiece's; tested
    against decoding the whole answer at every id). Where a window's text does not begin with its
    head's (a tokenizer that is not concatenative there), the whole ids are decoded again, as
    every id was before. Ids without text (special tokens left out) move the window on like any.
    """

    def __init__(self, decode: Decode, incomplete_tail: Tail) -> None:
        self._decode, self._incomplete_tail = decode, incomplete_tail
        self.ids: List[int] = []
        self.text = ""
        self._start = 0  # the window's first id: the first of the ids shown last
        self._shown = 0  # ids[:_shown] are all in text
        self._head = ""  # decode(ids[_start:_shown])

    def add(self, token_id: int) -> str:
        """Add one id; returns the whole text so far."""
        self.ids.append(token_id)
        complete = len(self.ids) - self._incomplete_tail(self.ids)
        if complete <= self._shown:
            return self.text
        window = self._decode(self.ids[self._start:complete])
        if window.startswith(self._head):
            self.text += window[len(self._head):]
        else:
            self.text = self._decode(self.ids[:complete])
        self._start, self._shown = self._shown, complete  # the window starts where a character does
        self._head = self._decode(self.ids[self._start:complete])
        return self.text
