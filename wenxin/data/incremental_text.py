"""An answer's text as its token ids come, each id decoding a few ids instead of the whole answer.

Decoding the whole answer again for every new id costs a stream O(n) a token and an answer O(n^2):
on ERNIE 4.5's tokenizer 37 CPU-µs a token over a 72-token answer, 820 over 2,000 (this way 11 and
21; ``benchmarks/answer_text.py``), where 16 rows of 2,000 tokens would spend a fifth of a 16-row
int8 decoding step at 0.3B's shape (about 60 ms) on their text. Here each
new id is decoded in a short window that starts at the id before the ones not yet shown, and the
window's text beyond its head's (the window's already-shown ids) is what the id adds. SentencePiece
drops a leading space only at the start of what it decodes, so the window and its head drop the
same one (the method of Hugging Face's text streamer and vLLM's detokenizer).
"""
from __future__ import annotations

from typing import Callable, List, Sequence

Decode = Callable[[Sequence[int]], str]


class IncrementalText:
    """The text of ``decode(ids)`` as ids are added one at a time.

    Args:
        decode: ids -> text, holding back the bytes of a last character that is not complete yet
            (``Ernie45Tokenizer.decode_complete``), so a decoded text only grows as ids come.

    ``text`` equals ``decode(ids)`` where later ids do not change the text of ids before the
    window (SentencePiece's; tested against decoding the whole answer at every id). Where a window's
    text does not begin with its head's (a tokenizer that is not concatenative there), the whole
    ids are decoded again, as every id was before.
    """

    def __init__(self, decode: Decode) -> None:
        self._decode = decode
        self.ids: List[int] = []
        self.text = ""
        self._start = 0  # the window's first id
        self._shown = 0  # ids[:_shown] are all in text
        self._head = ""  # decode(ids[_start:_shown])

    def add(self, token_id: int) -> str:
        """Add one id; returns the whole text so far."""
        self.ids.append(token_id)
        window = self._decode(self.ids[self._start:])
        if not window.startswith(self._head):
            self.text = self._decode(self.ids)
            self._start = self._shown = len(self.ids)
            self._head = ""
            if self._start:  # a window keeps one id before the new ones (its leading space)
                self._start -= 1
                self._head = self._decode(self.ids[self._start:])
            return self.text
        added = window[len(self._head):]
        if added:
            self.text += added
            self._start, self._shown = self._shown, len(self.ids)
            self._head = self._decode(self.ids[self._start:])
        return self.text
