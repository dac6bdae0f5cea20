"""``onnx_convert.with_weights``: a program converted with its weights as inputs gets them back as
initializers, inside its file under ``one_file_bytes``, else in ``<file>.data`` beside it, each
tensor on a page boundary; the outputs are the same either way (ONNX Runtime against numpy)."""
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")

from wenxin.inference.onnx_convert import ALIGNMENT, external_data_file, program_files, with_weights  # noqa: E402


def weights_as_inputs(path):
    """``y = (x @ w1) @ w2 + b``, every weight an input, as paddle2onnx writes an opened program."""
    from onnx import TensorProto, helper
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("MatMul", ["h", "w2"], ["p"]),
             helper.make_node("Add", ["p", "b"], ["y"])]
    inputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
              for name, shape in (("x", ["rows", 8]), ("w1", [8, 300]), ("w2", [300, 4]), ("b", [4]))]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def run(path, x):
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["x"]  # the weights are no longer inputs
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize("limit, beside", [(2**31, False), (0, True)])
def test_weights_go_inside_the_program_or_beside_it_and_give_the_same_outputs(tmp_path, limit, beside):
    rng = np.random.default_rng(0)
    weights = {"w1": rng.standard_normal((8, 300), np.float32), "w2": rng.standard_normal((300, 4), np.float32),
               "b": rng.standard_normal(4).astype(np.float32), "pruned": np.zeros(3, np.float32)}
    source, target = str(tmp_path / "ops.onnx"), str(tmp_path / "model.onnx")
    weights_as_inputs(source)
    with_weights(source, iter(weights.items()), target, one_file_bytes=limit)
    assert program_files(target) == ([target, external_data_file(target)] if beside else [target])
    x = rng.standard_normal((3, 8), np.float32)
    expected = (x @ weights["w1"]) @ weights["w2"] + weights["b"]
    np.testing.assert_allclose(run(target, x), expected, rtol=1e-5, atol=1e-5)
    onnx.checker.check_model(target)  # written in parts (inside) or with its data file (beside): one valid program
    model = onnx.load(target, load_external_data=False)
    assert sorted(i.name for i in model.graph.initializer) == ["b", "w1", "w2"]  # not one the graph lacks
    if beside:
        offsets = [int(entry.value) for init in model.graph.initializer for entry in init.external_data
                   if entry.key == "offset"]
        assert len(offsets) == 3 and all(offset % ALIGNMENT == 0 for offset in offsets)
        assert os.path.getsize(external_data_file(target)) >= sum(w.nbytes for w in weights.values()) - 12
        assert os.path.getsize(target) < 1000  # the operators alone


@pytest.mark.parametrize("limit", [2**31, 0])
def test_each_weight_is_let_go_before_the_next_is_read(tmp_path, limit):
    """The conversion holds one weight at a time besides Paddle's copy (issue 69: it held them all,
    then the program's serialization beside them)."""
    import weakref
    source, target = str(tmp_path / "ops.onnx"), str(tmp_path / "model.onnx")
    weights_as_inputs(source)
    shapes = {"w1": (8, 300), "w2": (300, 4), "b": (4,)}
    alive = []

    def read():
        for name, shape in shapes.items():
            alive.append(sum(ref() is not None for ref in handed))
            array = np.ones(shape, np.float32)
            handed.append(weakref.ref(array))
            yield name, array
            del array
    handed: list = []
    with_weights(source, read(), target, one_file_bytes=limit)
    assert alive == [0, 0, 0]
    x = np.ones((2, 8), np.float32)
    np.testing.assert_allclose(run(target, x), np.full((2, 4), 8 * 300 + 1, np.float32))


@pytest.mark.parametrize("array", [np.arange(70000, dtype=np.float32).reshape(700, 100), np.zeros((0, 3), np.float32),
                                   np.array(2.5, np.float64), np.arange(200, dtype=np.int64), np.ones(3, np.float16)],
                         ids=["large", "empty", "scalar", "int64", "float16"])
def test_a_weight_inside_the_program_is_written_as_protobuf_serializes_it(array):
    """``written_inside`` frames the part by hand (so that the data is written from the array, not
    copied into messages): its bytes are protobuf's own serialization of that part."""
    import io

    from wenxin.inference.onnx_convert import written_inside
    tensor = onnx.TensorProto(name="a_weight.w_0", dims=array.shape,
                              data_type=onnx.helper.np_dtype_to_tensor_dtype(array.dtype))
    written = io.BytesIO()
    written_inside(tensor, array.data, written)
    tensor.raw_data = array.tobytes()
    assert written.getvalue() == onnx.ModelProto(graph=onnx.GraphProto(initializer=[tensor])).SerializeToString()


def test_a_weight_of_another_type_or_shape_than_the_program_takes_is_refused_by_name(tmp_path):
    source, target = str(tmp_path / "ops.onnx"), str(tmp_path / "model.onnx")
    weights_as_inputs(source)
    weights = {"w1": np.zeros((8, 300), np.float64), "w2": np.zeros((300, 4), np.float32)}
    with pytest.raises(SystemExit, match="w1: the program takes FLOAT, the parameters file holds float64"):
        with_weights(source, iter(weights.items()), target)
    weights = {"w1": np.zeros((8, 300), np.float32), "w2": np.zeros((4, 300), np.float32)}
    with pytest.raises(SystemExit, match=r"w2: the program takes shape \[300, 4\], the parameters file holds \[4, 300\]"):
        with_weights(source, iter(weights.items()), target)


def test_a_program_whose_parameters_cannot_be_made_inputs_is_converted_with_its_weights_inside(
        tmp_path, monkeypatch, capsys):
    """``parameters_as_inputs`` reaches into Paddle's program internals (``wenxin.compat``); where it
    fails, as on a Paddle whose internals differ, the program is converted as paddle2onnx converts
    it, and the conversion says so."""
    pytest.importorskip("paddle2onnx")
    pytest.importorskip("sentencepiece")
    from test_chat_sft import FOLDER

    from wenxin.compat import pir_programs
    from wenxin.inference.onnx_check import compare
    from wenxin.inference.onnx_convert import convert
    from wenxin.inference.onnx_export import advance_programs
    from wenxin.model_folders import FolderSettings, export_of_folder
    monkeypatch.setenv("WENXIN_CACHE", str(tmp_path / "cache"))
    export = export_of_folder(FOLDER, FolderSettings(graph_mode="dynamic"))
    graph, params = os.path.join(export, "advance_pair.json"), os.path.join(export, "steps.pdiparams")
    opened, fallen_back = str(tmp_path / "opened.onnx"), str(tmp_path / "fallen_back.onnx")
    convert(graph, params, opened, 13)

    def fails(graph, target):
        raise AttributeError("no such internal")
    monkeypatch.setattr(pir_programs, "parameters_as_inputs", fails)
    capsys.readouterr()
    convert(graph, params, fallen_back, 13)
    assert "the program's parameters could not be made inputs (AttributeError: no such internal)" in \
        capsys.readouterr().err
    feeds = sorted(i.name for i in onnx.load(opened).graph.input)
    assert feeds == sorted(i.name for i in onnx.load(fallen_back).graph.input)  # the weights inside both
    batches = advance_programs(export, graph, params)[0].batches  # what the export's conversion checks
    for path in (opened, fallen_back):
        checked = compare(export, path, batches, "advance_pair")
        assert checked["difference"] <= 1e-5 * checked["scale"], checked
    import paddle
    assert paddle.in_dynamic_mode()  # the conversion left the process's graph mode as it found it


def saved_program(folder):
    """A saved PIR program whose parameters are of every type a parameters file holds."""
    import paddle

    from wenxin.common.graph_mode import static_mode
    with static_mode():
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [2, 3], "float32")
            total = x.sum()
            for index, dtype in enumerate(["int8", "float32", "bfloat16", "float16", "int64", "float64"]):
                value = paddle.nn.initializer.Uniform(-2.0, 2.0) if "float" in dtype else \
                    paddle.nn.initializer.Constant(index + 1)
                weight = paddle.static.create_parameter([3, 2 + index], dtype, name=f"w{9 - index}_{dtype}",
                                                        default_initializer=value)
                total = total + paddle.cast(weight, "float32").sum()
        executor = paddle.static.Executor(paddle.CPUPlace())
        executor.run(startup)
        paddle.static.save_inference_model(os.path.join(folder, "m"), [x], [total], executor, program=main)
    return os.path.join(folder, "m.json"), os.path.join(folder, "m.pdiparams")


def program_parameters(graph, folder):
    from wenxin.compat.pir_programs import parameters_as_inputs
    return parameters_as_inputs(graph, os.path.join(folder, "opened.json"))


def assert_read_as_paddle_reads(graph, params, names):
    from wenxin.inference.onnx_convert import paddle_loaded_parameters, read_parameters
    ours, paddles = list(read_parameters(graph, params, names)), list(paddle_loaded_parameters(graph, params, names))
    assert [name for name, _ in ours] == [name for name, _ in paddles] == names
    assert all(array.size for _, array in ours)
    for (name, mine), (_, theirs) in zip(ours, paddles):
        assert (mine.dtype, mine.shape) == (theirs.dtype, theirs.shape), name
        assert mine.tobytes() == theirs.tobytes(), name


def test_a_parameters_file_is_read_a_tensor_at_a_time_as_paddle_reads_it(tmp_path):
    """``read_parameters`` reads the combined file itself, one tensor at a time (Paddle's loader
    held the whole model, about twice the weights while reading): every type, bfloat16's bits as
    Paddle hands them, in the order asked for although the file holds them in sorted order."""
    pytest.importorskip("paddle")
    graph, params = saved_program(str(tmp_path))
    names = program_parameters(graph, str(tmp_path))
    assert sorted(names) == [f"w{9 - index}_{dtype}" for index, dtype in reversed(list(enumerate(
        ["int8", "float32", "bfloat16", "float16", "int64", "float64"])))]
    assert_read_as_paddle_reads(graph, params, names)
    assert_read_as_paddle_reads(graph, params, names[::-1])

    from wenxin.common import paddle_tensor_files
    from wenxin.inference.onnx_convert import read_parameters
    read = []
    original = paddle_tensor_files.read_record
    weights = read_parameters(graph, params, names)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(paddle_tensor_files, "read_record", lambda *a: read.append(a[1]) or original(*a))
        next(weights)
        assert len(read) == 1  # the next tensor is read only when it is asked for
        weights.close()


def test_a_chat_exports_parameters_are_read_as_paddle_reads_them(tmp_path, monkeypatch):
    pytest.importorskip("sentencepiece")
    from test_chat_sft import FOLDER

    from wenxin.model_folders import FolderSettings, export_of_folder
    monkeypatch.setenv("WENXIN_CACHE", str(tmp_path / "cache"))
    export = export_of_folder(FOLDER, FolderSettings(graph_mode="dynamic"))
    graph, params = os.path.join(export, "advance_pair.json"), os.path.join(export, "steps.pdiparams")
    assert_read_as_paddle_reads(graph, params, program_parameters(graph, str(tmp_path)))


def test_a_parameters_file_cut_short_is_refused_and_one_of_other_tensors_is_read_by_paddle(tmp_path, capsys):
    """A file that ends inside a tensor is refused, naming it (the conversion's child says so, and
    the export keeps Paddle's programs); one holding more tensors than the program has parameters
    (not written by Paddle's own export) is read by Paddle's loader whole, which knows their names."""
    pytest.importorskip("paddle")
    from wenxin.inference.onnx_convert import read_parameters
    graph, params = saved_program(str(tmp_path))
    names = program_parameters(graph, str(tmp_path))
    whole = open(params, "rb").read()
    cut = str(tmp_path / "cut.pdiparams")
    with open(cut, "wb") as f:
        f.write(whole[:-5])
    with pytest.raises(SystemExit, match=r"cut.pdiparams: not a whole Paddle parameters file \(tensor 6 \(at byte "
                                         r"\d+\): shape \[3, 2\] of int8 needs 6 bytes, the file has 1 left, "
                                         r"w9_int8 by its place\)"):
        list(read_parameters(graph, cut, names))
    fewer = [name for name in names if "int64" not in name]
    capsys.readouterr()
    read = dict(read_parameters(graph, params, fewer))
    assert f"{params} holds 6 tensors where the program has 5 parameters; read by Paddle whole" in capsys.readouterr().err
    assert sorted(read) == sorted(fewer) and read["w8_float32"].shape == (3, 3)
