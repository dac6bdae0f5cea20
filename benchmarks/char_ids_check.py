"""The numpy batch path of character fields against text-by-text conversion, on the examples' data.

    python examples/prepare_sentiment_data.py   # (and the other prepare_*.py the examples name)
    python benchmarks/char_ids_check.py [--batch 64] [task files ...]

For every example task file (default: ``examples/*.json``) whose data is prepared, it builds the
readers as a run does (vocabularies fitted on the training data), and for every field with a batch
path (``TextFieldReader.convert_column``) converts every line of every reader's data both ways, in
batches. It prints, per file and field, the lines compared, the mismatches (there must be none),
and the CPU time per text of each way.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from typing import Dict, List

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("GLOG_minloglevel", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from measure import load_note  # noqa: E402


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
            texts = [columns[col] for columns in lines]
            mismatches, batched_cpu, each_cpu, skipped = 0, 0.0, 0.0, 0
            for start in range(0, len(texts), batch):
                chunk = texts[start:start + batch]
                cpu = time.process_time()
                arrays = field.convert_column(chunk)
                batched_cpu += time.process_time() - cpu
                cpu = time.process_time()
                expected = field.collate([field.convert(text) for text in chunk])
                each_cpu += time.process_time() - cpu
                if arrays is None:
                    skipped += len(chunk)
                    continue
                mismatches += sum(not np.array_equal(arrays[key], expected[key]) for key in expected)
            rows.append({"file": os.path.relpath(task_file, REPO), "reader": name, "field": field.name,
                         "texts": len(texts), "texts left": skipped, "mismatched arrays": mismatches,
                         "batch us/text": 1e6 * batched_cpu / max(1, len(texts)),
                         "text by text us/text": 1e6 * each_cpu / max(1, len(texts))})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task_files", nargs="*")
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    from wenxin.common.errors import WenxinError
    files = args.task_files or sorted(glob.glob(os.path.join(REPO, "examples", "*.json")))
    failed = False
    print(f"{load_note()} at the start")
    print("| task file | reader | field | texts | texts left to text by text | mismatched arrays | batch µs/text | "
          "text by text µs/text |")
    print("|---|---|---|---|---|---|---|---|")
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
                print(f"| {os.path.relpath(task_file, REPO)} | not checked: {reason} | | | | | | |")
                continue
            for row in checked:
                failed |= bool(row["mismatched arrays"])
                print(f"| {row['file']} | {row['reader']} | {row['field']} | {row['texts']:,} | "
                      f"{row['texts left']} | {row['mismatched arrays']} | {row['batch us/text']:.2f} | "
                      f"{row['text by text us/text']:.2f} |")
        finally:
            os.chdir(cwd)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
