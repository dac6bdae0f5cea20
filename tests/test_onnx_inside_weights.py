"""An ONNX program whose weights lie inside its file, read without them
(``wenxin.inference.onnx_inside_weights``, issue 69): every part but the large weights is the
program as ``onnx.load`` reads it, and each large weight names its bytes' place in the file, which
ONNX's external data reader reads back as the weight; for a file ``onnx.save`` wrote, one wenxin's
conversion wrote a weight at a time, and one whose weights lie beside it; a file cut short is
refused."""
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from wenxin.inference.onnx_convert import with_weights  # noqa: E402
from wenxin.inference.onnx_inside_weights import SMALLEST, program_without_weights  # noqa: E402


def weights():
    rng = np.random.default_rng(0)
    return {"big": rng.standard_normal((16, 40)).astype(np.float32),  # 2,560 bytes: named in the file
            "small": rng.standard_normal((2, 3)).astype(np.float32),  # 24 bytes: kept in the tensor
            "ids": np.arange(300, dtype=np.int64)}


def graph_reading(names):
    from onnx import TensorProto, helper
    nodes = [helper.make_node("MatMul", ["x", "big"], ["y"]), helper.make_node("Identity", ["small"], ["s"]),
             helper.make_node("Identity", ["ids"], ["i"])]
    return helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])] + names,
                             [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "s")]
                             + [helper.make_tensor_value_info("i", TensorProto.INT64, None)])


def check_read(path, expected_external):
    from onnx import external_data_helper, numpy_helper
    read = program_without_weights(str(path))
    whole = onnx.load(str(path))
    assert [n.SerializeToString() for n in read.graph.node] == [n.SerializeToString() for n in whole.graph.node]
    assert read.graph.input == whole.graph.input and read.graph.output == whole.graph.output
    assert read.opset_import == whole.opset_import and read.ir_version == whole.ir_version
    assert sorted(i.name for i in read.graph.initializer) == sorted(weights())
    external = {i.name for i in read.graph.initializer if external_data_helper.uses_external_data(i)}
    assert external == expected_external
    for init in read.graph.initializer:
        np.testing.assert_array_equal(numpy_helper.to_array(init, os.path.dirname(str(path))), weights()[init.name])
    return read


def test_a_program_onnx_wrote_with_its_weights_inside(tmp_path):
    from onnx import helper, numpy_helper
    graph = graph_reading([])
    graph.initializer.extend(numpy_helper.from_array(array, name) for name, array in weights().items())
    path = tmp_path / "inside.onnx"
    onnx.save(helper.make_model(graph), str(path))
    read = check_read(path, {"big", "ids"})
    big = next(i for i in read.graph.initializer if i.name == "big")
    place = {entry.key: entry.value for entry in big.external_data}
    assert place["location"] == "inside.onnx" and int(place["length"]) == 16 * 40 * 4 >= SMALLEST
    with open(path, "rb") as f:  # the place named is the weight's bytes in the program's own file
        f.seek(int(place["offset"]))
        assert f.read(int(place["length"])) == weights()["big"].tobytes()


def test_a_program_wenxins_conversion_wrote_a_weight_at_a_time(tmp_path):
    from onnx import TensorProto, helper
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64 if name == "ids" else TensorProto.FLOAT,
                                            list(array.shape)) for name, array in weights().items()]
    operators = tmp_path / "operators.onnx"
    onnx.save(helper.make_model(graph_reading(inputs)), str(operators))
    path = tmp_path / "converted.onnx"
    with_weights(str(operators), weights().items(), str(path))  # each weight a frame of its own, operators last
    check_read(path, {"big", "ids"})


def test_a_program_whose_weights_lie_beside_it(tmp_path):
    from onnx import helper, numpy_helper
    graph = graph_reading([])
    graph.initializer.extend(numpy_helper.from_array(array, name) for name, array in weights().items())
    path = tmp_path / "beside.onnx"
    onnx.save(helper.make_model(graph), str(path), save_as_external_data=True, location="beside.onnx.data",
              size_threshold=0)
    read = check_read(path, set(weights()))
    assert all(e.value == "beside.onnx.data" for i in read.graph.initializer for e in i.external_data
               if e.key == "location")


def test_a_file_cut_short_is_refused(tmp_path):
    from onnx import helper, numpy_helper
    graph = graph_reading([])
    graph.initializer.extend(numpy_helper.from_array(array, name) for name, array in weights().items())
    path = tmp_path / "cut.onnx"
    onnx.save(helper.make_model(graph), str(path))
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(ValueError, match="cut short|runs past"):
        program_without_weights(str(path))
