"""``trainer.profile``: a window of training steps recorded with paddle.profiler, through the CLI."""
import json
import os

import pytest

from conftest import run_script, task_config, write_config


@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_profile_writes_a_chrome_trace_and_the_operator_table(tmp_path, data_dir, mode):
    out = str(tmp_path / "out")
    config = task_config(data_dir, out, max_steps=8, is_eval_dev=0, is_eval_test=0, save_model_step=8,
                         profile={"start_step": 3, "steps": 2})
    if mode == "static":
        config["model"]["is_dygraph"] = 0
        config["trainer"]["type"] = "CustomStaticTrainer"
    proc = run_script(tmp_path, ["--param_path", write_config(str(tmp_path / "task.json"), config)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = os.path.join(out, "profile")
    traces = [n for n in os.listdir(folder) if n.endswith(".paddle_trace.json")]
    assert len(traces) == 1 and traces[0].startswith("rank0")
    with open(os.path.join(folder, traces[0]), encoding="utf-8") as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    # two recorded steps, and the model's operators inside them
    steps = sorted({e["name"].split("[")[0] for e in events if e.get("name", "").startswith("ProfileStep")})
    assert steps == ["ProfileStep#0", "ProfileStep#1"]
    assert any("matmul" in e.get("name", "") or "embedding" in e.get("name", "") for e in events)
    if mode == "static":  # its ops on one thread: Paddle's profiler crashed with the executor's own threads
        assert len({e["tid"] for e in events if e.get("cat") == "Operator"}) == 1
        assert "runs its ops on one thread" in proc.stderr
    summary = open(os.path.join(folder, "summary.txt"), encoding="utf-8").read()
    assert "Operator Summary" in summary and "Overview Summary" in summary
    log = proc.stdout + proc.stderr
    assert "profile of steps 3-4" in log and "Operator Summary" in log
    # the run itself is unchanged: it trained all its steps
    assert os.path.isdir(os.path.join(out, "checkpoints", "step_8"))


def test_a_window_past_the_end_is_closed_with_a_warning(tmp_path, data_dir):
    out = str(tmp_path / "out")
    config = task_config(data_dir, out, max_steps=4, is_eval_dev=0, is_eval_test=0,
                         profile={"start_step": 3, "steps": 10})
    proc = run_script(tmp_path, ["--param_path", write_config(str(tmp_path / "task.json"), config)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "inside the window (steps 3-12)" in proc.stdout + proc.stderr
    assert "profile of steps 3-4" in proc.stdout + proc.stderr
    assert os.path.isfile(os.path.join(out, "profile", "summary.txt"))
