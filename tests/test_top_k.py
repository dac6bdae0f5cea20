"""Checkpoints kept by metric (``trainer.save_top_k``), ``checkpoints/index.json`` and
``trainer.checkpoints.resume: best``, through the command line."""
import json
import os
import random

import numpy as np
import pytest

from conftest import (checkpoint_params, run_script, saved_checkpoint, sigkill_at_random_moments, start_training,
                      task_config, write_config)
from wenxin.controller.checkpoint import is_valid

STEPS = 60


def top_k_config(data_dir, out, **trainer):
    settings = dict(max_steps=STEPS, eval_step=3, save_model_step=7, keep_checkpoint_max=2, save_top_k=4,
                    metric="loss", metric_mode="min", train_log_step=1000, is_eval_test=0, resume="auto")
    settings.update(trainer)
    config = task_config(data_dir, out, **settings)
    config["model"]["dropout"] = 0.3  # the RNG state is part of what must resume
    # a large step: the dev loss falls, then wanders, so the top 4 mixes an early and later steps
    config["model"]["optimization"]["learning_rate"] = 0.1
    return config


def dev_losses(out):
    """{step: dev loss} of a run's evaluations (a resumed run's repeated ones agree)."""
    with open(os.path.join(out, "logs", "metrics.jsonl"), encoding="utf-8") as f:
        return {r["step"]: r["loss"] for r in map(json.loads, f) if r["tag"] == "dev"}


def top_folders(out):
    return sorted(n for n in os.listdir(os.path.join(out, "checkpoints")) if n.startswith("top_"))


def index_of(out):
    with open(os.path.join(out, "checkpoints", "index.json"), encoding="utf-8") as f:
        return json.load(f)


def test_top_k_keeps_exactly_the_k_best_across_sigkills_and_resume(tmp_path, data_dir):
    reference = str(tmp_path / "reference")
    proc = start_training(write_config(str(tmp_path / "reference.json"), top_k_config(data_dir, reference)))
    out = str(tmp_path / "killed")
    path = write_config(str(tmp_path / "killed.json"), top_k_config(data_dir, out))
    # each run is killed after it saved once more (7 steps), so the last start resumes after step
    # 35: the top-k list it continues with was restored from the checkpoint, not rebuilt
    kills = sigkill_at_random_moments(path, out, random.Random(7), runs=5)  # while the reference runs
    assert proc.wait(timeout=300) == 0, proc.stderr.read()
    assert kills >= 2
    proc = start_training(path)
    assert proc.wait(timeout=300) == 0, proc.stderr.read()

    losses = dev_losses(reference)
    assert sorted(losses) == list(range(3, STEPS + 1, 3))
    assert dev_losses(out) == losses  # the resumed evaluations are the uninterrupted ones
    best4 = sorted(losses, key=lambda step: (losses[step], step))[:4]
    assert min(best4) < 35 < max(best4), best4
    for run in (reference, out):
        assert top_folders(run) == sorted(f"top_step_{s}" for s in best4), run
        for step in best4:
            assert is_valid(os.path.join(run, "checkpoints", f"top_step_{step}")) is None
        assert not [n for n in os.listdir(os.path.join(run, "checkpoints")) if n.startswith((".", "after_"))]
        index = index_of(run)
        assert index["metric"] == "loss" and index["metric_mode"] == "min" and index["latest"] == f"step_{STEPS}"
        tops = [e for e in index["checkpoints"] if e["kind"] == "top"]
        assert [(e["rank"], e["name"], e["step"]) for e in tops] == \
            [(i + 1, f"top_step_{s}", s) for i, s in enumerate(best4)]
        assert [e["metric"] for e in tops] == [losses[s] for s in best4]
        best = [e for e in index["checkpoints"] if e["kind"] == "best"]
        assert [(e["step"], e["metric"]) for e in best] == [(best4[0], losses[best4[0]])]
        periodic = [(e["name"], e["resumable"]) for e in index["checkpoints"] if e["kind"] == "periodic"]
        assert periodic == [(f"step_{STEPS}", True), ("step_56", True)]  # the newest and its fallback
        assert all(e["time"] and not e["resumable"] for e in tops)
    for step in best4:  # the same weights as the uninterrupted run's
        expected = checkpoint_params(os.path.join(reference, "checkpoints", f"top_step_{step}"))
        got = checkpoint_params(os.path.join(out, "checkpoints", f"top_step_{step}"))
        for name in expected:
            np.testing.assert_array_equal(np.asarray(got[name]), np.asarray(expected[name]), err_msg=name)


@pytest.mark.slow
def test_resume_best_continues_from_the_best_checkpoint_and_sets_later_ones_aside(tmp_path, data_dir):
    out = str(tmp_path / "out")
    # "best" is the highest dev loss here, so that it comes early (the loss falls as it trains)
    first = top_k_config(data_dir, out, max_steps=30, eval_step=5, save_model_step=10, resume="none",
                         save_top_k=0, keep_checkpoint_max=3, metric_mode="max", train_log_step=1)
    proc = run_script(tmp_path, ["--param_path", write_config(str(tmp_path / "first.json"), first)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    # the default keeps no optimizer state in best: one error naming the key, nothing moved
    again = dict(first, trainer={**first["trainer"], "resume": "best", "max_steps": 40})
    before = sorted(os.listdir(os.path.join(out, "checkpoints")))
    proc = run_script(tmp_path, ["--param_path", write_config(str(tmp_path / "again.json"), again)])
    assert proc.returncode != 0 and "trainer.checkpoints.resume: best:" in proc.stderr
    assert "trainer.checkpoints.keep_optimizer_state: latest_and_best" in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(os.listdir(os.path.join(out, "checkpoints"))) == before

    out = str(tmp_path / "kept")
    first["trainer"].update(output_path=out, keep_optimizer_state="latest_and_best")
    proc = run_script(tmp_path, ["--param_path", write_config(str(tmp_path / "first.json"), first)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    losses = dev_losses(out)
    best_step = min(losses, key=lambda step: (-losses[step], step))
    assert best_step < 30, losses
    later = [n for n in os.listdir(os.path.join(out, "checkpoints"))
             if n.startswith("step_") and int(n[5:]) > best_step]
    again["trainer"].update(output_path=out, keep_optimizer_state="latest_and_best")
    proc = run_script(tmp_path, ["--param_path", write_config(str(tmp_path / "again.json"), again)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"best at step {best_step} " in proc.stdout + proc.stderr
    aside = [n for n in os.listdir(os.path.join(out, "checkpoints")) if n.startswith(f"after_step_{best_step}-")]
    assert len(aside) == 1 and sorted(os.listdir(os.path.join(out, "checkpoints", aside[0]))) == sorted(later)
    with open(os.path.join(out, "logs", "metrics.jsonl"), encoding="utf-8") as f:
        train_steps = [r["step"] for r in map(json.loads, f) if r["tag"] == "train"]
    assert train_steps.count(best_step + 1) == 2  # trained once in each run: continued from best
    assert saved_checkpoint(os.path.join(out, "checkpoints")) == "step_40"
