"""Config loading, overrides and validation errors."""
import json
import os

import pytest

from conftest import build, task_config, write_config
from wenxin.common.errors import ConfigError
from wenxin.config.loader import load_config
from wenxin.runner import resolve_classes


def _write(tmp_path, config, name="task.json"):
    return write_config(str(tmp_path / name), config)


def _error(tmp_path, config, overrides=(), resolve=False) -> str:
    with pytest.raises(ConfigError) as info:
        loaded = load_config(_write(tmp_path, config), overrides)
        if resolve:
            resolve_classes(loaded)
    return str(info.value)


def test_missing_data_file_names_file_and_key(tmp_path, data_dir):
    config = task_config(data_dir, str(tmp_path / "out"))
    config["dataset_reader"]["dev_reader"]["config"]["data_path"] = str(tmp_path / "nope.tsv")
    from wenxin.common.errors import DataError
    with pytest.raises(DataError) as info:  # found by the config check, before any data is read; exit 3
        build(config, tmp_path)
    assert str(info.value) == f"dataset_reader.dev_reader.config.data_path: data file not found: {tmp_path / 'nope.tsv'}"


def test_eval_flag_without_reader(tmp_path, data_dir):
    config = task_config(data_dir, str(tmp_path / "out"))
    del config["dataset_reader"]["test_reader"]
    with pytest.raises(ConfigError, match="trainer.is_eval_test: set, but dataset_reader.test_reader"):
        build(config, tmp_path)


def test_refuses_to_overwrite_an_earlier_run(tmp_path, data_dir):
    out = str(tmp_path / "out")
    config = task_config(data_dir, out, max_steps=2, is_eval_dev=0, is_eval_test=0)
    build(config, tmp_path).do_train()
    before = sorted(os.listdir(os.path.join(out, "checkpoints")))
    with pytest.raises(ConfigError, match="already holds checkpoints of an earlier run"):
        build(config, tmp_path)
    assert sorted(os.listdir(os.path.join(out, "checkpoints"))) == before


def test_output_path_that_is_a_file(tmp_path, data_dir):
    target = tmp_path / "file"
    target.write_text("keep me")
    with pytest.raises(ConfigError, match="exists and is not a folder"):
        build(task_config(data_dir, str(target)), tmp_path)
    assert target.read_text() == "keep me"


def test_cli_prints_one_line_error_without_traceback(tmp_path, data_dir):
    import subprocess
    import sys
    config = task_config(data_dir, str(tmp_path / "out"))
    config["trainer"]["epoch"] = "x"
    path = _write(tmp_path, config)
    proc = subprocess.run([sys.executable, "run_trainer.py", "--param_path", path],
                          cwd=os.path.dirname(os.path.dirname(__file__)), capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: trainer.epoch: expected int, got string 'x'"
    assert "Traceback" not in proc.stderr
    assert json.loads(open(path).read())["trainer"]["epoch"] == "x"
