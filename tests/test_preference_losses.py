"""ORPO and SimPO (issue 58, point 3): ``model.loss_type`` of ``Ernie45DPO`` as ERNIEKit names it,
each loss against its closed form on a small case and against a hand computation from a model's
logits, reference-free (no frozen copy is built), and the same losses in both graph modes."""
import math

import numpy as np
import pytest

pytest.importorskip("sentencepiece")

import paddle  # noqa: E402

from conftest import build, losses_in_both_modes  # noqa: E402
from test_dpo import FOLDER, dpo_config, dpo_data, first_pairs, numpy_log_prob  # noqa: E402,F401 (the fixture)
from wenxin.common.errors import ConfigError  # noqa: E402
from wenxin.models.ernie45 import load_ernie45  # noqa: E402


def preference_module():
    from wenxin.common.task_loader import import_task
    import_task("chat")
    import sys
    return next(m for name, m in sys.modules.items() if name.endswith("chat.preference"))


def test_each_margin_equals_its_closed_form_on_a_small_case():
    losses = preference_module().PREFERENCE_LOSSES
    chosen, rejected = np.array([-0.3, -2.0, -1e-9]), np.array([-1.1, -0.5, -0.7])  # mean log-probabilities
    settings = {"beta": 2.0, "simpo_gamma": 0.5}
    as_tensor = [paddle.to_tensor(v, dtype="float32") for v in (chosen, rejected, np.zeros(3), np.zeros(3))]
    simpo = losses["simpo"].margin(*as_tensor, settings).numpy()
    np.testing.assert_allclose(simpo, 2.0 * (chosen - rejected) - 0.5, rtol=1e-6)
    orpo = losses["orpo"].margin(*as_tensor, settings).numpy()
    p_c, p_r = np.exp(np.minimum(chosen, -1e-6)), np.exp(rejected)  # P = 1 is taken as 1 - 1e-6
    np.testing.assert_allclose(orpo, np.log(p_c / (1 - p_c)) - np.log(p_r / (1 - p_r)), rtol=1e-4)
    assert np.isfinite(orpo).all()
    dpo = losses["sigmoid"].margin(*as_tensor[:2], paddle.to_tensor([-0.1, -0.2, -0.3]),
                                   paddle.to_tensor([-1.0, -1.0, -1.0]), {"beta": 0.5}).numpy()
    np.testing.assert_allclose(dpo, 0.5 * ((chosen + [0.1, 0.2, 0.3]) - (rejected + 1.0)), rtol=1e-6, atol=1e-6)
    assert [name for name, loss in sorted(losses.items()) if loss.reference_free] == ["or", "orpo", "simpo"]
    assert losses["or"] is losses["orpo"]  # PaddleFormers' name


def hand_loss(policy, values, loss_type, beta=0.5, gamma=0.5, sft_ratio=None):
    """The batch's loss from separate forward passes of each conversation and numpy."""
    margins, chosen_sum, chosen_tokens = [], 0.0, 0
    for chosen_ids, chosen_learn, rejected_ids, rejected_learn in values:
        means = []
        for ids, learn in ((chosen_ids, chosen_learn), (rejected_ids, rejected_learn)):
            tokens = sum(1 for t in range(len(ids) - 1) if learn[t + 1])
            means.append(numpy_log_prob(policy, ids, learn) / tokens)
        chosen_sum += means[0] * sum(1 for t in range(len(chosen_ids) - 1) if chosen_learn[t + 1])
        chosen_tokens += sum(1 for t in range(len(chosen_ids) - 1) if chosen_learn[t + 1])
        if loss_type == "simpo":
            margins.append(beta * (means[0] - means[1]) - gamma)
        else:
            odds = [m - math.log1p(-math.exp(m)) for m in means]
            margins.append(odds[0] - odds[1])
    loss = np.mean([math.log1p(math.exp(-m)) for m in margins])  # -log sigmoid(m)
    ratio = (1.0 if loss_type == "orpo" else 0.0) if sft_ratio is None else sft_ratio
    return loss + ratio * (-chosen_sum / chosen_tokens), margins


@pytest.mark.parametrize("loss_type,lora", [("simpo", False), ("orpo", False), ("orpo", True), ("or", True)])
def test_the_loss_equals_a_hand_computation_from_logits(tmp_path, dpo_data, loss_type, lora):  # noqa: F811
    """``or`` is PaddleFormers' name for ORPO: the same loss."""
    config = dpo_config(dpo_data, str(tmp_path / "out"), lora=lora)
    config["model"].update(loss_type=loss_type, simpo_gamma=0.5)
    trainer = build(config, tmp_path)
    model = trainer.model
    assert model.reference is None  # reference-free: no frozen copy of the decoder
    if not lora:
        rng = np.random.RandomState(5)
        with paddle.no_grad():
            for name, parameter in model.named_parameters():
                if name.startswith("model.layers.0.mlp"):
                    parameter.set_value(parameter.numpy() + rng.normal(0, 0.05, parameter.shape).astype("float32"))
    values, batch = first_pairs(trainer, 3)
    model.eval()
    with paddle.no_grad():
        outputs = model(batch, "training")
    policy = load_ernie45(FOLDER)
    state = dict(model.named_parameters())
    for name, parameter in policy.named_parameters():
        parameter.set_value(state[name].numpy())  # LoRA: its adapters start at zero, the folder's model
    expected, margins = hand_loss(policy, values, "orpo" if loss_type == "or" else loss_type)
    assert abs(float(outputs["loss"]) - expected) < 1e-4 * max(1.0, expected), (float(outputs["loss"]), expected)
    assert float(outputs["reward_wins"]) == sum(m > 0 for m in margins)
    assert float(outputs["margin_sum"]) == pytest.approx(sum(margins), rel=1e-4, abs=1e-4)


@pytest.mark.parametrize("loss_type", ["simpo", "orpo"])
def test_eager_and_static_give_the_same_losses_and_training_lowers_them(tmp_path, dpo_data, loss_type):  # noqa: F811
    def config(mode, out):
        c = dpo_config(dpo_data, out, mode, lora=True, max_steps=8, is_eval_dev=0)
        c["model"].update(loss_type=loss_type, pref_loss_ratio=0.5)
        return c
    losses = losses_in_both_modes(tmp_path, config)
    assert len(losses) == 8 and np.mean([losses[s] for s in (7, 8)]) < np.mean([losses[s] for s in (1, 2)])


def test_an_unknown_loss_type_is_named(tmp_path, dpo_data):  # noqa: F811
    config = dpo_config(dpo_data, str(tmp_path / "out"))
    config["model"]["loss_type"] = "kto"
    with pytest.raises(ConfigError, match=r"model.loss_type: 'kto' is not one of \['or', 'orpo', 'sigmoid', 'simpo'\]"):
        build(config, tmp_path)
