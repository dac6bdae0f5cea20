"""The ``wenxin`` command (and ``run_trainer.py``): ``wenxin train --param_path task.json``."""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from wenxin.common.errors import WenxinError
from wenxin.controller.env import quiet_paddle


def _add_task_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--param_path", required=True, help="task file (JSON or YAML)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override a config value, e.g. --set trainer.epoch=3 (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wenxin", description="wenxin task framework")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_task_args(sub.add_parser("train", help="train (and evaluate) a task"))
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    quiet_paddle()
    try:
        if args.command == "train":
            from wenxin.runner import train
            train(args.param_path, args.overrides)
    except WenxinError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def train_main(argv: Optional[List[str]] = None) -> int:
    """``run_trainer.py``: the ``train`` command without the sub-command word."""
    return main(["train", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
