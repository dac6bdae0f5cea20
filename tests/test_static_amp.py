"""Static-graph AMP: the mixed-precision program, loss scaling, and what happens on this CPU.

Paddle has no float16 matmul on CPU and bfloat16 only with oneDNN on AVX512-BF16/AMX CPUs, so
the loss-scaling tests run float16 AMP with the compute ops black-listed (they stay float32)
after declaring float16 available: the scale, unscale, skip and scale-update ops then run for
real, and every gradient is a power-of-two multiple of the float32 one, so the results must
equal a run without AMP (to float32 rounding: the optimizer's update kernel differs when it is
given the skip flag).
"""
from __future__ import annotations

import os

import numpy as np
import paddle
import pytest

from conftest import build, checkpoint_state, make_tabular, tabular_config, task_config, write_tsv
from wenxin.controller.hooks.base import HookBase

FLOAT32_COMPUTE = ["matmul", "matmul_v2", "linear", "mul"]  # Paddle's op names (legacy ones included)
OVERFLOW_ROW = 3 * 32 + 5  # in the 4th batch: its gradients overflow the float32 range when scaled


class StepRecorder(HookBase):
    """Records, after every step, the loss scale and the parameters."""

    def __init__(self) -> None:
        self.steps = []

    def after_step(self) -> None:
        params = {k: np.array(v) for k, v in self.trainer.engine.model_state_dict().items()}
        self.steps.append((self.trainer.state.global_step, self.trainer.engine.loss_scale(), params))


@pytest.fixture
def float16_on_cpu(monkeypatch):
    import wenxin.controller.amp as amp
    monkeypatch.setattr(amp, "float16_kernels_available", lambda place_type: True)


def scaled_config(folder, out, rows, **trainer):
    write_tsv(os.path.join(folder, "train.tsv"), rows)
    write_tsv(os.path.join(folder, "dev.tsv"), make_tabular(100, 2))
    config = tabular_config(folder, out, "static")
    config["dataset_reader"]["train_reader"]["config"]["shuffle"] = False
    config["model"]["optimization"].update(max_grad_norm=1.0, warmup_steps=2, weight_decay=0.01)
    config["trainer"].update(max_steps=10, is_eval_dev=0, amp_custom_black_list=FLOAT32_COMPUTE, **trainer)
    return config


def fp16_scaling(**extra):
    return dict(use_amp=True, amp_dtype="float16", init_loss_scaling=1024.0, incr_every_n_steps=2,
                decr_every_n_nan_or_inf=1, **extra)


def train(config, tmp_path):
    trainer = build(config, tmp_path)
    recorder = StepRecorder()
    trainer.register_hook(recorder)
    trainer.do_train()
    return trainer, recorder.steps


@pytest.mark.parametrize("accumulate", [1, 2])
def test_loss_scaling_gives_the_unscaled_updates(tmp_path, float16_on_cpu, accumulate):
    rows = make_tabular(400, 1)
    plain, _ = train(scaled_config(str(tmp_path / "d"), str(tmp_path / "plain"), rows,
                                   gradient_accumulation_steps=accumulate), tmp_path)
    scaled, steps = train(scaled_config(str(tmp_path / "d"), str(tmp_path / "amp"), rows,
                                        gradient_accumulation_steps=accumulate, **fp16_scaling()), tmp_path)
    ops = {op.name() for op in scaled.engine.main_program.global_block().ops}
    assert {"pd_op.check_finite_and_unscale_", "pd_op.update_loss_scaling_"} <= ops
    assert [scale for _, scale, _ in steps] == [1024.0, 2048.0, 2048.0, 4096.0, 4096.0, 8192.0, 8192.0,
                                                16384.0, 16384.0, 32768.0]
    for name, value in plain.engine.model_state_dict().items():  # the updates are ~1e-3 per step
        np.testing.assert_allclose(scaled.engine.model_state_dict()[name], value, rtol=1e-6, atol=1e-7, err_msg=name)


def test_overflowing_step_is_skipped_and_the_scale_shrinks(tmp_path, float16_on_cpu):
    rows = make_tabular(400, 1)
    rows[OVERFLOW_ROW] = (" ".join(["1e38"] * 8), 1)
    config = scaled_config(str(tmp_path / "d"), str(tmp_path / "out"), rows, max_nan_steps=3, **fp16_scaling())
    trainer, steps = train(config, tmp_path)
    scales = [scale for _, scale, _ in steps]
    assert scales[:6] == [1024.0, 2048.0, 2048.0, 1024.0, 1024.0, 2048.0]  # step 4 overflowed
    for (_, _, before), (step, _, after) in zip(steps, steps[1:]):
        changed = any(not np.array_equal(before[k], after[k]) for k in before)
        assert changed == (step != 4), f"step {step}"
    assert all(np.isfinite(v).all() for v in trainer.engine.model_state_dict().values())


def test_loss_scale_is_checkpointed_and_resumed_exactly(tmp_path, float16_on_cpu):
    rows = make_tabular(400, 1)
    rows[OVERFLOW_ROW] = (" ".join(["1e38"] * 8), 1)
    out = str(tmp_path / "out")
    config = scaled_config(str(tmp_path / "d"), out, rows, max_nan_steps=3, save_model_step=5,
                           keep_optimizer_state="all", **fp16_scaling())  # resumed from step_5, not the newest
    full, steps = train(config, tmp_path)
    saved = checkpoint_state(os.path.join(out, "checkpoints", "step_5"))["scaler"]
    assert float(saved["scale"][0]) == steps[4][1] and saved["incr_count"] == 1 and saved["decr_count"] == 0
    assert set(saved) == {"scale", "incr_ratio", "decr_ratio", "incr_every_n_steps", "decr_every_n_nan_or_inf",
                          "incr_count", "decr_count", "use_dynamic_loss_scaling"}  # GradScaler.state_dict's

    config["trainer"]["load_checkpoint"] = os.path.join(out, "checkpoints", "step_5")
    config["trainer"]["output_path"] = str(tmp_path / "resumed")
    resumed = build(config, tmp_path)
    assert resumed.state.global_step == 5 and resumed.engine.loss_scale() == steps[4][1]
    resumed.do_train()
    assert resumed.engine.loss_scale() == full.engine.loss_scale()
    for name, value in full.engine.model_state_dict().items():
        np.testing.assert_array_equal(resumed.engine.model_state_dict()[name], value, err_msg=name)


def test_static_bfloat16_program_casts_the_matmuls(tmp_path, monkeypatch, data_dir):
    """On a device with bfloat16 kernels, the training program computes the white-listed ops in
    bfloat16 and evaluation stays float32 (O1). Only built here: this CPU cannot run it."""
    import wenxin.controller.amp as amp
    monkeypatch.setattr(amp, "bfloat16_kernels_available", lambda place_type: True)
    config = task_config(data_dir, str(tmp_path / "out"), use_amp=True, type="CustomStaticTrainer")
    config["model"]["is_dygraph"] = 0
    trainer = build(config, tmp_path)

    def bf16_ops(program):
        return {op.name() for op in program.global_block().ops
                if any("bf16" in str(value.type()) for value in op.results())}

    assert {"pd_op.cast", "pd_op.matmul", "pd_op.matmul_grad"} <= bf16_ops(trainer.engine.main_program)
    assert not bf16_ops(trainer.engine.eval_program("dev_reader").program)
    assert trainer.engine.loss_scale() is None  # bfloat16 is not loss-scaled
    assert all(str(v.dtype) == "paddle.float32" for v in trainer.model.state_dict().values())


@pytest.mark.skipif(paddle.base.core.supports_bfloat16(), reason="this CPU has bfloat16 kernels")
@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_amp_on_a_cpu_without_bfloat16_kernels_says_it_runs_float32(tmp_path, data_dir, capsys, mode):
    config = task_config(data_dir, str(tmp_path / "out"), use_amp=True, epoch=4, is_eval_test=0,
                         type="CustomDynamicTrainer" if mode == "dynamic" else "CustomStaticTrainer")
    config["model"]["is_dygraph"] = int(mode == "dynamic")
    config["model"]["optimization"]["learning_rate"] = 0.02
    trainer = build(config, tmp_path)
    warning = [line for line in capsys.readouterr().out.splitlines() if "WARNING wenxin: trainer.precision.use_amp:" in line]
    assert len(warning) == 1 and warning[0].endswith("this run computes in float32")
    assert trainer.amp.enabled == (mode == "dynamic")  # eager mode leaves it to Paddle, which turns it off
    assert trainer.do_train()["dev_reader"]["acc"] >= 0.9


def test_static_amp_on_text_data_trains(tmp_path, float16_on_cpu, data_dir):
    """The text classifier's static program with float16 loss scaling (compute in float32)."""
    config = task_config(data_dir, str(tmp_path / "out"), use_amp=True, amp_dtype="float16", epoch=4,
                         is_eval_test=0, type="CustomStaticTrainer",
                         amp_custom_black_list=FLOAT32_COMPUTE + ["lookup_table_v2", "embedding"])
    config["model"]["is_dygraph"] = 0
    config["model"]["optimization"]["learning_rate"] = 0.02
    trainer = build(config, tmp_path)
    assert trainer.engine.loss_scale() == 32768.0
    assert trainer.do_train()["dev_reader"]["acc"] >= 0.9
