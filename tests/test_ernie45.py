"""ERNIE 4.5 dense decoders (issue 40, point 1): a checkpoint folder in the layout PaddleFormers
writes (config.json, safetensors shards and their index) loads by path, and its logits equal
PaddleFormers' own (tests/fixtures/make_ernie45_reference.py) in eager and static graph mode;
padding does not change the logits of real tokens; a broken folder is one clear error."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import paddle
import pytest

from conftest import REPO
from wenxin.common.errors import CheckpointError, ConfigError
from wenxin.models.ernie45 import Ernie45Config, load_ernie45

FIXTURES = os.path.join(REPO, "tests", "fixtures", "ernie45")
REFERENCE = np.load(os.path.join(FIXTURES, "reference.npz"))


@pytest.mark.parametrize("variant", ["tied", "untied"])
def test_logits_equal_paddleformers_in_both_graph_modes(variant):
    model = load_ernie45(os.path.join(FIXTURES, variant))
    model.eval()
    ids = paddle.to_tensor(REFERENCE["input_ids"])
    expected = REFERENCE[f"{variant}_logits"]  # [2, 11, 512]
    eager = model(ids).numpy()
    np.testing.assert_allclose(eager, expected, rtol=0, atol=1e-5)
    static = paddle.jit.to_static(model, full_graph=True)
    np.testing.assert_allclose(static(ids).numpy(), expected, rtol=0, atol=1e-5)
    assert (model.lm_head is None) == (variant == "tied")


def test_padding_leaves_the_logits_of_real_tokens_alone():
    model = load_ernie45(os.path.join(FIXTURES, "untied"))
    model.eval()
    ids = REFERENCE["input_ids"]
    short = paddle.to_tensor(ids[:1, :6])
    padded = np.concatenate([ids[:1, :6], np.zeros((1, 5), dtype=ids.dtype)], axis=1)  # right padding
    mask = paddle.to_tensor((np.arange(11) < 6).astype("int64")[None])
    alone = model(short).numpy()
    with_padding = model(paddle.to_tensor(padded), mask).numpy()
    np.testing.assert_allclose(with_padding[:, :6], alone, rtol=0, atol=1e-5)
    # causal: the first six logits of the full sequence are those of its first six tokens
    np.testing.assert_allclose(REFERENCE["untied_logits"][:1, :6], alone, rtol=0, atol=1e-5)


def copy_fixture(tmp_path, variant="untied"):
    folder = tmp_path / variant
    shutil.copytree(os.path.join(FIXTURES, variant), folder)
    return folder


def test_a_broken_folder_is_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="no config.json"):
        load_ernie45(str(tmp_path))
    folder = copy_fixture(tmp_path)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shard = sorted(set(index["weight_map"].values()))[-1]
    (folder / shard).rename(folder / "elsewhere.safetensors")
    with pytest.raises(CheckpointError, match=f"lists shards that are not in the folder: .*{shard}"):
        load_ernie45(str(folder))
    (folder / "elsewhere.safetensors").rename(folder / shard)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))
    with pytest.raises(CheckpointError, match=r"missing \['model.layers.2"):
        load_ernie45(str(folder))
    (folder / "config.json").write_text(json.dumps({**config, "intermediate_size": 80}))
    with pytest.raises(CheckpointError, match=r"gate_proj.weight has shape \[64, 96\].*\[64, 80\]"):
        load_ernie45(str(folder))
    (folder / "config.json").write_text(json.dumps({**config, "num_key_value_heads": 3}))
    with pytest.raises(ConfigError, match="not a multiple of num_key_value_heads 3"):
        load_ernie45(str(folder))
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "llama"}))
    with pytest.raises(ConfigError, match="model_type is 'llama'"):
        load_ernie45(str(folder))
    (folder / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="config.json: not a readable JSON object"):
        load_ernie45(str(folder))


def test_a_single_file_checkpoint_loads_too(tmp_path):
    """Small models come as one model.safetensors without an index."""
    from safetensors.numpy import save_file
    from wenxin.models.ernie45 import read_weights
    source = os.path.join(FIXTURES, "tied")
    folder = tmp_path / "single"
    folder.mkdir()
    shutil.copy(os.path.join(source, "config.json"), folder)
    save_file(read_weights(source), str(folder / "model.safetensors"))
    model = load_ernie45(str(folder))
    model.eval()
    np.testing.assert_allclose(model(paddle.to_tensor(REFERENCE["input_ids"])).numpy(), REFERENCE["tied_logits"],
                               rtol=0, atol=1e-5)


def test_the_config_reads_what_baidus_config_json_holds():
    with open(os.path.join(FIXTURES, "tied", "config.json"), encoding="utf-8") as f:
        values = json.load(f)
    config = Ernie45Config.from_dict(values, "config.json")
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (4, 2, 16)
    assert config.tie_word_embeddings and config.rope_theta == 500000.0
    # head_dim and key/value heads default as the architecture does: hidden / heads, and every head its own
    plain = Ernie45Config.from_dict({k: v for k, v in values.items() if k not in ("head_dim", "num_key_value_heads")},
                                    "config.json")
    assert (plain.head_dim, plain.num_key_value_heads) == (16, 4)


@pytest.mark.parametrize("stride_kernels", [True, False])
def test_bfloat16_checkpoints_load_exactly(tmp_path, stride_kernels):
    """ERNIE 4.5 ships bfloat16 weights. Weights that bfloat16 holds exactly (float32 with the low
    16 bits cleared), written once as bfloat16 and once as float32, give the same logits to the bit,
    with Paddle's stride kernels on or off (a trainer's process turns them off)."""
    from wenxin.models.ernie45 import read_weights
    source = os.path.join(FIXTURES, "untied")
    exact = {name: (value.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
             for name, value in read_weights(source).items()}
    logits = {}
    before = paddle.get_flags(["FLAGS_use_stride_kernel"])["FLAGS_use_stride_kernel"]
    paddle.set_flags({"FLAGS_use_stride_kernel": stride_kernels})
    try:
        for kind in ("bfloat16", "float32"):
            logits[kind] = bfloat16_or_float32(tmp_path / f"{kind}-{stride_kernels}", kind, exact, source)
    finally:
        paddle.set_flags({"FLAGS_use_stride_kernel": before})
    np.testing.assert_array_equal(logits["bfloat16"], logits["float32"])
    assert np.abs(logits["float32"] - REFERENCE["untied_logits"]).max() > 0  # the weights did change


def bfloat16_or_float32(folder, kind, exact, source):
    """The logits of ``exact`` weights saved in ``kind`` in ``folder``."""
    from safetensors.numpy import save_file as save_numpy
    folder.mkdir()
    shutil.copy(os.path.join(source, "config.json"), folder)
    if kind == "bfloat16":
        write_bfloat16(exact, str(folder / "model.safetensors"))
    else:
        save_numpy(exact, str(folder / "model.safetensors"))
    model = load_ernie45(str(folder))
    model.eval()
    return model(paddle.to_tensor(REFERENCE["input_ids"])).numpy()


def write_bfloat16(tensors, path):
    """A bfloat16 safetensors file, written byte by byte as the format describes it (an 8-byte
    little-endian header length, a JSON header of dtypes, shapes and byte ranges, then the data),
    so that the test does not depend on how a Paddle or safetensors release writes bfloat16.
    The values must be exact in bfloat16: each is the high half of its float32."""
    import json as json_module
    header, chunks, offset = {}, [], 0
    for name, value in tensors.items():
        halves = (np.ascontiguousarray(value, dtype=np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
        header[name] = {"dtype": "BF16", "shape": list(value.shape), "data_offsets": [offset, offset + len(halves)]}
        chunks.append(halves)
        offset += len(halves)
    text = json_module.dumps(header).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(chunks))


@pytest.mark.parametrize("variant", ["tied", "untied"])
def test_the_key_value_cache_gives_the_full_forward_logits(variant):
    model = load_ernie45(os.path.join(FIXTURES, variant))
    model.eval()
    ids = REFERENCE["input_ids"][:1, :6]
    rng = np.random.RandomState(3)
    continuation = rng.randint(5, model.config.vocab_size, size=5)
    with paddle.no_grad():
        full = model(paddle.to_tensor(np.concatenate([ids[0], continuation])[None])).numpy()[0]  # [T, V]
        logits, cache, position = model.prefill(paddle.to_tensor(ids))
        assert position.numpy().tolist() == [ids.shape[1]] and list(cache.shape)[:3] == [model.config.num_hidden_layers, 2, 1]
        np.testing.assert_allclose(logits.numpy()[0], full[ids.shape[1] - 1], atol=2e-5, rtol=1e-5)
        rows = 2  # two rows of the same prefix, as a beam search's cache holds them
        cache = paddle.concat([cache, cache], axis=2)
        for step, token in enumerate(continuation):
            positions = paddle.full([rows], ids.shape[1] + step, dtype="int64")
            logits, cache = model.extend(paddle.full([rows], int(token), dtype="int64"), positions, cache)
            for row in range(rows):
                np.testing.assert_allclose(logits.numpy()[row], full[ids.shape[1] + step], atol=2e-5, rtol=1e-5)
        assert cache.shape[4] == ids.shape[1] + len(continuation)


@pytest.mark.parametrize("variant", ["tied", "untied"])
def test_greedy_decoding_over_the_cache_chooses_paddleformers_tokens(variant):
    from wenxin.models.decoding import DecodeSettings, SteppedModel, decode
    model = load_ernie45(os.path.join(FIXTURES, variant))
    model.eval()
    expected = REFERENCE[f"{variant}_greedy"][0].tolist()

    def run(name, inputs):
        with paddle.no_grad():
            outputs = getattr(model, name)(*[paddle.to_tensor(value) for value in inputs.values()])
        return dict(zip(["logits", "cache", "position"], [o.numpy() for o in outputs]))
    prompt = {"ids": REFERENCE["input_ids"][:1, :6]}
    tokens = decode(SteppedModel(run), prompt, DecodeSettings(strategy="greedy", max_new_tokens=len(expected)))
    assert tokens == expected
