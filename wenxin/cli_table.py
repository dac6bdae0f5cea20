"""The command line as a table: each ``wenxin`` command is one ``Command`` row (its name, what it
does, its arguments, its handler and what it needs before it runs), as the service's endpoints are
``Route`` rows (``wenxin.inference.routes``). The argument parser, ``--help`` and the command table
of docs/commands.md are all built from the rows, so adding a command is adding a row."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Sequence, Tuple

Handler = Callable[[argparse.Namespace], int]
Check = Callable[[argparse.Namespace], None]
DOCS_BEGIN = "<!-- the command table: python -m wenxin.cli_commands docs/commands.md writes it from the rows -->"
DOCS_END = "<!-- end of the command table -->"


@dataclass(frozen=True)
class Arg:
    """One argument: argparse's flags and settings; ``synopsis`` is how the docs' table shows it
    ("" leaves it out of the synopsis, ``--help`` lists every argument)."""

    flags: Tuple[str, ...]
    settings: Dict[str, Any]
    synopsis: str = ""


def arg(*flags: str, synopsis: str = "", **settings: Any) -> Arg:
    """``arg("--port", type=int, default=8866, help=...)``: an ``Arg`` as ``add_argument`` takes it."""
    return Arg(tuple(flags), settings, synopsis)


@dataclass(frozen=True)
class Command:
    """One ``wenxin`` command. ``help``: the line ``wenxin --help`` shows; ``doc``: the docs' table
    cell (markdown, default ``help``); ``paddle``: Paddle loads before ``handler`` runs (after the
    ``checks``, which run first so that a wrong path or task file is an error in a moment);
    ``task_file``: the ``--param_path`` task file is checked before Paddle loads."""

    name: str
    help: str
    handler: Handler
    args: Sequence[Arg] = ()
    paddle: bool = False
    task_file: bool = False
    checks: Sequence[Check] = ()
    doc: str = ""
    doc_rows: Sequence[Tuple[str, str]] = field(default_factory=tuple)  # more docs rows: (synopsis, does)

    def synopsis(self) -> str:
        shown = " ".join(a.synopsis for a in self.args if a.synopsis)
        return f"wenxin {self.name}" + (f" {shown}" if shown else "")


class CommandTable:
    """The commands by name (a name given twice is an error in the table, not a silent override)."""

    def __init__(self, commands: Sequence[Command]) -> None:
        self.commands = list(commands)
        self.by_name: Dict[str, Command] = {}
        for command in self.commands:
            if command.name in self.by_name:
                raise ValueError(f"two commands named {command.name}")
            self.by_name[command.name] = command

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """Each command as a subcommand of ``parser``."""
        sub = parser.add_subparsers(dest="command", required=True)
        for command in self.commands:
            add_arguments(sub.add_parser(command.name, help=command.help, description=command.help), command.args)

    def markdown(self, extra_rows: Sequence[Tuple[str, str]] = ()) -> str:
        """The docs' command table (``| command | does |``)."""
        rows: List[Tuple[str, str]] = []
        for command in self.commands:
            rows.append((command.synopsis(), command.doc or command.help))
            rows.extend(command.doc_rows)
        rows.extend(extra_rows)
        cell = "`{}`".format  # a synopsis' "|" (dev|test) escaped, or markdown reads a new column
        return "\n".join(["| command | does |", "|---|---|"] +
                         [f"| {cell(synopsis.replace('|', chr(92) + '|'))} | {does} |" for synopsis, does in rows])


def add_arguments(parser: argparse.ArgumentParser, args: Sequence[Arg]) -> None:
    for a in args:
        parser.add_argument(*a.flags, **a.settings)


def replace_docs_table(text: str, table: str) -> str:
    """``text`` (docs/commands.md) with the part between the markers replaced by ``table``."""
    start, end = text.index(DOCS_BEGIN) + len(DOCS_BEGIN), text.index(DOCS_END)
    return text[:start] + "\n" + table + "\n" + text[end:]
