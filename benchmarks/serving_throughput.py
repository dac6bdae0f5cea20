"""Throughput of ``wenxin serve`` against the raw predictor, in one run.

    python benchmarks/serving_throughput.py [--models bow cnn transformer ernie crf] [--backends paddle onnxruntime]
        [--clients 1 4 16 50] [--batch 16] [--seconds 8] [--workers CORES] [--model_dir DIR] [--pin] [--raw_runs 3]
        [--floor]

For each model (``small_models.py``: trained for one epoch on generated data and exported, with
model.onnx where paddle2onnx converts it) and backend, the service runs as its own ``wenxin
serve`` process with ``--workers`` processes. The clients are threads of this process, each with
a kept-open connection, posting ``--batch`` texts per request. The baseline is the raw
``Predictor`` of the same model and backend on batches of the same size (one process, one
thread), measured just before in ``--raw_runs`` fresh processes (the median: Paddle's speed varies
from process to process, by up to 20% on the same batches). Reports texts/s, its ratio to the raw
predictor, p50/p99 latency, and failed requests; and, robust on a shared machine, texts per CPU-second: the service's (the CPU
time of its process and workers while the clients ran) against the raw predictor's (its own CPU
time around ``predict``). The clients' own CPU time is not the service's and is not counted.

``--pin`` keeps the load generator off the service's cores: the clients run on the first CPU,
the service (one worker per remaining CPU) and the raw predictor on the others. Sharing cores with
the clients' threads costs the service CPU time it would not spend beside remote clients (caches
and cores taken over between its threads): measured with one ERNIE client, its model thread spent
2,062 µs of CPU a request unpinned against 1,752 pinned (the raw predictor's run: 1,747).

``--floor`` also measures what the service's HTTP layer costs alone: one service process (on the
service's CPUs) whose batching pool is replaced by one that answers each request at once with a
real batch's results (no text conversion, no model, no hand-over between threads), under the same
clients. Its CPU time a request is the floor of any request, and ``raw / (raw + floor)``, with
``raw`` the raw predictor's CPU time for a request's texts, the share of the raw predictor the
service could reach if running the model and converting the texts cost it what they cost the raw
predictor (merging requests into larger model batches can do a little better than that: the
model's cost a text falls with the batch).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, List, Optional, Set, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))
from wenxin.common.process_settings import apply_process_settings  # noqa: E402

apply_process_settings()  # as wenxin's entry points do, before Paddle loads
os.environ.setdefault("GLOG_minloglevel", "2")

from measure import load_note, tree_cpu_seconds  # noqa: E402


def raw_predictor(model_dir: str, model: str, batch: int, seconds: float, backend: str,
                  cpus: Optional[Set[int]] = None) -> Tuple[float, float, float]:
    """Texts/s, median seconds per batch and texts per CPU-second of the Predictor itself, in a
    fresh process (this one trained the models) with the service's settings: one thread, oneDNN
    auto; on ``cpus`` where given."""
    proc = subprocess.run([sys.executable, __file__, "--raw", model_dir, "--models", model, "--batch", str(batch),
                           "--seconds", str(seconds), "--backends", backend], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": REPO}, timeout=600, preexec_fn=pinned(cpus))
    if proc.returncode != 0:
        raise SystemExit(f"the raw predictor failed:\n{proc.stderr[-3000:]}")
    rate, per_batch, cpu_rate = proc.stdout.split()[-3:]
    return float(rate), float(per_batch), float(cpu_rate)


def serve_floor(model_dir: str, model: str, port: int, batch: int, backend: str, app_name: str = "wenxin") -> None:
    """(in the --floor_serve process) ``wenxin serve``'s one-process service, whose batching pool
    answers every request at once with the results the model gave for ``batch`` sample texts;
    ``app_name`` ``starlette``: the same routes on Starlette (``starlette_app``)."""
    import asyncio

    from small_models import sample_texts

    from wenxin.common.logs import lean_records, setup_logging
    from wenxin.inference import server
    from wenxin.inference.predictor import Predictor
    setup_logging()  # as ``wenxin serve``: a line a request
    lean_records()
    predictor = Predictor(model_dir, backend=backend)
    answers = predictor.predict([[t] for t in sample_texts(model)[:batch]], batch_size=batch)

    class AnsweredPool:
        """What the app reads of a ``BatchingPool``; ``submit`` answers at once."""

        def __init__(self, *args: object, **kwargs: object) -> None:
            self.meta, self.num_fields = predictor.meta, len(predictor.fields)
            self.model_threads, self.backend, self.onednn = 1, predictor.backend, predictor.onednn
            self.on_batch: Optional[Callable[[int], None]] = None

        def submit(self, rows: List[List[str]], loop: asyncio.AbstractEventLoop) -> "asyncio.Future[object]":
            future = loop.create_future()
            future.set_result([answers[i % len(answers)] for i in range(len(rows))])
            return future

        def close(self) -> None:
            pass

    server.BatchingPool = AnsweredPool  # type: ignore[misc,assignment]
    service = server.Service(model_dir, port=port)
    if app_name == "starlette":
        service.server.config.app = starlette_app(service.app)
    service.run()


def starlette_app(app: "object") -> Any:
    """The floor service's routes on Starlette: the same body reading (limits, deadline), parsing,
    pool, JSON, metrics and log line as wenxin's ASGI app (``PredictionApp``), under Starlette's
    router, request and response objects instead of the route table and raw ASGI messages."""
    import asyncio
    import logging

    import orjson
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    from wenxin.inference import server
    from wenxin.inference.http_io import Call, read_body
    served: server.PredictionApp = app  # type: ignore[assignment]
    logger = logging.getLogger("wenxin.serve")

    async def predict(request: "object") -> Response:
        start = time.perf_counter()
        served.metrics.in_flight.inc()
        try:  # the body read as wenxin's app reads it (its limits and deadline), through Starlette's receive
            call = Call(request.scope, request.receive, None)  # type: ignore[attr-defined,arg-type]
            body = await read_body(call, served.limits.max_body_bytes, served.limits.read_timeout)
            rows = server.parse_request(body, len(served.model.fields), served.limits.max_batch)
            results = await served.pool.submit(rows, asyncio.get_running_loop())  # type: ignore[union-attr]
            payload = orjson.dumps({"predictions": results})
            seconds = time.perf_counter() - start
            served._observe("/predict", 200, seconds, len(rows))
        finally:
            served.metrics.in_flight.dec()
        logger.info("POST /predict 200 %.1f ms %d inputs", seconds * 1000, len(rows))
        return Response(payload, media_type="application/json")

    async def health(request: "object") -> Response:
        start = time.perf_counter()
        answer = await served.health(Call(request.scope, request.receive, None))  # type: ignore[attr-defined,arg-type]
        seconds = time.perf_counter() - start
        served._observe("/health", int(answer.status), seconds, 0)
        logger.info("GET /health %d %.1f ms 0 inputs", int(answer.status), seconds * 1000)
        return Response(orjson.dumps(answer.payload), status_code=int(answer.status), media_type="application/json")

    return Starlette(routes=[Route("/predict", predict, methods=["POST"]), Route("/health", health)])


def time_predictor(model_dir: str, texts: List[str], batch: int, seconds: float, backend: str) -> None:
    """(in the --raw process) Print texts/s, the median seconds per batch, and texts per CPU-second."""
    from wenxin.inference.predictor import Predictor
    predictor = Predictor(model_dir, backend=backend)
    rng = random.Random(1)
    predictor.predict([[t] for t in rng.sample(texts, batch)], batch_size=batch)  # warm-up; oneDNN measured
    times, cpu = [], 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        rows = [[t] for t in rng.sample(texts, batch)]
        start, cpu_start = time.perf_counter(), time.process_time()
        predictor.predict(rows, batch_size=batch)
        cpu += time.process_time() - cpu_start
        times.append(time.perf_counter() - start)
    print(batch * len(times) / sum(times), statistics.median(times), batch * len(times) / cpu)


def request_bytes(texts: List[str]) -> bytes:
    body = json.dumps({"texts": texts}, ensure_ascii=False).encode("utf-8")
    return (b"POST /predict HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


def read_response(sock: socket.socket, pending: bytes) -> Tuple[bytes, bytes, bytes]:
    """(status line and headers, body, bytes of the next response already received)."""
    while b"\r\n\r\n" not in pending:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the service closed the connection")
        pending += chunk
    head, _, pending = pending.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    while len(pending) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the service closed the connection")
        pending += chunk
    return head, pending[:length], pending[length:]


def run_clients(port: int, texts: List[str], clients: int, batch: int,
                seconds: float) -> Tuple[int, float, List[float], int]:
    """``clients`` threads, each with a kept-open connection, posting ``batch`` texts per request.

    The load generator is a lean one (requests encoded beforehand, responses framed by their
    Content-Length) because it shares the machine's cores with the service: http.client's own
    work per request took 0.25 cores at 1,000 requests/s. Every 20th answer is checked in full:
    one prediction per text sent."""
    latencies: List[float] = []
    failures = [0]
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def client(seed: int) -> None:
        rng = random.Random(seed)
        requests = [request_bytes(rng.sample(texts, batch)) for _ in range(32)]
        mine: List[float] = []
        sock, pending, sent = None, b"", 0
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            try:
                if sock is None:
                    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    pending = b""
                sock.sendall(requests[sent % len(requests)])
                head, body, pending = read_response(sock, pending)
                ok = head.startswith(b"HTTP/1.1 200 ")
                if ok and sent % 20 == 0:
                    ok = len(json.loads(body)["predictions"]) == batch
            except (OSError, ValueError, IndexError):
                ok = False
                if sock is not None:
                    sock.close()
                sock = None
            sent += 1
            if ok:
                mine.append(time.perf_counter() - start)
            else:
                with lock:
                    failures[0] += 1
        if sock is not None:
            sock.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(latencies), time.perf_counter() - start, latencies, failures[0]


def pinned(cpus: Optional[Set[int]]) -> Optional[Callable[[], None]]:
    """A child's start-up step that keeps it on ``cpus`` (None: wherever the system puts it)."""
    if cpus is None:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_service(model_dir: str, workers: int, backend: str, cpus: Optional[Set[int]] = None,
                  floor_of: str = "", batch: int = 16, app_name: str = "wenxin") -> Tuple[subprocess.Popen, int]:
    """``wenxin serve`` as its own process, or with ``floor_of`` (a model's name), the floor
    service of ``serve_floor`` (on ``app_name``'s app); returns once it answers /health."""
    port = free_port()
    if floor_of:
        command = [__file__, "--floor_serve", model_dir, "--models", floor_of, "--backends", backend,
                   "--batch", str(batch), "--port", str(port), "--floor_apps", app_name]
    else:
        command = ["-m", "wenxin.cli", "serve", "--model_dir", model_dir, "--port", str(port), "--workers", str(workers),
                   "--max_connections", "1024", "--backend", backend]
    proc = subprocess.Popen([sys.executable, *command], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": REPO}, preexec_fn=pinned(cpus))
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:  # until a worker answers
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: bench\r\n\r\n")
                if sock.recv(64).startswith(b"HTTP/1.1 200 "):
                    return proc, port
        except OSError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("the service did not start")


def cpu_per_request(pid: int, port: int, texts: List[str], clients: int, args: argparse.Namespace) -> Tuple[
        int, float, List[float], int, float]:
    """Requests answered, seconds, latencies, failures, and the service's CPU seconds, for
    ``clients`` clients during ``--seconds``."""
    service_cpu = tree_cpu_seconds(pid)
    count, elapsed, latencies, failed = run_clients(port, texts, clients, args.batch, args.seconds)
    return count, elapsed, latencies, failed, tree_cpu_seconds(pid) - service_cpu


def measure_floor(model_dir: str, texts: List[str], backend: str, args: argparse.Namespace, label: str,
                  cpus: Optional[Set[int]], raw_cpu_rate: float) -> List[str]:
    """The floor service's rows (see the module docstring), one per client count and app
    (``--floor_apps``: wenxin's own ASGI app, Starlette's, the order alternating by round)."""
    rows = []
    for round_index in range(args.floor_rounds):
        apps = list(args.floor_apps) if round_index % 2 == 0 else list(reversed(args.floor_apps))
        for app_name in apps:
            proc, port = start_service(model_dir, 1, backend, cpus, floor_of=label, batch=args.batch,
                                       app_name=app_name)
            try:
                run_clients(port, texts, 2, args.batch, 2.0)  # warm-up
                raw_us = args.batch / raw_cpu_rate * 1e6  # the raw predictor's CPU for one request's texts
                for clients in args.clients:
                    count, _, _, failed, cpu = cpu_per_request(proc.pid, port, texts, clients, args)
                    floor_us = cpu / count * 1e6
                    rows.append(f"| {label} | {backend} | {app_name} | {clients} | {raw_us:.0f} | {floor_us:.0f} | "
                                f"{raw_us / (raw_us + floor_us):.2f} | {failed} |")
            finally:
                proc.terminate()
                proc.wait(timeout=90)
    return rows


def measure(model_dir: str, texts: List[str], backend: str, args: argparse.Namespace, label: str) -> List[str]:
    everywhere = os.sched_getaffinity(0)
    cpus = set(sorted(everywhere)[1:]) if args.pin else None  # the service's CPUs
    raws = sorted((raw_predictor(model_dir, label, args.batch, args.seconds, backend, cpus)
                   for _ in range(max(1, args.raw_runs))), key=lambda raw: raw[2])
    raw_rate, raw_batch, raw_cpu_rate = raws[len(raws) // 2]  # the run of the median texts per CPU-second
    proc, port = start_service(model_dir, args.workers, backend, cpus)
    if args.pin:  # the clients (threads of this process) on the first CPU only
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    try:
        run_clients(port, texts, 2, args.batch, 2.0)  # warm-up: every worker loaded, oneDNN measured
        for clients in args.clients:
            count, elapsed, latencies, failed, service_cpu = cpu_per_request(proc.pid, port, texts, clients, args)
            latencies.sort()
            p50 = statistics.median(latencies)
            p99 = latencies[int(0.99 * (len(latencies) - 1))]
            rate, cpu_rate = count * args.batch / elapsed, count * args.batch / service_cpu
            print(f"| {label} | {backend} | {raw_rate:.0f} ({raw_batch * 1000:.2f} ms) | {clients} | {rate:.0f} | "
                  f"{rate / raw_rate:.2f} | {raw_cpu_rate:.0f} | {cpu_rate:.0f} | {cpu_rate / raw_cpu_rate:.2f} | "
                  f"{p50 * 1000:.1f} | {p99 * 1000:.1f} | {p99 / p50:.1f} | {failed} |", flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=90)
        os.sched_setaffinity(0, everywhere)
    if not args.floor:
        return []
    try:
        if args.pin:
            os.sched_setaffinity(0, {min(everywhere)})
        return measure_floor(model_dir, texts, backend, args, label, cpus, raw_cpu_rate)
    finally:
        os.sched_setaffinity(0, everywhere)


def main() -> None:
    from small_models import MODELS, sample_texts, trained_model
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS, choices=MODELS)
    parser.add_argument("--model_dir", default="", help="serve this exported folder instead (texts of --models' kind)")
    parser.add_argument("--backends", nargs="+", default=["paddle", "onnxruntime"], choices=["paddle", "onnxruntime"])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16, 50])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)),
                        help="service processes (default: one per core)")
    parser.add_argument("--raw_runs", type=int, default=3, help="fresh processes timing the raw predictor (the median)")
    parser.add_argument("--pin", action="store_true",
                        help="clients on the first CPU; the service (one worker per other CPU) and the raw predictor "
                             "on the others")
    parser.add_argument("--floor", action="store_true",
                        help="also measure the HTTP layer's own CPU a request (see the module docstring)")
    parser.add_argument("--raw", default="", help=argparse.SUPPRESS)  # the raw predictor's own process
    parser.add_argument("--floor_apps", nargs="+", default=["wenxin"], choices=["wenxin", "starlette"],
                        help="--floor: the apps measured (starlette: the same routes on Starlette)")
    parser.add_argument("--floor_rounds", type=int, default=1, help="--floor: rounds, the apps' order alternating")
    parser.add_argument("--floor_serve", default="", help=argparse.SUPPRESS)  # the floor service's own process
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pin:
        if len(os.sched_getaffinity(0)) < 2:
            parser.error("--pin needs two CPUs or more")
        if "--workers" not in sys.argv:
            args.workers = len(os.sched_getaffinity(0)) - 1
    if args.raw:
        time_predictor(args.raw, sample_texts(args.models[0]), args.batch, args.seconds, args.backends[0])
        return
    if args.floor_serve:
        serve_floor(args.floor_serve, args.models[0], args.port, args.batch, args.backends[0], args.floor_apps[0])
        return
    placement = "; clients on the first CPU, the service and raw predictor on the others" if args.pin else ""
    print(f"{args.batch} texts per request, {args.workers} workers{placement}; raw predictor: texts/s (ms a batch); "
          f"{load_note()} at the start")
    print("| model | backend | raw predictor | clients | texts/s | / raw | raw texts/CPU-s | served texts/CPU-s | "
          "/ raw (CPU) | p50 ms | p99 ms | p99 / p50 | failed |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    floors: List[str] = []
    for name in args.models:
        model_dir = args.model_dir or trained_model(name, tempfile.mkdtemp(prefix=f"serving-{name}-"))
        backends = [b for b in args.backends if b == "paddle" or os.path.isfile(os.path.join(model_dir, "model.onnx"))]
        for backend in backends:
            floors += measure(model_dir, sample_texts(name), backend, args, name)
    if floors:
        print("\nThe HTTP layer alone (--floor): µs of CPU a request; the share of the raw predictor a service "
              "could reach with it (raw / (raw + floor))")
        print("| model | backend | app | clients | raw predictor: µs of CPU a request | floor: µs of CPU a request | "
              "raw / (raw + floor) | failed |")
        print("|---|---|---|---|---|---|---|---|")
        print("\n".join(floors))


if __name__ == "__main__":
    main()
