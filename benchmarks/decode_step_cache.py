"""One decoding step of ``ROWS`` rows after ``CONTEXT`` cached tokens on the Paddle backend, one
thread, in one process: CPU and wall milliseconds a row (the median of 5 steps after a warm-up).

``new``: an export whose ``advance`` reads each layer's cache in place, fed by ``KVSlots`` (the
service's batch since issue 69, point 2), the predictor reading the arrays where they lie
(``PaddleBackend.shares_inputs``). ``copy``: the same, with the predictor copying its inputs into
tensors of its own first (as it did before). ``old``: the padded cache path (``extend``: the whole
cache in, the grown cache out), which an export made before it (run this script with that
version's wenxin on ``PYTHONPATH`` and its ``tasks`` on ``WENXIN_TASK_PATH``, e.g. a ``git
worktree`` of it) runs as it did. Alternate them in separate processes and compare medians::

    python benchmarks/decode_step_cache.py new FOLDER CACHE_DIR 16 512
    python benchmarks/decode_step_cache.py copy FOLDER CACHE_DIR 16 512
    WENXIN_TASK_PATH=OLD/tasks PYTHONPATH=OLD python benchmarks/decode_step_cache.py old FOLDER CACHE_DIR2 16 512
"""
import json
import os
import sys
import time

import numpy as np


def main() -> None:
    which, folder, cache_dir, rows, context = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    os.environ["WENXIN_CACHE"] = cache_dir
    from wenxin.inference.predictor import Predictor
    if which == "copy":
        from wenxin.inference.paddle_backend import PaddleBackend
        PaddleBackend.shares_inputs = False
    from wenxin.model_folders import FolderSettings, export_of_folder
    predictor = Predictor(export_of_folder(folder, FolderSettings(graph_mode="dynamic")), backend="paddle",
                          num_threads=1)
    empty = predictor.advance_cache
    layers, heads, dim = empty.shape[0], empty.shape[3], empty.shape[5]
    cache = np.random.default_rng(0).standard_normal((layers, 2, rows, heads, context, dim)).astype(np.float32)
    tokens, positions = np.arange(3, 3 + rows), np.full(rows, context)
    if which in ("new", "copy"):
        from wenxin.models.kv_slots import KVSlots
        slots = KVSlots(empty)
        slots.append(cache)

        def step() -> None:
            out = predictor.run_step("advance", {"tokens": tokens[:, None], "positions": positions[:, None],
                                                 **slots.inputs(1)})
            slots.write(out["new_cache"])
            slots.lengths -= 1  # the next step is after the same number of tokens
    else:
        visible = np.ones((rows, context + 1), np.float32)

        def step() -> None:
            predictor.run_step("extend", {"tokens": tokens, "positions": positions, "cache": cache, "visible": visible})
    step()
    times = []
    for _ in range(5):
        cpu, wall = time.process_time(), time.perf_counter()
        step()
        times.append((time.process_time() - cpu, time.perf_counter() - wall))
    print(json.dumps({"which": which, "rows": rows, "context": context,
                      "cpu_ms_a_row": round(sorted(t[0] for t in times)[2] * 1e3 / rows, 2),
                      "wall_ms_a_row": round(sorted(t[1] for t in times)[2] * 1e3 / rows, 2)}))


if __name__ == "__main__":
    main()
