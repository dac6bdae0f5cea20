"""K-fold cross-validation data for sweeps (``folds: K`` in a sweep file).

The training data's lines (a format's records, where one may span lines) are split once, with a
seeded shuffle, into K parts of nearly equal size, written under ``<sweep output>/folds``:

- ``part_<k><ext>``: the lines of part k, in their original order (with the header line first
  when the train reader has ``has_header``);
- ``train_<k>/``: fold k's training data, a folder of links to every part but part k;
- ``folds.json``: what the split was made from (each file's path, size and SHA-256, K, the seed,
  the header setting) and the parts' line counts.

Fold k trains on ``train_<k>`` and evaluates on ``part_<k>``. The split is written once
(in a temporary folder renamed into place), so a restarted sweep uses the same folds. When the
data changed since, it is an error rather than folds of old data.

Lines are split as bytes: a malformed line goes to its part unchanged, and the fold's reader
reports it (by the part's ``file:line``) as its ``skip_bad_lines`` says.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from wenxin.common.errors import ConfigError, DataError
from wenxin.common.files import file_sha256
from wenxin.data.lines import list_data_files

FOLDS_FILE = "folds.json"


class FoldData(NamedTuple):
    """Where fold k's training data (``train[k]``, a folder) and held-out data (``dev[k]``) are."""

    train: List[str]
    dev: List[str]


def _source(files: List[str], folds: int, seed: int, has_header: bool, data_format: str) -> Dict[str, Any]:
    source = {"files": [[os.path.abspath(p), os.path.getsize(p), file_sha256(p)] for p in files],
              "folds": folds, "seed": seed, "has_header": has_header}
    if data_format != "tsv":  # (folds split by earlier versions, of TSV only, have no format)
        source["format"] = data_format
    return source


def _layout(folder: str, folds: int, ext: str) -> FoldData:
    return FoldData([os.path.join(folder, f"train_{k}") for k in range(folds)],
                    [os.path.join(folder, f"part_{k}{ext}") for k in range(folds)])


def split_folds(data_path: str, key_path: str, has_header: bool, folds: int, seed: int, folder: str,
                data_format: str = "tsv",
                records: Optional[Callable[[List[bytes]], List[bytes]]] = None) -> FoldData:
    """The K folds of the training data at ``data_path`` (a file or a folder of files, as the
    reader takes it; ``key_path`` names its config key), written to ``folder`` unless they
    already are, from the same data. ``records`` joins the lines of a file into the records of
    ``data_format`` where one may span lines (``RowFormat.group_lines``)."""
    files = list_data_files(data_path, key_path)
    ext = os.path.splitext(files[0])[1]
    source = _source(files, folds, seed, has_header, data_format)
    written = os.path.join(folder, FOLDS_FILE)
    if os.path.isfile(written):
        before = _read_split(written)
        if before.get("source") != source:
            raise ConfigError(f"{folder}: the folds were split from other training data or settings than "
                              f"{key_path} ({data_path}) has now; move the sweep's output away to start afresh")
        layout = _layout(folder, folds, ext)
        _check_split(folder, layout, before)
        return layout
    if os.path.exists(folder):
        raise ConfigError(f"{folder}: exists but is not a folds split (no {FOLDS_FILE}); move it away")
    header, lines = _records_of(files, has_header, records)
    if len(lines) < folds:
        raise ConfigError(f"folds: {folds} folds need at least {folds} lines of training data; {key_path} "
                          f"({data_path}) has {len(lines)}")
    order = np.random.RandomState(seed).permutation(len(lines))  # line indices, shuffled
    for stale in glob.glob(f"{folder}.tmp-*"):  # a killed sweep's unfinished split
        shutil.rmtree(stale, ignore_errors=True)
    tmp = f"{folder}.tmp-{os.getpid()}"
    os.makedirs(tmp)
    layout = _layout(tmp, folds, ext)
    sizes = [_write_part(layout.dev[k], np.sort(order[k::folds]), lines, header if has_header else None)
             for k in range(folds)]  # part k: every K-th shuffled line, in file order
    for k in range(folds):
        os.makedirs(layout.train[k])
        for j in range(folds):
            if j != k:  # relative links, so the sweep folder can be moved
                name = os.path.basename(layout.dev[j])
                os.symlink(os.path.join("..", name), os.path.join(layout.train[k], name))
    parts = {os.path.basename(path): [os.path.getsize(path), file_sha256(path)] for path in layout.dev}
    with open(os.path.join(tmp, FOLDS_FILE), "w", encoding="utf-8") as f:
        json.dump({"source": source, "lines": sizes, "parts": parts}, f, indent=2)
    os.replace(tmp, folder)
    return _layout(folder, folds, ext)


def _records_of(files: List[str], has_header: bool, records: Optional[Callable[[List[bytes]], List[bytes]]]
                ) -> Tuple[bytes, List[bytes]]:
    """The header (the first file's, or empty) and every non-blank record of ``files``."""
    header = b""
    lines: List[bytes] = []
    for path in files:
        with open(path, "rb") as f:
            content = f.read().split(b"\n")
        if records is not None:
            content = records(content)
        if has_header and content:
            header = header or content[0]
            content = content[1:]
        lines += [line for line in content if line.strip()]
    return header, lines


def _write_part(path: str, chosen: np.ndarray, lines: List[bytes], header: Optional[bytes]) -> int:
    """Write the ``chosen`` lines (after ``header``, where there is one); returns their count."""
    with open(path, "wb") as f:
        if header is not None:
            f.write(header + b"\n")
        f.writelines(lines[i] + b"\n" for i in chosen)
    return len(chosen)


def _read_split(path: str) -> Dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            split = json.load(f)
    except (OSError, ValueError, RecursionError) as e:
        raise DataError(f"{path}: unreadable ({type(e).__name__}: {e}); move the sweep's folds away to split "
                        f"afresh") from None
    if not isinstance(split, dict) or not isinstance(split.get("parts"), dict):
        raise DataError(f"{path}: not a folds record of this wenxin (no parts table); move the sweep's folds away "
                        f"to split afresh")
    return split


def _check_split(folder: str, layout: FoldData, split: Dict[str, Any]) -> None:
    """Each part is the one written (size and SHA-256 as ``folds.json`` records them) and each
    fold's training folder links exactly to the other parts, so a changed label or a held-out
    part linked into training is an error, not a different cross-validation score."""
    where = os.path.join(folder, FOLDS_FILE)
    names = [os.path.basename(path) for path in layout.dev]
    if sorted(split["parts"]) != sorted(names):
        raise DataError(f"{where}: records the parts {sorted(split['parts'])}, not {names}")
    for path in layout.dev:
        recorded = split["parts"][os.path.basename(path)]
        if not os.path.isfile(path) or os.path.islink(path):
            raise DataError(f"{path}: a part of the folds split is missing or replaced by a link")
        if [os.path.getsize(path), file_sha256(path)] != recorded:
            raise DataError(f"{path}: changed since the folds were split (its SHA-256 differs from {where})")
    for k, train in enumerate(layout.train):
        expected = {name: os.path.join("..", name) for j, name in enumerate(names) if j != k}
        try:
            found = {name: os.readlink(os.path.join(train, name)) for name in os.listdir(train)}
        except OSError as e:
            raise DataError(f"{train}: fold {k}'s training data is not the links the split made ({e.strerror or e})"
                            ) from None
        if found != expected:
            raise DataError(f"{train}: fold {k}'s training data links to {sorted(found.values())}, not to the other "
                            f"parts {sorted(expected.values())}")
