"""What a downloaded ERNIE 4.5 folder costs to serve on this CPU (issue 68, point 4): disk and
memory of ``wenxin chat/serve/predict --model_dir FOLDER``, measured at ERNIE-4.5-0.3B's shape.

A folder of ERNIE-4.5-0.3B's config (``ernie45_decoding.SHAPES["0.3b"]``: 18 layers, 1024 wide,
vocabulary 103,424, tied) is written at random initialization by wenxin's own ``-PT`` writer, in
bfloat16 as Baidu publishes it, with the test fixture's tokenizer (ids only matter here). Then,
each in a fresh process that reports its own peak resident memory and CPU time:

- ``first start``: ``export_of_folder`` builds the folder's decode step programs into the cache
  (what the first ``wenxin chat``/``serve``/``predict`` of a folder does);
- ``second start``: the same call, now from the cache;
- ``serving``: the cached export loaded by ``Predictor`` (what ``wenxin serve`` runs) and a greedy
  answer of ``--new`` tokens after a 16-token prompt.

It prints the folder's size, the cache entry's size, and each process's wall seconds, CPU seconds
and peak memory, with the machine's load.

    python benchmarks/model_folder_resources.py [--new 16] [--graph_mode dynamic]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ernie45_decoding import COMMON, SHAPES  # noqa: E402
from ernie45_memory import PEAK  # noqa: E402
from measure import load_note  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(REPO, "tests", "fixtures", "ernie45", "tied")

WRITE = """
import json, os, shutil, sys, paddle
from wenxin.models.ernie45 import Ernie45ForCausalLM
from wenxin.models.ernie45_folder import Ernie45Config
from wenxin.models.ernie45_export import pt_layout_weights, write_pt_folder
folder, source = sys.argv[1], sys.argv[2]
paddle.seed(7)
with open(os.path.join(source, "config.json")) as f:
    config = Ernie45Config.from_dict(json.load(f), "config.json")
weights = pt_layout_weights(Ernie45ForCausalLM(config).state_dict())
os.makedirs(folder)
write_pt_folder(folder, weights, source, "bfloat16")
"""

BUILD = """
import sys, time
from wenxin.model_folders import FolderSettings, export_of_folder
print("EXPORT", export_of_folder(sys.argv[1], FolderSettings(graph_mode=sys.argv[2])))
"""

SERVE = """
import json, sys, numpy as np
from wenxin.inference.predictor import Predictor
from wenxin.models.decoding import DecodeSettings, SteppedModel, decode
predictor = Predictor(sys.argv[1])
prompt = {"ids": np.asarray([list(range(3, 19))], dtype="int64")}
decode(SteppedModel(predictor.run_step, masked=True), prompt, DecodeSettings(strategy="greedy", max_new_tokens=int(sys.argv[2])))
"""


def size_of(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(top, name)) for top, _, names in os.walk(folder) for name in names)


def measured(code: str, *args: str, env: dict) -> dict:
    """Run ``code`` in a fresh process: its wall and CPU seconds, peak memory and output."""
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(code)
    start, before = time.perf_counter(), os.times()
    done = subprocess.run([sys.executable, "-c", PEAK, f.name, *args], capture_output=True, text=True, env=env)
    after = os.times()
    os.remove(f.name)
    if done.returncode != 0:
        raise SystemExit(f"failed:\n{done.stderr[-3000:]}")
    peak = int(done.stderr.split("PEAK_RSS_KIB")[-1].split()[0])
    return {"wall": time.perf_counter() - start, "cpu": after.children_user + after.children_system
            - before.children_user - before.children_system, "peak_gib": peak / 2 ** 20, "out": done.stdout}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--new", type=int, default=16, help="tokens the serving process answers")
    parser.add_argument("--graph_mode", default="dynamic", choices=["dynamic", "static"])
    parser.add_argument("--work", default="", help="a folder to work in (default: a new temporary one)")
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="model-folder-resources-")
    env = {**os.environ, "GLOG_minloglevel": "2", "PYTHONPATH": REPO, "WENXIN_CACHE": os.path.join(work, "cache"),
           "OMP_NUM_THREADS": "1"}
    source, folder = os.path.join(work, "source"), os.path.join(work, "ERNIE-4.5-0.3B-shape-PT")
    shutil.rmtree(source, ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(env["WENXIN_CACHE"], ignore_errors=True)
    os.makedirs(source)
    for name in ("tokenizer.model", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        shutil.copy(os.path.join(FIXTURE, name), os.path.join(source, name))
    with open(os.path.join(source, "config.json"), "w") as f:
        json.dump({"model_type": "ernie4_5", "architectures": ["Ernie4_5ForCausalLM"], **SHAPES["0.3b"], **COMMON}, f)
    measured(WRITE, folder, source, env=env)
    print(f"ERNIE-4.5-0.3B shape, random weights in bfloat16: folder {size_of(folder) / 1e9:.2f} GB; "
          f"{load_note()}; one thread")
    rows = []
    first = measured(BUILD, folder, args.graph_mode, env=env)
    export = first["out"].split("EXPORT")[-1].strip()
    rows.append(("first start (builds the cache entry)", first))
    rows.append(("second start (from the cache)", measured(BUILD, folder, args.graph_mode, env=env)))
    rows.append((f"serving: the export loaded, {args.new} tokens answered", measured(SERVE, export, str(args.new),
                                                                                   env=env)))
    print(f"cache entry ({args.graph_mode}): {size_of(export) / 1e9:.2f} GB")
    print("| process | wall s | CPU s | peak memory |")
    print("|---|---|---|---|")
    for name, row in rows:
        print(f"| {name} | {row['wall']:.1f} | {row['cpu']:.1f} | {row['peak_gib']:.2f} GiB |")


if __name__ == "__main__":
    main()
