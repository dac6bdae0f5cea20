"""The router's training losses of ERNIE 4.5's MoE layers (issue 58, point 1): load balancing,
z-loss and orthogonality equal PaddleFormers' values (a fixture it computed) and a numpy hand
computation; a balanced router scores k; padding is left out; the losses reach the gradient and
not the reported loss, in both graph modes and under recompute; ERNIEKit's keys set them, and set
on a dense model they are one error."""
from __future__ import annotations

import os

import numpy as np
import paddle
import pytest

from conftest import REPO
from wenxin.common.errors import ConfigError
from wenxin.models.ernie45_router_loss import (RouterLossWeights, load_balancing_loss, orthogonal_loss, router_loss,
                                               with_router_loss, z_loss)

REFERENCE = np.load(os.path.join(REPO, "tests", "fixtures", "ernie45_moe", "router_losses.npz"))


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def hand_losses(logits, weight, top_k, mask=None):
    """(load balancing, z, orthogonal) by the formulas of ernie45_router_loss's docstring, in float64."""
    logits = logits.astype(np.float64)
    keep = np.ones(len(logits), bool) if mask is None else mask.astype(bool)
    logits = logits[keep]
    p = softmax(logits)
    experts = p.shape[1]
    counts = np.zeros(experts)
    for row in p:
        counts[np.argsort(-row)[:top_k]] += 1
    aux = experts * np.sum(counts / len(p) * p.mean(axis=0))
    z = np.mean(np.log(np.exp(logits).sum(axis=1)) ** 2)
    rows = weight.T.astype(np.float64)
    rows = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    orthogonal = np.mean((rows @ rows.T - np.eye(experts)) ** 2)
    return aux, z, orthogonal


@pytest.mark.parametrize("case", ["few", "many"])
def test_each_loss_equals_paddleformers_and_a_hand_computation(case):
    logits, weight, k = REFERENCE[f"{case}_logits"], REFERENCE[f"{case}_weight"], int(REFERENCE["top_k"])
    x = paddle.to_tensor(logits)
    ours = (float(load_balancing_loss(paddle.nn.functional.softmax(x, axis=-1), k)), float(z_loss(x)),
            float(orthogonal_loss(paddle.to_tensor(weight))))
    reference = tuple(float(REFERENCE[f"{case}_{name}"]) for name in ("aux", "z", "orthogonal"))
    np.testing.assert_allclose(ours, reference, rtol=1e-5)
    np.testing.assert_allclose(ours, hand_losses(logits, weight, k), rtol=1e-5)
    weights = RouterLossWeights(aux=0.5, z=0.25, orthogonal=2.0)
    total = float(router_loss(x, paddle.to_tensor(weight), k, weights))
    assert total == pytest.approx(0.5 * reference[0] + 0.25 * reference[1] + 2.0 * reference[2], rel=1e-5)


def test_a_balanced_router_scores_k():
    """Token i prefers experts i .. i+k-1 (mod E) equally: every expert is chosen by k/E of the
    tokens and has mean probability 1/E, so the loss is E * E * (k/E) * (1/E) = k."""
    experts, k = 8, 3
    logits = np.zeros((experts, experts), np.float32)
    for i in range(experts):
        logits[i, [(i + j) % experts for j in range(k)]] = 4.0
    value = float(load_balancing_loss(paddle.nn.functional.softmax(paddle.to_tensor(logits), axis=-1), k))
    assert value == pytest.approx(k, rel=1e-6)
    logits[:, 0] = 9.0  # every token's first choice expert 0: unbalanced, more than k
    assert float(load_balancing_loss(paddle.nn.functional.softmax(paddle.to_tensor(logits), axis=-1), k)) > k + 0.5


def test_padding_is_left_out():
    rng = np.random.default_rng(1)
    logits, weight = rng.standard_normal((10, 6)).astype("float32"), rng.standard_normal((4, 6)).astype("float32")
    mask = np.array([1, 1, 0, 1, 0, 0, 1, 1, 1, 0], np.int64)
    weights = RouterLossWeights(aux=1.0, z=1.0, orthogonal=1.0)
    masked = float(router_loss(paddle.to_tensor(logits), paddle.to_tensor(weight), 2, weights, paddle.to_tensor(mask)))
    kept = float(router_loss(paddle.to_tensor(logits[mask == 1]), paddle.to_tensor(weight), 2, weights))
    assert masked == pytest.approx(kept, rel=1e-6)
    assert masked == pytest.approx(sum(hand_losses(logits, weight, 2, mask)), rel=1e-5)


def test_the_router_loss_reaches_the_gradient_and_not_the_value():
    x = paddle.to_tensor([2.0], stop_gradient=False)
    router = (x * 3.0).sum()
    loss = with_router_loss((x * x).sum(), router)
    assert float(loss) == 4.0
    loss.backward()
    assert float(x.grad[0]) == 2 * 2.0 + 3.0


# ---- in the model and from a task file -----------------------------------------------------
LARGE = {"moe_aux_loss_lambda": 0.5, "moe_z_loss_lambda": 0.05, "moe_orthogonal_loss_lambda": 0.1}


def moe_trainer(tmp_path, data, mode="dynamic", lora=True, **model):
    from conftest import build
    from test_ernie45_moe import EXPERT_LORA, moe_sft_config
    config = moe_sft_config(data, str(tmp_path / f"out-{mode}"), mode, lora=dict(EXPERT_LORA) if lora else None,
                            max_steps=1, is_eval_dev=0)
    config["model"].update(model)
    return build(config, tmp_path)


@pytest.fixture
def moe_data(tmp_path):
    return write_moe_data(tmp_path)


def write_moe_data(tmp_path):
    from conftest import write_jsonl
    from test_chat_sft import conversations
    folder = str(tmp_path / "data")
    write_jsonl(os.path.join(folder, "train.jsonl"), conversations(24, seed=1))
    write_jsonl(os.path.join(folder, "dev.jsonl"), conversations(6, seed=2))
    return folder


def first_batch(trainer):
    from test_dpo import first_pairs
    return first_pairs(trainer, 6)[1]


def test_the_models_router_loss_is_each_moe_layers_by_hand(tmp_path, moe_data):
    """The forward's ``router_loss`` is the sum over the MoE layers of the three losses computed
    by hand from the router logits each layer saw (padding left out); the loss it returns keeps
    the language model's value."""
    trainer = moe_trainer(tmp_path, moe_data, lora=False, **LARGE)
    model = trainer.model
    model.train()
    seen = []
    hooks = [layer.mlp.gate.register_forward_post_hook(lambda _, __, out: seen.append(out.numpy()))
             for layer in model.model.layers if hasattr(layer.mlp, "gate")]
    batch = first_batch(trainer)
    outputs = model(batch, "training")
    for hook in hooks:
        hook.remove()
    mask = (batch[f"{model.field}_segments"].numpy() != 0).reshape(-1)
    gates = [layer.mlp.gate.weight.numpy() for layer in model.model.layers if hasattr(layer.mlp, "gate")]
    assert len(seen) == len(gates) >= 1
    expected = sum(0.5 * a + 0.05 * z + 0.1 * o
                   for a, z, o in (hand_losses(logits, gate, model.config.moe_k, mask)
                                   for logits, gate in zip(seen, gates)))
    assert float(outputs["router_loss"]) == pytest.approx(expected, rel=1e-5)
    (tmp_path / "plain").mkdir()
    without = moe_trainer(tmp_path / "plain", moe_data, lora=False, moe_aux_loss_lambda=0.0)
    without.model.train()
    plain = without.model(first_batch(without), "training")
    assert "router_loss" not in plain  # every weight 0: not computed
    assert float(outputs["loss"]) == pytest.approx(float(plain["loss"]), abs=1e-6)


def training_config(data, mode, out, **model):
    """Four LoRA steps of the MoE fixture at a learning rate where the router's gradient shows; the
    router-loss weights are LARGE unless given."""
    from test_ernie45_moe import EXPERT_LORA, moe_sft_config
    c = moe_sft_config(data, out, mode, lora=dict(EXPERT_LORA), max_steps=4, is_eval_dev=0)
    c["model"]["optimization"]["learning_rate"] = 2e-2
    c["model"].update(model or LARGE)
    return c


def test_router_losses_train_the_same_in_both_graph_modes_and_change_the_training(tmp_path, moe_data):
    from conftest import losses_in_both_modes, losses_of

    def config(mode, out, **model):
        return training_config(moe_data, mode, out, **model)
    with_losses = losses_in_both_modes(tmp_path, config)
    from conftest import build
    out = str(tmp_path / "without")
    build(config("static", out, moe_aux_loss_lambda=0.0), tmp_path).do_train()
    without = losses_of(out)
    assert with_losses[1] == pytest.approx(without[1], abs=1e-5)  # the value is the language model's
    # the gradient is not (the learning rate warms up from 0, so step 3 is the first loss to differ): by far
    # more than the two modes may differ, so a graph mode without the router's gradient would fail above
    assert all(abs(with_losses[s] - without[s]) > 1e-2 for s in (3, 4))


@pytest.mark.slow
def test_router_losses_train_the_same_under_recompute(tmp_path, moe_data):
    """Recompute runs each layer's forward again in the backward pass; the router's loss (handed back
    by decode, not kept on the model) must reach the gradient the same way."""
    from conftest import build, losses_of

    def train(out, recompute):
        c = training_config(moe_data, "dynamic", out)
        c["trainer"] = {**c["trainer"], "step": {"recompute": recompute}}
        build(c, tmp_path).do_train()
        return [losses_of(out)[s] for s in range(1, 5)]
    plain = train(str(tmp_path / "plain"), False)
    recomputed = train(str(tmp_path / "recompute"), True)
    np.testing.assert_allclose(recomputed, plain, rtol=1e-5)
    assert plain[2] != plain[3]  # it trained


def test_erniekits_defaults_apply_and_a_dense_model_refuses_the_keys(tmp_path, moe_data):
    trainer = moe_trainer(tmp_path, moe_data)
    weights = {layer.mlp.router_loss_weights for layer in trainer.model.model.layers if hasattr(layer.mlp, "gate")}
    assert weights == {RouterLossWeights(aux=1e-5, z=0.0, orthogonal=0.0)}
    from conftest import build
    from test_chat_sft import sft_config
    config = sft_config(moe_data, str(tmp_path / "dense"), max_steps=1, is_eval_dev=0)
    config["model"]["moe_z_loss_lambda"] = 0.1
    with pytest.raises(ConfigError, match=r"model\.moe_z_loss_lambda: the model in model_dir is dense"):
        build(config, tmp_path)
