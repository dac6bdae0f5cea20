"""``wenxin inspect``: what a task's data and model look like, without training.

Data, per reader: the examples, token-length percentiles (before truncation), the share of
examples truncated at ``max_seq_len``, the label distribution, the vocabulary size and (dev/test)
the share of tokens outside it, and a few seeded sample examples as the model sees them.
Model: the layer tree with parameter counts, and the FLOPs of one example.

FLOPs are counted, not estimated from shapes: a forward pass in evaluation mode over a batch of
real examples, with forward hooks on linear, convolution and recurrent layers and a wrapper on
``paddle.matmul``/``paddle.bmm`` (attention scores and the like). A multiply-add counts 2;
element-wise operations, softmax, normalization and embedding lookups are not counted. Paddle's
``paddle.flops`` is not used: it feeds random tensors of one shape, and wenxin models take a
dict of named fields.
"""
from __future__ import annotations

import contextlib
import logging
import random
from typing import Any, Dict, Iterator, List, Optional, Sequence

import numpy as np

from wenxin.data.dataset_reader import BasicDataSetReader
from wenxin.data.field_reader import BaseFieldReader
from wenxin.data.label_fields import LabelFieldReader, MultiLabelFieldReader

logger = logging.getLogger("wenxin")

PERCENTILES = (50, 90, 95, 99)
SHOWN_TOKENS = 16


# ---- data ---------------------------------------------------------------------------------------
def _is_text(field: BaseFieldReader) -> bool:
    return hasattr(field, "tokenizer") and hasattr(field, "max_seq_len") and not field.is_label


def _specials(field: BaseFieldReader) -> int:
    """How many positions a field adds around its tokens ([CLS]/[SEP] for ERNIE fields)."""
    try:
        return int(field.length(field.convert("")))
    except (ValueError, TypeError, KeyError, AttributeError):
        return 0


def _label_names(field: BaseFieldReader, ids: Sequence[int]) -> List[str]:
    tokens = field.vocab.tokens if field.vocab is not None else None
    return [tokens[i] if tokens is not None and 0 <= i < len(tokens) else str(i) for i in ids]


# What a field shows. A field whose values are not a vocab's ids (a chat model's conversation, an
# extraction's triples) says it with a method of the same name (``raw_length``, ``token_ids``,
# ``token_texts``, ``label_names``); these are the defaults, for the vocab-based fields.
def _raw_length(field: Any, column: str) -> int:
    """The column's tokens before truncation."""
    if hasattr(field, "raw_length"):
        return int(field.raw_length(column))
    return len(field.tokenizer.tokenize(column))


def _token_ids(field: Any, value: Any) -> List[int]:
    if hasattr(field, "token_ids"):
        return list(field.token_ids(value))
    return [int(i) for i in np.asarray(value).reshape(-1)] if isinstance(value, np.ndarray) else []


def _token_texts(field: Any, ids: Sequence[int]) -> List[str]:
    if hasattr(field, "token_texts"):
        return list(field.token_texts(ids))
    tokens = field.vocab.tokens if field.vocab is not None else None
    return [tokens[i] if tokens and i < len(tokens) else str(i) for i in ids]


def _label_values(field: Any, value: Any) -> List[str]:
    """The labels one example counts (its class, its tags, its classes, its triples' predicates)."""
    if hasattr(field, "label_names"):
        return list(field.label_names(value))
    if isinstance(field, MultiLabelFieldReader):
        return _label_names(field, [int(i) for i in np.flatnonzero(np.asarray(value))])
    return _label_names(field, [int(v) for v in np.asarray(value).reshape(-1)])


def inspect_reader(reader: BasicDataSetReader, name: str, samples: int, seed: int) -> Dict[str, Any]:
    """Statistics of one reader's converted examples (its data files are read once more)."""
    text_fields: List[Any] = [f for f in reader.fields if _is_text(f)]  # with a tokenizer and max_seq_len
    label_fields = [f for f in reader.fields if f.is_label]
    lengths: Dict[str, List[int]] = {f.name: [] for f in text_fields}
    truncated = {f.name: 0 for f in text_fields}
    unknown = {f.name: 0 for f in text_fields}
    tokens_seen = {f.name: 0 for f in text_fields}
    specials = {f.name: _specials(f) for f in text_fields}
    labels: Dict[str, Dict[str, int]] = {f.name: {} for f in label_fields}
    rows: List[Any] = []
    count = 0
    for row, example in reader.converted(reader.iter_rows(on_bad=lambda *_: None)):
        count += 1
        values = dict(zip(reader.names, example))
        columns = dict(zip(reader.names, row[2]))
        for field in text_fields:
            raw = _raw_length(field, columns[field.name])
            kept = field.length(values[field.name]) - specials[field.name]
            lengths[field.name].append(raw)
            truncated[field.name] += raw > kept
            ids = values[field.name]
            unk = field.vocab.unk_id if field.vocab is not None else None
            if unk is not None and isinstance(ids, np.ndarray) and ids.ndim == 1:
                unknown[field.name] += int(np.count_nonzero(ids == unk))
                tokens_seen[field.name] += max(kept, 0)
        for field in label_fields:
            for label in _label_values(field, values[field.name]):
                labels[field.name][label] = labels[field.name].get(label, 0) + 1
        rows.append(row)
    picked = sorted(random.Random(f"{seed}-{name}").sample(range(len(rows)), min(samples, len(rows))))
    report: Dict[str, Any] = {"reader": name, "examples": count, "data_path": reader.reader_config["data_path"],
                              "skipped_lines": reader.bad_lines, "fields": {}}
    for field in text_fields:
        seen = np.asarray(lengths[field.name] or [0])
        info: Dict[str, Any] = {
            "kind": "text", "max_seq_len": field.max_seq_len,
            "vocab_size": len(field.vocab) if field.vocab is not None else getattr(field.tokenizer, "vocab_size", None),
            "token_length": {"mean": float(seen.mean()), "max": int(seen.max()),
                             **{f"p{q}": float(np.percentile(seen, q)) for q in PERCENTILES}},
            "truncated": truncated[field.name] / count if count else 0.0}
        if name != "train_reader" and tokens_seen[field.name]:
            info["oov_rate"] = unknown[field.name] / tokens_seen[field.name]
        report["fields"][field.name] = info
    for field in label_fields:
        distribution = dict(sorted(labels[field.name].items(), key=lambda kv: (-kv[1], kv[0])))
        total = sum(distribution.values())
        report["fields"][field.name] = {"kind": "label", "labels": distribution,
                                        "shares": {k: v / total for k, v in distribution.items()} if total else {}}
    report["samples"] = [_sample(reader, rows[i]) for i in picked]
    return report


def _sample(reader: BasicDataSetReader, row: Any) -> Dict[str, Any]:
    """One example as the model sees it: each text field's tokens and ids, each label's name."""
    path, lineno, columns = row
    example = dict(zip(reader.names, _convert(reader, row)))
    shown: Dict[str, Any] = {"line": f"{path}:{lineno}"}
    for field, column in zip(reader.fields, columns):
        value = example[field.name]
        if _is_text(field):
            ids = _token_ids(field, value)
            shown[field.name] = {"text": column[:80], "tokens": _token_texts(field, ids[:SHOWN_TOKENS]),
                                 "ids": ids[:SHOWN_TOKENS], "length": len(ids)}
        elif hasattr(field, "label_names") or (isinstance(field, LabelFieldReader)
                                               and not isinstance(field, MultiLabelFieldReader)):
            names = _label_values(field, value)
            single = isinstance(value, (int, np.integer)) or (isinstance(value, np.ndarray) and value.ndim == 0)
            shown[field.name] = names[0] if single and len(names) == 1 else " ".join(names[:SHOWN_TOKENS])
        else:
            shown[field.name] = column[:80]
    return shown


def _convert(reader: BasicDataSetReader, row: Any) -> Any:
    for _, example in reader.converted([row]):
        return example
    return ()


# ---- model --------------------------------------------------------------------------------------
def layer_tree(model: Any) -> Dict[str, Any]:
    """Every layer (by structured name) with its type and parameter counts: its own and, with
    its sublayers, in total."""
    rows = []
    for name, layer in model.named_sublayers(include_self=True):
        total = sum(int(np.prod(p.shape)) for p in layer.parameters())
        own = sum(int(np.prod(p.shape)) for p in layer.parameters(include_sublayers=False))
        rows.append({"name": name or "(model)", "type": type(layer).__name__,
                     "depth": name.count(".") + 1 if name else 0, "params": total, "own_params": own})
    trainable = sum(int(np.prod(p.shape)) for p in model.parameters() if not p.stop_gradient)
    return {"layers": rows, "total_params": rows[0]["params"], "trainable_params": trainable}


class FlopCounter:
    """Counts the FLOPs of one forward pass (see the module docstring)."""

    def __init__(self) -> None:
        self.flops = 0
        self.by_kind: Dict[str, int] = {}

    def add(self, kind: str, flops: int) -> None:
        self.flops += flops
        self.by_kind[kind] = self.by_kind.get(kind, 0) + flops

    @contextlib.contextmanager
    def counting(self, model: Any) -> Iterator["FlopCounter"]:
        import paddle
        from paddle import nn
        handles = []
        # (the hooks count and return None, which keeps the output; Paddle's hints want a tensor)
        for layer in model.sublayers(include_self=True):
            if isinstance(layer, nn.Linear):
                handles.append(layer.register_forward_post_hook(self._linear))  # type: ignore[arg-type]
            elif isinstance(layer, (nn.Conv1D, nn.Conv2D)):
                handles.append(layer.register_forward_post_hook(self._conv))  # type: ignore[arg-type]
            elif isinstance(layer, (nn.LSTM, nn.GRU, nn.SimpleRNN)):
                handles.append(layer.register_forward_post_hook(self._rnn))  # type: ignore[arg-type]
        real_matmul, real_bmm = paddle.matmul, paddle.bmm

        def matmul(x: Any, y: Any, transpose_x: bool = False, transpose_y: bool = False,
                   name: Optional[str] = None) -> Any:
            out = real_matmul(x, y, transpose_x, transpose_y, name)
            inner = x.shape[-2] if transpose_x else x.shape[-1]
            self.add("matmul", 2 * int(np.prod(out.shape)) * int(inner))
            return out

        def bmm(x: Any, y: Any, name: Optional[str] = None) -> Any:
            out = real_bmm(x, y, name)
            self.add("matmul", 2 * int(np.prod(out.shape)) * int(x.shape[-1]))
            return out

        paddle.matmul, paddle.bmm = matmul, bmm  # type: ignore[assignment]  # counting stand-ins, restored below
        try:
            yield self
        finally:
            paddle.matmul, paddle.bmm = real_matmul, real_bmm
            for handle in handles:
                handle.remove()

    def _linear(self, layer: Any, inputs: Any, output: Any) -> None:
        in_features, out_features = layer.weight.shape
        rows = int(np.prod(output.shape)) // int(out_features)
        self.add("linear", 2 * rows * int(in_features) * int(out_features))

    def _conv(self, layer: Any, inputs: Any, output: Any) -> None:
        weight = layer.weight.shape  # [C_out, C_in / groups, k...]
        per_output = 2 * int(np.prod(weight[1:]))
        self.add("conv", per_output * int(np.prod(output.shape)))

    def _rnn(self, layer: Any, inputs: Any, output: Any) -> None:
        sequence = output[0] if isinstance(output, (tuple, list)) else output  # [B, T, D * directions]
        steps = int(sequence.shape[0]) * int(sequence.shape[1])
        flops = 0
        for name, param in layer.named_parameters():
            if "weight" in name:  # weight_ih [gates * H, in] and weight_hh [gates * H, H], each direction
                flops += 2 * int(np.prod(param.shape))
        self.add("rnn", flops * steps)


def count_flops(model: Any, batch: Dict[str, Any], phase: str) -> Dict[str, Any]:
    """FLOPs of the model on ``batch`` (a collated dict of arrays), per example."""
    import paddle
    tensors = {k: paddle.to_tensor(v) for k, v in batch.items()}
    examples = len(next(iter(batch.values())))
    counter = FlopCounter()
    model.eval()
    with paddle.no_grad(), counter.counting(model):
        model(tensors, phase)
    return {"per_example": counter.flops / examples, "batch": examples,
            "by_kind_per_example": {k: v / examples for k, v in sorted(counter.by_kind.items())}}


# ---- the command --------------------------------------------------------------------------------
def inspect_task(param_path: str, overrides: Sequence[str] = (), samples: int = 3) -> Dict[str, Any]:
    """The report of ``wenxin inspect`` (the readers are built as a run builds them)."""
    import paddle

    from wenxin.common.constants import Phase
    from wenxin.config.loader import load_config
    from wenxin.controller.env import set_seed
    from wenxin.data.dataset_reader import build_readers
    from wenxin.runner import resolve_classes
    config = load_config(param_path, overrides)
    scope, model_cls, _ = resolve_classes(config)
    seed = config["trainer"]["seed"]
    readers = build_readers(config["dataset_reader"], scope)
    report: Dict[str, Any] = {"task": config["task"], "model_type": config["model"]["type"],
                              "readers": [inspect_reader(r, name, samples, seed) for name, r in readers.items()]}
    paddle.disable_static()
    set_seed(seed)
    model = model_cls(config["model"], readers["train_reader"].data_info())
    report["model"] = layer_tree(model)
    reader = readers.get("dev_reader") or readers["train_reader"]
    indices = list(range(min(32, len(reader))))
    report["model"]["flops"] = count_flops(model, reader.collate_rows(indices), Phase.EVALUATE) if indices else None
    return report


def inspect_readers(config: Dict[str, Any], samples: int = 3) -> List[Dict[str, Any]]:
    """Each reader's report (as ``wenxin inspect`` shows it) for a loaded task config, without
    building its model: what wenxin studio's data preview shows."""
    from wenxin.data.dataset_reader import build_readers
    from wenxin.runner import resolve_classes
    scope, _, _ = resolve_classes(config)
    readers = build_readers(config["dataset_reader"], scope)
    return [inspect_reader(reader, name, samples, config["trainer"]["seed"]) for name, reader in readers.items()]


def _number(n: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.4g}"


def _field_line(name: str, f: Dict[str, Any]) -> str:
    """One field's statistics: a text field's lengths and vocabulary, another's value shares."""
    if f["kind"] == "text":
        t = f["token_length"]
        oov = f", out of vocabulary {f['oov_rate']:.2%} of tokens" if "oov_rate" in f else ""
        return (f"  {name}: vocab {f['vocab_size']}; tokens mean {t['mean']:.1f}, p50 {t['p50']:.0f}, "
                f"p90 {t['p90']:.0f}, p95 {t['p95']:.0f}, p99 {t['p99']:.0f}, max {t['max']}; "
                f"truncated at {f['max_seq_len']}: {f['truncated']:.2%}{oov}")
    shares = ", ".join(f"{k} {v:.1%}" for k, v in list(f["shares"].items())[:12])
    more = f", ... ({len(f['shares'])} in all)" if len(f["shares"]) > 12 else ""
    return f"  {name}: {shares}{more}"


def _sample_lines(sample: Dict[str, Any]) -> List[str]:
    """One sample line of a reader: each text field's tokens and ids, each other field's value."""
    lines = [f"  sample {sample['line']}"]
    for name, value in sample.items():
        if name == "line":
            continue
        if isinstance(value, dict):
            lines.append(f"    {name}: {value['text']!r} -> {value['length']} ids")
            lines.append(f"      tokens {' '.join(value['tokens'])}")
            lines.append(f"      ids    {' '.join(map(str, value['ids']))}")
        else:
            lines.append(f"    {name}: {value}")
    return lines


def render(report: Dict[str, Any]) -> List[str]:
    """The report as text lines."""
    lines = [f"task {report['task']}, model {report['model_type']}"]
    for r in report["readers"]:
        lines.append(f"\n{r['reader']}: {r['examples']} examples from {r['data_path']}"
                     + (f" ({r['skipped_lines']} lines skipped)" if r["skipped_lines"] else ""))
        lines += [_field_line(name, f) for name, f in r["fields"].items()]
        for sample in r["samples"]:
            lines += _sample_lines(sample)
    model = report["model"]
    lines.append(f"\nmodel: {model['total_params']:,} parameters ({model['trainable_params']:,} trainable)")
    for layer in model["layers"][1:]:
        if layer["params"]:
            lines.append(f"  {'  ' * (layer['depth'] - 1)}{layer['name'].rsplit('.', 1)[-1]} ({layer['type']}): "
                         f"{layer['params']:,}")
    flops = model.get("flops")
    if flops:
        kinds = ", ".join(f"{k} {_number(v)}" for k, v in flops["by_kind_per_example"].items())
        lines.append(f"FLOPs per example: {_number(flops['per_example'])} ({kinds}; over a batch of "
                     f"{flops['batch']} dev examples)")
    return lines
