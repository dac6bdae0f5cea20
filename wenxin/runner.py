"""Building a run from a task file: config -> task package -> readers -> model -> trainer."""
from __future__ import annotations

import logging
import os
from typing import Any, Dict, Iterable, Optional, Tuple

from wenxin.config.loader import load_config
from wenxin.config.task_check import resolve_task
from wenxin.controller.base_trainer import BaseTrainer, prepare_output_path, resume_checkpoint
from wenxin.controller.checkpoint import VOCAB_DIR
from wenxin.controller.env import init_distributed, set_seed, setup_device, setup_logging
from wenxin.data.dataset_reader import build_readers

logger = logging.getLogger("wenxin")


def resolve_classes(config: Dict[str, Any]) -> Tuple[str, type, type]:
    """Import the task and check every registered name and model/hook key before any work."""
    classes = resolve_task(config)
    return classes.scope, classes.model_cls, classes.trainer_cls


def build_trainer(config: Dict[str, Any], vocab_checkpoint: Optional[str] = None) -> BaseTrainer:
    """Everything a run needs, in order; bad input fails before training starts. A resumed run
    (or ``vocab_checkpoint``) takes the vocabularies saved in its checkpoint."""
    scope, model_cls, trainer_cls = resolve_classes(config)
    cfg = config["trainer"]
    prepare_output_path(cfg)
    rank = int(os.environ.get("PADDLE_TRAINER_ID", "0"))  # set by paddle.distributed.launch
    setup_logging(os.path.join(cfg["output_path"], "logs", "train.log") if rank == 0 else None)
    for note in config.get("_translations", []):
        logger.info("ERNIE-kit task file: %s", note)
    setup_device(cfg["PADDLE_PLACE_TYPE"])
    init_distributed(cfg["PADDLE_IS_FLEET"])
    set_seed(cfg["seed"])
    config["_resume_from"] = resume_checkpoint(cfg)  # its vocabularies, not rebuilt ones
    vocab_source = config["_resume_from"] or vocab_checkpoint
    saved_vocabs = os.path.join(vocab_source, VOCAB_DIR) if vocab_source and os.path.isdir(vocab_source) else None
    readers = build_readers(config["dataset_reader"], scope, saved_vocab_dir=saved_vocabs)
    for name, reader in readers.items():
        logger.info("%s: %d examples from %s", name, len(reader), reader.reader_config["data_path"])
    data_info = readers["train_reader"].data_info()
    return trainer_cls(config, lambda: model_cls(config["model"], data_info), readers, scope)


def train(param_path: str, overrides: Iterable[str] = ()) -> Tuple[Dict[str, Dict[str, float]], bool]:
    """Load a task file and train; returns the final metrics by reader, and whether a stop signal
    ended the run early (after saving a checkpoint to resume from)."""
    config = load_config(param_path, overrides)
    trainer = build_trainer(config)
    metrics = trainer.do_train()
    return metrics, bool(trainer.state.interrupted)


def export(param_path: str, checkpoint: str, output: str = "", overrides: Iterable[str] = ()) -> str:
    """Export the parameters of ``checkpoint`` (a checkpoint folder or params file) as an inference
    folder (default ``<checkpoint>/inference``). The task file supplies the model and readers;
    nothing is written to its output_path."""
    import tempfile

    from wenxin.controller import checkpoint as ckpt
    config = load_config(param_path, overrides)
    params_file = ckpt.resolve_params_file(checkpoint)
    params = ckpt.load_model_params(checkpoint, "checkpoint model file")
    with tempfile.TemporaryDirectory() as scratch:
        config["trainer"].update(output_path=scratch, resume="none", load_checkpoint="", load_parameters="",
                                 pre_train_model=[], visualdl=False)
        trainer = build_trainer(config, vocab_checkpoint=checkpoint)
        trainer.restore_model_params(params, params_file)
        target = output or os.path.join(checkpoint if os.path.isdir(checkpoint) else
                                        os.path.dirname(checkpoint), "inference")
        return trainer.export_inference(target)


def migrate(param_path: str, output: str = "") -> Dict[str, Any]:
    """Translate an ERNIE-kit task file into the native format: writes it to ``output`` (or prints
    it) and lists each translation made, one line each, on stderr."""
    import json
    import sys

    from wenxin.common.errors import ConfigError
    from wenxin.compat import erniekit
    from wenxin.config.loader import read_task_file
    raw = read_task_file(param_path)
    if not erniekit.is_erniekit(raw):
        raise ConfigError(f"{param_path}: already a native wenxin task file (it has no ERNIE-kit markers, "
                          f"or it names its task)")
    config, notes = erniekit.translate(raw, param_path)
    text = json.dumps(config, indent=2, ensure_ascii=False) + "\n"
    for note in notes:
        print(f"translated: {note}", file=sys.stderr)
    if output:
        try:
            with open(output, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            raise ConfigError(f"{output}: cannot write the native task file ({e.strerror or e})") from None
        print(output)
    else:
        print(text, end="")
    return config
