"""Predictions from an exported folder with ``paddle.inference``, from raw text to labels."""
from __future__ import annotations

import logging
import os
import time
from operator import itemgetter
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from wenxin.common.errors import ConfigError, ExportError, InferenceError, WenxinError
from wenxin.common.registry import RegisterSet
from wenxin.common.task_loader import builtin_task_names, import_task
from wenxin.data import text_speedups
from wenxin.data.export_bundle import (ADVANCE_STEP, FIRST_STEP, MODEL_PREFIX, PREPROCESS_FILE, read_preprocessing,
                                       verify_export, where_exports_are)
from wenxin.data.field_reader import BaseFieldReader, convert_row, link_fields
from wenxin.inference.backends import BackendError, EngineOptions, InferenceBackend, backend_class
from wenxin.inference.paddle_backend import generation_files, model_files
from wenxin.inference.formatters import ResultFormat
from wenxin.inference.decode_overrides import settings_with
from wenxin.inference.generator import Generator
from wenxin.models.advance_step import PAIR, advance_by_pair, empty_cache, pair_runs_alone
from wenxin.models.batch_decoding import CHUNK_STEP
from wenxin.models.decoding import DecodeSettings, PromptSource
from wenxin.models.infill_step import INFILL
from wenxin.models.step_runners import ONE_PROGRAM_STEPS, caller_steps, in_place_cache, one_program, steps_runner


logger = logging.getLogger("wenxin")
_logged_choices: set = set()  # each backend's choice of a setting is logged once per process


def _check_model_files(model_dir: str) -> None:
    if model_files(model_dir) is None and generation_files(model_dir) is None:
        raise InferenceError(f"{model_dir}: not an exported model folder (need {MODEL_PREFIX}.json or "
                             f".pdmodel, {MODEL_PREFIX}.pdiparams and {PREPROCESS_FILE}; a generation model "
                             f"{ADVANCE_STEP}.json or {INFILL}.json, or {FIRST_STEP}.json and the other step "
                             f"functions); "
                             f"{where_exports_are(model_dir)}")


def step_engines(backend_cls: Any, model_dir: str, meta: Dict[str, Any], prefill_as_chunk: bool,
                 options: EngineOptions) -> Dict[str, InferenceBackend]:
    """An engine for each step function of the export (one, ``advance``, in exports since it
    was added); with ``prefill_as_chunk`` none for ``prefill``, which runs as ``prefill_chunk``
    after an empty cache (``prefill_cache``): the same numbers, tested, and the same time,
    measured, with one copy of the weights fewer in memory (where the backend runs an empty
    cache: ``runs_empty_caches``; Paddle 3.0 does not)."""
    prefill_as_chunk = prefill_as_chunk and backend_cls.runs_empty_caches()
    return {name: backend_cls(model_dir, meta, EngineOptions(options.use_gpu, options.num_threads,
                                                             {**options.settings, "program": name}))
            for name in backend_cls.step_programs(model_dir, meta.get("steps") or {})
            if not (name == FIRST_STEP and prefill_as_chunk)}


def prefill_cache(steps: Dict[str, Dict[str, Any]]) -> Optional[np.ndarray]:
    """The empty key/value cache ``prefill`` runs ``prefill_chunk`` after, where the export has
    that step and its inputs are ``prefill``'s and a ``cache`` ``[layers, 2, rows, heads, length,
    width]`` (rows 1, length 0); None otherwise (an export of another kind or an older one)."""
    if FIRST_STEP not in steps or CHUNK_STEP not in steps:
        return None
    first = [i.get("name") for i in steps[FIRST_STEP]["inputs"]]
    chunk = {i.get("name"): i for i in steps[CHUNK_STEP]["inputs"]}
    cache = chunk.get("cache")
    if cache is None or sorted(chunk) != sorted([*first, "cache"]) or len(cache.get("shape") or []) != 6:
        return None
    shape = list(cache["shape"])
    if not all(isinstance(size, int) for size in shape) or min(shape[:2] + shape[3:4] + shape[5:]) < 1:
        return None
    return empty_cache(steps, CHUNK_STEP)


def _check_width(fields: Sequence[BaseFieldReader], row: Sequence[str]) -> None:
    """A row holds a column for each field (an ``InferenceError`` names them)."""
    if len(row) < len(fields):
        raise InferenceError(f"expected {len(fields)} columns ({', '.join(f.name for f in fields)}), got {len(row)}")


def _in_export(cfg: Dict[str, Any], model_dir: str) -> Dict[str, Any]:
    """An exported field's config with its files (vocab, tokenizer model, a chat field's
    tokenizer folder) found in ``model_dir``."""
    cfg = dict(cfg)
    if cfg.get("vocab_path"):
        cfg["vocab_path"] = os.path.join(model_dir, cfg["vocab_path"])
    if cfg.get("model_dir"):  # a chat field's tokenizer files (ChatFieldReader.export_files)
        cfg["model_dir"] = os.path.join(model_dir, cfg["model_dir"])
    if (cfg.get("tokenizer") or {}).get("spm_model_file"):
        cfg["tokenizer"] = {**cfg["tokenizer"],
                            "spm_model_file": os.path.join(model_dir, cfg["tokenizer"]["spm_model_file"])}
    return cfg


def program_feed(step: str, program_inputs: Sequence[str], declared: Sequence[str],
                 inputs: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """The feed of step ``step``'s program from ``inputs`` named as the export declares them: each
    of the program's inputs is a declared name, or ``<step>__<name>`` (a static program's)."""
    known, feed = set(declared), {}
    for program_name in program_inputs:
        input_name = program_name[len(step) + 2:] if program_name.startswith(f"{step}__") else program_name
        if input_name not in known:
            raise ExportError(f"{step}: the program's input {program_name!r} is none of the declared "
                              f"{sorted(declared)}")
        feed[program_name] = inputs[input_name]
    return feed


class Predictor:
    """Runs an exported model on raw rows (one string per inference field).

    Args:
        model_dir: a folder written by ``export_inference`` (``wenxin export``).
        use_gpu: run on GPU 0 (needs paddlepaddle-gpu).
        num_threads: CPU math threads of this predictor.
        load_model: False reads only the preprocessing description (``convert`` and the result
            format work, ``run`` does not): what a thread that only converts inputs needs.
        backend: a registered inference backend (``paddle``, ``onnxruntime`` for the folder's
            ``model.onnx``; ``wenxin.inference.backends``), or ``auto``: ONNX Runtime when the
            folder has a model for it and it is installed, else Paddle.
        onednn: the Paddle backend's oneDNN: ``auto`` (the exported model's rule,
            ``onednn_min_rows``), ``on`` or ``off`` (see ``PaddleBackend``).
        task: a task package to import first (as a task file's ``task`` names it), for an export
            whose fields use the task's own tokenizers or field readers. Never imported unless
            named here: code runs only where the caller asks for it.

    A generation export (``preprocess.json``'s ``steps``) holds step functions instead of one
    graph (``run_step``); ``wenxin.inference.generator.Generator`` decodes with them, and
    ``predict`` hands it the rows.

    A ``paddle.inference`` predictor is not safe to share between threads; use each from the
    thread that created it.
    """

    def __init__(self, model_dir: str, use_gpu: bool = False, num_threads: int = 1, load_model: bool = True,
                 backend: str = "auto", onednn: str = "auto", task: str = "") -> None:
        if not os.path.isdir(model_dir):
            raise InferenceError(f"model folder not found: {model_dir}; {where_exports_are(model_dir)}")
        if task:  # its own tokenizers and field readers register as it is imported
            import_task(task)
        meta_path = os.path.join(model_dir, PREPROCESS_FILE)
        _check_model_files(model_dir)
        verify_export(model_dir)
        self.meta: Dict[str, Any] = read_preprocessing(model_dir)
        self.fields: List[BaseFieldReader] = self._build_fields(model_dir, meta_path)
        # each field's value depends on its own column only: columns can be converted whole
        self.by_column = all(getattr(f, "pair_index", None) is None and type(f).combine is BaseFieldReader.combine
                             for f in self.fields)
        self.output_names: List[str] = self.meta["outputs"]
        self.labels: List[str] = self.meta["labels"]
        format_name = self.meta.get("result_format", "classification")
        try:
            format_cls = RegisterSet.result_formats.get(format_name, None, f"{meta_path}: result_format")
        except WenxinError as e:
            raise InferenceError(str(e)) from None
        self.result_format: ResultFormat = format_cls(self.labels, self.fields, self.meta["label_names"])
        # the model's batching rule (BaseModel.sorted_batch_rows): more rows than this run sorted
        # by length, in batches of at most this many; None: in their order
        self.sorted_batch_rows: Optional[int] = self.meta.get("sorted_batch_rows")
        self.engine: Optional[InferenceBackend] = None  # None: the model is not loaded
        # a generation model's step functions as exported, and those its callers can run (through
        # the export's one program, advance or infill, where it has one: wenxin.models.step_runners)
        self.exported_steps: Dict[str, Dict[str, Any]] = self.meta.get("steps") or {}
        self.steps: Dict[str, Dict[str, Any]] = caller_steps(self.exported_steps)
        self.empty_cache = prefill_cache(self.exported_steps)  # prefill runs as prefill_chunk after it, or None
        # advance's cache of one row holding nothing, where the export has advance (else None)
        self.advance_cache = empty_cache(self.exported_steps) if ADVANCE_STEP in self.exported_steps else None
        # where the one program reads each layer's cache where it lies (advance, infill:
        # wenxin.models.kv_slots), that cache of one row holding nothing; None: steps on one grown array
        self.in_place_cache = in_place_cache(self.exported_steps)
        self._one_program = one_program(self.exported_steps)  # "": an export of several step programs
        self._calls = steps_runner(self._run_program, self.exported_steps)
        self.model_cpu_seconds = 0.0  # CPU of the calling thread inside the step programs' calls, so far
        self.step_engines: Dict[str, InferenceBackend] = {}
        self.decode_settings: Optional[DecodeSettings] = None
        self.prompt_source: Optional[PromptSource] = None
        self.max_new_tokens_limit = 0
        if self.steps:
            self._read_generation(self.meta.get("generation") or {}, meta_path)
        self.onednn = ""  # the Paddle backend's oneDNN choice, in words
        self.input_names: List[str] = []
        try:
            backend_cls = backend_class(backend, model_dir, use_gpu)
            self.backend = backend_cls.name
            if not load_model:
                return
            self.step_engines = step_engines(backend_cls, model_dir, self.meta, self.empty_cache is not None,
                                             EngineOptions(use_gpu, num_threads, {"onednn": onednn}))
            self.engine = next(iter(self.step_engines.values()), None) or backend_cls(
                model_dir, self.meta, EngineOptions(use_gpu, num_threads, {"onednn": onednn}))
        except BackendError as e:
            raise InferenceError(str(e)) from None
        self.input_names = self.engine.input_names
        choices = self.engine.choices()
        self.onednn = choices.get("onednn", "")
        for setting, choice in choices.items():
            if (self.backend, setting, choice) not in _logged_choices:
                _logged_choices.add((self.backend, setting, choice))
                logger.info("%s backend: %s %s", backend_cls.title, backend_cls.setting_titles.get(setting, setting),
                            choice)

    def _read_generation(self, generation: Dict[str, Any], meta_path: str) -> None:
        """A generation export's decoding settings and where its prompts are (``generation``)."""
        try:
            self.decode_settings = DecodeSettings(**generation["settings"])
            self.decode_settings.check()
            prompt = generation["prompt"]
            self.prompt_source = PromptSource(dict(prompt["inputs"]), str(prompt["lengths"]))
            self.max_new_tokens_limit = int(generation["max_new_tokens_limit"])
        except (KeyError, TypeError, WenxinError) as e:
            raise ExportError(f"{meta_path}: generation: not a decoding description "
                              f"({type(e).__name__}: {e})") from None
        if not self._one_program and (FIRST_STEP not in self.steps or "extend" not in self.steps):
            raise ExportError(f"{meta_path}: steps: a generation export has one of {sorted(ONE_PROGRAM_STEPS)}, or "
                              f"{FIRST_STEP} and extend, not {sorted(self.exported_steps)}")

    def settings_for(self, overrides: Optional[Dict[str, Any]] = None) -> DecodeSettings:
        """The export's decoding settings with ``overrides`` (e.g. ``{"max_new_tokens": 8}``)
        applied; an unknown or bad setting is an ``InferenceError`` naming it."""
        if self.decode_settings is None:
            raise InferenceError("this model does not generate (no step functions in its export)")
        return settings_with(self.decode_settings, overrides or {}, self.max_new_tokens_limit)

    def run_step(self, name: str, inputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Run the step function ``name`` on inputs named as ``preprocess.json`` says (``steps``):
        an exported one, or one run through the export's one program (``step_runners``), or
        ``prefill`` as ``prefill_chunk`` after an empty cache (``step_engines``)."""
        if self._one_program and (name not in self.exported_steps or name == ADVANCE_STEP):
            return self._calls(name, inputs)
        if name == FIRST_STEP and name not in self.step_engines and self.empty_cache is not None:
            name, inputs = CHUNK_STEP, {**inputs, "cache": self.empty_cache}
        return self._run_program(name, inputs)

    @property
    def fuses_turns(self) -> bool:
        """Whether its engine runs ``advance_pair``: a serving turn's decoding rows and prompt
        parts then go in one call (``BatchDecoder.step``'s ``beside``)."""
        return PAIR in self.step_engines and self.in_place_cache is not None

    def _run_program(self, name: str, inputs: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Run the exported step program ``name`` (``advance`` as ``advance_pair`` where the engine
        holds only the pair's program: ``advance_by_pair``)."""
        if name == ADVANCE_STEP and name not in self.step_engines and PAIR in self.step_engines:
            return advance_by_pair(lambda feed: self._run_program(PAIR, feed), inputs,
                                   pair_runs_alone(self.exported_steps))
        engine = self.step_engines[name]
        feed = program_feed(name, engine.input_names, [i["name"] for i in self.exported_steps[name]["inputs"]], inputs)
        started = time.thread_time()
        outputs = engine.run(feed)
        self.model_cpu_seconds += time.thread_time() - started
        return dict(zip(self.exported_steps[name]["outputs"], outputs))

    @property
    def reads_conversations(self) -> bool:
        """Whether its input is a conversation (a chat model's: OpenAI's chat messages fit it)."""
        return len(self.fields) == 1 and self.fields[0].reads_conversations

    def prompt(self, row: Sequence[str]) -> Dict[str, np.ndarray]:
        """The ``prefill`` inputs for ``row`` (``[1, length]`` each) of a generation model; an
        ``InferenceError`` for a model that does not generate."""
        if self.prompt_source is None:
            raise InferenceError("this model does not generate (no step functions in its export)")
        return self.prompt_source.prompts(self.convert([row]))[0]

    @staticmethod
    def prompt_length(prompt: Dict[str, np.ndarray]) -> int:
        """How many tokens a ``prompt`` (``prompt``'s inputs) gives the model before it generates."""
        return int(next(iter(prompt.values())).shape[1])

    def _build_fields(self, model_dir: str, meta_path: str) -> List[BaseFieldReader]:
        fields = []
        for i, exported in enumerate(self.meta["fields"]):
            cfg = _in_export(exported, model_dir)
            where = f"{meta_path}: fields[{i}]"
            try:
                cls = RegisterSet.field_readers.get(cfg["reader"]["type"], None, where)
                fields.append(cls(cfg, where))
            except ConfigError as e:
                task = self.meta.get("task")
                builtin = task in builtin_task_names()
                hint = f"; the model was trained by task '{task}': import it with --task {task} (Predictor(task=...))" \
                    if task and not builtin else ""
                raise ExportError(f"{e}{hint}") from None
            except WenxinError:
                raise
            except Exception as e:  # noqa: BLE001 (a reader's own checks raise many types)
                raise ExportError(f"{where}: the field cannot be built ({type(e).__name__}: {e})") from None
        try:
            return link_fields(fields)
        except WenxinError:
            raise
        except Exception as e:  # noqa: BLE001
            raise ExportError(f"{meta_path}: fields: cannot be linked ({type(e).__name__}: {e})") from None

    def convert(self, rows: Sequence[Sequence[str]]) -> Dict[str, np.ndarray]:
        """Raw rows -> input arrays, exactly as the training readers do it. Where no field reads
        another's value (pairs, ``combine``), each column is converted as a whole, so a field with
        a batch path (``BaseFieldReader.convert_column``) takes it."""
        if not self.by_column or not rows:
            return self.collate(self.examples(rows))
        batch: Dict[str, np.ndarray] = {}
        for col, field in enumerate(self.fields):
            try:
                column = list(map(itemgetter(col), rows))
            except IndexError:  # a row too short: say which
                for row in rows:
                    _check_width(self.fields, row)
                raise
            arrays = field.convert_column(column)
            if arrays is None:
                try:
                    arrays = field.collate([field.convert(text) for text in column])
                except (ValueError, IndexError) as e:
                    raise InferenceError(str(e)) from None
            batch.update(arrays)
        return batch

    def examples(self, rows: Sequence[Sequence[str]]) -> List[Any]:
        """Raw rows -> one converted example each (an ``InferenceError`` names a bad row)."""
        examples = []
        for row in rows:
            _check_width(self.fields, row)
            try:
                examples.append(convert_row(self.fields, list(row)))
            except (ValueError, IndexError) as e:
                raise InferenceError(str(e)) from None
        return examples

    def collate(self, examples: Sequence[Any]) -> Dict[str, np.ndarray]:
        """Converted examples -> one padded batch of input arrays."""
        batch: Dict[str, np.ndarray] = {}
        for col, field in enumerate(self.fields):
            batch.update(field.collate([example[col] for example in examples]))
        return batch

    def run(self, batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Input arrays -> the model's outputs by name (``preprocess.json``'s order)."""
        if self.engine is None:
            raise InferenceError("this Predictor was made without loading the model (load_model=False)")
        if self.steps:
            raise InferenceError("a generation model decodes through its step functions: "
                                 "wenxin.inference.generator.Generator (or predict)")
        return dict(zip(self.output_names, self.engine.run(batch)))

    def warm_up(self, rows: int = 16) -> bool:
        """Run the model once on ``rows`` made-up inputs of 32 characters each, so that a
        service's first requests find Paddle's kernels (and the NFKC tables) built. False when
        made-up text is no valid input (e.g. numeric fields): then the first real batch does it."""
        text_speedups.prepare()
        text = " ".join("样例文本" * 8)  # 32 tokens for character, whitespace and WordPiece tokenizers
        if self.steps:
            return False  # a generation export warms up through its Generator (a few steps, not answers)
        try:
            self.run(self.convert([[text] * len(self.fields)] * rows))
        except InferenceError:
            return False
        return True

    def predict(self, rows: Sequence[Sequence[str]], batch_size: int = 64,
                progress: Optional[Callable[[int], None]] = None) -> List[Dict[str, Any]]:
        """One result per row, in order, in the model's result format (for classifiers
        ``{"label", "probability", "probs"}``). The rows run in batches of ``batch_size`` in their
        order, or sorted by length where the model's rule says so (``sorted_batches``). A
        generation export decodes them, ``batch_size`` cache rows together (``Generator``).
        ``progress`` is told the rows done after each batch (each answer, for a generation export)."""
        if self.steps:
            return Generator(self).generate(rows, max_rows=batch_size, progress=progress)
        pieces_rows, pieces = self.result_format.split_rows(rows)  # long texts: several pieces
        order = self.sorted_batches(pieces_rows, batch_size)
        results: List[Dict[str, Any]] = []
        if order is None:
            for start in range(0, len(pieces_rows), batch_size):
                chunk = pieces_rows[start:start + batch_size]
                batch = self.convert(chunk)
                results.extend(self.result_format.results(self.run(batch), batch, chunk))
                if progress is not None and len(pieces_rows) == len(rows):
                    progress(len(results))
        else:
            chunks = [(indexes, [pieces_rows[i] for i in indexes]) for indexes in order]
            results = self.run_sorted(((indexes, chunk, self.convert(chunk)) for indexes, chunk in chunks),
                                      len(pieces_rows))
        return self.result_format.join_results(results, pieces, rows)

    def run_sorted(self, parts: Iterable[Tuple[List[int], Sequence[Sequence[str]], Dict[str, np.ndarray]]],
                   count: int) -> List[Dict[str, Any]]:
        """The results of ``count`` rows run as the batches of ``sorted_batches``, each part its
        rows' indexes, the rows and their converted batch: one result per row, in the rows' order."""
        results: List[Dict[str, Any]] = [{}] * count
        for indexes, rows, batch in parts:
            for i, result in zip(indexes, self.result_format.results(self.run(batch), batch, rows)):
                results[i] = result
        return results

    def sorted_batches(self, rows: Sequence[Sequence[str]], batch_size: int) -> Optional[List[List[int]]]:
        """The model batches of ``rows`` as lists of row indexes, where the model's rule
        (``sorted_batch_rows``) sorts them: the rows by length (the characters of their texts),
        cut into batches of at most ``min(batch_size, sorted_batch_rows)``. None where the rows run
        in their order, in batches of ``batch_size``: the model has no such rule, one batch holds
        them all, or the engine runs a whole batch faster (``InferenceBackend.splits_batch``)."""
        size = min(batch_size, self.sorted_batch_rows or batch_size)
        if self.sorted_batch_rows is None or len(rows) <= size or (
                self.engine is not None and not self.engine.splits_batch(min(batch_size, len(rows)))):
            return None
        order = sorted(range(len(rows)), key=lambda i: sum(len(c) for c in rows[i] if isinstance(c, str)))
        return [order[start:start + size] for start in range(0, len(order), size)]
