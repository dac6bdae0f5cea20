"""The tokens BLEU-4 and ROUGE-L count for generated and gold token ids.

A gold target's character outside the vocabulary reaches evaluation as ``[UNK]``. Read back as
text, ``[UNK]`` is three basic tokens (``[``, ``unk``, ``]``): the reference grew by two tokens a
time and a generated ``[UNK]`` matched it. Scored against the raw text instead (as ERNIE-kit
scored), an unknown character is one token that nothing generated can match. Here each
``[UNK]`` is one token of its own side (``REFERENCE_UNKNOWN`` or ``GENERATED_UNKNOWN``), which
never match, so the scores equal those against the raw text.
"""
from __future__ import annotations

from typing import List, Sequence

from wenxin.data.wordpiece import detokenize
from wenxin.metrics.generation import basic_tokens

UNKNOWN = "[UNK]"
REFERENCE_UNKNOWN = "\x00unknown-in-reference"
GENERATED_UNKNOWN = "\x00unknown-generated"


def metric_tokens(words: Sequence[str], unknown: str) -> List[str]:
    """The basic tokens of WordPiece ``words`` read as text, each ``[UNK]`` one token ``unknown``."""
    tokens: List[str] = []
    run: List[str] = []
    for word in words:
        if word == UNKNOWN:
            tokens += basic_tokens(detokenize(run)) if run else []
            tokens.append(unknown)
            run = []
        else:
            run.append(word)
    return tokens + (basic_tokens(detokenize(run)) if run else [])
