"""One checkout's ``wenxin serve`` on an export under ``generation_serving.py``'s load: run it for
two checkouts (an A/B, alternating) on the same export. The requests carry no decoding settings,
so the export's own are used (an ERNIE 4.5 model folder's export samples, as the folder's
``generation_config.json`` asks); ``--backend`` and the other flags go to ``wenxin serve``::

    python benchmarks/served_ab.py OLD_CHECKOUT EXPORT 16 20 --backend onnxruntime-int8
    python benchmarks/served_ab.py . EXPORT 16 20 --backend onnxruntime-int8

prints tokens a second, time between tokens p50/p99 (ms) and time to the first token p50 (s).
"""
import asyncio
import json
import os
import sys

from generation_serving import closed_loop, free_port, launched, request_bodies


def main() -> None:
    repo, export, streams, seconds = os.path.abspath(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    port = free_port()
    env = {**os.environ, "GLOG_minloglevel": "2", "PYTHONPATH": repo, "OMP_NUM_THREADS": "1"}
    server = launched([sys.executable, "-m", "wenxin", "serve", "--model_dir", export, "--port", str(port),
                       "--generation_timeout", "3600", "--max_new_tokens", "72", "--max_rows", str(streams),
                       "--num_threads", "1", "--max_waiting", "1000", *sys.argv[5:]], port, env, "/tmp")
    try:
        result = asyncio.run(closed_loop(port, request_bodies("ernie45", 48), streams, seconds, server.pid))
        print(json.dumps({"checkout": repo, "streams": streams, "tokens_per_s": round(result["tokens_per_s"], 1),
                          "tbt_p50_ms": round(result["tbt_p50"] * 1e3, 1), "tbt_p99_ms": round(result["tbt_p99"] * 1e3, 1),
                          "ttft_p50_s": round(result["ttft_p50"], 3)}))
    finally:
        server.terminate()
        server.wait(120)


if __name__ == "__main__":
    main()
