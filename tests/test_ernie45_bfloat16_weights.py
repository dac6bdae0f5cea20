"""Frozen weights held in bfloat16 (issue 58: ERNIE-4.5-21B-A3B's weights must fit one GPU):
``model.weight_dtype: bfloat16`` holds a LoRA fine-tuning's decoder in half the memory and
computes as float32 does on the same weights rounded to bfloat16 (equal losses, bit for bit);
the conversions agree with Paddle's cast; resume, export and refusals as for float32."""
from __future__ import annotations

import os
import shutil

import numpy as np
import paddle
import pytest

from conftest import build, losses_of
from wenxin.common.errors import ConfigError
from wenxin.common.held_state import exact_array
from wenxin.models.held_dtype import to_held


def test_the_conversions_agree_with_paddles_cast():
    values = np.array([1.0, 1.00390625, 1.005859375, -3.3e-5, 1e30, 0.1, -0.0, 65504.0], np.float32)
    held = to_held(values, paddle.zeros([8]).astype("bfloat16"))
    assert held.dtype == paddle.bfloat16
    by_paddle = paddle.to_tensor(values).astype("bfloat16")
    np.testing.assert_array_equal(exact_array(held), by_paddle.astype("float32").numpy())
    assert exact_array(held)[1] == 1.0  # halfway between 1 and 1.0078125: ties to even
    np.testing.assert_array_equal(exact_array(by_paddle), by_paddle.astype("float32").numpy())
    assert to_held(values, paddle.zeros([8])) is values  # float32 parameters take values as they are


def test_float32_values_match_a_bfloat16_parameter_even_once_ml_dtypes_is_imported():
    # ml_dtypes (which ONNX Runtime's quantization imports) gives numpy a "bfloat16" that is not a
    # float kind: a bfloat16 parameter was then refused float32 values from its weights file
    pytest.importorskip("ml_dtypes")
    from wenxin.controller.parameters import match_parameters
    param = paddle.zeros([2, 3]).astype("bfloat16")
    matched, report = match_parameters({"w": param}, {"w": np.ones((2, 3), np.float32)}, "weights.safetensors")
    assert report.loaded == ["w"] and matched["w"].dtype == np.float32  # held_dtype rounds it as it is set


@pytest.fixture
def rounded_moe(tmp_path):
    """The MoE fixture (dense layer 0, MoE layers, tied embeddings) with its weights rounded to
    bfloat16, so a float32 model and a bfloat16-held one hold the same values."""
    from safetensors.numpy import load_file, save_file
    from test_ernie45_moe import MOE
    folder = str(tmp_path / "rounded")
    shutil.copytree(MOE, folder)
    for name in os.listdir(folder):
        if name.endswith(".safetensors"):
            weights = load_file(os.path.join(folder, name))
            save_file({n: paddle.to_tensor(v).astype("bfloat16").astype("float32").numpy() for n, v in weights.items()},
                      os.path.join(folder, name))
    return folder


def held_config(data, out, folder, dtype, mode="dynamic", **trainer):
    from test_ernie45_moe import EXPERT_LORA, moe_sft_config
    config = moe_sft_config(data, out, mode, lora=dict(EXPERT_LORA), **trainer)
    for reader in config["dataset_reader"].values():
        reader["fields"][0]["model_dir"] = folder
    config["model"].update(model_dir=folder, weight_dtype=dtype)
    config["model"]["optimization"]["learning_rate"] = 2e-2
    return config


@pytest.fixture
def data(tmp_path):
    from test_ernie45_router_loss import write_moe_data
    return write_moe_data(tmp_path)


def test_bfloat16_weights_train_as_float32_on_the_same_values_in_half_the_memory(tmp_path, data, rounded_moe):
    losses, held = {}, {}
    for dtype in ("float32", "bfloat16"):
        out = str(tmp_path / dtype)
        trainer = build(held_config(data, out, rounded_moe, dtype, max_steps=4, is_eval_dev=0,
                                    step={"recompute": dtype == "bfloat16"}), tmp_path)
        trainer.do_train()
        losses[dtype] = losses_of(out)
        held[dtype] = {name: (str(p.dtype), p.numel().item() * (2 if p.dtype == paddle.bfloat16 else 4))
                       for name, p in trainer.model.named_parameters()}
    assert losses["bfloat16"] == losses["float32"]  # bit for bit: the same float32 products of the same values
    kinds = {name: dtype for name, (dtype, _) in held["bfloat16"].items()}
    assert kinds["model.embed_tokens.weight"] == kinds["model.layers.1.mlp.experts.0.up_proj.weight"] == \
        kinds["model.layers.0.self_attn.q_proj.weight"] == "paddle.bfloat16"
    assert {dtype for name, dtype in kinds.items() if name.endswith(("lora_A", "lora_B", "norm.weight", "mlp.gate.weight",
                                                                       "e_score_correction_bias"))} == {"paddle.float32"}
    frozen = [name for name in kinds if not name.endswith(("lora_A", "lora_B"))]
    ratio = sum(held["bfloat16"][n][1] for n in frozen) / sum(held["float32"][n][1] for n in frozen)
    assert 0.5 < ratio < 0.52  # the norms and the router stay float32


def test_a_bfloat16_held_run_resumes_exactly_after_sigkill(tmp_path, data, rounded_moe):
    import random

    from conftest import resumed_run_matches_reference
    steps = 6

    def config(out):
        return held_config(data, out, rounded_moe, "bfloat16", max_steps=steps, epoch=10, save_model_step=2,
                           keep_checkpoint_max=2, is_eval_dev=0, resume="auto")
    params = resumed_run_matches_reference(tmp_path, config, steps, random.Random(7), runs=1)
    assert params and all(name.endswith(("lora_A", "lora_B")) for name in params)


@pytest.mark.slow
def test_exports_of_a_bfloat16_held_model(tmp_path, data, rounded_moe):
    """The ``-PT`` export merges the adapters into the float32 values of the held weights (the
    float32-held model's export, bit for bit); the inference export holds the merged weights in
    bfloat16 and answers as the model does with them merged; training's weights are unchanged."""
    from wenxin.models.ernie45 import load_ernie45
    from wenxin.models.lora import merged_adapters
    folders = {}
    for dtype in ("float32", "bfloat16"):
        config = held_config(data, str(tmp_path / dtype), rounded_moe, dtype, max_steps=3, is_eval_dev=0)
        config["model"]["generation"] = {"max_new_tokens": 40, "strategy": "greedy"}  # as greedy_answer decodes
        trainer = build(config, tmp_path)
        trainer.do_train()
        folder = folders[dtype] = str(tmp_path / f"pt-{dtype}")
        os.makedirs(folder)
        before = {n: exact_array(p, copy=True) for n, p in trainer.model.named_parameters()}
        trainer.model.write_pretrained_folder(folder, trainer.engine.model_state_dict(), "float32", 10**9)
        if dtype == "bfloat16":
            from test_chat_generate import greedy_answer
            from wenxin.inference.predictor import Predictor
            predictor = Predictor(trainer.export_inference(str(tmp_path / "export")))
            questions = ["你好", "what is two and two", "写一首诗"]
            answers = [result["text"] for result in predictor.predict([[q] for q in questions])]
            after = {n: exact_array(p) for n, p in trainer.model.named_parameters()}
            for name, value in before.items():
                np.testing.assert_array_equal(after[name], value, err_msg=name)
            with merged_adapters(trainer.model):
                assert trainer.model.model.layers[0].self_attn.q_proj.weight.dtype == paddle.bfloat16
                assert answers == [greedy_answer(trainer, q) for q in questions]
    ids = paddle.to_tensor(np.arange(1, 12, dtype="int64")[None])
    models = {dtype: load_ernie45(folder) for dtype, folder in folders.items()}
    for model in models.values():
        model.eval()
    np.testing.assert_array_equal(models["bfloat16"](ids).numpy(), models["float32"](ids).numpy())


def test_bfloat16_weights_need_lora_and_eager_mode(tmp_path, data, rounded_moe):
    config = held_config(data, str(tmp_path / "full"), rounded_moe, "bfloat16", max_steps=1, is_eval_dev=0)
    config["model"]["lora"] = None
    with pytest.raises(ConfigError, match="model.weight_dtype: bfloat16 holds the frozen weights of a LoRA"):
        build(config, tmp_path)
    config = held_config(data, str(tmp_path / "static"), rounded_moe, "bfloat16", mode="static", max_steps=1,
                         is_eval_dev=0)
    with pytest.raises(ConfigError, match=r"model.weight_dtype: bfloat16 weights train in eager mode"):
        build(config, tmp_path)


def test_dpo_with_bfloat16_weights_starts_at_log_2_and_trains_as_float32(tmp_path, rounded_moe):
    """DPO's reference is the held model with its adapters bypassed: the first loss is ln 2, and
    the losses equal the float32 model's bit for bit."""
    from conftest import write_jsonl
    from test_dpo import dpo_config, pairs
    data = str(tmp_path / "pairs")
    write_jsonl(os.path.join(data, "train.jsonl"), pairs(8, seed=1))
    write_jsonl(os.path.join(data, "dev.jsonl"), pairs(4, seed=2))
    losses = {}
    for dtype in ("float32", "bfloat16"):
        out = str(tmp_path / f"dpo-{dtype}")
        config = dpo_config(data, out, max_steps=3, is_eval_dev=0)
        for reader in config["dataset_reader"].values():
            reader["fields"][0]["model_dir"] = rounded_moe
        config["model"].update(model_dir=rounded_moe, weight_dtype=dtype)
        build(config, tmp_path).do_train()
        losses[dtype] = losses_of(out)
    assert losses["bfloat16"][1] == pytest.approx(np.log(2), abs=1e-6)
    assert losses["bfloat16"] == losses["float32"]
