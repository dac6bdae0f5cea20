"""The int8 copy made a group of weights at a time (``wenxin.inference.onnx_quantize_groups``, issue
69): ONNX Runtime's ``quantize_dynamic`` holds the float32 weights three times over, so a large
program is handed to it one group at a time and the passes put together. The program is the one
ONNX Runtime makes in a single pass over the whole (the library itself, as ``onnx_quantize`` used
it before): the same outputs to the bit, whether each weight is a group of its own or all one,
its weights inside it or beside it."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime.quantization")

from wenxin.inference.onnx_convert import external_data_file, program_files  # noqa: E402
from wenxin.inference.onnx_quantize import (biases_apart, fold_transposed_weights, per_token_activations,  # noqa: E402
                                            quantize, router_products)
from wenxin.inference.onnx_quantize_groups import in_order, weight_groups, without_weights  # noqa: E402

VOCAB, HIDDEN, LAYERS = 50, 32, 2


def small_language_model(path, beside=False, norm=True):
    """A table read by ``Gather`` and, transposed, by the output product (a tied embedding); per
    layer three products reading one activation (as queries, keys and values do), a product with a
    bias, and a router (a product into a softmax, left float32)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    weights = {"table": rng.standard_normal((VOCAB, HIDDEN))}
    nodes = [helper.make_node("Gather", ["table", "ids"], ["rows" if norm else "h0"])]
    if norm:  # (a product reading the table's rows directly takes ONNX Runtime's int8 rows: one pass only)
        weights["norm"] = rng.uniform(0.5, 1.5, HIDDEN)
        nodes.append(helper.make_node("Mul", ["rows", "norm"], ["h0"]))
    for layer in range(LAYERS):
        h, parts = f"h{layer}", []
        for part in ("q", "k", "v"):
            weights[f"{part}{layer}"] = rng.standard_normal((HIDDEN, HIDDEN)) * 0.2
            nodes.append(helper.make_node("MatMul", [h, f"{part}{layer}"], [f"{part}{layer}.out"]))
            parts.append(f"{part}{layer}.out")
        weights[f"router{layer}"] = rng.standard_normal((HIDDEN, 4))
        weights[f"o{layer}"], weights[f"bias{layer}"] = rng.standard_normal((HIDDEN, HIDDEN)) * 0.2, rng.standard_normal(HIDDEN)
        nodes += [helper.make_node("Mul", parts[:2], [f"qk{layer}"]), helper.make_node("Add", [f"qk{layer}", parts[2]], [f"a{layer}"]),
                  helper.make_node("MatMul", [h, f"router{layer}"], [f"r{layer}"]),
                  helper.make_node("Softmax", [f"r{layer}"], [f"gate{layer}"], axis=-1),
                  helper.make_node("ReduceMean", [f"gate{layer}"], [f"g{layer}"], axes=[-1], keepdims=1),
                  helper.make_node("MatMul", [f"a{layer}", f"o{layer}"], [f"o{layer}.out"]),
                  helper.make_node("Add", [f"o{layer}.out", f"bias{layer}"], [f"b{layer}"]),
                  helper.make_node("Mul", [f"b{layer}", f"g{layer}"], [f"h{layer + 1}"])]
    nodes += [helper.make_node("Transpose", ["table"], ["table.T"], perm=[1, 0]),
              helper.make_node("MatMul", [f"h{LAYERS}", "table.T"], ["logits"])]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["rows"])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["rows", VOCAB])],
                              [numpy_helper.from_array(w.astype(np.float32), name) for name, w in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, str(path), save_as_external_data=beside, location=external_data_file(path.name),
              size_threshold=0)


def library_int8(source, target):
    """What ``onnx_quantize`` made before: ONNX Runtime's ``quantize_dynamic`` on the whole program."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    model = onnx.load(str(source))
    fold_transposed_weights(model)
    routers = router_products(model)
    folded = str(target) + ".float32.onnx"
    onnx.save(model, folded)
    quantize_dynamic(folded, str(target), weight_type=QuantType.QInt8, per_channel=True, nodes_to_exclude=routers)
    quantized = onnx.load(str(target))
    per_token_activations(quantized)
    biases_apart(quantized)
    onnx.save(quantized, str(target))


def logits(path):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"ids": np.arange(VOCAB, dtype=np.int64) % VOCAB})[0]


@pytest.mark.parametrize("group_bytes", [1 << 40, 0, 5000], ids=["one-group", "each-weight-alone", "a-few-together"])
@pytest.mark.parametrize("source_beside, target_beside", [(False, False), (True, True)], ids=["inside", "beside"])
def test_groups_give_the_program_onnx_runtime_makes_in_one_pass(tmp_path, group_bytes, source_beside, target_beside):
    source = tmp_path / "f32.onnx"
    small_language_model(source, beside=source_beside)
    library_int8(source, tmp_path / "library.onnx")
    target = tmp_path / "int8.onnx"
    quantize(str(source), str(target), one_file_bytes=0 if target_beside else 1 << 40, group_bytes=group_bytes)
    assert program_files(str(target)) == [str(target)] + ([external_data_file(str(target))] if target_beside else [])
    np.testing.assert_array_equal(logits(target), logits(tmp_path / "library.onnx"))
    ours, theirs = (onnx.load(str(path)) for path in (target, tmp_path / "library.onnx"))
    assert sorted(n.op_type for n in ours.graph.node) == sorted(n.op_type for n in theirs.graph.node)
    assert sorted(i.name for i in ours.graph.initializer) == sorted(i.name for i in theirs.graph.initializer)
    onnx.checker.check_model(str(target))
    assert "router0" in {i.name for i in ours.graph.initializer}  # the router left float32
    assert abs(logits(target) - logits(source)).max() < 0.05 * abs(logits(source)).max()  # int8, near float32


def test_a_product_fed_a_quantized_tables_rows_makes_the_copy_in_one_pass(tmp_path, capfd):
    source = tmp_path / "f32.onnx"
    small_language_model(source, norm=False)
    library_int8(source, tmp_path / "library.onnx")
    quantize(str(source), str(tmp_path / "int8.onnx"), group_bytes=0)
    assert "the int8 copy is made in one pass (two passes made different nodes computing" in capfd.readouterr().err
    np.testing.assert_array_equal(logits(tmp_path / "int8.onnx"), logits(tmp_path / "library.onnx"))


@pytest.mark.parametrize("source_beside", [False, True], ids=["inside", "beside"])
def test_a_source_folder_that_takes_no_scratch_folder_holds_the_fold_in_memory(tmp_path, monkeypatch, capfd,
                                                                               source_beside):
    """The folded table goes to a scratch folder beside the source; where that folder refuses one
    (a read-only folder; root is never refused, so the refusal is made here), the same program."""
    import tempfile
    source_dir, target_dir = tmp_path / "source", tmp_path / "target"
    source_dir.mkdir()
    target_dir.mkdir()
    source = source_dir / "f32.onnx"
    small_language_model(source, beside=source_beside)
    library_int8(source, tmp_path / "library.onnx")
    before = sorted(p.name for p in source_dir.iterdir())
    quantize(str(source), str(target_dir / "made_beside.onnx"))
    assert sorted(p.name for p in source_dir.iterdir()) == before  # the scratch folder removed
    made_dir = tempfile.mkdtemp

    def refused_beside_source(suffix=None, prefix=None, dir=None):
        if str(dir) == str(source_dir):
            raise PermissionError(13, "Permission denied", str(source_dir))
        return made_dir(suffix, prefix, dir)

    monkeypatch.setattr(tempfile, "mkdtemp", refused_beside_source)
    quantize(str(source), str(target_dir / "in_memory.onnx"))
    assert "the folded weights are held in memory ([Errno 13] Permission denied" in capfd.readouterr().err
    assert sorted(p.name for p in source_dir.iterdir()) == before
    for made in ("made_beside.onnx", "in_memory.onnx"):
        np.testing.assert_array_equal(logits(target_dir / made), logits(tmp_path / "library.onnx"))


def test_weights_are_grouped_up_to_the_size_given_and_a_larger_one_alone():
    from onnx import helper, numpy_helper
    inits = [numpy_helper.from_array(np.zeros(shape, np.float32), name)
             for name, shape in (("a", (10,)), ("b", (10,)), ("big", (100,)), ("c", (5,)))]
    model = helper.make_model(helper.make_graph([], "g", [], [], inits))
    assert weight_groups(model, ["a", "b", "big", "c"], 80) == [["a", "b"], ["big"], ["c"]]
    assert weight_groups(model, ["a", "b", "big", "c"], 0) == [["a"], ["b"], ["big"], ["c"]]
    assert weight_groups(model, [], 80) == []


def test_nodes_are_put_where_their_inputs_are_computed_first():
    from onnx import helper
    nodes = [helper.make_node("Relu", ["b"], ["c"], name="second"), helper.make_node("Relu", ["x"], ["b"], name="first"),
             helper.make_node("Add", ["c", "x"], ["y"], name="third")]
    assert [n.name for n in in_order(nodes, {"x"})] == ["first", "second", "third"]
    with pytest.raises(ValueError, match="cycle"):
        in_order([helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Relu", ["a"], ["b"])], set())


def test_a_program_without_its_weights_keeps_all_else(tmp_path):
    small_language_model(tmp_path / "f32.onnx")
    model = onnx.load(str(tmp_path / "f32.onnx"))
    model.metadata_props.add(key="made by", value="a test")
    expected = onnx.ModelProto()
    expected.CopyFrom(model)
    del expected.graph.initializer[:]
    assert without_weights(model).SerializeToString(deterministic=True) == expected.SerializeToString(deterministic=True)
