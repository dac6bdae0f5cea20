"""Streamed training data: batches read from the data files while training runs, so the corpus is
never held in memory (``config.streaming: true``).

Before training, one pass over the files (in parallel, kept in the token cache's folder so the
next run skips it) counts each file's well-formed rows and fits the vocabularies. An epoch's
rows then stream as follows, every step a function of ``(seed, epoch)`` only:

1. the files, in a seeded order when ``shuffle`` is on;
2. their rows, through a seeded shuffle buffer of ``shuffle_buffer`` rows;
3. the resulting stream dealt to ranks as the in-memory sampler deals its permutation: row ``i``
   to rank ``i % world``; a rank short of rows at the end (the row count is not a multiple of the
   world size) continues from the start of the stream, as the in-memory sampler pads;
4. each rank's rows cut into batches of ``batch_size`` rows, every ``num_workers``-th batch going
   to the same DataLoader worker (which takes one from each worker in turn).

Rows are converted only in the process (or worker) whose batch they are in. A row that fails
conversion (with ``skip_bad_lines``) leaves its batch one example short, so batch boundaries
never depend on conversion: a resumed run skips the rows of the batches already trained without
converting them, and sees exactly the batches an uninterrupted run would. Memory holds the
shuffle buffer and the batches in flight, whatever the corpus size.
"""
from __future__ import annotations

import itertools
import logging
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from wenxin.common.errors import DataError
from wenxin.data.lines import FilePart
from wenxin.data.reading import RawLine, RowReader


DRAW_BLOCK = 4096  # shuffle-buffer positions drawn from the RNG at a time
WARNED_LINES = 5  # malformed lines met while streaming that are logged (by each process)
logger = logging.getLogger(__name__)
_warned = [0]  # malformed lines logged by this process


class StreamPlan:
    """The data files of a streamed reader and the number of well-formed rows in each."""

    def __init__(self, files: Sequence[str], rows: Sequence[int]) -> None:
        self.files, self.rows = list(files), [int(r) for r in rows]

    @property
    def total(self) -> int:
        return sum(self.rows)


def epoch_rows(reader: RowReader, plan: StreamPlan, seed: int, epoch: int, shuffle: bool,
               buffer: int) -> Iterator[RawLine]:
    """The rows of one epoch, in order (see the module docstring, steps 1 and 2). A file whose
    row count differs from the plan's (edited while training) is an error."""
    rng = np.random.RandomState((seed * 100003 + epoch) % 2**32)
    order = rng.permutation(len(plan.files)) if shuffle else np.arange(len(plan.files))

    def rows() -> Iterator[RawLine]:
        for i in order:
            seen = 0
            for row in reader.iter_rows([FilePart(plan.files[i], 0, None, 1)]):
                seen += 1
                yield row
            if seen != plan.rows[i]:
                raise DataError(f"{plan.files[i]}: {seen} rows now, {plan.rows[i]} when the run started: "
                                f"a streamed data file must not change during training")

    if not shuffle or buffer <= 1:
        yield from rows()
        return
    pool: List[RawLine] = []
    draws: List[int] = []
    for row in rows():
        if len(pool) < buffer:
            pool.append(row)
            continue
        if not draws:
            draws = rng.randint(buffer, size=DRAW_BLOCK).tolist()[::-1]
        j = draws.pop()
        yield pool[j]
        pool[j] = row
    for j in rng.permutation(len(pool)):
        yield pool[j]


class StreamSampler:
    """The batches of a streamed reader: each a list of raw rows (see the module docstring).

    Offers what the trainer uses of ``ResumableBatchSampler``: ``set_epoch(epoch, start_batch)``,
    ``len()`` (batches per epoch of this rank), ``seed``, and ``bucket_batches`` (always 0)."""

    bucket_batches = 0

    def __init__(self, reader: RowReader, plan: StreamPlan, batch_size: int, shuffle: bool, seed: int,
                 drop_last: bool = False, rank: int = 0, num_replicas: int = 1, pad: bool = True,
                 buffer: int = 10000) -> None:
        self.reader, self.plan = reader, plan
        self.batch_size, self.shuffle, self.seed = batch_size, shuffle, seed
        self.drop_last, self.rank, self.num_replicas, self.pad = drop_last, rank, num_replicas, pad
        self.buffer = buffer
        self.epoch = 0
        self.start_batch = 0

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        self.epoch, self.start_batch = epoch, start_batch

    def rows_of_rank(self) -> int:
        total = self.plan.total
        if self.pad:
            return -(-total // self.num_replicas)
        return len(range(self.rank, total, self.num_replicas))

    def __len__(self) -> int:
        n = self.rows_of_rank()
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _rank_rows(self) -> Iterator[RawLine]:
        """This rank's rows of the epoch: its share of the stream, continued from the stream's
        start where padding needs more."""
        needed = self.rows_of_rank()
        if needed == 0:
            return
        cyclic = itertools.chain.from_iterable(
            epoch_rows(self.reader, self.plan, self.seed, self.epoch, self.shuffle, self.buffer)
            for _ in itertools.count())  # endless: the plan has rows, and a pass with fewer is an error
        yield from itertools.islice(cyclic, self.rank, self.rank + needed * self.num_replicas, self.num_replicas)

    def batches(self, worker: int = 0, workers: int = 1) -> Iterator[Tuple[int, List[RawLine]]]:
        """``(batch number, rows)`` of the batches from ``start_batch`` on that go to ``worker``
        (every ``workers``-th, from ``start_batch``: the DataLoader asks worker 0 first)."""
        rows = self._rank_rows()
        size, count = self.batch_size, len(self)
        for b in range(count):
            batch = list(itertools.islice(rows, size))
            if b >= self.start_batch and (b - self.start_batch) % workers == worker:  # the first to worker 0
                yield b, batch

    def __iter__(self) -> Iterator[List[RawLine]]:
        for _, rows in self.batches():
            yield rows


def convert_batch(reader: RowReader, rows: List[RawLine]) -> Dict[str, np.ndarray]:
    """A batch's rows converted and collated; a batch whose every row is malformed is an error."""
    before = reader.bad_lines
    examples = [example for _, example in reader.converted(rows)]
    if reader.bad_lines > before and _warned[0] < WARNED_LINES:
        _warned[0] += 1
        path, lineno, problem = reader.skipped[-1]
        logger.warning("%s:%d: skipped: %s (a streamed batch is one example short)", path, lineno, problem)
    if not examples:
        first, last = rows[0], rows[-1]
        raise DataError(f"{first[0]}:{first[1]} to {last[0]}:{last[1]}: every line of a batch is malformed "
                        f"(the lines are skipped with skip_bad_lines, but a batch needs one example)")
    return reader.collate(examples)


class StreamBatches:
    """Iterates a ``StreamSampler``'s batches in the calling thread, converted and collated
    (tensors for the eager trainer)."""

    def __init__(self, reader: RowReader, sampler: StreamSampler, as_tensors: bool) -> None:
        self.reader, self.sampler, self.as_tensors = reader, sampler, as_tensors

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        for _, rows in self.sampler.batches():
            batch: Dict[str, Any] = convert_batch(self.reader, rows)
            if self.as_tensors:
                from wenxin.data.worker_loader import as_tensors  # the eager engine's: Paddle is there
                batch = as_tensors(batch)
            yield batch

    def __len__(self) -> int:
        return len(self.sampler)


def stream_loader(reader: RowReader, sampler: StreamSampler, numpy_batches: bool,
                  num_workers: int) -> Any:
    """The batches of ``sampler``: in the calling thread, or in ``num_workers`` DataLoader
    worker processes, each converting only its own batches."""
    if num_workers == 0:
        return StreamBatches(reader, sampler, as_tensors=not numpy_batches)
    from wenxin.data.worker_loader import stream_worker_loader

    def batches_of(worker: int, workers: int) -> Iterator[Dict[str, np.ndarray]]:
        return (convert_batch(reader, rows) for _, rows in sampler.batches(worker, workers))
    return stream_worker_loader(batches_of, lambda: len(sampler) - sampler.start_batch, num_workers)


def first_examples(reader: RowReader, plan: StreamPlan, count: int) -> List[Tuple[Any, ...]]:
    """The first ``count`` examples in file order (for an export's sample batch)."""
    rows = (row for path in plan.files for row in reader.iter_rows([FilePart(path, 0, None, 1)]))
    return [example for _, example in itertools.islice(reader.converted(rows), count)]


def check_streaming(reader: RowReader, name: str) -> Optional[str]:
    """Why this reader cannot stream, or None."""
    cfg = reader.reader_config
    if name != "train_reader":
        return f"{reader.key_path}.config.streaming: only the train_reader streams (dev and test sets are " \
               f"evaluated in the reader's order; give them the token cache, cache: true)"
    if cfg["bucket_batches"]:
        return f"{reader.key_path}.config.bucket_batches: length bucketing sorts examples the reader holds; " \
               f"with streaming: true set it to 0 (or use the token cache instead of streaming)"
    if cfg["sampling_rate"] < 1.0:
        return f"{reader.key_path}.config.sampling_rate: not available with streaming: true"
    return None
