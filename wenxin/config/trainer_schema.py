"""The ``trainer`` section of a task file, grouped by the part of the trainer that owns each key.

The run's own keys (its type, output folder, seed, length, hooks) sit at the top of the section;
the rest are in one group per part, each group that part's schema:

========================  ===================================================================
``trainer.environment``   the device, fleet and CPU threads (``runner.setup_environment``)
``trainer.step``          how one optimizer step is taken (``controller.step_rule``, the engines)
``trainer.precision``     mixed precision and loss scaling (``controller.amp.AmpSettings``)
``trainer.evaluation``    when and what is evaluated, and the metric that ranks (``Evaluator``,
                          the evaluation, best-model and early-stopping hooks)
``trainer.checkpoints``   what is saved, kept and started from (``Checkpointer``, ``CheckpointManager``)
``trainer.export``        the inference models written beside checkpoints (the export hooks)
``trainer.logging``       the log, VisualDL, progress bars and the profiler (the logging hooks)
========================  ===================================================================

Task files written before the groups (every key flat in ``trainer``) still load: ``group_keys``
moves each flat key into its group, and the loader logs one note saying so. A key path given on
the command line (``--set trainer.save_model_step=5``), in a sweep or in the studio's form goes
through ``canonical_path`` the same way.
"""
from __future__ import annotations

import difflib
from typing import Any, Dict, List, Sequence, Tuple

from wenxin.common.errors import ConfigError, Problems
from wenxin.config.schema import Key, Schema, path_key

HOOK: Schema = {
    "type": Key(str),
    "priority": Key((int, type(None)), None, doc="lower runs first; default: the hook's own"),
    "params": Key(dict, {}, open_keys=True),
}

EARLY_STOPPING: Schema = {  # EarlyStoppingHook's params, and trainer.evaluation.early_stopping
    "metric": Key((str, type(None)), None, doc="the dev metric watched (null: trainer.evaluation.metric)"),
    "mode": Key((str, type(None)), None, choices=["max", "min", None], doc="null: trainer.evaluation.metric_mode"),
    "patience": Key(int, 3, minimum=1, doc="dev evaluations without an improvement before the run stops"),
    "min_delta": Key(float, 0.0, minimum=0.0, doc="the least change that counts as an improvement"),
}

PRETRAINED: Schema = {
    "name": Key(str, ""),
    "params_path": path_key(),
    "prefix_map": Key(dict, {}, open_keys=True, items=Key(str), doc="rename: {'old.prefix': 'new.prefix'}"),
}

FAST_PATHS: Schema = {
    "program_runner": Key(bool, True, doc="static steps skip Executor.run's per-call program lookup"),
    "visualdl_records": Key(bool, True, doc="VisualDL records written on the training thread "
                                            "(false: visualdl.LogWriter)"),
}

PROFILE: Schema = {
    "start_step": Key(int, 5, minimum=1, doc="the first recorded step (later than 1 skips the warm-up)"),
    "steps": Key(int, 5, minimum=1, doc="how many steps are recorded"),
}

ENVIRONMENT: Schema = {
    "PADDLE_PLACE_TYPE": Key(str, "cpu", choices=["cpu", "gpu"]),
    "PADDLE_IS_FLEET": Key(bool, False),
    "cpu_threads": Key(int, 0, minimum=0, doc="threads of Paddle's CPU kernels in each process (0: its share of the "
                                              "cores it may use, fewer for a small model, a static program or a "
                                              "busy machine; the user's OMP_NUM_THREADS above 1)"),
}

STEP: Schema = {
    "gradient_accumulation_steps": Key(int, 1, minimum=1),
    "recompute": Key(bool, False, doc="gradient checkpointing: keep only each decoder layer's input and compute "
                                      "its activations again for the backward pass (less memory, about a third "
                                      "more compute; eager mode; models that offer it: Ernie45SFT)"),
    "nan_check_step": Key(int, 1, minimum=0, doc="check the loss for NaN/Inf every N steps (0: off); a checked "
                                                 "step with a NaN/Inf loss skips its update, in either mode; each "
                                                 "check reads the loss on the host (on a GPU, a larger N lets the "
                                                 "host run ahead)"),
    "max_nan_steps": Key(int, 1, minimum=1, doc="stop after this many non-finite losses in a row"),
}

PRECISION: Schema = {
    "use_amp": Key(bool, False),
    "amp_dtype": Key(str, "auto", choices=["auto", "float16", "bfloat16"],
                     doc="auto: float16 on GPU, bfloat16 on CPU"),
    "amp_level": Key(str, "O1", choices=["O1", "O2"]),
    "amp_custom_white_list": Key(list, [], items=Key(str), doc="extra ops to compute in low precision"),
    "amp_custom_black_list": Key(list, [], items=Key(str), doc="ops to keep in float32"),
    "use_loss_scaling": Key((bool, type(None)), None, doc="GradScaler on; null: only for float16"),
    "use_dynamic_loss_scaling": Key(bool, True),
    "init_loss_scaling": Key(float, 32768.0, minimum=1.0),
    "incr_every_n_steps": Key(int, 1000, minimum=1),
    "decr_every_n_nan_or_inf": Key(int, 2, minimum=1),
    "incr_ratio": Key(float, 2.0, minimum=1.0),
    "decr_ratio": Key(float, 0.5, minimum=0.0, maximum=1.0),
}

EVALUATION: Schema = {
    "eval_step": Key(int, 0, minimum=0, doc="evaluate every N steps (0: at the end of each epoch)"),
    "is_eval_dev": Key(bool, False),
    "is_eval_test": Key(bool, False),
    "eval_batch_size": Key(int, 0, minimum=0, doc="0: the reader's batch_size"),
    "metric": Key(str, "acc", doc="dev metric that picks the best checkpoint / early stopping"),
    "metric_mode": Key(str, "max", choices=["max", "min"]),
    "load_best_at_end": Key(bool, False, doc="after training, load checkpoints/best and evaluate it "
                                             "(logged as best_dev / best_test)"),
    "early_stopping": Key((dict, type(None)), None, children=EARLY_STOPPING,
                          doc="stop once the dev metric has not improved for patience evaluations (saving a "
                              "checkpoint; the best one stays the result), e.g. {\"patience\": 3}; null: off"),
}

CHECKPOINTS: Schema = {
    "save_model_step": Key(int, 0, minimum=0, doc="checkpoint every N steps (0: at each epoch end)"),
    "keep_checkpoint_max": Key(int, 3, minimum=1, doc="periodic checkpoints kept (best kept apart)"),
    "save_best": Key(bool, True),
    "save_top_k": Key(int, 0, minimum=0, doc="also keep the k best checkpoints by the dev trainer.evaluation.metric as "
                                             "checkpoints/top_step_<N> (checkpoints/index.json ranks them)"),
    "keep_optimizer_state": Key(str, "latest", choices=["latest", "latest_and_best", "all"],
                                doc="latest: the newest periodic checkpoint (the one a run resumes from) and the "
                                    "one before it (the fallback when the newest is damaged) keep the optimizer "
                                    "state, about 2/3 of a checkpoint with Adam; older ones, top-k "
                                    "and best keep the weights for evaluate, export and load_parameters. "
                                    "latest_and_best: best keeps it too (for trainer.checkpoints.resume: best). "
                                    "all: every one "
                                    "keeps it, so trainer.checkpoints.load_checkpoint can continue from any"),
    "output_layout": Key(str, "wenxin", choices=["wenxin", "erniekit"],
                         doc="erniekit: checkpoints in save_checkpoints/checkpoints_step_<N> and an inference model "
                             "in save_inference_model/inference_step_<N> at every save (set for ERNIE-kit task files)"),
    "resume": Key(str, "none", choices=["none", "auto", "best"],
                  doc="auto: resume from the latest complete checkpoint; best: continue from checkpoints/best "
                      "(the checkpoints after it move aside)"),
    "load_checkpoint": path_key("", doc="checkpoint folder to resume from"),
    "load_parameters": path_key("", doc="model parameters to start from (no optimizer state)"),
    "pre_train_model": Key((list, str), [], doc="params files to warm-start from (docs/tasks.md, fine-tuning ERNIE)"),
}

EXPORT: Schema = {
    "save_inference": Key(bool, False, doc="export an inference model into every checkpoint (<ckpt>/inference)"),
    "save_onnx": Key(bool, True, doc="with save_inference: when training ends, the result's inference model "
                                     "also gets model.onnx, where paddle2onnx and onnxruntime are installed "
                                     "(pip install \"wenxin[onnx]\") and ONNX Runtime gives Paddle's outputs on "
                                     "a dev batch; Predictor then runs it with ONNX Runtime"),
    "save_onnx_max_mb": Key((int, float), 1024, minimum=0,
                            doc="save_onnx converts only a model of at most this many MB of parameters: "
                                "paddle2onnx's process needs about 9 times the model's size beside the "
                                "training process (0: no limit); a larger one is skipped with a log line, "
                                "and wenxin export --format onnx converts it later"),
}

LOGGING: Schema = {
    "train_log_step": Key(int, 10, minimum=1),
    "visualdl": Key(bool, True, doc="also log scalars to VisualDL (output_path/vdl)"),
    "progress_bar": Key(str, "auto", choices=["auto", "on", "off"],
                        doc="progress bars with ETA for training and evaluation; auto: when stderr is a terminal"),
    "profile": Key((dict, type(None)), None, children=PROFILE,
                   doc="record training steps with paddle.profiler: a Chrome trace and summary tables in "
                       "output_path/profile, the operator table in the log (see docs/performance.md)"),
}


GROUPS: Dict[str, Tuple[Schema, str]] = {  # group -> (its schema, what it is for)
    "environment": (ENVIRONMENT, "the device, distribution and CPU threads"),
    "step": (STEP, "how an optimizer step is taken: accumulation, recomputation, the NaN guard"),
    "precision": (PRECISION, "mixed precision (AMP) and loss scaling"),
    "evaluation": (EVALUATION, "when and what is evaluated; the metric that picks the best checkpoint"),
    "checkpoints": (CHECKPOINTS, "what is saved and kept, and what a run starts from"),
    "export": (EXPORT, "inference models written beside the checkpoints"),
    "logging": (LOGGING, "the training log, VisualDL, progress bars and the profiler"),
}

TRAINER: Schema = {
    "type": Key(str, "CustomTrainer", doc="a registered trainer; CustomTrainer (and a task's trainer on "
                                            "BaseTrainer) runs the mode model.is_dygraph picks"),
    "output_path": path_key("./output", non_empty=True),
    "seed": Key(int, 42, minimum=0, maximum=2**32 - 1),
    "epoch": Key(int, 1, minimum=1),
    "max_steps": Key(int, -1, doc="> 0: stop after this many optimizer steps (overrides epoch)"),
    "hooks": Key(list, [], items=Key(dict, children=HOOK), doc="extra hooks (docs/training.md, hooks)"),
    "fast_paths": Key(dict, {}, children=FAST_PATHS, doc="switches for the fast paths through Paddle's and "
                                                         "VisualDL's internals (wenxin/compat)"),
    "extra_param": Key(dict, {}, open_keys=True),
    **{name: Key(dict, {}, children=schema, doc=doc) for name, (schema, doc) in GROUPS.items()},
}

# a key of a group -> the group (every group key is unique across the groups)
GROUP_OF: Dict[str, str] = {key: name for name, (schema, _) in GROUPS.items() for key in schema}


def canonical_path(keys: Sequence[str]) -> List[str]:
    """A key path with a flat trainer key put into its group: ``trainer.save_model_step`` ->
    ``trainer.checkpoints.save_model_step``; any other path as it is."""
    if len(keys) >= 2 and keys[0] == "trainer" and keys[1] in GROUP_OF:
        return [keys[0], GROUP_OF[keys[1]], *keys[1:]]
    return list(keys)


def group_keys(trainer: Any, problems: Problems) -> List[str]:
    """Move the flat keys of a ``trainer`` section into their groups, in place; returns the keys
    moved. A key set both flat and in its group is a problem naming both paths; an unknown flat
    key close to a group's key is one naming where that key lives."""
    if not isinstance(trainer, dict):
        return []
    for key in trainer:
        if isinstance(key, str) and key not in TRAINER and key not in GROUP_OF:
            hint = difflib.get_close_matches(key, list(GROUP_OF), n=1, cutoff=0.75)
            if hint:
                problems.add(f"trainer.{key}: unknown key (did you mean trainer.{GROUP_OF[hint[0]]}.{hint[0]}?)",
                             key=f"trainer.{key}")
    moved = []
    for key in [k for k in trainer if k in GROUP_OF]:
        group = GROUP_OF[key]
        section = trainer.setdefault(group, {})
        if section is None:
            section = trainer[group] = {}
        if not isinstance(section, dict):
            continue  # the schema reports trainer.<group> not being an object
        if key in section:
            problems.add(f"trainer.{key} and trainer.{group}.{key}: the same key set twice; keep "
                         f"trainer.{group}.{key}", key=f"trainer.{key}")
            continue
        section[key] = trainer.pop(key)
        moved.append(key)
    return moved


def set_keys(trainer: Dict[str, Any], **values: Any) -> None:
    """Set keys of a checked ``trainer`` section by name, each where it lives (``save_best`` in
    ``checkpoints``, ``epoch`` at the top): for code that derives one run's config from another's."""
    for key, value in values.items():
        if key in GROUP_OF:
            trainer[GROUP_OF[key]][key] = value
        elif key in TRAINER:
            trainer[key] = value
        else:
            raise KeyError(f"trainer.{key}: not a key of the trainer section")


def refuse_flat_keys(trainer: Dict[str, Any]) -> None:
    """Raise ``ConfigError`` for a flat key set in a checked trainer section (by code that changed
    the config after loading it), which no part would read."""
    flat = [key for key in trainer if key in GROUP_OF]
    if flat:
        raise ConfigError("; ".join(f"trainer.{key}: set after the task file was checked, where no part reads "
                                    f"it; set trainer.{GROUP_OF[key]}.{key}" for key in flat))


def as_written(message: str, moved: Sequence[str]) -> str:
    """A problem about a moved key named by the path its file (or ``--set``) wrote:
    ``trainer.checkpoints.save_model_step: ...`` -> ``trainer.save_model_step: ...``."""
    for key in moved:
        grouped = f"trainer.{GROUP_OF[key]}.{key}"
        if message.startswith(grouped) and message[len(grouped):len(grouped) + 1] in (":", ".", "[", " "):
            return f"trainer.{key}{message[len(grouped):]}"
    return message


def grouping_note(moved: Sequence[str]) -> str:
    """The one note a file with flat trainer keys gets."""
    return ("trainer: flat keys read into their groups (" + ", ".join(f"{k} -> {GROUP_OF[k]}.{k}" for k in moved)
            + "); a task file may write them grouped")
