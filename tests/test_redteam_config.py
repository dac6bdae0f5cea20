"""Red team, config: mutated and malformed task files.

Every case ends in exactly one ``error:`` block (one line, or a header and one line per
problem) naming the key path or file position, with exit status 2, no traceback, no hang and
nothing trained or written over; or, where the input is valid (omitted sections, a BOM), it
trains. The schema-driven cases put a value of the wrong type, a non-finite number, an integer
outside int64 or a value outside its bounds or choices into every key of every section.
"""
import copy
import json
import os

import pytest

from conftest import assert_one_error_block, task_config
from wenxin.cli import main
from wenxin.config.task_schema import FIELD, OPTIMIZATION, READER_CONFIG, TOKENIZER
from wenxin.config.trainer_schema import GROUPS, TRAINER


def _set(path, value):
    def mutate(config):
        node = config
        keys = path.split(".")
        for key in keys[:-1]:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
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
    "accumulate-huge": (_set("trainer.gradient_accumulation_steps", 10**6), "trainer.step.gradient_accumulation_steps"),
    "fp16-on-cpu": (_both(_set("trainer.use_amp", True), _set("trainer.amp_dtype", "float16")),
                    "trainer.precision.amp_dtype"),
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
    # values no number key may take, wherever they are
    "lr-nan": (_set("model.optimization.learning_rate", float("nan")), "model.optimization.learning_rate"),
    "nan-in-open-object": (_set("trainer.extra_param", {"x": float("inf")}), "trainer.extra_param.x"),
    "seed-2-32": (_set("trainer.seed", 2**32), "trainer.seed"),
    "huge-int-in-prefix-map": (_set("trainer.extra_param", {"n": 2**64}), "trainer.extra_param.n"),
    "format-unknown": (_set(f"{TR}.config.format", "parquet"), f"{TR}.config.format: unknown data format type 'parquet'"),
    "optimizer-unknown-registry": (_set("model.optimization.optimizer", "adamax"),
                                   "model.optimization.optimizer: unknown optimizer type 'adamax'"),
    "scheduler-unknown": (_set("model.optimization.lr_scheduler", "cosine"),
                          "model.optimization.lr_scheduler: unknown LR scheduler type 'cosine'"),
    "pad-huge": (_both(_set(f"{F0}.pad_to_max_seq_len", True), _set(f"{F0}.max_seq_len", 10**9)),
                 f"{F0_KEY}.max_seq_len"),
    "task-not-string": (_set("task", ["text_classification"]), "task"),
    "hidden-size-huge": (_set("model.hidden_size", 10**7), "model.hidden_size: 10000000 is above the maximum 65536"),
    "emb-dim-huge": (_set("model.embedding", {"emb_dim": 10**7}), "model.embedding.emb_dim: 10000000 is above"),
    "prefix-map-int": (_set("trainer.pre_train_model", [{"params_path": "/", "prefix_map": {"a.": 5}}]),
                       "trainer.pre_train_model[0].prefix_map.a.: expected string, got int 5"),
    "vocab-from-label": (_set(f"{F0}.vocab_from", "label"),
                         f"{F0_KEY}.vocab_from: 'label' is a LabelFieldReader; a TextFieldReader shares only"),
    "reader-null": (_set(TR, None), "dataset_reader.train_reader"),
    "hooks-item-not-object": (_set("trainer.hooks", [5]), "trainer.hooks[0]"),
    "vocab-is-folder": (_set(f"{F0}.vocab_path", "/"), f"{F0_KEY}.vocab_path"),
    # found by evaluating one dev batch before the first step, not after an epoch
    "metric-not-a-dev-metric": (_set("trainer.metric", "f2"), "trainer.evaluation.metric: 'f2' is not a dev metric"),
    "early-stopping-metric": (_set("trainer.hooks", [{"type": "EarlyStoppingHook", "params": {"metric": "bleu"}}]),
                              "EarlyStoppingHook metric 'bleu' is not a dev metric"),
    "both-metrics": (_both(_set("trainer.metric", "f2"), _set("trainer.hooks", [
        {"type": "EarlyStoppingHook", "params": {"metric": "bleu"}}])), ["'f2'", "'bleu'"]),
    "output-path-empty": (_set("trainer.output_path", ""), "trainer.output_path: must not be empty"),
    "data-path-empty": (_set(f"{TR}.config.data_path", ""), f"{TR}.config.data_path: must not be empty"),
    "field-name-empty": (_set(f"{F0}.name", ""), f"{F0_KEY}.name: must not be empty"),
    "task-empty": (_set("task", ""), "task: must not be empty"),
    "load-parameters-missing": (_set("trainer.load_parameters", "/no/params"), "trainer.load_parameters"),
}

# Several problems in one file are all reported in one run: first those found before Paddle loads
# (at once), then those that need the task package (model.type's settings, registered names).
MANY_SCHEMA = _both(_set("trainer.epoch", "3"), _set("trainer.metric_mode", "up"), _set("trainer.epochs", 2),
                    _set("model.optimization.learning_rate", float("nan")), _set(f"{TR}.config.batch_size", 0))
MANY_SCHEMA_PATHS = ["trainer.epoch", "trainer.metric_mode", "trainer.epochs", "model.optimization.learning_rate",
                     f"{TR}.config.batch_size"]
MANY_TASK = _both(_set("model.hidden_size", "big"), _set("model.optimization.optimizer", "adamax"))
MANY_TASK_PATHS = ["model.hidden_size", "model.optimization.optimizer"]


def _wrong_type(key):
    """A value of a type ``key`` does not accept."""
    for value in (123, "seven", [1, 2], {"a": 1}, 1.5):
        accepted = type(value) in key.types or (type(value) is int and float in key.types)
        if not accepted:
            return value
    raise AssertionError(key.types)


def _bad_values(key):
    yield "wrong-type", _wrong_type(key)
    if float in key.types:
        yield "nan", float("nan")
        yield "inf", float("inf")
    if int in key.types and bool not in key.types:
        yield "beyond-int64", 2**70
    if key.minimum is not None and (int in key.types or float in key.types):
        yield "below-minimum", key.minimum - 1
    if key.maximum is not None and (int in key.types or float in key.types):
        yield "above-maximum", key.maximum + 1
    if key.choices is not None and all(isinstance(c, str) for c in key.choices if c is not None):
        yield "not-a-choice", "no-such-choice"


# a trainer group's keys both as older files write them (flat, and named so) and grouped
SECTIONS = [("trainer", "trainer", TRAINER), *((f"trainer.{g}", f"trainer.{g}", s) for g, (s, _) in GROUPS.items()),
            *(("trainer", "trainer", s) for s, _ in GROUPS.values()),
            ("model.optimization", "model.optimization", OPTIMIZATION),
            (f"{TR}.config", f"{TR}.config", READER_CONFIG), (F0, F0_KEY, FIELD),
            (f"{F0}.tokenizer", f"{F0_KEY}.tokenizer", TOKENIZER)]
SCHEMA_MUTATIONS = {f"{where}.{name}={label}": (_set(f"{where}.{name}", value), f"{named}.{name}")
                    for where, named, schema in SECTIONS for name, key in schema.items()
                    for label, value in _bad_values(key)}


RAW_FILES = {
    "json-trailing-comma": ("task.json", '{\n  "task": "text_classification",\n  "trainer": {"epoch": 1,},\n}\n', ":3:"),
    "json-unclosed": ("task.json", '{\n  "task": "text_classification",\n  "trainer": {\n', ":4:"),
    "yaml-bad-indent": ("task.yaml", "task: text_classification\ntrainer:\n  epoch: [1, 2\n  eval_step: 3\n", ".yaml:"),
    "yaml-tab": ("task.yaml", "task: x\ntrainer:\n\tepoch: 1\n", ".yaml:3:"),
    "top-level-list": ("task.json", "[1, 2, 3]", "top level must be an object"),
    "empty-file": ("task.json", "", ":1:1"),
    "json-duplicate-keys": ("task.json", '{"task": "a", "trainer": {"epoch": 1, "epoch": 2}, "task": "b"}',
                            ["trainer.epoch: duplicate key", "task: duplicate key"]),
    "yaml-merge-then-duplicate": ("task.yaml", "base: &b {epoch: 1}\ntrainer:\n  <<: *b\n  epoch: 2\n  epoch: 3\n",
                                  "trainer.epoch: duplicate key"),
    "upper-case-yaml": ("task.YAML", "task: x\ntrainer:\n\tepoch: 1\n", ["task.YAML:3:", "invalid YAML"]),
    "yaml-duplicate-keys": ("task.yaml", "task: a\ntrainer:\n  epoch: 1\n  epoch: 2\n", "trainer.epoch: duplicate key"),
    "json-nan-literal": ("task.json", '{"task": "a", "trainer": {"seed": NaN}}', "trainer.seed: nan is not a finite"),
    "json-infinity": ("task.json", '{"task": "a", "model": {"optimization": {"learning_rate": -Infinity}}}',
                      "model.optimization.learning_rate: -inf is not a finite"),
    "json-4300-digits": ("task.json", '{"task": "a", "trainer": {"seed": 1' + "0" * 4300 + '}}',
                         "trainer.seed: integer"),
    "yaml-4300-digits": ("task.yaml", "task: a\ntrainer:\n  seed: 1" + "0" * 4400 + "\n", "trainer.seed: integer"),
    "json-deep": ("task.json", '{"a":' * 5000 + "1" + "}" * 5000, "nested deeper than"),
    "json-very-deep": ("task.json", "[" * 200000 + "]" * 200000, "nested deeper than"),
    "yaml-deep": ("task.yaml", "a: " + "[" * 3000 + "]" * 3000 + "\n", "nested deeper than"),
    "yaml-alias-bomb": ("task.yaml", "".join(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}" if i else "'lol'"] * 9) + "]\n"
                                             for i in range(9)), "expands to more than"),
    "yaml-recursive-alias": ("task.yaml", "a: &a [*a]\n", "refers to itself"),
    "yaml-date": ("task.yaml", "task: a\ntrainer:\n  extra_param:\n    day: 2020-01-01\n",
                  "trainer.extra_param.day: date"),
    "yaml-binary": ("task.yaml", "task: a\nmodel: !!binary aGVsbG8=\n", "model: bytes"),
    "yaml-set": ("task.yaml", "task: a\ntrainer:\n  hooks: !!set {a, b}\n", "trainer.hooks"),
    "yaml-int-key": ("task.yaml", "task: a\n1: x\n", "keys must be strings"),
    "yaml-null-key": ("task.yaml", "task: a\n~: x\n", "keys must be strings"),
    "yaml-python-tag": ("task.yaml", "task: !!python/object/apply:os.system ['echo pwned']\n", "invalid YAML"),
    "yaml-scalar": ("task.yaml", "just a string\n", "top level must be an object"),
    "yaml-empty": ("task.yaml", "", "top level must be an object"),
}

BINARY_FILES = {
    "utf16-bom": ('{"task": "a"}'.encode("utf-16"), "UTF-16/UTF-32"),
    "utf16-no-bom": ('{"task": "a"}'.encode("utf-16-le"), "NUL bytes"),
    "utf32": ('{"task": "a"}'.encode("utf-32"), "UTF-16/UTF-32"),
    "latin1": ('{"task": "caf\xe9"}'.encode("latin-1"), "not valid UTF-8"),
    "gbk": ('{"task": "中文"}'.encode("gbk"), "not valid UTF-8"),
    "binary": (bytes(range(256)) * 4, "NUL bytes"),
    "png-header": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "NUL bytes"),
}


def run_cli(path, capsys, overrides=()):
    code = main(["train", "--param_path", path, *[a for o in overrides for a in ("--set", o)]])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _write_config(tmp_path, config):
    path = str(tmp_path / "task.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False)
    return path


def _earlier_result(out):
    """An earlier run's file in the output folder, which no refused run may touch."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "earlier.txt"), "w") as f:
        f.write("keep")


def _untouched(out):
    assert open(os.path.join(out, "earlier.txt")).read() == "keep"
    assert not os.path.exists(os.path.join(out, "checkpoints"))


def _refused_without_harm(tmp_path, data_dir, capsys, mutate, expected):
    """A mutated task file: one error block naming ``expected``; an earlier result untouched."""
    out = str(tmp_path / "out")
    config = copy.deepcopy(task_config(data_dir, out))
    mutate(config)
    _earlier_result(out)
    assert_one_error_block(*run_cli(_write_config(tmp_path, config), capsys), expected)
    if os.path.isdir(out):  # a mutation may move output_path elsewhere
        _untouched(out)


# ---- valid input that earlier versions refused or crashed on -------------------------------------
def _trains(tmp_path, config, capsys):
    code, out, err = run_cli(_write_config(tmp_path, config), capsys)
    assert code == 0, err[-3000:]
    assert "Traceback" not in err


def test_a_model_that_cannot_be_exported_fails_before_training(tmp_path, data_dir):
    """With save_inference, the export is tried on a scratch folder before the first step."""
    import importlib
    from conftest import build
    from wenxin.common.constants import Phase
    from wenxin.common.errors import ConfigError
    from wenxin.common.registry import RegisterSet
    from wenxin.common.task_loader import import_task
    models = importlib.import_module(import_task("text_classification") + ".models")

    @RegisterSet.models.register("UnexportableBow")
    class UnexportableBow(models.BowClassification):
        def forward(self, fields_dict, phase):
            if phase == Phase.PREDICT:
                raise RuntimeError("this model has no prediction graph")
            return super().forward(fields_dict, phase)

    out = str(tmp_path / "out")
    config = task_config(data_dir, out, model_type="UnexportableBow", save_inference=True)
    trainer = build(config, tmp_path)
    with pytest.raises(ConfigError, match="trainer.export.save_inference: exporting this model fails .*no prediction graph"):
        trainer.do_train()
    assert trainer.state.global_step == 0 and not os.path.exists(os.path.join(out, "checkpoints"))


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_mutated_task_file_fails_clearly(tmp_path, data_dir, capsys, hang_guard, name):
    hang_guard(60)
    mutate, expected = MUTATIONS[name]
    _refused_without_harm(tmp_path, data_dir, capsys, mutate, expected)


@pytest.mark.parametrize("section", ["model.embedding", "model.optimization", "trainer"])
def test_omitted_sections_take_their_defaults(tmp_path, data_dir, capsys, section):
    out = str(tmp_path / "out")
    config = task_config(data_dir, out, max_steps=2, is_eval_dev=0, is_eval_test=0)
    _del(section)(config)
    if section == "trainer":
        config["trainer"] = {"output_path": out, "max_steps": 2, "visualdl": False}
    _trains(tmp_path, config, capsys)


def test_utf8_bom_task_file_is_read(tmp_path, data_dir, capsys):
    config = task_config(data_dir, str(tmp_path / "out"), max_steps=1, is_eval_dev=0, is_eval_test=0)
    path = tmp_path / "task.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(config, ensure_ascii=False).encode("utf-8"))
    code, out, err = run_cli(str(path), capsys)
    assert code == 0, err[-3000:]
