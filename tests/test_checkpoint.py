"""Checkpoints: exact resume, retention, corrupt files, and pretrained loading with reports."""
import json
import os

import numpy as np
import paddle
import pytest

from conftest import build, losses_of, resume_config, task_config
from wenxin.common.errors import CheckpointError, ConfigError
from wenxin.controller.checkpoint import verify


def params_of(trainer):
    return {k: v.numpy().copy() for k, v in trainer.model.state_dict().items()}


@pytest.mark.parametrize("stop_at", [17, 30])  # mid-epoch (15 steps/epoch) and exactly at an epoch end
def test_resume_continues_with_identical_losses_and_parameters(tmp_path, data_dir, stop_at):
    full = build(resume_config(data_dir, str(tmp_path / "full")), tmp_path)
    full.do_train()
    assert full.state.steps_per_epoch == 15 and full.state.global_step == 45

    out = str(tmp_path / "interrupted")
    config = resume_config(data_dir, out)
    config["trainer"]["hooks"] = [{"type": "StopAtStepHook", "params": {"step": stop_at}}]
    first = build(config, tmp_path)
    first.do_train()
    assert first.state.global_step == stop_at
    config["trainer"]["hooks"] = []
    config["trainer"]["resume"] = "auto"
    second = build(config, tmp_path)
    assert second.state.global_step == stop_at
    second.do_train()

    expected, got = losses_of(str(tmp_path / "full")), losses_of(out)
    assert sorted(got) == list(range(1, 46))
    np.testing.assert_array_equal([got[s] for s in range(1, 46)], [expected[s] for s in range(1, 46)])
    for name, value in params_of(full).items():
        np.testing.assert_array_equal(params_of(second)[name], value, err_msg=name)
    assert second.state.best_metric == full.state.best_metric


def test_resume_auto_skips_incomplete_checkpoint(tmp_path, data_dir):
    out = str(tmp_path / "out")
    config = task_config(data_dir, out, max_steps=10, save_model_step=5, is_eval_dev=0, is_eval_test=0,
                         keep_optimizer_state="all")
    build(config, tmp_path).do_train()
    ckpts = os.path.join(out, "checkpoints")
    os.remove(os.path.join(ckpts, "step_10", "trainer_state.json"))  # as if damaged after the save
    config["trainer"]["resume"] = "auto"
    trainer = build(config, tmp_path)
    assert trainer.state.global_step == 5


def test_the_newest_two_checkpoints_keep_optimizer_state_by_default(tmp_path, data_dir):
    """The resume point and the resumable checkpoint before it (the fallback of a damaged newest
    one) keep optimizer state; older ones and best keep only what evaluation needs."""
    from wenxin.controller.checkpoint import has_optimizer_state
    out = str(tmp_path / "out")
    config = task_config(data_dir, out, max_steps=15, save_model_step=5, is_eval_test=0, eval_step=5)
    build(config, tmp_path).do_train()
    ckpts = os.path.join(out, "checkpoints")
    for resumable in ("step_15", "step_10"):
        assert has_optimizer_state(os.path.join(ckpts, resumable))
    for older in ("step_5", "best"):  # verified, evaluable, exportable; not resumable
        assert not has_optimizer_state(os.path.join(ckpts, older))
        assert not os.path.exists(os.path.join(ckpts, older, "optimizer.json"))
        verify(os.path.join(ckpts, older))
    config["trainer"].update(load_parameters=os.path.join(ckpts, "step_5"))
    config["trainer"]["output_path"] = str(tmp_path / "warm")
    assert build(config, tmp_path).state.global_step == 0  # its weights start a new run
    config["trainer"].update(load_parameters="", load_checkpoint=os.path.join(ckpts, "step_5"))
    with pytest.raises(CheckpointError, match="step_5: holds no optimizer state"):
        build(config, tmp_path)
    # a damaged newest checkpoint falls back to the one before it, which kept its optimizer state
    _flip_middle(os.path.join(ckpts, "step_15", "optimizer.safetensors"))
    config["trainer"].update(load_checkpoint="", resume="auto", output_path=out)
    assert build(config, tmp_path).state.global_step == 10
    # with both damaged there is nothing to continue from
    os.remove(os.path.join(ckpts, "step_10", "trainer_state.json"))
    with pytest.raises(CheckpointError, match="without optimizer state"):
        build(config, tmp_path)


def _flip_middle(path):
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x01
    open(path, "wb").write(bytes(data))


def test_corrupt_checkpoint_gives_clear_error_and_keeps_files(tmp_path, data_dir):
    out = str(tmp_path / "out")
    config = task_config(data_dir, out, max_steps=5, is_eval_dev=0, is_eval_test=0)
    build(config, tmp_path).do_train()
    model_file = os.path.join(out, "checkpoints", "step_5", "model.safetensors")
    with open(model_file, "r+b") as f:
        f.truncate(100)
    config["trainer"]["load_checkpoint"] = os.path.join(out, "checkpoints", "step_5")
    with pytest.raises(CheckpointError) as info:
        build(config, tmp_path)
    assert model_file in str(info.value) and "corrupt" in str(info.value)
    assert os.path.getsize(model_file) == 100
    config["trainer"]["load_checkpoint"] = str(tmp_path / "missing")
    with pytest.raises(ConfigError, match="trainer.load_checkpoint: checkpoint folder not found"):
        build(config, tmp_path)


def test_checkpoint_of_a_different_model_is_refused(tmp_path, data_dir):
    out = str(tmp_path / "bow")
    build(task_config(data_dir, out, max_steps=3, is_eval_dev=0, is_eval_test=0), tmp_path).do_train()
    config = task_config(data_dir, str(tmp_path / "cnn"), model_type="CnnClassification",
                         load_checkpoint=os.path.join(out, "checkpoints", "step_3"))
    with pytest.raises(CheckpointError) as info:
        build(config, tmp_path)
    message = str(info.value)
    assert "of another run" in message and "model.type: checkpoint 'BowClassification', now 'CnnClassification'" \
        in message
    config = task_config(data_dir, str(tmp_path / "wide"),  # same type, other shapes
                         load_checkpoint=os.path.join(out, "checkpoints", "step_3"))
    config["model"]["hidden_size"] = 32
    with pytest.raises(CheckpointError) as info:
        build(config, tmp_path)
    message = str(info.value)
    assert "does not match the model" in message and "shape mismatch" in message and "fc.weight" in message


def test_pretrained_loading_reports_missing_unexpected_and_mismatched(tmp_path, data_dir):
    out = str(tmp_path / "bow")
    source = build(task_config(data_dir, out, max_steps=3, is_eval_dev=0, is_eval_test=0), tmp_path)
    source.do_train()
    params = {k: v.numpy() for k, v in source.model.state_dict().items()}
    renamed = {("old_emb." + k[len("embedding."):] if k.startswith("embedding.") else k): v
               for k, v in params.items()}
    renamed["extra.weight"] = np.zeros(3, dtype="float32")
    path = str(tmp_path / "pretrained.pdparams")
    paddle.save(renamed, path)

    config = task_config(data_dir, str(tmp_path / "cnn"), model_type="CnnClassification", max_steps=1,
                         pre_train_model=[{"name": "bow", "params_path": path,
                                           "prefix_map": {"old_emb.": "embedding."}}])
    target = build(config, tmp_path)
    np.testing.assert_array_equal(target.model.embedding.weight.numpy(), params["embedding.weight"])
    np.testing.assert_array_equal(target.model.output_layer.weight.numpy(), params["output_layer.weight"])
    report = target.load_pretrained(path, {"old_emb.": "embedding."})
    assert "extra.weight" in report.unexpected
    assert any(name == "fc.weight" for name, _, _ in report.mismatched)  # BoW 16 vs CNN 32 inputs
    assert any(name.startswith("encoder.convs") for name in report.missing)
    assert "embedding.weight" in report.loaded


def test_pretrained_errors_name_the_file(tmp_path, data_dir):
    config = task_config(data_dir, str(tmp_path / "a"), pre_train_model=str(tmp_path / "none.pdparams"))
    with pytest.raises(ConfigError, match="trainer.pre_train_model.0..params_path: pretrained params file not found: .*none.pdparams"):
        build(config, tmp_path)
    garbage = tmp_path / "garbage.pdparams"
    garbage.write_bytes(b"not a pickle at all")
    config = task_config(data_dir, str(tmp_path / "b"), pre_train_model=str(garbage))
    with pytest.raises(CheckpointError, match=f"corrupt or unreadable: {garbage}"):
        build(config, tmp_path)
    unrelated = str(tmp_path / "unrelated.pdparams")
    paddle.save({"x.weight": np.zeros(2, dtype="float32")}, unrelated)
    config = task_config(data_dir, str(tmp_path / "c"), load_parameters=unrelated)
    with pytest.raises(CheckpointError, match="no parameter matches the model"):
        build(config, tmp_path)


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_signal_saves_a_checkpoint_and_exits_cleanly(tmp_path, data_dir, sig):
    import signal
    import subprocess
    import sys
    import time

    from conftest import REPO, saved_checkpoint, write_config
    out = str(tmp_path / "out")
    config = task_config(data_dir, out, max_steps=100000, save_model_step=20, train_log_step=1000,
                         is_eval_test=0, eval_step=1000)
    path = write_config(str(tmp_path / "task.json"), config)
    proc = subprocess.Popen([sys.executable, os.path.join(REPO, "run_trainer.py"), "--param_path", path],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "GLOG_minloglevel": "2"})
    deadline = time.time() + 120
    while saved_checkpoint(os.path.join(out, "checkpoints")) is None and time.time() < deadline:
        time.sleep(0.05)  # the first periodic checkpoint exists (step_20 itself is soon pruned)
    proc.send_signal(getattr(signal, sig))
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 75, stderr[-2000:]  # preempted after saving: resumable, not success
    assert f"stopped: received {sig}" in stderr
    latest = saved_checkpoint(os.path.join(out, "checkpoints"))
    step = int(latest.split("_")[1])
    assert step >= 20  # the checkpoint of the step it stopped at
    state = json.load(open(os.path.join(out, "checkpoints", latest, "trainer_state.json")))
    assert state["global_step"] == step
    config["trainer"]["resume"] = "auto"
    assert build(config, tmp_path).state.global_step == step


def test_saving_best_keeps_the_optimizer_state_of_the_resume_point(tmp_path):
    """A new best between two periodic checkpoints must not strip the newest periodic one: a run
    killed before the next periodic save resumes from it."""
    from wenxin.controller.checkpoint import has_optimizer_state
    from wenxin.controller.checkpoint_folders import CheckpointManager

    def write(folder):
        for name in ("model.safetensors", "optimizer.json", "optimizer.safetensors", "trainer_state.json",
                     "config.json", "extra.json"):
            with open(os.path.join(folder, name), "w") as f:
                f.write(name)

    manager = CheckpointManager(str(tmp_path), keep_max=3, keep_optimizer_state="latest")
    step_10 = manager.save("step_10", write)
    best = manager.save("best", write)  # a new best at step 15
    assert has_optimizer_state(step_10) and not has_optimizer_state(best)
    assert manager.latest() == step_10
    step_20 = manager.save("step_20", write)
    assert has_optimizer_state(step_20) and has_optimizer_state(step_10)  # step_10: the fallback
    step_30 = manager.save("step_30", write)
    assert has_optimizer_state(step_30) and has_optimizer_state(step_20) and not has_optimizer_state(step_10)


def test_a_manager_holds_only_its_own_checkpoints_and_prunes_nothing_before_its_folder_exists(tmp_path):
    """A run resumed at its end finishes the last save's pruning only when the checkpoint it
    continues is its own (``load_checkpoint`` may name another run's)."""
    from wenxin.controller.checkpoint_folders import CheckpointManager
    manager = CheckpointManager(str(tmp_path / "run"), keep_max=1)
    manager.recover()  # no checkpoints folder yet: nothing to do, no error
    assert manager.latest() is None and manager.describe()["checkpoints"] == []
    assert not os.path.exists(manager.root)
    own = os.path.join(str(tmp_path), "run", "checkpoints", "step_5")
    assert manager.holds(own) and manager.holds(own + os.sep)
    assert manager.holds(os.path.relpath(own))
    assert not manager.holds(os.path.join(str(tmp_path), "other", "checkpoints", "step_5"))
    assert not manager.holds(os.path.join(own, "step_5"))
