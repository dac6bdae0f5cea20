"""ERNIE-kit task files, translated onto wenxin's own schema (the one place that knows them).

An ERNIE-kit task file has no ``task`` key: ``trainer.extra_param.meta.job_type`` names the task,
readers carry ``epoch`` and ``key_tag``, and fields use ERNIE-kit's reader and tokenizer names.
``translate`` returns the equivalent native config and one line per translation it made (``wenxin
migrate`` prints them; a run logs them once). Keys wenxin cannot honour are reported together as
one ``ConfigError``, never dropped silently.

Translated: the trainer, optimization, reader and field keys below; the BoW and CNN networks,
whose names wenxin uses for other networks (``BowClassification`` becomes
``ErnieKitBowClassification``, ERNIE-kit's network); the ERNIE models, which keep their names, with
``model.embedding.config_path`` as ``model.encoder_config``; ERNIE-kit's WordPiece settings; and its
pair readers (two ``ErnieClassificationFieldReader`` fields become one ``pair_with`` pair).
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Tuple

from wenxin.common.errors import Problems
from wenxin.common.parsed import dict_at, plain
from wenxin.common.task_loader import builtin_tasks_dir

# trainer.extra_param.meta.job_type -> the built-in task that runs it
JOB_TASKS = {"text_classification": "text_classification", "sequence_labeling": "sequence_labeling",
             "text_matching": "text_matching",
             "data_distillation_text_classification": "text_classification",  # the student of distillation
             "entity_relation_extraction": "information_extraction_many_to_many",
             "entity_attribute_extraction": "information_extraction_many_to_many",
             "text_generation": "text_generation"}
JOB_TYPES = tuple(JOB_TASKS)
READER_NAMES = ("train_reader", "dev_reader", "test_reader", "predict_reader")

# ERNIE-kit field readers and tokenizers -> wenxin's, with the settings that give ERNIE-kit's behaviour
FIELD_READERS = {"CustomTextFieldReader": "TextFieldReader", "TextFieldReader": "TextFieldReader"}
TOKENIZERS = {"CustomTokenizer": {"type": "WhitespaceTokenizer", "lowercase": False}}
ERNIE_FIELD_READERS = ("ErnieTextFieldReader", "ErnieClassificationFieldReader")
# ERNIE-kit names wenxin does not have yet, and why
NOT_YET: Dict[str, str] = {}
ERNIE_M_FIELD_READER = "ErnieTextFieldReaderForMultilingual"
# ERNIE-kit's dataset readers whose behaviour wenxin's BasicDataSetReader has (pairs: pair_with)
DATASET_READERS = {"ErnieClassificationDataSetReader": "BasicDataSetReader"}
# ERNIE-kit's models on a pretrained ERNIE: embedding.config_path names the encoder's config
ERNIE_MODELS = ("ErnieClassification", "MultiLabelClassification", "ErnieFcSeqLabel", "ErnieMatchingFcPointwise",
                "ErnieMatchingSiamesePointwise", "ErnieMatchingSiamesePairwise", "ErnieFcIe",
                "ErnieInfillingGeneration")
# ERNIE-kit's IEReader: JSON lines, its settings in config.extra_params (see _translate_ie_reader)
IE_READER = "IEReader"
IE_EXTRA_PARAMS = ("vocab_path", "label_map_config", "num_labels", "max_seq_len", "do_lower_case", "in_tokens",
                   "tokenizer", "need_data_distribute", "need_generate_examples")
# ERNIE-kit's InfillingGenReader: a TSV with a header; its settings in config.extra_params (see _translate_gen_reader)
GEN_READER = "InfillingGenReader"
GEN_MODEL = "ErnieInfillingGeneration"
GEN_EXTRA_PARAMS = ("vocab_path", "max_seq_len", "do_lower_case", "in_tokens", "tokenizer", "tgt_type_id",
                    "max_src_len", "max_tgt_len", "max_dec_len", "mask_prob", "continuous_position", "two_stream",
                    "random_noise", "task_type", "tokenized_input", "do_dec", "random_seed", "need_data_distribute",
                    "need_generate_examples")
# InfillingGenReader's settings that are the model's in wenxin, with ERNIE-kit's defaults
GEN_MODEL_PARAMS = {"tgt_type_id": 1, "max_dec_len": 32, "mask_prob": 0.5, "continuous_position": True}
# InfillingGenReader's settings wenxin has one value of: (key, the value, what another value was)
GEN_FIXED = (("two_stream", True, "UniLM-style single-stream training"),
             ("random_noise", False, "random tokens as infilling noise"),
             ("task_type", "normal", "the dialogue and translation variants"),
             ("tokenized_input", False, "pre-tokenized input"))
# (task, ERNIE-kit model type) -> wenxin model type, where the networks differ
MODEL_TYPES = {("text_classification", "BowClassification"): "ErnieKitBowClassification",
               ("text_classification", "CNNClassification"): "ErnieKitCnnClassification",
               ("text_matching", "BowMatchingPairwise"): "ErnieKitBowMatchingPairwise"}
# ERNIE-kit networks it trained with plain Adam at a constant learning rate (2e-5 unless set)
PLAIN_ADAM_MODELS = ("ErnieKitBowClassification", "ErnieKitCnnClassification", "ErnieKitBowMatchingPairwise")
# ERNIE-kit's loss-scaling keys, which it read from model.optimization and wenxin from trainer
LOSS_SCALING_KEYS = ("init_loss_scaling", "incr_every_n_steps", "decr_every_n_nan_or_inf", "incr_ratio",
                     "decr_ratio", "use_dynamic_loss_scaling")
# keys ERNIE-kit accepted that change nothing in wenxin
IGNORED_TRAINER_KEYS = ("is_do_train",)


def is_erniekit(raw: Dict[str, Any]) -> bool:
    """Whether a parsed task file is in ERNIE-kit's format (no ``task`` key, ERNIE-kit markers)."""
    if "task" in raw or not isinstance(raw, dict):
        return False
    if _job_type(raw) is not None:
        return True
    for reader in _readers(raw):
        config = dict_at(reader, "config")
        if "epoch" in config or "key_tag" in config:
            return True
        for field in reader.get("fields") or []:
            if isinstance(field, dict) and _type_of(field.get("reader")) in (
                    *FIELD_READERS, *ERNIE_FIELD_READERS, "ErnieSeqlabelLabelFieldReader", ERNIE_M_FIELD_READER,
                    *NOT_YET):
                return True
    return False


def translate(raw: Dict[str, Any], source: str = "") -> Tuple[Dict[str, Any], List[str]]:
    """The native config of an ERNIE-kit task file, and the translations made (one line each)."""
    config = plain(raw)  # a copy in which no two places share an object
    notes: List[str] = []
    problems = Problems()
    job = _job_type(config)
    if job not in JOB_TYPES:
        problems.add(f"trainer.extra_param.meta.job_type: {job!r} does not name a task wenxin has "
                      f"(one of {', '.join(JOB_TYPES)}); an ERNIE-kit task file names its task there")
    else:
        config["task"] = os.path.join(builtin_tasks_dir(), JOB_TASKS[job])
        notes.append(f"task: {JOB_TASKS[job]!r} from trainer.extra_param.meta.job_type {job!r}: wenxin's built-in task "
                     f"({config['task']}), never a folder of that name in your tree")
    trainer = config.setdefault("trainer", {})
    if isinstance(trainer, dict):
        _translate_trainer(trainer, notes, problems)
        trainer.setdefault("output_layout", "erniekit")
        if job in ("sequence_labeling", "entity_relation_extraction", "entity_attribute_extraction") \
                and "metric" not in trainer:
            trainer["metric"] = "f1"
            notes.append("trainer.evaluation.metric: 'f1' (F1 picks the best model, as ERNIE-kit reports it)")
        if job == "text_generation" and "metric" not in trainer:
            trainer["metric"] = "bleu4"
            notes.append("trainer.evaluation.metric: 'bleu4' (BLEU-4 picks the best model, as ERNIE-kit reports it)")
        notes.append("trainer.checkpoints.output_layout: erniekit (checkpoints in "
                     "save_checkpoints/checkpoints_step_<N>, "
                     "an inference model in save_inference_model/inference_step_<N> at every save)")
    train = (config.get("dataset_reader") or {}).get("train_reader") or {}
    if job == "text_generation" and isinstance(config.get("model"), dict):
        _generation_model_settings(train, config["model"], notes)
    train_labels = any(isinstance(f, dict) and f.get("name") == "label" for f in train.get("fields") or [])
    for name in READER_NAMES:
        reader = (config.get("dataset_reader") or {}).get(name)
        if isinstance(reader, dict):
            _translate_reader(name, reader, trainer, notes, problems, train_labels)
    model = config.get("model")
    if isinstance(model, dict) and job in JOB_TYPES:
        if isinstance(model.get("optimization", {}), dict) and isinstance(trainer, dict):
            _translate_optimization(model.setdefault("optimization", {}), trainer, notes)
        _translate_model(job, model, notes)
    problems.raise_if_any()
    return config, notes


def _translate_trainer(trainer: Dict[str, Any], notes: List[str], problems: Problems) -> None:
    if trainer.get("type") == "CustomGenerationTrainer":  # ERNIE-kit's generation trainer (static only)
        trainer["type"] = "CustomTrainer"
        notes.append("trainer.type: CustomGenerationTrainer -> CustomTrainer (the built-in trainer, in the mode "
                     "model.is_dygraph picks; evaluation decodes through the model's step functions)")
    if "ramdom_seed" in trainer:  # ERNIE-kit's spelling
        trainer["seed"] = trainer.pop("ramdom_seed")
        notes.append("trainer.ramdom_seed -> trainer.seed")
    if "save_inference_model" in trainer:
        trainer["save_inference"] = bool(trainer.pop("save_inference_model"))
        notes.append("trainer.save_inference_model -> trainer.export.save_inference")
    for key in IGNORED_TRAINER_KEYS:
        if key in trainer:
            value = trainer.pop(key)
            if value in (0, False):
                problems.add(f"trainer.{key}: {value!r} (evaluate without training) is not supported; "
                             f"use wenxin export / run_infer.py on a checkpoint")
            else:
                notes.append(f"trainer.{key}: {value!r}, training runs (as always)")


def _move_reader_epoch(name: str, path: str, epoch: Any, trainer: Dict[str, Any], notes: List[str]) -> None:
    """ERNIE-kit counts epochs in the train reader's config; wenxin in ``trainer.epoch``."""
    if name != "train_reader":
        notes.append(f"{path}.config.epoch: dropped (only the train reader's counts)")
    elif "epoch" in trainer and trainer["epoch"] != epoch:
        notes.append(f"{path}.config.epoch: {epoch!r} ignored: trainer.epoch {trainer['epoch']!r} is set")
    else:
        trainer["epoch"] = epoch
        notes.append(f"{path}.config.epoch -> trainer.epoch ({epoch!r})")


def _translate_reader(name: str, reader: Dict[str, Any], trainer: Dict[str, Any], notes: List[str],
                      problems: Problems, train_labels: bool) -> None:
    path = f"dataset_reader.{name}"
    config = dict_at(reader, "config")
    if "epoch" in config:
        _move_reader_epoch(name, path, config.pop("epoch"), trainer, notes)
    if "key_tag" in config:
        if config.pop("key_tag") not in (False, 0, None):
            problems.add(f"{path}.config.key_tag: true is not supported (ERNIE-kit's basic reader ignores it too; "
                         f"remove it or set it to false)")
    if reader.get("type") == IE_READER:
        _translate_ie_reader(name, reader, notes, problems)
    if reader.get("type") == GEN_READER:
        _translate_gen_reader(name, reader, notes, problems)
    if config.get("extra_params"):
        problems.add(f"{path}.config.extra_params: {sorted(config['extra_params'])} cannot be honoured")
    config.pop("extra_params", None)
    if reader.get("type") in DATASET_READERS:
        notes.append(f"{path}.type: {reader['type']} -> {DATASET_READERS[reader['type']]}")
        reader["type"] = DATASET_READERS[reader["type"]]
    fields = [f for f in reader.get("fields") or [] if isinstance(f, dict)]
    for i, field in enumerate(reader.get("fields") or []):
        if isinstance(field, dict):
            _translate_field(f"{path}.fields[{i}]", field, notes, problems, train_labels)
    _pair_ernie_fields(path, fields, notes)


def _own_fields_reader_settings(path: str, reader: Dict[str, Any], kind: str, known: Tuple[str, ...],
                                problems: Problems) -> Optional[Dict[str, Any]]:
    """The ``config.extra_params`` of an ERNIE-kit reader that builds its own fields (``IEReader``,
    ``InfillingGenReader``), taken out of its config; None when they are not an object. Fields
    given anyway, settings wenxin does not know, ``in_tokens: true`` and a tokenizer other than
    ``FullTokenizer`` are problems; ``need_data_distribute`` and ``need_generate_examples`` move
    to the reader's config."""
    config = dict_at(reader, "config")
    extra = config.pop("extra_params", None) or {}
    if not isinstance(extra, dict):
        problems.add(f"{path}.config.extra_params: must be an object")
        return None
    if reader.get("fields"):
        problems.add(f"{path}.fields: {kind} builds its own fields; ERNIE-kit's files leave this list empty")
    for key in sorted(set(extra) - set(known)):
        problems.add(f"{path}.config.extra_params.{key}: not an {kind} setting wenxin knows")
    if extra.get("in_tokens") not in (None, False, 0):
        problems.add(f"{path}.config.extra_params.in_tokens: true (batches counted in tokens) is not supported; "
                     f"set it to false (batch_size counts examples)")
    tokenizer = extra.get("tokenizer", "FullTokenizer")
    if tokenizer != "FullTokenizer":
        problems.add(f"{path}.config.extra_params.tokenizer: {tokenizer!r}: {kind} reads WordPiece vocabularies "
                     f"with FullTokenizer")
    for key in ("need_data_distribute", "need_generate_examples"):
        if key in extra:
            config.setdefault(key, extra.pop(key))
    return extra


def _translate_ie_reader(name: str, reader: Dict[str, Any], notes: List[str], problems: Problems) -> None:
    """ERNIE-kit's ``IEReader`` (no fields; JSON lines; its settings in ``config.extra_params``)
    -> a jsonl reader of an ``ErnieIeTextFieldReader`` text and, except for prediction, an
    ``IeSpoLabelFieldReader`` label field."""
    path = f"dataset_reader.{name}"
    config = dict_at(reader, "config")
    extra = _own_fields_reader_settings(path, reader, IE_READER, IE_EXTRA_PARAMS, problems)
    if extra is None:
        return
    text: Dict[str, Any] = {"name": "text_a", "column": "text", "reader": {"type": "ErnieIeTextFieldReader"},
                            "tokenizer": {"type": "FullTokenizer", "lowercase": bool(extra.get("do_lower_case", True)),
                                          "split_symbols": False},
                            "vocab_path": extra.get("vocab_path", ""), "max_seq_len": extra.get("max_seq_len", 512)}
    fields = [text]
    if name != "predict_reader":
        fields.append({"name": "label", "column": "spo_list", "reader": {"type": "IeSpoLabelFieldReader"},
                       "vocab_path": extra.get("label_map_config", ""), "num_labels": extra.get("num_labels", 0)})
    reader["type"] = "BasicDataSetReader"
    reader["fields"] = fields
    config["format"] = "jsonl"
    notes.append(f"{path}: IEReader -> BasicDataSetReader of JSON lines (format: jsonl): 'text' read by an "
                 f"ErnieIeTextFieldReader (extra_params vocab_path, max_seq_len, do_lower_case)"
                 + ("" if name == "predict_reader" else ", 'spo_list' by an IeSpoLabelFieldReader (extra_params "
                    "label_map_config, num_labels)"))


def _generation_model_settings(train: Dict[str, Any], model: Dict[str, Any], notes: List[str]) -> None:
    """InfillingGenReader's settings that wenxin's model holds (``tgt_type_id``, ``max_dec_len``,
    ``mask_prob``), from the train reader's ``extra_params``; ERNIE-kit always decoded by beam
    search (one beam: greedy)."""
    extra = dict_at(dict_at(train, "config"), "extra_params")
    for key, default in GEN_MODEL_PARAMS.items():
        if key not in model:
            model[key] = extra.get(key, default)
            notes.append(f"dataset_reader.train_reader.config.extra_params.{key} -> model.{key} ({model[key]!r})")
    model.setdefault("decoding", "beam")
    if isinstance(train.get("config"), dict) and train.get("type") == GEN_READER:
        header = _tsv_header(str(dict_at(train, "config").get("data_path", "")))
        sources = [h for h in header or [] if h not in ("tgt", "knowledge")]
        if sources:
            model.setdefault("source_field", sources[0])
            model.setdefault("target_field", "tgt")


def _tsv_header(path: str) -> Optional[List[str]]:
    """The column names on the first line of a TSV file (or of the first file of a folder), or None."""
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if not n.startswith("."))
        path = os.path.join(path, names[0]) if names else path
    try:
        with open(path, encoding="utf-8-sig") as f:
            return f.readline().rstrip("\r\n").split("\t")
    except (OSError, UnicodeDecodeError):
        return None


def _translate_gen_reader(name: str, reader: Dict[str, Any], notes: List[str], problems: Problems) -> None:
    """ERNIE-kit's ``InfillingGenReader`` (no fields; a TSV whose header names the columns: ``tgt``
    is the target, every other column a source) -> a TSV reader of one ``ErnieGenSourceFieldReader``
    per source column and, where the file has one, an ``ErnieGenTargetFieldReader`` for ``tgt``."""
    path = f"dataset_reader.{name}"
    config = dict_at(reader, "config")
    extra = _own_fields_reader_settings(path, reader, GEN_READER, GEN_EXTRA_PARAMS, problems)
    if extra is None:
        return
    for key, value, other in GEN_FIXED:
        if key in extra and extra[key] != value:
            problems.add(f"{path}.config.extra_params.{key}: {json.dumps(extra[key])} ({other}) is not supported; "
                         f"ERNIE-Gen runs with {key}: {json.dumps(value)}")
    data_path = str(config.get("data_path", ""))
    header = _tsv_header(data_path)
    if header is None:
        problems.add(f"{path}.config.data_path: cannot read the header line of {data_path!r} (InfillingGenReader "
                     f"takes its columns from it: the sources, and tgt)")
        return
    if "knowledge" in header:
        problems.add(f"{path}.config.data_path: {data_path}: a 'knowledge' column (ERNIE-kit's dialogue task) is "
                     f"not supported")
    sources = [h for h in header if h not in ("tgt", "knowledge")]
    if not sources:
        problems.add(f"{path}.config.data_path: {data_path}: the header {header} names no source column")
        return
    max_seq_len = int(extra.get("max_seq_len", 512))
    target_len = max(int(extra.get("max_tgt_len", 64)), int(extra.get("max_dec_len", 32)) + 1)
    text = {"tokenizer": {"type": "FullTokenizer", "lowercase": bool(extra.get("do_lower_case", True)),
                          "split_symbols": False}, "vocab_path": extra.get("vocab_path", "")}
    fields: List[Dict[str, Any]] = []
    for column in header:
        if column == "tgt":
            fields.append({"name": "tgt", "reader": {"type": "ErnieGenTargetFieldReader"}, **plain(text),
                           "max_seq_len": int(extra.get("max_tgt_len", 64))})
        else:
            fields.append({"name": column, "reader": {"type": "ErnieGenSourceFieldReader"}, **plain(text),
                           "max_seq_len": int(extra.get("max_src_len", 320))})
    first = next(f for f in fields if f["name"] == sources[0])
    first["source_budget"] = max(3, max_seq_len - target_len)
    reader["type"] = "BasicDataSetReader"
    reader["fields"] = fields
    config.update(format="tsv", has_header=True)
    notes.append(f"{path}: InfillingGenReader -> BasicDataSetReader of TSV with a header: sources {sources} "
                 f"(ErnieGenSourceFieldReader, each cut to max_src_len - 2 tokens, all to {first['source_budget']} = "
                 f"max_seq_len - {target_len})" + (", target 'tgt' (ErnieGenTargetFieldReader, max_tgt_len)"
                                                   if "tgt" in header else ""))


def _pair_ernie_fields(path: str, fields: List[Dict[str, Any]], notes: List[str]) -> None:
    """ERNIE-kit's ``ErnieClassificationFieldReader`` fields are encoded together, as
    ``[CLS] a [SEP] b [SEP]``: the first reads the second's column (``pair_with``)."""
    joined = [f for f in fields if f.get("_joined")]
    for field in fields:
        field.pop("_joined", None)
    if len(joined) == 2:
        joined[0]["pair_with"] = joined[1]["name"]
        notes.append(f"{path}: ErnieClassificationFieldReader '{joined[0]['name']}' and '{joined[1]['name']}' -> "
                     f"one ErnieTextFieldReader pair ([CLS] {joined[0]['name']} [SEP] {joined[1]['name']} [SEP]): "
                     f"\"pair_with\": \"{joined[1]['name']}\"")


def _drop_legacy_reader_type(path: str, field: Dict[str, Any], notes: List[str], problems: Problems) -> None:
    """``reader_type``, a leftover key of some ERNIE-kit files beside ``reader.type``: dropped
    where it agrees."""
    legacy = field.pop("reader_type")
    if legacy not in (None, "", _type_of(field.get("reader"))):
        problems.add(f"{path}.reader_type: {legacy!r} differs from reader.type "
                     f"{_type_of(field.get('reader'))!r}; ERNIE-kit reads reader.type, so remove one of them")
    else:
        notes.append(f"{path}.reader_type: dropped (ERNIE-kit reads reader.type)")


def _translate_field(path: str, field: Dict[str, Any], notes: List[str], problems: Problems,
                     train_labels: bool) -> None:
    if "reader_type" in field:
        _drop_legacy_reader_type(path, field, notes, problems)
    kind = _type_of(field.get("reader"))
    if kind in NOT_YET:
        problems.add(f"{path}.reader.type: {kind!r}: {NOT_YET[kind]}")
        return
    if kind in ERNIE_FIELD_READERS:
        _translate_ernie_field(path, field, kind, notes, problems)
        return
    if kind == ERNIE_M_FIELD_READER:
        _translate_ernie_m_field(path, field, notes, problems)
        return
    if kind in FIELD_READERS and FIELD_READERS[kind] != kind:
        field["reader"]["type"] = FIELD_READERS[kind]
        notes.append(f"{path}.reader.type: {kind} -> {FIELD_READERS[kind]}")
    tokenizer = field.get("tokenizer")
    if isinstance(tokenizer, dict) and tokenizer.get("type") in TOKENIZERS:
        replacement = TOKENIZERS[tokenizer["type"]]
        notes.append(f"{path}.tokenizer.type: {tokenizer['type']} -> {replacement['type']} "
                     f"(split on split_char, no lower-casing)")
        tokenizer.update(replacement)
    if kind == "ScalarFieldReader" and field.get("name") == "label" and train_labels:
        field["reader"]["type"] = "LabelFieldReader"
        field.pop("data_type", None)
        notes.append(f"{path}: ScalarFieldReader label -> LabelFieldReader (a label map built from the training "
                     f"labels, sorted numerically: 0..N-1 keep their ids; an unknown dev/test label is an error)")
    elif kind == "ScalarFieldReader" and field.get("name") == "label":  # e.g. pairwise matching's dev labels
        field.setdefault("is_label", True)
        notes.append(f"{path}: ScalarFieldReader label: a gold answer, not an input of the exported model")
    if field.get("need_convert") is False and field["reader"].get("type") == "LabelFieldReader":
        field.pop("need_convert")


def _translate_ernie_field(path: str, field: Dict[str, Any], kind: str, notes: List[str],
                           problems: Problems) -> None:
    if kind == "ErnieClassificationFieldReader":
        field["reader"]["type"] = "ErnieTextFieldReader"
        field["_joined"] = True
    tokenizer = field.get("tokenizer")
    if not isinstance(tokenizer, dict):
        return
    params = tokenizer.pop("params", None) or {}
    if not isinstance(params, dict):
        params = {}
    if params.get("use_sentence_piece_vocab"):
        problems.add(f"{path}.tokenizer.params.use_sentence_piece_vocab: a SentencePiece vocabulary (ERNIE-M's) is "
                     f"read by ERNIE-M's field, ErnieTextFieldReaderForMultilingual with FullTokenizerErnieM; "
                     f"FullTokenizer reads WordPiece vocab.txt files")
    for key in sorted(set(params) - {"use_sentence_piece_vocab", "do_lower_case"}):
        problems.add(f"{path}.tokenizer.params.{key}: not a FullTokenizer setting wenxin knows")
    if tokenizer.get("type") == "FullTokenizer":
        tokenizer.setdefault("lowercase", bool(params.get("do_lower_case", True)))
        tokenizer.setdefault("split_symbols", False)
        notes.append(f"{path}.tokenizer: FullTokenizer as ERNIE-kit's (lowercase {tokenizer['lowercase']}, "
                     f"symbols such as emoji kept inside words: split_symbols false)")


def _translate_ernie_m_field(path: str, field: Dict[str, Any], notes: List[str], problems: Problems) -> None:
    """ERNIE-kit's ERNIE-M field: ``ErnieTextFieldReaderForMultilingual`` with ``FullTokenizerErnieM``
    (``params``: ``spm_model_file``, ``do_lower_case``, a bool or the strings "true"/"false")."""
    field["reader"]["type"] = "ErnieMTextFieldReader"
    tokenizer: Dict[str, Any] = field["tokenizer"] if isinstance(field.get("tokenizer"), dict) else {}
    if tokenizer.get("type", "FullTokenizerErnieM") != "FullTokenizerErnieM":
        problems.add(f"{path}.tokenizer.type: {tokenizer['type']!r}: ERNIE-M's field reads FullTokenizerErnieM")
        return
    params = tokenizer.get("params") or {}
    lower = params.get("do_lower_case", False)
    if isinstance(lower, str) and lower.strip().lower() in ("true", "false"):
        lower = lower.strip().lower() == "true"
    if not isinstance(lower, bool):
        problems.add(f"{path}.tokenizer.params.do_lower_case: {lower!r} is not true or false")
        return
    for key in sorted(set(params) - {"do_lower_case", "spm_model_file"}):
        problems.add(f"{path}.tokenizer.params.{key}: not a FullTokenizerErnieM setting wenxin knows")
    field["tokenizer"] = {"type": "ErnieMTokenizer", "lowercase": False, "piece_rules": "erniekit",
                          "spm_model_file": params.get("spm_model_file", ""),
                          **{k: tokenizer[k] for k in ("unk_token",) if k in tokenizer}}
    notes.append(f"{path}: ErnieTextFieldReaderForMultilingual -> ErnieMTextFieldReader, FullTokenizerErnieM -> "
                 f"ErnieMTokenizer with ERNIE-kit's piece rules (piece_rules erniekit: the ids ERNIE-kit gave; "
                 f"SentencePiece {params.get('spm_model_file', '')!r}; the whole text is one piece of input, "
                 f"split_char unused; positions from 2)")
    if lower:  # FullTokenizerErnieM takes do_lower_case and never applies it
        notes.append(f"{path}.tokenizer.params.do_lower_case: true, but ERNIE-kit's FullTokenizerErnieM does not "
                     f"lower-case text, so neither does wenxin here (lowercase false)")


def _translate_model(job: str, model: Dict[str, Any], notes: List[str]) -> None:
    if model.get("type") in ERNIE_MODELS:
        _translate_ernie_model(model, notes)
        # ERNIE-kit's ERNIE models: AdamW, epsilon 1e-6, global-norm clip 1.0
        _erniekit_optimization(model, (("optimizer", "adamw"), ("epsilon", 1e-6), ("max_grad_norm", 1.0)),
                               model["type"], notes)
    wenxin_type = MODEL_TYPES.get((JOB_TASKS[job], str(model.get("type"))))
    if wenxin_type:
        notes.append(f"model.type: {model['type']} -> {wenxin_type} (ERNIE-kit's network; wenxin's "
                     f"{model['type']} is another one)")
        model["type"] = wenxin_type
    if wenxin_type in PLAIN_ADAM_MODELS:  # ERNIE-kit's non-ERNIE models: Adam, a constant learning rate
        _erniekit_optimization(model, (("optimizer", "adam"), ("lr_scheduler", "constant"), ("learning_rate", 2e-5)),
                               wenxin_type, notes)


def _translate_ernie_model(model: Dict[str, Any], notes: List[str]) -> None:
    """An ERNIE model's encoder config path, and the keys wenxin takes from the label field."""
    embedding = model.pop("embedding", None)
    if isinstance(embedding, dict) and "config_path" in embedding and "encoder_config" not in model:
        model["encoder_config"] = embedding["config_path"]
        notes.append(f"model.embedding.config_path -> model.encoder_config ({embedding['config_path']!r})")
    if model.get("type") == "ErnieFcIe" and isinstance(model.get("num_labels"), int):
        notes.append("model.num_labels: checked against the label map")
    if model.get("type") == "ErnieFcSeqLabel":
        for key in ("vocab_path", "num_labels"):
            if key in model:
                notes.append(f"model.{key}: dropped (the tags are those of the label field's vocab_path)")
                model.pop(key)


def _erniekit_optimization(model: Dict[str, Any], defaults: Tuple[Tuple[str, Any], ...], network: Any,
                           notes: List[str]) -> None:
    """The optimization settings ERNIE-kit used for ``network``, where the file sets none."""
    opt = model.setdefault("optimization", {})
    if not isinstance(opt, dict):
        return
    for key, value in defaults:
        if key not in opt:
            opt[key] = value
            notes.append(f"model.optimization.{key}: {value!r} (what ERNIE-kit used for {network})")


def _translate_optimization(opt: Dict[str, Any], trainer: Dict[str, Any], notes: List[str]) -> None:
    """``model.optimization``: the loss-scaling keys belong to wenxin's ``trainer``; the decay
    switches become an LR schedule."""
    for key in LOSS_SCALING_KEYS:
        if key in opt:
            value = opt.pop(key)
            if key not in trainer:
                trainer[key] = value
                notes.append(f"model.optimization.{key} -> trainer.{key}")
    if "use_lr_decay" in opt:
        decay = opt.pop("use_lr_decay")
        opt["lr_scheduler"] = "linear_warmup_decay" if decay else "constant"
        notes.append(f"model.optimization.use_lr_decay: {decay!r} -> lr_scheduler {opt['lr_scheduler']!r}")
    if "use_default_decay" in opt:
        opt.pop("use_default_decay")
        notes.append("model.optimization.use_default_decay: dropped (ERNIE-kit reads it but nothing uses it)")
    if "max_train_steps" in opt:
        opt.pop("max_train_steps")
        notes.append("model.optimization.max_train_steps: dropped (the schedule decays over the run's own steps)")


def _readers(raw: Dict[str, Any]) -> List[Dict[str, Any]]:
    dataset = dict_at(raw, "dataset_reader")
    return [r for r in dataset.values() if isinstance(r, dict)]


def _type_of(spec: Any) -> Optional[str]:
    return spec.get("type") if isinstance(spec, dict) else None


def _job_type(raw: Dict[str, Any]) -> Optional[str]:
    """``trainer.extra_param.meta.job_type``; ERNIE-kit's generation files name none, their
    reader and model say it."""
    trainer = dict_at(raw, "trainer")
    extra = dict_at(trainer, "extra_param")
    meta = dict_at(extra, "meta")
    job = meta.get("job_type")
    if job is None and (_type_of(raw.get("model")) == GEN_MODEL
                        or any(r.get("type") == GEN_READER for r in _readers(raw))):
        return "text_generation"
    return job if isinstance(job, str) else None
