"""LoRA adapters on an ERNIE 4.5 decoder (issue 40): the adapters start as a no-op, only they
train and are checkpointed, merging them changes no output, and a LoRA SFT run resumes exactly."""
import os

import numpy as np
import paddle
import pytest

from wenxin.common.errors import ConfigError
from wenxin.models.ernie45 import load_ernie45
from wenxin.models.lora import LoRALinear, LoRASettings, adapter_parameter_names, apply_lora, merged_adapters

FOLDER = os.path.join(os.path.dirname(__file__), "fixtures", "ernie45", "untied")
IDS = np.array([[3, 99, 414, 315, 72, 400, 437, 422, 24, 79], [3, 245, 193, 201, 24, 99, 414, 315, 72, 400]])


def lora_model(targets=("q_proj", "v_proj", "down_proj"), dropout=0.0):
    paddle.seed(7)
    model = load_ernie45(FOLDER)
    swapped = apply_lora(model, LoRASettings(rank=4, alpha=8.0, dropout=dropout, target_modules=list(targets)))
    return model, swapped


def test_adapters_start_as_a_no_op_and_only_they_train():
    base = load_ernie45(FOLDER)
    model, swapped = lora_model()
    assert len(swapped) == 3 * base.config.num_hidden_layers
    assert isinstance(model.model.layers[0].self_attn.q_proj, LoRALinear)
    with paddle.no_grad():
        np.testing.assert_array_equal(model(paddle.to_tensor(IDS)).numpy(), base(paddle.to_tensor(IDS)).numpy())
    trainable = {name for name, p in model.named_parameters() if not p.stop_gradient}
    assert trainable == adapter_parameter_names(model) and len(trainable) == 2 * len(swapped)
    assert "model.layers.0.self_attn.q_proj.weight" in dict(model.named_parameters())  # names stay the checkpoint's
    loss = model(paddle.to_tensor(IDS)).mean()
    loss.backward()
    for name, parameter in model.named_parameters():
        assert (parameter.grad is not None) == (name in trainable), name


def test_an_unknown_target_module_names_the_key():
    model = load_ernie45(FOLDER)
    with pytest.raises(ConfigError, match=r"model.lora.target_modules: no linear layer is named 'qkv_proj' "
                                          r"\(the model's: down_proj, gate_proj, k_proj, o_proj, q_proj, up_proj, v_proj\)"):
        apply_lora(model, LoRASettings(4, 8.0, 0.0, ["q_proj", "qkv_proj"]))


def test_merged_adapters_give_the_unmerged_outputs_and_the_weights_come_back_bit_for_bit():
    model, _ = lora_model(targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"))
    rng = np.random.RandomState(0)
    for name, parameter in model.named_parameters():  # adapters as training leaves them: B no longer zero
        if name.endswith("lora_B"):
            parameter.set_value(rng.normal(0, 0.05, parameter.shape).astype("float32"))
    model.eval()
    ids = paddle.to_tensor(IDS)
    with paddle.no_grad():
        unmerged = model(ids).numpy()
        before = {name: p.numpy().copy() for name, p in model.named_parameters()}
        with merged_adapters(model) as count:
            assert count == 7 * model.config.num_hidden_layers
            merged = model(ids).numpy()
            layer = model.model.layers[1].mlp.down_proj
            assert not np.array_equal(layer.weight.numpy(), before["model.layers.1.mlp.down_proj.weight"])
        after = {name: p.numpy() for name, p in model.named_parameters()}
    np.testing.assert_allclose(merged, unmerged, atol=2e-5, rtol=1e-5)
    assert np.abs(unmerged - load_ernie45(FOLDER)(ids).numpy()).max() > 1e-3  # the adapters do change outputs
    for name in before:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)


@pytest.mark.parametrize("with_lora", [False, True])
def test_recompute_gives_the_same_gradients(with_lora):
    ids = paddle.to_tensor(IDS)
    grads = []
    for recompute in (False, True):
        model, _ = lora_model(dropout=0.2) if with_lora else (load_ernie45(FOLDER), None)
        model.train()
        model.model.recompute = recompute
        paddle.seed(11)  # the adapters' dropout draws the same numbers in both
        logits = model(ids)
        (logits * paddle.arange(logits.shape[-1], dtype="float32") / 1000).mean().backward()
        grads.append({n: p.grad.numpy().copy() for n, p in model.named_parameters() if p.grad is not None})
    plain, recomputed = grads
    assert sorted(plain) == sorted(recomputed) and len(plain) > 0
    if with_lora:
        assert all(n.endswith(("lora_A", "lora_B")) for n in plain)
    for name in plain:
        np.testing.assert_array_equal(recomputed[name], plain[name], err_msg=name)


def test_a_rank_above_the_narrowest_adapted_layer_is_one_error_before_any_adapter_is_made():
    """The fixture's layers are 64 wide (k_proj and v_proj 64 -> 32): a rank of 10^6 would have
    trained on in 8 GB and growing (issue 67); it is refused, naming the key and the layer."""
    model = load_ernie45(FOLDER)
    for rank, targets, narrowest in ((33, ["q_proj", "k_proj"], "32, the smaller side of the adapted layer "
                                                                 "model.layers.0.self_attn.k_proj"),
                                     (10**6, ["q_proj"], "64, the smaller side")):
        with pytest.raises(ConfigError, match=f"model.lora.rank: {rank} is above {narrowest}"):
            apply_lora(model, LoRASettings(rank, 8.0, 0.0, targets))
        assert not [layer for layer in model.sublayers() if isinstance(layer, LoRALinear)]
    assert len(apply_lora(model, LoRASettings(32, 8.0, 0.0, ["q_proj", "k_proj"]))) > 0  # the bound itself


def test_lora_keys_out_of_bounds_are_one_error_naming_the_key(tmp_path):
    from conftest import write_config
    from test_chat_sft import LORA, sft_config
    from wenxin.config.loader import load_config
    for lora, expected in (({"rank": 10**9}, "model.lora.rank: 1000000000 is above the maximum 65536"),
                           ({"target_modules": []}, "model.lora.target_modules: must not be empty")):
        config = sft_config(str(tmp_path), str(tmp_path / "out"))
        config["model"]["lora"] = {**LORA, **lora}
        with pytest.raises(ConfigError, match=expected):
            load_config(write_config(str(tmp_path / "task.json"), config))
