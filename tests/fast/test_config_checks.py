"""The tests of tests/test_config.py that run no Paddle operation (the fast tier)."""

import pytest
from wenxin.common.errors import ConfigError
from wenxin.config.loader import apply_overrides, load_config

from conftest import task_config
from test_config import _error, _write  # noqa: F401 (helpers and fixtures)


@pytest.mark.paddle
def test_defaults_are_filled(tmp_path, data_dir):
    config = load_config(_write(tmp_path, task_config(data_dir, str(tmp_path / "out"))))
    assert config["trainer"]["checkpoints"]["keep_checkpoint_max"] == 3
    assert config["trainer"]["checkpoints"]["resume"] == "none"
    field = config["dataset_reader"]["train_reader"]["fields"][0]
    assert field["truncation_type"] == 0 and field["padding_id"] == 0
    assert config["dataset_reader"]["train_reader"]["config"]["skip_bad_lines"] is False


def test_unknown_key_suggests_near_miss(tmp_path, data_dir):
    config = task_config(data_dir, str(tmp_path / "out"))
    config["trainer"]["train_log_stpe"] = 5
    message = _error(tmp_path, config)
    assert message.startswith("trainer.train_log_stpe: unknown key")
    assert "did you mean trainer.logging.train_log_step?" in message


def test_unknown_nested_key_names_list_position(tmp_path, data_dir):
    config = task_config(data_dir, str(tmp_path / "out"))
    config["dataset_reader"]["dev_reader"]["fields"][1]["vocab_pth"] = ""
    message = _error(tmp_path, config)
    assert message.startswith("dataset_reader.dev_reader.fields[1].vocab_pth: unknown key")
    assert "vocab_path" in message


@pytest.mark.parametrize("key,value,expected", [
    ("epoch", "three", "trainer.epoch: expected int, got string 'three'"),
    ("epoch", 0, "trainer.epoch: 0 is below the minimum 1"),
    ("is_eval_dev", 2, "trainer.is_eval_dev: expected bool"),
    ("metric_mode", "maximum", "trainer.metric_mode: 'maximum' is not one of ['max', 'min']"),
    ("use_amp", "yes", "trainer.use_amp: expected bool"),
])
def test_wrong_types_and_values(tmp_path, data_dir, key, value, expected):
    config = task_config(data_dir, str(tmp_path / "out"))
    config["trainer"][key] = value
    assert _error(tmp_path, config).startswith(expected)


@pytest.mark.paddle
def test_bool_keys_accept_wenxin_style_ints(tmp_path, data_dir):
    config = task_config(data_dir, str(tmp_path / "out"), is_eval_dev=0, use_amp=1)
    loaded = load_config(_write(tmp_path, config))
    assert loaded["trainer"]["evaluation"]["is_eval_dev"] is False and loaded["trainer"]["precision"]["use_amp"] is True


@pytest.mark.paddle
def test_missing_required_keys(tmp_path, data_dir):
    config = task_config(data_dir, str(tmp_path / "out"))
    del config["dataset_reader"]["train_reader"]["config"]["data_path"]
    assert _error(tmp_path, config) == "dataset_reader.train_reader.config.data_path: required key is missing"
    config = task_config(data_dir, str(tmp_path / "out"))
    del config["dataset_reader"]["train_reader"]
    assert "dataset_reader.train_reader" in _error(tmp_path, config)
    config = task_config(data_dir, str(tmp_path / "out"))
    del config["model"]["type"]
    assert _error(tmp_path, config) == "model.type: required key is missing"


@pytest.mark.paddle
def test_model_specific_keys_are_checked_against_the_model_class(tmp_path, data_dir):
    config = task_config(data_dir, str(tmp_path / "out"), model_type="CnnClassification")
    config["model"]["num_filter"] = 8
    message = _error(tmp_path, config, resolve=True)
    assert message.startswith("model.num_filter: unknown key") and "num_filters" in message
    config = task_config(data_dir, str(tmp_path / "out"), model_type="CnnClassification")
    config["model"]["filter_sizes"] = [2, "3"]
    assert _error(tmp_path, config, resolve=True).startswith("model.filter_sizes[1]: expected int")


@pytest.mark.paddle
def test_unknown_registered_types_suggest(tmp_path, data_dir):
    config = task_config(data_dir, str(tmp_path / "out"))
    config["model"]["type"] = "BowClasification"
    message = _error(tmp_path, config, resolve=True)
    assert "model.type: unknown model type 'BowClasification'" in message
    assert "did you mean 'BowClassification'" in message
    config = task_config(data_dir, str(tmp_path / "out"))
    config["trainer"]["hooks"] = [{"type": "EarlyStopHook"}]
    assert "did you mean 'EarlyStoppingHook'" in _error(tmp_path, config, resolve=True)
    config = task_config(data_dir, str(tmp_path / "out"))
    config["trainer"]["hooks"] = [{"type": "EarlyStoppingHook", "params": {"patiance": 2}}]
    assert "trainer.hooks[0].params.patiance: unknown key" in _error(tmp_path, config, resolve=True)


@pytest.mark.paddle
def test_unknown_task_and_mode_mismatch(tmp_path, data_dir):
    config = task_config(data_dir, str(tmp_path / "out"))
    config["task"] = "no_such_task"
    assert "task: cannot find task package 'no_such_task'" in _error(tmp_path, config, resolve=True)
    config = task_config(data_dir, str(tmp_path / "out"))
    config["model"]["is_dygraph"] = 0
    assert "dynamic-mode trainer but model.is_dygraph=0" in _error(tmp_path, config, resolve=True)


def test_json_syntax_error_names_line_and_column(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{\n  "task": "x",\n  "trainer": {"epoch": 1,}\n}\n', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    assert str(info.value).startswith(f"{path}:3:")
    assert "invalid JSON" in str(info.value)


@pytest.mark.paddle
def test_yaml_task_file_and_syntax_error(tmp_path, data_dir):
    import yaml
    config = task_config(data_dir, str(tmp_path / "out"))
    good = tmp_path / "task.yaml"
    good.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    assert load_config(str(good))["trainer"]["epoch"] == 3
    bad = tmp_path / "bad.yaml"
    bad.write_text("task: x\ntrainer:\n  epoch: [1, 2\n  eval_step: 3\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(str(bad))
    assert str(info.value).startswith(f"{bad}:") and "invalid YAML" in str(info.value)


def test_missing_task_file():
    with pytest.raises(ConfigError, match="task file not found: /no/such.json"):
        load_config("/no/such.json")


@pytest.mark.paddle
def test_overrides_parse_json_values_and_list_indices(tmp_path, data_dir):
    config = task_config(data_dir, str(tmp_path / "out"))
    loaded = load_config(_write(tmp_path, config), [
        "trainer.epoch=7", "trainer.metric=f1", "model.optimization.learning_rate=0.5",
        "dataset_reader.train_reader.fields.0.max_seq_len=9", "trainer.use_amp=true"])
    assert loaded["trainer"]["epoch"] == 7 and loaded["trainer"]["evaluation"]["metric"] == "f1"
    assert loaded["trainer"]["precision"]["use_amp"] is True
    assert loaded["model"]["optimization"]["learning_rate"] == 0.5
    assert loaded["dataset_reader"]["train_reader"]["fields"][0]["max_seq_len"] == 9
    with pytest.raises(ConfigError, match="not an index"):
        apply_overrides({"a": [1]}, ["a.3=1"])
    with pytest.raises(ConfigError, match="expected key.path=value"):
        apply_overrides({}, ["trainer.epoch"])
    assert "trainer.epochs: unknown key" in _error(tmp_path, config, ["trainer.epochs=2"])
