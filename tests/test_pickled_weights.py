"""Pickled weight files load without running code from them (``wenxin.common.pickled_weights``).

Real files (PaddleNLP 2.8.1's ``model_state.pdparams``, and what ``paddle.save`` and
``paddle.static.save`` write, as ERNIE-kit did) load bit for bit as ``paddle.load`` reads them;
payloads beside real weights are refused with one error naming the file and the global, and never
run, on every path a user can hand wenxin a pickle: ``pre_train_model``, a checkpoint folder
holding only ``model.pdparams`` (``evaluate`` / ``export --checkpoint``) and ``wenxin convert``."""
from __future__ import annotations

import builtins
import codecs
import os
import pickle
import shutil

import numpy as np
import paddle
import pytest
from safetensors.numpy import load_file

from conftest import assert_one_error_block, build, task_config, write_config
from wenxin.cli import main
from wenxin.common.errors import CheckpointError
from wenxin.common.pickled_weights import load_pickled_weights

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "ernie")
PADDLENLP_FILE = os.path.join(FIXTURES, "paddlenlp", "model_state.pdparams")


def _paddle_load(path):
    """``paddle.load``'s reading of ``path``. The PaddleNLP fixture was pickled under numpy 2
    (``numpy._core``), which numpy 1.x cannot unpickle (wenxin's loader can): there its
    safetensors copy, the same 56 arrays, stands in."""
    if path == PADDLENLP_FILE and not hasattr(np, "_core"):
        return load_file(os.path.join(FIXTURES, "paddlenlp_safetensors", "model.safetensors"))
    return paddle.load(path, return_numpy=True)


def _assert_same_as_paddle(path):
    ours = load_pickled_weights(path)
    reference = _paddle_load(path)
    reference.pop("StructuredToParameterName@@", None)
    assert sorted(ours) == sorted(reference)
    for name, value in reference.items():
        value = value[1] if isinstance(value, tuple) else np.asarray(value)
        assert ours[name].dtype == value.dtype and ours[name].shape == value.shape, name
        assert ours[name].tobytes() == value.tobytes(), name
    return ours


def test_paddlenlp_281_weights_load_bit_for_bit():
    ours = _assert_same_as_paddle(PADDLENLP_FILE)
    assert len(ours) == 56 and ours["embeddings.word_embeddings.weight"].shape == (120, 48)


def _weights(seed=0):
    rng = np.random.default_rng(seed)
    return {"encoder.fc.weight": rng.standard_normal((5, 7)).astype("float32"),
            "encoder.fc.bias": rng.standard_normal(7).astype("float64"),
            "embedding.ids": rng.integers(0, 9, (3, 2)).astype("int64"),
            "norm.half": rng.standard_normal(4).astype("float16")}


def _paddle_save_tensors(path, protocol):
    paddle.save({k: paddle.to_tensor(v) for k, v in _weights().items()}, path, protocol=protocol)


def _layer_state_dict(path, protocol):
    paddle.seed(1)
    layer = paddle.nn.Sequential(paddle.nn.Linear(4, 3), paddle.nn.LayerNorm(3))
    paddle.save(layer.state_dict(), path, protocol=protocol)


def _static_save(path, protocol):  # ERNIE-kit's static trainer: paddle.static.save of a program
    paddle.enable_static()
    try:
        main_program, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main_program, startup):
            paddle.static.nn.fc(paddle.static.data("x", [None, 4]), 3)
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        paddle.static.save(main_program, path[:-len(".pdparams")], protocol=protocol)
    finally:
        paddle.disable_static()


def _dense_tensors(path, protocol):  # Paddle's own reduction of a DenseTensor: eval('data', {'data': array})
    from paddle.base import core
    from paddle.framework.io import _pickle_save
    values = {}
    for name, value in _weights().items():
        tensor = core.DenseTensor()
        tensor.set(value, paddle.CPUPlace())
        values[name] = tensor
    with open(path, "wb") as f:
        _pickle_save(values, f, protocol)


def _split_large_parameter(path, protocol):  # the layout of Paddle's protocol 2/3 files for params over 1 GiB
    whole = np.arange(24, dtype="float32").reshape(4, 6)
    flat = whole.ravel()
    saved = {"small": np.ones(2, "float32"), "big@@.0": flat[:10], "big@@.1": flat[10:],
             "UnpackBigParamInfor@@": {"big": {"OriginShape": (4, 6), "slices": ["big@@.0", "big@@.1"]}}}
    with open(path, "wb") as f:
        pickle.dump(saved, f, protocol=protocol)


WRITERS = {"paddle.save tensors": _paddle_save_tensors, "layer state_dict": _layer_state_dict,
           "paddle.static.save": _static_save, "DenseTensor": _dense_tensors, "split parameter": _split_large_parameter}


@pytest.mark.parametrize("protocol", [2, 3, 4])
@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_files_paddle_writes_load_as_paddle_load_reads_them(tmp_path, writer, protocol):
    path = str(tmp_path / "w.pdparams")
    WRITERS[writer](path, protocol)
    ours = _assert_same_as_paddle(path)
    if writer == "split parameter":
        np.testing.assert_array_equal(ours["big"], np.arange(24, dtype="float32").reshape(4, 6))


class _Call:
    """Unpickling this calls ``function(*args)``: the attack of a crafted pickle."""

    def __init__(self, function, *args):
        self.function, self.args = function, args

    def __reduce__(self):
        return (self.function, self.args)


def _payloads(marker):
    command = f"touch {marker}"
    return {
        "os.system": (_Call(os.system, command), "posix.system"),
        "eval of code": (_Call(builtins.eval, f"__import__('os').system({command!r})"), "builtins.eval"),
        "exec": (_Call(builtins.exec, f"open({marker!r}, 'w')"), "builtins.exec"),
        "open": (_Call(builtins.open, marker, "w"), "io.open"),
        "codecs with other arguments": (_Call(codecs.encode, b"x", "zlib"), "_codecs.encode"),
        "numpy function": (_Call(np.save, marker, np.zeros(1)), "numpy.save"),
        "payload in a tensor tuple": (_Call(tuple, [("w", _Call(os.system, command))]), "posix.system"),
    }


@pytest.mark.parametrize("name", sorted(_payloads("m")))
def test_payloads_beside_real_weights_never_run(tmp_path, name):
    marker = str(tmp_path / "pwned")
    payload, refused = _payloads(marker)[name]
    path = str(tmp_path / "model_state.pdparams")
    with open(path, "wb") as f:
        pickle.dump({**_weights(), "zz": payload}, f, protocol=4)
    with pytest.raises(CheckpointError) as info:
        load_pickled_weights(path, "pretrained params file")
    message = str(info.value)
    assert message.startswith(f"pretrained params file refused: {path} names ") and refused in message, message
    assert not os.path.exists(marker)


def test_non_weights_content_is_one_error(tmp_path):
    cases = {"list": [1, 2], "object array": {"w": np.array(["a", None], dtype=object)},
             "nested dict": {"w": {"x": np.zeros(1)}}, "truncated": None}
    for name, value in cases.items():
        path = str(tmp_path / f"{name}.pdparams")
        if value is None:
            shutil.copy(PADDLENLP_FILE, path)
            with open(path, "r+b") as f:
                f.truncate(os.path.getsize(path) // 2)
        else:
            with open(path, "wb") as f:
                pickle.dump(value, f)
        with pytest.raises(CheckpointError, match=path):
            load_pickled_weights(path)


def _paddlenlp_folder_with_payload(tmp_path, marker):
    """PaddleNLP's real weights, re-saved with one extra entry that runs a command."""
    folder = tmp_path / "ernie-tiny"
    shutil.copytree(os.path.join(FIXTURES, "paddlenlp"), folder)
    weights = _paddle_load(PADDLENLP_FILE)
    with open(folder / "model_state.pdparams", "wb") as f:
        pickle.dump({**weights, "zz": _Call(os.system, f"touch {marker}")}, f, protocol=4)
    return folder


def test_a_pretrained_model_with_a_payload_is_refused_and_never_runs(tmp_path, data_dir):
    marker = str(tmp_path / "pwned")
    folder = _paddlenlp_folder_with_payload(tmp_path, marker)
    for key in ("pre_train_model", "load_parameters"):
        config = task_config(data_dir, str(tmp_path / key), **{key: str(folder)})
        with pytest.raises(CheckpointError, match=f"refused: {folder / 'model_state.pdparams'} names posix.system"):
            build(config, tmp_path)
    assert not os.path.exists(marker)


def test_evaluate_and_export_of_a_pickled_checkpoint_refuse_a_payload(tmp_path, data_dir, capsys):
    trainer = build(task_config(data_dir, str(tmp_path / "out"), max_steps=2, is_eval_dev=0, is_eval_test=0),
                    tmp_path)
    weights = {name: value.numpy() for name, value in trainer.model.state_dict().items()}
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir(), bad.mkdir()
    paddle.save(weights, str(good / "model.pdparams"))
    marker = str(tmp_path / "pwned")
    with open(bad / "model.pdparams", "wb") as f:
        pickle.dump({**weights, "zz": _Call(os.system, f"touch {marker}")}, f, protocol=2)
    task = write_config(str(tmp_path / "task.json"), task_config(data_dir, str(tmp_path / "out")))
    assert main(["evaluate", "--param_path", task, "--checkpoint", str(good), "--reader", "dev"]) == 0
    capsys.readouterr()
    for command in (["evaluate", "--reader", "dev"], ["export", "--output", str(tmp_path / "exported")]):
        code = main([command[0], "--param_path", task, "--checkpoint", str(bad), *command[1:]])
        assert_one_error_block(code, *capsys.readouterr(), [str(bad / "model.pdparams"), "posix.system"])
        assert code == 4
    assert not os.path.exists(marker) and not os.path.exists(tmp_path / "exported")


def test_convert_writes_safetensors_that_load_the_same(tmp_path, capsys):
    folder = tmp_path / "ernie-tiny"
    shutil.copytree(os.path.join(FIXTURES, "paddlenlp"), folder)
    assert main(["convert", str(folder)]) == 0
    out, err = capsys.readouterr()
    converted = folder / "model.safetensors"
    assert out.strip() == str(converted) and "56 parameters" in err
    reference = _paddle_load(PADDLENLP_FILE)
    arrays = load_file(str(converted))
    assert sorted(arrays) == sorted(reference)
    for name, value in reference.items():
        assert arrays[name].dtype == value.dtype and arrays[name].tobytes() == value.tobytes()
    assert main(["convert", str(folder)]) == 4  # the folder now loads model.safetensors first
    assert "already safetensors" in capsys.readouterr().err

    single = tmp_path / "erniekit_dir"
    single.mkdir()
    paddle.save({k: paddle.to_tensor(v) for k, v in _weights().items()}, str(single / "params"))
    assert main(["convert", str(single / "params"), "-o", str(tmp_path / "kit.safetensors")]) == 0
    arrays = load_file(str(tmp_path / "kit.safetensors"))
    for name, value in _weights().items():
        assert arrays[name].tobytes() == value.tobytes()
    capsys.readouterr()
    assert main(["convert", str(single / "params"), "-o", str(tmp_path / "kit.safetensors")]) == 4
    assert "exists; it is kept" in capsys.readouterr().err

    erniekit_folder = tmp_path / "ernie_kit_tensors"
    shutil.copytree(os.path.join(FIXTURES, "erniekit"), erniekit_folder)
    assert main(["convert", str(erniekit_folder)]) == 0
    assert len(load_file(str(erniekit_folder / "model.safetensors"))) == 56


def test_convert_refuses_a_payload_and_writes_nothing(tmp_path, capsys):
    marker = str(tmp_path / "pwned")
    folder = _paddlenlp_folder_with_payload(tmp_path, marker)
    code = main(["convert", str(folder)])
    assert_one_error_block(code, *capsys.readouterr(), [str(folder / "model_state.pdparams"), "posix.system"])
    assert not os.path.exists(marker) and sorted(os.listdir(folder)) == ["config.json", "model_state.pdparams"]


def test_pretrained_weights_of_another_dtype(tmp_path, data_dir):
    trainer = build(task_config(data_dir, str(tmp_path / "out"), max_steps=1), tmp_path)
    weights = {name: value.numpy() for name, value in trainer.model.state_dict().items()}
    wide = str(tmp_path / "float64.pdparams")
    paddle.save({name: value.astype("float64") for name, value in weights.items()}, wide)
    report = trainer.load_pretrained(wide)
    assert len(report.cast) == len(weights) and "float64 -> float32" in report.summary()
    for name, value in trainer.model.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), weights[name].astype("float64").astype("float32"))
    ints = str(tmp_path / "int64.pdparams")
    paddle.save({name: np.zeros(value.shape, "int64") for name, value in weights.items()}, ints)
    with pytest.raises(CheckpointError, match=f"{ints}: .* holds int64 values where the model has float32"):
        trainer.load_pretrained(ints)


def _tensor_file(lod_size):
    import struct
    desc = bytes([0x08, 5, 0x10, 2])  # TensorDesc: float32, dims [2]
    return (struct.pack("<IQQ", 0, 1, lod_size) + struct.pack("<Ii", 0, len(desc)) + desc
            + np.ones(2, "float32").tobytes())


def test_hostile_erniekit_params_folders_are_one_error(tmp_path):
    from wenxin.controller.parameters import load_pretrained_params
    from wenxin.translation import pretrained
    folder = tmp_path / "ernie_dir" / "params"
    shutil.copytree(os.path.join(FIXTURES, "erniekit", "params"), folder)
    names = ["ernie." + n for n in pretrained.to_wenxin_names(pretrained.read_tensor_folder(str(folder)))[0]]
    (folder / "word_embedding").write_bytes(_tensor_file(2**63 + 5))
    with pytest.raises(CheckpointError, match=f"{folder / 'word_embedding'}: not a Paddle tensor file .*LoD level"):
        load_pretrained_params(str(folder.parent), names)
    shutil.copy(os.path.join(FIXTURES, "erniekit", "params", "word_embedding"), folder / "word_embedding")
    (folder / "notes").mkdir()
    with pytest.raises(CheckpointError, match=f"{folder / 'notes'}: not a file; an ERNIE-kit params folder"):
        load_pretrained_params(str(folder.parent), names)
    os.rmdir(folder / "notes")
    (folder / "README.txt").write_text("downloaded from the model hub")
    with pytest.raises(CheckpointError, match=f"{folder / 'README.txt'}: not a Paddle tensor file"):
        load_pretrained_params(str(folder.parent), names)
