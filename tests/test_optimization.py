"""AMP (bf16 on CPU, with and without GradScaler), gradient accumulation and clipping."""
import os

import numpy as np
import pytest

from conftest import build, checkpoint_state, plain_sgd, task_config


def params_of(trainer):
    return {k: v.numpy().astype("float32").copy() for k, v in trainer.model.state_dict().items()}


def test_gradient_accumulation_equals_larger_batch(tmp_path, data_dir):
    big = plain_sgd(task_config(data_dir, str(tmp_path / "big"), max_steps=4, is_eval_dev=0, is_eval_test=0))
    big["dataset_reader"]["train_reader"]["config"]["batch_size"] = 16
    small = plain_sgd(task_config(data_dir, str(tmp_path / "small"), max_steps=4, is_eval_dev=0,
                                  is_eval_test=0, gradient_accumulation_steps=2))
    small["dataset_reader"]["train_reader"]["config"]["batch_size"] = 8
    a, b = build(big, tmp_path), build(small, tmp_path)
    before = params_of(a)
    a.do_train()
    b.do_train()
    assert a.state.global_step == b.state.global_step == 4
    for name, value in params_of(a).items():
        np.testing.assert_allclose(params_of(b)[name], value, atol=1e-6, err_msg=name)
    assert any(not np.allclose(before[n], v) for n, v in params_of(a).items())  # it did train


def test_gradient_clipping_bounds_the_update(tmp_path, data_dir):
    def update_norm(max_grad_norm):
        config = plain_sgd(task_config(data_dir, str(tmp_path / f"clip{max_grad_norm}"), max_steps=1,
                                       is_eval_dev=0, is_eval_test=0), lr=1.0, max_grad_norm=max_grad_norm)
        trainer = build(config, tmp_path)
        before = params_of(trainer)
        trainer.do_train()
        after = params_of(trainer)
        return float(np.sqrt(sum(((after[n] - before[n]) ** 2).sum() for n in before)))

    assert update_norm(1e-3) == pytest.approx(1e-3, rel=1e-3)  # lr 1: update = clipped gradient
    assert update_norm(0.0) > 1e-2  # unclipped


def test_amp_config_trains_in_eager_mode(tmp_path, data_dir):
    """The eager AMP path (auto_cast around the forward). On a CPU Paddle turns it off itself and
    the run computes in float32 (tests/test_static_amp.py checks the warning); on a GPU it casts."""
    config = task_config(data_dir, str(tmp_path / "amp"), use_amp=True, epoch=4)
    config["model"]["optimization"]["learning_rate"] = 0.02
    trainer = build(config, tmp_path)
    assert trainer.amp.enabled and trainer.amp.dtype == "bfloat16" and trainer.scaler is None
    metrics = trainer.do_train()
    assert metrics["dev_reader"]["acc"] >= 0.9


def test_amp_o2_config_trains_in_eager_mode(tmp_path, data_dir):
    """O2 adds paddle.amp.decorate of model and optimizer (a no-op on CPU, as above)."""
    config = task_config(data_dir, str(tmp_path / "o2"), use_amp=True, amp_level="O2", epoch=4)
    config["model"]["optimization"]["learning_rate"] = 0.02
    metrics = build(config, tmp_path).do_train()
    assert metrics["dev_reader"]["acc"] >= 0.9


def test_grad_scaler_path_runs_and_resumes(tmp_path, data_dir):
    """Forcing loss scaling routes steps through GradScaler.scale/step/update. Paddle's GradScaler
    scales only float16 on GPU; on CPU it passes gradients through, which this test pins down."""
    out = str(tmp_path / "scaled")
    config = task_config(data_dir, out, use_amp=True, use_loss_scaling=True, init_loss_scaling=1024.0,
                         epoch=4, save_model_step=30, is_eval_test=0)
    config["model"]["optimization"]["learning_rate"] = 0.02
    trainer = build(config, tmp_path)
    assert trainer.scaler is not None
    assert trainer.loss_scale() is None  # CPU: Paddle disables the scaling itself
    metrics = trainer.do_train()
    assert metrics["dev_reader"]["acc"] >= 0.9
    assert "scaler" in checkpoint_state(os.path.join(out, "checkpoints", "step_30"))
    config["trainer"]["load_checkpoint"] = os.path.join(out, "checkpoints", "step_30")
    resumed = build(config, tmp_path)
    assert resumed.state.global_step == 30


def test_float16_on_cpu_is_a_config_error(tmp_path, data_dir):
    from wenxin.common.errors import ConfigError
    with pytest.raises(ConfigError, match="trainer.amp_dtype: float16 AMP needs a GPU"):
        build(task_config(data_dir, str(tmp_path / "x"), use_amp=True, amp_dtype="float16"), tmp_path)
