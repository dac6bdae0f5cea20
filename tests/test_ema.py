"""``EMAHook``: the average against its closed form, evaluation and best/ with the averaged
weights, and an exact resume, through the CLI in both graph modes."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, checkpoint_params, checkpoint_state, plain_sgd, run_script, task_config, write_config

DECAY = 0.6


def ema_config(data_dir, out, mode, max_steps=6, **trainer):
    config = plain_sgd(task_config(data_dir, out, max_steps=max_steps, save_model_step=1, keep_checkpoint_max=10,
                                   eval_step=3, is_eval_test=0, metric="loss", metric_mode="min",
                                   hooks=[{"type": "EMAHook", "params": {"decay": DECAY}}], **trainer), lr=0.3)
    if mode == "static":
        config["model"]["is_dygraph"] = 0
        config["trainer"]["type"] = "CustomStaticTrainer"
    return config


def average_of(folder):
    return checkpoint_state(folder)["hooks"]["EMAHook"]["average"]


@pytest.mark.parametrize("mode", ["dynamic", pytest.param("static", marks=pytest.mark.slow)])
def test_the_average_is_the_closed_form_evaluation_uses_it_and_a_resume_continues_it(tmp_path, data_dir, mode):
    out = str(tmp_path / "out")
    task = write_config(str(tmp_path / "task.json"), ema_config(data_dir, out, mode))
    proc = run_script(tmp_path, ["--param_path", task])
    assert proc.returncode == 0, proc.stderr[-3000:]
    trained = [checkpoint_params(os.path.join(out, "checkpoints", f"step_{t}")) for t in range(1, 7)]
    for step in (1, 4, 6):
        # ema_1 = w_1; ema_t = d ema_(t-1) + (1 - d) w_t
        expected = {k: np.asarray(v, dtype=np.float64) for k, v in trained[0].items()}
        for weights in trained[1:step]:
            expected = {k: DECAY * expected[k] + (1 - DECAY) * np.asarray(weights[k]) for k in expected}
        got = average_of(os.path.join(out, "checkpoints", f"step_{step}"))
        assert sorted(got) == sorted(expected)
        for name in expected:
            np.testing.assert_allclose(np.asarray(got[name]), expected[name], rtol=1e-5, atol=1e-7, err_msg=name)
        # the periodic checkpoints keep the trained weights, not the average (from step 2 on)
        assert step == 1 or any(not np.allclose(np.asarray(trained[step - 1][k]), np.asarray(got[k])) for k in got)
    # best/ holds the averaged weights of its step, and they score what the run logged
    best = os.path.join(out, "checkpoints", "best")
    best_step = json.load(open(os.path.join(best, "trainer_state.json")))["global_step"]
    best_params = checkpoint_params(best)
    for name, value in average_of(os.path.join(out, "checkpoints", f"step_{best_step}")).items():
        np.testing.assert_array_equal(np.asarray(best_params[name]), np.asarray(value), err_msg=name)
    with open(os.path.join(out, "logs", "metrics.jsonl"), encoding="utf-8") as f:
        logged = [r for r in map(json.loads, f) if r["tag"] == "dev" and r["step"] == best_step][0]
    if mode == "dynamic":
        scored = subprocess.run([sys.executable, "-m", "wenxin.cli", "evaluate", "--param_path", task, "--checkpoint",
                                 best, "--reader", "dev"], capture_output=True, text=True, timeout=300,
                                env={**os.environ, "GLOG_minloglevel": "2", "PYTHONPATH": REPO})
        assert scored.returncode == 0, scored.stderr[-3000:]
        assert json.loads(scored.stdout.splitlines()[-1])["dev_reader"]["loss"] == pytest.approx(logged["loss"], rel=1e-5)
    check_resume_continues_the_average(tmp_path, data_dir, mode, out)


def check_resume_continues_the_average(tmp_path, data_dir, mode, straight):
    """A run of 4 steps resumed to 6 ends with the straight run's average and weights, bit for bit."""
    resumed = str(tmp_path / "resumed")
    for steps in (4, 6):
        config = ema_config(data_dir, resumed, mode, max_steps=steps, resume="auto")
        proc = run_script(tmp_path, ["--param_path", write_config(str(tmp_path / "b.json"), config)])
        assert proc.returncode == 0, proc.stderr[-3000:]
    expected = average_of(os.path.join(straight, "checkpoints", "step_6"))
    got = average_of(os.path.join(resumed, "checkpoints", "step_6"))
    for name in expected:
        np.testing.assert_array_equal(np.asarray(got[name]), np.asarray(expected[name]), err_msg=name)
    for name, value in checkpoint_params(os.path.join(straight, "checkpoints", "step_6")).items():
        np.testing.assert_array_equal(np.asarray(checkpoint_params(os.path.join(resumed, "checkpoints", "step_6"))[name]),
                                      np.asarray(value), err_msg=name)
