"""Subject-predicate-object triples from per-token multi-label tags, as ERNIE-kit's many-to-many
information extraction labels them, and their triple-level precision, recall and F1.

Label ids (ERNIE-kit's label map rules): 0 ``O``, 1 ``I`` (inside an entity), then for each
predicate ``r`` an even id ``B-r@S`` (a subject of ``r`` starts here) and the next odd id
``B-r@O`` (an object of ``r`` starts here). A token may carry several labels: it can start the
subject of one relation and the object of another.

Decoding (ERNIE-kit's ``_post_proc`` and ``_gen_output``): threshold the probabilities, tidy the
marks, find the spans of each ``B`` label (the ``B`` token and the ``I`` tokens after it), then
pair the subjects and objects of each predicate whose two ``B`` labels both occur: one subject with
every object, every subject with one object, else each subject with the object that starts
nearest to it. Used by the model's metrics (token positions) and by the result format
(character offsets), so an evaluation scores exactly what inference reports.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Set, Tuple

import numpy as np

OUTSIDE, INSIDE = 0, 1
Span = Tuple[int, int]  # first and last token, inclusive
Triple = Tuple[int, int, int, int, int]  # subject label id, subject span, object span


def tidy_marks(marks: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """A whole sequence's ``[L, N]`` 0/1 marks (probabilities over the threshold; ``[CLS]`` and
    ``[SEP]`` included), tidied, with its probabilities ``[L, N]``. A token marked both ``O`` and
    something else keeps ``O`` alone (``I`` too if marked), unless the next token is ``I``, which
    makes it an entity's start: then ``O`` goes. A token with no mark before an ``I`` becomes
    ``I`` when the previous token is ``I`` too, else takes its most probable entity label.
    (ERNIE-kit meant the latter but took the arg-max of the all-zero marks, always ``I``.)"""
    marks = np.array(marks, dtype=np.int64)
    length = marks.shape[0]
    for i in range(length - 1):
        if marks[i, OUTSIDE] == 1 and marks[i].sum() > 1:
            if marks[i + 1, INSIDE] == 1:
                marks[i, OUTSIDE] = 0
            else:
                marks[i, 2:] = 0
    for i in range(1, length - 1):
        if marks[i].sum() == 0 and marks[i + 1, INSIDE] == 1:
            if marks[i - 1, INSIDE] == 1:
                marks[i, INSIDE] = 1
            else:
                marks[i, 1 + int(np.argmax(probs[i, 1:]))] = 1
    return marks


def spans(marks: np.ndarray, label: int) -> List[Span]:
    """The spans that ``label`` starts: its token and the ``I`` tokens right after it."""
    found = []
    for start in np.flatnonzero(marks[:, label]).tolist():
        end = start
        while end + 1 < len(marks) and marks[end + 1, INSIDE] == 1:
            end += 1
        found.append((start, end))
    return found


def decode_triples(marks: np.ndarray, starts: Sequence[int]) -> List[Triple]:
    """The triples of one text's tidied marks ``[L, N]`` (its tokens only, without ``[CLS]`` and
    ``[SEP]``). ``starts[i]`` is where token ``i`` starts (a character offset, or ``i``): the
    distance by which a subject finds its nearest object."""
    present = set(np.flatnonzero(marks.any(axis=0)).tolist())
    triples: List[Triple] = []
    for subject_label in sorted(label for label in present if label >= 2 and label % 2 == 0):
        if subject_label + 1 not in present:
            continue
        subjects, objects = spans(marks, subject_label), spans(marks, subject_label + 1)
        if len(subjects) == 1:
            pairs = [(subjects[0], o) for o in objects]
        elif len(objects) == 1:
            pairs = [(s, objects[0]) for s in subjects]
        else:
            pairs = [(s, nearest(objects, starts, starts[s[0]])) for s in subjects]
        triples.extend((subject_label, *s, *o) for s, o in pairs)
    return triples


def nearest(objects: List[Span], starts: Sequence[int], position: int) -> Span:
    """The object that starts nearest ``position`` (the first of equally near ones)."""
    return min(objects, key=lambda span: abs(starts[span[0]] - position))


def gold_triples(rows: np.ndarray) -> Set[Triple]:
    """The gold triples of one example from its ``[K, 5]`` rows (padding rows have a label
    below 2; a triple whose entity did not start on a token has span ``-1``: it counts, but
    nothing can match it)."""
    return {tuple(int(v) for v in row) for row in rows if row[0] >= 2}  # type: ignore[misc]


def triple_f1(gold: Sequence[Set[Triple]], predicted: Sequence[Set[Triple]]) -> Dict[str, float]:
    """Micro precision, recall and F1 over examples: a predicted triple is right when its
    predicate and both spans equal a gold triple's."""
    right = sum(len(g & p) for g, p in zip(gold, predicted))
    n_pred = sum(len(p) for p in predicted)
    n_gold = sum(len(g) for g in gold)
    precision = right / n_pred if n_pred else 0.0
    recall = right / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}
