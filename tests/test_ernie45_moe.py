"""ERNIE 4.5 mixture-of-experts decoders (issue 58, point 1): a folder PaddleFormers wrote in the
``-PT`` layout (tests/fixtures/make_ernie45_moe_reference.py) loads by path, and its logits and
greedy tokens equal those transformers' own implementation computes from it, in eager and static
graph mode; the routing is softmax top-k with the correction bias choosing and not weighing; MoE
settings wenxin does not compute are refused by name."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import paddle
import pytest

from conftest import REPO
from wenxin.common.errors import CheckpointError
from wenxin.models.ernie45 import Ernie45Config, load_ernie45
from wenxin.models.ernie45_moe import Ernie45SparseMoE

FIXTURES = os.path.join(REPO, "tests", "fixtures", "ernie45_moe")
REFERENCE = np.load(os.path.join(FIXTURES, "reference.npz"))


@pytest.mark.parametrize("variant", ["shared", "untied"])
def test_logits_equal_transformers_on_paddleformers_weights_in_both_graph_modes(variant):
    model = load_ernie45(os.path.join(FIXTURES, variant))
    model.eval()
    ids = paddle.to_tensor(REFERENCE["input_ids"])
    expected = REFERENCE[f"{variant}_logits"]  # [2, 11, 512]
    np.testing.assert_allclose(model(ids).numpy(), expected, rtol=0, atol=2e-5)
    static = paddle.jit.to_static(model, full_graph=True)
    np.testing.assert_allclose(static(ids).numpy(), expected, rtol=0, atol=2e-5)
    config = Ernie45Config.from_folder(os.path.join(FIXTURES, variant))
    kinds = [type(layer.mlp).__name__ for layer in model.model.layers]
    assert kinds == ["Ernie45SparseMoE" if config.is_moe_layer(i) else "Ernie45MLP" for i in range(len(kinds))]
    assert "Ernie45MLP" in kinds and "Ernie45SparseMoE" in kinds  # dense and MoE layers mixed


@pytest.mark.parametrize("variant", ["shared", "untied"])
def test_greedy_decoding_over_the_cache_chooses_transformers_tokens(variant):
    from wenxin.models.decoding import DecodeSettings, SteppedModel, decode
    model = load_ernie45(os.path.join(FIXTURES, variant))
    model.eval()
    expected = REFERENCE[f"{variant}_greedy"].tolist()

    def run(name, inputs):
        with paddle.no_grad():
            outputs = getattr(model, name)(*[paddle.to_tensor(value) for value in inputs.values()])
        return dict(zip(["logits", "cache", "position"], [o.numpy() for o in outputs]))
    prompt = {"ids": REFERENCE["input_ids"][:1, :6]}
    assert decode(SteppedModel(run), prompt, DecodeSettings(strategy="greedy", max_new_tokens=len(expected))) == expected


def test_routing_by_hand():
    """Each token's output is the sum over its k chosen experts (largest probability plus bias)
    of probability / sum of the chosen probabilities times the expert's output, plus the shared
    expert's: computed here token by token with numpy."""
    config = Ernie45Config.from_folder(os.path.join(FIXTURES, "shared"))
    paddle.seed(3)
    layer = Ernie45SparseMoE(config)
    rng = np.random.default_rng(3)
    bias = rng.normal(0, 0.05, (1, config.moe_num_experts)).astype("float32")
    layer.moe_statics.e_score_correction_bias.set_value(bias)
    x = rng.normal(0, 1, (2, 5, config.hidden_size)).astype("float32")
    with paddle.no_grad():
        out = layer(paddle.to_tensor(x)).numpy()

    def swiglu(module, v):
        gate, up, down = (np.asarray(module.gate_proj.weight), np.asarray(module.up_proj.weight),
                          np.asarray(module.down_proj.weight))
        g = v @ gate
        return ((g / (1 + np.exp(-g))) * (v @ up)) @ down
    gate = np.asarray(layer.gate.weight, dtype=np.float64)
    for token in x.reshape(-1, config.hidden_size):
        scores = token @ gate
        probabilities = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
        chosen = np.argsort(-(probabilities + bias[0]))[:config.moe_k]
        weights = probabilities[chosen] / max(probabilities[chosen].sum(), config.moe_norm_min)
        expected = sum(w * swiglu(layer.experts[e], token) for w, e in zip(weights, chosen))
        expected = expected + swiglu(layer.shared_experts, token)
        index = np.flatnonzero((x.reshape(-1, config.hidden_size) == token).all(axis=1))[0]
        np.testing.assert_allclose(out.reshape(-1, config.hidden_size)[index], expected, rtol=1e-4, atol=1e-5)
    # the bias chose: without it, some token takes other experts
    with paddle.no_grad():
        chosen_with, _ = layer.route(paddle.to_tensor(x.reshape(-1, config.hidden_size)))
        layer.moe_statics.e_score_correction_bias.set_value(np.zeros_like(bias))
        chosen_without, _ = layer.route(paddle.to_tensor(x.reshape(-1, config.hidden_size)))
    assert (np.sort(chosen_with.numpy(), axis=1) != np.sort(chosen_without.numpy(), axis=1)).any()


def test_a_model_trained_without_the_correction_bias_loads_without_it(tmp_path):
    """``moe_use_aux_free: false`` (ERNIE's default for its own configs): the folder holds no
    ``moe_statics``, and the model routes as one whose bias is zero."""
    from safetensors.numpy import load_file, save_file
    folder = str(tmp_path / "no-bias")
    shutil.copytree(MOE, folder)
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump({**config, "moe_use_aux_free": False}, f)
    with open(os.path.join(folder, "model.safetensors.index.json"), encoding="utf-8") as f:
        index = json.load(f)
    for file in set(index["weight_map"].values()):
        path = os.path.join(folder, file)
        save_file({n: v for n, v in load_file(path).items() if "moe_statics" not in n}, path)
    index["weight_map"] = {n: v for n, v in index["weight_map"].items() if "moe_statics" not in n}
    with open(os.path.join(folder, "model.safetensors.index.json"), "w", encoding="utf-8") as f:
        json.dump(index, f)
    without = load_ernie45(folder)
    assert not any("moe_statics" in name for name, _ in without.named_parameters())
    zeroed = load_ernie45(MOE)
    for layer in zeroed.model.layers:
        if isinstance(layer.mlp, Ernie45SparseMoE):
            assert float(layer.mlp.moe_statics.e_score_correction_bias.abs().max()) > 0  # the fixture's is not zero
            layer.mlp.moe_statics.e_score_correction_bias.set_value(
                paddle.zeros_like(layer.mlp.moe_statics.e_score_correction_bias))
    without.eval()
    zeroed.eval()
    ids = paddle.to_tensor(REFERENCE["input_ids"])
    np.testing.assert_allclose(without(ids).numpy(), zeroed(ids).numpy(), rtol=0, atol=1e-6)


def test_moe_layer_interval_and_end_choose_the_layers():
    values = json.load(open(os.path.join(FIXTURES, "shared", "config.json")))
    config = Ernie45Config.from_dict({**values, "num_hidden_layers": 8, "moe_layer_start_index": 1,
                                      "moe_layer_end_index": 6, "moe_layer_interval": 2}, "c")
    assert [i for i in range(8) if config.is_moe_layer(i)] == [1, 3, 5]  # (i + 1) % 2 == 0, from 1 to 6
    last = Ernie45Config.from_dict({**values, "num_hidden_layers": 3, "moe_layer_end_index": -1}, "c")
    assert [i for i in range(3) if last.is_moe_layer(i)] == [1, 2]


def test_a_folder_without_an_expert_is_one_error_naming_it(tmp_path):
    folder = tmp_path / "shared"
    shutil.copytree(os.path.join(FIXTURES, "shared"), folder)
    from safetensors.numpy import load_file, save_file
    shard = folder / "model-00001-of-00001.safetensors"
    weights = load_file(str(shard))
    del weights["model.layers.2.mlp.experts.5.up_proj.weight"]
    save_file(weights, str(shard))
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    del index["weight_map"]["model.layers.2.mlp.experts.5.up_proj.weight"]
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=r"missing \['model.layers.2.mlp.experts.5.up_proj.weight'\]"):
        load_ernie45(str(folder))


# ---- training a MoE decoder from a task file --------------------------------------------------
MOE = os.path.join(FIXTURES, "shared")


def moe_sft_config(data_dir, output, mode="dynamic", lora=None, **trainer):
    from test_chat_sft import sft_config
    config = sft_config(data_dir, output, mode, **trainer)
    for reader in config["dataset_reader"].values():
        reader["fields"][0]["model_dir"] = MOE
    config["model"]["model_dir"] = MOE
    if lora is not None:
        config["model"]["lora"] = lora
    return config


@pytest.fixture
def moe_data(tmp_path):
    from conftest import write_jsonl
    from test_chat_sft import conversations
    folder = str(tmp_path / "data")
    write_jsonl(os.path.join(folder, "train.jsonl"), conversations(24, seed=1))
    write_jsonl(os.path.join(folder, "dev.jsonl"), conversations(6, seed=2))
    return folder


EXPERT_LORA = {"rank": 4, "alpha": 8.0, "target_modules": ["q_proj", "v_proj", "gate_proj", "up_proj", "down_proj"]}


@pytest.mark.parametrize("experts,adapted", [("all", {"attention", "dense", "routed", "shared"}),
                                             ("shared", {"attention", "dense", "shared"}),
                                             ("none", {"attention", "dense"})])
def test_lora_on_the_experts_is_a_task_file_choice(tmp_path, moe_data, experts, adapted):
    from conftest import build
    trainer = build(moe_sft_config(moe_data, str(tmp_path / "out"), lora={**EXPERT_LORA, "experts": experts},
                                   max_steps=1, is_eval_dev=0), tmp_path)

    def kind(name):
        return ("routed" if ".experts." in name else "shared" if "shared_experts" in name else
                "attention" if "self_attn" in name else "dense")
    assert {kind(name) for name in trainer.model.adapters} == adapted


def test_lora_sft_trains_a_moe_decoder_with_the_same_losses_in_both_graph_modes(tmp_path, moe_data):
    from conftest import losses_in_both_modes

    def config(mode, out):
        c = moe_sft_config(moe_data, out, mode, lora=dict(EXPERT_LORA), max_steps=6, is_eval_dev=0)
        c["model"]["optimization"]["learning_rate"] = 2e-2
        return c
    losses = losses_in_both_modes(tmp_path, config)
    assert len(losses) == 6 and np.mean([losses[s] for s in (5, 6)]) < np.mean([losses[s] for s in (1, 2)])


def test_lora_sft_of_a_moe_decoder_resumes_exactly_after_sigkill(tmp_path, moe_data):
    import random

    from conftest import resumed_run_matches_reference
    steps = 12

    def config(out):
        c = moe_sft_config(moe_data, out, lora=dict(EXPERT_LORA), max_steps=steps, epoch=10, save_model_step=3,
                           keep_checkpoint_max=2, is_eval_dev=0, resume="auto")
        c["model"]["optimization"]["learning_rate"] = 2e-2
        return c
    params = resumed_run_matches_reference(tmp_path, config, steps, random.Random(58), runs=2)
    assert any(".experts." in name for name in params) and all(name.endswith(("lora_A", "lora_B"))
                                                               for name in params)


def test_a_moe_chat_model_exports_answers_as_it_decodes_and_leaves_as_a_pt_folder(tmp_path):
    """Generation and serving as for the dense decoder: the exported step functions (static
    programs, routing inside) answer what the trained model answers by full forward passes; the
    ``-PT`` export, LoRA merged into the experts, loads with the merged model's logits."""
    from conftest import build
    from test_chat_generate import QA, greedy_answer, memorizing_config
    from wenxin.inference.predictor import Predictor
    config = memorizing_config(tmp_path, "dynamic", lora=True, steps=12)
    for reader in config["dataset_reader"].values():
        reader["fields"][0]["model_dir"] = MOE
    config["model"].update(model_dir=MOE, lora=dict(EXPERT_LORA))
    trainer = build(config, tmp_path)
    trainer.do_train()
    predictor = Predictor(trainer.export_inference(str(tmp_path / "export")))
    answers = [result["text"] for result in predictor.predict([[q] for q, _ in QA])]
    assert answers == [greedy_answer(trainer, q) for q, _ in QA]
    folder = str(tmp_path / "pt")
    os.makedirs(folder)
    trainer.model.write_pretrained_folder(folder, trainer.engine.model_state_dict(), "float32", 10**9)
    exported = load_ernie45(folder)
    exported.eval()
    ids = paddle.to_tensor(REFERENCE["input_ids"])
    with paddle.no_grad():
        from wenxin.models.lora import merged_adapters
        with merged_adapters(trainer.model):
            expected = paddle.matmul(trainer.model.model(ids), trainer.model.output_weight(), transpose_y=True)
        np.testing.assert_allclose(exported(ids).numpy(), expected.numpy(), rtol=0, atol=2e-5)


def test_erniekits_paddle_layout_of_a_moe_decoder_gives_the_same_logits(tmp_path):
    """The same MoE model as ERNIEKit lays out its -Paddle checkpoints: ``ernie.`` names, query,
    key and value fused, each expert's and the shared experts' gate and up fused, the router
    ``[hidden, experts]``."""
    from test_ernie45 import erniekit_checkpoint
    from wenxin.models.ernie45 import paddle_layout_weights
    with open(os.path.join(MOE, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    folder = str(tmp_path / "paddle")
    written = erniekit_checkpoint(folder, paddle_layout_weights(MOE, Ernie45Config.from_folder(MOE)), config)
    assert {"ernie.layers.1.mlp.experts.3.up_gate_proj.weight", "ernie.layers.1.mlp.shared_experts.up_gate_proj.weight",
            "ernie.layers.1.mlp.gate.weight", "ernie.layers.0.mlp.up_gate_proj.weight"} <= set(written)
    model = load_ernie45(folder)
    model.eval()
    np.testing.assert_allclose(model(paddle.to_tensor(REFERENCE["input_ids"])).numpy(), REFERENCE["shared_logits"],
                               rtol=0, atol=2e-5)
    fused = written["ernie.layers.1.mlp.experts.3.up_gate_proj.weight"]
    broken = {**written, "ernie.layers.1.mlp.experts.3.up_gate_proj.weight": np.concatenate([fused, fused[:, :2]], 1)}
    from safetensors.numpy import save_file
    save_file({n: np.ascontiguousarray(v) for n, v in broken.items()}, os.path.join(folder, "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"experts.3.up_gate_proj.weight has shape \[64, 66\]; config.json's "
                                              r"moe_intermediate_size makes it 64 wide"):
        load_ernie45(folder)


def test_dpo_of_a_moe_decoder_starts_at_log_2(tmp_path):
    from conftest import build
    from test_dpo import dpo_config, first_pairs, pairs
    from conftest import write_jsonl
    data = str(tmp_path / "data")
    write_jsonl(os.path.join(data, "train.jsonl"), pairs(8, seed=1))
    write_jsonl(os.path.join(data, "dev.jsonl"), pairs(4, seed=2))
    config = dpo_config(data, str(tmp_path / "out"), lora=True)
    for reader in config["dataset_reader"].values():
        reader["fields"][0]["model_dir"] = MOE
    config["model"].update(model_dir=MOE, lora=dict(EXPERT_LORA))
    trainer = build(config, tmp_path)
    _, batch = first_pairs(trainer, 4)
    with paddle.no_grad():
        assert float(trainer.model(batch, "training")["loss"]) == pytest.approx(np.log(2), abs=1e-6)


@pytest.mark.parametrize("layout", ["paddle", "pt"])
def test_a_stray_tensor_in_a_moe_folder_is_one_error_naming_it(tmp_path, layout):
    """A tensor the decoder has no place for is refused, not dropped unseen (issue 67): in
    ERNIEKit's layout a ``model.`` name beside the ``ernie.`` ones (it would be taken as is, even
    over a converted weight), in the -PT layout an unknown name; by the loader and by training."""
    from safetensors.numpy import load_file, save_file
    from conftest import build, write_jsonl
    from test_chat_sft import conversations, sft_config
    from test_ernie45 import erniekit_checkpoint
    from wenxin.models.ernie45 import paddle_layout_weights
    folder = str(tmp_path / layout)
    if layout == "paddle":
        with open(os.path.join(MOE, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
        erniekit_checkpoint(folder, paddle_layout_weights(MOE, Ernie45Config.from_folder(MOE)), config)
        for name in os.listdir(MOE):
            if name.startswith("tokenizer") or name in ("special_tokens_map.json", "generation_config.json"):
                shutil.copy(os.path.join(MOE, name), folder)
        stray, expected = "model.layers.0.self_attn.q_proj.weight", "is named as the -PT layout names weights"
    else:
        shutil.copytree(MOE, folder)
        stray, expected = "model.layers.1.mlp.experts.9.gate_proj.weight", "not used"
    shards = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
    path = os.path.join(folder, shards[0])
    tensors = load_file(path)
    tensors[stray] = np.zeros((64, 64), dtype=np.float32)
    save_file(tensors, path, metadata={"format": "pt"})
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            written = json.load(f)
        written["weight_map"][stray] = shards[0]
        with open(index, "w", encoding="utf-8") as f:
            json.dump(written, f)
    with pytest.raises(CheckpointError, match=expected):
        load_ernie45(folder)
    data = str(tmp_path / "data")
    write_jsonl(os.path.join(data, "train.jsonl"), conversations(6, seed=1))
    write_jsonl(os.path.join(data, "dev.jsonl"), conversations(2, seed=2))
    config = sft_config(data, str(tmp_path / "out"), max_steps=1)
    for reader in config["dataset_reader"].values():
        reader["fields"][0]["model_dir"] = folder
    config["model"]["model_dir"] = folder
    with pytest.raises(CheckpointError, match=stray.replace(".", r"\.")):
        build(config, tmp_path).do_train()


def test_a_bfloat16_pt_export_keeps_the_router_in_float32_and_routes_as_the_float32_model(tmp_path):
    """Baidu's bfloat16 MoE folders keep each router (``mlp.gate.weight``) and correction bias in
    float32, and transformers loads them so (issue 67): a rounded bias or router can send a token
    to other experts. The export keeps them bit for bit, and on the same hidden states routes
    every token as the float32 model does, where their rounded copies would not."""
    import struct

    from wenxin.models.ernie45 import paddle_layout_weights
    from wenxin.models.ernie45_export import pt_layout_weights, write_pt_folder
    from wenxin.models.safetensors_shards import as_bfloat16_bits
    config = Ernie45Config.from_folder(MOE)
    weights = paddle_layout_weights(MOE, config)
    folder = str(tmp_path / "bf16")
    os.makedirs(folder)
    write_pt_folder(folder, pt_layout_weights(weights), MOE, "bfloat16")
    with open(os.path.join(folder, "model.safetensors"), "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    kept = sorted(name for name, entry in header.items() if name != "__metadata__" and entry["dtype"] == "F32")
    routers = sorted(name for name in weights if ".mlp.gate.weight" in name or "moe_statics" in name)
    assert kept == routers and len(routers) == 4  # two MoE layers, each a router and a bias
    exported = paddle_layout_weights(folder, Ernie45Config.from_folder(folder))
    for name in routers:
        np.testing.assert_array_equal(exported[name], weights[name], err_msg=name)
    hidden = paddle.to_tensor(np.random.default_rng(67).standard_normal((4096, config.hidden_size)).astype("float32"))
    float32_model, bfloat16_model = load_ernie45(MOE), load_ernie45(folder)
    rounded_differ = 0
    for index, layer in enumerate(float32_model.model.layers):
        if not isinstance(layer.mlp, Ernie45SparseMoE):
            continue
        expected = layer.mlp.route(hidden)[0].numpy()
        np.testing.assert_array_equal(bfloat16_model.model.layers[index].mlp.route(hidden)[0].numpy(), expected)
        mlp = layer.mlp
        for parameter in (mlp.gate.weight, mlp.moe_statics.e_score_correction_bias):  # what rounding would do
            bits = as_bfloat16_bits(parameter.numpy()).astype(np.uint32) << 16
            parameter.set_value(bits.view(np.float32))
        rounded_differ += int((mlp.route(hidden)[0].numpy() != expected).any(axis=-1).sum())
    assert rounded_differ > 0
