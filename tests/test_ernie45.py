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
    with pytest.raises(CheckpointError, match=r"config.json's sizes make a model of 158,144 parameters, but its "
                                              r"weight files hold 127,296 values \(vocab_size 512"):
        load_ernie45(str(folder))  # found before a model of that size is built
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
    moe = {"moe_num_experts": 8, "moe_intermediate_size": 16, "moe_k": 2}
    for change, message in (({"moe_num_experts": 64}, "moe_intermediate_size must be an integer from 1"),
                            ({**moe, "moe_k": 9}, "moe_k 9 is more than moe_num_experts 8"),
                            ({**moe, "moe_num_experts": [8, 8]}, "moe_num_experts / moe_intermediate_size: a list "
                                                                 "per modality is a vision-language model's"),
                            ({**moe, "moe_capacity": [8, 4, 8]}, r"moe_capacity \[8, 4, 8\] can drop tokens"),
                            ({**moe, "scoring_func": "sigmoid"}, "scoring_func 'sigmoid' is not supported"),
                            ({**moe, "moe_gate_act": "sigmoid"}, "moe_gate_act 'sigmoid' is not supported"),
                            ({**moe, "moe_gate": "top2"}, "moe_gate 'top2' is not supported \\('topk', "
                                                          "'top2_fused' are\\)"),
                            ({"hidden_act": "gelu"}, "hidden_act 'gelu' is not supported"),
                            ({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}},
                             r"quantization_config: quantized weights \(fp8\) are not supported"),
                            ({"is_quantized": True}, "is_quantized: quantized weights are not supported"),
                            ({"use_rmsnorm": False}, "use_rmsnorm False is not supported"),
                            ({**moe, "moe_dropout_prob": 0.1}, "moe_dropout_prob 0.1 is not supported"),
                            ({"compression_ratio": 4.0}, "compression_ratio 4.0: positions scaled"),
                            ({"rope_scaling": {"type": "yarn"}}, "rope_scaling: scaled rotary embeddings")):
        with pytest.raises(ConfigError, match=f"config.json: {message}"):
            Ernie45Config.from_dict({**values, **change}, "config.json")
    assert Ernie45Config.from_dict({**values, "compression_ratio": 1.0, "moe_num_experts": None}, "c").hidden_size == 64
    for gate in ("top2_fused", "TOP2_FUSED", "topk"):  # the same softmax top-k routing: ERNIE's TopKGateFused
        assert Ernie45Config.from_dict({**values, **moe, "moe_gate": gate}, "c").moe_k == 2
    routed = Ernie45Config.from_dict({**values, **moe, "moe_capacity": [64, 64, 64], "moe_layer_start_index": 1}, "c")
    assert [routed.is_moe_layer(i) for i in range(2)] == [False, True]  # layer 0 dense, as 21B-A3B's


def erniekit_checkpoint(folder, weights, config):
    """Write ``weights`` (this model's names, Paddle's ``[in, out]`` layout) as ERNIEKit writes a
    checkpoint (``baidu/ERNIE-4.5-*-Paddle``): ``ernie.`` names, query/key/value fused so that
    ERNIEKit's attention recovers them (grouped: reshape to heads and split [heads, kv, kv];
    otherwise reshape to [heads, 3 * head_dim] and split in three), gate and up fused (gate first),
    an untied output layer ``[hidden, vocab]``, and a config.json as ERNIEKit's own."""
    from safetensors.numpy import save_file
    heads, kv, width = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    written = {}
    for name, value in weights.items():
        if ".q_proj." in name or ".k_proj." in name or ".v_proj." in name or ".up_proj." in name:
            continue
        target = "ernie." + name[len("model."):] if name.startswith("model.") else name
        if ".gate_proj." in name:
            up = weights[name.replace("gate_proj", "up_proj")]
            written[target.replace("gate_proj", "up_gate_proj")] = np.concatenate([value, up], axis=-1)
        else:
            written[target] = value.T.copy() if name == "lm_head.weight" else value
    for name, q in weights.items():
        if ".q_proj." not in name:
            continue
        k, v = weights[name.replace("q_proj", "k_proj")], weights[name.replace("q_proj", "v_proj")]
        if heads == kv:  # [in, heads, 3, width]: each head's query, key and value
            fused = np.stack([part.reshape(part.shape[:-1] + (heads, width)) for part in (q, k, v)], axis=-2)
            fused = fused.reshape(q.shape[:-1] + (3 * heads * width,))
        else:
            fused = np.concatenate([q, k, v], axis=-1)
        written["ernie." + name[len("model."):].replace("q_proj", "qkv_proj")] = fused
    os.makedirs(folder, exist_ok=True)
    save_file({n: np.ascontiguousarray(v) for n, v in written.items()}, os.path.join(folder, "model.safetensors"),
              metadata={"format": "np"})
    erniekit_config = {k: v for k, v in config.items() if k not in ("torch_dtype", "paddleformers_version")}
    erniekit_config.update(dtype="float32", fuse_attn_ffn=True, use_rmsnorm=True, fuse_swiglu=False)
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump(erniekit_config, f)
    return written


@pytest.mark.parametrize("variant", ["tied", "untied"])
def test_erniekits_paddle_checkpoints_give_paddleformers_logits(tmp_path, variant):
    """The same model in ERNIEKit's layout (the -Paddle folders ERNIEKit's users download)."""
    from wenxin.models.ernie45 import paddle_layout_weights
    source = os.path.join(FIXTURES, variant)
    with open(os.path.join(source, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    folder = str(tmp_path / "paddle")
    written = erniekit_checkpoint(folder, paddle_layout_weights(source, Ernie45Config.from_folder(source)), config)
    assert "ernie.layers.0.self_attn.qkv_proj.weight" in written and "ernie.layers.1.mlp.up_gate_proj.weight" in written
    model = load_ernie45(folder)
    model.eval()
    np.testing.assert_allclose(model(paddle.to_tensor(REFERENCE["input_ids"])).numpy(), REFERENCE[f"{variant}_logits"],
                               rtol=0, atol=1e-5)


def test_erniekit_layout_without_grouped_heads_splits_each_heads_query_key_and_value(tmp_path):
    """As many key/value heads as query heads: ERNIEKit's fused projection holds each head's
    query, key and value in turn; the model read from it computes what the model it was written
    from does."""
    from wenxin.models.ernie45 import Ernie45ForCausalLM, paddle_layout_weights
    with open(os.path.join(FIXTURES, "untied", "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    config["num_key_value_heads"] = config["num_attention_heads"]
    paddle.seed(3)
    original = Ernie45ForCausalLM(Ernie45Config.from_dict(config, "config.json"))
    original.eval()
    state = {name: value.numpy() for name, value in original.state_dict().items()}
    erniekit_checkpoint(str(tmp_path / "paddle"), state, config)
    read = paddle_layout_weights(str(tmp_path / "paddle"), Ernie45Config.from_folder(str(tmp_path / "paddle")))
    assert sorted(read) == sorted(state)
    for name, value in state.items():
        np.testing.assert_array_equal(read[name], value, err_msg=name)
    model = load_ernie45(str(tmp_path / "paddle"))
    model.eval()
    ids = paddle.to_tensor(REFERENCE["input_ids"])
    np.testing.assert_array_equal(model(ids).numpy(), original(ids).numpy())


def test_an_erniekit_checkpoint_that_does_not_fit_its_config_names_the_weight(tmp_path):
    from wenxin.models.ernie45 import paddle_layout_weights
    source = os.path.join(FIXTURES, "untied")
    with open(os.path.join(source, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    folder = str(tmp_path / "paddle")
    erniekit_checkpoint(folder, paddle_layout_weights(source, Ernie45Config.from_folder(source)), config)
    config["num_key_value_heads"] = 1
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    with pytest.raises(CheckpointError, match=r"ernie\.layers\.0\.self_attn\.qkv_proj\.weight has shape \[64, 128\]; "
                                              r"config.json's heads \(4 query, 1 key/value, 16 wide\) make it 96 wide"):
        load_ernie45(folder)


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
