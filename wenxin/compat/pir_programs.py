"""The PIR program surgery the static engine needs, in one place.

Paddle 3.3 builds static programs in PIR, and its public static API has no way to list a program's
inputs, clone it keeping a map from the original's values, drop ops, switch ops to inference
behaviour, name the persistable values a startup program creates, or turn a saved program's
parameters into inputs (``parameters_as_inputs``, for the ONNX conversion: ``onnx_convert``). These
functions do that through ``Program``'s and ``Operation``'s own methods (``global_block().ops``,
``op.attrs()``, ``set_bool_attr``, ``remove_op``, ``replace_all_uses_with``, ``paddle.pir.IrMapping``,
``paddle.pir.core``, the program files' own (de)serializers), checked against Paddle 3.3.1
(``wenxin.compat.TESTED``); the static engine's and the ONNX conversion's tests exercise each.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Tuple

import paddle

from wenxin.common.graph_mode import static_mode

ValueMap = Callable[[Any], Any]  # a value of the original program -> the clone's


def data_values(program: paddle.static.Program) -> Dict[str, Any]:
    """The program's inputs (``pd_op.data`` results) by feed name."""
    return {op.attrs()["name"]: op.result(0) for op in program.global_block().ops if op.name() == "pd_op.data"}


def set_inference_mode(program: paddle.static.Program) -> None:
    """Switch ops with an ``is_test`` attribute (dropout, batch norm) to inference behaviour."""
    for op in program.global_block().ops:
        if op.has_attr("is_test"):
            op.set_bool_attr("is_test", True)


def clone_program(program: paddle.static.Program) -> Tuple[paddle.static.Program, ValueMap]:
    """A copy of ``program``, and the map from its values to the copy's."""
    value_map = paddle.pir.IrMapping()
    return program.clone(value_map), value_map.look_up


def program_ops(program: paddle.static.Program) -> List[Any]:
    """The ops of the program's global block, in order."""
    return list(program.global_block().ops)


def keep_only_ops(program: paddle.static.Program, keep: Iterable[Any]) -> None:
    """Remove, in place, every op of the global block not in ``keep`` (last first)."""
    kept = set(keep)
    block = program.global_block()
    for op in reversed(block.ops):
        if op not in kept:
            block.remove_op(op)


def persistable_value(name: str, dtype: str, shape: List[int], value: float = 0.0) -> Any:
    """A persistable value of the current program, made by its startup program with ``value``."""
    return paddle.pir.core.create_persistable_value(dtype=dtype, shape=shape, name=name,
                                                    initializer=paddle.nn.initializer.Constant(value))


def created_by_startup(startup: paddle.static.Program) -> List[str]:
    """The names of the persistable values the startup program creates."""
    return [op.attrs()["output_name"] for op in startup.global_block().ops if op.name() == "builtin.shadow_output"]


def parameters_as_inputs(graph: str, target: str) -> List[str]:
    """Write the saved PIR program ``graph`` (a ``.json``) to ``target`` with each parameter an
    input (``pd_op.data``) of its name, shape and type in place of its ``builtin.parameter``;
    returns the parameters' names."""
    from paddle.base import core
    with static_mode():
        program = paddle.pir.Program()
        core.deserialize_pir_program(graph, program, 1)
        block = program.global_block()
        parameters = [(op.attrs()["parameter_name"], op.result(0)) for op in block.ops
                      if op.name() == "builtin.parameter"]
        with paddle.static.program_guard(program):
            paddle.pir.set_insertion_point(block.ops[0])
            for name, value in parameters:
                data = paddle._pir_ops.data(name, list(value.shape), value.dtype,  # type: ignore[attr-defined]
                                            core.Place())
                value.replace_all_uses_with(data)
        for op in [op for op in block.ops if op.name() == "builtin.parameter"]:
            block.remove_op(op)
        core.serialize_pir_program(program, target, True, False, True)  # overwrite, not readable, trainable
    return [name for name, _ in parameters]
