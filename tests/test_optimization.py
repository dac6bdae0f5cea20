"""AMP (bf16 on CPU, with and without GradScaler), gradient accumulation and clipping."""
import os

import numpy as np
import pytest

from conftest import build, checkpoint_state, losses_of, plain_sgd, task_config


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


def _losses_and_params(tmp_path, data_dir, name, capsys, **trainer):
    config = task_config(data_dir, str(tmp_path / name), max_steps=8, train_log_step=1, is_eval_dev=0,
                         is_eval_test=0, **trainer)
    run = build(config, tmp_path)
    run.do_train()
    out = capsys.readouterr().out
    return losses_of(str(tmp_path / name)), params_of(run), out, run


@pytest.mark.parametrize("level", ["O1", "O2"])
def test_eager_amp_on_cpu_warns_once_and_computes_in_float32(tmp_path, data_dir, capsys, level):
    """Paddle turns eager AMP off on a CPU: the run says so in one warning and computes exactly
    what a float32 run computes (on a GPU, tests/test_distributed.py and the README say what runs)."""
    plain_losses, plain_params, _, _ = _losses_and_params(tmp_path, data_dir, "fp32", capsys)
    losses, params, out, run = _losses_and_params(tmp_path, data_dir, f"amp{level}", capsys, use_amp=True,
                                                  amp_level=level)
    warnings = [line for line in out.splitlines() if "WARNING wenxin: trainer.precision.use_amp:" in line]
    assert len(warnings) == 1 and warnings[0].endswith("this run computes in float32")
    assert losses == plain_losses
    for name, value in plain_params.items():
        np.testing.assert_array_equal(params[name], value, err_msg=name)


def test_grad_scaler_state_round_trips_through_a_checkpoint(tmp_path, data_dir):
    """Forcing loss scaling creates a GradScaler (Paddle's scales only float16 on GPU/XPU; on a
    CPU it passes gradients through). Its whole state is checkpointed and restored."""
    out = str(tmp_path / "scaled")
    config = task_config(data_dir, out, use_amp=True, use_loss_scaling=True, init_loss_scaling=1024.0,
                         max_steps=30, save_model_step=30, is_eval_dev=0, is_eval_test=0)
    trainer = build(config, tmp_path)
    assert trainer.engine.scaler is not None and trainer.engine.loss_scale() is None  # CPU: no scaling
    trainer.do_train()
    saved = checkpoint_state(os.path.join(out, "checkpoints", "step_30"))["scaler"]
    # a disabled GradScaler's whole state is {}; the static trainer's float16 scale, which does
    # change on a CPU, round-trips in tests/test_static_amp.py
    assert saved == trainer.engine.scaler_state_dict() == {}
    config["trainer"]["load_checkpoint"] = os.path.join(out, "checkpoints", "step_30")
    config["trainer"]["output_path"] = str(tmp_path / "resumed")
    resumed = build(config, tmp_path)
    assert resumed.state.global_step == 30 and resumed.engine.scaler_state_dict() == saved


def test_float16_on_cpu_is_a_config_error(tmp_path, data_dir):
    from wenxin.common.errors import ConfigError
    with pytest.raises(ConfigError, match="trainer.precision.amp_dtype: float16 AMP needs a GPU"):
        build(task_config(data_dir, str(tmp_path / "x"), use_amp=True, amp_dtype="float16"), tmp_path)
