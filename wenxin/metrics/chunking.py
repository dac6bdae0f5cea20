"""Chunk-level metrics for tagging (BIO, BIOES, BMES): a chunk counts only when its type and
both boundaries are right."""
from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

Chunk = Tuple[str, int, int]  # (type, first token, last token)


def _split_tag(tag: str) -> Tuple[str, str]:
    """``B-PER`` -> (``B``, ``PER``); ``s`` -> (``S``, ``""``); ``O`` -> (``O``, ``""``)."""
    prefix, _, kind = tag.partition("-")
    prefix = prefix.upper()
    if prefix not in ("B", "I", "M", "E", "S", "O"):
        return "B", tag  # an unknown scheme: each tag value is a one-token chunk type
    return prefix, kind


def extract_chunks(tags: Sequence[str]) -> List[Chunk]:
    """Chunks of a tag sequence. ``B``/``S`` start a chunk, ``E``/``S`` end it, ``O`` is outside;
    an ``I``/``M``/``E`` that does not continue a chunk of its type starts one (as conlleval)."""
    chunks: List[Chunk] = []
    open_chunk: Optional[Tuple[str, int]] = None

    def close(end: int) -> None:
        nonlocal open_chunk
        if open_chunk is not None:
            chunks.append((open_chunk[0], open_chunk[1], end))
            open_chunk = None

    for i, tag in enumerate(tags):
        prefix, kind = _split_tag(tag)
        if prefix == "O":
            close(i - 1)
            continue
        if prefix in ("B", "S") or open_chunk is None or open_chunk[0] != kind:
            close(i - 1)
            open_chunk = (kind, i)
        if prefix in ("E", "S"):
            close(i)
    close(len(tags) - 1)
    return chunks


def chunk_f1(gold: Iterable[Sequence[str]], predicted: Iterable[Sequence[str]]) -> Dict[str, float]:
    """Micro precision, recall and F1 over chunks, and token accuracy, of aligned tag sequences."""
    n_gold = n_pred = n_correct = tokens = right_tokens = 0
    for g, p in zip(gold, predicted):
        if len(g) != len(p):
            raise ValueError(f"tag sequences differ in length: {len(g)} gold, {len(p)} predicted")
        gold_chunks: Set[Chunk] = set(extract_chunks(g))
        pred_chunks: Set[Chunk] = set(extract_chunks(p))
        n_gold += len(gold_chunks)
        n_pred += len(pred_chunks)
        n_correct += len(gold_chunks & pred_chunks)
        tokens += len(g)
        right_tokens += sum(a == b for a, b in zip(g, p))
    precision = n_correct / n_pred if n_pred else 0.0
    recall = n_correct / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1,
            "token_acc": right_tokens / tokens if tokens else 0.0}
