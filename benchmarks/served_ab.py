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
from typing import List, Optional

from generation_serving import closed_loop, free_port, launched, request_bodies


def taken(flags: List[str], name: str) -> Optional[str]:
    """The value of ``name`` among ``flags``, removed from them (None: not there); the rest go to
    ``wenxin serve``."""
    if name not in flags:
        return None
    at = flags.index(name)
    value = flags[at + 1]
    del flags[at:at + 2]
    return value


def main() -> None:
    repo, export, streams, seconds = os.path.abspath(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    flags = sys.argv[5:]
    strategy = taken(flags, "--strategy")
    settings = {"strategy": strategy} if strategy else {}
    new = int(taken(flags, "--new") or 48)  # tokens a request asks for on average: --max_new_tokens follows
    model = taken(flags, "--model") or "ernie45"  # whose requests: ernie45 (chat questions) or erniegen (rows)
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
