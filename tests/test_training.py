"""End-to-end training on a separable synthetic task, and the output folder it leaves."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, build, saved_checkpoint, task_config, write_config


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.mark.parametrize("model_type", ["BowClassification", "CnnClassification", "LstmClassification"])
def test_learns_separable_task(tmp_path, data_dir, model_type):
    out = str(tmp_path / "out")
    config = task_config(data_dir, out, model_type=model_type, epoch=4)
    config["model"]["optimization"]["learning_rate"] = 0.02
    metrics = build(config, tmp_path).do_train()
    assert metrics["dev_reader"]["acc"] >= 0.95, metrics
    assert metrics["test_reader"]["acc"] >= 0.95, metrics
    assert metrics["test_reader"]["auc"] >= 0.98


def test_output_folder_layout(tmp_path, data_dir):
    out = str(tmp_path / "out")
    config = task_config(data_dir, out, epoch=2, keep_checkpoint_max=1, visualdl=True)
    trainer = build(config, tmp_path)
    trainer.do_train()
    steps_per_epoch = trainer.state.steps_per_epoch
    ckpts = os.path.join(out, "checkpoints")
    assert sorted(os.listdir(ckpts)) == ["best", "index.json", f"step_{2 * steps_per_epoch}"]  # keep-last-1
    assert saved_checkpoint(ckpts) == f"step_{2 * steps_per_epoch}"
    for name in ("model.safetensors", "extra.json", "extra.safetensors",
                 "trainer_state.json", "config.json", "manifest.json", "vocab/text_a.txt", "vocab/label.txt"):
        assert os.path.isfile(os.path.join(ckpts, "best", name))
    for name in ("optimizer.json", "optimizer.safetensors"):  # only where a run resumes: the newest
        assert not os.path.exists(os.path.join(ckpts, "best", name))
        assert os.path.isfile(os.path.join(ckpts, f"step_{2 * steps_per_epoch}", name))
    assert json.load(open(os.path.join(ckpts, "best", "trainer_state.json")))["best_metric"] is not None
    records = read_jsonl(os.path.join(out, "logs", "metrics.jsonl"))
    tags = {r["tag"] for r in records}
    assert tags == {"train", "dev", "test"}
    train = [r for r in records if r["tag"] == "train"]
    assert {"loss", "lr", "step_time", "step_cpu_time", "data_time", "eta_sec", "epoch"} <= set(train[0])
    assert all(record["step_cpu_time"] > 0 for record in train)
    assert os.path.getsize(os.path.join(out, "logs", "train.log")) > 0
    assert os.listdir(os.path.join(out, "vdl"))
    assert open(os.path.join(out, "vocab", "label.txt")).read() == "0\n1\n"
    assert json.load(open(os.path.join(out, "config.json")))["trainer"]["epoch"] == 2


def test_warmup_and_decay_schedule(tmp_path, data_dir):
    config = task_config(data_dir, str(tmp_path / "out"), max_steps=10, is_eval_dev=0, is_eval_test=0,
                         train_log_step=1)
    config["model"]["optimization"].update(learning_rate=0.1, warmup_steps=4)
    trainer = build(config, tmp_path)
    trainer.do_train()
    lrs = [r["lr"] for r in read_jsonl(os.path.join(str(tmp_path / "out"), "logs", "metrics.jsonl"))]
    # logged after each step's scheduler advance: warmup 0.025..0.1 over 4 steps, then linear decay to 0
    assert lrs[:4] == pytest.approx([0.025, 0.05, 0.075, 0.1])
    assert lrs[4:] == pytest.approx([0.1 * (1 - k / 6) for k in range(1, 7)])


def test_run_trainer_script_end_to_end(tmp_path, data_dir):
    out = str(tmp_path / "out")
    path = write_config(str(tmp_path / "task.json"), task_config(data_dir, out, epoch=1))
    env = {**os.environ, "GLOG_minloglevel": "2"}
    proc = subprocess.run([sys.executable, os.path.join(REPO, "run_trainer.py"), "--param_path", path,
                           "--set", "trainer.eval_step=5", "--set", "trainer.save_model_step=5"],
                          cwd=str(tmp_path), capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "[dev] step 5" in proc.stderr and "[test] step 5" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout.startswith("done: step 15 of 15\nresult: ")  # the log on stderr, the result on stdout
    assert os.path.isdir(os.path.join(out, "checkpoints", "step_10"))
