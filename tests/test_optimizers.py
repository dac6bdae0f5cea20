"""Every registered optimizer and LR schedule, in both graph modes: weight decay skips biases and
norm scales, schedules follow their formulas, unknown names are config errors."""
import math

import numpy as np
import pytest

from conftest import build, task_config
from wenxin.common.registry import RegisterSet
from wenxin.optim.optimizers import build_lr_scheduler

OPTIMIZERS = ["adamw", "adam", "sgd", "momentum"]


def params_after(tmp_path, data_dir, name, optimizer, mode, weight_decay):
    # one step: both runs take it from the same weights, so only decay can make them differ
    config = task_config(data_dir, str(tmp_path / name), max_steps=1, is_eval_dev=0, is_eval_test=0)
    config["model"]["optimization"] = {"optimizer": optimizer, "learning_rate": 0.05, "weight_decay": weight_decay,
                                       "lr_scheduler": "constant"}
    if mode == "static":
        config["model"]["is_dygraph"] = 0
        config["trainer"]["type"] = "CustomStaticTrainer"
    trainer = build(config, tmp_path)
    state = {k: np.asarray(v, dtype="float32") for k, v in trainer.engine.model_state_dict().items()}
    # biases start at zero, where L2 decay adds nothing: start them where decay would show
    trainer.engine.set_model_state_dict({k: np.full_like(v, 0.5) for k, v in state.items() if k.endswith("bias")})
    trainer.do_train()
    return {k: np.asarray(v, dtype="float32") for k, v in trainer.engine.model_state_dict().items()}


@pytest.mark.parametrize("mode", ["dynamic", "static"])
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_weight_decay_skips_biases_for_every_optimizer(tmp_path, data_dir, optimizer, mode):
    plain = params_after(tmp_path, data_dir, "plain", optimizer, mode, 0.0)
    decayed = params_after(tmp_path, data_dir, "decayed", optimizer, mode, 0.5)
    biases = [n for n in plain if n.endswith("bias")]
    weights = [n for n in plain if n.endswith("weight")]
    assert biases and weights
    for name in biases:
        np.testing.assert_array_equal(decayed[name], plain[name], err_msg=f"{optimizer}: {name} was decayed")
    for name in weights:
        assert not np.array_equal(decayed[name], plain[name]), f"{optimizer}: {name} was not decayed"


def test_cosine_schedule_with_warmup_follows_its_formula():
    opt = {"learning_rate": 0.1, "warmup_steps": 4, "warmup_proportion": 0.0, "end_learning_rate": 0.01,
           "lr_scheduler": "cosine_warmup_decay"}
    scheduler = build_lr_scheduler(opt, total_steps=24)
    seen = []
    for _ in range(25):
        seen.append(float(scheduler.get_lr()))
        scheduler.step()
    np.testing.assert_allclose(seen[:5], [0.0, 0.025, 0.05, 0.075, 0.1], rtol=1e-6)
    for step in range(4, 25):
        t = step - 4
        expected = 0.01 + (0.1 - 0.01) * (1 + math.cos(math.pi * t / 20)) / 2
        assert seen[step] == pytest.approx(expected, rel=1e-6), step
    assert seen[-1] == pytest.approx(0.01)


def test_linear_and_constant_schedules():
    base = {"learning_rate": 0.2, "warmup_steps": 0, "warmup_proportion": 0.5, "end_learning_rate": 0.0}
    linear = build_lr_scheduler({**base, "lr_scheduler": "linear_warmup_decay"}, total_steps=10)
    constant = build_lr_scheduler({**base, "lr_scheduler": "constant"}, total_steps=10)
    lin, con = [], []
    for _ in range(11):
        lin.append(float(linear.get_lr()))
        con.append(float(constant.get_lr()))
        linear.step()
        constant.step()
    np.testing.assert_allclose(lin, [0, .04, .08, .12, .16, .2, .16, .12, .08, .04, 0], atol=1e-7)
    np.testing.assert_allclose(con, [0, .04, .08, .12, .16] + [.2] * 6, atol=1e-7)


def test_a_registered_optimizer_and_schedule_are_usable_by_name(tmp_path, data_dir):
    import paddle

    @RegisterSet.optimizers.register("test_rmsprop")
    def rmsprop(opt, params, lr, clip, decay_filter):
        return paddle.optimizer.RMSProp(learning_rate=lr, parameters=params, grad_clip=clip)

    @RegisterSet.lr_schedulers.register("test_halving")
    def halving(opt, base, decay_steps):
        return paddle.optimizer.lr.StepDecay(base, step_size=1, gamma=0.5)

    config = task_config(data_dir, str(tmp_path / "out"), max_steps=3, is_eval_dev=0, is_eval_test=0)
    config["model"]["optimization"] = {"optimizer": "test_rmsprop", "lr_scheduler": "test_halving",
                                       "learning_rate": 0.08}
    trainer = build(config, tmp_path)
    assert isinstance(trainer.optimizer, paddle.optimizer.RMSProp)
    trainer.do_train()
    assert trainer.current_lr() == pytest.approx(0.01)
