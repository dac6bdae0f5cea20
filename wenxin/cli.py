"""The ``wenxin`` command (and ``run_trainer.py``, ``run_infer.py``): ``wenxin train --param_path task.json``.
The commands are rows of ``wenxin.cli_commands``; this module parses, checks and runs one."""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from typing import List, Optional

from wenxin.cli_commands import EXIT_CODES_HELP, TABLE, TASK_ARGS
from wenxin.cli_handlers import check_task_file
from wenxin.cli_table import add_arguments
from wenxin.common.errors import EXIT_CONFIG, EXIT_INTERRUPTED, EXIT_TERMINATED, WenxinError, exit_status, format_error
from wenxin.common.logs import LOG_LEVEL_ENV, LOG_LEVELS, configured_level, set_console_stream
from wenxin.common.process_settings import apply_process_settings
from wenxin.hubs import allow_downloads
from wenxin.common.process import Terminated, end_on_sigterm, load_paddle, quiet_paddle, watch_thread_failures


def version_line() -> str:
    """``wenxin <version>``, with the installed Paddle build (read without importing Paddle)."""
    from wenxin import __version__
    from wenxin.common.paddle_support import installed_builds
    builds = [f"{name} {version}" for name, version in installed_builds()]
    return f"wenxin {__version__} ({', '.join(builds) or 'Paddle not installed'})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wenxin", description="wenxin task framework", epilog=EXIT_CODES_HELP)
    parser.add_argument("--version", action="version", version=version_line())
    parser.add_argument("--log-level", choices=LOG_LEVELS, type=str.upper, default=None,
                        help=f"log records from this level on (default: ${LOG_LEVEL_ENV}, else INFO); logs go to "
                             "stderr; stdout carries only a command's result")
    TABLE.add_to(parser)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    return run_command(build_parser().parse_args(argv))


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed command with wenxin's signal and thread-failure handling; returns the exit status."""
    apply_process_settings()  # before Paddle loads (wenxin.common.process_settings)
    quiet_paddle()
    if getattr(args, "log_level", None):
        os.environ[LOG_LEVEL_ENV] = args.log_level  # child processes (sweep trials, workers) too
    stream = set_console_stream("stderr")  # stdout carries only a command's result
    logging.getLogger("wenxin").setLevel(configured_level())
    saved = (threading.excepthook, signal.getsignal(signal.SIGTERM), logging.raiseExceptions)
    watch_thread_failures()
    end_on_sigterm()
    logging.raiseExceptions = False  # a log file on a full disk must not print tracebacks
    try:
        return _run(args)
    finally:  # called in-process (tests, notebooks): leave the process as it was
        allow_downloads(False)
        set_console_stream(stream)
        threading.excepthook, logging.raiseExceptions = saved[0], saved[2]
        if threading.current_thread() is threading.main_thread() and saved[1] is not None:
            signal.signal(signal.SIGTERM, saved[1])


def _run(args: argparse.Namespace) -> int:
    command = TABLE.by_name[args.command]
    try:
        if command.task_file:
            check_task_file(args)
        for check in command.checks:
            check(args)
        if command.paddle:
            load_paddle()
        return command.handler(args)
    except WenxinError as e:
        print(format_error(e), file=sys.stderr)
        return exit_status(e)
    except MemoryError as e:  # Python's, or Paddle's ResourceExhausted: one line, not a traceback
        reason = next((line.strip() for line in str(e).splitlines() if line.strip()), "MemoryError")
        print(f"error: out of memory ({reason[:200]}); lower batch_size or max_seq_len, cap the vocabulary "
              f"(max_vocab_size), or read large data with streaming: true or the token cache (cache: true)",
              file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        print("error: terminated (SIGTERM)", file=sys.stderr)
        return EXIT_TERMINATED


def _script_main(command: str, script: str, description: str, argv: Optional[List[str]]) -> int:
    parser = argparse.ArgumentParser(prog=script, description=description, epilog=EXIT_CODES_HELP)
    parser.add_argument("--version", action="version", version=version_line())
    add_arguments(parser, TASK_ARGS)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    args.command = command
    return run_command(args)


def train_main(argv: Optional[List[str]] = None) -> int:
    """``run_trainer.py``: the ``train`` command, under its own name."""
    return _script_main("train", "run_trainer.py", "train (and evaluate) a task", argv)


def infer_main(argv: Optional[List[str]] = None) -> int:
    """``run_infer.py``: the ``infer`` command, under its own name."""
    return _script_main("infer", "run_infer.py", "predict raw text files with an exported model", argv)


if __name__ == "__main__":
    sys.exit(main())
