"""``wenxin lr-find``: the learning-rate range test, through the CLI, on a problem whose good
learning rate is known."""
import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, make_tabular, tabular_config, write_config, write_tsv
from wenxin.lr_find import centred_mean, suggest


def scaled_task(tmp_path, scale, mode="dynamic"):
    """Softmax regression (no hidden layer) with plain SGD on features multiplied by ``scale``.
    The loss's curvature grows with scale**2, and so the learning rate SGD can take falls with it:
    about 1 for unit features (the Hessian of the cross-entropy at the start is 0.5 x the features'
    covariance, whose largest eigenvalue is about 1.3, so steps overshoot above ~2/0.65 = 3), and
    about 100 times less at scale 10."""
    folder = tmp_path / f"data{scale}"
    rows = [(" ".join(f"{float(v) * scale:.5f}" for v in features.split()), label)
            for features, label in make_tabular(512, 1)]
    write_tsv(str(folder / "train.tsv"), rows)
    write_tsv(str(folder / "dev.tsv"), rows[:64])
    config = tabular_config(str(folder), str(tmp_path / f"out{scale}"), mode=mode)
    config["model"].update(hidden_sizes=[], dropout=0.0)
    config["model"]["optimization"] = {"optimizer": "sgd", "learning_rate": 0.1}
    config["dataset_reader"]["train_reader"]["config"]["batch_size"] = 128
    return write_config(str(tmp_path / f"task{scale}.json"), config)


def lr_find(tmp_path, task, *args):
    proc = subprocess.run([sys.executable, "-m", "wenxin.cli", "lr-find", "--param_path", task, *args],
                          capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                          env={**os.environ, "GLOG_minloglevel": "2", "PYTHONPATH": REPO})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.parametrize("mode", ["dynamic", pytest.param("static", marks=pytest.mark.slow)])
def test_lr_find_finds_the_region_of_the_known_good_learning_rate(tmp_path, mode):
    suggestions = {}
    for scale in (1, 10):
        task = scaled_task(tmp_path, scale, mode)
        output = str(tmp_path / f"found{scale}")
        proc = lr_find(tmp_path, task, "--min_lr", "1e-5", "--max_lr", "100", "--steps", "80", "--output", output)
        with open(os.path.join(output, "lr_find.json"), encoding="utf-8") as f:
            found = json.load(f)
        points = found["points"]
        # every step's rate is min_lr times the same factor; the loss diverged before max_lr
        rates = [p["lr"] for p in points]
        np.testing.assert_allclose(rates, 1e-5 * (1e7 ** (1 / 79)) ** np.arange(len(rates)), rtol=1e-9)
        assert len(points) < 80 and ("passed 4x its lowest" in found["stop_reason"] or "the loss is" in found["stop_reason"])
        with open(os.path.join(output, "lr_find.csv"), encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        assert [float(r["loss"]) for r in rows] == [p["loss"] for p in points]
        with open(os.path.join(output, "lr_find.png"), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
        assert f"suggested learning rate: {found['suggested_lr']:.3g}" in proc.stdout
        assert not os.path.exists(tmp_path / f"out{scale}" / "checkpoints")  # nothing of a run was kept
        suggestions[scale] = found["suggested_lr"]
    # within about a decade of the rates the curvature allows, and falling with it
    assert 0.05 <= suggestions[1] <= 3, suggestions
    assert 5e-4 <= suggestions[10] <= 0.05, suggestions
    assert 10 <= suggestions[1] / suggestions[10] <= 1000, suggestions


def test_suggestion_is_the_steepest_fall_before_the_minimum():
    rates = list(np.logspace(-4, 0, 9))
    smoothed = [None, 0.99, 0.95, 0.7, 0.5, 0.45, 0.44, 0.6, None]  # steepest around 1e-2.5
    assert suggest(rates, smoothed) == pytest.approx(rates[3])
    assert suggest(rates, [0.5, 0.7, 0.9] + [1.0] * 6) is None  # never fell
    # the centred mean does not lag: a falling line stays in place
    losses = [10.0 - i for i in range(30)]
    means = centred_mean(losses)
    assert means[:1] == [None] and means[-1:] == [None]
    assert means[1:-1] == pytest.approx(losses[1:-1])


def test_bad_bounds_are_one_error(tmp_path):
    task = scaled_task(tmp_path, 1)
    proc = subprocess.run([sys.executable, "-m", "wenxin.cli", "lr-find", "--param_path", task, "--min_lr", "1",
                           "--max_lr", "0.1"], capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                          env={**os.environ, "GLOG_minloglevel": "2", "PYTHONPATH": REPO})
    assert proc.returncode == 2 and "--min_lr/--max_lr: need 0 < min_lr < max_lr" in proc.stderr
    assert "Traceback" not in proc.stderr
