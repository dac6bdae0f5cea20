"""The ``wenxin`` command (and ``run_trainer.py``): ``wenxin train --param_path task.json``."""
from __future__ import annotations

import argparse
import logging
import signal
import threading
import sys
from typing import List, Optional

from wenxin.common.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_PREEMPTED, EXIT_TERMINATED, WenxinError, \
    exit_status, format_error
from wenxin.common.process import Terminated, end_on_sigterm, load_paddle, quiet_paddle, watch_thread_failures


def _add_task_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--param_path", required=True, help="task file (JSON or YAML)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override a config value, e.g. --set trainer.epoch=3 (repeatable)")


EXIT_CODES_HELP = ("exit status: 0 done, 2 usage or task-file error, 3 data error, 4 checkpoint error, "
                   "75 stopped by a signal after saving a checkpoint (resume with trainer.resume=auto), "
                   "130/143 interrupted/terminated before training")


def version_line() -> str:
    """``wenxin <version>``, with the installed Paddle build (read without importing Paddle)."""
    from importlib import metadata

    from wenxin import __version__
    builds = []
    for name in ("paddlepaddle", "paddlepaddle-gpu"):
        try:
            builds.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    return f"wenxin {__version__} ({', '.join(builds) or 'Paddle not installed'})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wenxin", description="wenxin task framework", epilog=EXIT_CODES_HELP)
    parser.add_argument("--version", action="version", version=version_line())
    sub = parser.add_subparsers(dest="command", required=True)
    _add_task_args(sub.add_parser("train", help="train (and evaluate) a task"))
    exporter = sub.add_parser("export", help="export a checkpoint as a self-contained inference folder")
    _add_task_args(exporter)
    exporter.add_argument("--checkpoint", required=True, help="checkpoint folder or params file")
    exporter.add_argument("--output", default="", help="target folder (default: <checkpoint>/inference)")
    inferer = sub.add_parser("infer", help="predict raw text files with an exported model")
    _add_task_args(inferer)
    migrator = sub.add_parser("migrate", help="translate an ERNIE-kit task file into a native wenxin one")
    migrator.add_argument("param_path", help="the ERNIE-kit task file (JSON or YAML)")
    migrator.add_argument("-o", "--output", default="", help="write the native task file here (default: print it)")
    server = sub.add_parser("serve", help="serve an exported model over HTTP (JSON)")
    server.add_argument("--model_dir", required=True, help="an exported inference folder")
    server.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    server.add_argument("--port", type=int, default=8866)
    server.add_argument("--workers", type=int, default=2, help="predictors in the pool")
    server.add_argument("--max_batch", type=int, default=256, help="most inputs in one request")
    server.add_argument("--max_body_bytes", type=int, default=1 << 20, help="largest request body")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    return run_command(build_parser().parse_args(argv))


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed command with wenxin's signal and thread-failure handling; returns the exit status."""
    quiet_paddle()
    saved = (threading.excepthook, signal.getsignal(signal.SIGTERM), logging.raiseExceptions)
    watch_thread_failures()
    end_on_sigterm()
    logging.raiseExceptions = False  # a log file on a full disk must not print tracebacks
    try:
        return _run(args)
    finally:  # called in-process (tests, notebooks): leave the process as it was
        threading.excepthook, logging.raiseExceptions = saved[0], saved[2]
        if threading.current_thread() is threading.main_thread() and saved[1] is not None:
            signal.signal(signal.SIGTERM, saved[1])


def _run(args: argparse.Namespace) -> int:
    try:
        load_paddle()
        if args.command == "train":
            from wenxin.runner import train
            _, preempted = train(args.param_path, args.overrides)
            if preempted:
                return EXIT_PREEMPTED
        elif args.command == "infer":
            from wenxin.inference.batch import run_inference
            print(run_inference(args.param_path, args.overrides))
        elif args.command == "serve":
            from wenxin.inference.server import create_server
            server, _ = create_server(args.model_dir, args.host, args.port, args.workers, args.max_batch,
                                      args.max_body_bytes)
            print(f"serving {args.model_dir} on http://{args.host}:{server.server_port} "
                  f"(POST /predict, GET /health)", flush=True)
            try:
                server.serve_forever()
            except KeyboardInterrupt:
                server.server_close()
        elif args.command == "migrate":
            from wenxin.runner import migrate
            migrate(args.param_path, args.output)
        elif args.command == "export":
            from wenxin.runner import export
            print(export(args.param_path, args.checkpoint, args.output, args.overrides))
    except WenxinError as e:
        print(format_error(e), file=sys.stderr)
        return exit_status(e)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        print("error: terminated (SIGTERM)", file=sys.stderr)
        return EXIT_TERMINATED
    return EXIT_OK


def _script_main(command: str, script: str, description: str, argv: Optional[List[str]]) -> int:
    parser = argparse.ArgumentParser(prog=script, description=description, epilog=EXIT_CODES_HELP)
    parser.add_argument("--version", action="version", version=version_line())
    _add_task_args(parser)
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
