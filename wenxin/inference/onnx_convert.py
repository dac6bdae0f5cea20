"""paddle2onnx on a Paddle program whose weights are its inputs, in the child process that
``onnx_export`` runs (``python -m wenxin.inference.onnx_convert GRAPH PARAMS TARGET OPSET ONE_FILE_BYTES``).

paddle2onnx builds its whole ONNX protobuf, weights inside, in memory, and protobuf stops at 2 GB:
a program over that came out as an empty file (issue 69; its ``external_file`` option is not
applied to a Paddle 3 program), and at ERNIE-4.5-0.3B's shape (1.44 GB of weights) its process
peaked at 10.1 GiB. So a PIR program (``.json``) is handed to it with each parameter made an input
(a ``pd_op.data`` where its ``builtin.parameter`` was: ``wenxin.compat.pir_programs.parameters_as_inputs``;
where that fails, as on a Paddle whose program internals differ, it is converted as before): paddle2onnx converts the
operators alone, and the weights, read with Paddle's own loader, become the ONNX program's
initializers under their parameter names (``with_weights``): inside its file while the file stays
under ``ONE_FILE_BYTES``, else in ``<file>.data`` beside it, ONNX's external data, each tensor at an
offset aligned to a page so that ONNX Runtime may map it, each written as it is read and let go.
Measured (``benchmarks/onnx_conversion.py``): the same logits to the bit at that shape, float32 and
int8, at the same speed; this process 10.1 -> 2.7 GiB; a program of 2.24 GB converts. The weights
are read from Paddle's parameters file a tensor at a time (``read_parameters``) and written from
their arrays (``written_inside``): 2.7 -> 0.71 GiB, the files the same to the byte.
A legacy ``.pdmodel`` program is converted as it is (its weights inside, under 2 GB only).
"""
from __future__ import annotations

import inspect
import os
import sys
import tempfile
from typing import IO, Any, Iterable, Iterator, List, Optional, Tuple

import numpy as np

ONE_FILE_BYTES = 2**31 - 2**26  # protobuf's 2 GB limit, less room for the operators
ALIGNMENT = 4096  # each external tensor starts on a page
EXTERNAL_SUFFIX = ".data"  # advance_pair.onnx -> advance_pair.onnx.data


def external_data_file(program_file: str) -> str:
    """Where ``program_file``'s weights lie when they are not inside it."""
    return program_file + EXTERNAL_SUFFIX


def program_files(program_file: str) -> List[str]:
    """``program_file`` and its external data file where it has one."""
    return [path for path in (program_file, external_data_file(program_file)) if os.path.exists(path)]


def read_parameters(graph: str, params: str, names: List[str]) -> Iterator[Tuple[str, np.ndarray]]:
    """Each of ``names`` with its array, in that order, read from the combined parameters file
    ``params`` of the program ``graph`` one at a time (``paddle_tensor_files``: Paddle writes them
    in the order of their sorted names), so that a conversion holds one weight, not the model.
    Where the file holds another number of tensors than ``names``, Paddle's own loader reads it
    whole, as before (said on stderr); a file not whole is refused, naming the parameter.

    Measured (``benchmarks/onnx_conversion.py``, ERNIE-4.5-0.3B's shape, 1.44 GB of weights): the
    conversion's peak 2.74 -> 2.31 GiB, the files the same to the byte."""
    from wenxin.common.paddle_tensor_files import BrokenTensor, combined_records, read_record
    with open(params, "rb") as stream:
        try:
            records = combined_records(stream, os.fstat(stream.fileno()).st_size, bfloat16=True)
        except BrokenTensor as e:
            named = f", {sorted(names)[e.index]} by its place" if e.index < len(names) else ""
            raise SystemExit(f"{params}: not a whole Paddle parameters file ({e}{named})") from None
        if len(records) != len(names):
            print(f"wenxin: {params} holds {len(records)} tensors where the program has {len(names)} parameters; "
                  f"read by Paddle whole", file=sys.stderr)
            yield from paddle_loaded_parameters(graph, params, names)
            return
        placed = dict(zip(sorted(names), records))
        for name in names:
            try:
                yield name, read_record(stream, placed[name])
            except ValueError as e:
                raise SystemExit(f"{params}: {name}: {e}") from None


def paddle_loaded_parameters(graph: str, params: str, names: List[str]) -> Iterator[Tuple[str, np.ndarray]]:
    """Each of ``names`` with its array, read from ``params`` by Paddle for the program ``graph``
    (all at once, then each let go as it is handed on)."""
    import paddle

    from wenxin.common.graph_mode import static_mode
    scope = paddle.static.Scope()
    with static_mode(), paddle.static.scope_guard(scope):
        paddle.static.load_inference_model(os.path.splitext(graph)[0], paddle.static.Executor(paddle.CPUPlace()),
                                           model_filename=graph, params_filename=params)
    for name in names:
        yield name, np.asarray(scope.find_var(name).get_tensor())
        scope.erase([name])  # held once: here, then in the ONNX program or its data file


def with_weights(onnx_file: str, weights: Iterable[Tuple[str, np.ndarray]], target: str,
                 one_file_bytes: int = ONE_FILE_BYTES) -> None:
    """Write the ONNX program ``onnx_file`` (the weights its inputs) to ``target`` with each of
    ``weights`` an initializer in the place of the input of its name: inside ``target`` while the
    whole stays under ``one_file_bytes``, else in ``external_data_file(target)``.

    Each weight is written as it comes and let go, so that the conversion holds one weight at a
    time besides the caller's (``onnx.save`` of a program holding its weights held their
    serialization beside them: twice the weights). Beside the program, it goes into its data file;
    inside it, into the file as a part of its own, ``ModelProto(graph=GraphProto(initializer=[w]))``,
    the operators written last: a protobuf reader merges the parts of a message it reads one after
    the other, their repeated fields (here the graph's initializers) joined."""
    import onnx
    model = onnx.load(onnx_file)
    inputs = {value.name: value for value in model.graph.input}
    weight_bytes = sum(declared_bytes(value) for value in inputs.values())
    external = model.ByteSize() + weight_bytes + ALIGNMENT * len(inputs) >= one_file_bytes
    data_file = external_data_file(target)
    with open(data_file if external else target, "wb") as written:
        for name, array in weights:
            if name not in inputs:  # (one paddle2onnx pruned away)
                continue
            tensor = initializer_of(name, array, inputs[name])
            little_endian = np.ascontiguousarray(array, array.dtype.newbyteorder("<"))
            if external:
                written_beside(tensor, little_endian.data, written, os.path.basename(data_file))
                model.graph.initializer.append(tensor)
            else:
                written_inside(tensor, little_endian.data, written)
            model.graph.input.remove(inputs.pop(name))
            del array, little_endian, tensor
        if not external:
            written.write(model.SerializeToString())
    if external:
        onnx.save(model, target)


def written_beside(tensor: "onnx.TensorProto", data: Any, written: IO[bytes],  # type: ignore[name-defined]  # noqa: F821
                   location: str) -> None:
    """Write ``data`` (``tensor``'s bytes) into the open external data file ``written``, named
    ``location``, at its next page, and name that place in ``tensor``."""
    import onnx
    offset = -written.tell() % ALIGNMENT + written.tell()
    written.seek(offset)
    written.write(data)
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", written.tell() - offset)):
        tensor.external_data.add(key=key, value=str(value))


def written_inside(tensor: "onnx.TensorProto", data: Any, written: IO[bytes]) -> None:  # type: ignore[name-defined]  # noqa: F821,E501
    """Write ``tensor`` (a header: name, type, dims) with ``data`` as its ``raw_data`` into the open
    ONNX file ``written`` as a part of its own, ``ModelProto(graph=GraphProto(initializer=[w]))``.

    The part's framing is written here and the data from the caller's buffer: building the part
    with protobuf's messages copied the data four times (``raw_data``, each message it is put in,
    the serialization), 1.7 GB at ERNIE-4.5-0.3B's 424 MB embedding; the conversion's peak went
    from 2.31 to 0.71 GiB at that shape (18 layers, 1.44 GB of weights), the file the same to the
    byte (``benchmarks/onnx_conversion.py``). The bytes are protobuf's own
    serialization of that part (tested): a header's fields are numbered below ``raw_data``'s and
    serialized in number order."""
    import onnx
    head = tensor.SerializeToString()
    raw = _field(onnx.TensorProto.DESCRIPTOR.fields_by_name["raw_data"].number, data.nbytes)
    tensor_bytes = len(head) + len(raw) + data.nbytes
    initializer = _field(onnx.GraphProto.DESCRIPTOR.fields_by_name["initializer"].number, tensor_bytes)
    graph = _field(onnx.ModelProto.DESCRIPTOR.fields_by_name["graph"].number, len(initializer) + tensor_bytes)
    written.write(graph + initializer + head + raw)
    written.write(data)


def _field(number: int, length: int) -> bytes:
    """A length-delimited protobuf field's key and length (the value follows)."""
    from wenxin.common.paddle_tensor_files import varint_bytes
    return varint_bytes(number << 3 | 2) + varint_bytes(length)


def declared_bytes(value: "onnx.ValueInfoProto") -> int:  # type: ignore[name-defined]  # noqa: F821
    """The bytes of a tensor input of fixed shape (0 where a dimension is not fixed)."""
    from onnx import helper
    tensor_type = value.type.tensor_type
    dims = [max(d.dim_value, 0) for d in tensor_type.shape.dim]  # (0: a named or unknown dimension)
    return int(np.prod(dims)) * np.dtype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)).itemsize


def initializer_of(name: str, array: np.ndarray,
                   value: "onnx.ValueInfoProto") -> "onnx.TensorProto":  # type: ignore[name-defined]  # noqa: F821
    """An initializer's header (no data yet) for ``array`` in the place of the input ``value``;
    SystemExit naming the weight where its type or shape is not the one the program takes."""
    import onnx
    elem_type = value.type.tensor_type.elem_type
    expected = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
    if np.dtype(expected).itemsize != array.dtype.itemsize:
        raise SystemExit(f"{name}: the program takes {onnx.TensorProto.DataType.Name(elem_type)}, "
                         f"the parameters file holds {array.dtype}")
    dims = [d.dim_value if d.dim_value > 0 else None for d in value.type.tensor_type.shape.dim]  # None: not fixed
    if len(dims) != array.ndim or any(d not in (None, n) for d, n in zip(dims, array.shape)):
        raise SystemExit(f"{name}: the program takes shape {[d if d is not None else '?' for d in dims]}, "
                         f"the parameters file holds {list(array.shape)}")
    return onnx.TensorProto(name=name, dims=array.shape, data_type=elem_type)


def paddle2onnx_export(graph: str, params: str, target: str, opset: int) -> None:
    """paddle2onnx's ``export``, its graph optimizer onnxoptimizer (``onnx_export`` says why)."""
    import paddle2onnx
    settings = dict(save_file=target, opset_version=opset, verbose=False)
    if "optimize_tool" in inspect.signature(paddle2onnx.export).parameters:
        settings["optimize_tool"] = "onnxoptimizer"
    paddle2onnx.export(graph, params, **settings)


def convert(graph: str, params: str, target: str, opset: int, one_file_bytes: int = ONE_FILE_BYTES) -> None:
    """The Paddle program ``graph`` (weights in ``params``) converted to the ONNX program ``target``."""
    if not graph.endswith(".json"):  # a legacy program: paddle2onnx reads its weights itself
        paddle2onnx_export(graph, params, target, opset)
        return
    with tempfile.TemporaryDirectory(prefix="wenxin-onnx-convert-") as scratch:
        opened, operators = os.path.join(scratch, "program.json"), os.path.join(scratch, "program.onnx")
        try:
            from wenxin.compat.pir_programs import parameters_as_inputs
            names = parameters_as_inputs(graph, opened)
        except Exception as e:  # a Paddle whose program internals differ: converted as paddle2onnx does
            print(f"wenxin: the program's parameters could not be made inputs ({type(e).__name__}: {e}); "
                  f"converted with its weights inside (under 2 GB only)", file=sys.stderr)
            paddle2onnx_export(graph, params, target, opset)
            return
        paddle2onnx_export(opened, "", operators, opset)
        if not os.path.isfile(operators) or os.path.getsize(operators) == 0:
            return  # paddle2onnx said why (onnx_export reads its words)
        with_weights(operators, read_parameters(graph, params, names), target, one_file_bytes)


def main(argv: Optional[List[str]] = None) -> int:
    graph, params, target, opset, one_file_bytes = (sys.argv[1:] if argv is None else argv)[:5]
    convert(graph, params, target, int(opset), int(one_file_bytes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
