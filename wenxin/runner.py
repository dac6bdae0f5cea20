"""Building a run from a task file: config -> task package -> readers -> model -> trainer."""
from __future__ import annotations

import contextlib
import logging
import os
from typing import TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, Optional, Sequence, TextIO, Tuple

from wenxin.common import startup_notes, threads
from wenxin.common.errors import ConfigError, WenxinError
from wenxin.common.logs import CONSOLE, setup_logging
from wenxin.common.progress import progress_enabled
from wenxin.config.loader import load_config
from wenxin.config.task_check import TaskClasses, resolve_task
from wenxin.config.task_config import source_of, translations_of
from wenxin.config.trainer_schema import set_keys
from wenxin.controller.base_trainer import BaseTrainer
from wenxin.controller.checkpointer import prepare_output_path, resume_checkpoint
from wenxin.controller.checkpoint import INFERENCE_DIR, PRETRAINED_DIR, VOCAB_DIR
from wenxin.controller.env import init_distributed, paddle_rank, paddle_world_size, set_seed, setup_device
from wenxin.controller.run_context import RunContext, ThreadChoice
from wenxin.controller.summary import result_checkpoint, run_summary
from wenxin.data.dataset_reader import build_readers

if TYPE_CHECKING:
    from wenxin.models.base_model import BaseModel

logger = logging.getLogger("wenxin")
PRETRAINED_FORMAT = 1  # the manifest's format of a model folder export (export --format pt)
PRETRAINED_KIND = "pretrained"  # and its record of the writer


def resolve_classes(config: Dict[str, Any]) -> Tuple[str, type, type]:
    """Import the task and check every registered name and model/hook key before any work."""
    classes = resolve_task(config)
    return classes.scope, classes.model_cls, classes.trainer_cls


def build_trainer(config: Dict[str, Any], vocab_checkpoint: Optional[str] = None) -> BaseTrainer:
    """Everything a run needs, in order; bad input fails before training starts. A resumed run
    (or ``vocab_checkpoint``) takes the vocabularies saved in its checkpoint."""
    classes = resolve_task(config)  # before anything is set up
    return assemble_trainer(config, setup_environment(config), classes, vocab_checkpoint)


def setup_environment(config: Dict[str, Any]) -> RunContext:
    """Set up this process for a run of ``config``: its output folder and log file, the device,
    the CPU threads' share, the distributed group and the seeds; returns what it decided,
    with the checkpoint the run continues."""
    cfg = config["trainer"]
    rank = int(os.environ.get("PADDLE_TRAINER_ID", "0"))  # set by paddle.distributed.launch
    prepare_output_path(cfg, is_writer=rank == 0)
    setup_logging(os.path.join(cfg["output_path"], "logs", "train.log") if rank == 0 else None)
    for note in startup_notes.take():
        logger.info("%s", note)
    translations = translations_of(config)
    for note in translations:
        logger.info("%s", note)
    cpu_threads = None
    environment = cfg["environment"]
    if setup_device(environment["PADDLE_PLACE_TYPE"]) == "cpu":  # the trainer sets them, once its model is built
        count, reason = threads.choose_threads(environment["cpu_threads"], user=threads.USER_THREADS)
        cpu_threads = ThreadChoice(count, reason,
                                   automatic=environment["cpu_threads"] == 0 and threads.USER_THREADS is None)
    init_distributed(environment["PADDLE_IS_FLEET"])
    set_seed(cfg["seed"])
    return RunContext(source=source_of(config), translations=translations, cpu_threads=cpu_threads,
                      resume_from=resume_checkpoint(cfg), rank=paddle_rank(), world_size=paddle_world_size())


def assemble_trainer(config: Dict[str, Any], context: RunContext, classes: TaskClasses,
                     vocab_checkpoint: Optional[str] = None) -> BaseTrainer:
    """The trainer of ``classes`` for ``config`` in a process ``setup_environment`` prepared: its
    readers (with the vocabularies of the checkpoint it resumes, or of ``vocab_checkpoint``) and
    its model builder."""
    cfg = config["trainer"]
    vocab_source = context.resume_from or vocab_checkpoint  # its vocabularies, not rebuilt ones
    saved_vocabs = os.path.join(vocab_source, VOCAB_DIR) if vocab_source and os.path.isdir(vocab_source) else None
    readers = build_readers(config["dataset_reader"], classes.scope, saved_vocab_dir=saved_vocabs,
                            show_progress=context.is_writer and progress_enabled(cfg["logging"]["progress_bar"]))
    for name, reader in readers.items():
        logger.info("%s: %d examples from %s", name, len(reader), reader.reader_config["data_path"])
    data_info = readers["train_reader"].data_info()

    def make_model() -> BaseModel:
        model = classes.model_cls(config["model"], data_info)
        model.task_scope = classes.scope  # its optimizer and schedule names are looked up in the task first
        if cfg["step"]["recompute"]:
            if not config["model"]["is_dygraph"]:
                raise ConfigError("trainer.step.recompute: eager mode only (model.is_dygraph: 1); Paddle's "
                                  "static-graph recompute pass saved no memory on this trainer's programs "
                                  "(docs/performance.md)")
            model.enable_recompute("trainer.step.recompute")
        return model

    trainer: BaseTrainer = classes.trainer_cls(config, make_model, readers, classes.scope, context=context)
    return trainer


def train(param_path: str, overrides: Iterable[str] = (),
          summary: Optional[TextIO] = None) -> Tuple[Dict[str, Dict[str, float]], bool]:
    """Load a task file and train; returns the final metrics by reader, and whether a stop signal
    ended the run early (after saving a checkpoint to resume from). The run's closing lines (its
    result, where its outputs are, what to run next) are logged; with ``summary`` (the command
    line passes stdout) they are written there instead of to the console log."""
    trainer, metrics = _train_and_sum_up(param_path, list(overrides), summary)
    return metrics, bool(trainer.state.interrupted)


def train_for_export(param_path: str, overrides: Iterable[str] = ()) -> Tuple[Dict[str, Dict[str, float]],
                                                                             Optional[str]]:
    """Train a task file to its end; returns the final metrics by reader and the exported model of
    the run's result (its best or final checkpoint; None where the run exported none). A run
    stopped by a signal is an error."""
    trainer, metrics = _train_and_sum_up(param_path, list(overrides), None)
    if trainer.state.interrupted:
        raise WenxinError(f"{param_path}: the run was stopped before it finished (resume it with "
                          f"--set trainer.checkpoints.resume=auto)")
    result, _, _ = result_checkpoint(trainer)
    folder = trainer.checkpoints.export_folder(os.path.basename(result), result) if result else None
    return metrics, folder if folder and os.path.isdir(folder) else None


def _train_and_sum_up(param_path: str, overrides: List[str], summary: Optional[TextIO]
                      ) -> Tuple[BaseTrainer, Dict[str, Dict[str, float]]]:
    config = load_config(param_path, overrides)
    trainer = build_trainer(config)
    metrics = trainer.do_train()
    if trainer.is_writer:
        for line in run_summary(trainer, param_path, overrides):
            logger.info("%s", line, extra={CONSOLE: summary is None})
            if summary is not None:
                print(line, file=summary, flush=True)
    return trainer, metrics


@contextlib.contextmanager
def checkpoint_trainer(config: Dict[str, Any], checkpoint: str, **trainer_settings: Any) -> Iterator[BaseTrainer]:
    """A trainer for ``config`` holding the parameters and vocabularies of ``checkpoint`` (a
    checkpoint folder or params file), writing to a scratch folder instead of the task's
    output_path: what export and evaluate work on."""
    import tempfile

    from wenxin.controller import parameters
    params_file = parameters.resolve_params_file(checkpoint)
    params = parameters.load_model_params(checkpoint, "checkpoint model file")
    with tempfile.TemporaryDirectory() as scratch:
        set_keys(config["trainer"], output_path=scratch, resume="none", load_checkpoint="", load_parameters="",
                 pre_train_model=[], visualdl=False, **trainer_settings)
        trainer = build_trainer(config, vocab_checkpoint=checkpoint)
        trainer.restore_model_params(params, params_file)
        yield trainer


def export(param_path: str, checkpoint: str, output: str = "", overrides: Iterable[str] = (),
           formats: Sequence[str] = ("paddle",)) -> str:
    """Export the parameters of ``checkpoint`` (a checkpoint folder or params file) as an inference
    folder (default ``<checkpoint>/inference``); with ``onnx`` in ``formats`` it also holds
    ``model.onnx``, checked against Paddle's outputs on a dev batch. The task file supplies the
    model and readers; nothing is written to its output_path."""
    return export_config(load_config(param_path, overrides), checkpoint, output, formats)


def export_config(config: Dict[str, Any], checkpoint: str, output: str = "",
                  formats: Sequence[str] = ("paddle",)) -> str:
    """``export`` of a loaded config (``load_config`` / ``config_from_dict``). Only an earlier
    inference export is replaced; anything else at ``output`` is refused before the model loads."""
    from wenxin.common.owned_folders import refuse_foreign
    from wenxin.data.export_bundle import KIND
    target = output or os.path.join(checkpoint if os.path.isdir(checkpoint) else os.path.dirname(checkpoint),
                                    INFERENCE_DIR)
    refuse_foreign(target, KIND)
    with checkpoint_trainer(config, checkpoint) as trainer:
        folder = trainer.export_inference(target)
        if "onnx" in formats:
            from wenxin.inference.onnx_export import check_batch, export_onnx
            export_onnx(folder, check_batch(trainer.readers))
        return folder


def export_pretrained(param_path: str, checkpoint: str, output: str = "", overrides: Iterable[str] = (),
                      dtype: str = "bfloat16", max_shard_mb: float = 5000.0) -> str:
    """Export the model of ``checkpoint`` as the model folder other runtimes load (an ERNIE 4.5
    ``-PT`` folder: safetensors shards and their index, config.json, generation_config.json, the
    tokenizer's files; LoRA adapters merged) in ``dtype``, into ``output`` (default
    ``<checkpoint>/pretrained``), sealed by a manifest and written whole or not at all."""
    from wenxin.models.ernie45_export import shard_bytes
    return export_pretrained_config(load_config(param_path, overrides), checkpoint, output, dtype,
                                    shard_bytes(max_shard_mb))


def export_pretrained_config(config: Dict[str, Any], checkpoint: str, output: str, dtype: str,
                             max_shard_bytes: int) -> str:
    """``export_pretrained`` of a loaded config. Only an earlier model-folder export is replaced
    (``wenxin.common.owned_folders``); anything else at ``output`` is refused before the model loads."""
    from wenxin.common import manifest, owned_folders
    target = os.path.abspath(output or os.path.join(checkpoint if os.path.isdir(checkpoint) else
                                                    os.path.dirname(checkpoint), PRETRAINED_DIR))
    with owned_folders.writing(target, PRETRAINED_KIND) as tmp, \
            checkpoint_trainer(config, checkpoint) as trainer:
        files = trainer.engine.model.write_pretrained_folder(tmp, trainer.engine.model_state_dict(), dtype,
                                                             max_shard_bytes)
        manifest.write_manifest(tmp, PRETRAINED_FORMAT, kind=PRETRAINED_KIND)
    logger.info("exported the model folder %s (%s, %d files)", target, dtype, len(files))
    return target


def evaluate(param_path: str, checkpoint: str, reader_names: Sequence[str] = (),
             overrides: Iterable[str] = ()) -> Dict[str, Dict[str, float]]:
    """Score the parameters of ``checkpoint`` on the task file's dev and test readers (or
    ``reader_names``); returns the metrics by reader. Nothing is written to its output_path."""
    return evaluate_config(load_config(param_path, overrides), checkpoint, reader_names, "--reader", param_path)


def evaluate_config(config: Dict[str, Any], checkpoint: str, reader_names: Sequence[str] = (),
                    key: str = "readers", where: str = "the task") -> Dict[str, Dict[str, float]]:
    """``evaluate`` of a loaded config; an unknown reader name is an error naming ``key`` and
    ``where`` the config came from."""
    from wenxin.controller import checkpoint as ckpt
    wanted = [name if name.endswith("_reader") else f"{name}_reader" for name in reader_names]
    available = [name for name in ("dev_reader", "test_reader") if config["dataset_reader"].get(name)]
    unknown = [name for name in wanted if name not in available]
    if unknown or not (wanted or available):
        raise ConfigError(f"{key}: {', '.join(unknown) or 'dev/test'} not configured in {where} "
                          f"(it has: {', '.join(available) or 'no dev_reader or test_reader'})")
    step = ckpt.read_trainer_state(checkpoint)["global_step"] if os.path.isdir(checkpoint) and \
        os.path.isfile(os.path.join(checkpoint, ckpt.STATE_FILE)) else 0
    with checkpoint_trainer(config, checkpoint, is_eval_dev=0, is_eval_test=0) as trainer:
        return {name: trainer.evaluate(name, run_hooks=False, step=step) for name in wanted or available}


def copy_examples(target: str) -> List[str]:
    """Copy the example task files and their data-preparation scripts into ``target/examples``
    (files already there are kept); returns the files written."""
    import shutil

    from wenxin.common.bundled import bundled_folder
    source = bundled_folder("examples")
    folder = os.path.join(target, "examples")
    written = []
    try:
        os.makedirs(folder, exist_ok=True)
        for name in sorted(os.listdir(source)):
            if name.endswith((".json", ".py", ".yaml")) and name != "__init__.py" \
                    and not os.path.exists(os.path.join(folder, name)):
                shutil.copyfile(os.path.join(source, name), os.path.join(folder, name))
                written.append(os.path.join(folder, name))
    except OSError as e:
        raise ConfigError(f"{folder}: cannot copy the examples ({e.strerror or e})") from None
    return written


def migrate(param_path: str, output: str = "", force: bool = False) -> Dict[str, Any]:
    """Translate an ERNIE-kit task or infer file, or a native task file of flat trainer keys, into
    the native format with the trainer keys grouped: checks the result against wenxin's schema
    (nothing is written when a key still does not fit), writes it to ``output`` (or prints it;
    an existing file or link there is replaced only with ``force``) and lists each translation
    made, one line each, on stderr."""
    import json
    import sys

    from wenxin.common.errors import ConfigError, Problems
    from wenxin.translation import erniekit, erniekit_infer
    from wenxin.config.document import check_values
    from wenxin.config.infer_schema import INFER_SCHEMA
    from wenxin.config.loader import read_task_file
    from wenxin.config.schema import validate
    from wenxin.config.task_schema import ROOT
    from wenxin.config.trainer_schema import group_keys, grouping_note
    if output:
        _refuse_overwrite(output, force)
    raw = read_task_file(param_path)
    problems = Problems()  # what the translation left that wenxin's schema refuses
    if erniekit_infer.is_erniekit_infer(raw):
        config, notes = erniekit_infer.translate_infer(raw)
        schema, what = INFER_SCHEMA, "infer file"
    else:
        config, notes = erniekit.translate(raw, param_path) if erniekit.is_erniekit(raw) else (raw, [])
        schema, what = ROOT, "task file"
        moved = group_keys(config.get("trainer"), problems)
        notes = notes + ([grouping_note(moved)] if moved else [])
        if not notes:
            raise ConfigError(f"{param_path}: already a native wenxin task or infer file (it has no ERNIE-kit "
                              f"markers or flat trainer keys, or it names its task or model_dir)")
    check_values(config, problems)
    validate(config, schema, "", problems)
    if problems.messages:
        raise ConfigError(problems=[f"{param_path}: translated, the {what} still does not fit: {m}"
                                    for m in problems.messages])
    text = json.dumps(config, indent=2, ensure_ascii=False) + "\n"
    for note in notes:
        print(f"translated: {note}", file=sys.stderr)
    if output:
        _write_new_file(output, text, f"the native {what}", force)
        print(output)
    else:
        print(text, end="")
    return config


def _refuse_overwrite(path: str, force: bool) -> None:
    """``-o path`` must name a file to write: something already there is refused unless ``force``."""
    if os.path.isdir(path) and not os.path.islink(path):
        raise ConfigError(f"-o {path}: a folder; give the file to write")
    if os.path.lexists(path) and not force:
        held = f"a symbolic link to {os.readlink(path)}" if os.path.islink(path) else "an existing file"
        raise ConfigError(f"-o {path}: {held}; nothing was written (add --force to replace it)")


def _write_new_file(path: str, text: str, what: str, force: bool) -> None:
    """Write ``text`` to ``path`` whole (``_refuse_overwrite`` first); a symbolic link there is
    replaced by the file, never written through into what it points to."""
    from wenxin.common.files import write_text_atomically
    _refuse_overwrite(path, force)
    try:
        write_text_atomically(path, text)
    except OSError as e:
        raise ConfigError(f"-o {path}: cannot write {what} ({e.strerror or e})") from None
