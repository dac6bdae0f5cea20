"""The trainer section grouped by the part that owns each key, and the flat keys of earlier task
files (and of ``--set``, sweeps and the studio's form) read into their groups."""
import copy
import json

import pytest
from wenxin.common.errors import ConfigError, Problems
from wenxin.config.loader import config_from_dict
from wenxin.config.trainer_schema import GROUP_OF, GROUPS, TRAINER, canonical_path, group_keys, refuse_flat_keys

from conftest import task_config, write_config

# every key of the flat trainer section before the groups: each must still load
FLAT_KEYS = (
    "type PADDLE_PLACE_TYPE PADDLE_IS_FLEET cpu_threads seed epoch max_steps gradient_accumulation_steps recompute "
    "train_log_step eval_step save_model_step is_eval_dev is_eval_test eval_batch_size metric metric_mode "
    "keep_checkpoint_max save_best save_top_k keep_optimizer_state save_inference save_onnx save_onnx_max_mb "
    "load_best_at_end use_amp amp_dtype amp_level amp_custom_white_list amp_custom_black_list use_loss_scaling "
    "use_dynamic_loss_scaling init_loss_scaling incr_every_n_steps decr_every_n_nan_or_inf incr_ratio decr_ratio "
    "nan_check_step max_nan_steps output_path pre_train_model load_parameters load_checkpoint resume visualdl "
    "progress_bar hooks output_layout early_stopping profile fast_paths extra_param").split()

# one flat file's trainer keys with values other than the defaults, and where each one lives
FLAT_VALUES = {"cpu_threads": 1, "gradient_accumulation_steps": 2, "nan_check_step": 3, "use_amp": True,
               "amp_dtype": "bfloat16", "eval_step": 4, "metric": "f1", "metric_mode": "min", "save_model_step": 5,
               "save_top_k": 2, "keep_optimizer_state": "all", "save_inference": True, "save_onnx": False,
               "train_log_step": 7, "visualdl": False, "progress_bar": "off", "early_stopping": {"patience": 2},
               "profile": {"start_step": 2, "steps": 1}}


def _load(config, overrides=()):
    return config_from_dict(config, "task.json", overrides, with_task=False)


def _grouped(values):
    trainer = {}
    for key, value in values.items():
        trainer.setdefault(GROUP_OF[key], {})[key] = value
    return trainer


def test_every_flat_key_of_earlier_files_has_one_place():
    assert sorted(FLAT_KEYS) == sorted([k for k in TRAINER if k not in GROUPS] + list(GROUP_OF))
    assert len(GROUP_OF) == sum(len(schema) for schema, _ in GROUPS.values())  # no key in two groups


def test_a_flat_file_and_a_grouped_one_load_to_the_same_config(tmp_path, data_dir):
    flat = task_config(data_dir, str(tmp_path / "out"), **FLAT_VALUES)
    grouped = task_config(data_dir, str(tmp_path / "out"))
    grouped["trainer"] = {**{k: v for k, v in grouped["trainer"].items() if k not in GROUP_OF},
                          **_grouped({**{k: v for k, v in grouped["trainer"].items() if k in GROUP_OF}, **FLAT_VALUES})}
    from_flat, from_grouped = _load(flat), _load(grouped)
    assert from_flat == from_grouped
    assert from_flat["trainer"]["checkpoints"]["save_model_step"] == 5
    assert from_flat["trainer"]["evaluation"]["early_stopping"]["patience"] == 2
    assert not any(key in from_flat["trainer"] for key in GROUP_OF)
    note, = from_flat.translations  # one note says what moved; a grouped file needs none
    assert note.startswith("trainer: flat keys read into their groups (") and "save_model_step -> checkpoints." in note
    assert from_grouped.translations == []


def test_set_names_a_key_flat_or_grouped_and_wins_over_the_file(tmp_path, data_dir):
    flat = task_config(data_dir, str(tmp_path / "out"), save_model_step=5, metric="f1")
    loaded = _load(flat, ["trainer.checkpoints.save_model_step=9", "trainer.metric=acc"])
    assert loaded["trainer"]["checkpoints"]["save_model_step"] == 9
    assert loaded["trainer"]["evaluation"]["metric"] == "acc"
    grouped = task_config(data_dir, str(tmp_path / "out"))
    grouped["trainer"]["checkpoints"] = {"save_model_step": 5}
    loaded = _load(grouped, ["trainer.save_model_step=6", "trainer.early_stopping.patience=4"])
    assert loaded["trainer"]["checkpoints"]["save_model_step"] == 6
    assert loaded["trainer"]["evaluation"]["early_stopping"]["patience"] == 4
    assert canonical_path(["trainer", "epoch"]) == ["trainer", "epoch"]  # the run's own keys stay on top
    assert canonical_path(["model", "metric"]) == ["model", "metric"]


def test_a_key_set_flat_and_in_its_group_is_one_error_naming_both(tmp_path, data_dir):
    config = task_config(data_dir, str(tmp_path / "out"), save_model_step=5)
    config["trainer"]["checkpoints"] = {"save_model_step": 6}
    with pytest.raises(ConfigError) as info:
        _load(config)
    assert str(info.value) == ("trainer.save_model_step and trainer.checkpoints.save_model_step: the same key set "
                               "twice; keep trainer.checkpoints.save_model_step")


def test_a_key_set_flat_and_grouped_by_two_sets_is_one_error_naming_both(tmp_path, data_dir):
    config = task_config(data_dir, str(tmp_path / "out"))
    with pytest.raises(ConfigError) as info:
        _load(config, ["trainer.save_model_step=5", "trainer.checkpoints.save_model_step=7"])
    assert str(info.value) == ("--set trainer.save_model_step and --set trainer.checkpoints.save_model_step: the "
                               "same key set twice; keep --set trainer.checkpoints.save_model_step")
    loaded = _load(config, ["trainer.save_model_step=5", "trainer.save_model_step=7"])  # one spelling: the last
    assert loaded["trainer"]["checkpoints"]["save_model_step"] == 7


def test_errors_name_the_key_path_as_it_was_written(tmp_path, data_dir):
    config = task_config(data_dir, str(tmp_path / "out"), save_model_step=-1)
    config["trainer"]["evaluation"] = {"metric_mode": "maximum"}
    with pytest.raises(ConfigError) as info:
        _load(config, ["trainer.use_amp=maybe"])
    assert info.value.problems == ["trainer.use_amp: expected bool, got string 'maybe'",
                                   "trainer.evaluation.metric_mode: 'maximum' is not one of ['max', 'min'] (did you mean 'max'?)",
                                   "trainer.save_model_step: -1 is below the minimum 0"]
    config = task_config(data_dir, str(tmp_path / "out"), is_eval_test=True)
    del config["dataset_reader"]["test_reader"]
    with pytest.raises(ConfigError, match=r"^trainer\.is_eval_test: set, but dataset_reader.test_reader"):
        _load(config)


def test_a_misspelt_flat_key_is_pointed_to_its_group(tmp_path, data_dir):
    config = task_config(data_dir, str(tmp_path / "out"))
    config["trainer"]["keep_checkpoints_max"] = 2
    with pytest.raises(ConfigError) as info:
        _load(config)
    assert str(info.value) == ("trainer.keep_checkpoints_max: unknown key (did you mean "
                               "trainer.checkpoints.keep_checkpoint_max?)")


def test_a_flat_key_set_after_loading_is_refused_not_ignored(tmp_path, data_dir):
    loaded = _load(task_config(data_dir, str(tmp_path / "out")))
    refuse_flat_keys(loaded["trainer"])  # as loaded: nothing flat
    changed = copy.deepcopy(loaded)
    changed["trainer"]["save_model_step"] = 3  # a notebook's edit of the old shape
    with pytest.raises(ConfigError, match=r"trainer.save_model_step: set after the task file was checked, where no "
                                          r"part reads it; set trainer.checkpoints.save_model_step"):
        refuse_flat_keys(changed["trainer"])


def test_group_keys_leaves_a_section_that_is_not_an_object_to_the_schema():
    problems = Problems()
    assert group_keys(["not", "a", "section"], problems) == [] and not problems
    trainer = {"metric": "f1", "evaluation": None}
    assert group_keys(trainer, problems) == ["metric"] and trainer == {"evaluation": {"metric": "f1"}}


@pytest.mark.paddle
def test_migrate_writes_a_flat_native_file_grouped(tmp_path, data_dir, capsys):
    from wenxin.runner import migrate
    flat = task_config(data_dir, str(tmp_path / "out"), **FLAT_VALUES)
    source = write_config(str(tmp_path / "flat.json"), flat)
    migrate(source, str(tmp_path / "grouped.json"))
    assert "translated: trainer: flat keys read into their groups" in capsys.readouterr().err
    with open(tmp_path / "grouped.json", encoding="utf-8") as f:
        written = json.load(f)
    assert not any(key in written["trainer"] for key in GROUP_OF)
    assert written["trainer"]["logging"]["train_log_step"] == 7
    assert _load(written) == _load(flat)
    with pytest.raises(ConfigError, match="already a native wenxin task"):
        migrate(str(tmp_path / "grouped.json"))
