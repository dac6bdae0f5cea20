"""``wenxin export --format pt`` (issue 58, point 2): a fine-tuned ERNIE 4.5 chat model leaves as
the ``-PT`` model folder other runtimes load (safetensors shards and their index, config.json,
generation_config.json, the tokenizer's files), LoRA adapters merged, in float32 or bfloat16,
sealed by a manifest; wenxin's own loader reads it back with the logits of the fine-tuned model."""
import json
import os
import struct

import numpy as np
import pytest

pytest.importorskip("sentencepiece")

import paddle  # noqa: E402

from conftest import build, write_config  # noqa: E402
from test_chat_sft import FOLDER, LORA, sft_config, sft_data  # noqa: E402,F401 (the fixture)
from wenxin.cli import main  # noqa: E402
from wenxin.common.errors import CheckpointError, ConfigError  # noqa: E402
from wenxin.common.manifest import MANIFEST_FILE, verify_folder  # noqa: E402
from wenxin.models.ernie45 import Ernie45Config, load_ernie45, paddle_layout_weights  # noqa: E402
from wenxin.models.ernie45_export import pt_layout_weights  # noqa: E402
from wenxin.models.safetensors_shards import INDEX_FILE, shard_plan, write_bfloat16_file  # noqa: E402

IDS = np.array([[1, 23, 45, 67, 89, 101, 7, 300, 2, 5, 9]], dtype="int64")


def lora_checkpoint(tmp_path, data, mode="dynamic"):
    """A LoRA SFT run of four steps; its task file and last checkpoint."""
    config = sft_config(data, str(tmp_path / "out"), mode, max_steps=4, save_model_step=4, is_eval_dev=0)
    config["model"]["lora"] = dict(LORA, dropout=0.0)
    config["model"]["optimization"]["learning_rate"] = 5e-2
    path = write_config(str(tmp_path / "task.json"), config)
    build(config, tmp_path).do_train()
    return path, str(tmp_path / "out" / "checkpoints" / "step_4")


def merged_by_hand(checkpoint):
    """The folder's weights with the checkpoint's adapters added, ``W + A B alpha / rank``, in
    float64: the merge computed apart from wenxin's."""
    from safetensors.numpy import load_file
    adapters = load_file(os.path.join(checkpoint, "model.safetensors"))
    weights = paddle_layout_weights(FOLDER, Ernie45Config.from_folder(FOLDER))
    scale = LORA["alpha"] / LORA["rank"]
    for name in [n for n in adapters if n.endswith("lora_A")]:
        layer = name[:-len(".lora_A")]
        delta = adapters[name].astype(np.float64) @ adapters[f"{layer}.lora_B"].astype(np.float64) * scale
        weights[f"{layer}.weight"] = (weights[f"{layer}.weight"].astype(np.float64) + delta).astype(np.float32)
    return weights


def logits_of(weights):
    model = load_ernie45(FOLDER)
    model.eval()
    state = model.state_dict()
    for name, value in weights.items():
        state[name].set_value(value)
    return model(paddle.to_tensor(IDS)).numpy()


@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_a_lora_model_leaves_as_a_pt_folder_with_its_merged_logits(tmp_path, sft_data, mode, capsys):  # noqa: F811
    task, checkpoint = lora_checkpoint(tmp_path, sft_data, mode)
    assert main(["export", "--param_path", task, "--checkpoint", checkpoint, "--format", "pt", "--dtype", "float32",
                 "--max_shard_mb", "0.05"]) == 0
    folder = capsys.readouterr().out.strip().splitlines()[-1]
    assert folder == os.path.join(checkpoint, "pretrained")
    files = sorted(os.listdir(folder))
    shards = [f for f in files if f.startswith("model-")]
    assert len(shards) > 2 and INDEX_FILE in files  # 50 kB shards of a 500 kB model
    for name in ("config.json", "generation_config.json", "tokenizer.model", "tokenizer_config.json",
                 "special_tokens_map.json", MANIFEST_FILE):
        assert name in files, name
    verify_folder(folder, "export", CheckpointError)
    config = json.load(open(os.path.join(folder, "config.json")))
    source = json.load(open(os.path.join(FOLDER, "config.json")))
    assert config == {**source, "torch_dtype": "float32", "dtype": "float32"}
    expected = merged_by_hand(checkpoint)
    exported = paddle_layout_weights(folder, Ernie45Config.from_folder(folder))
    assert sorted(exported) == sorted(expected) and not any("lora" in name for name in exported)
    for name, value in expected.items():
        np.testing.assert_allclose(exported[name], value, rtol=0, atol=1e-6, err_msg=name)
    changed = [n for n, v in expected.items() if not np.array_equal(v, paddle_layout_weights(
        FOLDER, Ernie45Config.from_folder(FOLDER))[n])]
    assert len(changed) == 2 * 3  # two layers, three adapted projections: the adapters moved them
    model = load_ernie45(folder)
    model.eval()
    np.testing.assert_allclose(model(paddle.to_tensor(IDS)).numpy(), logits_of(expected), rtol=0, atol=1e-5)


def test_bfloat16_export_rounds_each_weight_once_and_loads(tmp_path, sft_data, capsys):  # noqa: F811
    task, checkpoint = lora_checkpoint(tmp_path, sft_data)
    output = str(tmp_path / "bf16")
    assert main(["export", "--param_path", task, "--checkpoint", checkpoint, "--format", "pt",
                 "--output", output]) == 0  # bfloat16 by default, one file
    assert sorted(f for f in os.listdir(output) if f.endswith(".safetensors")) == ["model.safetensors"]
    with open(os.path.join(output, "model.safetensors"), "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    assert {entry["dtype"] for name, entry in header.items() if name != "__metadata__"} == {"BF16"}
    assert json.load(open(os.path.join(output, "config.json")))["torch_dtype"] == "bfloat16"
    expected = merged_by_hand(checkpoint)
    exported = paddle_layout_weights(output, Ernie45Config.from_folder(output))
    for name, value in expected.items():  # the nearest bfloat16: within half a unit in the last place
        np.testing.assert_allclose(exported[name], value, rtol=2 ** -8, atol=1e-30, err_msg=name)
    model = load_ernie45(output)
    model.eval()
    logits, reference = model(paddle.to_tensor(IDS)).numpy(), logits_of(expected)
    assert np.abs(logits - reference).max() < 0.05 * np.abs(reference).max()
    # exporting again replaces the earlier export; a folder that is not one is never replaced
    assert main(["export", "--param_path", task, "--checkpoint", checkpoint, "--format", "pt",
                 "--output", output, "--dtype", "float32"]) == 0
    assert json.load(open(os.path.join(output, "config.json")))["dtype"] == "float32"
    mine = tmp_path / "my_results"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert main(["export", "--param_path", task, "--checkpoint", checkpoint, "--format", "pt",
                 "--output", str(mine)]) == 2
    assert "exists and is not an earlier export" in capsys.readouterr().err
    assert (mine / "notes.txt").read_text() == "keep me"


def test_a_model_without_a_folder_form_and_bad_settings_are_one_error(tmp_path, data_dir, capsys):
    from conftest import task_config
    config = task_config(data_dir, str(tmp_path / "out"), epoch=1, is_eval_test=0, save_model_step=5)
    trainer = build(config, tmp_path)
    trainer.do_train()
    path = write_config(str(tmp_path / "task.json"), config)
    checkpoint = trainer.checkpoints.latest()
    assert main(["export", "--param_path", path, "--checkpoint", checkpoint, "--format", "pt"]) == 2
    assert "model.type BowClassification has no model-folder form" in capsys.readouterr().err
    assert main(["export", "--param_path", path, "--checkpoint", checkpoint, "--format", "pt",
                 "--max_shard_mb", "nan"]) == 2
    assert "--max_shard_mb: a positive number of megabytes" in capsys.readouterr().err
    assert not os.path.exists(os.path.join(checkpoint, "pretrained"))
    with pytest.raises(ConfigError, match="the weight model.norm.weight holds NaN"):
        pt_layout_weights({"model.norm.weight": np.array([1.0, np.nan], dtype=np.float32)})


def test_an_inference_export_that_could_add_no_token_is_refused(tmp_path, sft_data, capsys):  # noqa: F811
    task, checkpoint = lora_checkpoint(tmp_path, sft_data)
    out = str(tmp_path / "inference")
    # prompts of 512 tokens on the fixture's 512 positions: an export that could never answer
    assert main(["export", "--param_path", task, "--checkpoint", checkpoint, "--output", out, "--set",
                 "dataset_reader.train_reader.fields.0.max_seq_len=512"]) == 2
    err = capsys.readouterr().err
    assert "its export could add no token; export with a smaller max_seq_len" in err and not os.path.exists(out)
    assert main(["export", "--param_path", task, "--checkpoint", checkpoint, "--output", out]) == 0


def test_bfloat16_files_read_with_the_safetensors_library(tmp_path):
    import safetensors
    rng = np.random.default_rng(0)
    tensors = {"a.weight": rng.standard_normal((3, 5)).astype(np.float32),
               "b": np.array([1.0, 1.00390625, -3.3, 3.3e38, 0.0], dtype=np.float32)}
    path = str(tmp_path / "x.safetensors")
    write_bfloat16_file(path, tensors)
    read = dict(safetensors.deserialize(open(path, "rb").read()))
    assert sorted(read) == ["a.weight", "b"]
    for name, value in tensors.items():
        assert read[name]["dtype"] in ("BF16", "bfloat16") and list(read[name]["shape"]) == list(value.shape)
        bits = np.frombuffer(bytes(read[name]["data"]), dtype="<u2")
        widened = (bits.astype(np.uint32) << 16).view(np.float32)
        np.testing.assert_allclose(widened.reshape(value.shape), value, rtol=2 ** -8, atol=0)
    np.testing.assert_array_equal(np.frombuffer(bytes(read["b"]["data"]), dtype="<u2"),
                                  [16256, 16256, 49235, 32632, 0])  # 1 + 2**-8 is a tie: to the even 1.0
    with pytest.raises(ConfigError, match="b holds a value beyond bfloat16's range"):
        write_bfloat16_file(path, {"b": np.array([3.4e38], dtype=np.float32)})  # it would round to infinity


def test_shards_fill_in_order_and_a_large_tensor_is_a_shard_of_its_own():
    assert shard_plan({"a": 4, "b": 4, "c": 10, "d": 1, "e": 1}, 8) == [["a", "b"], ["c"], ["d", "e"]]
    assert shard_plan({"a": 4}, 100) == [["a"]]


PT_FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "ernie45_pt_export")


def tensors_of(data):
    """A safetensors file's tensors: name -> (dtype, shape, bytes)."""
    import safetensors
    return {name: (str(t["dtype"]), list(t["shape"]), bytes(t["data"])) for name, t in safetensors.deserialize(data)}


def test_paddleformers_reads_the_export_and_gives_wenxins_logits(tmp_path):
    """The fixture (tests/fixtures/make_pt_export_reference.py): wenxin's export of the tied model
    with seeded LoRA adapters, in float32 shards and one bfloat16 file, and the logits PaddleFormers
    1.2.0 computes from each folder it loaded with ``from_pretrained``."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("maker", os.path.join(os.path.dirname(PT_FIXTURE),
                                                                        "make_pt_export_reference.py"))
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    maker.write_exports(str(tmp_path))  # the export, written again, is the fixture's, file for file
    reference = np.load(os.path.join(PT_FIXTURE, "reference.npz"))
    for dtype in ("float32", "bfloat16"):
        fixture, again = os.path.join(PT_FIXTURE, dtype), str(tmp_path / dtype)
        assert sorted(os.listdir(again)) == sorted(os.listdir(fixture))
        for name in os.listdir(fixture):
            with open(os.path.join(fixture, name), "rb") as f, open(os.path.join(again, name), "rb") as g:
                if name.endswith(".safetensors"):  # the same tensors (the library's header layout may vary)
                    assert tensors_of(f.read()) == tensors_of(g.read()), f"{dtype}/{name}"
                else:
                    assert f.read() == g.read(), f"{dtype}/{name}"
        model = load_ernie45(fixture)
        model.eval()
        logits = model(paddle.to_tensor(reference["input_ids"])).numpy()
        np.testing.assert_allclose(logits, reference[f"{dtype}_logits"], rtol=0, atol=1e-5, err_msg=dtype)
