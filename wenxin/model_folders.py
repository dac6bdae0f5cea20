"""A model folder is a model: an ERNIE 4.5 folder as users download it (Baidu's ``-PT`` or
ERNIEKit's ``-Paddle`` layout, dense or mixture-of-experts) or as ``wenxin export --format pt``
writes it, served, predicted with and evaluated without a task file or a checkpoint.

Serving needs the folder's decode step programs (``prefill``, ``extend``: an inference export,
``wenxin.data.export_bundle``). They are built on first use, from the chat task's model with the
folder's weights, into a cache folder, and found there afterwards:

    <cache>/exports/<folder name>-<graph mode>-<key>/   the sealed inference export
    <cache>/exports/<folder name>-<graph mode>-<key>.source.json   which folder it was built from

``<cache>`` is ``$WENXIN_CACHE``, else ``$XDG_CACHE_HOME/wenxin``, else ``~/.cache/wenxin``
(``wenxin cache`` lists it, ``wenxin cache --clear`` empties it). The key covers wenxin's and
Paddle's versions, the graph mode, the settings below, every file's name, size and modification
time, and the content of every file up to a megabyte (configs, tokenizer): hashing a real model's
gigabytes of weights at every start would cost more than the build it saves, and a weights file
changed in place changes its size or time.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional

from wenxin.common.cache_folder import CACHE_ENV, cache_root
from wenxin.common.errors import ConfigError
from wenxin.common.files import exclusive, write_text_atomically
from wenxin.common.process import load_paddle
from wenxin.data.export_bundle import INFERENCE_DIR, PREPROCESS_FILE, inference_folder

logger = logging.getLogger("wenxin")
EXPORTS_DIR = "exports"
GRAPH_MODES = ("dynamic", "static")
MAX_PROMPT_TOKENS = 4096  # a served prompt's tokens at most (the chat field's max_seq_len), or half the context
MAX_NEW_TOKENS = 1024  # an answer's tokens at most (by default; requests and --max_new_tokens may ask fewer)
# what the export's step programs are, in the cache key: a cache built before a change of them is
# built again (6: the leaner program, rotations as feature pairs and every shape built once a
# call; 5: advance_pair beside advance, its second group may have no rows, so every engine
# holds the pair alone and runs a serving turn in one call; 4: advance reads each layer's cache
# where it lies and returns only the new keys and values; 3: the int8 copy quantizes activations
# per token, so rows batched get their logits alone; 2: one program, advance, holding the weights
# once; 1: prefill, prefill_chunk, extend)
STEP_PROGRAMS_REVISION = 6
SMALL_FILE_BYTES = 1 << 20  # files up to this size are keyed by their content, larger ones by size and time
CHAT_FIELD = "conversation"


def is_model_folder(path: str) -> bool:
    """A folder with an ERNIE 4.5 ``config.json`` (its ``model_type`` or ``architectures`` say so)
    and no inference export: read without Paddle."""
    config = os.path.join(path, "config.json")
    if not os.path.isfile(config) or os.path.isfile(os.path.join(path, PREPROCESS_FILE)):
        return False
    try:
        with open(config, encoding="utf-8") as f:
            values = json.load(f)
    except (OSError, ValueError):
        return True  # a model folder with a broken config.json: check_model_folder names the problem
    if not isinstance(values, dict):
        return True
    architectures = values.get("architectures") or []
    return str(values.get("model_type", "")).startswith("ernie4_5") or \
        any(str(name).startswith("Ernie4_5") for name in architectures if isinstance(name, str))


def check_model_folder(path: str, key: str = "--model_dir") -> None:
    """The folder's config, weights index and tokenizer, checked before Paddle loads: one error
    naming ``key`` and the file."""
    from wenxin.common.errors import WenxinError
    from wenxin.data.ernie45_tokenizer import Ernie45Tokenizer
    from wenxin.models.ernie45_folder import Ernie45Config, checkpoint_files
    try:
        Ernie45Config.from_folder(path)
        checkpoint_files(path)
        Ernie45Tokenizer(path)
    except WenxinError as e:
        raise type(e)(problems=[f"{key}: {problem}" for problem in e.problems]) from None


def model_source(path: str, key: str = "--model_dir") -> str:
    """What ``path`` is, before Paddle loads: ``export`` (an inference export, or a checkpoint
    folder holding one) or ``folder`` (a model folder, checked); anything else is one error."""
    if is_model_folder(path) and not os.path.isfile(os.path.join(path, INFERENCE_DIR, PREPROCESS_FILE)):
        check_model_folder(path, key)
        return "folder"
    inference_folder(path, key)
    return "export"


@dataclass(frozen=True)
class FolderSettings:
    """How a model folder is served: its graph mode, the longest prompt, the longest answer."""

    graph_mode: str = "dynamic"
    max_prompt_tokens: int = MAX_PROMPT_TOKENS
    max_new_tokens: int = MAX_NEW_TOKENS

    def for_context(self, max_position_embeddings: int) -> "FolderSettings":
        """Within the model's context: a prompt at most half of it, an answer at most the rest."""
        prompt = max(1, min(self.max_prompt_tokens, max_position_embeddings // 2))
        answer = max(1, min(self.max_new_tokens, max_position_embeddings - prompt))
        return FolderSettings(self.graph_mode, prompt, answer)


def folder_key(folder: str, settings: FolderSettings) -> str:
    """A digest of what the folder's export depends on (the module docstring says which)."""
    from importlib import metadata

    from wenxin import __version__
    digest = hashlib.sha256()

    def add(*parts: Any) -> None:
        digest.update(json.dumps(parts, ensure_ascii=False).encode("utf-8"))

    paddle_versions = []
    for name in ("paddlepaddle", "paddlepaddle-gpu"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            paddle_versions.append(f"{name} {metadata.version(name)}")
    add(__version__, STEP_PROGRAMS_REVISION, paddle_versions, settings.graph_mode, settings.max_prompt_tokens,
        settings.max_new_tokens)
    for top, subfolders, names in os.walk(folder):
        # hidden entries are downloaders' bookkeeping (aistudio-sdk's .msc and ._tmp, .git, .cache),
        # which a download rewrites each time: in the key they would rebuild the export every start
        subfolders[:] = sorted(name for name in subfolders if not name.startswith("."))
        for name in sorted(name for name in names if not name.startswith(".")):
            path = os.path.join(top, name)
            stat = os.stat(path)
            add(os.path.relpath(path, folder), stat.st_size, stat.st_mtime_ns)
            if stat.st_size <= SMALL_FILE_BYTES:
                with open(path, "rb") as f:
                    digest.update(hashlib.sha256(f.read()).digest())
    return digest.hexdigest()[:16]


def folder_task(folder: str, settings: FolderSettings, train_data: str, dev_data: str, output: str,
                batch_size: int = 1, max_seq_len: Optional[int] = None) -> Dict[str, Any]:
    """The chat task of ``folder``'s model (``Ernie45SFT``) on conversations in ``train_data`` and
    ``dev_data``; its generation follows the folder's ``generation_config.json`` with ``settings``'
    answer length."""
    def reader(data_path: str, shuffle: bool) -> Dict[str, Any]:
        field = {"name": CHAT_FIELD, "reader": {"type": "ChatFieldReader"}, "model_dir": folder,
                 "max_seq_len": max_seq_len or settings.max_prompt_tokens, "packing": False}
        return {"type": "BasicDataSetReader", "fields": [field],
                "config": {"data_path": data_path, "format": "jsonl", "shuffle": shuffle, "batch_size": batch_size}}
    return {"task": "chat",
            "dataset_reader": {"train_reader": reader(train_data, True), "dev_reader": reader(dev_data, False)},
            "model": {"type": "Ernie45SFT", "is_dygraph": int(settings.graph_mode == "dynamic"),
                      "model_dir": folder, "chat_field": CHAT_FIELD,
                      "generation": {"max_new_tokens": settings.max_new_tokens}},
            "trainer": {"type": "CustomTrainer", "output_path": output,
                        "evaluation": {"is_eval_dev": 0, "eval_batch_size": batch_size},
                        "logging": {"progress_bar": "off"}, "export": {"save_inference": False}}}


def export_of_folder(folder: str, settings: FolderSettings = FolderSettings()) -> str:
    """The inference export of model folder ``folder``: from the cache, or built now (Paddle
    loaded) and cached."""
    from wenxin.common.errors import WenxinError
    from wenxin.data.export_bundle import verify_export
    from wenxin.models.ernie45_folder import Ernie45Config
    if settings.graph_mode not in GRAPH_MODES:
        raise ConfigError(f"--graph_mode: {settings.graph_mode!r} is not one of {', '.join(GRAPH_MODES)}")
    folder = os.path.abspath(folder)
    settings = settings.for_context(Ernie45Config.from_folder(folder).max_position_embeddings)
    exports = os.path.join(cache_root(), EXPORTS_DIR)
    name = f"{os.path.basename(folder.rstrip(os.sep)) or 'model'}-{settings.graph_mode}-{folder_key(folder, settings)}"
    target = os.path.join(exports, name)
    try:
        os.makedirs(exports, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"${CACHE_ENV}: cannot create the cache folder {exports} ({e.strerror}); set {CACHE_ENV} "
                          f"to a writable folder") from None
    with exclusive(target + ".lock"):
        if os.path.isfile(os.path.join(target, PREPROCESS_FILE)):
            try:
                verify_export(target)
                logger.info("model folder %s: its decode step programs from the cache (%s)", folder, target)
                return target
            except WenxinError as e:  # damaged: built again
                logger.warning("%s; building it again", e)
        logger.info("model folder %s: building its decode step programs (%s graph; once, then cached in %s)",
                    folder, settings.graph_mode, exports)
        started = time.monotonic()
        load_paddle()  # a command that runs without Paddle (wenxin serve on ONNX Runtime) builds with it
        _build(folder, settings, target)
        write_text_atomically(target + ".source.json", json.dumps(
            {"folder": folder, "graph_mode": settings.graph_mode, "max_prompt_tokens": settings.max_prompt_tokens,
             "max_new_tokens": settings.max_new_tokens, "built": time.strftime("%Y-%m-%dT%H:%M:%S")}, indent=1))
        logger.info("model folder %s: built in %.1f s", folder, time.monotonic() - started)
    return target


# a line the chat field reads while the model is built: the export describes the field, and the
# readers are built from data (nothing is trained or evaluated on it)
PLACEHOLDER_CONVERSATION = {"src": ["你好"], "tgt": ["你好"]}


@contextlib.contextmanager
def _folder_trainer(folder: str, settings: FolderSettings, dev_data: str = "", batch_size: int = 1,
                    max_seq_len: Optional[int] = None) -> Iterator[Any]:
    """A trainer of ``folder``'s chat task holding the folder's weights (checked against the
    model), its run written to a scratch folder; its train reader reads a placeholder line."""
    from wenxin.config.loader import config_from_dict
    from wenxin.runner import build_trainer
    with tempfile.TemporaryDirectory(prefix="wenxin-folder-") as scratch:
        placeholder = os.path.join(scratch, "placeholder.jsonl")
        with open(placeholder, "w", encoding="utf-8") as f:
            f.write(json.dumps(PLACEHOLDER_CONVERSATION, ensure_ascii=False) + "\n")
        task = folder_task(folder, settings, placeholder, dev_data or placeholder, os.path.join(scratch, "run"),
                           batch_size, max_seq_len)
        yield build_trainer(config_from_dict(task, os.path.join(folder, "config.json")))


def _build(folder: str, settings: FolderSettings, target: str) -> None:
    with _folder_trainer(folder, settings) as trainer:
        trainer.export_inference(target, quiet=True)


def with_onnx(export: str) -> str:
    """The cached export ``export`` with its step program converted to ONNX (``advance_pair.onnx``,
    or ``advance.onnx`` in an older export, and its int8 copy, ``wenxin.inference.onnx_export``):
    once, then from the cache. At ERNIE-4.5-0.3B's shape the conversion took 91 CPU-seconds and
    at most 3.2 GiB of memory (each of its child processes 2.0-3.2)."""
    from wenxin.inference.onnx_backend import onnx_file
    from wenxin.inference.onnx_export import export_onnx
    from wenxin.models.advance_step import ADVANCE, PAIR
    with exclusive(export + ".lock"):
        if not any(os.path.isfile(os.path.join(export, onnx_file(program))) for program in (PAIR, ADVANCE)):
            logger.info("%s: converting its decode step program to ONNX Runtime's, float32 and int8 (once, then "
                        "cached)", export)
            load_paddle()
            export_onnx(export, {})
    return export


def evaluate_folder(folder: str, data_path: str, settings: FolderSettings = FolderSettings(),
                    batch_size: int = 8, max_seq_len: int = 2048) -> Dict[str, float]:
    """Loss, perplexity and token accuracy of ``folder``'s model (no training) on the
    conversations of ``data_path`` (ERNIEKit's SFT lines, or alpaca's)."""
    from wenxin.models.ernie45_folder import Ernie45Config
    if not os.path.isfile(data_path):
        from wenxin.common.errors import DataError
        raise DataError(f"--data: file not found: {data_path}")
    folder = os.path.abspath(folder)
    limit = Ernie45Config.from_folder(folder).max_position_embeddings
    with _folder_trainer(folder, settings, os.path.abspath(data_path), batch_size, min(max_seq_len, limit)) as trainer:
        return trainer.evaluate("dev_reader", tag="eval", run_hooks=False, step=0)


def cached_exports() -> List[Dict[str, Any]]:
    """What the cache holds: each export's folder, size in bytes and the model folder it was built from."""
    exports = os.path.join(cache_root(), EXPORTS_DIR)
    found = []
    for name in sorted(os.listdir(exports)) if os.path.isdir(exports) else []:
        path = os.path.join(exports, name)
        if not os.path.isdir(path):
            continue
        size = sum(os.path.getsize(os.path.join(top, file)) for top, _, files in os.walk(path) for file in files)
        source: Dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            with open(path + ".source.json", encoding="utf-8") as f:
                source = json.load(f)
        found.append({"export": path, "bytes": size, "folder": source.get("folder", "?")})
    return found


def clear_cache() -> int:
    """Delete the cached exports; returns how many."""
    exports = os.path.join(cache_root(), EXPORTS_DIR)
    if not os.path.isdir(exports):
        return 0
    count = sum(1 for name in os.listdir(exports) if os.path.isdir(os.path.join(exports, name)))
    shutil.rmtree(exports)
    return count
