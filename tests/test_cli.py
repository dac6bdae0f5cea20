"""The command line: version, help under each script's own name, and the documented exit codes."""
from __future__ import annotations

import os

from conftest import REPO, run_script, task_config, write_config
from wenxin import __version__
from wenxin.cli import main


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

    corrupt = tmp_path / "weights.pdparams"
    corrupt.write_bytes(b"not a pickle")
    config = task_config(data_dir, str(tmp_path / "out_ckpt"), pre_train_model=str(corrupt))
    assert main(["train", "--param_path", write_config(str(tmp_path / "ckpt.json"), config)]) == 4
    assert "pretrained params file is corrupt or unreadable" in capsys.readouterr().err
    assert os.path.isdir(REPO)
