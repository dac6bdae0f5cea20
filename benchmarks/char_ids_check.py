"""The batch paths of character fields (the C kernel, numpy) against text by text, on the examples' data.

    python examples/prepare_sentiment_data.py   # (and the other prepare_*.py the examples name)
    python benchmarks/char_ids_check.py [--batch 64] [--segmented] [task files ...]

For every example task file (default: ``examples/*.json``) whose data is prepared, it builds the
readers as a run does (vocabularies fitted on the training data), and for every field with a batch
path (``TextFieldReader.convert_column``) converts every line of every reader's data three ways:
in batches through the C kernel (where it was built; a batch it refuses goes on to numpy), in
batches through numpy alone, and text by text. It prints, per file and field, the lines compared,
the mismatches (there must be none), and the CPU time per text of each way.

``--segmented`` adds the sentiment example's reviews split into words of 1 to 3 characters by
spaces (the same split every run), as ERNIE-kit's pre-segmented data comes, through a
``WhitespaceTokenizer`` field (ERNIE-kit's ``CustomTokenizer``) with unigrams and with bigrams,
its vocabulary fitted on the training reviews: the C kernel against text by text (numpy has no
path for it).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from typing import Any, Dict, List

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("GLOG_minloglevel", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wenxin.common.process_settings import apply_process_settings  # noqa: E402

apply_process_settings()  # as wenxin's entry points do, before Paddle loads

from measure import load_note  # noqa: E402


def compare(field: Any, texts: List[str], batch: int) -> Dict[str, object]:
    """Convert ``texts`` in batches every way the field has (the C kernel where built, numpy
    where its tokenizer has that path) and text by text: the mismatched arrays, the texts the last
    batch way left to text by text, and each way's CPU µs a text."""
    batch_ids = field._batch_ids()
    assert batch_ids is not None
    field.convert_column(texts[:1])  # its tables, built once a field (not timed)
    ways = {**({"C kernel": True} if batch_ids.use_native else {}), **({"numpy": False} if batch_ids.numpy_path else {})}
    cpu_of = {way: 0.0 for way in [*ways, "text by text"]}
    mismatches, left = 0, 0
    for start in range(0, len(texts), batch):
        chunk = texts[start:start + batch]
        cpu = time.process_time()
        expected = field.collate([field.convert(text) for text in chunk])
        cpu_of["text by text"] += time.process_time() - cpu
        for way, native in ways.items():
            batch_ids.use_native = native
            cpu = time.process_time()
            arrays = field.convert_column(chunk)
            cpu_of[way] += time.process_time() - cpu
            if arrays is None:
                left += len(chunk) if way == list(ways)[-1] else 0
                continue
            mismatches += sum(not np.array_equal(arrays[key], expected[key]) for key in expected)
    batch_ids.use_native = "C kernel" in ways
    return {"texts": len(texts), "texts left": left, "mismatched arrays": mismatches,
            **{f"{way} us/text": 1e6 * cpu_of[way] / max(1, len(texts)) if way in cpu_of else float("nan")
               for way in ("C kernel", "numpy", "text by text")}}


def check(task_file: str, batch: int) -> List[Dict[str, object]]:
    from wenxin.config.task_check import resolve_task
    from wenxin.config.loader import load_config
    from wenxin.data.dataset_reader import build_readers
    from wenxin.data.field_reader import TextFieldReader
    config = load_config(task_file)
    readers = build_readers(config["dataset_reader"], resolve_task(config).scope)
    rows = []
    for name, reader in readers.items():
        lines = [columns for _, _, columns in reader.iter_rows(on_bad=lambda *_: None)]
        for col, field in enumerate(reader.fields):
            if not isinstance(field, TextFieldReader) or field._batch_ids() is None:
                continue
            rows.append({"file": os.path.relpath(task_file, REPO), "reader": name, "field": field.name,
                         **compare(field, [columns[col] for columns in lines], batch)})
    return rows


def segmented(batch: int) -> List[Dict[str, object]]:
    """The sentiment reviews split into words by spaces, through whitespace-split fields."""
    import random
    from wenxin.config.schema import validate
    from wenxin.config.task_schema import FIELD
    from wenxin.data.field_reader import TextFieldReader
    from wenxin.data.vocab import Vocab
    rng = random.Random(0)

    def words(text: str) -> str:
        cuts = [0]
        while cuts[-1] < len(text):
            cuts.append(cuts[-1] + rng.choice([1, 2, 2, 3]))
        return " ".join(text[a:b] for a, b in zip(cuts, cuts[1:]))
    texts = {}
    for split in ("train", "dev"):
        path = os.path.join(REPO, "examples", "data", "sentiment", f"{split}.tsv")
        with open(path, encoding="utf-8") as f:
            texts[split] = [words(line.rstrip("\n").split("\t")[0]) for line in f]
    rows = []
    for ngram in (1, 2):
        spec = {"name": "text_a", "data_type": "string", "reader": {"type": "TextFieldReader"}, "max_seq_len": 512,
                "tokenizer": {"type": "WhitespaceTokenizer", "lowercase": False, "ngram": ngram}}
        field = TextFieldReader(validate(spec, FIELD, "segmented"), "segmented")
        field.set_vocab(Vocab.build(field.tokenizer.tokenize(text) for text in texts["train"]))
        for split, lines in texts.items():
            rows.append({"file": f"sentiment reviews in words, ngram {ngram}", "reader": split, "field": "text_a",
                         **compare(field, lines, batch)})
    return rows


def print_row(row: Dict[str, Any]) -> None:
    times = " | ".join("-" if row[f"{way} us/text"] != row[f"{way} us/text"] else f"{row[f'{way} us/text']:.2f}"
                       for way in ("C kernel", "numpy", "text by text"))  # NaN (a way the field lacks): -
    print(f"| {row['file']} | {row['reader']} | {row['field']} | {row['texts']:,} | {row['texts left']} | "
          f"{row['mismatched arrays']} | {times} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task_files", nargs="*")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--segmented", action="store_true", help="the reviews split into words, whitespace fields")
    args = parser.parse_args()
    from wenxin.common.errors import WenxinError
    files = args.task_files or sorted(glob.glob(os.path.join(REPO, "examples", "*.json")))
    failed = False
    print(f"{load_note()} at the start")
    print("| task file | reader | field | texts | texts the last batch way left to text by text | mismatched arrays | "
          "C kernel µs/text | numpy µs/text | text by text µs/text |")
    print("|---|---|---|---|---|---|---|---|---|")
    for task_file in files:
        with open(task_file, encoding="utf-8") as f:
            paths = [r.get("config", {}).get("data_path", "") for r in json.load(f).get("dataset_reader", {}).values()]
        if not any(paths) or not all(os.path.exists(os.path.join(REPO, p)) or os.path.exists(p) for p in paths if p):
            continue  # its data is not prepared
        cwd = os.getcwd()
        os.chdir(REPO)
        try:
            try:
                checked = check(task_file, args.batch)
            except WenxinError as e:  # e.g. a file that needs another example's output first
                reason = str(e).splitlines()[0]
                print(f"| {os.path.relpath(task_file, REPO)} | not checked: {reason} | | | | | | | |")
                continue
            for row in checked:
                failed |= bool(row["mismatched arrays"])
                print_row(row)
        finally:
            os.chdir(cwd)
    for row in segmented(args.batch) if args.segmented else []:
        failed |= bool(row["mismatched arrays"])
        print_row(row)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
