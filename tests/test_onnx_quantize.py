"""int8 activations per token (``wenxin.inference.onnx_quantize.per_token_activations``, issue 69):
on a two-layer ONNX program quantized by ONNX Runtime's ``quantize_dynamic``, a row's outputs in a
batch equal its outputs alone exactly once each token has its own scale (with one scale a call
they move with the other rows), and they stay at least as near float32's."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime.quantization")

from wenxin.inference.onnx_quantize import per_token_activations  # noqa: E402


def two_layers(path, opset):
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
               for name, shape in (("w1", (64, 96)), ("w2", (96, 64)))]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["y"])], "two_layers",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", 64])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(path))


def outputs(path, x):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    batched = session.run(None, {"x": x})[0]
    alone = np.concatenate([session.run(None, {"x": x[row:row + 1]})[0] for row in range(len(x))])
    return batched, alone


@pytest.mark.parametrize("opset", [13, 18])  # ReduceMax's axes: an attribute, then an input
def test_each_tokens_own_scale_makes_a_row_batched_equal_it_alone(tmp_path, opset):
    from onnxruntime.quantization import QuantType, quantize_dynamic
    two_layers(tmp_path / "f32.onnx", opset)
    quantize_dynamic(str(tmp_path / "f32.onnx"), str(tmp_path / "call.onnx"), weight_type=QuantType.QInt8,
                     per_channel=True)
    model = onnx.load(str(tmp_path / "call.onnx"))
    assert per_token_activations(model) == 2
    onnx.checker.check_model(model)
    assert "DynamicQuantizeLinear" not in {node.op_type for node in model.graph.node}
    onnx.save(model, str(tmp_path / "token.onnx"))

    rng = np.random.default_rng(1)
    x = (rng.standard_normal((8, 64)) * rng.uniform(0.1, 10, (8, 1))).astype(np.float32)  # rows of unlike sizes
    x[3] = 0  # a token of zeros keeps a scale above zero
    exact, _ = outputs(tmp_path / "f32.onnx", x)
    per_call, per_call_alone = outputs(tmp_path / "call.onnx", x)
    per_token, per_token_alone = outputs(tmp_path / "token.onnx", x)
    assert np.abs(per_call - per_call_alone).max() > 1e-3 * np.abs(exact).max()  # the batch moves a row
    np.testing.assert_array_equal(per_token, per_token_alone)
    assert np.isfinite(per_token).all() and not per_token[3].any()
    error = np.abs(per_token - exact).max(axis=1) / np.abs(exact).max(axis=1).clip(1e-6)
    assert error[np.arange(8) != 3].max() < 0.03  # each row within 3% of its largest float32 output
    assert np.abs(per_token - exact).max() <= np.abs(per_call - exact).max()


def test_each_token_is_quantized_as_numpy_rounds_it(tmp_path):
    """The per-token chain's uint8 values against NumPy's: ``x / scale`` rounded half to even, plus
    the zero point 128, saturated; a row's scale its largest magnitude / 127 (0 stays 0)."""
    from onnx import TensorProto, helper
    from onnxruntime.quantization import QuantType, quantize_dynamic
    two_layers(tmp_path / "f32.onnx", 13)
    quantize_dynamic(str(tmp_path / "f32.onnx"), str(tmp_path / "call.onnx"), weight_type=QuantType.QInt8,
                     per_channel=True)
    model = onnx.load(str(tmp_path / "call.onnx"))
    first = next(node for node in model.graph.node if node.op_type == "DynamicQuantizeLinear" and node.input[0] == "x")
    quantized, scale = first.output[0], first.output[1]
    per_token_activations(model)
    model.graph.output.extend([helper.make_tensor_value_info(quantized, TensorProto.UINT8, None),
                               helper.make_tensor_value_info(scale, TensorProto.FLOAT, None)])
    onnx.save(model, str(tmp_path / "token.onnx"))
    x = np.zeros((3, 64), np.float32)
    x[0, :6] = [127, 2.5, -3.5, 0.5, -0.5, 126.5]  # scale 1: halves round to even
    x[1] = np.linspace(-40, 20, 64)  # scale 40 / 127
    session = ort.InferenceSession(str(tmp_path / "token.onnx"), providers=["CPUExecutionProvider"])
    _, got, scales = session.run(None, {"x": x})
    expected_scales = np.maximum(np.abs(x).max(axis=1, keepdims=True), np.float32(1e-30)) / np.float32(127)
    np.testing.assert_array_equal(scales, expected_scales)
    expected = np.clip(np.rint(x / expected_scales) + 128, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(got, expected)
    assert list(got[0, :6]) == [255, 130, 124, 128, 128, 254]  # 2.5 -> 2, -3.5 -> -4, 126.5 -> 126


def test_a_products_bias_stays_exact_beside_per_token_scales(tmp_path):
    """ONNX Runtime's fused int8 product multiplies a fused bias by the token's scale; the bias is
    therefore added apart (``biases_apart``), and a bias of -1e4 (a token never to be chosen) and
    ordinary ones stay what they are."""
    from onnx import TensorProto, helper, numpy_helper

    from wenxin.inference.onnx_quantize import quantize
    rng = np.random.default_rng(0)
    bias = rng.standard_normal(64).astype(np.float32) * 0.5
    bias[2] = -1e4
    inits = [numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32) * 0.1, "w"),
             numpy_helper.from_array(bias, "b")]
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])],
                              "biased", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", 64])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "f32.onnx"))
    quantize(str(tmp_path / "f32.onnx"), str(tmp_path / "int8.onnx"))
    assert "Sub" in {node.op_type for node in onnx.load(str(tmp_path / "int8.onnx")).graph.node}
    x = (rng.standard_normal((8, 64)) * rng.uniform(0.1, 10, (8, 1))).astype(np.float32)
    exact, _ = outputs(tmp_path / "f32.onnx", x)
    int8, alone = outputs(tmp_path / "int8.onnx", x)
    np.testing.assert_array_equal(int8, alone)
    np.testing.assert_allclose(int8[:, 2], exact[:, 2], rtol=1e-4)  # -1e4 and the row's own product
    scale = np.abs(np.delete(exact, 2, axis=1)).max(axis=1, keepdims=True)
    assert (np.abs(np.delete(int8 - exact, 2, axis=1)) / scale).max() < 0.03
