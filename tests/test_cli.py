"""The command line: version, help under each script's own name, and the documented exit codes."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys

from conftest import REPO, run_script, task_config, without_log, write_config
from wenxin import __version__
from wenxin.cli import main
from wenxin.common.logs import LOG_LEVEL_ENV


def test_version_and_help_name_each_script(tmp_path):
    for script in ("run_trainer.py", "run_infer.py", "wenxin/cli.py"):
        proc = run_script(tmp_path, ["--version"], script)
        assert proc.returncode == 0 and proc.stdout.startswith(f"wenxin {__version__} (paddlepaddle"), proc
    proc = run_script(tmp_path, ["--help"], "run_trainer.py")
    assert proc.returncode == 0 and proc.stdout.startswith("usage: run_trainer.py")
    assert "75 stopped by a signal after saving a checkpoint" in proc.stdout
    proc = run_script(tmp_path, ["--help"], "run_infer.py")
    assert proc.stdout.startswith("usage: run_infer.py")


def test_exit_codes_tell_config_data_and_checkpoint_errors_apart(tmp_path, data_dir, capsys):
    config = task_config(data_dir, str(tmp_path / "out"))
    config["trainer"]["epoch"] = "x"
    assert main(["train", "--param_path", write_config(str(tmp_path / "config.json"), config)]) == 2

    bad = tmp_path / "bad.tsv"
    bad.write_text("好书\t1\n只有一列\n", encoding="utf-8")
    config = task_config(data_dir, str(tmp_path / "out_data"))
    config["dataset_reader"]["train_reader"]["config"]["data_path"] = str(bad)
    assert main(["train", "--param_path", write_config(str(tmp_path / "data.json"), config)]) == 3
    assert f"{bad}:2: expected 2 columns" in capsys.readouterr().err
    config["dataset_reader"]["train_reader"]["config"]["data_path"] = str(tmp_path / "no_such.tsv")
    assert main(["train", "--param_path", write_config(str(tmp_path / "missing.json"), config)]) == 3  # as README says
    assert "data file not found" in capsys.readouterr().err
    config["trainer"]["epoch"] = "x"  # with a task-file problem beside it: a task-file error
    assert main(["train", "--param_path", write_config(str(tmp_path / "both.json"), config)]) == 2
    capsys.readouterr()

    corrupt = tmp_path / "weights.pdparams"
    corrupt.write_bytes(b"not a pickle")
    config = task_config(data_dir, str(tmp_path / "out_ckpt"), pre_train_model=str(corrupt))
    assert main(["train", "--param_path", write_config(str(tmp_path / "ckpt.json"), config)]) == 4
    assert "pretrained params file is corrupt or unreadable" in capsys.readouterr().err
    assert os.path.isdir(REPO)


def _train_reporting_paddle(tmp_path, config) -> subprocess.CompletedProcess:
    """``wenxin train`` on ``config`` in a fresh interpreter that prints whether Paddle was loaded."""
    path = write_config(str(tmp_path / "config.json"), config)
    code = ("import sys; from wenxin.cli import main; status = main(['train', '--param_path', sys.argv[1]]); "
            "print('paddle loaded:', 'paddle' in sys.modules); sys.exit(status)")
    return subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, cwd=str(tmp_path),
                          timeout=120, env={**os.environ, "PYTHONPATH": REPO})


def test_task_file_errors_come_before_paddle_loads(tmp_path, data_dir):
    config = task_config(data_dir, str(tmp_path / "out"))
    config["trainer"]["epoch"] = 0
    proc = _train_reporting_paddle(tmp_path, config)
    assert proc.returncode == 2 and proc.stdout.strip() == "paddle loaded: False", proc
    assert proc.stderr.strip() == "error: trainer.epoch: 0 is below the minimum 1"


def _trained(tmp_path, data_dir, capsys, **trainer):
    out = str(tmp_path / "out")
    config = task_config(data_dir, out, epoch=3, save_inference=True, **trainer)
    path = write_config(str(tmp_path / "task.json"), config)
    assert main(["train", "--param_path", path]) == 0
    return out, path, capsys.readouterr()


def _records(out):
    with open(os.path.join(out, "logs", "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_a_run_ends_with_its_result_outputs_and_next_commands(tmp_path, data_dir, capsys):
    # the "best" dev loss is the highest here: the first evaluation's, so the result is not the final step
    out, path, captured = _trained(tmp_path, data_dir, capsys, progress_bar="on", load_best_at_end=True,
                                   metric="loss", metric_mode="max")
    log = captured.err.splitlines()  # the log goes to stderr, the run's result (its closing summary) to stdout
    assert "loading Paddle" in log[0] and f"train {path}: task text_classification" in log[0]
    assert "train_reader: loading data from" in captured.err and "[train_reader data]" in captured.err
    state = json.load(open(os.path.join(out, "checkpoints", "best", "trainer_state.json")))
    best_step, records = state["global_step"], _records(out)
    dev = [r for r in records if r["tag"] in ("dev", "best_dev") and r["step"] == best_step][-1]
    summary = captured.out.splitlines()
    assert len(summary) == 5 and summary[0] == "done: step 45 of 45", captured.out
    assert not any(line in captured.err for line in summary)  # shown once: on stdout
    with open(os.path.join(out, "logs", "train.log"), encoding="utf-8") as f:
        assert [line.split("wenxin: ", 1)[1] for line in f.read().splitlines()[-5:]] == summary  # and kept
    assert best_step == 15 and summary[1].startswith(
        f"result: {out}/checkpoints/best (step 15, best dev loss; dev loss {dev['loss']:.4g}, test loss")
    assert f"inference model {out}/checkpoints/best/inference" in summary[2]
    assert summary[3].startswith(f"next: wenxin predict --model_dir {out}/checkpoints/best/inference")
    assert summary[4].strip() == f"wenxin evaluate --param_path {path} --checkpoint {out}/checkpoints/best"
    # the best checkpoint's final re-evaluation is recorded at its own step
    assert all(r["step"] == best_step for r in records if r["tag"].startswith("best_"))

    # resuming the finished run: nothing trained or evaluated again, nothing appended; what a process
    # killed after its last save, before pruning and rewriting the index, left is finished
    index_path = os.path.join(out, "checkpoints", "index.json")
    index = json.load(open(index_path))
    folders = sorted(os.listdir(os.path.join(out, "checkpoints")))
    assert index["latest"] == "step_45" and "step_45" in folders
    assert [e["name"] for e in index["checkpoints"] if e["kind"] == "periodic"] == ["step_45", "step_30", "step_15"]
    for step in (3, 4):  # older than the three (keep_checkpoint_max) kept
        shutil.copytree(os.path.join(out, "checkpoints", "step_45"), os.path.join(out, "checkpoints", f"step_{step}"))
    json.dump({**index, "latest": "step_30", "checkpoints": index["checkpoints"][:1]}, open(index_path, "w"))
    assert main(["train", "--param_path", path, "--set", "trainer.resume=auto"]) == 0
    assert sorted(os.listdir(os.path.join(out, "checkpoints"))) == folders
    assert json.load(open(index_path)) == index
    again = capsys.readouterr()
    assert "the run already finished at step 45" in again.err and "nothing to train: step 45 of 45" in again.err
    assert "[dev]" not in again.err and "unused values" not in again.err and "epoch 4" not in again.err
    assert _records(out) == records
    # the suggested commands carry the run's overrides
    assert f"wenxin evaluate --param_path {path} --set trainer.resume=auto --checkpoint {out}/checkpoints/best" \
        in again.out


def test_the_resume_hint_reproduces_the_run(tmp_path):
    from types import SimpleNamespace

    from wenxin.controller.checkpoint_folders import CheckpointManager
    from wenxin.controller.summary import run_summary
    trainer = SimpleNamespace(
        trainer_config={"output_path": str(tmp_path / "elsewhere"), "logging": {"visualdl": False},
                        "evaluation": {"load_best_at_end": False, "metric": "acc"}},
        state=SimpleNamespace(interrupted=True, global_step=7, max_steps=30, best_step=-1),
        checkpoints=CheckpointManager(str(tmp_path / "elsewhere" / "checkpoints"), keep_max=2))
    overrides = ["trainer.output_path=" + str(tmp_path / "elsewhere"), "model.hidden_size=8", "trainer.resume=off",
                 "trainer.checkpoints.load_checkpoint=x"]  # what chose the checkpoint, flat or grouped, is left out
    line = run_summary(trainer, "task file.json", overrides)[0]
    assert line == (f"stopped at step 7 of 30 after saving a checkpoint; resume: wenxin train --param_path "
                    f"'task file.json' --set trainer.output_path={tmp_path / 'elsewhere'} --set model.hidden_size=8 "
                    f"--set trainer.checkpoints.resume=auto")


def test_evaluate_scores_a_checkpoint_as_training_did(tmp_path, data_dir, capsys):
    out, path, _ = _trained(tmp_path, data_dir, capsys)
    step = 30
    checkpoint = os.path.join(out, "checkpoints", f"step_{step}")
    assert main(["evaluate", "--param_path", path, "--checkpoint", checkpoint]) == 0
    scores = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    logged = {r["tag"]: r for r in _records(out) if r["step"] == step and r["tag"] in ("dev", "test")}
    for tag in ("dev", "test"):
        assert abs(scores[f"{tag}_reader"]["acc"] - logged[tag]["acc"]) < 1e-9
        assert abs(scores[f"{tag}_reader"]["loss"] - logged[tag]["loss"]) < 1e-5
    assert main(["evaluate", "--param_path", path, "--checkpoint", checkpoint, "--reader", "test"]) == 0
    assert set(json.loads(capsys.readouterr().out.strip().splitlines()[-1])) == {"test_reader"}
    assert main(["evaluate", "--param_path", path, "--checkpoint", str(tmp_path / "nothing")]) == 4


def test_predict_takes_text_stdin_or_a_file(tmp_path, data_dir, capsys, monkeypatch):
    from wenxin.inference.predictor import Predictor
    out, _, _ = _trained(tmp_path, data_dir, capsys)
    best = os.path.join(out, "checkpoints", "best")
    texts = ["好棒赞的书", "差烂坏"]
    expected = [f"{t}\t{r['label']}\t{r['probability']:.6f}"
                for t, r in zip(texts, Predictor(os.path.join(best, "inference")).predict([[t] for t in texts]))]
    capsys.readouterr()  # what the Predictor made here logged
    assert main(["predict", "--model_dir", best, "--text", texts[0], "--text", texts[1]]) == 0
    assert capsys.readouterr().out.splitlines() == expected
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(texts) + "\n"))
    assert main(["predict", "--model_dir", os.path.join(best, "inference")]) == 0
    assert capsys.readouterr().out.splitlines() == expected
    source = tmp_path / "inputs.txt"
    source.write_text("\n".join(texts) + "\n", encoding="utf-8")
    assert main(["predict", "--model_dir", best, "--input", str(source)]) == 0
    assert capsys.readouterr().out.splitlines() == expected
    for onednn in ("on", "off"):  # the same 6 digits either way
        assert main(["predict", "--model_dir", best, "--onednn", onednn, "--text", texts[0], "--text", texts[1]]) == 0
        assert capsys.readouterr().out.splitlines() == expected
    for folder in (out, os.path.join(out, "checkpoints")):  # a run's folder names the exports it holds
        assert main(["predict", "--model_dir", folder]) == 2
        err = capsys.readouterr().err
        assert "is not an exported model (no preprocess.json); the exported models in it: " in err, err
        assert os.path.join(best, "inference") in err and "wenxin export" not in err, err
    assert main(["predict", "--model_dir", best, "--input", str(tmp_path / "missing.txt")]) == 3


def test_examples_are_copied_without_overwriting(tmp_path, capsys):
    assert main(["examples", str(tmp_path)]) == 0
    copied = sorted(os.listdir(tmp_path / "examples"))
    assert "text_classification_bow.json" in copied and "prepare_sentiment_data.py" in copied
    assert "sweep_text_classification_bow.yaml" in copied
    assert "__init__.py" not in copied and "data" not in copied
    mine = tmp_path / "examples" / "text_classification_bow.json"
    mine.write_text("{}", encoding="utf-8")
    assert main(["examples", str(tmp_path)]) == 0
    assert mine.read_text(encoding="utf-8") == "{}"
    assert "0 files written" in capsys.readouterr().err


def test_running_out_of_memory_is_one_error_line_not_a_traceback(tmp_path, data_dir):
    import resource
    config = task_config(data_dir, str(tmp_path / "out"), epoch=1)
    config["model"]["embedding"]["emb_dim"] = 65536  # widths the schema allows, and a 17 GB layer between them
    config["model"]["hidden_size"] = 65536
    path = write_config(str(tmp_path / "task.json"), config)

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1_300_000_000, 1_300_000_000))
    proc = subprocess.run([sys.executable, os.path.join(REPO, "run_trainer.py"), "--param_path", path],
                          capture_output=True, text=True, timeout=300, preexec_fn=limit_memory,
                          env={**os.environ, "GLOG_minloglevel": "2"})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert without_log(proc.stderr)[0].startswith("error: out of memory (") and "Traceback" not in proc.stderr
    assert "streaming: true" in proc.stderr


def test_python_dash_m_wenxin_and_the_cli_file_are_the_wenxin_command(tmp_path):
    env = {**os.environ, "PYTHONPATH": REPO, "GLOG_minloglevel": "2"}
    for command in ([sys.executable, "-m", "wenxin"], [sys.executable, os.path.join(REPO, "wenxin", "cli.py")]):
        proc = subprocess.run([*command, "--version"], capture_output=True, text=True, cwd=str(tmp_path), env=env,
                              timeout=120)
        assert proc.returncode == 0 and proc.stdout.startswith(f"wenxin {__version__} ("), proc
    proc = subprocess.run([sys.executable, "-m", "wenxin", "serve", "--help"], capture_output=True, text=True,
                          cwd=str(tmp_path), env=env, timeout=120)
    assert proc.stdout.startswith("usage: wenxin serve") and "default: 8866" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "wenxin", "serve", "--model_dir", ".", "--port", "99999"],
                          capture_output=True, text=True, cwd=str(tmp_path), env=env, timeout=120)
    assert proc.returncode == 2 and "argument --port: 99999 is not a port number (0 to 65535)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_unknown_task_and_a_key_typo_are_named_before_paddle_loads(tmp_path, data_dir):
    config = task_config(data_dir, str(tmp_path / "out"))
    config["task"] = "text_clasification"
    config["trainer"]["train_log_stpe"] = 3
    proc = _train_reporting_paddle(tmp_path, config)
    assert proc.returncode == 2 and proc.stdout.strip() == "paddle loaded: False", proc
    assert "task: cannot find task package 'text_clasification' (did you mean 'text_classification'?)" in proc.stderr
    assert ("trainer.train_log_stpe: unknown key (did you mean trainer.logging.train_log_step?)"
            in proc.stderr) and "eval_step, " not in proc.stderr  # not every allowed key on one line


def test_log_level_from_the_option_or_the_environment(tmp_path, data_dir):
    config = task_config(data_dir, str(tmp_path / "out"))
    config["trainer"]["epoch"] = 0  # refused before Paddle loads: quick
    path = write_config(str(tmp_path / "config.json"), config)
    env = {**os.environ, "PYTHONPATH": REPO, "GLOG_minloglevel": "2"}
    quiet = subprocess.run([sys.executable, "-m", "wenxin", "--log-level", "error", "evaluate", "--param_path", path,
                            "--checkpoint", str(tmp_path)], capture_output=True, text=True, timeout=120, env=env)
    assert quiet.returncode == 2 and quiet.stdout == "" and quiet.stderr.startswith("error: trainer.epoch")
    env[LOG_LEVEL_ENV] = "WARNING"
    proc = subprocess.run([sys.executable, "-m", "wenxin", "examples", str(tmp_path / "copy")], capture_output=True,
                          text=True, timeout=120, env=env)
    assert proc.returncode == 0 and all(line.startswith(str(tmp_path / "copy")) for line in proc.stdout.splitlines())


def test_a_wrong_model_folder_is_found_before_paddle_loads(tmp_path):
    """A mistyped --model_dir is an error in a moment, not after Paddle's import (28 s on a busy
    machine): the folder is checked first."""
    program = ("import sys\nfrom wenxin.cli import main\ncode = main(['predict', '--model_dir', sys.argv[1], "
               "'--text', 'x'])\nprint(code, 'paddle' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", program, str(tmp_path / "nothing")], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": REPO})
    assert proc.stdout.split() == ["2", "False"], proc.stdout + proc.stderr[-2000:]
    assert f"--model_dir: folder not found: {tmp_path / 'nothing'}" in proc.stderr


def test_a_missing_checkpoint_or_onnx_extra_is_found_before_paddle_loads(tmp_path, data_dir):
    """export --format onnx without paddle2onnx did the whole Paddle export first, then failed."""
    task = write_config(str(tmp_path / "task.json"), task_config(data_dir, str(tmp_path / "out")))
    program = ("import importlib.util, sys\nfrom wenxin.cli import main\nfind = importlib.util.find_spec\n"
               "importlib.util.find_spec = lambda name, *a: None if name == 'paddle2onnx' else find(name, *a)\n"
               "code = main(sys.argv[1:])\nprint(code, 'paddle' in sys.modules)")
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    for argv, said in ((["export", "--param_path", task, "--checkpoint", str(checkpoint), "--format", "onnx"],
                        '--format onnx: paddle2onnx not installed: pip install "wenxin[onnx]"'),
                       (["evaluate", "--param_path", task, "--checkpoint", str(tmp_path / "none")],
                        f"--checkpoint: not found: {tmp_path / 'none'}")):
        proc = subprocess.run([sys.executable, "-c", program, *argv], capture_output=True, text=True, timeout=600,
                              env={**os.environ, "PYTHONPATH": REPO})
        assert proc.stdout.split()[1:] == ["False"] and proc.stdout.split()[0] != "0", proc.stdout + proc.stderr
        assert said in proc.stderr, proc.stderr[-2000:]
