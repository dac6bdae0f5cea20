"""Hugging Face ``datasets`` data (``config.format: hf_dataset``): the rows of one split of

- a folder written by ``Dataset.save_to_disk`` or ``DatasetDict.save_to_disk``;
- a folder or file that ``datasets.load_dataset`` reads (CSV, JSON, Parquet, ...: it converts
  them into its cache once);
- a dataset named by ``data_path`` (``imdb``, ``org/name``) in the ``datasets`` cache.

Offline by default: a name is looked up in the cache only, as with ``HF_HUB_OFFLINE=1``;
``config.download: true`` lets ``datasets`` fetch what its cache lacks.

The reader reads the split's Arrow files, memory-mapped through pyarrow as ``datasets`` itself
reads them, so the token cache hashes them and cuts them into parts like text files: a part is a
range of rows, and ``file:N`` in a message names the Arrow file and its row N (from 1). Each field
reads the column its ``column`` names (its own name by default), as ``jsonl`` reads keys: a
string as is, a number in decimal, a list joined by the field's ``tokenizer.split_char``. A
``ClassLabel`` column (or a list of them, a tagger's tags) gives its label names, so label maps,
exports and predictions carry the dataset's names.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from wenxin.common.errors import ConfigError, DataError
from wenxin.hubs.model_names import is_model_name
from wenxin.common.registry import RegisterSet
from wenxin.data.lines import FilePart
from wenxin.data.row_formats import FormattedRow, RowFormat, as_text

READ_ROWS = 4096  # rows converted to Python values at a time
SAVED_MARKERS = ("state.json", "dataset_dict.json")  # what save_to_disk writes in its folder


def _datasets() -> Any:
    try:
        import datasets
    except ImportError:
        raise ConfigError("format hf_dataset reads data with the Hugging Face datasets package, which is not "
                          "installed: pip install \"wenxin[datasets]\" (or pip install datasets)") from None
    return datasets


@contextlib.contextmanager
def _offline(offline: bool) -> Iterator[None]:
    """``datasets`` kept to its cache while loading (it reads ``HF_HUB_OFFLINE`` once, at import,
    into module constants: those are what it consults)."""
    if not offline:
        yield
        return
    import huggingface_hub.constants as hub
    import datasets.config as config
    saved = [(module, name, getattr(module, name)) for module, name in
             ((config, "HF_HUB_OFFLINE"), (config, "HF_DATASETS_OFFLINE"), (hub, "HF_HUB_OFFLINE"))
             if hasattr(module, name)]
    for module, name, _ in saved:
        setattr(module, name, True)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


def load_split(data_path: str, split: str, download: bool, key_path: str) -> Any:
    """The ``datasets.Dataset`` of one split (see the module docstring); ``key_path`` is the
    reader's key, for errors."""
    datasets = _datasets()
    where = f"{key_path}.config.data_path: {data_path}"
    saved = os.path.isdir(data_path) and any(os.path.isfile(os.path.join(data_path, m)) for m in SAVED_MARKERS)
    try:
        if saved:
            loaded = datasets.load_from_disk(data_path)
        else:  # every split (the split is chosen below, for one clear error)
            with _offline(not download):
                loaded = datasets.load_dataset(data_path)
    except (ConnectionError, FileNotFoundError) as e:
        hint = "" if download or os.path.exists(data_path) else \
            f" (no such folder, and not in the datasets cache; set {key_path}.config.download: true to let " \
            f"datasets fetch it)"
        raise DataError(f"{where}: cannot load the dataset: {e}{hint}") from None
    except Exception as e:  # noqa: BLE001 (datasets and pyarrow raise many kinds for a damaged folder)
        raise DataError(f"{where}: cannot load the dataset ({type(e).__name__}: {e})") from None
    if isinstance(loaded, datasets.DatasetDict):
        splits = ", ".join(map(repr, loaded))
        if split:
            if split not in loaded:
                hint = "; a slice of a split is not read: name the split, and use sampling_rate to train on part " \
                       "of it" if "[" in split else ""
                raise DataError(f"{key_path}.config.split: {split!r}: {data_path} has the splits {splits}{hint}")
            loaded = loaded[split]
        elif len(loaded) == 1:
            loaded = next(iter(loaded.values()))
        else:
            raise DataError(f"{key_path}.config.split: {data_path} has the splits {splits}; name the one to read")
    elif saved and split:
        raise DataError(f"{key_path}.config.split: {split!r}, but {data_path} holds one dataset (no splits); "
                        f"leave split empty")
    return loaded


def split_files(dataset: Any, data_path: str, key_path: str) -> List[str]:
    """The Arrow files holding exactly the rows of ``dataset``, in order."""
    files = [entry["filename"] for entry in dataset.cache_files]
    if not files:
        raise DataError(f"{key_path}.config.data_path: {data_path}: the dataset is held in memory, not in Arrow "
                        f"files; save it with save_to_disk and name that folder")
    rows = sum(open_arrow(path).num_rows for path in files)
    if rows != len(dataset):  # an indices mapping over the files (not what save_to_disk or a cache holds)
        raise DataError(f"{key_path}.config.data_path: {data_path}: the dataset holds {len(dataset)} of the {rows} "
                        f"rows of its files; save it with save_to_disk and name that folder")
    return files


# (path, inode, mtime, size) -> the file's pyarrow Table, memory-mapped: each process opens a
# file once, and a file saved anew at the same path (a notebook's second save_to_disk) is opened anew
_tables: Dict[Tuple[str, int, int, int], Any] = {}


def open_arrow(path: str) -> Any:
    """The table of an Arrow file that ``datasets`` wrote (the IPC stream format), memory-mapped."""
    import pyarrow as pa
    try:
        stat = os.stat(path)
        key = (path, stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if key not in _tables:
            _tables[key] = pa.ipc.open_stream(pa.memory_map(path)).read_all()
    except (OSError, pa.ArrowException) as e:
        raise DataError(f"{path}: not a readable Arrow file of a datasets dataset ({e})") from None
    return _tables[key]


def _label_names(feature: Any) -> Optional[List[str]]:
    """The names of a ``ClassLabel`` feature, or of a list feature of them; else None."""
    datasets = _datasets()
    inner = feature[0] if isinstance(feature, list) and len(feature) == 1 else getattr(feature, "feature", feature)
    return list(inner.names) if isinstance(inner, datasets.ClassLabel) else None


def _named(value: Any, names: List[str]) -> Tuple[Any, Optional[str]]:
    """A ``ClassLabel`` value (or a list of them) as its label name(s)."""
    def name(label: Any) -> str:
        if isinstance(label, int) and 0 <= label < len(names):
            return names[label]
        raise ValueError(f"label {label!r} is not one of the {len(names)} names of its ClassLabel "
                         f"(-1 marks a row without a label)")
    try:
        return ([name(v) for v in value] if isinstance(value, list) else name(value)), None
    except ValueError as e:
        return None, str(e)


@RegisterSet.data_formats.register("hf_dataset")
class HfDatasetFormat(RowFormat):
    """One split of a Hugging Face ``datasets`` dataset (see the module docstring)."""

    line_based = False

    def __init__(self, config: Dict[str, Any], fields: Sequence[Any], key_path: str) -> None:
        super().__init__(config, fields, key_path)
        if config.get("has_header"):
            raise ConfigError(f"{key_path}.config.has_header: a dataset's columns have names, not a header line "
                              f"(format: hf_dataset); set has_header: false")
        self.keys = [self.source_key(f) for f in self.fields]
        self.joiners = [((f.config.get("tokenizer") or {}).get("split_char") or " ") for f in self.fields]
        self._files: Optional[List[str]] = None
        self._labels: Dict[str, List[Optional[List[str]]]] = {}  # file -> each key's label names

    @classmethod
    def source_problem(cls, config: Dict[str, Any], key_path: str) -> Optional[str]:
        data_path = config.get("data_path") or ""
        if not data_path or os.path.exists(data_path) or is_model_name(data_path):  # a Hub name, as models have
            return None
        return (f"{key_path}.config.data_path: not found: {data_path} (format hf_dataset: a folder, a file, or a "
                f"dataset name such as org/name)")

    def data_files(self) -> List[str]:
        """The Arrow files of the configured split (resolved once)."""
        if self._files is None:
            config = self.config
            dataset = load_split(config["data_path"], config.get("split", ""), bool(config.get("download")),
                                 self.key_path)
            self._files = split_files(dataset, config["data_path"], self.key_path)
        return self._files

    def part_starts(self, path: str, part_bytes: int) -> List[Tuple[int, int]]:
        """Parts of about ``part_bytes`` as ranges of rows (a row's number is its line number)."""
        rows = open_arrow(path).num_rows
        per_part = max(1, rows * part_bytes // max(1, os.path.getsize(path)))
        return [(start, start + 1) for start in range(0, rows, per_part)] + [(rows, rows + 1)]

    def rows(self, part: FilePart) -> Iterator[FormattedRow]:
        table = open_arrow(part.path)
        labels = self._label_names_of(part.path, table)
        end = table.num_rows if part.end is None else part.end
        for start in range(part.start, end, READ_ROWS):
            count = min(READ_ROWS, end - start)
            columns = [table.column(key).slice(start, count).to_pylist() for key in self.keys]
            for i, values in enumerate(zip(*columns)):
                texts, problem = self._texts(values, labels)
                yield start + i + 1, texts, problem

    def _texts(self, values: Sequence[Any], labels: List[Optional[List[str]]]) -> Tuple[Optional[List[str]],
                                                                                         Optional[str]]:
        texts = []
        for key, value, names, joiner in zip(self.keys, values, labels, self.joiners):
            problem = None
            if names is not None:
                value, problem = _named(value, names)
            if problem is None:
                text, problem = as_text(value, joiner)
            if problem is not None:
                return None, f"column {key!r}: {problem}"
            texts.append(text)
        return texts, None

    def _label_names_of(self, path: str, table: Any) -> List[Optional[List[str]]]:
        """For each field's column of the file: its ClassLabel names, or None. A column the file
        lacks is an error naming the field."""
        if path not in self._labels:
            features = _datasets().Features.from_arrow_schema(table.schema)
            for field, key in zip(self.fields, self.keys):
                if key not in features:
                    raise DataError(f"{path}: the dataset has no column {key!r} (field '{field.name}'"
                                    f"{'' if key == field.name else ', its column'}); its columns are "
                                    f"{', '.join(map(repr, features))}")
            self._labels[path] = [_label_names(features[key]) for key in self.keys]
        return self._labels[path]
