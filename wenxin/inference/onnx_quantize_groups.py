"""ONNX Runtime's dynamic int8 quantization (``quantize_dynamic``) of a program one group of weights
at a time, so that making a large program's int8 copy holds a fraction of its weights.

``quantize_dynamic`` holds the float32 weights it is handed three times over (the model, a deep
copy it saves for shape inference and the copy it reloads): the int8 step of converting
ERNIE-4.5-0.3B's shape peaked at 4.3x its weights (issue 69), which at ERNIE-4.5-21B-A3B's 87 GB
would be some 340 GB. Measured (``benchmarks/onnx_conversion.py``): 5.76 -> 3.20 GiB at 18 layers
of that shape, 8.02 -> 4.21 GiB at 32 (2.1 GiB of weights, beside the program).

So each pass hands it the whole graph with one group's weights as
initializers (``GROUP_BYTES`` of them at most; a larger weight is a group alone) and each other
weight it would quantize a graph input of its shape, which it leaves as it is (it quantizes a
product only where its weights are initializers, ``MatMulConstBOnly``, and a ``Gather`` only from
one). The passes' new nodes and initializers are put together into one program: the nodes a pass
replaced are left out, a node two passes made alike (an activation's quantization, shared by
products of two groups) is kept once, and the nodes are ordered so that each input is computed
before it is read. Each weight's numbers are ONNX Runtime's own: the program gives the logits of
one made in a single pass, to the bit (tested). Where two passes quantize a value differently
(``GroupsDisagree``: a product fed by a quantized table's rows directly), the caller quantizes the
whole in one pass.

The weights are read a group at a time from where the program keeps them (inside it or in its
external data), and the program's weights written out as each pass ends: into an external data
file where the int8 program is large, else kept to be written inside it.
"""
from __future__ import annotations

import contextlib
import heapq
import os
import tempfile
from typing import IO, Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from wenxin.inference.onnx_channel_scales import vectorized_per_channel
from wenxin.inference.onnx_convert import ALIGNMENT, written_beside

GROUP_BYTES = 256 << 20  # float32 weights handed to ONNX Runtime's quantizer at a time
WEIGHT_INPUT = {"MatMul": 1, "Gather": 0}  # the operators quantize_dynamic quantizes here: their weight's input


class GroupsDisagree(Exception):
    """Two passes quantized the same value differently: ONNX Runtime quantizes a node by what it
    knows of its inputs, and a ``Gather`` from a quantized table hands int8 straight to a product
    that reads it (where a normalization between them does not), a product another group holds."""


def candidate_weights(model: "onnx.ModelProto", excluded: Set[str]) -> List[str]:  # type: ignore[name-defined]  # noqa: F821
    """The float32 initializers ``quantize_dynamic`` may quantize (a product's weights, a table a
    ``Gather`` reads), in the order of the graph's initializers; ``excluded``: the names of nodes
    it leaves."""
    from onnx import TensorProto
    read = {node.input[WEIGHT_INPUT[node.op_type]] for node in model.graph.node
            if node.op_type in WEIGHT_INPUT and node.domain in ("", "ai.onnx") and node.name not in excluded}
    return [init.name for init in model.graph.initializer if init.name in read and init.data_type == TensorProto.FLOAT]


def weight_groups(model: "onnx.ModelProto", names: Sequence[str], group_bytes: int) -> List[List[str]]:  # type: ignore[name-defined]  # noqa: F821
    """``names`` in groups of at most ``group_bytes`` of float32 weights (a larger weight alone)."""
    sizes = {init.name: int(np.prod(init.dims)) * 4 for init in model.graph.initializer}
    groups: List[List[str]] = []
    held = 0
    for name in names:
        if not groups or (groups[-1] and held + sizes[name] > group_bytes):
            groups.append([])
            held = 0
        groups[-1].append(name)
        held += sizes[name]
    return groups


def with_data(init: "onnx.TensorProto", base_dir: str) -> "onnx.TensorProto":  # type: ignore[name-defined]  # noqa: F821
    """A copy of ``init`` holding its data (read from its external data file under ``base_dir``)."""
    import onnx
    from onnx import external_data_helper
    tensor = onnx.TensorProto()
    tensor.CopyFrom(init)
    if external_data_helper.uses_external_data(tensor):
        external_data_helper.load_external_data_for_tensor(tensor, base_dir)
        tensor.data_location = onnx.TensorProto.DEFAULT
        del tensor.external_data[:]
    return tensor


def placed(tensor: "onnx.TensorProto", data: Optional[IO[bytes]], location: str) -> "onnx.TensorProto":  # type: ignore[name-defined]  # noqa: F821
    """A copy of ``tensor`` (holding its data) as the int8 program keeps it: its data written to
    ``data`` (page-aligned) and named there, or inside it where there is no ``data`` file. (A copy:
    a reference into the pass's program would keep all of that program in memory.)"""
    import onnx
    kept = onnx.TensorProto()
    if data is None or len(tensor.raw_data) < ALIGNMENT:
        kept.CopyFrom(tensor)
        return kept
    raw = tensor.raw_data
    tensor.ClearField("raw_data")
    kept.CopyFrom(tensor)
    written_beside(kept, raw, data, location)
    return kept


def without_weights(model: "onnx.ModelProto") -> "onnx.ModelProto":  # type: ignore[name-defined]  # noqa: F821
    """A copy of ``model`` without its initializers (copying it whole and deleting them would hold
    them: protobuf frees a message's parts with the message)."""
    import onnx
    skeleton = onnx.ModelProto()
    for source, target, left in ((model, skeleton, "graph"), (model.graph, skeleton.graph, "initializer")):
        for field, value in source.ListFields():
            if field.name == left:
                continue
            if hasattr(value, "extend"):  # a repeated field
                getattr(target, field.name).extend(value)
            elif hasattr(value, "CopyFrom"):  # a message
                getattr(target, field.name).CopyFrom(value)
            else:
                setattr(target, field.name, value)
    return skeleton


def pass_model(skeleton: "onnx.ModelProto", model: "onnx.ModelProto", group: Set[str],  # type: ignore[name-defined]  # noqa: F821
               candidates: Set[str], base_dir: str) -> "onnx.ModelProto":  # type: ignore[name-defined]  # noqa: F821
    """The program ONNX Runtime quantizes in one pass: ``skeleton`` (``model`` without its
    initializers) with ``group``'s weights and every initializer but the other candidates, which
    become graph inputs of their shape."""
    import onnx
    part = onnx.ModelProto()
    part.CopyFrom(skeleton)
    for init in model.graph.initializer:
        if init.name in candidates and init.name not in group:
            part.graph.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
        else:
            part.graph.initializer.append(with_data(init, base_dir))
    return part


def in_order(nodes: List["onnx.NodeProto"], given: Set[str]) -> List["onnx.NodeProto"]:  # type: ignore[name-defined]  # noqa: F821
    """``nodes`` ordered so that each runs after the nodes computing its inputs (``given``: the
    names the graph holds before any node runs), keeping their order where it allows."""
    made_by: Dict[str, int] = {output: index for index, node in enumerate(nodes) for output in node.output}
    waiting = [sum(1 for name in set(node.input) if name and name not in given and name in made_by)
               for node in nodes]
    readers: Dict[int, List[int]] = {}
    for index, node in enumerate(nodes):
        for name in set(node.input):
            if name and name not in given and name in made_by:
                readers.setdefault(made_by[name], []).append(index)
    ready = [index for index, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    ordered = []
    while ready:
        index = heapq.heappop(ready)
        ordered.append(nodes[index])
        for reader in readers.get(index, []):
            waiting[reader] -= 1
            if waiting[reader] == 0:
                heapq.heappush(ready, reader)
    if len(ordered) != len(nodes):
        raise ValueError("the int8 program's nodes read values no node computes first (a cycle)")
    return ordered


class PassesTogether:
    """The nodes and weights the passes made, gathered (see the module docstring) and written into
    ``data`` (an open external data file named ``location``) where there is one."""

    def __init__(self, model: "onnx.ModelProto", data: Optional[IO[bytes]], location: str) -> None:  # type: ignore[name-defined]  # noqa: F821
        self.original = {node.SerializeToString(): node.name for node in model.graph.node}  # (a changed node may
        # keep its name: a node is the same only where its whole serialization is)
        self.known = {init.name for init in model.graph.initializer}
        self.data, self.location = data, location
        self.made: Dict[Tuple[str, ...], Any] = {}  # the nodes the passes made, by their outputs
        self.producers: Dict[str, bytes] = {}  # each value the passes' new nodes compute: the node computing it
        self.replaced: Set[str] = set()  # the names of the model's nodes a pass replaced
        self.left_float: Set[str] = set()  # candidates a pass left as they were
        self.weights: List[Any] = []  # the passes' new initializers
        self.opsets: List[Any] = []

    def add(self, result: "onnx.ModelProto", group: Sequence[str]) -> None:  # type: ignore[name-defined]  # noqa: F821
        """What one pass made of ``group``'s weights (``result``: its program)."""
        import onnx
        self.opsets = self.opsets or list(result.opset_import)
        unchanged = set()
        for node in result.graph.node:
            serialized = node.SerializeToString()
            if serialized in self.original:
                unchanged.add(serialized)
                continue
            for output in node.output:
                if self.producers.setdefault(output, serialized) != serialized:
                    raise GroupsDisagree(f"two passes made different nodes computing {output}")
            if tuple(node.output) not in self.made:
                self.made[tuple(node.output)] = copied = onnx.NodeProto()
                copied.CopyFrom(node)  # (not a reference into the pass's program: see placed)
        self.replaced |= {name for serialized, name in self.original.items() if serialized not in unchanged}
        present = {init.name for init in result.graph.initializer}
        self.left_float |= {name for name in group if name in present}
        for init in result.graph.initializer:
            if init.name not in self.known:  # (a weight two passes made alike: kept once)
                self.known.add(init.name)
                self.weights.append(placed(init, self.data, self.location))

    def program(self, skeleton: "onnx.ModelProto", model: "onnx.ModelProto",  # type: ignore[name-defined]  # noqa: F821
                kept: List[Any]) -> "onnx.ModelProto":  # type: ignore[name-defined]  # noqa: F821
        """``skeleton`` (``model`` without its weights) made the int8 program, with ``kept``, the
        model's weights no pass replaced."""
        nodes = [node for node in model.graph.node if node.name not in self.replaced] + list(self.made.values())
        given = {value.name for value in model.graph.input} | {init.name for init in kept + self.weights} | {""}
        del skeleton.graph.node[:]
        skeleton.graph.node.extend(in_order(nodes, given))
        skeleton.graph.initializer.extend(kept + self.weights)
        del skeleton.graph.value_info[:]  # (ONNX Runtime infers the shapes again as it loads)
        if self.opsets:
            del skeleton.opset_import[:]
            skeleton.opset_import.extend(self.opsets)
        return skeleton


def quantize_in_groups(model: "onnx.ModelProto", base_dir: str, excluded: List[str], data_file: str = "",  # type: ignore[name-defined]  # noqa: F821
                       group_bytes: int = GROUP_BYTES) -> "onnx.ModelProto":  # type: ignore[name-defined]  # noqa: F821
    """The int8 program of ``model`` (its weights inside it or in external data under ``base_dir``,
    not read in; every node named), as ``quantize_dynamic`` makes it with int8 weights per output
    channel, leaving the nodes named in ``excluded``: its weights written into ``data_file``
    (external data, named by its base name) where given, else inside it."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    candidates = candidate_weights(model, set(excluded))
    skeleton = without_weights(model)
    with tempfile.TemporaryDirectory(prefix="wenxin-int8-") as scratch, \
            (open(data_file, "wb") if data_file else contextlib.nullcontext()) as data, vectorized_per_channel():
        together = PassesTogether(model, data, os.path.basename(data_file))
        for group in weight_groups(model, candidates, group_bytes) or [[]]:
            part, out = os.path.join(scratch, "part.onnx"), os.path.join(scratch, "part.int8.onnx")
            # (a file: ONNX Runtime 1.16's quantize_dynamic takes a path, not a model)
            onnx.save_model(pass_model(skeleton, model, set(group), set(candidates), base_dir), part,
                            save_as_external_data=True, location="part.onnx.data")
            quantize_dynamic(part, out, weight_type=QuantType.QInt8, per_channel=True, nodes_to_exclude=excluded,
                             use_external_data_format=True)
            together.add(onnx.load(out), group)
            for name in os.listdir(scratch):
                os.remove(os.path.join(scratch, name))
        kept = [placed(with_data(init, base_dir), data, os.path.basename(data_file)) for init in model.graph.initializer
                if init.name not in candidates or init.name in together.left_float]
    return together.program(skeleton, model, kept)
