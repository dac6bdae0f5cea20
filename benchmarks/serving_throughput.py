"""Throughput of ``wenxin serve`` against the raw predictor, in one run.

    python benchmarks/serving_throughput.py [--model_dir DIR] [--clients 1 4 16 50] [--batch 16]
        [--seconds 8] [--workers CORES] [--backend paddle|onnxruntime]

Without --model_dir it trains and exports a small BoW classifier on generated reviews first. The
service runs as its own ``wenxin serve`` process; the clients are threads of this process, each
with a kept-open connection, posting ``--batch`` texts per request. The baseline is the raw
``Predictor`` of the same model on batches of the same size, measured here in the same run.
Reports texts/s, its ratio to the raw predictor, p50/p99 latency, and failed requests.
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
from typing import List, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))
os.environ.setdefault("GLOG_minloglevel", "2")


def small_model(folder: str, onnx: bool = False) -> str:
    from conftest import make_sentences, task_config, write_tsv
    from wenxin.config.loader import load_config
    from wenxin.runner import build_trainer
    data = os.path.join(folder, "data")
    for name, seed, n in (("train", 1, 2000), ("dev", 2, 200), ("test", 3, 200)):
        write_tsv(os.path.join(data, f"{name}.tsv"), make_sentences(n, seed))
    path = os.path.join(folder, "task.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(task_config(data, os.path.join(folder, "out"), epoch=1, visualdl=False), f)
    trainer = build_trainer(load_config(path))
    trainer.do_train()
    model_dir = trainer.export_inference(os.path.join(folder, "model"))
    if onnx:
        from wenxin.inference.onnx_export import export_onnx
        export_onnx(model_dir, trainer.readers["dev_reader"].collate_rows(list(range(16))))
    return model_dir


def review_texts(n: int = 512) -> List[str]:
    rng = random.Random(0)
    return ["".join(rng.choice("好坏的了书质量很不错差东西") for _ in range(rng.randint(5, 60))) for _ in range(n)]


def raw_predictor(model_dir: str, batch: int, seconds: float, backend: str) -> Tuple[float, float]:
    """Texts/s and median seconds per batch of the Predictor itself."""
    from wenxin.inference.predictor import Predictor
    predictor = Predictor(model_dir, backend=backend)
    texts, rng = review_texts(), random.Random(1)
    times = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        rows = [[t] for t in rng.sample(texts, batch)]
        start = time.perf_counter()
        predictor.predict(rows, batch_size=batch)
        times.append(time.perf_counter() - start)
    return batch * len(times) / sum(times), statistics.median(times)


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


def run_clients(port: int, clients: int, batch: int, seconds: float) -> Tuple[int, float, List[float], int]:
    """``clients`` threads, each with a kept-open connection, posting ``batch`` texts per request.

    The load generator is a lean one (requests encoded beforehand, responses framed by their
    Content-Length) because it shares the machine's cores with the service: http.client's own
    work per request took 0.25 cores at 1,000 requests/s. Every 20th answer is checked in full:
    one prediction per text sent."""
    latencies: List[float] = []
    failures = [0]
    lock = threading.Lock()
    texts = review_texts()
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


def start_service(model_dir: str, workers: int, backend: str) -> Tuple[subprocess.Popen, int]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "wenxin.cli", "serve", "--model_dir", model_dir, "--port", str(port),
                             "--workers", str(workers), "--max_connections", "1024", "--backend", backend],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": REPO})
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_dir", default="")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16, 50])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)),
                        help="service processes (default: one per core)")
    parser.add_argument("--backend", choices=["paddle", "onnxruntime"], default="paddle")
    args = parser.parse_args()
    model_dir = args.model_dir or small_model(tempfile.mkdtemp(), onnx=args.backend == "onnxruntime")
    raw_rate, raw_batch = raw_predictor(model_dir, args.batch, args.seconds, args.backend)
    print(f"model: {model_dir}; backend {args.backend}; {args.batch} texts per request; raw predictor: "
          f"{raw_rate:.0f} texts/s, {raw_batch * 1000:.2f} ms a batch")
    proc, port = start_service(model_dir, args.workers, args.backend)
    try:
        run_clients(port, 2, args.batch, 1.0)  # warm-up
        print("| clients | texts/s | / raw predictor | p50 ms | p99 ms | p99 / p50 | failed |")
        print("|---|---|---|---|---|---|---|")
        for clients in args.clients:
            count, elapsed, latencies, failed = run_clients(port, clients, args.batch, args.seconds)
            latencies.sort()
            p50 = statistics.median(latencies)
            p99 = latencies[int(0.99 * (len(latencies) - 1))]
            rate = count * args.batch / elapsed
            print(f"| {clients} | {rate:.0f} | {rate / raw_rate:.2f} | {p50 * 1000:.1f} | {p99 * 1000:.1f} | "
                  f"{p99 / p50:.1f} | {failed} |", flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=60)


if __name__ == "__main__":
    main()
