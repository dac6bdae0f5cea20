"""One layer's attention for a decoding step of 16 rows at ERNIE-4.5-0.3B's shape (16 query heads,
2 key/value heads of 128), two ways on ONNX Runtime, one thread, alternating (issue 69):

- ``program``: the operators an ERNIE 4.5 ``advance`` program runs (the query heads of a key/value
  head as rows of one product with the cache, the new token's column beside it, a bias hiding each
  row's columns past its length, softmax, two products), over every column of the cache;
- ``GroupQueryAttention``: ONNX Runtime's contrib operator, which reads each row's own length
  (``seqlens_k``) and writes the new keys and values into the cache it is handed (its outputs bound
  to the inputs' memory).

The rows hold ``--lengths LOW HIGH`` tokens (drawn evenly; one ``--columns - 1``) in ``--columns``
columns. Prints each way's
CPU-ms a layer (the median of rounds) and their outputs' largest difference.

    python benchmarks/attention_kernels.py --columns 256
    python benchmarks/attention_kernels.py --columns 192 --lengths 17 170
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable, Dict, List

import numpy as np

ROWS, HEADS, KV_HEADS, HEAD = 16, 16, 2, 128


def session(nodes: list, inputs: list, outputs: list, initializers: list = ()):  # type: ignore[assignment]
    import onnxruntime as ort
    from onnx import helper
    graph = helper.make_graph(nodes, "attention", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 9
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def main() -> None:
    from onnx import TensorProto, helper
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--columns", type=int, default=256)
    parser.add_argument("--lengths", type=int, nargs=2, default=[100, 199])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    columns, group = args.columns, HEADS // KV_HEADS

    def value(name: str, shape: list, kind: int = TensorProto.FLOAT):
        return helper.make_value_info(name, helper.make_tensor_type_proto(kind, shape))

    def ints(name: str, values: List[int]):
        return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)

    rng = np.random.default_rng(0)
    lengths = rng.integers(args.lengths[0], min(args.lengths[1] + 1, columns), ROWS)
    lengths[0] = columns - 1
    query = rng.standard_normal((ROWS, 1, HEADS * HEAD), dtype=np.float32)
    key, val = (rng.standard_normal((ROWS, 1, KV_HEADS * HEAD), dtype=np.float32) for _ in range(2))
    past_keys, past_values = (rng.standard_normal((ROWS, KV_HEADS, columns, HEAD), dtype=np.float32) for _ in range(2))
    step_inputs = [value("q", [ROWS, 1, HEADS * HEAD]), value("k", [ROWS, 1, KV_HEADS * HEAD]),
                   value("v", [ROWS, 1, KV_HEADS * HEAD]), value("pk", [ROWS, KV_HEADS, columns, HEAD]),
                   value("pv", [ROWS, KV_HEADS, columns, HEAD])]
    gqa = session([helper.make_node("GroupQueryAttention", ["q", "k", "v", "pk", "pv", "seqlens", "total"],
                                    ["o", "present_k", "present_v"], domain="com.microsoft", num_heads=HEADS,
                                    kv_num_heads=KV_HEADS, scale=HEAD ** -0.5)],
                  step_inputs + [value("seqlens", [ROWS], TensorProto.INT32), value("total", [], TensorProto.INT32)],
                  [value("o", [ROWS, 1, HEADS * HEAD]), value("present_k", [ROWS, KV_HEADS, columns, HEAD]),
                   value("present_v", [ROWS, KV_HEADS, columns, HEAD])])
    make = helper.make_node
    program = session([
        make("Reshape", ["q", "grouped"], ["qg"]), make("Reshape", ["k", "one"], ["kn"]), make("Reshape", ["v", "one"], ["vn"]),
        make("FusedMatMul", ["qg", "pk"], ["cached"], domain="com.microsoft", transB=1),  # [R, KV, G, C]
        make("FusedMatMul", ["qg", "kn"], ["fresh"], domain="com.microsoft", transB=1),  # [R, KV, G, 1]
        make("Concat", ["cached", "fresh"], ["scores"], axis=3), make("Mul", ["scores", "scale"], ["scaled"]),
        make("Reshape", ["scaled", "by_head"], ["heads"]), make("Add", ["heads", "bias"], ["biased"]),
        make("Softmax", ["biased"], ["weights"], axis=-1), make("Reshape", ["weights", "by_group"], ["w"]),
        make("Slice", ["w", "zero", "end", "last"], ["w_cached"]), make("Slice", ["w", "end", "past_end", "last"], ["w_fresh"]),
        make("MatMul", ["w_cached", "pv"], ["from_cache"]), make("MatMul", ["w_fresh", "vn"], ["from_new"]),
        make("Add", ["from_cache", "from_new"], ["o"])],
        step_inputs + [value("bias", [ROWS, 1, 1, columns + 1])], [value("o", [ROWS, KV_HEADS, group, HEAD])],
        [ints("grouped", [ROWS, KV_HEADS, group, HEAD]), ints("one", [ROWS, KV_HEADS, 1, HEAD]),
         ints("by_head", [ROWS, HEADS, 1, columns + 1]), ints("by_group", [ROWS, KV_HEADS, group, columns + 1]),
         ints("zero", [0]), ints("end", [columns]), ints("past_end", [columns + 1]), ints("last", [3]),
         helper.make_tensor("scale", TensorProto.FLOAT, [], [HEAD ** -0.5])])
    bias = np.where(np.arange(columns + 1)[None] < lengths[:, None], 0.0, -1e9).astype(np.float32)
    bias[:, columns] = 0.0  # the new token sees itself
    keys_held, values_held = past_keys.copy(), past_values.copy()

    def run_gqa() -> np.ndarray:
        # the new token's keys and values written where each row's tokens end: the cache is the outputs' memory
        binding = gqa.io_binding()
        for name, array in (("q", query), ("k", key), ("v", val), ("seqlens", lengths.astype(np.int32)),
                            ("total", np.array(columns, np.int32))):
            binding.bind_cpu_input(name, array)
        for inp, out, array in (("pk", "present_k", keys_held), ("pv", "present_v", values_held)):
            binding.bind_input(inp, "cpu", 0, np.float32, list(array.shape), array.ctypes.data)
            binding.bind_output(out, "cpu", 0, np.float32, list(array.shape), array.ctypes.data)
        binding.bind_output("o")
        gqa.run_with_iobinding(binding)
        return binding.get_outputs()[2].numpy()  # the attention's output alone

    feed = {"q": query, "k": key, "v": val, "pk": past_keys, "pv": past_values, "bias": bias[:, None, None, :]}
    ways: Dict[str, Callable[[], np.ndarray]] = {"program": lambda: program.run(None, feed)[0],
                                                 "GroupQueryAttention": run_gqa}
    outputs = {name: way().reshape(ROWS, HEADS, HEAD) for name, way in ways.items()}
    cpu: Dict[str, List[float]] = {name: [] for name in ways}
    for round_ in range(args.rounds):
        for name in (list(ways) if round_ % 2 == 0 else list(reversed(list(ways)))):
            started = time.process_time()
            for _ in range(args.repeat):
                ways[name]()
            cpu[name].append((time.process_time() - started) / args.repeat)
    print(f"{ROWS} rows of {lengths.mean():.0f} tokens on average in {columns} columns, one layer, one thread:")
    for name, seconds in cpu.items():
        print(f"  {name}: {statistics.median(seconds) * 1e3:.3f} CPU-ms")
    print(f"  largest difference: {np.abs(outputs['program'] - outputs['GroupQueryAttention']).max():.2e}")


if __name__ == "__main__":
    main()
