"""The ``spo`` result format: an extraction model's per-piece label marks -> subject-predicate-
object triples with character offsets in the input text (``wenxin.metrics.spo`` decodes them)."""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Sequence

from wenxin.common.constants import InstanceName
from wenxin.common.registry import RegisterSet
from wenxin.inference.formatters import TaggingFormat
from wenxin.metrics.spo import decode_triples, tidy_marks


@RegisterSet.result_formats.register("spo")
class SpoFormat(TaggingFormat):
    """``{"text", "spo_list": [{"predicate", "subject": [start, end], "object": [start, end]}]}``,
    ERNIE-kit's own record, offsets in characters of the input text, end exclusive; line: that
    record as JSON. A text longer than the model's ``max_seq_len`` is split at sentence ends
    (``TaggingFormat.split_rows``) and its pieces' triples joined, offsets in the whole text; a
    triple whose subject and object fall in different pieces is not found."""

    def results(self, outputs, batch, rows):  # noqa: ANN001, ANN201
        column, field = self._text_field()
        results = []
        for row, marks, probs in zip(rows, outputs[InstanceName.PREDICTIONS], outputs[InstanceName.PROBS]):
            raw = row[column]
            _, _, _, starts, ends = field.convert(raw)  # where each piece's word lies in raw
            length = len(starts) + 2
            tidy = tidy_marks(marks[:length], probs[:length])[1:length - 1]
            spo_list = [{"predicate": str(self.label(label))[2:-2],
                         "subject": [int(starts[s_first]), int(ends[s_last])],
                         "object": [int(starts[o_first]), int(ends[o_last])]}
                        for label, s_first, s_last, o_first, o_last in decode_triples(tidy, starts.tolist())]
            results.append({"text": raw, "spo_list": spo_list})
        return results

    def join_results(self, results, pieces, rows):  # noqa: ANN001, ANN201
        column, _ = self._text_field()
        joined: List[Dict[str, Any]] = []
        for result, piece in zip(results, pieces):
            shifted = [{"predicate": spo["predicate"],
                        "subject": [offset + piece.offset for offset in spo["subject"]],
                        "object": [offset + piece.offset for offset in spo["object"]]} for spo in result["spo_list"]]
            if joined and len(joined) - 1 == piece.row:
                joined[-1]["spo_list"].extend(shifted)
            else:
                joined.append({"text": rows[piece.row][column], "spo_list": shifted})
        return joined

    def line(self, result: Dict[str, Any]) -> str:
        return json.dumps(result, ensure_ascii=False)

    def erniekit_document(self, results: Sequence[Dict[str, Any]], rows: Sequence[Sequence[str]]) -> Optional[str]:
        """ERNIE-kit's prediction file for extraction: one JSON list, each text's record in a list
        of its own, indented by one space."""
        return json.dumps([[result] for result in results], indent=1, ensure_ascii=False)
