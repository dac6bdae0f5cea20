"""Result formats: turn an exported model's output arrays into per-example results (the JSON the
service answers) and lines (what ``wenxin infer`` writes). A model names its format in
``BaseModel.prediction_format``; the export records it in ``preprocess.json``."""
from __future__ import annotations

import json

from typing import Any, Dict, List, NamedTuple, Optional, Protocol, Sequence, Tuple, Union, overload

import numpy as np

from wenxin.common.constants import InstanceName
from wenxin.common.errors import InferenceError
from wenxin.common.registry import RegisterSet
from wenxin.data.ernie_fields import ErnieTextFieldReader
from wenxin.data.field_reader import BaseFieldReader, TextFieldReader
from wenxin.data.incremental_text import IncrementalText
from wenxin.data.wordpiece import detokenize
from wenxin.metrics.chunking import extract_chunks


class Piece(NamedTuple):
    """Part of an input row that the model runs on its own: the row's index, and the offset in
    the row's text at which the piece starts."""

    row: int
    offset: int


class WholeRows(Sequence[Piece]):
    """The pieces of rows that each run whole: ``Piece(i, 0)`` for row ``i``, made when read (a
    list of them cost a classifier's batch as much as its model did)."""

    def __init__(self, rows: int) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return self.rows

    @overload
    def __getitem__(self, index: int) -> Piece: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Piece]: ...

    def __getitem__(self, index: Union[int, slice]) -> Union[Piece, Sequence[Piece]]:
        if isinstance(index, slice):
            return [Piece(i, 0) for i in range(self.rows)[index]]
        if not -self.rows <= index < self.rows:
            raise IndexError(index)
        return Piece(index % self.rows, 0)


class ResultFormat:
    """Builds one result dict per input row, and writes a result as one line of text.

    Args:
        labels: label (or tag) names by id, from the export.
        fields: the inference field readers.
        names: what each label is shown as in lines (the label field's ``label_names``; empty:
            the labels themselves); results carry it as ``name`` beside ``label``.
    """

    def __init__(self, labels: Sequence[str], fields: Sequence[BaseFieldReader], names: Sequence[str] = ()) -> None:
        self.labels = list(labels)
        self.fields = list(fields)
        self.names = list(names)

    def results(self, outputs: Dict[str, np.ndarray], batch: Dict[str, np.ndarray],
                rows: Sequence[Sequence[str]]) -> List[Dict[str, Any]]:
        raise NotImplementedError

    def line(self, result: Dict[str, Any]) -> str:
        raise NotImplementedError

    def growing(self, row: Sequence[str]) -> GrowingResult:
        """``row``'s generated answer as its token ids come (a generation format's): by default the
        whole answer's result is built again for every id."""
        return RebuiltResult(self, row)

    def split_rows(self, rows: Sequence[Sequence[str]]) -> Tuple[List[Sequence[str]], Sequence[Piece]]:
        """The rows the model runs on, and for each the input row it is a piece of and where.
        By default each row is one piece; a format whose model cannot take a long input whole
        splits it (``TaggingFormat``)."""
        return list(rows), WholeRows(len(rows))

    def join_results(self, results: Sequence[Dict[str, Any]], pieces: Sequence[Piece],
                     rows: Sequence[Sequence[str]]) -> List[Dict[str, Any]]:
        """The results of the pieces of ``split_rows`` -> one result per input row."""
        return list(results)

    def erniekit_line(self, result: Dict[str, Any], row: Sequence[str]) -> str:
        """The line ERNIE-kit's inference wrote for this task (``output_format: erniekit``)."""
        raise InferenceError(f"ERNIE-kit's output format for {type(self).__name__} results is not supported yet; "
                             f"use output_format: wenxin")

    def erniekit_document(self, results: Sequence[Dict[str, Any]], rows: Sequence[Sequence[str]]) -> Optional[str]:
        """ERNIE-kit's whole prediction file, where it wrote one document rather than a line per
        input (extraction); None for line formats (``erniekit_line``)."""
        return None

    def label(self, idx: int) -> Any:
        if not self.labels:
            return idx
        if not 0 <= idx < len(self.labels):
            raise InferenceError(f"preprocess.json: labels names {len(self.labels)} classes, but the model answered "
                                 f"class {idx}: the export's labels do not match its model (export it again)")
        return self.labels[idx]

    def check_classes(self, probs: np.ndarray) -> None:
        """The model's class probabilities ``[B, C]`` must be one a label (a re-sealed export whose
        labels name fewer or more classes would answer with the wrong names, or none)."""
        if self.labels and probs.shape[-1] != len(self.labels):
            raise InferenceError(f"preprocess.json: labels names {len(self.labels)} classes, but the model gives "
                                 f"{probs.shape[-1]} probabilities: the export's labels do not match its model "
                                 f"(export it again)")


class GrowingResult(Protocol):
    """One answer's result as its token ids come (``ResultFormat.growing``)."""

    def add(self, token_id: int) -> Dict[str, Any]:
        """Add one generated id; returns the answer's result so far."""


class RebuiltResult:
    """A format's result of the whole answer, built again from all its ids at every new one."""

    def __init__(self, result_format: ResultFormat, row: Sequence[str]) -> None:
        self.result_format, self.row = result_format, row
        self.ids: List[int] = []

    def add(self, token_id: int) -> Dict[str, Any]:
        self.ids.append(token_id)
        return self.result_format.results({"generated": np.asarray([self.ids])}, {}, [self.row])[0]


class GrowingChatAnswer:
    """A chat answer's ``{"text", "tokens"}`` as its ids come, each id decoding a few ids
    (``wenxin.data.incremental_text``) instead of the whole answer; the same result as
    ``ChatFormat.results`` of all the ids."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.text = IncrementalText(lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
                                    tokenizer.incomplete_tail)
        self.tokens: List[str] = []

    def add(self, token_id: int) -> Dict[str, Any]:
        self.tokens.extend(self.tokenizer.pieces([token_id]))
        return {"text": self.text.add(token_id), "tokens": list(self.tokens)}


@RegisterSet.result_formats.register("classification")
class ClassificationFormat(ResultFormat):
    """``{"label", "probability", "probs"}``; line ``label<TAB>probability``."""

    def results(self, outputs, batch, rows):  # noqa: ANN001, ANN201
        probs = outputs[InstanceName.PROBS]  # [B, C]
        self.check_classes(probs)
        best = probs.argmax(axis=-1).tolist()  # whole arrays to Python at once: per row costs 3x as much
        results = [{"label": self.label(b), "probability": p[b], "probs": p} for p, b in zip(probs.tolist(), best)]
        if self.names:
            for result, b in zip(results, best):
                result["name"] = self.names[b]
        return results

    def line(self, result: Dict[str, Any]) -> str:
        return f"{result.get('name', result['label'])}\t{result['probability']:.6f}"

    def erniekit_line(self, result: Dict[str, Any], row: Sequence[str]) -> str:
        """ERNIE-kit's classification line: the input columns, then the class probabilities as a
        Python list."""
        return "\t".join(row) + "\t" + str(result["probs"])


@RegisterSet.result_formats.register("generation")
class GenerationFormat(ResultFormat):
    """``{"text", "tokens"}``: the generated text (word pieces joined) and its tokens; line: the
    text. ERNIE-kit's line: the tokens, tab-separated."""

    def tokens_of(self, ids: np.ndarray) -> List[str]:
        """Token ids (-1 after the end) -> tokens of the first field's vocab."""
        vocab = self.fields[0].vocab
        assert vocab is not None, "a generation export's source field has its vocab"
        return [vocab.tokens[i] if 0 <= i < len(vocab) else vocab.unk_token or "[UNK]" for i in ids.tolist() if i >= 0]

    def results(self, outputs, batch, rows):  # noqa: ANN001, ANN201
        generated = next(iter(outputs.values()))  # [B, max_new_tokens]
        results = []
        for ids in generated:
            tokens = self.tokens_of(ids)
            results.append({"text": detokenize(tokens), "tokens": tokens})
        return results

    def line(self, result: Dict[str, Any]) -> str:
        return str(result["text"])

    def erniekit_line(self, result: Dict[str, Any], row: Sequence[str]) -> str:
        """ERNIE-kit's generation line: the best hypothesis's tokens, separated by tabs."""
        return "\t".join(result["tokens"])


@RegisterSet.result_formats.register("chat")
class ChatFormat(ResultFormat):
    """``{"text", "tokens"}``: a chat model's answer, decoded by its field's tokenizer (special
    tokens left out; bytes of a character still incomplete at the end held back, so text streamed
    token by token never shows half a character), and its SentencePiece pieces; line: the text
    as a JSON string (an answer may span lines)."""

    def results(self, outputs, batch, rows):  # noqa: ANN001, ANN201
        tokenizer = self.fields[0].tokenizer  # a ChatFieldReader's
        generated = next(iter(outputs.values()))  # [B, max_new_tokens], -1 after the end
        results = []
        for row in np.asarray(generated).tolist():
            ids = [i for i in row if i >= 0]
            results.append({"text": tokenizer.decode_complete(ids), "tokens": tokenizer.pieces(ids)})
        return results

    def growing(self, row: Sequence[str]) -> GrowingResult:
        return GrowingChatAnswer(self.fields[0].tokenizer)  # type: ignore[attr-defined]  # a ChatFieldReader's

    def line(self, result: Dict[str, Any]) -> str:
        return json.dumps(result["text"], ensure_ascii=False)


@RegisterSet.result_formats.register("multi_label")
class MultiLabelFormat(ResultFormat):
    """``{"labels": [...], "probs": [...]}``: the predicted labels (any number) and every label's
    probability; line ``label label ...<TAB>probabilities``."""

    def results(self, outputs, batch, rows):  # noqa: ANN001, ANN201
        self.check_classes(outputs[InstanceName.PROBS])
        return [{"labels": [self.label(i) for i in np.flatnonzero(chosen)], "probs": p.tolist()}
                for p, chosen in zip(outputs[InstanceName.PROBS], outputs[InstanceName.PREDICTIONS])]

    def line(self, result: Dict[str, Any]) -> str:
        return " ".join(str(label) for label in result["labels"]) + "\t" + \
            " ".join(f"{p:.6f}" for p in result["probs"])

    def erniekit_line(self, result: Dict[str, Any], row: Sequence[str]) -> str:
        """ERNIE-kit's multi-label line: the input columns, then the probabilities as a Python list."""
        return "\t".join(row) + "\t" + str(result["probs"])


@RegisterSet.result_formats.register("tagging")
class TaggingFormat(ResultFormat):
    """``{"tags": [...], "chunks": [{"text", "type", "start", "end"}]}`` over the first text
    field's tokens; line: the tags, a tab, then the chunks (``text`` or ``text/TYPE``).

    A chunk's ``start`` and ``end`` are character offsets in the input text, end exclusive:
    ``text == input[start:end]``, the raw characters of its tokens (before normalization)."""

    def _text_field(self) -> Tuple[int, TextFieldReader]:
        """The column and reader of the first text field (the tagged one)."""
        column = next(i for i, f in enumerate(self.fields) if isinstance(f, TextFieldReader))
        return column, self.fields[column]  # type: ignore[return-value]

    def results(self, outputs, batch, rows):  # noqa: ANN001, ANN201
        text, field = self._text_field()
        lengths = batch[f"{field.name}_{InstanceName.SEQ_LENS}"]
        results = []
        for row, tag_ids, length in zip(rows, outputs[InstanceName.PREDICTIONS], lengths):
            raw = row[text]
            if field.word_pieces:  # ERNIE: the tag of each word's first piece, after [CLS]
                words, starts = word_starts(field, raw, int(length) - 2)
                tag_ids = [tag_ids[1 + s] for s in starts]
                offsets = word_offsets(raw, words)
            else:
                offsets = [(start, end) for _, start, end in field.tokenizer.spans(raw)[:int(length)]]
                tag_ids = tag_ids[:int(length)]
            tags = [str(self.label(int(t))) for t in tag_ids]
            chunks = [{"text": raw[offsets[s][0]:offsets[e][1]], "type": kind,
                       "start": offsets[s][0], "end": offsets[e][1]}
                      for kind, s, e in extract_chunks(tags)]
            results.append({"tags": tags, "chunks": chunks})
        return results

    def split_rows(self, rows):  # noqa: ANN001, ANN201
        """A text longer than the field's ``max_seq_len`` is cut into pieces that fit: after the
        last sentence end (``。！？；!?;``) that fits, else after the last clause end
        (``，,、：:``), else at the limit. The limit counts tokens; for ERNIE fields, word pieces
        between ``[CLS]`` and ``[SEP]``, and a piece ends after a whole word."""
        text, field = self._text_field()
        pieces_rows: List[Sequence[str]] = []
        pieces: List[Piece] = []
        for index, row in enumerate(rows):
            raw = row[text]
            units, sizes, limit = self._units(field, raw)
            if sum(sizes) <= limit:
                pieces_rows.append(row)
                pieces.append(Piece(index, 0))
                continue
            for start, end in cut_points([unit for unit, _, _ in units], limit, sizes):
                begin, finish = units[start][1], units[end - 1][2]
                pieces_rows.append([*row[:text], raw[begin:finish], *row[text + 1:]])
                pieces.append(Piece(index, begin))
        return pieces_rows, pieces

    @staticmethod
    def _units(field: TextFieldReader, raw: str) -> Tuple[List[Tuple[str, int, int]], List[int], int]:
        """What a text is cut between, ``(unit, start, end)`` in ``raw``, each unit's size in
        tokens, and how many tokens a piece may have: words and their pieces for ERNIE fields
        (two places go to ``[CLS]`` and ``[SEP]``), else tokens."""
        if isinstance(field, ErnieTextFieldReader):  # word_pieces
            words = field.words(raw)
            units = [(word, start, end) for word, (start, end) in zip(words, word_offsets(raw, words))]
            return units, [len(ids) for ids in field.word_ids(words)], field.max_seq_len - 2
        if len(raw) <= field.max_seq_len // 4:  # short enough whatever NFKC expands (at most 4x here)
            return [], [], field.max_seq_len
        units = field.tokenizer.spans(raw)
        return units, [1] * len(units), field.max_seq_len

    def join_results(self, results, pieces, rows):  # noqa: ANN001, ANN201
        joined: List[Dict[str, Any]] = []
        for result, piece in zip(results, pieces):
            chunks = [{**c, "start": c["start"] + piece.offset, "end": c["end"] + piece.offset}
                      for c in result["chunks"]]
            if joined and len(joined) - 1 == piece.row:
                joined[-1]["tags"].extend(result["tags"])
                joined[-1]["chunks"].extend(chunks)
            else:
                joined.append({"tags": list(result["tags"]), "chunks": chunks})
        return joined

    def line(self, result: Dict[str, Any]) -> str:
        chunks = (c["text"] + (f"/{c['type']}" if c["type"] else "") for c in result["chunks"])
        return " ".join(result["tags"]) + "\t" + " ".join(chunks)

    def erniekit_line(self, result: Dict[str, Any], row: Sequence[str]) -> str:
        """ERNIE-kit's tagging line: the text, then the tag ids as a Python list. ERNIE-kit lists
        one id per word piece; this lists one per word (the same where words are one piece)."""
        ids = {name: i for i, name in enumerate(self.labels)}
        return row[0] + "\t" + str([ids[t] for t in result["tags"]])


def word_starts(field: Any, text: str, pieces_kept: int) -> Tuple[List[str], List[int]]:
    """The words of ``text`` whose first piece survived truncation, and where those pieces are."""
    kept, starts, position = [], [], 0
    words = field.words(text)
    for word, pieces in zip(words, field.word_ids(words)):
        if pieces and position < pieces_kept:
            kept.append(word)
            starts.append(position)
        position += len(pieces)
    return kept, starts


SENTENCE_ENDS = frozenset("。！？；!?;")
CLAUSE_ENDS = frozenset("，,、：:")


def cut_points(units: Sequence[str], limit: int, sizes: Optional[Sequence[int]] = None) -> List[Tuple[int, int]]:
    """``[start, end)`` ranges of ``units`` (tokens or words, of ``sizes`` tokens each, 1 if not
    given) covering them, each of at most ``limit`` tokens and ending after a sentence end if one
    fits, else after a clause end, else at the limit. A unit larger than ``limit`` is a range of
    its own."""
    sizes = [1] * len(units) if sizes is None else sizes
    ranges, start = [], 0
    while start < len(units):
        end, total = start, 0
        while end < len(units) and total + sizes[end] <= limit:
            total += sizes[end]
            end += 1
        end = max(end, start + 1)
        if end < len(units):
            window = range(end - 1, start, -1)
            end = next((i + 1 for i in window if units[i][-1:] in SENTENCE_ENDS),
                       next((i + 1 for i in window if units[i][-1:] in CLAUSE_ENDS), end))
        ranges.append((start, end))
        start = end
    return ranges


def word_offsets(text: str, words: Sequence[str]) -> List[Tuple[int, int]]:
    """Where each of ``words`` (split from ``text``, in order) lies in it: ``(start, end)``."""
    offsets, position = [], 0
    for word in words:
        start = text.index(word, position)
        position = start + len(word)
        offsets.append((start, position))
    return offsets


@RegisterSet.result_formats.register("score")
class ScoreFormat(ResultFormat):
    """``{"score"}`` (e.g. a matching model's similarity); line: the score."""

    def results(self, outputs, batch, rows):  # noqa: ANN001, ANN201
        return [{"score": float(s)} for s in outputs[InstanceName.SCORES].reshape(len(rows))]

    def line(self, result: Dict[str, Any]) -> str:
        return f"{result['score']:.6f}"

    def erniekit_line(self, result: Dict[str, Any], row: Sequence[str]) -> str:
        """ERNIE-kit's matching line: the input columns, then ``[1 - score, score]`` as a Python
        list (its pairwise models export that pair, computed in float32)."""
        score = np.float32(result["score"])
        return "\t".join(row) + "\t" + str([float(np.float32(1.0) - score), float(score)])


@RegisterSet.result_formats.register("raw")
class RawFormat(ResultFormat):
    """Every output of the example as lists; line: the outputs as JSON."""

    def results(self, outputs, batch, rows):  # noqa: ANN001, ANN201
        return [{k: v[i].tolist() for k, v in outputs.items()} for i in range(len(rows))]

    def line(self, result: Dict[str, Any]) -> str:
        import json
        return json.dumps(result, ensure_ascii=False)
