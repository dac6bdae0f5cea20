"""One checkout's ``wenxin serve`` on an export under ``generation_serving.py``'s load: run it for
two checkouts (an A/B, alternating) on the same export. The requests carry no decoding settings,
so the export's own are used (an ERNIE 4.5 model folder's export samples, as the folder's
``generation_config.json`` asks) unless ``--strategy`` names one (``greedy``: as
``served_against_llama_cpp.py`` asks), ``--model erniegen`` sends an ERNIE-Gen export's rows
instead of chat questions, ``--new N`` asks for N tokens a request on average (48; each from N/2
to 3N/2); ``--backend`` and the other flags go to ``wenxin serve``.
Two checkouts on one export, or one checkout on two exports (an export's programs against an
older export's)::

    python benchmarks/served_ab.py OLD_CHECKOUT EXPORT 16 20 --backend onnxruntime-int8
    python benchmarks/served_ab.py . EXPORT 16 20 --backend onnxruntime-int8
    python benchmarks/served_ab.py . OLDER_EXPORT 16 20 --strategy greedy --backend onnxruntime-int8

prints tokens a second and a CPU-second, time between tokens p50/p99 (ms) and time to the first token p50 (s).
"""
import asyncio
import json
import os
import sys

from generation_serving import closed_loop, free_port, launched, request_bodies


def main() -> None:
    repo, export, streams, seconds = os.path.abspath(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    flags, settings, model = sys.argv[5:], {}, "ernie45"
    if "--strategy" in flags:
        at = flags.index("--strategy")
        settings["strategy"] = flags[at + 1]
        flags = flags[:at] + flags[at + 2:]
    new = 48  # tokens a request asks for
    if "--new" in flags:  # longer answers: --max_new_tokens follows
        at = flags.index("--new")
        new = int(flags[at + 1])
        flags = flags[:at] + flags[at + 2:]
    if "--model" in flags:  # whose requests: ernie45 (chat questions) or erniegen (rows of two sources)
        at = flags.index("--model")
        model = flags[at + 1]
        flags = flags[:at] + flags[at + 2:]
    port = free_port()
    env = {**os.environ, "GLOG_minloglevel": "2", "PYTHONPATH": repo, "OMP_NUM_THREADS": "1"}
    server = launched([sys.executable, "-m", "wenxin", "serve", "--model_dir", export, "--port", str(port),
                       "--generation_timeout", "3600", "--max_new_tokens", str(new * 3 // 2), "--max_rows", str(streams),
                       "--num_threads", "1", "--max_waiting", "1000", *flags], port, env, "/tmp")
    try:
        bodies = [{**body, **settings} for body in request_bodies(model, new)]
        result = asyncio.run(closed_loop(port, bodies, streams, seconds, server.pid))
        print(json.dumps({"checkout": repo, "export": export, **settings, "streams": streams,
                          "new": new, "tokens_per_s": round(result["tokens_per_s"], 1),
                          "tokens_per_cpu_s": round(result["tokens_per_cpu_s"], 1),
                          "tbt_p50_ms": round(result["tbt_p50"] * 1e3, 1), "tbt_p99_ms": round(result["tbt_p99"] * 1e3, 1),
                          "ttft_p50_s": round(result["ttft_p50"], 3)}))
    finally:
        server.terminate()
        server.wait(120)


if __name__ == "__main__":
    main()
