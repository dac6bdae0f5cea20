"""Dataset readers: read data files (TSV, JSON lines, CSV: ``row_formats``) into converted examples and serve
batches."""
from __future__ import annotations

import logging
import os
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Protocol, Sequence, Tuple, TypeVar, cast

import numpy as np

from wenxin.common.errors import ConfigError, DataError, WenxinError
from wenxin.common.registry import RegisterSet
from wenxin.data.field_reader import (BaseFieldReader, TensorSpec, UnknownLabelError, convert_row,
                                      link_fields)
from wenxin.common.progress import progress_of
from wenxin.data import data_report, field_vocabs
from wenxin.data.lines import FilePart
from wenxin.data.reading import FirstSeen, FitGroup, RawLine
from wenxin.data.row_formats import RowFormat
from wenxin.data.sampler import ResumableBatchSampler
from wenxin.data.streaming import StreamPlan, StreamSampler, check_streaming, first_examples, stream_loader
from wenxin.data.cached_examples import CacheUnavailable, CachedExamples
from wenxin.data.token_cache import StreamCounts, TokenCache, counted, merge_plans, plan_rows

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

SKIPPED_SHOWN = 5  # skipped lines named in the log


class BatchLoader(Protocol):
    """What a reader's loader is: batches, and how many there are (a DataLoader, or a wrapper)."""

    def __iter__(self) -> Iterator[Dict[str, Any]]: ...

    def __len__(self) -> int: ...


class _MainThreadBatches:
    """Iterates a batch sampler, collating each batch in the calling thread: numpy arrays, or
    tensors for the eager trainer.

    A batch that cannot be assembled (too large for memory, say) is a ``DataError`` raised where
    the loop asks for it. ``paddle.io.DataLoader`` collates in a thread of its own, and when that
    thread dies the training loop waits for a batch forever, deaf even to SIGTERM. Collating here
    costs the step well under a millisecond for the example configs."""

    def __init__(self, reader: "BasicDataSetReader", sampler: ResumableBatchSampler, as_tensors: bool) -> None:
        self.reader, self.sampler, self.as_tensors = reader, sampler, as_tensors

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        for indices in self.sampler:
            try:
                batch: Dict[str, Any] = self.reader.collate_rows(indices)
            except WenxinError:
                raise
            except Exception as e:  # noqa: BLE001 (numpy raises MemoryError, ValueError, ...)
                raise DataError(f"{self.reader.key_path}: cannot assemble a batch of {len(indices)} examples "
                                f"({type(e).__name__}: {e})") from None
            if self.as_tensors:
                from wenxin.data.worker_loader import as_tensors  # the eager engine's: Paddle is there
                batch = as_tensors(batch)
            yield batch

    def __len__(self) -> int:
        return len(self.sampler)


@RegisterSet.dataset_readers.register("BasicDataSetReader")
class BasicDataSetReader:
    """Reads the rows of data files (``config.format``: TSV lines whose columns are the fields in
    order, JSON lines, CSV) and converts them into examples of the configured fields.

    Args:
        config: the validated reader config (``dataset_reader.<name>``).
        name: the reader's key, e.g. ``train_reader``.
        scope: the task package, for task-registered field readers and tokenizers.
    """

    def __init__(self, config: Dict[str, Any], name: str, scope: Optional[str] = None) -> None:
        self.config = config
        self.name = name
        self.key_path = f"dataset_reader.{name}"
        self.reader_config: Dict[str, Any] = config["config"]
        self.fields: List[BaseFieldReader] = []
        if not config["fields"]:
            raise ConfigError(f"{self.key_path}.fields: at least one field is needed")
        for i, field in enumerate(config["fields"]):
            path = f"{self.key_path}.fields[{i}]"
            cls = RegisterSet.field_readers.get(field["reader"]["type"], scope, f"{path}.reader.type")
            self.fields.append(cls(field, path, scope=scope))
        self.fields = link_fields(self.fields)
        self.names = [f.name for f in self.fields]
        row_format = RegisterSet.data_formats.get(self.reader_config["format"], scope, f"{self.key_path}.config.format")
        self.row_format: RowFormat = row_format(self.reader_config, self.fields, self.key_path)
        self._columns: Optional[Dict[int, np.ndarray]] = None
        for field in self.fields:
            other = field.config.get("align_with")
            if other and other not in self.names:
                raise ConfigError(f"{field.path}.align_with: no field named '{other}' in this reader "
                                  f"(fields: {', '.join(self.names)})")
        self.examples: Sequence[Tuple[Any, ...]] = []  # a list, or CachedExamples from the token cache
        self.raw_examples: List[List[str]] = []
        self.bad_lines = 0
        self.skipped: List[Tuple[str, int, str]] = []  # the first skipped lines in file order: (file, line, why)
        self.show_progress = False  # a progress bar while converting (build_readers sets it)
        self.stream_plan: Optional[StreamPlan] = None  # set when the reader streams (config.streaming)

    # ---- reading -------------------------------------------------------------------------
    def data_files(self) -> List[str]:
        """The reader's data files (``config.data_path``: a file or a folder); all empty is an error."""
        key = f"{self.key_path}.config.data_path"
        files = self.row_format.data_files()
        if all(os.path.getsize(f) == 0 for f in files):
            raise DataError(f"{key}: {', '.join(files)}: "
                            f"{'the file is' if len(files) == 1 else 'the files are'} empty")
        return files

    def iter_rows(self, parts: Optional[Sequence[FilePart]] = None,
                  on_bad: Optional[Callable[[str, int, str], None]] = None) -> Iterator[RawLine]:
        """The rows of the data files (or of ``parts`` of them), split into the fields' columns
        by the reader's format (``wenxin.data.row_formats``); a malformed row goes to ``on_bad``,
        by default ``_bad_line``. Files are read a line at a time (``wenxin.data.lines``)."""
        on_bad = on_bad or self._bad_line
        if parts is None:
            parts = [FilePart(path, 0, None, 1) for path in self.data_files()]
        for part in parts:
            for lineno, columns, problem in self.row_format.rows(part):
                if columns is None:
                    on_bad(part.path, lineno, problem or "malformed")
                    continue
                yield part.path, lineno, columns

    def read_lines(self) -> List[RawLine]:
        """All lines of the data files, split into columns (see ``iter_rows``)."""
        return list(self.iter_rows())

    def _bad_line(self, path: str, lineno: int, problem: str) -> None:
        if not self.reader_config["skip_bad_lines"]:
            raise DataError(f"{path}:{lineno}: {problem} (set skip_bad_lines to skip such lines)")
        self.bad_lines += 1
        self.skipped.append((path, lineno, problem))
        if len(self.skipped) > 10 * SKIPPED_SHOWN:  # lines come in file order, but read before converted
            self.skipped = sorted(self.skipped)[:SKIPPED_SHOWN]

    def converted(self, rows: Iterable[RawLine]) -> Iterator[Tuple[RawLine, Tuple[Any, ...]]]:
        """Each row with its converted example; a malformed row goes to ``_bad_line``, a label
        outside the label map is an error naming ``file:line``."""
        for row in rows:
            path, lineno, columns = row
            try:
                example = convert_row(self.fields, columns)
                by_name = dict(zip(self.names, example))
                for field in self.fields:
                    field.check_example(by_name)
            except UnknownLabelError as e:
                raise DataError(f"{path}:{lineno}: {e}") from None
            except ValueError as e:
                self._bad_line(path, lineno, str(e))
                continue
            yield row, example

    def load(self, train_reader: Optional["BasicDataSetReader"] = None,
             saved_vocab_dir: Optional[str] = None) -> "BasicDataSetReader":
        """Read and convert all examples; fields without a vocab share the train reader's. The
        train reader fits its vocabs, or, resuming, takes those in ``saved_vocab_dir``. With the
        token cache (``config.cache``), the examples come from (or go to) a cache of
        memory-mapped arrays (``wenxin.data.token_cache``)."""
        logger.info("%s: loading data from %s", self.name, self.reader_config["data_path"])
        to_fit = field_vocabs.known_vocabs(self.fields, train_reader.fields if train_reader else None, saved_vocab_dir)
        cache = TokenCache.for_reader(self) if not self.reader_config["streaming"] else None
        first_seen: Optional[FirstSeen] = None
        if self.reader_config["streaming"]:
            first_seen = self._plan_stream(to_fit)
        elif cache is not None:
            cached = self._with_cache(lambda: cache.load(to_fit), "convert in memory")
            if cached is None:
                self.bad_lines, self.skipped = 0, []
            else:
                self.examples, self.bad_lines, self.skipped, first_seen = cached
        if first_seen is None:
            first_seen = self._load_in_memory(to_fit, train_reader is None)
        self.share_fitted_vocabs()
        self.skipped = sorted(self.skipped)[:SKIPPED_SHOWN]  # a folder's files are sorted by path
        for path, lineno, problem in self.skipped:
            logger.warning("%s:%d: skipped: %s", path, lineno, problem)
        if self.bad_lines:
            logger.warning("%s: skipped %d malformed lines", self.name, self.bad_lines)
        if train_reader is None:
            data_report.report_labels(self.name, self.fields, first_seen, None if self.stream_plan else self._label_ids,
                                      len(self.examples))
            data_report.check_raw_text(self.fields, lambda: self.iter_rows(on_bad=lambda *_: None))
        if not len(self):
            skipped = f" ({self.bad_lines} malformed lines skipped)" if self.bad_lines else ""
            raise DataError(f"{self.key_path}.config.data_path: no usable examples in "
                            f"{self.reader_config['data_path']}{skipped}")
        return self

    def _with_cache(self, use: Callable[[], _T], instead: str) -> Optional[_T]:
        """``use()`` the token cache. When it cannot be used: with ``cache: true`` an error (naming
        what ``cache: false`` does ``instead``), else a warning and None."""
        try:
            return use()
        except CacheUnavailable as e:
            if self.reader_config["cache"] is True:
                raise DataError(f"{e} (set {self.key_path}.config.cache: false to {instead})") from None
            logger.warning("%s: the token cache is not used: %s", self.name, e)
            return None

    def _plan_stream(self, to_fit: List[FitGroup]) -> FirstSeen:
        """A streamed reader's pass before training: row counts and fitted vocabularies, from or
        into the token cache's folder (in this process with ``cache: false``)."""
        problem = check_streaming(self, self.name)
        if problem:
            raise ConfigError(problem)
        files = self.data_files()
        planned = None
        if self.reader_config["cache"] is not False:
            planned = self._with_cache(lambda: TokenCache(self, files).stream_plan(to_fit), "count in this process")
        if planned is None:
            results = [plan_rows(self, [FilePart(path, 0, None, 1)], to_fit) for path in files]
            merged = merge_plans(results)
            for group, counts in zip(to_fit, merged["counts"]):
                group.owner.fit_counts(counts)
            planned = StreamCounts([r["rows"] for r in results],
                                   *counted(merged["bad_lines"], merged["skipped"], merged["first_seen"].items()))
        self.bad_lines, self.skipped = planned.bad_lines, planned.skipped
        self.stream_plan = StreamPlan(files, planned.rows)
        return planned.first_seen

    def _load_in_memory(self, to_fit: List[FitGroup], fitting: bool) -> FirstSeen:
        """Read every line, fit, and convert into a list of examples held in memory."""
        lines = self._sample(self.read_lines())
        logger.info("%s: %d lines read%s", self.name, len(lines),
                    "; fitting vocabularies and converting" if fitting else "; converting")
        for group in to_fit:
            group.fit(lines)
        self.share_fitted_vocabs()
        keep_raw = self.reader_config["need_generate_examples"]
        bar = progress_of(len(lines), f"{self.name} data", self.show_progress, logger.info, "lines")
        examples: List[Tuple[Any, ...]] = []
        for count, ((_, _, columns), example) in enumerate(self.converted(lines), 1):
            bar.update(count)
            examples.append(example)
            if keep_raw:
                self.raw_examples.append(columns)
        bar.close(keep=False)
        self.examples = examples
        return self.first_seen(lines)

    def first_seen(self, rows: Iterable[RawLine]) -> FirstSeen:
        """For each single-label field (by position), where each label first occurs."""
        return data_report.first_seen(self.fields, rows)

    def share_fitted_vocabs(self) -> None:
        """Fields with ``vocab_from`` take their owner's vocab, once it is fitted."""
        field_vocabs.share_fitted_vocabs(self.fields)

    def _sample(self, lines: List[RawLine]) -> List[RawLine]:
        rate = self.reader_config["sampling_rate"]
        if rate >= 1.0:
            return lines
        keep = np.random.RandomState(len(lines)).rand(len(lines)) < rate
        return [line for line, k in zip(lines, keep) if k]

    # ---- batching ------------------------------------------------------------------------
    def field(self, name: str) -> Optional[BaseFieldReader]:
        return field_vocabs.field_named(self.fields, name)

    def _label_ids(self, col: int) -> Sequence[int]:
        """The ids of a label column, one an example."""
        column = self.columns().get(col)
        return column.tolist() if column is not None else cast(Sequence[int], self.field_values(col))

    def collate(self, examples: Sequence[Tuple[Any, ...]]) -> Dict[str, np.ndarray]:
        batch: Dict[str, np.ndarray] = {}
        for col, field in enumerate(self.fields):
            batch.update(field.collate([e[col] for e in examples]))
        return batch

    def collate_rows(self, indices: Sequence[int]) -> Dict[str, np.ndarray]:
        """``collate`` of the examples at ``indices``; fixed-shape fields select rows of their
        column array instead of stacking per-example values."""
        if self.stream_plan is not None:  # the first examples in file order (an export's sample batch)
            examples = first_examples(self, self.stream_plan, max(indices) + 1)
            return self.collate([examples[i] for i in indices if i < len(examples)])
        columns = self.columns()
        batch: Dict[str, np.ndarray] = {}
        for col, field in enumerate(self.fields):
            if col in columns:
                batch[field.name] = np.asarray(columns[col][indices])
            else:
                batch.update(field.collate(cast(List[Any], self.field_values(col, indices))))
        return batch

    def field_values(self, col: int, indices: Optional[Sequence[int]] = None) -> Sequence[Any]:
        """The values of the field at position ``col`` of the examples at ``indices`` (all by default)."""
        if isinstance(self.examples, CachedExamples):
            return self.examples.values(col, indices)
        if indices is None:
            return [e[col] for e in self.examples]
        return [self.examples[i][col] for i in indices]

    def tensor_specs(self) -> List[TensorSpec]:
        return [spec for field in self.fields for spec in field.tensor_specs()]

    def columns(self) -> Dict[int, np.ndarray]:
        """Column arrays of the fixed-shape fields, by field position (built once; from the token
        cache, views of its memory-mapped arrays where the field allows)."""
        if self._columns is None:
            self._columns = {}
            for col, field in enumerate(self.fields):
                if isinstance(self.examples, CachedExamples):
                    view = self.examples.column_view(col)
                    column = field.column(view) if view is not None else None  # type: ignore[arg-type]
                else:
                    column = field.column([e[col] for e in self.examples])
                if column is not None:
                    self._columns[col] = column
        return self._columns

    def save_vocabs(self, folder: str) -> None:
        """Write the fields' vocabularies and label maps into ``folder``."""
        for field in self.fields:
            field.save_vocab(folder)

    def data_info(self) -> Dict[str, Dict[str, Any]]:
        """Per-field sizes for the model: ``{"text_a": {"vocab_size": ...}, "label": {...}}``."""
        return {f.name: f.info() for f in self.fields}

    def __len__(self) -> int:
        return self.stream_plan.total if self.stream_plan is not None else len(self.examples)

    def make_sampler(self, batch_size: int, shuffle: bool, seed: int, rank: int = 0,
                     num_replicas: int = 1, pad: bool = True, bucket_batches: int = 0) -> ResumableBatchSampler:
        """Batches of ``batch_size`` examples; with ``bucket_batches``, of similar lengths (the
        longest of each example's padded fields, see ``ResumableBatchSampler``)."""
        if self.stream_plan is not None:
            return StreamSampler(self, self.stream_plan, batch_size, shuffle, seed,  # type: ignore[return-value]
                                 drop_last=self.reader_config["drop_last"], rank=rank, num_replicas=num_replicas,
                                 pad=pad, buffer=self.reader_config["shuffle_buffer"])
        lengths = self.example_lengths() if bucket_batches else None
        return ResumableBatchSampler(len(self.examples), batch_size, shuffle, seed,
                                     drop_last=self.reader_config["drop_last"], rank=rank,
                                     num_replicas=num_replicas, pad=pad, lengths=lengths,
                                     bucket_batches=bucket_batches)

    def example_lengths(self) -> np.ndarray:
        """``[num_examples]``: each example's longest padded field."""
        if isinstance(self.examples, CachedExamples):
            return self.examples.lengths
        return np.fromiter((self.example_length(e) for e in self.examples), dtype=np.int64, count=len(self.examples))

    def example_length(self, example: Tuple[Any, ...]) -> int:
        """The longest padded field of one example."""
        return max(f.length(value) for f, value in zip(self.fields, example))

    def make_loader(self, sampler: ResumableBatchSampler, numpy_batches: bool = False) -> BatchLoader:
        """Batches of the converted examples in ``sampler``'s order, as dicts of tensors (numpy
        arrays with ``numpy_batches``: the static trainer's Executor takes them).

        Without worker processes the batches are collated in the calling thread (see
        ``_MainThreadBatches``); with ``num_workers`` a ``paddle.io.DataLoader`` runs them."""
        if isinstance(sampler, StreamSampler):
            return stream_loader(self, sampler, numpy_batches, self.reader_config["num_workers"])
        if self.reader_config["num_workers"] == 0:
            return _MainThreadBatches(self, sampler, as_tensors=not numpy_batches)
        from wenxin.data.worker_loader import example_loader
        return example_loader(self.examples, sampler, self.collate, self.reader_config["num_workers"])


def build_readers(dataset_config: Dict[str, Any], scope: Optional[str],
                  names: Sequence[str] = ("train_reader", "dev_reader", "test_reader"),
                  saved_vocab_dir: Optional[str] = None, show_progress: bool = False) -> Dict[str, BasicDataSetReader]:
    """Build and load the configured readers; the train reader is loaded first and fits vocabs
    (or takes those saved in ``saved_vocab_dir``, when a run resumes). ``show_progress`` draws a
    progress bar while each converts its lines."""
    readers: Dict[str, BasicDataSetReader] = {}
    train: Optional[BasicDataSetReader] = None
    for name in names:
        config = dataset_config.get(name)
        if config is None:
            continue
        cls = RegisterSet.dataset_readers.get(config["type"], scope, f"dataset_reader.{name}.type")
        reader = cls(config, name, scope)
        reader.show_progress = show_progress
        if name == "train_reader":
            reader.load(saved_vocab_dir=saved_vocab_dir)
        else:
            reader.load(train_reader=train)
        if name == "train_reader":
            train = reader
        readers[name] = reader
    return readers
