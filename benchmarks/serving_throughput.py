"""Throughput of ``wenxin serve``: concurrent clients posting batches to /predict.

    python benchmarks/serving_throughput.py [--model_dir DIR] [--workers 1 2] [--clients 4] [--batch 16]

Without --model_dir it trains and exports a small BoW classifier on generated reviews first.
Reports requests/s, texts/s and latency percentiles per worker count, all in one run.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from typing import List

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))
os.environ.setdefault("GLOG_minloglevel", "2")


def small_model(folder: str) -> str:
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
    return trainer.export_inference(os.path.join(folder, "model"))


def run_clients(port: int, clients: int, batch: int, seconds: float) -> tuple:
    latencies: List[float] = []
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds
    rng = random.Random(0)
    texts = ["".join(rng.choice("好坏的了书质量很不错差东西") for _ in range(rng.randint(5, 60))) for _ in range(256)]

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while time.perf_counter() < deadline:
            body = json.dumps({"texts": rng.sample(texts, batch)})
            start = time.perf_counter()
            conn.request("POST", "/predict", body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            assert response.status == 200
            with lock:
                latencies.append(time.perf_counter() - start)
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(latencies), time.perf_counter() - start, latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_dir", default="")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    from wenxin.inference.server import create_server, serve_in_thread
    model_dir = args.model_dir or small_model(tempfile.mkdtemp())
    print(f"model: {model_dir}; {args.clients} clients, {args.batch} texts per request, {args.seconds:.0f} s each")
    print("| workers | requests/s | texts/s | p50 latency ms | p95 latency ms |")
    print("|---|---|---|---|---|")
    for workers in args.workers:
        server, _ = create_server(model_dir, port=0, workers=workers)
        serve_in_thread(server)
        count, elapsed, latencies = run_clients(server.server_port, args.clients, args.batch, args.seconds)
        server.shutdown()
        server.server_close()
        latencies.sort()
        print(f"| {workers} | {count / elapsed:.1f} | {count * args.batch / elapsed:.0f} | "
              f"{statistics.median(latencies) * 1000:.1f} | {latencies[int(0.95 * (len(latencies) - 1))] * 1000:.1f} |")


if __name__ == "__main__":
    main()
