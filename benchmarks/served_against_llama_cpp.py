"""Served: ``wenxin serve`` against llama.cpp's own server (``llama-server``) on the same weights,
the same prompts and the same load, in one run (issue 69).

The weights: an ERNIE 4.5 chat export converted to ONNX (``--export``; ``advance_pair.onnx`` and
its int8 copy, or an older export's files) and the GGUF files llama.cpp's ``convert_hf_to_gguf.py`` wrote from the same
checkpoint's ``--format pt`` folder (``--gguf_f32``, ``--gguf_q8``). ``llama-server`` is built from
the llama.cpp sources vendored in llama-cpp-python's sdist (``cmake --build BUILD --target
llama-server``). Each engine pair: wenxin float32 (``--backend onnxruntime``) against llama.cpp
f32, wenxin int8 (``onnxruntime-int8``) against q8_0.

The load is ``generation_serving.py``'s: ``S`` clients, each asking for a streamed greedy answer,
then the next, starting apart in the first second; the same questions, the same random answer
lengths (``--new`` / 2 to 3 / 2 tokens). wenxin gets each question as text (its chat template
applied); llama.cpp gets the very token ids wenxin's prompt has (``/completion`` with the ids,
``ignore_eos``), so both prefill the same prompt and decode the same number of tokens. Both use
``--threads`` math threads; llama.cpp serves ``S`` parallel slots with continuous batching (its
default), wenxin batches up to ``S`` rows. Measured over ``--seconds`` after every client's first
answer: tokens a second and a CPU-second (the server's process tree), time to the first token and
between tokens p50/p99, ``/health`` p99, and the server's resident memory after the window::

    python benchmarks/served_against_llama_cpp.py --export EXPORT --gguf_f32 m-f32.gguf \\
        --gguf_q8 m-q8_0.gguf --llama_server BUILD/bin/llama-server --streams 1 4 16 32
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from typing import Any, Dict, List, Tuple

from generation_serving import (Observed, answer_lines, closed_loop, free_port, launched, open_stream, request_bodies,
                                serve, stream_once)
from measure import load_note, resident_gib


def prompt_ids(export: str, bodies: List[Dict[str, Any]]) -> List[List[int]]:
    """The token ids of each body's prompt, as wenxin's service builds it."""
    from wenxin.inference.predictor import Predictor
    predictor = Predictor(export, load_model=False)
    return [[int(t) for t in predictor.prompt([body["text"]])["ids"].reshape(-1)] for body in bodies]


async def stream_completion(port: int, body: Dict[str, Any], seen: Observed) -> None:
    """One streamed ``/completion`` of llama-server, its tokens noted as they arrive (an event a token)."""
    request = {"prompt": body["ids"], "n_predict": body["max_new_tokens"], "stream": True, "ignore_eos": True,
               "temperature": 0.0, "top_k": 1}
    reader, writer, start = await open_stream(port, "/completion", request)
    try:
        last = None
        async for line in answer_lines(reader):
            if line.startswith(b"data: {"):
                if json.loads(line[len(b"data: "):]).get("stop"):
                    break
                last = seen.token(start, last)
    finally:
        writer.close()


def llama_server(server: str, gguf: str, streams: int, threads: int, context: int) -> Tuple[subprocess.Popen, int]:
    """``llama-server`` on ``gguf`` with ``streams`` parallel slots of ``context`` tokens, loaded."""
    port = free_port()
    command = [server, "-m", gguf, "--port", str(port), "--host", "127.0.0.1", "--threads", str(threads),
               "--threads-batch", str(threads), "--parallel", str(streams), "--ctx-size", str(context * streams)]
    return launched(command, port), port


def measured(process: subprocess.Popen, port: int, bodies: List[Dict[str, Any]], streams: int, seconds: float,
             send: Any) -> Dict[str, Any]:
    """The load on a loaded server, its memory after the window; the server is stopped after."""
    try:
        result = asyncio.run(closed_loop(port, bodies, streams, seconds, process.pid, send))
        result["rss_gib"] = resident_gib(process.pid, tree=True)
        return result
    finally:
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:  # a server still draining its slots
            process.kill()
            process.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", required=True)
    parser.add_argument("--gguf_f32", required=True)
    parser.add_argument("--gguf_q8", required=True)
    parser.add_argument("--llama_server", required=True)
    parser.add_argument("--streams", nargs="+", type=int, default=[1, 4, 16, 32])
    parser.add_argument("--new", type=int, default=48)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--pairs", nargs="+", default=["int8", "float32"], choices=["int8", "float32"])
    args = parser.parse_args()
    bodies = [{**body, "strategy": "greedy"} for body in request_bodies("ernie45", args.new)]  # wenxin's (an
    # export of a model folder samples by default, as the folder's generation_config.json asks)
    as_ids = [{**body, "ids": ids} for body, ids in zip(bodies, prompt_ids(args.export, bodies))]  # llama.cpp's
    context = max(len(b["ids"]) for b in as_ids) + args.new * 3 // 2 + 16  # a slot's room
    print(load_note(), file=sys.stderr)
    engines: List[Tuple[str, str, str]] = []
    for pair in args.pairs:
        engines += [(f"wenxin {pair}", "onnxruntime-int8" if pair == "int8" else "onnxruntime", ""),
                    (f"llama.cpp {'q8_0' if pair == 'int8' else 'f32'}", "",
                     args.gguf_q8 if pair == "int8" else args.gguf_f32)]
    rows = []
    for streams in args.streams:
        for name, backend, gguf in engines:  # the engines of a pair one after the other, at each load
            if gguf:
                process, port = llama_server(args.llama_server, gguf, streams, args.threads, context)
                result = measured(process, port, as_ids, streams, args.seconds, stream_completion)
            else:
                process, port = serve(args.export, streams, args.new, args.threads, backend=backend)
                result = measured(process, port, bodies, streams, args.seconds, stream_once)
            print(json.dumps({"engine": name, "streams": streams, **result}), flush=True)
            rows.append((name, streams, result))
    print("| engine | streams | tokens/s | tokens/CPU-s | TTFT p50 / p99 (s) | TBT p50 / p99 (ms) | /health p99 (ms) "
          "| RSS (GiB) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, streams, r in rows:
        print(f"| {name} | {streams} | {r['tokens_per_s']:.1f} | {r['tokens_per_cpu_s']:.1f} | "
              f"{r['ttft_p50']:.3f} / {r['ttft_p99']:.3f} | {r['tbt_p50'] * 1e3:.1f} / {r['tbt_p99'] * 1e3:.1f} | "
              f"{r['health_p99'] * 1e3:.0f} | {r['rss_gib']:.2f} |")


if __name__ == "__main__":
    os.environ.setdefault("GLOG_minloglevel", "2")
    main()
