"""An export's ONNX step program loaded as it is against its copy with the weights packed on disk
(``wenxin.inference.onnx_prepacked``, issue 69): resident and anonymous memory after loading and
after decoding, load time, CPU-ms a token at one stream and a step's CPU a token at 16 streams, and
whether both give the same tokens and logits.

Each setting (``$WENXIN_ONNX_PREPACKED`` ``off`` and ``on``) loads the export's program through
the Predictor in a fresh process; rounds alternate which goes first. The packed copy is made once
before the rounds (into ``--cache``, timed and reported apart)::

    python benchmarks/onnx_prepacked.py EXPORT --backend onnxruntime-int8 --rounds 2
    python benchmarks/onnx_prepacked.py EXPORT --backend onnxruntime --rounds 2
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
                  tokens=one["tokens"], first_logits=one["first_logits"][:64])
    return result


def run(args: argparse.Namespace, setting: str) -> Dict[str, Any]:
    env = {**os.environ, "WENXIN_ONNX_PREPACKED": setting, "WENXIN_CACHE": args.cache, "GLOG_minloglevel": "2",
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, __file__, "--worker", args.export, "--backend", args.backend,
                           "--prompt", str(args.prompt), "--new", str(args.new), "--streams", str(args.streams)],
                          capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("export")
    parser.add_argument("--backend", default="onnxruntime-int8", choices=["onnxruntime", "onnxruntime-int8"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--cache", default="", help="the cache folder for the packed copy (default: a new one)")
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
