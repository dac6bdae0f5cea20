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
offset aligned to a page so that ONNX Runtime may map it. Measured (``benchmarks/onnx_conversion.py``):
the same logits to the bit at that shape, float32 and int8, at the same speed; the conversion's
largest child process 10.1 -> 5.8 GiB and 132 -> 108 s; a program of 2.24 GB converts.
A legacy ``.pdmodel`` program is converted as it is (its weights inside, under 2 GB only).
"""
from __future__ import annotations

import contextlib
import inspect
import os
import sys
import tempfile
from typing import Iterator, List, Optional, Tuple

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
    """Each of ``names`` with its array, read from ``params`` by Paddle for the program ``graph``."""
    import paddle

    from wenxin.common.graph_mode import static_mode
    scope = paddle.static.Scope()
    with static_mode(), paddle.static.scope_guard(scope):
        paddle.static.load_inference_model(os.path.splitext(graph)[0], paddle.static.Executor(paddle.CPUPlace()),
                                           model_filename=graph, params_filename=params)
    for name in names:
        yield name, np.asarray(scope.find_var(name).get_tensor())
        scope.erase([name])  # held once: here, then in the ONNX program or its data file


def with_weights(onnx_file: str, weights: Iterator[Tuple[str, np.ndarray]], target: str,
                 one_file_bytes: int = ONE_FILE_BYTES) -> None:
    """Write the ONNX program ``onnx_file`` (the weights its inputs) to ``target`` with each of
    ``weights`` an initializer in the place of the input of its name: inside ``target`` while the
    whole stays under ``one_file_bytes``, else in ``external_data_file(target)``."""
    import onnx
    model = onnx.load(onnx_file)
    inputs = {value.name: value for value in model.graph.input}
    arrays = {name: array for name, array in weights if name in inputs}  # (not one paddle2onnx pruned away)
    external = model.ByteSize() + sum(a.nbytes for a in arrays.values()) + ALIGNMENT * len(arrays) >= one_file_bytes
    data_file = external_data_file(target)
    with open(data_file, "wb") if external else contextlib.nullcontext() as data:
        for name in list(arrays):
            array = arrays.pop(name)  # each array held once: here, then in the program or its data file
            elem_type = inputs[name].type.tensor_type.elem_type
            expected = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
            if np.dtype(expected).itemsize != array.dtype.itemsize:
                raise SystemExit(f"{name}: the program takes {onnx.TensorProto.DataType.Name(elem_type)}, "
                                 f"the parameters file holds {array.dtype}")
            tensor = onnx.TensorProto(name=name, dims=array.shape, data_type=elem_type)
            raw = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
            if data is None:
                tensor.raw_data = raw
            else:
                offset = -data.tell() % ALIGNMENT + data.tell()
                data.seek(offset)
                data.write(raw)
                tensor.data_location = onnx.TensorProto.EXTERNAL
                for key, value in (("location", os.path.basename(data_file)), ("offset", offset), ("length", len(raw))):
                    tensor.external_data.add(key=key, value=str(value))
            model.graph.initializer.append(tensor)
            model.graph.input.remove(inputs[name])
    onnx.save(model, target)


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
