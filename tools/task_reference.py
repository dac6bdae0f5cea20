"""Render the task-file schema as Markdown tables: ``python tools/task_reference.py`` (the
task file's keys) or ``python tools/task_reference.py taggers`` (the tagger models' keys);
``--write FILE`` replaces those tables in FILE (the README) instead of printing them.

The README's "task.json reference" section is this output; a test keeps them in sync. A tool of
the repository, not of the package: it reads the schema of the tasks too, which sit above it.
"""
from __future__ import annotations

import json
import sys
from typing import List, Sequence, Tuple

from wenxin.config.schema import REQUIRED, Key, Schema
from wenxin.config.task_schema import FIELD, MODEL_BASE, OPTIMIZATION, READER, READER_CONFIG, STUDIO, TOKENIZER
from wenxin.config.trainer_schema import EARLY_STOPPING, FAST_PATHS, GROUPS, HOOK, PRETRAINED, PROFILE, TRAINER

SECTIONS = [
    ("dataset_reader.<train_reader|dev_reader|test_reader|predict_reader>", READER),
    ("<reader>.config", READER_CONFIG),
    ("<reader>.fields[i]", FIELD),
    ("<reader>.fields[i].tokenizer", TOKENIZER),
    ("model (common keys; each model class adds its own)", MODEL_BASE),
    ("model.optimization", OPTIMIZATION),
    ("trainer (the run's own keys, and one group per part of the trainer)", TRAINER),
    *((f"trainer.{name}", schema) for name, (schema, _) in GROUPS.items()),
    ("trainer.hooks[i]", HOOK),
    ("trainer.checkpoints.pre_train_model[i]", PRETRAINED),
    ("trainer.evaluation.early_stopping", EARLY_STOPPING),
    ("trainer.logging.profile", PROFILE),
    ("trainer.fast_paths", FAST_PATHS),
    ("studio (wenxin studio's launch form; training ignores it)", STUDIO),
]


def _types(key: Key) -> str:
    names = {bool: "bool", int: "int", float: "float", str: "string", dict: "object", list: "list",
             type(None): "null"}
    return " / ".join(names.get(t, t.__name__) for t in key.types)


def _default(key: Key) -> str:
    if key.default is REQUIRED:
        return "**required**"
    return f"`{json.dumps(key.default, ensure_ascii=False)}`"


def _notes(key: Key) -> str:
    notes = [key.doc] if key.doc else []
    if key.choices is not None:
        notes.append("one of " + ", ".join(f"`{json.dumps(c)}`" for c in key.choices))
    if key.minimum is not None or key.maximum is not None:
        notes.append(f"range [{key.minimum if key.minimum is not None else '-inf'}, "
                     f"{key.maximum if key.maximum is not None else 'inf'}]")
    return "; ".join(notes).replace("|", "\\|")


def render(sections: Sequence[Tuple[str, Schema]] = tuple(SECTIONS)) -> str:
    """Markdown tables of ``sections`` (title, schema); by default the task file's own keys."""
    lines: List[str] = []
    for title, schema in sections:
        lines += [f"### `{title}`", "", "| key | type | default | notes |", "|---|---|---|---|"]
        for name, key in schema.items():
            lines.append(f"| `{name}` | {_types(key)} | {_default(key)} | {_notes(key)} |")
        lines.append("")
    return "\n".join(lines)


def render_taggers() -> str:
    """The tagger models' keys (the built-in ``sequence_labeling`` task), for the README's tagging section."""
    from wenxin.common.registry import RegisterSet
    from wenxin.common.task_loader import import_task
    from wenxin.models.encoders import ENCODER_SCHEMA
    from wenxin.models.transformer import TRANSFORMER_SCHEMA
    scope = import_task("sequence_labeling")
    tagger, ernie = (RegisterSet.models.get(name, scope) for name in ("SequenceTagger", "ErnieFcSeqLabel"))
    return render([("model (SequenceTagger, BiGruCrf, BiGruSoftmax)", tagger.config_schema),
                   ("model.encoder", ENCODER_SCHEMA), ("model.encoder.transformer", TRANSFORMER_SCHEMA),
                   ("model (ErnieFcSeqLabel)", ernie.config_schema)])


def replace_tables(text: str, tables: str) -> str:
    """``text`` with the rendered tables that start at ``tables``' first heading (up to the end
    of the table under its last heading) replaced by ``tables``."""
    headings = [line for line in tables.splitlines() if line.startswith("### ")]
    start = text.index(headings[0])
    last_table = text.index("\n|", text.index(headings[-1], start))
    end = text.find("\n\n", last_table + 1)
    return text[:start] + tables.rstrip("\n") + (text[end:] if end >= 0 else "\n")


def main(args: List[str]) -> None:
    taggers = "taggers" in args
    tables = render_taggers() if taggers else render()
    if "--write" not in args:
        print(tables)
        return
    path = args[args.index("--write") + 1]
    with open(path, encoding="utf-8") as f:
        text = replace_tables(f.read(), tables)  # before the file is opened for writing
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main(sys.argv[1:])
