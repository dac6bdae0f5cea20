"""The token cache: a reader's converted examples, written once as memory-mapped NumPy arrays.

Converting text (tokenizing, looking up ids) costs a fraction of a millisecond a line, and
every run, resume and reader repeated it, holding every example as Python objects. The cache
converts a corpus once, in parallel processes, and later runs open its arrays in about a second:
batches read the rows they need from the page cache.

An entry is a folder under the cache root (``config.cache_dir``, else ``$WENXIN_CACHE_DIR``, else
``~/.cache/wenxin``):

- ``meta.json``: what the entry holds, and the size and CRC-32 of each of its files;
- ``s<k>.npy``: one number per example for value slot ``k`` (int64 or float64), or
  ``s<k>.data.npy`` + ``s<k>.offsets.npy``: a 1-D array per example, example ``i`` being
  ``data[offsets[i]:offsets[i + 1]]`` (int64 ids are stored as int32 when they fit);
- ``lengths.npy``: each example's padded length, for length bucketing;
- fit entries hold ``vocabs.json`` instead: the vocabularies fitted on the training data.

**Keys.** An entry's name hashes everything its content depends on:

- the data: every file's absolute path (messages name ``file:line``) and the SHA-256 of all its
  bytes. Hashing runs at about 1.2 GB/s here, under a second per start for a 1 GB corpus, in the
  same pass that plans the parallel parts. Size and mtime alone would be cheaper, but would
  silently reuse a cache after an edit that keeps both (a copy with ``cp -p``, a restored backup);
- the reader's field configs and line-format keys, and the source files of its field reader and
  tokenizer classes (editing a task's tokenizer rebuilds);
- the vocabularies the fields convert with (their token lists). Fitted vocabularies are the
  content of a fit entry, keyed by the data and config, so a resumed run, which takes the
  vocabularies saved in its checkpoint, finds the entry of the run it resumes.

**Damage.** Opening an entry checks each file's size and CRC-32 (about 3 GB/s); a damaged entry
is logged and rebuilt. Entries are built in a temporary folder renamed into place under a file
lock, so a killed build leaves no partial entry and ranks starting together build once. A new
entry for the same data path and fields replaces the older ones, so edits do not pile up copies.
"""
from __future__ import annotations

import collections
import contextlib
import ctypes
import fcntl
import glob
import hashlib
import inspect
import itertools
import json
import logging
import multiprocessing
import os
import shutil
import signal
import time
import zlib
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, \
    Mapping, Tuple

import numpy as np

from wenxin.common.errors import DataError, WenxinError
from wenxin.common.progress import ProgressBar
from wenxin.data.cached_examples import CacheUnavailable, CachedExamples, Spec, flatten, leaf_kinds, spec_of
from wenxin.common.threads import available_cores
from wenxin.data.lines import FilePart
from wenxin.data.row_formats import RowFormat

if TYPE_CHECKING:
    from wenxin.data.dataset_reader import BasicDataSetReader, FirstSeen, FitGroup, RawLine

logger = logging.getLogger(__name__)

FORMAT = 2  # bump when the entry layout or the meaning of a key changes (2: meta.json carries its own digest)
AUTO_MIN_BYTES = 8 << 20  # cache: "auto" caches readers whose data files hold at least this much
SCAN_BLOCK = 16 << 20
PART_BYTES = (64 << 10, 16 << 20)  # the bounds of one worker task's share of a file (memory per worker)
JOIN_CHUNK = 1 << 22  # values per step when part arrays are joined into an entry's file
FLUSH_ROWS = 2000  # PartVocab sums its lookups into counts every this many rows
LINE_KEYS = ("format", "separator", "has_header", "skip_bad_lines", "max_line_bytes", "sampling_rate")
INT32 = np.iinfo(np.int32)
PR_SET_PDEATHSIG = 1  # prctl option: a signal for this process when its parent dies


class _Damaged(Exception):
    """An entry whose files do not match its ``meta.json``."""


# ---- files ------------------------------------------------------------------------------
def cache_root(configured: str = "") -> str:
    """The folder holding the cache's entries."""
    if configured:
        return os.path.abspath(os.path.expanduser(configured))
    if os.environ.get("WENXIN_CACHE_DIR"):
        return os.path.abspath(os.path.expanduser(os.environ["WENXIN_CACHE_DIR"]))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "wenxin")


def scan_files(files: Sequence[str], part_bytes: int,
               row_format: Optional[RowFormat] = None) -> Tuple[List[str], List[FilePart], List[int]]:
    """One pass over the data files: each file's SHA-256, the files cut into parts of about
    ``part_bytes`` at line starts (where the format says, a second pass, for a format that cuts
    its own parts: ``RowFormat.part_starts``), and the number of lines of each part."""
    digests: List[str] = []
    parts: List[FilePart] = []
    line_counts: List[int] = []
    for path in files:
        digest, starts, total_lines = _scan_lines(path, part_bytes)
        digests.append(digest)
        own_starts = row_format.part_starts(path, part_bytes) if row_format is not None else None
        if own_starts is not None:
            *starts, (_, end_line) = own_starts
            total_lines = end_line - 1
        for k, (start, lineno) in enumerate(starts):
            following = starts[k + 1] if k + 1 < len(starts) else (None, total_lines + 1)
            parts.append(FilePart(path, start, following[0], lineno))
            line_counts.append(following[1] - lineno)
    return digests, parts, line_counts


def _scan_lines(path: str, part_bytes: int) -> Tuple[str, List[Tuple[int, int]], int]:
    """A file's SHA-256, ``(byte offset, line number)`` of the first line of each part of about
    ``part_bytes``, and its number of lines."""
    digest = hashlib.sha256()
    starts = [(0, 1)]
    position = newlines = 0
    target = part_bytes
    last = b"\n"
    with open(path, "rb") as f:
        while True:
            block = f.read(SCAN_BLOCK)
            if not block:
                break
            digest.update(block)
            while target < position + len(block):
                i = block.find(b"\n", max(0, target - position))
                if i < 0:
                    target = position + len(block)
                    break
                starts.append((position + i + 1, newlines + block.count(b"\n", 0, i + 1) + 1))
                target = position + i + 1 + part_bytes
            newlines += block.count(b"\n")
            position += len(block)
            last = block[-1:]
    if len(starts) > 1 and starts[-1][0] >= position:
        starts.pop()  # a cut at the very end
    return digest.hexdigest(), starts, newlines + (last != b"\n")


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def _source_digest(objects: Iterable[Any]) -> str:
    """A hash of the source files defining the classes of ``objects`` and their bases."""
    files = set()
    for obj in objects:
        for cls in type(obj).__mro__:
            try:
                source = inspect.getsourcefile(cls)
            except TypeError:  # built-in
                continue
            if source:
                files.add(source)
    digest = hashlib.sha256()
    for source in sorted(files):
        with open(source, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()


def _file_checksum(path: str) -> int:
    crc = 0
    with open(path, "rb") as f:
        while True:
            block = f.read(SCAN_BLOCK)
            if not block:
                return crc
            crc = zlib.crc32(block, crc)


def _meta_digest(meta: Mapping[str, Any]) -> str:
    """The SHA-256 of ``meta`` as JSON (its ``digest`` key left out), so an edited or damaged
    ``meta.json`` is told from the one that was sealed."""
    return _digest({k: v for k, v in json.loads(json.dumps(meta)).items() if k != "digest"})


def _entry_files(folder: str) -> List[str]:
    """Every file of an entry but ``meta.json`` (relative paths)."""
    found: List[str] = []
    for root, _, names in os.walk(folder):
        found.extend(os.path.relpath(os.path.join(root, name), folder) for name in names)
    return sorted(rel for rel in found if rel != "meta.json")


def _seal(folder: str, meta: Dict[str, Any]) -> None:
    """Write ``meta.json`` with the size and checksum of every other file of the entry, and the
    digest of the meta itself."""
    meta["files"] = {rel: [os.path.getsize(os.path.join(folder, rel)), _file_checksum(os.path.join(folder, rel))]
                     for rel in _entry_files(folder)}
    meta["digest"] = _meta_digest(meta)
    with open(os.path.join(folder, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f)
        f.flush()
        os.fsync(f.fileno())


def _verify(folder: str) -> Optional[Dict[str, Any]]:
    """The entry's meta, None when there is no entry; ``_Damaged`` when ``meta.json`` is not the
    one sealed, or the entry's files are not the ones it lists."""
    if not os.path.isdir(folder):
        return None
    try:
        with open(os.path.join(folder, "meta.json"), encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError, RecursionError) as e:
        raise _Damaged(f"meta.json: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise _Damaged("meta.json is not of this cache format")
    if meta.get("digest") != _meta_digest(meta):
        raise _Damaged("meta.json does not match its digest (edited or damaged)")
    files = meta.get("files")
    if not isinstance(files, dict) or not files or sorted(files) != _entry_files(folder):
        raise _Damaged("meta.json does not list exactly the entry's files")
    for rel, entry in files.items():
        path = os.path.join(folder, rel)
        try:
            size, crc = entry
            if os.path.getsize(path) != size:
                raise _Damaged(f"{rel} has {os.path.getsize(path)} bytes, not {size}")
            if _file_checksum(path) != crc:
                raise _Damaged(f"{rel}: checksum mismatch")
        except OSError as e:
            raise _Damaged(f"{rel}: {e.strerror}") from None
        except (TypeError, ValueError) as e:  # a sealed meta of another shape
            raise _Damaged(f"meta.json: {rel}: {e}") from None
    return meta


@contextlib.contextmanager
def _holding(fd: int, entry: str) -> Iterator[None]:
    """An exclusive lock on the open lock file ``fd`` (released when the process ends, however
    it ends), closed afterwards."""
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.info("token cache: waiting for another process writing %s", entry)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _save_array(path: str, array: np.ndarray) -> None:
    np.save(path, np.ascontiguousarray(array), allow_pickle=False)


# ---- building ---------------------------------------------------------------------------
class _Build(NamedTuple):
    """What the (forked) workers work for: the reader, and the fit groups of this build."""

    reader: "BasicDataSetReader"
    groups: List["FitGroup"]


_ACTIVE: Optional[_Build] = None  # set in the parent before the workers fork


def _worker_signals() -> None:
    """A worker ignores Ctrl-C (the parent stops the workers) and dies quietly when the pool
    terminates it: the parent's handlers (wenxin's, Paddle's crash report) would print a traceback
    from every worker."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(OSError, AttributeError):  # Linux: die with the parent, even a SIGKILLed one
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class _Failed(NamedTuple):
    """A worker's error, raised again by the parent."""

    message: str
    unavailable: bool  # a CacheUnavailable (the reader may convert in memory instead)


def _failure(e: BaseException) -> _Failed:
    if isinstance(e, WenxinError):
        return _Failed(str(e), isinstance(e, CacheUnavailable))
    return _Failed(f"{type(e).__name__}: {e}", False)


def _sampled(rows: Iterable["RawLine"], mask: Optional[np.ndarray]) -> Iterator["RawLine"]:
    if mask is None:
        yield from rows
        return
    for row, keep in zip(rows, mask):
        if keep:
            yield row


def _count_rows(part: FilePart) -> Any:
    """Worker: the number of well-formed rows of a part (for ``sampling_rate``)."""
    assert _ACTIVE is not None
    try:
        return sum(1 for _ in _ACTIVE.reader.iter_rows([part], on_bad=lambda *_: None))
    except Exception as e:  # noqa: BLE001 (reported by the parent)
        return _failure(e)


def _fit_counts(task: Tuple[FilePart, Optional[np.ndarray], List[int]]) -> Any:
    """Worker: the counts of the fit groups at ``groups`` over a part."""
    part, mask, groups = task
    assert _ACTIVE is not None
    try:
        rows = list(_sampled(_ACTIVE.reader.iter_rows([part], on_bad=lambda *_: None), mask))
        return [_ACTIVE.groups[g].count(rows) for g in groups]
    except Exception as e:  # noqa: BLE001
        return _failure(e)


def plan_rows(reader: "BasicDataSetReader", parts: Sequence[FilePart], groups: Sequence["FitGroup"]) -> Dict[str, Any]:
    """Streaming's pass over ``parts``: their well-formed rows, each group's counts, where each
    label first occurs, and the malformed lines (skipped or an error, as ``skip_bad_lines`` says)."""
    reader.bad_lines, reader.skipped = 0, []
    counts: List[collections.Counter] = [collections.Counter() for _ in groups]
    first_seen = merge_first_seen([reader.first_seen([]).items()])
    rows = 0
    for chunk in _chunks(reader.iter_rows(parts), 4096):
        rows += len(chunk)
        for total, group in zip(counts, groups):
            total.update(group.count(chunk))
        first_seen = merge_first_seen([first_seen.items(), reader.first_seen(chunk).items()])
    return {"rows": rows, "counts": counts, "first_seen": first_seen, "bad_lines": reader.bad_lines,
            "skipped": reader.skipped}


def _plan_part(part: FilePart) -> Any:
    """Worker (streaming): ``plan_rows`` of one part."""
    assert _ACTIVE is not None
    try:
        result = plan_rows(_ACTIVE.reader, [part], _ACTIVE.groups)
        result["counts"] = [pack_counter(counts) for counts in result["counts"]]
        return result
    except Exception as e:  # noqa: BLE001
        return _failure(e)


def _chunks(rows: Iterable[Any], size: int) -> Iterator[List[Any]]:
    iterator = iter(rows)
    while True:
        chunk = list(itertools.islice(iterator, size))
        if not chunk:
            return
        yield chunk


class PartVocab:
    """Stands in for a text field's vocab while the token cache converts one part before the
    vocab is fitted: each new token gets the next part-local id, and every token looked up is
    counted (``to_ids`` sees a column's tokens before truncation, as fitting counts them). The
    parent sums the parts' counts, fits the vocab, and renumbers the ids. Each line is thus
    tokenized once, where fitting first and converting after tokenized it twice."""

    def __init__(self) -> None:
        self.token_to_id = _NumberingDict()
        self.looked_up: List[List[int]] = []  # this row's and recent rows' lookups
        self._counts = np.zeros(0, dtype=np.int64)
        self._row_start = 0

    def to_ids(self, tokens: Iterable[str]) -> List[int]:
        ids = list(map(self.token_to_id.__getitem__, tokens))
        self.looked_up.append(ids)
        return ids

    def start_row(self) -> None:
        if len(self.looked_up) >= FLUSH_ROWS:
            self._flush()
        self._row_start = len(self.looked_up)

    def undo_row(self) -> None:
        """Forget the lookups of a row whose conversion failed (it is counted again in full)."""
        del self.looked_up[self._row_start:]

    def _flush(self) -> None:
        ids = np.fromiter(itertools.chain.from_iterable(self.looked_up), dtype=np.int64)
        counts = np.bincount(ids, minlength=len(self.token_to_id))
        counts[:len(self._counts)] += self._counts
        self._counts, self.looked_up = counts, []

    def counts(self) -> np.ndarray:
        """``[local ids]``: how often each token was looked up."""
        self._flush()
        return self._counts


class _NumberingDict(dict):
    """token -> id; an unseen token gets the next id (``__missing__`` runs for new tokens only,
    so lookups stay in C)."""

    def __missing__(self, token: str) -> int:
        number = self[token] = len(self)
        return number


def _convert_part(task: Tuple[int, FilePart, Optional[np.ndarray], str, List[int]]) -> Any:
    """Worker: convert a part's rows and save their slot arrays as ``<folder>/p<index>.*``. The
    fit groups at ``fused`` convert with ``PartVocab``s, returned with the result."""
    index, part, mask, folder, fused = task
    assert _ACTIVE is not None
    reader = _ACTIVE.reader
    reader.bad_lines, reader.skipped = 0, []
    vocabs_before = [field.vocab for field in reader.fields]
    try:
        part_vocabs: List[Tuple["FitGroup", PartVocab]] = []
        for g in fused:
            group, vocab = _ACTIVE.groups[g], PartVocab()
            for col in group.columns:
                # not set_vocab: nothing to bind; a PartVocab answers what converting asks of a Vocab
                reader.fields[col].vocab = vocab  # type: ignore[assignment]
            part_vocabs.append((group, vocab))
        rows = list(_sampled(reader.iter_rows([part]), mask))
        first_seen = reader.first_seen(rows)
        writer = _PartWriter(reader)
        for row in rows:
            for _, vocab in part_vocabs:
                vocab.start_row()
            converted = list(reader.converted([row]))
            if converted:
                writer.add(converted[0][1])
                continue
            for group, vocab in part_vocabs:  # a skipped row: fitting counts all its tokens
                vocab.undo_row()
                for col in group.columns:
                    vocab.to_ids(map(str, group.owner.fit_items(row[2][col])))  # a text field's tokens
        result = writer.save(folder, index)
        result.update(bad_lines=reader.bad_lines, skipped=reader.skipped,
                      first_seen=[[col, seen] for col, seen in first_seen.items()],
                      local_vocabs=[pack_counts(list(vocab.token_to_id), vocab.counts()) for _, vocab in part_vocabs])
        return result
    except Exception as e:  # noqa: BLE001
        return _failure(e)
    finally:
        for field, before in zip(reader.fields, vocabs_before):
            field.vocab = before  # the parent's fields, when it converts without workers


class _PartWriter:
    """Collects a part's examples as slot values, then saves them as arrays."""

    def __init__(self, reader: "BasicDataSetReader") -> None:
        self.reader = reader
        self.specs: Optional[List[Spec]] = None
        self.leaves: List[List[Any]] = []
        self.lengths: List[int] = []

    def add(self, example: Tuple[Any, ...]) -> None:
        fields = self.reader.fields
        if self.specs is None:
            specs = []
            for field, value in zip(fields, example):
                try:
                    specs.append(spec_of(value))
                except CacheUnavailable as e:
                    raise CacheUnavailable(f"{field.path}: the token cache cannot store {e}") from None
            self.specs = specs
            self.leaves = [[] for spec in specs for _ in leaf_kinds(spec)]
        out: List[Any] = []
        for field, value, spec in zip(fields, example, self.specs):
            try:
                flatten(value, spec, out)
            except CacheUnavailable as e:
                raise CacheUnavailable(f"{field.path}: the token cache cannot store {e}") from None
        for slot, leaf in zip(self.leaves, out):
            slot.append(leaf)
        self.lengths.append(self.reader.example_length(example))

    def save(self, folder: str, index: int) -> Dict[str, Any]:
        slots: List[Dict[str, Any]] = []
        kinds = [kind for spec in self.specs or [] for kind in leaf_kinds(spec)]
        for k, ((kind, dtype), values) in enumerate(zip(kinds, self.leaves)):
            name = os.path.join(folder, f"p{index}.s{k}")
            if kind == "scalar":
                _save_array(name + ".npy", np.asarray(values, dtype=dtype))
                slots.append({})
                continue
            sizes = np.fromiter((len(v) for v in values), dtype=np.int64, count=len(values))
            data = np.concatenate(values).astype(dtype, copy=False) if values else np.zeros(0, dtype)
            _save_array(name + ".data.npy", data)
            _save_array(name + ".sizes.npy", sizes)
            integers = data.size and data.dtype.kind in "iu"
            slots.append({"min": int(data.min()) if integers else 0, "max": int(data.max()) if integers else 0,
                          "widths": sorted(set(sizes.tolist()))[:2]})
        _save_array(os.path.join(folder, f"p{index}.lengths.npy"), np.asarray(self.lengths, dtype=np.int64))
        return {"examples": len(self.lengths), "specs": self.specs, "slots": slots}


class PackedCounts(NamedTuple):
    """A part's distinct tokens and their counts, as a worker sends them to the parent. Text
    tokens travel as one newline-joined string (a pickled list of millions of ``str`` took ten
    times the memory: 1.2 GB of a 1M-line build's parent); other keys travel as a list."""

    tokens: Any  # str (newline-joined) or List[Hashable]
    size: int
    counts: np.ndarray  # [size] int64

    def token_list(self) -> List[Any]:
        if isinstance(self.tokens, str):
            return self.tokens.split("\n") if self.size else []
        return self.tokens


def pack_counts(tokens: List[Any], counts: np.ndarray) -> PackedCounts:
    """``tokens`` (distinct) packed: joined when they are all strings without a newline."""
    try:
        joined = "\n".join(tokens)
    except TypeError:  # not all strings (label values, say)
        return PackedCounts(tokens, len(tokens), counts)
    if joined.count("\n") != max(len(tokens) - 1, 0):
        return PackedCounts(tokens, len(tokens), counts)  # a token holds a newline
    return PackedCounts(joined, len(tokens), counts)


def pack_counter(counter: "collections.Counter[Any]", join: bool = True) -> PackedCounts:
    """``counter`` packed (``join``: for a trip between processes)."""
    tokens, counts = list(counter), np.fromiter(counter.values(), dtype=np.int64, count=len(counter))
    return pack_counts(tokens, counts) if join else PackedCounts(tokens, len(tokens), counts)


def _as_packed(counts: Any) -> PackedCounts:
    """Counts from a worker, or a Counter of this process (not joined: it travels nowhere)."""
    return counts if isinstance(counts, PackedCounts) else pack_counter(counts, join=False)


def _merge_part_vocabs(local: Sequence[PackedCounts]) -> Tuple[List[str], np.ndarray, List[np.ndarray]]:
    """The parts' local vocabs joined: every token once, its summed count, and for each part the
    index of each of its local ids in that list. One part's tokens are unpacked at a time, so the
    parent holds the distinct tokens once. (Dictionaries and NumPy here: a ``Counter.update`` per
    part costs a Python loop per token, a third of a 200k-line build.)"""
    index = _NumberingDict()
    positions = []
    for part in local:
        tokens = part.token_list()
        positions.append(np.fromiter(map(index.__getitem__, tokens), dtype=np.int64, count=len(tokens)))
        del tokens
    totals = np.zeros(len(index), dtype=np.int64)
    for where, part in zip(positions, local):
        totals[where] += part.counts  # a part's local tokens are distinct, so no index repeats
    return list(index), totals, positions


def _summed(parts: Sequence[PackedCounts]) -> "collections.Counter[Any]":
    """The sum of the parts' counts (see ``_merge_part_vocabs`` for why not ``Counter.update``)."""
    tokens, totals, _ = _merge_part_vocabs(parts)
    return collections.Counter(dict(zip(tokens, totals.tolist())))


def merge_plans(results: List[Dict[str, Any]]) -> Dict[str, Any]:
    """``plan_rows`` results of parts, in file order, summed."""
    groups = len(results[0]["counts"]) if results else 0
    counts = [_summed([_as_packed(r["counts"][g]) for r in results]) for g in range(groups)]
    return {"counts": counts, "first_seen": merge_first_seen(r["first_seen"].items() for r in results),
            **_bad_lines_of(results)}


def merge_first_seen(parts: Iterable[Iterable[Tuple[Any, Dict[str, Any]]]]) -> Dict[Any, Dict[str, List[Any]]]:
    """Where each label first occurs, over parts in file order (each part's ``(column, {label:
    where})`` pairs): the earliest part's place wins. Every column named is kept, even without
    labels."""
    merged: Dict[Any, Dict[str, List[Any]]] = {}
    for pairs in parts:
        for col, seen in pairs:
            column = merged.setdefault(col, {})
            for label, where in seen.items():
                column.setdefault(label, list(where))
    return merged


def _bad_lines_of(results: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The parts' count of malformed lines, and the first ten of them in file order."""
    return {"bad_lines": sum(r["bad_lines"] for r in results),
            "skipped": sorted(s for r in results for s in r["skipped"])[:10]}


class TokenCache:
    """The token cache of one reader (see the module docstring).

    Args:
        reader: the reader, with its fields built.
        files: its data files.
    """

    def __init__(self, reader: "BasicDataSetReader", files: List[str]) -> None:
        self.reader = reader
        self.files = [os.path.abspath(f) for f in files]
        cfg = reader.reader_config
        self.root = cache_root(cfg["cache_dir"])
        self.processes = cfg["cache_processes"] or available_cores()
        self.key_path = f"{reader.key_path}.config"

    @classmethod
    def for_reader(cls, reader: "BasicDataSetReader") -> Optional["TokenCache"]:
        """The reader's cache, or None when it converts in memory: ``cache: false``, or
        ``auto`` with less than ``AUTO_MIN_BYTES`` of data, or ``need_generate_examples`` (the
        raw lines are kept in memory anyway)."""
        cfg = reader.reader_config
        if cfg["cache"] is False:
            return None
        if cfg["need_generate_examples"]:
            if cfg["cache"] is True:
                logger.warning("%s.config.cache: not used, need_generate_examples keeps every raw line in memory",
                               reader.key_path)
            return None
        files = reader.data_files()
        if cfg["cache"] == "auto" and sum(os.path.getsize(f) for f in files) < AUTO_MIN_BYTES:
            return None
        return cls(reader, files)

    # ---- keys ----
    def _identity(self) -> Dict[str, Any]:
        reader, cfg = self.reader, self.reader.reader_config
        tokenizers = [getattr(f, "tokenizer", None) for f in reader.fields]
        return {"format": FORMAT, "files": self.files, "fields": reader.config["fields"],
                "line": {k: cfg[k] for k in LINE_KEYS},
                "code": _source_digest([*reader.fields, reader.row_format, *(t for t in tokenizers if t is not None)])}

    def _name(self, kind: str, identity: Dict[str, Any], content: Any) -> str:
        """``<kind>-<data path and fields>-<everything>``: a new entry replaces those of the
        same first part (see ``_evict``)."""
        place = _digest([identity["files"], identity["fields"]])[:12]
        return f"{kind}-{place}-{_digest([identity, content])[:20]}"

    # ---- entries ----
    def _lookup(self, name: str) -> Optional[Dict[str, Any]]:
        """The verified meta of entry ``name``; None when it is missing or damaged."""
        try:
            return _verify(os.path.join(self.root, name))
        except _Damaged:
            return None

    @contextlib.contextmanager
    def _lock(self, name: str) -> Iterator[None]:
        try:
            os.makedirs(os.path.join(self.root, ".locks"), exist_ok=True)
            fd = os.open(os.path.join(self.root, ".locks", name), os.O_CREAT | os.O_RDWR, 0o644)
        except OSError as e:
            raise CacheUnavailable(f"{self.key_path}.cache_dir: cannot write the token cache in "
                                   f"{self.root}: {e.strerror}") from None
        with _holding(fd, os.path.join(self.root, name)):
            yield

    def _checked(self, name: str) -> Optional[Dict[str, Any]]:
        """Under the entry's lock: its meta; a damaged entry is logged and removed."""
        folder = os.path.join(self.root, name)
        try:
            return _verify(folder)
        except _Damaged as e:
            logger.warning("token cache: %s is damaged (%s); rebuilding it", folder, e)
            shutil.rmtree(folder)
            return None

    @contextlib.contextmanager
    def _scratch(self, name: str) -> Iterator[str]:
        """A temporary folder for building entry ``name`` (removed unless published)."""
        for stale in glob.glob(os.path.join(self.root, f".tmp-{name}-*")):
            shutil.rmtree(stale, ignore_errors=True)  # a build that was killed (we hold the lock)
        tmp = os.path.join(self.root, f".tmp-{name}-{os.getpid()}")
        try:
            os.makedirs(tmp)
            yield tmp
        except OSError as e:
            raise CacheUnavailable(f"{self.key_path}.cache_dir: writing the token cache in {self.root} "
                                   f"failed: {e}") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _publish(self, tmp: str, name: str, meta: Dict[str, Any]) -> Tuple[str, Dict[str, Any]]:
        """Seal ``tmp`` and rename it to entry ``name`` (the caller holds its lock)."""
        meta["format"] = FORMAT
        _seal(tmp, meta)
        folder = os.path.join(self.root, name)
        os.rename(tmp, folder)
        self._evict(name)
        return folder, meta

    def _entry(self, name: str, build: Callable[[str], Dict[str, Any]]) -> Tuple[str, Dict[str, Any], bool]:
        """The entry ``name``, built first if it is missing or damaged; returns its folder, meta,
        and whether it was built now."""
        meta = self._lookup(name)
        if meta is not None:
            return os.path.join(self.root, name), meta, False
        with self._lock(name):
            meta = self._checked(name)  # another process may have built it meanwhile
            if meta is not None:
                return os.path.join(self.root, name), meta, False
            with self._scratch(name) as tmp:
                folder, meta = self._publish(tmp, name, build(tmp))
            return folder, meta, True

    def _evict(self, name: str) -> None:
        """Remove older entries of the same data path and fields (their data or vocabs changed)."""
        prefix = name[:name.rindex("-") + 1]
        for other in glob.glob(os.path.join(self.root, prefix + "*")):
            if os.path.basename(other) != name:
                logger.info("token cache: removing the outdated %s", other)
                shutil.rmtree(other, ignore_errors=True)
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(self.root, ".locks", os.path.basename(other)))

    # ---- running parts ----
    def _run(self, work: Callable[[Any], Any], tasks: List[Any], weights: List[int], what: str,
             groups: Sequence["FitGroup"] = ()) -> List[Any]:
        """``work`` on every task, in ``processes`` forked workers; results in task order. A
        failed task stops the build with its error (the first in file order)."""
        global _ACTIVE
        reader = self.reader
        bar = ProgressBar(sum(weights), f"{reader.name} {what}") if reader.show_progress else None
        results: List[Any] = []
        processes = min(self.processes, len(tasks))
        _ACTIVE = _Build(reader, list(groups))
        try:
            with contextlib.ExitStack() as stack:
                if processes > 1:
                    pool = stack.enter_context(multiprocessing.get_context("fork").Pool(
                        processes, initializer=_worker_signals))
                    outcomes: Iterable[Any] = pool.imap(work, tasks)
                else:
                    outcomes = map(work, tasks)
                for result, weight in zip(outcomes, weights):
                    if isinstance(result, _Failed):
                        raise CacheUnavailable(result.message) if result.unavailable else DataError(result.message)
                    results.append(result)
                    if bar is not None:
                        bar.update(bar.done + weight)
                if processes > 1:
                    pool.close()  # let the workers exit (leaving the block would kill them, and
                    pool.join()   # Paddle's signal handler would print a crash report for each)
        finally:
            _ACTIVE = None
            if bar is not None:
                bar.close(keep=False)
        return results

    # ---- loading ----
    def load(self, to_fit: List["FitGroup"]) -> "FirstSeen":
        """Set the reader's fitted vocabularies and examples from the cache, building what is
        missing; returns where each label first occurs (for the label report)."""
        reader = self.reader
        started = time.perf_counter()
        total = sum(os.path.getsize(f) for f in self.files)
        part_bytes = int(np.clip(total // (self.processes * 2), *PART_BYTES))  # few parts: less to merge
        digests, parts, line_counts = scan_files(self.files, part_bytes, self.reader.row_format)
        identity = self._identity()
        data = [[path, digest] for path, digest in zip(self.files, digests)]
        masks: List[Optional[np.ndarray]] = [None] * len(parts)
        if reader.reader_config["sampling_rate"] < 1.0:
            masks = self._sampling_masks(parts, line_counts)
        job = _Job(parts, masks, line_counts)
        found = None
        if to_fit:
            found = self._fit(to_fit, identity, data, job)
        if found is None:
            reader._share_fitted_vocabs()
            name = self._name("ex", identity, [data, self._vocab_digests()])
            found = self._entry(name, lambda tmp: self._build_examples(tmp, job))
        folder, meta, built = found
        reader.examples = CachedExamples(folder, meta)
        reader.bad_lines, reader.skipped = meta["bad_lines"], [(p, n, why) for p, n, why in meta["skipped"]]
        size = sum(size for size, _ in meta["files"].values())
        logger.info("%s: token cache %s %s (%d examples, %.1f MB) in %.1f s", reader.name,
                    "built" if built else "opened", folder, meta["examples"], size / 2**20,
                    time.perf_counter() - started)
        return {int(col): {label: (where[0], where[1]) for label, where in seen.items()}
                for col, seen in meta["first_seen"]}

    def _vocab_digests(self) -> Dict[str, Optional[str]]:
        return {f.name: _digest(f.vocab.tokens) if f.vocab is not None else None for f in self.reader.fields}

    def stream_plan(self, groups: List["FitGroup"]) -> Tuple[List[int], "FirstSeen"]:
        """For a streamed reader: each data file's well-formed rows, and where each label first
        occurs; fits the groups' vocabularies. One parallel pass, kept as an entry of the cache
        (its vocabularies and counts only) so that the next run skips it."""
        reader = self.reader
        started = time.perf_counter()
        total = sum(os.path.getsize(f) for f in self.files)
        part_bytes = int(np.clip(total // (self.processes * 2), *PART_BYTES))
        digests, parts, line_counts = scan_files(self.files, part_bytes, self.reader.row_format)
        identity = self._identity()
        name = self._name("rows", identity, [[[p, d] for p, d in zip(self.files, digests)],
                                             [[g.owner.name, g.columns] for g in groups]])

        def build(tmp: str) -> Dict[str, Any]:
            results = self._run(_plan_part, parts, line_counts, "counting and fitting", groups)
            rows = [0] * len(self.files)
            for part, result in zip(parts, results):
                rows[self.files.index(part.path)] += result["rows"]
            merged = merge_plans(results)
            for group, counts in zip(groups, merged["counts"]):
                group.owner.fit_counts(counts)
            _write_vocabs(tmp, groups)
            return {"kind": "rows", "rows": rows, "bad_lines": merged["bad_lines"], "skipped": merged["skipped"],
                    "first_seen": [[c, seen] for c, seen in merged["first_seen"].items()]}

        folder, meta, built = self._entry(name, build)
        _take_vocabs(folder, groups)
        reader.bad_lines, reader.skipped = meta["bad_lines"], [(p, n, why) for p, n, why in meta["skipped"]]
        logger.info("%s: streamed from %d files (%d rows); row counts and vocabularies %s %s in %.1f s",
                    reader.name, len(self.files), sum(meta["rows"]), "built" if built else "opened", folder,
                    time.perf_counter() - started)
        return meta["rows"], {int(col): {label: (w[0], w[1]) for label, w in seen.items()}
                              for col, seen in meta["first_seen"]}

    def _sampling_masks(self, parts: List[FilePart], line_counts: List[int]) -> List[Optional[np.ndarray]]:
        """``sampling_rate``'s choice of rows, as the in-memory reader makes it (seeded by the
        number of well-formed rows), cut into the parts' shares."""
        counts = self._run(_count_rows, parts, line_counts, "counting")
        total = int(sum(counts))
        keep = np.random.RandomState(total).rand(total) < self.reader.reader_config["sampling_rate"]
        bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return [keep[bounds[k]:bounds[k + 1]] for k in range(len(parts))]

    def _fit(self, groups: List["FitGroup"], identity: Dict[str, Any], data: Any,
             job: "_Job") -> Optional[Tuple[str, Dict[str, Any], bool]]:
        """Give the groups their fitted vocabularies from the fit entry of this data and config.
        Without one, fit them, and build the examples entry in the same pass (text vocabularies
        are fitted from the part-local ids of the conversion, see ``PartVocab``); returns that
        entry then, else None."""
        name = self._name("fit", identity, [data, [[g.owner.name, g.columns] for g in groups]])
        meta = self._lookup(name)
        if meta is None:
            with self._lock(name):
                meta = self._checked(name)
                if meta is None:
                    return self._fit_and_convert(name, groups, identity, data, job)
        _take_vocabs(os.path.join(self.root, name), groups)
        return None

    def _fit_and_convert(self, fit_name: str, groups: List["FitGroup"], identity: Dict[str, Any], data: Any,
                         job: "_Job") -> Tuple[str, Dict[str, Any], bool]:
        reader = self.reader
        fused = [g for g, group in enumerate(groups) if group.fits_while_converting(reader.fields)]
        counted = [g for g in range(len(groups)) if g not in fused]
        if counted:  # label maps and the like: a quick pass, as conversion needs them
            tasks = [(part, mask, counted) for part, mask in zip(job.parts, job.masks)]
            results = self._run(_fit_counts, tasks, job.line_counts, "fitting vocabularies", groups)
            for position, g in enumerate(counted):
                groups[g].owner.fit_counts(_summed([_as_packed(counts[position]) for counts in results]))
        with self._scratch("ex-of-" + fit_name) as examples_tmp:
            meta = self._build_examples(examples_tmp, job, groups, fused)
            with self._scratch(fit_name) as fit_tmp:
                _write_vocabs(fit_tmp, groups)
                self._publish(fit_tmp, fit_name, {"kind": "fit"})
            reader._share_fitted_vocabs()
            name = self._name("ex", identity, [data, self._vocab_digests()])
            with self._lock(name):
                existing = self._checked(name)
                if existing is not None:
                    return os.path.join(self.root, name), existing, False
                folder, meta = self._publish(examples_tmp, name, meta)
        return folder, meta, True

    def _build_examples(self, tmp: str, job: "_Job", groups: Sequence["FitGroup"] = (),
                        fused: Sequence[int] = ()) -> Dict[str, Any]:
        """Convert the parts in parallel, then join their arrays into the entry's. The groups at
        ``fused`` are fitted from the conversion's part-local ids, which are then renumbered."""
        reader = self.reader
        logger.info("%s: building the token cache (%d parts, %d processes)", reader.name, len(job.parts),
                    min(self.processes, len(job.parts)))
        tasks = [(k, part, mask, tmp, list(fused)) for k, (part, mask) in enumerate(zip(job.parts, job.masks))]
        results = self._run(_convert_part, tasks, job.line_counts, "converting", groups)
        with_examples = [r for r in results if r["specs"] is not None]
        specs = with_examples[0]["specs"] if with_examples else [spec_of(None)] * len(reader.fields)
        for result in with_examples:
            if result["specs"] != specs:
                col = next(c for c, (a, b) in enumerate(zip(specs, result["specs"])) if a != b)
                raise CacheUnavailable(f"{reader.fields[col].path}: the token cache cannot store values of "
                                       f"different forms ({specs[col]} and {result['specs'][col]})")
        renumber: Dict[int, List[np.ndarray]] = {}  # slot -> each part's table: local id -> vocab id
        first_slot = np.cumsum([0] + [len(leaf_kinds(spec)) for spec in specs])
        for position, g in enumerate(fused):
            fitted = _fit_from_parts(groups[g], [r["local_vocabs"][position] for r in results])
            for col in groups[g].columns:
                renumber[int(first_slot[col])] = fitted
        for result in results:
            result.pop("local_vocabs", None)  # the parts' tokens are not needed any more
        count = sum(r["examples"] for r in results)
        kinds = [kind for spec in specs for kind in leaf_kinds(spec)]
        slots: List[Dict[str, Any]] = []
        parts_with = [i for i, r in enumerate(results) if r["specs"] is not None]
        for k, (kind, dtype) in enumerate(kinds):
            names = [f"p{i}.s{k}" for i in parts_with]
            if kind == "scalar":
                _join_parts(tmp, [n + ".npy" for n in names], f"s{k}.npy", np.dtype(dtype), count)
                slots.append({"kind": kind, "dtype": dtype})
                continue
            stats = [results[i]["slots"][k] for i in parts_with]
            tables: Optional[List[np.ndarray]] = [renumber[k][i] for i in parts_with] if k in renumber else None
            store = np.dtype(dtype)
            fits = all(INT32.min <= s["min"] and s["max"] <= INT32.max for s in stats) if tables is None \
                else all(len(t) == 0 or int(t.max()) <= INT32.max for t in tables)
            if store == np.int64 and fits:
                store = np.dtype(np.int32)  # half the disk and page cache; read back as int64
            widths = {w for s in stats for w in s["widths"]}
            sizes = _join_parts(tmp, [n + ".sizes.npy" for n in names], None, np.dtype(np.int64), count)
            offsets = np.zeros(count + 1, dtype=np.int64)
            np.cumsum(sizes, out=offsets[1:])
            _save_array(os.path.join(tmp, f"s{k}.offsets.npy"), offsets)
            _join_parts(tmp, [n + ".data.npy" for n in names], f"s{k}.data.npy", store, int(offsets[-1]), tables)
            slots.append({"kind": kind, "dtype": dtype, "stored": store.str,
                          "width": widths.pop() if len(widths) == 1 else None})
        _join_parts(tmp, [f"p{i}.lengths.npy" for i in range(len(results))], "lengths.npy",
                    np.dtype(np.int64), count)
        first_seen = merge_first_seen(r["first_seen"] for r in results)
        return {"kind": "examples", "examples": count, "specs": specs, "slots": slots, **_bad_lines_of(results),
                "first_seen": [[col, seen] for col, seen in first_seen.items()],
                "data_path": reader.reader_config["data_path"], "reader": reader.name}


def _fit_from_parts(group: "FitGroup", local: List[PackedCounts]) -> List[np.ndarray]:
    """Fit ``group``'s vocabulary from the parts' local vocabs; returns each part's table from
    its local ids to the vocabulary's ids."""
    tokens, totals, positions = _merge_part_vocabs(local)
    group.owner.fit_counts(collections.Counter(dict(zip(tokens, totals.tolist()))))
    vocab = group.owner.vocab
    assert vocab is not None and vocab.unk_id is not None
    get, unk = vocab.token_to_id.get, vocab.unk_id
    final = np.fromiter((get(t, unk) for t in tokens), dtype=np.int64, count=len(tokens))
    return [final[where] for where in positions]


def _write_vocabs(folder: str, groups: Sequence["FitGroup"]) -> None:
    """``<folder>/vocabs.json``: each group's fitted vocabulary, as its tokens in id order."""
    vocabs = {}
    for group in groups:
        assert group.owner.vocab is not None
        vocabs[group.owner.name] = list(group.owner.vocab.tokens)
    with open(os.path.join(folder, "vocabs.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(vocabs, ensure_ascii=False))  # dumps encodes in C; dump does not


def _take_vocabs(folder: str, groups: Sequence["FitGroup"]) -> None:
    """Give each group's owner the vocabulary ``_write_vocabs`` kept in the entry ``folder``."""
    with open(os.path.join(folder, "vocabs.json"), encoding="utf-8") as f:
        vocabs = json.load(f)
    for group in groups:
        group.owner.use_vocab_tokens(vocabs[group.owner.name])


class _Job(NamedTuple):
    """The parts of a build, their ``sampling_rate`` masks and line counts (for progress)."""

    parts: List[FilePart]
    masks: List[Optional[np.ndarray]]
    line_counts: List[int]


def _join_parts(folder: str, names: List[str], target: Optional[str], dtype: np.dtype, count: int,
                tables: Optional[List[np.ndarray]] = None) -> np.ndarray:
    """Concatenate the part arrays ``names`` (deleting them, and mapping each through its part's
    table when given) into ``target`` (a file written a chunk at a time), or return them joined
    when ``target`` is None."""
    if target is None:
        arrays = [np.load(os.path.join(folder, n)) for n in names]
        for n in names:
            os.remove(os.path.join(folder, n))
        return np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.zeros(0, dtype)
    path = os.path.join(folder, target)
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": (count,)}
    written = 0
    with open(path, "wb") as out:  # plain writes, not a memory map: a map's written pages count in
        np.lib.format.write_array_header_1_0(out, header)  # this process's RSS (734 MB at 1M lines)
        for i, n in enumerate(names):
            part = np.load(os.path.join(folder, n), mmap_mode="r")
            for start in range(0, len(part), JOIN_CHUNK):
                chunk = np.asarray(part[start:start + JOIN_CHUNK])
                if tables is not None:
                    chunk = tables[i][chunk]
                out.write(np.ascontiguousarray(chunk, dtype=dtype).data)
                written += len(chunk)
            del part
            os.remove(os.path.join(folder, n))
    assert written == count, (target, written, count)
    return np.zeros(0, dtype)
