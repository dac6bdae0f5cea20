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

**Damage.** Entries live in a content-addressed store of sealed folders
(``wenxin.data.cache_store``): opening one checks each file's size and CRC-32, a damaged entry
is rebuilt, a killed build leaves no partial entry, and ranks starting together build once.
Conversion runs in forked workers (``wenxin.data.part_pool``), and text vocabularies are counted
per part and merged (``wenxin.data.vocab_counts``).
"""
from __future__ import annotations

import collections
import hashlib
import inspect
import itertools
import json
import logging
import os
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from wenxin.common.threads import available_cores
from wenxin.data.cache_store import FORMAT, EntryStore, cache_root, digest
from wenxin.data.cached_examples import CacheUnavailable, CachedExamples, PartWriter, join_parts, leaf_kinds, \
    save_array, spec_of
from wenxin.data.lines import FilePart
from wenxin.data.part_pool import context, failure, run_parts
from wenxin.data.reading import FirstSeen, FitGroup, RawLine, RowReader
from wenxin.data.row_formats import RowFormat
from wenxin.data.vocab_counts import PackedCounts, PartVocab, as_packed, merge_first_seen, merge_part_vocabs, \
    pack_counter, pack_counts, summed

logger = logging.getLogger(__name__)

AUTO_MIN_BYTES = 8 << 20  # cache: "auto" caches readers whose data files hold at least this much
SCAN_BLOCK = 16 << 20
PART_BYTES = (64 << 10, 16 << 20)  # the bounds of one worker task's share of a file (memory per worker)
LINE_KEYS = ("format", "separator", "has_header", "skip_bad_lines", "max_line_bytes", "sampling_rate")
INT32 = np.iinfo(np.int32)


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


# ---- building ---------------------------------------------------------------------------
class CachedRead(NamedTuple):
    """A reader's examples from the cache, its malformed lines and where each label first occurs."""

    examples: CachedExamples
    bad_lines: int
    skipped: List[Tuple[str, int, str]]
    first_seen: FirstSeen


class StreamCounts(NamedTuple):
    """A streamed reader's pass: well-formed rows of each file, malformed lines, first labels."""

    rows: List[int]
    bad_lines: int
    skipped: List[Tuple[str, int, str]]
    first_seen: FirstSeen


def counted(bad_lines: int, skipped: Iterable[Any], first_seen: Iterable[Tuple[Any, Dict[str, Any]]]
            ) -> Tuple[int, List[Tuple[str, int, str]], FirstSeen]:
    """Malformed lines and where labels first occur, from their JSON form (an entry's meta, or
    ``merge_plans``: lists where tuples were) back into a reader's."""
    return (bad_lines, [(p, n, why) for p, n, why in skipped],
            {int(col): {label: (where[0], where[1]) for label, where in seen.items()} for col, seen in first_seen})


def _outcome(meta: Dict[str, Any]) -> Tuple[int, List[Tuple[str, int, str]], FirstSeen]:
    """An entry's malformed lines and first labels, as its meta records them."""
    return counted(meta["bad_lines"], meta["skipped"], meta["first_seen"])


class _Build(NamedTuple):
    """What the (forked) workers work for: the reader, and the fit groups of this build."""

    reader: RowReader
    groups: List[FitGroup]


def _sampled(rows: Iterable[RawLine], mask: Optional[np.ndarray]) -> Iterator[RawLine]:
    if mask is None:
        yield from rows
        return
    for row, keep in zip(rows, mask):
        if keep:
            yield row


def _count_rows(part: FilePart) -> Any:
    """Worker: the number of well-formed rows of a part (for ``sampling_rate``)."""
    try:
        return sum(1 for _ in context().reader.iter_rows([part], on_bad=lambda *_: None))
    except Exception as e:  # noqa: BLE001 (reported by the parent)
        return failure(e)


def _fit_counts(task: Tuple[FilePart, Optional[np.ndarray], List[int]]) -> Any:
    """Worker: the counts of the fit groups at ``groups`` over a part."""
    part, mask, groups = task
    build: _Build = context()
    try:
        rows = list(_sampled(build.reader.iter_rows([part], on_bad=lambda *_: None), mask))
        return [build.groups[g].count(rows) for g in groups]
    except Exception as e:  # noqa: BLE001
        return failure(e)


def plan_rows(reader: RowReader, parts: Sequence[FilePart], groups: Sequence[FitGroup]) -> Dict[str, Any]:
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
    build: _Build = context()
    try:
        result = plan_rows(build.reader, [part], build.groups)
        result["counts"] = [pack_counter(counts) for counts in result["counts"]]
        return result
    except Exception as e:  # noqa: BLE001
        return failure(e)


def _chunks(rows: Iterable[Any], size: int) -> Iterator[List[Any]]:
    iterator = iter(rows)
    while True:
        chunk = list(itertools.islice(iterator, size))
        if not chunk:
            return
        yield chunk


def _convert_part(task: Tuple[int, FilePart, Optional[np.ndarray], str, List[int]]) -> Any:
    """Worker: convert a part's rows and save their slot arrays as ``<folder>/p<index>.*``. The
    fit groups at ``fused`` convert with ``PartVocab``s, returned with the result."""
    index, part, mask, folder, fused = task
    build: _Build = context()
    reader = build.reader
    reader.bad_lines, reader.skipped = 0, []
    vocabs_before = [field.vocab for field in reader.fields]
    try:
        part_vocabs: List[Tuple[FitGroup, PartVocab]] = []
        for g in fused:
            group, vocab = build.groups[g], PartVocab()
            for col in group.columns:
                # not set_vocab: nothing to bind; a PartVocab answers what converting asks of a Vocab
                reader.fields[col].vocab = vocab  # type: ignore[assignment]
            part_vocabs.append((group, vocab))
        rows = list(_sampled(reader.iter_rows([part]), mask))
        first_seen = reader.first_seen(rows)
        writer = PartWriter(reader.fields, reader.example_length)
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
        return failure(e)
    finally:
        for field, before in zip(reader.fields, vocabs_before):
            field.vocab = before  # the parent's fields, when it converts without workers


def merge_plans(results: List[Dict[str, Any]]) -> Dict[str, Any]:
    """``plan_rows`` results of parts, in file order, summed."""
    groups = len(results[0]["counts"]) if results else 0
    counts = [summed([as_packed(r["counts"][g]) for r in results]) for g in range(groups)]
    return {"counts": counts, "first_seen": merge_first_seen(r["first_seen"].items() for r in results),
            **_bad_lines_of(results)}


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

    def __init__(self, reader: RowReader, files: List[str]) -> None:
        self.reader = reader
        self.files = [os.path.abspath(f) for f in files]
        cfg = reader.reader_config
        self.store = EntryStore(cache_root(cfg["cache_dir"]), f"{reader.key_path}.config.cache_dir")
        self.processes = cfg["cache_processes"] or available_cores()
        self.key_path = f"{reader.key_path}.config"

    @classmethod
    def for_reader(cls, reader: RowReader) -> Optional["TokenCache"]:
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
        tokenizers: List[Any] = [t for t in (getattr(f, "tokenizer", None) for f in reader.fields) if t is not None]
        return {"format": FORMAT, "files": self.files, "fields": reader.config["fields"],
                "line": {k: cfg[k] for k in LINE_KEYS},
                "code": _source_digest([*reader.fields, reader.row_format, *tokenizers]),
                "tokenizer_files": [t.content_digest() for t in tokenizers if hasattr(t, "content_digest")]}

    def _name(self, kind: str, identity: Dict[str, Any], content: Any) -> str:
        """``<kind>-<data path and fields>-<everything>``: a new entry replaces those of the
        same first part (see ``_evict``)."""
        place = digest([identity["files"], identity["fields"]])[:12]
        return f"{kind}-{place}-{digest([identity, content])[:20]}"

    def _run(self, work: Callable[[Any], Any], tasks: List[Any], weights: List[int], what: str,
             groups: Sequence[FitGroup] = ()) -> List[Any]:
        """``work`` on every task in the worker processes (``wenxin.data.part_pool``), with the
        reader and the fit groups of this build as their context."""
        reader = self.reader
        return run_parts(work, tasks, self.processes, _Build(reader, list(groups)), weights,
                         f"{reader.name} {what}", bar=reader.show_progress)

    # ---- loading ----
    def load(self, to_fit: List[FitGroup]) -> "CachedRead":
        """Fit the groups' vocabularies from the cache and return the reader's examples from it,
        building what is missing."""
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
            reader.share_fitted_vocabs()
            name = self._name("ex", identity, [data, self._vocab_digests()])
            found = self.store.entry(name, lambda tmp: self._build_examples(tmp, job))
        folder, meta, built = found
        size = sum(size for size, _ in meta["files"].values())
        logger.info("%s: token cache %s %s (%d examples, %.1f MB) in %.1f s", reader.name,
                    "built" if built else "opened", folder, meta["examples"], size / 2**20,
                    time.perf_counter() - started)
        return CachedRead(CachedExamples(folder, meta), *_outcome(meta))

    def _vocab_digests(self) -> Dict[str, Optional[str]]:
        return {f.name: digest(f.vocab.tokens) if f.vocab is not None else None for f in self.reader.fields}

    def stream_plan(self, groups: List[FitGroup]) -> "StreamCounts":
        """For a streamed reader: each data file's well-formed rows and the malformed ones, and
        where each label first occurs; fits the groups' vocabularies. One parallel pass, kept as an
        entry of the cache (its vocabularies and counts only) so that the next run skips it."""
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

        folder, meta, built = self.store.entry(name, build)
        _take_vocabs(folder, groups)
        logger.info("%s: streamed from %d files (%d rows); row counts and vocabularies %s %s in %.1f s",
                    reader.name, len(self.files), sum(meta["rows"]), "built" if built else "opened", folder,
                    time.perf_counter() - started)
        return StreamCounts(meta["rows"], *_outcome(meta))

    def _sampling_masks(self, parts: List[FilePart], line_counts: List[int]) -> List[Optional[np.ndarray]]:
        """``sampling_rate``'s choice of rows, as the in-memory reader makes it (seeded by the
        number of well-formed rows), cut into the parts' shares."""
        counts = self._run(_count_rows, parts, line_counts, "counting")
        total = int(sum(counts))
        keep = np.random.RandomState(total).rand(total) < self.reader.reader_config["sampling_rate"]
        bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return [keep[bounds[k]:bounds[k + 1]] for k in range(len(parts))]

    def _fit(self, groups: List[FitGroup], identity: Dict[str, Any], data: Any,
             job: "_Job") -> Optional[Tuple[str, Dict[str, Any], bool]]:
        """Give the groups their fitted vocabularies from the fit entry of this data and config.
        Without one, fit them, and build the examples entry in the same pass (text vocabularies
        are fitted from the part-local ids of the conversion, see ``PartVocab``); returns that
        entry then, else None."""
        name = self._name("fit", identity, [data, [[g.owner.name, g.columns] for g in groups]])
        meta = self.store.lookup(name)
        if meta is None:
            with self.store.lock(name):
                meta = self.store.checked(name)
                if meta is None:
                    return self._fit_and_convert(name, groups, identity, data, job)
        _take_vocabs(self.store.folder(name), groups)
        return None

    def _fit_and_convert(self, fit_name: str, groups: List[FitGroup], identity: Dict[str, Any], data: Any,
                         job: "_Job") -> Tuple[str, Dict[str, Any], bool]:
        reader = self.reader
        fused = [g for g, group in enumerate(groups) if group.fits_while_converting(reader.fields)]
        counted = [g for g in range(len(groups)) if g not in fused]
        if counted:  # label maps and the like: a quick pass, as conversion needs them
            tasks = [(part, mask, counted) for part, mask in zip(job.parts, job.masks)]
            results = self._run(_fit_counts, tasks, job.line_counts, "fitting vocabularies", groups)
            for position, g in enumerate(counted):
                groups[g].owner.fit_counts(summed([as_packed(counts[position]) for counts in results]))
        with self.store.scratch("ex-of-" + fit_name) as examples_tmp:
            meta = self._build_examples(examples_tmp, job, groups, fused)
            with self.store.scratch(fit_name) as fit_tmp:
                _write_vocabs(fit_tmp, groups)
                self.store.publish(fit_tmp, fit_name, {"kind": "fit"})
            reader.share_fitted_vocabs()
            name = self._name("ex", identity, [data, self._vocab_digests()])
            with self.store.lock(name):
                existing = self.store.checked(name)
                if existing is not None:
                    return self.store.folder(name), existing, False
                folder, meta = self.store.publish(examples_tmp, name, meta)
        return folder, meta, True

    def _build_examples(self, tmp: str, job: "_Job", groups: Sequence[FitGroup] = (),
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
                join_parts(tmp, [n + ".npy" for n in names], f"s{k}.npy", np.dtype(dtype), count)
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
            sizes = join_parts(tmp, [n + ".sizes.npy" for n in names], None, np.dtype(np.int64), count)
            offsets = np.zeros(count + 1, dtype=np.int64)
            np.cumsum(sizes, out=offsets[1:])
            save_array(os.path.join(tmp, f"s{k}.offsets.npy"), offsets)
            join_parts(tmp, [n + ".data.npy" for n in names], f"s{k}.data.npy", store, int(offsets[-1]), tables)
            slots.append({"kind": kind, "dtype": dtype, "stored": store.str,
                          "width": widths.pop() if len(widths) == 1 else None})
        join_parts(tmp, [f"p{i}.lengths.npy" for i in range(len(results))], "lengths.npy",
                    np.dtype(np.int64), count)
        first_seen = merge_first_seen(r["first_seen"] for r in results)
        return {"kind": "examples", "examples": count, "specs": specs, "slots": slots, **_bad_lines_of(results),
                "first_seen": [[col, seen] for col, seen in first_seen.items()],
                "data_path": reader.reader_config["data_path"], "reader": reader.name}


def _fit_from_parts(group: FitGroup, local: List[PackedCounts]) -> List[np.ndarray]:
    """Fit ``group``'s vocabulary from the parts' local vocabs; returns each part's table from
    its local ids to the vocabulary's ids."""
    tokens, totals, positions = merge_part_vocabs(local)
    group.owner.fit_counts(collections.Counter(dict(zip(tokens, totals.tolist()))))
    vocab = group.owner.vocab
    assert vocab is not None and vocab.unk_id is not None
    get, unk = vocab.token_to_id.get, vocab.unk_id
    final = np.fromiter((get(t, unk) for t in tokens), dtype=np.int64, count=len(tokens))
    return [final[where] for where in positions]


def _write_vocabs(folder: str, groups: Sequence[FitGroup]) -> None:
    """``<folder>/vocabs.json``: each group's fitted vocabulary, as its tokens in id order."""
    vocabs = {}
    for group in groups:
        assert group.owner.vocab is not None
        vocabs[group.owner.name] = list(group.owner.vocab.tokens)
    with open(os.path.join(folder, "vocabs.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(vocabs, ensure_ascii=False))  # dumps encodes in C; dump does not


def _take_vocabs(folder: str, groups: Sequence[FitGroup]) -> None:
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
