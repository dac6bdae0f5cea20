"""Result formats: turn an exported model's output arrays into per-example results (the JSON the
service answers) and lines (what ``wenxin infer`` writes). A model names its format in
``BaseModel.prediction_format``; the export records it in ``preprocess.json``."""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from wenxin.common.constants import InstanceName
from wenxin.common.registry import RegisterSet
from wenxin.data.field_reader import BaseFieldReader, TextFieldReader
from wenxin.metrics.chunking import extract_chunks


class ResultFormat:
    """Builds one result dict per input row, and writes a result as one line of text.

    Args:
        labels: label (or tag) names by id, from the export.
        fields: the inference field readers.
    """

    def __init__(self, labels: Sequence[str], fields: Sequence[BaseFieldReader]) -> None:
        self.labels = list(labels)
        self.fields = list(fields)

    def results(self, outputs: Dict[str, np.ndarray], batch: Dict[str, np.ndarray],
                rows: Sequence[Sequence[str]]) -> List[Dict[str, Any]]:
        raise NotImplementedError

    def line(self, result: Dict[str, Any]) -> str:
        raise NotImplementedError

    def erniekit_line(self, result: Dict[str, Any], row: Sequence[str]) -> str:
        """The line ERNIE-kit's inference wrote for this task (``output_format: erniekit``)."""
        from wenxin.inference.predictor import InferenceError
        raise InferenceError(f"ERNIE-kit's output format for {type(self).__name__} results is not supported yet; "
                             f"use output_format: wenxin")

    def label(self, idx: int) -> Any:
        return self.labels[idx] if self.labels else idx


@RegisterSet.result_formats.register("classification")
class ClassificationFormat(ResultFormat):
    """``{"label", "probability", "probs"}``; line ``label<TAB>probability``."""

    def results(self, outputs, batch, rows):  # noqa: ANN001, ANN201
        probs = outputs[InstanceName.PROBS]  # [B, C]
        best = probs.argmax(axis=-1)
        return [{"label": self.label(int(b)), "probability": float(p[b]), "probs": p.tolist()}
                for p, b in zip(probs, best)]

    def line(self, result: Dict[str, Any]) -> str:
        return f"{result['label']}\t{result['probability']:.6f}"

    def erniekit_line(self, result: Dict[str, Any], row: Sequence[str]) -> str:
        """ERNIE-kit's classification line: the input columns, then the class probabilities as a
        Python list."""
        return "\t".join(row) + "\t" + str(result["probs"])


@RegisterSet.result_formats.register("multi_label")
class MultiLabelFormat(ResultFormat):
    """``{"labels": [...], "probs": [...]}``: the predicted labels (any number) and every label's
    probability; line ``label label ...<TAB>probabilities``."""

    def results(self, outputs, batch, rows):  # noqa: ANN001, ANN201
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
    field's tokens; line: the tags, a tab, then the chunks (``text`` or ``text/TYPE``)."""

    def results(self, outputs, batch, rows):  # noqa: ANN001, ANN201
        text = next(i for i, f in enumerate(self.fields) if isinstance(f, TextFieldReader))
        field = self.fields[text]
        lengths = batch[f"{field.name}_{InstanceName.SEQ_LENS}"]
        results = []
        for row, tag_ids, length in zip(rows, outputs[InstanceName.PREDICTIONS], lengths):
            if hasattr(field, "word_ids"):  # ERNIE: the tag of each word's first piece, after [CLS]
                tokens, starts = word_starts(field, row[text], int(length) - 2)
                tag_ids = [tag_ids[1 + s] for s in starts]
            else:
                tokens = field.tokenizer.split(row[text])[:int(length)]
                tag_ids = tag_ids[:int(length)]
            tags = [str(self.label(int(t))) for t in tag_ids]
            chunks = [{"text": "".join(tokens[s:e + 1]), "type": kind, "start": s, "end": e}
                      for kind, s, e in extract_chunks(tags)]
            results.append({"tags": tags, "chunks": chunks})
        return results

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


@RegisterSet.result_formats.register("score")
class ScoreFormat(ResultFormat):
    """``{"score"}`` (e.g. a matching model's similarity); line: the score."""

    def results(self, outputs, batch, rows):  # noqa: ANN001, ANN201
        return [{"score": float(s)} for s in outputs[InstanceName.SCORES].reshape(len(rows))]

    def line(self, result: Dict[str, Any]) -> str:
        return f"{result['score']:.6f}"


@RegisterSet.result_formats.register("raw")
class RawFormat(ResultFormat):
    """Every output of the example as lists; line: the outputs as JSON."""

    def results(self, outputs, batch, rows):  # noqa: ANN001, ANN201
        return [{k: v[i].tolist() for k, v in outputs.items()} for i in range(len(rows))]

    def line(self, result: Dict[str, Any]) -> str:
        import json
        return json.dumps(result, ensure_ascii=False)
