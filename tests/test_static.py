"""The static-graph trainer: learning, parity with dynamic mode, and cross-mode checkpoints."""
import json
import os

import numpy as np
import paddle
import pytest

from conftest import build, checkpoint_state, task_config
from wenxin.common.errors import ConfigError


def static_config(config):
    config["model"]["is_dygraph"] = 0
    config["trainer"]["type"] = "CustomStaticTrainer"
    return config


def losses_of(out):
    with open(os.path.join(out, "logs", "metrics.jsonl"), encoding="utf-8") as f:
        return [r["loss"] for r in map(json.loads, f) if r["tag"] == "train"]


@pytest.mark.parametrize("model_type", ["BowClassification", "CnnClassification", "LstmClassification"])
def test_static_trainer_learns(tmp_path, data_dir, model_type):
    config = static_config(task_config(data_dir, str(tmp_path / "out"), model_type=model_type, epoch=4))
    config["model"]["optimization"]["learning_rate"] = 0.02
    metrics = build(config, tmp_path).do_train()
    assert metrics["dev_reader"]["acc"] >= 0.95 and metrics["test_reader"]["acc"] >= 0.95
    assert paddle.in_dynamic_mode()  # the static trainer does not leave the process in static mode


@pytest.mark.parametrize("model_type", ["BowClassification", "CnnClassification", "TransformerClassification"])
def test_dynamic_static_parity(tmp_path, data_dir, model_type):
    """Same seed, initial weights and batches: losses agree within 1e-5 for 20 steps, with
    warmup, linear decay, weight decay and global-norm clipping on."""
    def parity_config(name):
        config = task_config(data_dir, str(tmp_path / name), model_type=model_type, max_steps=20,
                             train_log_step=1, is_eval_dev=0, is_eval_test=0)
        config["model"]["dropout"] = 0.0  # dropout masks come from different generators per mode
        if model_type == "TransformerClassification":
            config["model"]["encoder"] = {"transformer": {"hidden_size": 16, "num_heads": 2, "num_layers": 1,
                                                          "dropout": 0.0, "attention_dropout": 0.0}}
        config["model"]["optimization"].update(learning_rate=0.01, warmup_steps=5, max_grad_norm=0.5,
                                               weight_decay=0.01)
        return config

    dynamic = build(parity_config("dynamic"), tmp_path)
    init = str(tmp_path / "init.pdparams")
    paddle.save({k: v.numpy() for k, v in dynamic.engine.model_state_dict().items()}, init)
    static_cfg = static_config(parity_config("static"))
    static_cfg["trainer"]["load_parameters"] = init
    static = build(static_cfg, tmp_path)
    dynamic.do_train()
    static.do_train()
    d, s = losses_of(str(tmp_path / "dynamic")), losses_of(str(tmp_path / "static"))
    assert len(d) == len(s) == 20
    np.testing.assert_allclose(s, d, atol=1e-5, rtol=0)
    assert np.mean(d[-5:]) < np.mean(d[:5])  # it trained
    for name, value in dynamic.engine.model_state_dict().items():
        np.testing.assert_allclose(static.engine.model_state_dict()[name], value.numpy(), atol=1e-4, err_msg=name)


@pytest.mark.parametrize("first,second", [("dynamic", "static"), ("static", "dynamic")])
def test_checkpoint_loads_across_modes(tmp_path, data_dir, first, second):
    def config_for(mode, out, **extra):
        config = task_config(data_dir, str(tmp_path / out), is_eval_test=0, **extra)
        config["model"]["dropout"] = 0.0
        return static_config(config) if mode == "static" else config

    source = build(config_for(first, "a", max_steps=6, is_eval_dev=0), tmp_path)
    source.do_train()
    ckpt = os.path.join(str(tmp_path / "a"), "checkpoints", "step_6")
    target = build(config_for(second, "b", max_steps=10, load_checkpoint=ckpt), tmp_path)
    assert target.state.global_step == 6
    for name, value in source.engine.model_state_dict().items():
        np.testing.assert_array_equal(np.asarray(target.engine.model_state_dict()[name]), np.asarray(value))
    source_metrics = source.evaluate("dev_reader")
    target_metrics = target.evaluate("dev_reader")
    assert target_metrics["acc"] == source_metrics["acc"]
    assert target_metrics["loss"] == pytest.approx(source_metrics["loss"], abs=1e-5)
    target.do_train()  # optimizer state restored: training continues
    assert target.state.global_step == 10
    warm = build(config_for(second, "c", max_steps=2, load_parameters=ckpt, is_eval_dev=0), tmp_path)
    assert warm.state.global_step == 0  # warm start: weights only


def test_static_mode_requires_static_trainer(tmp_path, data_dir):
    config = task_config(data_dir, str(tmp_path / "out"))
    config["model"]["is_dygraph"] = 0
    with pytest.raises(ConfigError, match="dynamic-mode trainer but model.is_dygraph=0 asks for static"):
        build(config, tmp_path)


def test_static_resume_continues_with_identical_losses(tmp_path, data_dir):
    from conftest import losses_of as step_losses, resume_config

    def config_for(out):
        return static_config(resume_config(data_dir, str(tmp_path / out)))  # dropout 0.3, shuffling

    full = build(config_for("full"), tmp_path)
    full.do_train()
    config = config_for("interrupted")
    config["trainer"]["hooks"] = [{"type": "StopAtStepHook", "params": {"step": 17}}]  # mid-epoch
    build(config, tmp_path).do_train()
    config["trainer"]["hooks"] = []
    config["trainer"]["resume"] = "auto"
    resumed = build(config, tmp_path)
    assert resumed.state.global_step == 17
    resumed.do_train()
    expected, got = step_losses(str(tmp_path / "full")), step_losses(str(tmp_path / "interrupted"))
    np.testing.assert_array_equal([got[s] for s in range(1, 46)], [expected[s] for s in range(1, 46)])
    for name, value in full.engine.model_state_dict().items():
        np.testing.assert_array_equal(resumed.engine.model_state_dict()[name], value, err_msg=name)


def test_static_max_pooling_runs_under_onednn(tmp_path, data_dir):
    """Paddle 3.3's adaptive_max_pool1d throws in static graphs with oneDNN; max_over_time avoids it."""
    import subprocess
    import sys

    from conftest import REPO, write_config
    config = static_config(task_config(data_dir, str(tmp_path / "out"), max_steps=3, is_eval_test=0))
    config["model"]["pooling"] = "mean_max"
    path = write_config(str(tmp_path / "task.json"), config)
    proc = subprocess.run([sys.executable, os.path.join(REPO, "run_trainer.py"), "--param_path", path],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "FLAGS_use_onednn": "1", "FLAGS_use_mkldnn": "1",  # 3.0's name
                               "GLOG_minloglevel": "2"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "[dev] step 3" in proc.stderr


def test_static_gradient_accumulation_equals_larger_batch(tmp_path, data_dir):
    from conftest import plain_sgd

    def config(out, batch, accumulate):
        c = static_config(plain_sgd(task_config(data_dir, str(tmp_path / out), max_steps=4, is_eval_dev=0,
                                                is_eval_test=0, gradient_accumulation_steps=accumulate,
                                                save_model_step=2)))
        c["dataset_reader"]["train_reader"]["config"]["batch_size"] = batch
        c["model"]["optimization"]["max_grad_norm"] = 0.05  # clipping applies to the accumulated gradient
        return c

    big = build(config("big", 16, 1), tmp_path)
    init = str(tmp_path / "init.pdparams")
    paddle.save(big.engine.model_state_dict(), init)
    small_cfg = config("small", 8, 2)
    small_cfg["trainer"]["load_parameters"] = init
    small = build(small_cfg, tmp_path)
    big.do_train()
    small.do_train()
    assert small.state.global_step == 4
    before = paddle.load(init)
    changed = False
    for name, value in big.engine.model_state_dict().items():
        np.testing.assert_allclose(small.engine.model_state_dict()[name], value, atol=1e-6, err_msg=name)
        changed |= not np.allclose(value, before[name])
    assert changed
    # the gradient buffers are not part of checkpoints, and a checkpoint resumes in dynamic mode
    ckpt = os.path.join(str(tmp_path / "small"), "checkpoints", "step_4")
    assert not any("@GRAD_BUFFER" in k for k in checkpoint_state(ckpt, "optimizer"))
    dynamic_cfg = task_config(data_dir, str(tmp_path / "dyn"), max_steps=6, is_eval_dev=0, is_eval_test=0,
                              load_checkpoint=ckpt)
    assert build(plain_sgd(dynamic_cfg), tmp_path).state.global_step == 4


@pytest.mark.parametrize("model_type", ["BowClassification", "CnnClassification"])
def test_one_task_file_starts_both_modes_from_the_same_weights(tmp_path, data_dir, model_type):
    """Issue 67: a newcomer flipping model.is_dygraph expects the same numbers. Without anything
    shared by hand, the static run starts from the eager run's initial weights (the data order is
    the same), so with dropout off the losses agree within the kernels' float rounding."""
    runs = {}
    for name, config in (("dynamic", task_config(data_dir, str(tmp_path / "dynamic"), model_type=model_type)),
                         ("static", static_config(task_config(data_dir, str(tmp_path / "static"),
                                                              model_type=model_type)))):
        config["model"]["dropout"] = 0.0
        config["trainer"].update(max_steps=6, train_log_step=1, is_eval_dev=0, is_eval_test=0)
        trainer = build(config, tmp_path)
        initial = {k: np.asarray(v).copy() for k, v in trainer.engine.model_state_dict().items()}
        trainer.do_train()
        runs[name] = initial, losses_of(str(tmp_path / name))
    (eager_start, eager_losses), (static_start, static_losses) = runs["dynamic"], runs["static"]
    assert sorted(eager_start) == sorted(static_start)
    for name, value in eager_start.items():
        np.testing.assert_array_equal(static_start[name], value, err_msg=name)
    assert len(eager_losses) == 6
    np.testing.assert_allclose(static_losses, eager_losses, rtol=0, atol=1e-5)  # the kernels' float rounding
