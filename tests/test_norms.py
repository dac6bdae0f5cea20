"""``NormsHook``: gradient norms, weight norms and update ratios, checked against closed forms
through the CLI in both graph modes."""
import json
import math
import os

import numpy as np
import pytest

from conftest import checkpoint_params, plain_sgd, run_script, task_config, write_config

LR = 0.2


@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_norms_match_plain_sgd_and_the_checkpoints(tmp_path, data_dir, mode):
    out = str(tmp_path / "out")
    config = plain_sgd(task_config(data_dir, out, max_steps=6, save_model_step=1, keep_checkpoint_max=6,
                                   is_eval_dev=0, is_eval_test=0, keep_optimizer_state="all",
                                   hooks=[{"type": "NormsHook", "params": {"interval": 3}}]), lr=LR)
    if mode == "static":
        config["model"]["is_dygraph"] = 0
        config["trainer"]["type"] = "CustomStaticTrainer"
    proc = run_script(tmp_path, ["--param_path", write_config(str(tmp_path / "task.json"), config)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(os.path.join(out, "logs", "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    norms = {r["step"]: r for r in records if r["tag"] == "norms"}
    layers = {r["step"]: r for r in records if r["tag"] == "norms_per_layer"}
    assert sorted(norms) == sorted(layers) == [3, 6]
    assert "[norms] step 3: grad_norm" in proc.stdout + proc.stderr
    assert "norms_per_layer" not in proc.stdout + proc.stderr  # per-layer values stay out of the console
    for step in (3, 6):
        r = norms[step]
        # plain SGD without clipping or decay: the update is the learning rate times the gradient
        assert r["update_norm"] == pytest.approx(LR * r["grad_norm"], rel=1e-4)
        after = checkpoint_params(os.path.join(out, "checkpoints", f"step_{step}"))
        before = checkpoint_params(os.path.join(out, "checkpoints", f"step_{step - 1}"))
        expected = math.sqrt(sum(float(np.sum(np.square(np.asarray(v, dtype=np.float64)))) for v in after.values()))
        assert r["weight_norm"] == pytest.approx(expected, rel=1e-6)
        change = math.sqrt(sum(float(np.sum(np.square(np.asarray(after[k], dtype=np.float64) - before[k])))
                               for k in after))
        assert r["update_norm"] == pytest.approx(change, rel=1e-5)
        # the layers add up to the totals; every layer of the model is there
        per_layer = layers[step]
        grads = [v for k, v in per_layer.items() if k.startswith("grad_norm/")]
        assert math.sqrt(sum(v * v for v in grads)) == pytest.approx(r["grad_norm"], rel=1e-6)
        assert {k.split("/", 1)[1] for k in per_layer if k.startswith("weight_norm/")} == \
            {name.rsplit(".", 1)[0] for name in after}
        assert r["update_ratio"] > 0
