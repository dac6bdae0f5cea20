"""An export's ONNX step program loaded as it is against its copy with the weights packed on disk
(``wenxin.inference.onnx_prepacked``, issue 69): resident and anonymous memory after loading and
after decoding, load time, CPU-ms a token at one stream and a step's CPU a token at 16 streams, and
whether both give the same tokens and logits.

Each setting (``$WENXIN_ONNX_PREPACKED`` ``off`` and ``on``) loads the export's program through
the Predictor in a fresh process; rounds alternate which goes first. The packed copy is made once
before the rounds (into ``--cache``, timed and reported apart)::

    python benchmarks/onnx_prepacked.py EXPORT --backend onnxruntime-int8 --rounds 2
    python benchmarks/onnx_prepacked.py EXPORT --backend onnxruntime --rounds 2

``--least_memory`` asks instead how little memory each needs: the same worker in a memory cgroup
(v1 or v2; root, a writable ``/sys/fs/cgroup``) whose limit is halved towards the smallest at
which it loads and decodes to the end with the tokens it gives unlimited and within twice its
unlimited time (more: it reads its pages from disk again and again), within ``--precision`` MiB;
the export's and the cache's files are put out of the system's page cache before each try (a page
another process read in is charged to that process's cgroup). Resident memory counts the pages of
a mapped file the process has read, which the system takes back under pressure; a cgroup's limit
is what a container or a machine of that size allows::

    python benchmarks/onnx_prepacked.py EXPORT --backend onnxruntime --least_memory --new 8
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

import numpy as np

from against_llama_cpp import advance_in_place, greedy_timed, prompt_ids, streams_timed
from measure import load_note


def memory_gib() -> Dict[str, float]:
    """This process's resident memory, and of it the anonymous part (the heap), in GiB (Linux)."""
    found = {}
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            key = line.split(":")[0]
            if key in ("VmRSS", "RssAnon"):
                found[{"VmRSS": "rss", "RssAnon": "anon"}[key]] = int(line.split()[1]) / 2**20
    return found


def worker(export: str, backend: str, prompt: int, new: int, streams: int) -> Dict[str, Any]:
    """Load, decode one stream greedily, then ``streams`` together: what it took and held."""
    from wenxin.inference.predictor import Predictor
    from wenxin.models.kv_slots import KVSlots
    wall = time.perf_counter()
    predictor = Predictor(export, num_threads=1, backend=backend)
    result: Dict[str, Any] = {"load_s": time.perf_counter() - wall, "loaded": memory_gib()}
    ids = prompt_ids(prompt)
    state: Dict[str, Any] = {}

    def prefill() -> np.ndarray:
        out = predictor.run_step("prefill", {"ids": np.asarray([ids], dtype=np.int64)})
        state["slots"] = KVSlots(predictor.in_place_cache)
        state["slots"].append(out["cache"])
        return np.asarray(out["logits"])[0]

    greedy_timed(prefill, lambda token: advance_in_place(predictor, state["slots"], [token])[0], new)  # warm-up
    one = greedy_timed(prefill, lambda token: advance_in_place(predictor, state["slots"], [token])[0], new)
    slots, first = KVSlots(predictor.in_place_cache), []
    for seed in range(streams):
        out = predictor.run_step("prefill", {"ids": np.asarray([prompt_ids(prompt // 2, seed + 1)], dtype=np.int64)})
        slots.append(out["cache"])
        first.append(int(np.asarray(out["logits"])[0].argmax()))
    many = streams_timed(lambda tokens: list(advance_in_place(predictor, slots, tokens)), first, new)
    result.update(decoded=memory_gib(), one_ms=one["decode_cpu"] / (new - 1) * 1e3,
                  prompt_ms=one["prompt_cpu"] / prompt * 1e3, streams_ms=many["step_cpu"] / streams * 1e3,
                  tokens=one["tokens"], first_logits=one["first_logits"][:64], peak_gib=peak_gib())
    return result


def peak_gib() -> float:
    """This process's peak resident memory (VmHWM), GiB."""
    with open("/proc/self/status", encoding="utf-8") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 2**20


def run(args: argparse.Namespace, setting: str, limit_mib: int = 0, timeout: float = 0) -> Dict[str, Any]:
    """The worker in a fresh process; with ``limit_mib``, in a memory cgroup of that size, and
    ``{"killed": ...}`` where it does not finish (within ``timeout`` seconds, where given)."""
    env = {**os.environ, "WENXIN_ONNX_PREPACKED": setting, "WENXIN_CACHE": args.cache, "GLOG_minloglevel": "2",
           "OMP_NUM_THREADS": "1"}
    cgroup = memory_cgroup(limit_mib) if limit_mib else ""
    if cgroup:  # pages another process read in are charged to its cgroup, not this one's: out of the cache first
        for folder in (args.export, args.cache):
            uncached(folder)
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, __file__, "--worker", args.export, "--backend", args.backend,
                               "--prompt", str(args.prompt), "--new", str(args.new), "--streams", str(args.streams)],
                              capture_output=True, text=True, env=env, check=False, timeout=timeout or None,
                              preexec_fn=(lambda: join_cgroup(cgroup)) if cgroup else None)
    except subprocess.TimeoutExpired:
        return {"killed": "too slow"}
    if done.returncode != 0:
        if limit_mib:
            return {"killed": done.returncode}
        raise SystemExit(done.stderr[-3000:])
    result: Dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall_s"] = time.perf_counter() - started
    return result


CGROUP = "wenxin-benchmark"


def memory_cgroup(limit_mib: int) -> str:
    """A memory cgroup limited to ``limit_mib`` (made or reused): its folder."""
    controllers = "/sys/fs/cgroup/cgroup.controllers"
    if os.path.isfile(controllers):  # v2
        folder, limit = os.path.join("/sys/fs/cgroup", CGROUP), "memory.max"
    else:  # v1
        folder, limit = os.path.join("/sys/fs/cgroup/memory", CGROUP), "memory.limit_in_bytes"
    os.makedirs(folder, exist_ok=True)
    for name in ("memory.memsw.limit_in_bytes", "memory.swap.max"):  # no swap to spill into, then the limit
        if os.path.exists(os.path.join(folder, name)):
            with open(os.path.join(folder, name), "w") as f:
                f.write("-1" if name.startswith("memory.memsw") else "0")
    with open(os.path.join(folder, limit), "w") as f:
        f.write(str(limit_mib << 20))
    return folder


def uncached(folder: str) -> None:
    """The system's cached pages of the files under ``folder`` given back (clean pages: nothing lost)."""
    for root, _, names in os.walk(folder):
        for name in names:
            with open(os.path.join(root, name), "rb") as f:
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def join_cgroup(folder: str) -> None:
    with open(os.path.join(folder, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))


def least_memory(args: argparse.Namespace) -> None:
    """For each setting: the smallest cgroup limit it finishes in with its unlimited tokens."""
    print("| program | unlimited: peak RSS / RSS decoded (GiB), wall (s) | least memory it runs in (MiB) "
          "| there: decode a token (CPU-ms), wall (s) |")
    print("|---|---|---|---|")
    for setting, title in (("off", "as it is"), ("on", "weights packed on disk")):
        free = run(args, setting)
        low, high = 64, int(free["peak_gib"] * 1024 * 2)
        best: Dict[str, Any] = {}
        while high - low > args.precision:
            middle = (low + high) // 2
            got = run(args, setting, middle, timeout=2 * free["wall_s"] + 5)  # slower: reading its file again
            if "killed" not in got and got["tokens"] == free["tokens"]:
                high, best = middle, got
            else:
                low = middle
        there = f"{best['one_ms']:.1f}, {best['wall_s']:.0f}" if best else "(not reached)"
        print(f"| {title} | {free['peak_gib']:.2f} / {free['decoded']['rss']:.2f}, {free['wall_s']:.0f} "
              f"| {high} | {there} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("export")
    parser.add_argument("--backend", default="onnxruntime-int8", choices=["onnxruntime", "onnxruntime-int8"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--cache", default="", help="the cache folder for the packed copy (default: a new one)")
    parser.add_argument("--least_memory", action="store_true", help="the smallest memory cgroup each runs in")
    parser.add_argument("--precision", type=int, default=32, help="--least_memory: MiB")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.export, args.backend, args.prompt, args.new, args.streams)))
        return
    args.cache = args.cache or tempfile.mkdtemp(prefix="wenxin-packed-")
    print(f"{args.export} on {args.backend}; {load_note()}", flush=True)
    made = time.perf_counter()
    first = run(args, "on")  # makes the packed copy
    print(f"first load with packing: {first['load_s']:.1f} s (packing {time.perf_counter() - made:.1f} s in all)")
    if args.least_memory:
        least_memory(args)
        print(load_note())
        return
    results: Dict[str, List[Dict[str, Any]]] = {"off": [], "on": []}
    for round_ in range(args.rounds):
        for setting in (("off", "on") if round_ % 2 == 0 else ("on", "off")):
            results[setting].append(run(args, setting))
    print("| program | load (s) | RSS / anon loaded (GiB) | RSS / anon decoded (GiB) | decode a token (CPU-ms) "
          f"| prompt a token | {args.streams} streams, a token |")
    print("|---|---|---|---|---|---|---|")
    for setting, title in (("off", "as it is"), ("on", "weights packed on disk")):
        rs = results[setting]

        def med(key: str, sub: str = "", rs: List[Dict[str, Any]] = rs) -> float:
            return statistics.median(r[key][sub] if sub else r[key] for r in rs)
        print(f"| {title} | {med('load_s'):.1f} | {med('loaded', 'rss'):.3f} / {med('loaded', 'anon'):.3f} "
              f"| {med('decoded', 'rss'):.3f} / {med('decoded', 'anon'):.3f} | {med('one_ms'):.1f} "
              f"| {med('prompt_ms'):.2f} | {med('streams_ms'):.2f} |")
    same = all(r["tokens"] == results["off"][0]["tokens"] and r["first_logits"] == results["off"][0]["first_logits"]
               for r in results["off"] + results["on"])
    print(f"same tokens and first logits in every run: {same}; {load_note()}")


if __name__ == "__main__":
    main()
