"""The int8 copy of a converted step program, made in a child process of the export
(``python -m wenxin.inference.onnx_quantize SOURCE TARGET [ONE_FILE_BYTES [GROUP_BYTES]]``): ONNX
Runtime's dynamic quantization (``quantize_dynamic``: weights int8 per output channel, each
product's activations quantized per call), handed a group of weights at a time
(``onnx_quantize_groups``: it holds what it is handed three times over). ``onnx_convert`` makes
the weights initializers the products read directly, but a tied output layer multiplies by the
token embedding transposed at run time (a ``Transpose`` of an initializer), which
``quantize_dynamic`` passes over, though it is the largest product of a decode step (at
ERNIE-4.5-0.3B's shape 106 M of the 361 M weights): folded into an initializer of its own first.
Measured at that shape: a decode step of one row 56 CPU-ms without the fold, 25 with it.

Each product's activations are then quantized per token (``per_token_activations``) rather than
per call: ``quantize_dynamic`` gives a whole call one scale, so a row's int8 logits depended on the
other rows of its batch (issue 69: batched must equal lone). Per token, symmetric (scale = the
token's largest magnitude / 127, zero point 128 in uint8, as ``MatMulInteger`` takes one zero
point), each token's integer product is exact and its own, so a row's logits batched equal its
logits alone within float32 rounding, as float32's do.

A product's bias is then added as the subtraction of its negation (``biases_apart``): ONNX
Runtime fuses ``MatMulInteger``, its scales and an ``Add`` of a bias into one
``MatMulIntegerToFloat``, whose kernel (1.32) multiplies a fused bias by the token's scale when
the scales are per token. ERNIE-Gen's layers have biases (ERNIE 4.5's have none): its int8 logits
moved by up to 1.17 with biases of standard deviation 0.5, and a bias of -1e4 (a token never to be
chosen) became -350. A ``Sub`` is not fused, so the products stay fused and the bias exact.

A mixture-of-experts layer's router stays float32 (``router_products``), as Baidu's bfloat16
folders keep it (``ernie45_export.kept_in_float32``): rounded, it sends tokens to other experts
(on the MoE fixture one prompt's logits moved by 13% of their largest with it quantized).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from wenxin.inference.onnx_convert import ONE_FILE_BYTES, external_data_file
from wenxin.inference.onnx_quantize_groups import GROUP_BYTES, GroupsDisagree, quantize_in_groups


def fold_transposed_weights(model: "onnx.ModelProto", base_dir: str = "",  # type: ignore[name-defined]  # noqa: F821
                            place: Optional[Callable[[Any], None]] = None) -> int:
    """Replace each ``Transpose`` of an initializer by the transposed initializer (``base_dir``:
    where the model's external data lies, if any; ``place``: given each new initializer before the
    model holds it, to write its data elsewhere); returns how many. The weights are read into
    copies of their tensors, so that the model holds none of their data (protobuf does not give a
    message's memory back until the message goes)."""
    from onnx import numpy_helper

    from wenxin.inference.onnx_quantize_groups import with_data
    initializers = {init.name: init for init in model.graph.initializer}
    folded = []
    for node in model.graph.node:
        if node.op_type != "Transpose" or node.input[0] not in initializers:
            continue
        array = numpy_helper.to_array(with_data(initializers[node.input[0]], base_dir))
        perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
        transposed = numpy_helper.from_array(array.transpose(perm), node.output[0])
        del array
        if place is not None:
            place(transposed)
        model.graph.initializer.append(transposed)
        folded.append(node)
    for node in folded:
        model.graph.node.remove(node)
    return len(folded)


def per_token_activations(model: "onnx.ModelProto") -> int:  # type: ignore[name-defined]  # noqa: F821
    """Replace each ``DynamicQuantizeLinear`` (one scale and zero point for its whole input) by
    the same outputs per token: ``scale`` ``[..., 1]`` (the token's largest magnitude / 127),
    ``quantized`` ``round(x / scale) + 128`` in uint8 and the zero point 128. The ``Mul`` of
    that scale by the weights' per-channel scales that follows broadcasts it to ``[..., N]``.
    Returns how many were replaced.

    Six operators a product's input: rounding, shifting by the zero point, clipping to uint8 and
    the cast are one ``QuantizeLinear`` of ``x / scale`` by a scale of 1 (it rounds half to even, as
    ``Round`` does, and saturates), and the zero point is a constant the products read directly.
    A decode step of ERNIE-4.5-0.3B's shape runs 73 of them: in ONNX Runtime's profiler the four
    operators ``QuantizeLinear`` replaces took about 0.7 ms of a 23-25 ms step at one row (the
    outputs are bitwise the same)."""
    import numpy as np
    from onnx import helper, numpy_helper
    constants: Dict[str, np.ndarray] = {
        "per_token.zero_point": np.asarray(128, np.uint8), "per_token.one": np.asarray(1, np.float32),
        "per_token.levels": np.asarray(127, np.float32), "per_token.tiny": np.asarray(1e-30, np.float32)}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    if opset >= 18:  # ReduceMax's axes: an input from opset 18, an attribute before
        constants["per_token.axes"] = np.asarray([-1], np.int64)
    nodes: list = []
    zero_points = set()  # the replaced nodes' zero-point outputs: the products read the constant instead
    for node in model.graph.node:
        if node.op_type != "DynamicQuantizeLinear" or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        x, (quantized, scale, zero_point) = node.input[0], node.output
        zero_points.add(zero_point)
        step = f"{node.name or x}.per_token"
        largest = (helper.make_node("ReduceMax", [f"{step}.abs", "per_token.axes"], [f"{step}.max"], keepdims=1)
                   if opset >= 18 else
                   helper.make_node("ReduceMax", [f"{step}.abs"], [f"{step}.max"], axes=[-1], keepdims=1))  # [..., 1]
        nodes += [
            helper.make_node("Abs", [x], [f"{step}.abs"]), largest,
            helper.make_node("Max", [f"{step}.max", "per_token.tiny"], [f"{step}.kept"]),  # a token of zeros
            helper.make_node("Div", [f"{step}.kept", "per_token.levels"], [scale]),
            helper.make_node("Div", [x, scale], [f"{step}.scaled"]),  # within [-127, 127]
            helper.make_node("QuantizeLinear", [f"{step}.scaled", "per_token.one", "per_token.zero_point"],
                             [quantized])]  # round half to even, + 128, saturated to uint8
    if zero_points:
        for node in nodes:
            for index, name in enumerate(node.input):
                if name in zero_points:
                    node.input[index] = "per_token.zero_point"
        del model.graph.node[:]
        model.graph.node.extend(nodes)
        model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in constants.items())
    return len(zero_points)


def biases_apart(model: "onnx.ModelProto", base_dir: str = "") -> int:  # type: ignore[name-defined]  # noqa: F821
    """Replace each ``Add`` of a bias initializer to an int8 product's output (``MatMulInteger``,
    ``Cast``, ``Mul`` by the scales) by a ``Sub`` of the negated bias, which ONNX Runtime does not
    fuse into ``MatMulIntegerToFloat`` (module docstring); ``base_dir``: where the model's external
    data lies, if any. Returns how many."""
    from onnx import numpy_helper
    made_by = {output: node for node in model.graph.node for output in node.output}
    initializers = {init.name: init for init in model.graph.initializer}

    def made_as(name: str, op_type: str) -> Optional["onnx.NodeProto"]:  # type: ignore[name-defined]  # noqa: F821
        node = made_by.get(name)
        return node if node is not None and node.op_type == op_type else None

    def product_output(name: str) -> bool:  # Mul(Cast(MatMulInteger(...)), scales), either factor first
        mul = made_as(name, "Mul")
        casts = [made_as(factor, "Cast") for factor in mul.input] if mul is not None else []
        return any(cast is not None and made_as(cast.input[0], "MatMulInteger") is not None for cast in casts)

    negated: Dict[str, str] = {}
    replaced = 0
    for node in model.graph.node:
        if node.op_type != "Add" or node.domain not in ("", "ai.onnx"):
            continue
        for value, bias in (node.input, reversed(node.input)):
            if bias in initializers and product_output(value):
                if bias not in negated:
                    negated[bias] = f"{bias}.negated"
                    array = numpy_helper.to_array(initializers[bias], base_dir)
                    model.graph.initializer.append(numpy_helper.from_array(-array, negated[bias]))
                node.op_type = "Sub"
                del node.input[:]
                node.input.extend([value, negated[bias]])
                replaced += 1
                break
    return replaced


ROUTER_OUTPUTS = ("Softmax", "Sigmoid")  # what a router's scores go through (Cast between allowed)


def router_products(model: "onnx.ModelProto") -> List[str]:  # type: ignore[name-defined]  # noqa: F821
    """The names of the weight products whose output goes (through a ``Cast`` at most) straight
    into a softmax or sigmoid: a mixture-of-experts router's (attention's scores are products of
    two activations, never of a weight). Nodes without a name are named here."""
    initializers = {init.name for init in model.graph.initializer}
    consumers: Dict[str, list] = {}
    for index, node in enumerate(model.graph.node):
        if not node.name:
            node.name = f"{node.op_type}_{index}"
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    routers = []
    for node in model.graph.node:
        if node.op_type != "MatMul" or node.input[1] not in initializers:
            continue
        after = consumers.get(node.output[0], [])
        if len(after) == 1 and after[0].op_type == "Cast":
            after = consumers.get(after[0].output[0], [])
        if after and all(n.op_type in ROUTER_OUTPUTS for n in after):
            routers.append(node.name)
    return routers


def weights_beside(source: str, scratch: Optional[str]) -> Tuple["onnx.ModelProto", str]:  # type: ignore[name-defined]  # noqa: F821,E501
    """``source`` with its tied output's transposed embedding folded (``fold_transposed_weights``),
    its weights not read in, and the folder its external data lies in: a program holding its
    weights inside is read without them, each naming its place in the file
    (``onnx_inside_weights``), and a folded weight is written to ``scratch`` (a folder inside that
    one), else the model would hold them while its groups are quantized (``None``, where no such
    folder can be made: the folded weight is held in memory instead). At ERNIE-4.5-0.3B's shape
    the int8 step's peak went from 4.94 to 3.20 GiB with the program written beside it first and
    ``onnx_quantize_groups.without_weights`` together; reading it in place instead of writing it
    out: 40.5 -> 30.6-32.6 s and 2.97 -> 2.80 GiB (the same file)."""
    from wenxin.inference.onnx_convert import written_beside
    from wenxin.inference.onnx_inside_weights import program_without_weights
    model = program_without_weights(source)  # (weights beside it stay named there, as read)
    base_dir = os.path.dirname(os.path.abspath(source))
    if scratch is None:
        fold_transposed_weights(model, base_dir)
        return model, base_dir
    location = os.path.join(os.path.relpath(scratch, base_dir), "folded.data")
    with open(os.path.join(base_dir, location), "wb") as written:

        def written_out(tensor: Any) -> None:
            raw = tensor.raw_data
            tensor.ClearField("raw_data")
            written_beside(tensor, raw, written, location)

        fold_transposed_weights(model, base_dir, written_out)
    return model, base_dir


@contextlib.contextmanager
def folding_scratch(source: str) -> Iterator[Optional[str]]:
    """A scratch folder for the folded weights beside ``source`` (their external data must lie under
    its folder, as ONNX reads it), removed after; ``None`` where that folder will not take one (a
    read-only source): the folded weights are then held in memory (at ERNIE-4.5-0.3B's shape the
    424 MB table)."""
    scratch: Optional[str] = None
    try:
        scratch = tempfile.mkdtemp(prefix=".int8-folded-", dir=os.path.dirname(os.path.abspath(source)))
    except OSError as e:
        print(f"wenxin: the folded weights are held in memory ({e})", file=sys.stderr)
    try:
        yield scratch
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def quantize(source: str, target: str, one_file_bytes: int = ONE_FILE_BYTES, group_bytes: int = GROUP_BYTES) -> None:
    """``source`` (a float32 ONNX program) quantized to int8 into ``target``: its weights inside it
    while they stay under ``one_file_bytes``, else in ``<target>.data`` beside it, as
    ``onnx_convert`` writes ``source``; ``group_bytes`` of float32 weights handed to ONNX Runtime's
    quantizer at a time (``onnx_quantize_groups``)."""
    import numpy as np
    import onnx
    from onnx import helper
    with folding_scratch(source) as scratch:
        model, base_dir = weights_beside(source, scratch)  # read where they lie, a group at a time
        routers = router_products(model)
        weight_bytes = sum(int(np.prod(init.dims)) * helper.tensor_dtype_to_np_dtype(init.data_type).itemsize
                           for init in model.graph.initializer)
        large_target = weight_bytes // 4 >= one_file_bytes  # the products' weights int8, the rest small
        data_file = external_data_file(target) if large_target else ""
        try:
            quantized = quantize_in_groups(model, base_dir, routers, data_file, group_bytes)
        except GroupsDisagree as e:
            print(f"wenxin: the int8 copy is made in one pass ({e})", file=sys.stderr)
            quantized = quantize_in_groups(model, base_dir, routers, data_file, group_bytes=1 << 62)
        del model
    per_token_activations(quantized)
    biases_apart(quantized, os.path.dirname(target))
    onnx.save(quantized, target)


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    quantize(args[0], args[1], *(int(a) for a in args[2:4]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
