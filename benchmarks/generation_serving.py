"""Generation served to many users at once: the decoding batch against one request at a time
(issue 54), in one run.

Two exports, made here (random initialization, float32, no download):

- ``ernie45``: an ERNIE 4.5 dense decoder of the ``small`` shape of ``ernie45_decoding.py``
  (vocabulary 32,000, 6 layers, hidden 512, 8 query and 2 key/value heads of 64), exported by a
  zero-step SFT run (``ernie45_decoding.export_of``); prompts are chat questions of 4 to 60
  characters through the test fixture's tokenizer;
- ``erniegen``: ERNIE-Gen on an encoder of ERNIE 3.0-medium's shape (6 layers, hidden 768, 12 heads,
  feed-forward 3072; the tests' small vocabulary), exported
  after one training step with ``[SEP]`` made unreachable (so every answer has ``--new`` tokens);
  prompts are rows of the tests' copy task.

For each model and each number of concurrent streams (``--streams``), ``wenxin serve`` runs in a
process of its own, once with the batch (``--max_rows 32``, the default) and once one request at
a time (``--max_rows 1``: a request waits until the one before it has ended, as the single
decoding thread before the batch did), alternating which goes first from round to round. Each
stream is a client that starts at a random moment of the first second, asks for a streamed greedy
answer of ``--new`` / 2 to 3 x ``--new`` / 2 tokens (drawn from the client's own seeded sequence,
so both modes get the same requests), then at once for the next (a closed loop), for ``--seconds``
after a warm-up request each. Reported per run:
tokens a wall-second and a CPU-second of the service (all its threads; the clients run on the
same two cores, as ``serving_throughput.py``'s do), time to first token and time between tokens
(p50, p99), and from the service's ``/metrics``, the rows a decoding step ran (their mean), the
prompt tokens it prefilled a row it stepped (a row stepped: a token decoded) and the share of its CPU that its decoding thread spent
in its turns (the model's calls and the scheduler's choices; the rest is HTTP and streaming) and,
of all its CPU, the share inside the model's calls: the service's tokens a CPU-second against its
own bare steps', measured in the same run (issue 69's 90% target; one math thread counts whole).
The clients are asyncio sockets in this process.

    python benchmarks/generation_serving.py --models ernie45 erniegen --streams 1 4 16 32 --rounds 2

``--shape 0.3b`` makes ``ernie45`` of ERNIE-4.5-0.3B's shape (random weights, float32);
``--turn_prefill all rows`` measures the batch under both of the service's rules for a turn's
prompt tokens while answers decode (``batch all``, the default, and ``batch rows``).
``--decode_process on off`` measures the batch decoding in a process of its own and in the
service's thread (``batch all decode on``, ``batch all decode off``; the CPU counted is the
service's whole process tree).

``--baseline_repo DIR`` (a checkout of the commit before the batch, e.g. ``git worktree add
/tmp/before 800ab6a``) adds a third mode for ``ernie45``: ``before``, that checkout's own service on
an export it made of the same weights, one request at a time on its single decoding thread.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, List, Optional, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wenxin.common.process_settings import apply_process_settings  # noqa: E402

apply_process_settings()  # as wenxin's entry points do, before Paddle loads
from ernie45_decoding import SHAPES  # noqa: E402
from measure import load_note, tree_cpu_seconds  # noqa: E402

SMALL = {"vocab_size": 32000, "hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 6,
         "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64, "max_position_embeddings": 4096,
         "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
         "tie_word_embeddings": True, "hidden_act": "silu", "use_bias": False, "model_type": "ernie4_5",
         "architectures": ["Ernie4_5ForCausalLM"], "torch_dtype": "float32"}
QUESTIONS = ["你好", "今天天气怎么样？", "请介绍一下文心大模型的特点和用途", "what is machine learning",
             "帮我写一首关于春天的诗，要有花和雨", "如何学习深度学习？请给出详细的步骤和建议，包括数学基础、编程和实践项目",
             "hello", "推荐几本好书"]


# ---- the exports -------------------------------------------------------------------------------
def ernie45_export(work: str, shape: str = "small") -> str:
    """A random ERNIE 4.5 folder of ``shape`` (``ernie45_decoding.SHAPES``: ``small``, or ``0.3b``,
    ERNIE-4.5-0.3B's) in the layout PaddleFormers writes, and its export."""
    import numpy as np
    import paddle
    from safetensors.numpy import save_file

    from ernie45_decoding import SHAPES, export_of
    from wenxin.models.ernie45 import LINEAR_WEIGHTS, Ernie45Config, Ernie45ForCausalLM
    folder = os.path.join(work, f"ernie45-{shape}")
    os.makedirs(folder, exist_ok=True)
    paddle.seed(7)
    config = {**SMALL, **SHAPES[shape]}
    model = Ernie45ForCausalLM(Ernie45Config.from_dict(config, shape))
    weights = {}
    for name, value in model.state_dict().items():
        array = value.numpy()
        if name.split(".")[-2] in LINEAR_WEIGHTS and array.ndim == 2:
            array = array.T  # the folder's linear weights are [out, in]
        weights[name] = np.ascontiguousarray(array)
    save_file(weights, os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(folder, "generation_config.json"), "w") as f:
        json.dump({"do_sample": False, "eos_token_id": 2}, f)
    return export_of(folder, work)


def ernie45_source(work: str, shape: str) -> str:
    """The random model folder of ``shape`` that ``export_made_once`` exports under ``work``
    (``ernie45_export`` of ``<work>/ernie45-<shape>`` writes it there)."""
    return os.path.join(work, f"ernie45-{shape}", f"ernie45-{shape}")


def export_made_once(work: str, model: str, shape: str = "small", onnx: bool = False) -> str:
    """The export folder of ``model`` (``ernie45`` of ``shape``, or ``erniegen``) under ``work``, made
    the first time (a marker file names it) and, with ``onnx``, converted to ONNX once."""
    marker = os.path.join(work, f"{model}-{shape}.export" if model == "ernie45" else f"{model}.export")
    if not os.path.isfile(marker):
        folder = ernie45_export(os.path.join(work, f"{model}-{shape}"), shape) if model == "ernie45" else \
            erniegen_export(os.path.join(work, model))
        with open(marker, "w") as f:
            f.write(folder)
    with open(marker) as f:
        folder = f.read().strip()
    converted = ("advance_pair.onnx", "advance.onnx", "infill.onnx")
    if onnx and not any(os.path.isfile(os.path.join(folder, name)) for name in converted):
        from wenxin.inference.onnx_export import export_onnx
        export_onnx(folder, {})
    return folder


def erniegen_export(work: str) -> str:
    """ERNIE-Gen on a random encoder of ERNIE 3.0-medium's shape, exported after one step."""
    from conftest import build
    from ernie_helpers import gen_config, make_ernie_model, make_gen_rows, write_gen_tsv
    model = os.path.join(work, "ernie-gen-model")
    make_ernie_model(model, type_vocab_size=8, use_task_id=False, max_position_embeddings=512, hidden_size=768,
                     intermediate_size=3072, num_hidden_layers=6, num_attention_heads=12)
    for split, seed, n in (("train", 1, 32), ("dev", 2, 8)):
        write_gen_tsv(os.path.join(work, f"{split}.tsv"), make_gen_rows(n, seed))
    config = gen_config(work, model, os.path.join(work, "gen-out"), max_dec_len=200, decoding="greedy")
    config["trainer"].update(max_steps=1, is_eval_dev=0)
    trainer = build(config, pathlib.Path(work))
    trainer.do_train()
    bias = trainer.model.lm_head.bias  # [SEP] never chosen: every answer runs to max_new_tokens, as in the tests
    values = bias.numpy()
    values[trainer.model.special["sep_id"]] = -1e4
    bias.set_value(values)
    return str(trainer.export_inference(os.path.join(work, "gen-export")))


SYSTEM = "你是一个乐于助人的助手。请用简洁、准确、友好的语言回答用户的问题，必要时给出例子和步骤，不知道的就说不知道。"


def request_bodies(model: str, new: int, system: int = 0) -> List[Dict[str, Any]]:
    """The requests the clients send in turn; ``system``: ERNIE 4.5's carry a system prompt of
    that many characters (the same in every request: ``SYSTEM`` repeated)."""
    if model == "ernie45":
        if system:
            prompt = (SYSTEM * (system // len(SYSTEM) + 1))[:system]
            return [{"text": json.dumps({"system": prompt, "src": [q]}, ensure_ascii=False), "max_new_tokens": new,
                     "stream": True} for q in QUESTIONS]
        return [{"text": q, "max_new_tokens": new, "stream": True} for q in QUESTIONS]
    rng = random.Random(3)
    letters = "abcdefgh"
    return [{"row": [" ".join(rng.choice(letters) for _ in range(rng.randint(2, 6))),
                     " ".join(rng.choice(letters) for _ in range(rng.randint(4, 12)))],
             "max_new_tokens": new, "stream": True} for _ in range(8)]


# ---- the clients -------------------------------------------------------------------------------
class Observed:
    """What the clients saw, as it came: every token's arrival, each request's start and first
    token, and the gaps between a request's tokens (a request cut off at the window's end counts
    what it had)."""

    def __init__(self) -> None:
        self.tokens: List[float] = []
        self.first: List[Tuple[float, float]] = []  # (the request's start, its first token's wait)
        self.gaps: List[Tuple[float, float]] = []  # (the earlier token's arrival, the gap)
        self.warmed = 0

    def token(self, start: float, last: Optional[float]) -> float:
        """A token of the request started at ``start`` arrived now (its earlier one at ``last``)."""
        now = time.perf_counter()
        self.tokens.append(now)
        if last is None:
            self.first.append((start, now - start))
        else:
            self.gaps.append((last, now - last))
        return now


async def open_stream(port: int, path: str, body: Dict[str, Any]
                      ) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter, float]:
    """POST ``body`` to ``path``; the answer's reader past a 200 status line and headers, the
    writer, and when the request started."""
    data = json.dumps(body).encode()
    start = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST {path} HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\n".encode()
                 + b"Connection: close\r\nContent-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    head = await reader.readuntil(b"\r\n\r\n")
    if b" 200 " not in head.split(b"\r\n")[0]:
        writer.close()
        raise RuntimeError(f"answered {head[:80]!r}: {await reader.read()!r}")
    return reader, writer, start


async def answer_lines(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """The lines of an answer, to its end."""
    while True:
        line = await reader.readline()
        if not line:
            return
        yield line


async def stream_once(port: int, body: Dict[str, Any], seen: Observed) -> None:
    """One streamed request, its tokens noted in ``seen`` as they arrive."""
    reader, writer, start = await open_stream(port, "/generate", body)
    try:
        last = None
        async for line in answer_lines(reader):
            if line.startswith(b'data: {"token":"') and not line.startswith(b'data: {"token":"",'):
                last = seen.token(start, last)
            elif line.startswith(b"event: error"):
                raise RuntimeError(await reader.read())
    finally:
        writer.close()


async def probe_health(port: int, latencies: List[float]) -> None:
    """``GET /health`` every 0.2 s until cancelled, each answer's wait noted (the service answers
    while it decodes: issue 69, point 5)."""
    while True:
        start = time.perf_counter()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(b"GET /health HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
            await reader.read()
        finally:
            writer.close()
        latencies.append(time.perf_counter() - start)
        await asyncio.sleep(0.2)


COUNTERS = {"rows": "wenxin_generation_step_rows_sum", "steps": "wenxin_generation_step_rows_count",
            "prompt_tokens": "wenxin_prompt_tokens_prefilled_total", "turn_cpu": "wenxin_generation_turn_cpu_seconds_total",
            "model_cpu": "wenxin_generation_model_cpu_seconds_total"}  # the last: wenxin from 2026-12-07 on
TURN_COUNTERS = {"rows", "steps", "prompt_tokens", "turn_cpu"}  # a server with these has the columns they make


async def service_counters(port: int) -> Dict[str, float]:
    """The service's own counts of its work (``/metrics``: rows stepped, prompt tokens prefilled,
    the decoding thread's CPU in its turns and, of that, in the model's calls); those a server
    has."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
        text = (await reader.read()).decode(errors="replace")
    finally:
        writer.close()
    values = dict(line.rsplit(" ", 1) for line in text.splitlines() if line.startswith(tuple(COUNTERS.values())))
    return {key: float(values[name]) for key, name in COUNTERS.items() if name in values}


async def closed_loop(port: int, bodies: List[Dict[str, Any]], streams: int, seconds: float,
                      pid: int, send: Callable[[int, Dict[str, Any], Observed], Awaitable[None]] = stream_once
                      ) -> Dict[str, Any]:
    """``streams`` clients asking one after another; what happened in the measured window.
    ``send``: one streamed request to the service (wenxin's ``/generate``, or another server's)."""
    seen = Observed()

    async def client(index: int) -> None:
        rng = random.Random(index)  # the same requests, at the same offsets, in either mode
        await asyncio.sleep(rng.uniform(0.0, 1.0))  # the streams start apart, as users do
        await send(port, bodies[index % len(bodies)], seen)  # its warm-up
        seen.warmed += 1
        turn = index
        while True:
            turn += streams
            body = dict(bodies[turn % len(bodies)])
            body["max_new_tokens"] = rng.randint(body["max_new_tokens"] // 2, body["max_new_tokens"] * 3 // 2)
            await send(port, body, seen)

    clients = [asyncio.ensure_future(client(i)) for i in range(streams)]
    deadline = time.perf_counter() + 900
    while seen.warmed < streams:  # every client past its warm-up
        assert time.perf_counter() < deadline, "the clients' warm-up did not end"
        for task in clients:
            if task.done() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        await asyncio.sleep(0.05)
    counted = await service_counters(port)
    begin, cpu = time.perf_counter(), tree_cpu_seconds(pid)
    health: List[float] = []
    prober = asyncio.ensure_future(probe_health(port, health))
    await asyncio.sleep(seconds)
    end, cpu = time.perf_counter(), tree_cpu_seconds(pid) - cpu
    counted = {key: value - counted[key] for key, value in (await service_counters(port)).items() if key in counted}
    prober.cancel()
    await asyncio.gather(prober, return_exceptions=True)
    for task in clients:  # requests still running leave (their clients disconnect): no drain to wait for
        task.cancel()
    await asyncio.gather(*clients, return_exceptions=True)
    tokens = sum(begin <= t <= end for t in seen.tokens)
    first = [wait for started, wait in seen.first if begin <= started and started + wait <= end]
    gaps = [gap for at, gap in seen.gaps if begin <= at and at + gap <= end]
    return {"tokens": tokens, "tokens_per_s": tokens / (end - begin), "tokens_per_cpu_s": tokens / cpu,
            "cpu_share": cpu / (end - begin), "ttft_p50": percentile(first, 50), "ttft_p99": percentile(first, 99),
            "tbt_p50": percentile(gaps, 50), "tbt_p99": percentile(gaps, 99), "requests": len(first),
            "health_p50": percentile(health, 50), "health_p99": percentile(health, 99),
            **({"prompt_per_row": counted["prompt_tokens"] / max(counted["rows"], 1),
                "rows_per_step": counted["rows"] / max(counted["steps"], 1),
                "turn_cpu_share": counted["turn_cpu"] / cpu} if TURN_COUNTERS <= counted.keys() else {}),
            **({"model_cpu_share": counted["model_cpu"] / cpu} if "model_cpu" in counted else {})}


def percentile(values: List[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if q < 100 else max(values)


def serve(folder: str, max_rows: int, new: int, threads: int = 1, repo: str = REPO,
          turn_prefill: str = "all", backend: str = "auto", prefix_cache_mb: int = 64,
          decode_process: str = "auto") -> Tuple[subprocess.Popen, int]:
    """``wenxin serve`` of ``repo`` (another checkout: ``--baseline_repo``, with the flags it knows)."""
    port = free_port()
    env = {**os.environ, "GLOG_minloglevel": "2", "PYTHONPATH": repo}
    flags = ["--generation_timeout", "3600", "--max_new_tokens", str(new * 3 // 2)]
    if repo == REPO:
        flags += ["--max_rows", str(max_rows), "--num_threads", str(threads), "--max_waiting", "1000",
                  "--turn_prefill", turn_prefill, "--backend", backend, "--prefix_cache_mb", str(prefix_cache_mb),
                  "--decode_process", decode_process]
    command = [sys.executable, "-m", "wenxin", "serve", "--model_dir", folder, "--port", str(port), *flags]
    return launched(command, port, env, repo), port


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launched(command: List[str], port: int, env: Optional[Dict[str, str]] = None,
             cwd: Optional[str] = None) -> subprocess.Popen:
    """A server started by ``command`` (listening on ``port``), once ``GET /health`` answers 200. It
    logs to a temporary file: a line a request, which a pipe left unread would fill and stop it."""
    import http.client
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, env=env, cwd=cwd)
    deadline = time.monotonic() + 600
    while True:
        if process.poll() is not None:
            log.seek(0)
            raise SystemExit(f"the server ended: {log.read().decode(errors='replace')[-3000:]}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/health")
            response = conn.getresponse()
            response.read()
            if response.status == 200:
                return process
        except OSError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise SystemExit("the server did not load within 600 s")
        time.sleep(0.2)


def run(folder: str, bodies: List[Dict[str, Any]], streams: int, max_rows: int, new: int,
        seconds: float, threads: int, repo: str = REPO, turn_prefill: str = "all",
        backend: str = "auto", prefix_cache_mb: int = 64, decode_process: str = "auto") -> Dict[str, Any]:
    process, port = serve(folder, max_rows, new, threads, repo, turn_prefill, backend, prefix_cache_mb,
                          decode_process)
    try:
        return asyncio.run(closed_loop(port, bodies, streams, seconds, process.pid))
    finally:
        process.terminate()
        process.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["ernie45", "erniegen"], choices=["ernie45", "erniegen"])
    parser.add_argument("--streams", nargs="+", type=int, default=[1, 4, 16, 32])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--new", type=int, default=48, help="tokens a request asks for")
    parser.add_argument("--seconds", type=float, default=20.0, help="the measured window of each run")
    parser.add_argument("--work", default="", help="a folder for the exports (kept; made once)")
    parser.add_argument("--threads", type=int, default=1, help="the service's --num_threads, in both modes")
    parser.add_argument("--backend", default="auto",
                        help="the service's --backend in the batch and one-at-a-time modes (paddle, onnxruntime, "
                             "onnxruntime-int8: the export converted first with --onnx)")
    parser.add_argument("--onnx", action="store_true",
                        help="convert the exports to ONNX first (ernie45's advance_pair.onnx, erniegen's infill.onnx, "
                             "and their int8 copies; once)")
    parser.add_argument("--turn_prefill", nargs="+", default=["all"], choices=["rows", "all"],
                        help="the batch's --turn_prefill rules to measure (each a mode: batch all, batch rows)")
    parser.add_argument("--prefix_cache_mb", nargs="+", type=int, default=[64],
                        help="the batch's --prefix_cache_mb values to measure (more than one: each a mode, "
                             "batch all prefix 64, batch all prefix 0)")
    parser.add_argument("--decode_process", nargs="+", default=["auto"], choices=["auto", "on", "off"],
                        help="the service's --decode_process values to measure (more than one: each a mode, "
                             "batch all decode on, batch all decode off)")
    parser.add_argument("--system", type=int, default=0,
                        help="ernie45's requests carry the same system prompt of this many characters")
    parser.add_argument("--shape", default="small", choices=sorted(SHAPES),
                        help="ernie45's shape: small, ERNIE-4.5-0.3B's, or tiny (0.3B's depth with next to no "
                             "arithmetic: what the step's operators cost by themselves); random weights")
    parser.add_argument("--baseline_repo", default="",
                        help="also serve ernie45 one request at a time by the wenxin of this checkout (the commit "
                             "before the batch: its own export, its own decoding thread), as a third mode")
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="wenxin-genserve-")
    os.makedirs(work, exist_ok=True)
    print(f"# {load_note()} before; exports in {work}; backend {args.backend}", flush=True)
    folders = {model: export_made_once(work, model, args.shape, args.onnx) for model in args.models}
    if args.baseline_repo and "ernie45" in args.models:
        marker = os.path.join(work, f"ernie45-{args.shape}-before.export")
        if not os.path.isfile(marker):
            from ernie45_decoding import export_of
            before = os.path.join(work, f"ernie45-{args.shape}-before")
            os.makedirs(before, exist_ok=True)
            folder = export_of(ernie45_source(work, args.shape), before, args.baseline_repo)
            with open(marker, "w") as f:
                f.write(folder)
        folders["ernie45-before"] = open(marker).read().strip()
    results: Dict[Tuple[str, int, str], List[Dict[str, Any]]] = {}
    for round_index in range(args.rounds):
        for model in args.models:
            bodies = request_bodies(model, args.new, args.system)
            for streams in args.streams:
                prefixes, apart = args.prefix_cache_mb, args.decode_process
                # each mode: its name, the service's --max_rows, --turn_prefill, --prefix_cache_mb, --decode_process
                modes = [(f"batch {rule}" + (f" prefix {mb}" if len(prefixes) > 1 else "")
                          + (f" decode {choice}" if len(apart) > 1 else ""), 32, rule, mb, choice)
                         for rule in args.turn_prefill for mb in prefixes for choice in apart]
                modes.append(("one at a time", 1, "all", prefixes[0], apart[0]))
                if args.baseline_repo and model == "ernie45":
                    modes.append(("before", 1, "all", prefixes[0], apart[0]))
                if round_index % 2:
                    modes.reverse()
                for mode, rows, rule, mb, choice in modes:
                    folder, repo = (folders["ernie45-before"], args.baseline_repo) if mode == "before" else \
                        (folders[model], REPO)
                    result = run(folder, bodies, streams, rows, args.new, args.seconds, args.threads, repo, rule,
                                 "auto" if mode == "before" else args.backend, mb, choice)
                    results.setdefault((model, streams, mode), []).append(result)
                    print(json.dumps({"round": round_index, "model": model, "streams": streams, "mode": mode,
                                      **{k: round(v, 4) if isinstance(v, float) else v for k, v in result.items()}}),
                          flush=True)
    print(f"# {load_note()} after")
    print("| model | streams | mode | tokens/s | tokens/CPU-s | CPU share | TTFT p50 / p99 (s) | TBT p50 / p99 (ms) "
          "| x tokens/s | TTFT p99 / lone p50, p99 | /health p50 / p99 (ms) | rows a step | prompt tokens a row "
          "stepped | decoding thread's CPU share | the model's calls' share |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for model in args.models:
        first = next(mode for m, _, mode in results if m == model and mode.startswith("batch "))
        lone = [(r["ttft_p50"], r["ttft_p99"]) for r in results[(model, min(args.streams), first)]]
        lone_p50, lone_p99 = statistics.median(p for p, _ in lone), statistics.median(p for _, p in lone)
        for streams in args.streams:
            base = statistics.median(r["tokens_per_s"] for r in results[(model, streams, "one at a time")])
            for mode in dict.fromkeys(mode for m, s, mode in results if (m, s) == (model, streams)):
                runs = results[(model, streams, mode)]

                def med(key: str, runs: List[Dict[str, Any]] = runs) -> float:  # nan: a server without the count
                    values = [r[key] for r in runs if key in r]
                    return statistics.median(values) if values else float("nan")
                print(f"| {model} | {streams} | {mode} | {med('tokens_per_s'):.1f} | {med('tokens_per_cpu_s'):.1f} | "
                      f"{med('cpu_share'):.2f} | {med('ttft_p50'):.3f} / {med('ttft_p99'):.3f} | "
                      f"{med('tbt_p50') * 1000:.1f} / {med('tbt_p99') * 1000:.1f} | "
                      f"{med('tokens_per_s') / base:.2f} | {med('ttft_p99') / lone_p50:.2f}, "
                      f"{med('ttft_p99') / lone_p99:.2f} | {med('health_p50') * 1000:.0f} / "
                      f"{med('health_p99') * 1000:.0f} | {med('rows_per_step'):.1f} | {med('prompt_per_row'):.2f} | "
                      f"{med('turn_cpu_share'):.2f} | {med('model_cpu_share'):.2f} |")


if __name__ == "__main__":
    main()
