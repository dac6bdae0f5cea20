"""Time to the first training step, and memory, as the training corpus grows: the reader that
converts in memory against the token cache, cold (built by this run) and warm (built before).

    python benchmarks/data_scale.py [--lines 200000 1000000] [--modes memory cold warm]
                                    [--what run read] [--work /tmp/wenxin-data-scale]

Corpora are generated review-like lines (about 212 bytes each): the start of one review of the
sentiment example joined to the end of another, with the first one's label, seeded. Each mode
runs the BoW example (``examples/text_classification_bow.json``, its train reader pointed at the
corpus) in its own process:

    run   ``run_trainer.py`` until it logs training step 1 (then it is stopped): seconds from
          the process start, and the peak RSS of the process and its children (the cache's
          workers) until then, sampled every 0.1 s; with ``--train-steps N``, followed to step
          N too, with its peak RSS while training. The model's memory is included: the example's
          character-trigram vocabulary grows with the corpus, and so do its embedding and Adam's
          moments. ``streamed`` runs (``streaming: true``, the vocabulary capped at 100,000 so
          that the model stays the same size) are followed to step ``--stream-steps``: their peak
          RSS while training should not grow with the corpus.
    read  the train reader alone (``build_readers``): seconds, and the peak RSS of the process
          and, separately, of its largest child process (the cache's workers; Paddle also starts
          one when it loads).

The table also gives the size of the cache's token ids (``s*.data.npy``). Needs psutil and the
example data (``python examples/prepare_sentiment_data.py``).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from typing import Any, Dict, List, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wenxin.common.process_settings import apply_process_settings  # noqa: E402

apply_process_settings()  # as wenxin's entry points do, before Paddle loads
from measure import load_note, tree_cpu_seconds  # noqa: E402

CONFIG = os.path.join(REPO, "examples", "text_classification_bow.json")
SOURCE = os.path.join(REPO, "examples", "data", "sentiment", "train.tsv")
MODES = {"memory": False, "cold": True, "warm": True, "streamed": True}
STREAM_VOCAB = 100_000  # streamed runs cap the vocabulary, so that the model's size does not grow with the corpus


def generate(lines: int, path: str, seed: int = 0) -> str:
    """``lines`` review-like lines: a review's start joined to another's end, with its label."""
    if os.path.isfile(path):
        return path
    if not os.path.isfile(SOURCE):
        subprocess.run([sys.executable, os.path.join(REPO, "examples", "prepare_sentiment_data.py")], check=True)
    with open(SOURCE, encoding="utf-8") as f:
        reviews = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    rng = random.Random(seed)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for _ in range(lines):
            (a, label), (b, _) = rng.choice(reviews), rng.choice(reviews)
            f.write(f"{a[:rng.randint(0, len(a))]}{b[rng.randint(0, len(b)):]}\t{label}\n")
    os.replace(tmp, path)
    return path


def overrides(corpus: str, mode: str, cache_dir: str) -> List[str]:
    reader = "dataset_reader.train_reader"
    result = [f"{reader}.config.data_path={corpus}", f"{reader}.config.cache={str(MODES[mode]).lower()}",
              f"{reader}.config.cache_dir={cache_dir}"]
    if mode == "streamed":
        result += [f"{reader}.config.streaming=true", f"{reader}.fields.0.max_vocab_size={STREAM_VOCAB}"]
    return result


def tree_rss(process: Any) -> int:
    import psutil
    total = 0
    for p in [process, *process.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def run_to_first_step(corpus: str, mode: str, cache_dir: str, output: str, until: int = 1) -> Tuple[float, float, float]:
    """Seconds until ``run_trainer.py`` logs step 1, the peak RSS (MB) of its process tree until
    then, and its peak RSS from step 1 until step ``until``."""
    import psutil
    args = [sys.executable, os.path.join(REPO, "run_trainer.py"), "--param_path", CONFIG,
            "--set", f"trainer.output_path={output}", "--set", "trainer.train_log_step=1"]
    for override in overrides(corpus, mode, cache_dir):
        args += ["--set", override]
    env = {**os.environ, "GLOG_minloglevel": "2", "PYTHONUNBUFFERED": "1"}
    log = open(output + ".log", "w", encoding="utf-8")
    started = time.perf_counter()
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)  # the log is on stderr
    process, peak = psutil.Process(proc.pid), 0
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    buffer, first, first_cpu, training_peak = "", 0.0, 0.0, 0
    try:
        while True:
            rss = tree_rss(process)
            if first:
                training_peak = max(training_peak, rss)
            else:
                peak = max(peak, rss)
            try:
                chunk = os.read(fd, 1 << 16).decode("utf-8", "replace")
            except BlockingIOError:
                chunk = ""
            log.write(chunk)
            buffer = (buffer + chunk)[-4096:]
            if not first and "[train] step 1:" in buffer:
                first, first_cpu = time.perf_counter() - started, tree_cpu_seconds(proc.pid)
            if first and f"[train] step {until}:" in buffer:
                return first, first_cpu, peak / 2**20, training_peak / 2**20
            if proc.poll() is not None:
                raise SystemExit(f"the run ended before step 1 (see {output}.log)")
            time.sleep(0.1)
    finally:
        proc.kill()
        proc.wait()
        log.close()


def read_only(corpus: str, mode: str, cache_dir: str) -> Dict[str, float]:
    """This process builds the train reader alone (``--read-only``)."""
    from wenxin.config.loader import load_config
    from wenxin.runner import build_readers, resolve_classes
    config = load_config(CONFIG, overrides(corpus, mode, cache_dir))
    scope, _, _ = resolve_classes(config)
    started, cpu = time.perf_counter(), time.process_time()
    reader = build_readers(config["dataset_reader"], scope, names=("train_reader",))["train_reader"]
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # parallel converters, ended by now
    return {"seconds": time.perf_counter() - started, "examples": len(reader),
            "cpu_seconds": time.process_time() - cpu + children.ru_utime + children.ru_stime,
            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "worker_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


def cached_ids_mb(cache_dir: str) -> float:
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(cache_dir, "ex-*", "s*.data.npy"))) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, nargs="+", default=[200_000, 1_000_000])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--what", nargs="+", default=["run", "read"], choices=["run", "read"])
    parser.add_argument("--work", default="/tmp/wenxin-data-scale")
    parser.add_argument("--stream-steps", type=int, default=300, help="streamed runs: peak RSS until this step")
    parser.add_argument("--train-steps", type=int, default=1,
                        help="the other runs: also the peak RSS from step 1 until this step (1: not followed)")
    parser.add_argument("--read-only", nargs=3, metavar=("CORPUS", "MODE", "CACHE_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.read_only:
        print(json.dumps(read_only(*args.read_only)))
        return
    os.makedirs(args.work, exist_ok=True)
    rows = []
    for lines in args.lines:
        corpus = generate(lines, os.path.join(args.work, f"reviews_{lines}.tsv"))
        size = os.path.getsize(corpus) / 2**20
        for what in args.what:
            cache_dir = os.path.join(args.work, f"cache_{lines}_{what}")
            for mode in args.modes:
                if mode in ("cold", "streamed"):
                    shutil.rmtree(cache_dir, ignore_errors=True)
                if what == "run":
                    seconds, cpu, rss, training = run_to_first_step(
                        corpus, mode, cache_dir, os.path.join(args.work, f"run_{lines}_{mode}"),
                        until=args.stream_steps if mode == "streamed" else args.train_steps)
                    extra = f"{training:.0f}" if mode == "streamed" or args.train_steps > 1 else ""
                else:
                    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--read-only", corpus, mode, cache_dir],
                                         check=True, cwd=REPO,
                                         capture_output=True, text=True, env={**os.environ, "GLOG_minloglevel": "2"})
                    result = json.loads(out.stdout.strip().splitlines()[-1])
                    seconds, rss, extra = result["seconds"], result["rss_mb"], f"{result['worker_rss_mb']:.0f}"
                    cpu = result["cpu_seconds"]
                ids = cached_ids_mb(cache_dir) if mode != "memory" else 0.0
                rows.append((lines, size, what, mode, seconds, cpu, rss, extra, ids))
                other = "while training" if what == "run" else "largest child"
                print(f"{lines} lines ({size:.0f} MB) {what} {mode}: {seconds:.1f} s ({cpu:.1f} CPU s), "
                      f"peak RSS {rss:.0f} MB"
                      f"{f', {other} {extra} MB' if extra else ''}"
                      f"{f', cached ids {ids:.0f} MB' if ids else ''}", flush=True)
    print(f"\n(streamed: peak RSS until step {args.stream_steps}, vocabulary capped at {STREAM_VOCAB:,}; "
          f"{f'the others: while training, until step {args.train_steps}; ' if args.train_steps > 1 else ''}"
          f"{load_note()} at the end; CPU seconds: the run's processes, or the reader's and its converters)")
    print("| lines | corpus | measured | reader | seconds | CPU seconds | peak RSS (MB) | while training / "
          "read: largest child (MB) | cached ids (MB) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for lines, size, what, mode, seconds, cpu, rss, extra, ids in rows:
        print(f"| {lines:,} | {size:.0f} MB | {'to step 1' if what == 'run' else 'reader only'} | {mode} | "
              f"{seconds:.1f} | {cpu:.1f} | {rss:.0f} | {extra or '-'} | {f'{ids:.0f}' if ids else '-'} |")


if __name__ == "__main__":
    main()
