"""The command line is a table of rows (issue 68): the parser, ``--help`` and the docs' command
table come from the rows, and the docs' table is the one the rows give."""
import argparse
import os

import pytest

from wenxin.cli import build_parser
from wenxin.cli_commands import COMMANDS, DOCS_EXTRA_ROWS, TABLE
from wenxin.cli_table import DOCS_BEGIN, DOCS_END, Command, CommandTable, arg, replace_docs_table

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_docs_command_table_is_the_one_the_rows_give():
    with open(os.path.join(ROOT, "docs", "commands.md"), encoding="utf-8") as f:
        text = f.read()
    table = TABLE.markdown(DOCS_EXTRA_ROWS)
    assert replace_docs_table(text, table) == text, "docs/commands.md: run python -m wenxin.cli_commands docs/commands.md"
    shown = text[text.index(DOCS_BEGIN):text.index(DOCS_END)]
    for command in COMMANDS:
        assert f"`wenxin {command.name}" in shown
    assert "dev\\|test" in shown  # a synopsis' bar does not start a new markdown column


@pytest.mark.parametrize("command", COMMANDS, ids=[c.name for c in COMMANDS])
def test_each_row_is_a_command_with_its_help_and_arguments(command, capsys):
    parser = build_parser()
    with pytest.raises(SystemExit) as stop:
        parser.parse_args([command.name, "--help"])
    assert stop.value.code == 0
    shown = capsys.readouterr().out
    assert command.help.split()[0] in shown
    for a in command.args:
        assert a.flags[0] in shown or a.flags[0] in shown.replace("\n", " ")


def test_the_top_level_help_lists_every_row(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    shown = capsys.readouterr().out
    for command in COMMANDS:
        assert command.name in shown


def test_a_command_named_twice_is_an_error_of_the_table():
    def handler(args: argparse.Namespace) -> int:
        return 0
    row = Command("twice", "a command", handler, (arg("--x", synopsis="--x X"),))
    with pytest.raises(ValueError, match="two commands named twice"):
        CommandTable([row, row])
    assert CommandTable([row]).markdown().splitlines()[-1] == "| `wenxin twice --x X` | a command |"
