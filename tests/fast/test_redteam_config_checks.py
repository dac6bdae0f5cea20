"""The tests of tests/test_redteam_config.py that run no Paddle operation (the fast tier)."""

import copy

import pytest

from conftest import assert_one_error_block, task_config
from test_redteam_config import (  # noqa: F401 (helpers and fixtures)
    BINARY_FILES,
    MANY_SCHEMA,
    MANY_SCHEMA_PATHS,
    MANY_TASK,
    MANY_TASK_PATHS,
    MUTATIONS,
    RAW_FILES,
    SCHEMA_MUTATIONS,
    _refused_without_harm,
    _write_config,
    run_cli,
)


@pytest.mark.paddle
@pytest.mark.parametrize("name", sorted(SCHEMA_MUTATIONS))
def test_every_key_refuses_bad_values(tmp_path, data_dir, capsys, hang_guard, name):
    hang_guard(60)
    mutate, expected = SCHEMA_MUTATIONS[name]
    _refused_without_harm(tmp_path, data_dir, capsys, mutate, expected + ":")


@pytest.mark.paddle
def test_every_problem_of_a_file_in_one_run(tmp_path, data_dir, capsys):
    config = copy.deepcopy(task_config(data_dir, str(tmp_path / "out")))
    MANY_SCHEMA(config)
    MANY_TASK(config)
    lines = assert_one_error_block(*run_cli(_write_config(tmp_path, config), capsys), MANY_SCHEMA_PATHS)
    assert lines[0] == f"error: {len(lines) - 1} problems:" and len(lines) - 1 == len(MANY_SCHEMA_PATHS)

    config = copy.deepcopy(task_config(data_dir, str(tmp_path / "out")))
    MANY_TASK(config)
    lines = assert_one_error_block(*run_cli(_write_config(tmp_path, config), capsys), MANY_TASK_PATHS)
    assert lines[0] == f"error: {len(lines) - 1} problems:" and len(lines) - 1 == len(MANY_TASK_PATHS)


def test_overrides_problems_join_the_files(tmp_path, data_dir, capsys):
    config = copy.deepcopy(task_config(data_dir, str(tmp_path / "out")))
    config["trainer"]["epoch"] = "x"
    assert_one_error_block(*run_cli(_write_config(tmp_path, config), capsys,
                                    ["trainer.seed=NaN", "trainer.nope=1", "a.b", "trainer..x=1"]),
                           ["trainer.epoch", "trainer.seed: nan", "trainer.nope: unknown key",
                            "--set 'a.b'", "--set 'trainer..x=1'"])


@pytest.mark.parametrize("name", sorted(RAW_FILES))
def test_malformed_task_file_names_position(tmp_path, capsys, hang_guard, name):
    hang_guard(60)
    filename, text, expected = RAW_FILES[name]
    path = tmp_path / filename
    path.write_text(text, encoding="utf-8")
    assert_one_error_block(*run_cli(str(path), capsys), expected)


@pytest.mark.parametrize("name", sorted(BINARY_FILES))
def test_task_file_that_is_not_utf8_text(tmp_path, capsys, name):
    data, expected = BINARY_FILES[name]
    path = tmp_path / "task.json"
    path.write_bytes(data)
    assert_one_error_block(*run_cli(str(path), capsys), [str(path), expected])


def test_task_file_that_is_a_folder_or_huge(tmp_path, capsys):
    folder = tmp_path / "task.json"
    folder.mkdir()
    assert_one_error_block(*run_cli(str(folder), capsys), "is a folder")
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as f:
        f.truncate(17 << 20)  # sparse: no time or disk spent
    assert_one_error_block(*run_cli(str(huge), capsys), "a task file may have at most")


def test_a_device_or_a_sweep_file_given_as_the_task_file_says_what_it_is(tmp_path, capsys):
    import os
    from conftest import REPO
    assert_one_error_block(*run_cli("/dev/zero", capsys), "/dev/zero: a device, not a task file")
    assert_one_error_block(*run_cli(str(tmp_path / "missing.json"), capsys), "task file not found")
    sweep = os.path.join(REPO, "examples", "sweep_text_classification_bow.yaml")
    assert_one_error_block(*run_cli(sweep, capsys), f"{sweep}: a sweep file (its parameters say which keys to "
                                                    f"vary), not a task file: run it with wenxin sweep")
    from wenxin.cli import main
    code = main(["inspect", "--param_path", sweep])
    captured = capsys.readouterr()
    assert_one_error_block(code, captured.out, captured.err, "a sweep file (its parameters say which keys to vary)")


def test_overrides_too_deep_are_one_error(tmp_path, data_dir, capsys):
    path = _write_config(tmp_path, task_config(data_dir, str(tmp_path / "out")))
    assert_one_error_block(*run_cli(path, capsys, ["a." * 5000 + "b=1"]), "a key path of 5001 levels")
    assert_one_error_block(*run_cli(path, capsys, ["trainer.x=" + "[" * 900 + "]" * 900]),
                           "--set trainer.x: nested deeper than 64 levels")


def test_a_yaml_merge_key_overridden_is_not_a_duplicate(tmp_path, data_dir, capsys):
    import yaml
    config = task_config(data_dir, str(tmp_path / "out"), max_steps=2, is_eval_dev=0, is_eval_test=0)
    text = yaml.safe_dump(config, allow_unicode=True)
    text = "defaults: &defaults\n  epoch: 5\n  max_steps: 9\n" + text.replace("trainer:\n", "trainer:\n  <<: *defaults\n", 1)
    document = yaml.safe_load(text)
    assert document["trainer"]["max_steps"] == 2 and document["trainer"]["epoch"] == 3  # the mapping's own keys win
    from wenxin.config.document import parse_document
    parsed = parse_document("task.YAML", text)  # an upper-case extension is YAML too
    assert parsed["trainer"]["max_steps"] == 2 and parsed["trainer"].duplicates == []


def test_cases_count():
    assert len(MUTATIONS) + len(SCHEMA_MUTATIONS) + len(RAW_FILES) + len(BINARY_FILES) >= 150


def test_a_recipe_run_before_its_model_and_gpu_names_every_problem_at_once(tmp_path, capsys, monkeypatch):
    """Issue 67: the ERNIE 4.5 recipe's problems came one at a time, each after Paddle loaded, and
    a folder not downloaded yet read "no tokenizer.model". Before Paddle loads, one error lists
    the missing data, the missing model folder (once, with every key naming it) and a GPU asked
    of a CPU build (where the installed builds say so)."""
    import os
    import shutil
    from conftest import REPO
    from wenxin.common.paddle_support import installed_builds
    shutil.copy(os.path.join(REPO, "examples", "chat_sft_ernie45_0.3b_lora.yaml"), tmp_path / "recipe.yaml")
    monkeypatch.chdir(tmp_path)
    lines = assert_one_error_block(*run_cli("recipe.yaml", capsys), [
        "dataset_reader.train_reader.config.data_path: data file not found",
        "model.model_dir: folder not found: ./models/ERNIE-4.5-0.3B-PT (also named by "
        "dataset_reader.train_reader.fields[0].model_dir, dataset_reader.dev_reader.fields[0].model_dir); "
        "download the model there first"])
    assert not any("tokenizer.model" in line for line in lines)
    cpu_only = [name for name, _ in installed_builds()] == ["paddlepaddle"]
    assert any("PADDLE_PLACE_TYPE: 'gpu', but the installed Paddle" in line for line in lines) == cpu_only
