"""Config fuzzing: every mutated task file gives one clear error line, never a traceback, and
never starts training."""
import copy
import json
import os

import pytest

from conftest import task_config
from wenxin.cli import main


def _set(path, value):
    def mutate(config):
        node = config
        keys = path.split(".")
        for key in keys[:-1]:
            node = node[int(key)] if isinstance(node, list) else node[key]
        last = keys[-1]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return mutate


def _del(path):
    def mutate(config):
        node = config
        keys = path.split(".")
        for key in keys[:-1]:
            node = node[int(key)] if isinstance(node, list) else node[key]
        del node[keys[-1]]
    return mutate


def _both(*mutations):
    def mutate(config):
        for m in mutations:
            m(config)
    return mutate


TR = "dataset_reader.train_reader"
F0 = f"{TR}.fields.0"  # where to mutate
F0_KEY = f"{TR}.fields[0]"  # how errors name it
MUTATIONS = {
    "epoch-string": (_set("trainer.epoch", "3"), "trainer.epoch"),
    "epoch-negative": (_set("trainer.epoch", -1), "trainer.epoch"),
    "max-steps-string": (_set("trainer.max_steps", "x"), "trainer.max_steps"),
    "log-step-zero": (_set("trainer.train_log_step", 0), "trainer.train_log_step"),
    "eval-step-negative": (_set("trainer.eval_step", -5), "trainer.eval_step"),
    "save-step-float": (_set("trainer.save_model_step", 1.5), "trainer.save_model_step"),
    "amp-string": (_set("trainer.use_amp", "yes"), "trainer.use_amp"),
    "seed-negative": (_set("trainer.seed", -1), "trainer.seed"),
    "output-path-int": (_set("trainer.output_path", 5), "trainer.output_path"),
    "keep-zero": (_set("trainer.keep_checkpoint_max", 0), "trainer.keep_checkpoint_max"),
    "metric-mode": (_set("trainer.metric_mode", "up"), "trainer.metric_mode"),
    "place": (_set("trainer.PADDLE_PLACE_TYPE", "tpu"), "trainer.PADDLE_PLACE_TYPE"),
    "hooks-string": (_set("trainer.hooks", "EarlyStoppingHook"), "trainer.hooks"),
    "hook-unknown": (_set("trainer.hooks", [{"type": "NoHook"}]), "trainer.hooks[0].type"),
    "hook-no-type": (_set("trainer.hooks", [{"params": {}}]), "trainer.hooks[0].type"),
    "hook-bad-param": (_set("trainer.hooks", [{"type": "EarlyStoppingHook", "params": {"patience": "2"}}]),
                       "trainer.hooks[0].params.patience"),
    "pretrained-int": (_set("trainer.pre_train_model", 5), "trainer.pre_train_model"),
    "pretrained-missing": (_set("trainer.pre_train_model", [{"params_path": "/no/file.pdparams"}]),
                           "/no/file.pdparams"),
    "pretrained-bad-item": (_set("trainer.pre_train_model", [{"path": "x"}]), "trainer.pre_train_model[0]"),
    "checkpoint-missing": (_set("trainer.load_checkpoint", "/no/ckpt"), "/no/ckpt"),
    "resume-bad": (_set("trainer.resume", "yes"), "trainer.resume"),
    "resume-and-load": (_both(_set("trainer.resume", "auto"), _set("trainer.load_checkpoint", "/x")),
                        "trainer.resume"),
    "accumulate-zero": (_set("trainer.gradient_accumulation_steps", 0), "trainer.gradient_accumulation_steps"),
    "accumulate-huge": (_set("trainer.gradient_accumulation_steps", 10**6), "trainer.gradient_accumulation_steps"),
    "fp16-on-cpu": (_both(_set("trainer.use_amp", True), _set("trainer.amp_dtype", "float16")),
                    "trainer.amp_dtype"),
    "trainer-unknown-key": (_set("trainer.epochs", 2), "trainer.epochs"),
    "trainer-unknown-type": (_set("trainer.type", "NoTrainer"), "trainer.type"),
    "trainer-mode-mismatch": (_set("trainer.type", "CustomStaticTrainer"), "trainer.type"),
    "trainer-not-object": (_set("trainer", [1]), "trainer"),
    "eval-without-reader": (_del("dataset_reader.dev_reader"), "trainer.is_eval_dev"),
    "model-type-missing": (_del("model.type"), "model.type"),
    "model-type-int": (_set("model.type", 3), "model.type"),
    "model-dygraph-2": (_set("model.is_dygraph", 2), "model.is_dygraph"),
    "lr-negative": (_set("model.optimization.learning_rate", -0.1), "model.optimization.learning_rate"),
    "optimizer-unknown": (_set("model.optimization.optimizer", "adagrad"), "model.optimization.optimizer"),
    "warmup-proportion": (_set("model.optimization.warmup_proportion", 1.5), "model.optimization.warmup_proportion"),
    "warmup-both": (_set("model.optimization.warmup_proportion", 0.1), "model.optimization"),
    "emb-dim-zero": (_set("model.embedding", {"emb_dim": 0}), "model.embedding.emb_dim"),
    "emb-unknown-key": (_set("model.embedding", {"dim": 8}), "model.embedding.dim"),
    "hidden-string": (_set("model.hidden_size", "big"), "model.hidden_size"),
    "model-unknown-key": (_set("model.num_layer", 2), "model.num_layer"),
    "model-not-object": (_set("model", []), "model"),
    "dataset-missing": (_del("dataset_reader"), "dataset_reader"),
    "train-reader-missing": (_del(TR), "dataset_reader.train_reader"),
    "fields-object": (_set(f"{TR}.fields", {}), f"{TR}.fields"),
    "fields-empty": (_set(f"{TR}.fields", []), f"{TR}.fields"),
    "field-reader-unknown": (_set(f"{F0}.reader.type", "NoReader"), f"{F0_KEY}.reader.type"),
    "max-seq-len-zero": (_set(f"{F0}.max_seq_len", 0), f"{F0_KEY}.max_seq_len"),
    "tokenizer-unknown": (_set(f"{F0}.tokenizer.type", "Bert"), f"{F0_KEY}.tokenizer.type"),
    "data-type": (_set(f"{F0}.data_type", "bytes"), f"{F0_KEY}.data_type"),
    "field-no-name": (_del(f"{F0}.name"), f"{F0_KEY}.name"),
    "vocab-missing": (_set(f"{F0}.vocab_path", "/no/vocab.txt"), "/no/vocab.txt"),
    "batch-zero": (_set(f"{TR}.config.batch_size", 0), f"{TR}.config.batch_size"),
    "data-missing": (_set(f"{TR}.config.data_path", "/no/train.tsv"), "/no/train.tsv"),
    "shuffle-string": (_set(f"{TR}.config.shuffle", "true"), f"{TR}.config.shuffle"),
    "separator-int": (_set(f"{TR}.config.separator", 5), f"{TR}.config.separator"),
    "dev-data-missing": (_set("dataset_reader.dev_reader.config.data_path", "/no/dev.tsv"), "/no/dev.tsv"),
    "top-unknown-key": (_set("trainers", {}), "trainers"),
    "task-missing": (_set("task", "no_such_task"), "task"),
    "text-field-missing": (_set("model.text_field", "text_b"), "model.text_field"),
}

RAW_FILES = {
    "json-trailing-comma": ("task.json", '{\n  "task": "text_classification",\n  "trainer": {"epoch": 1,},\n}\n', ":3:"),
    "json-unclosed": ("task.json", '{\n  "task": "text_classification",\n  "trainer": {\n', ":4:"),
    "yaml-bad-indent": ("task.yaml", "task: text_classification\ntrainer:\n  epoch: [1, 2\n  eval_step: 3\n", ".yaml:"),
    "yaml-tab": ("task.yaml", "task: x\ntrainer:\n\tepoch: 1\n", ".yaml:3:"),
    "top-level-list": ("task.json", "[1, 2, 3]", "top level must be an object"),
    "empty-file": ("task.json", "", ":1:1"),
}


def run_cli(path, capsys):
    code = main(["train", "--param_path", path])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_clear_error(code, out, err, expected):
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert expected in lines[0], lines[0]
    assert "Traceback" not in err and "training (" not in out


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_mutated_task_file_fails_clearly(tmp_path, data_dir, capsys, name):
    mutate, expected = MUTATIONS[name]
    config = copy.deepcopy(task_config(data_dir, str(tmp_path / "out")))
    mutate(config)
    path = str(tmp_path / "task.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False)
    assert_one_clear_error(*run_cli(path, capsys), expected)
    assert not os.path.isdir(str(tmp_path / "out" / "checkpoints"))


@pytest.mark.parametrize("name", sorted(RAW_FILES))
def test_malformed_task_file_names_position(tmp_path, capsys, name):
    filename, text, expected = RAW_FILES[name]
    path = tmp_path / filename
    path.write_text(text, encoding="utf-8")
    assert_one_clear_error(*run_cli(str(path), capsys), expected)


def test_fuzz_covers_at_least_fifty_cases():
    assert len(MUTATIONS) + len(RAW_FILES) >= 50
