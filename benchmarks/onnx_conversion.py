"""What converting an ERNIE 4.5 export to ONNX Runtime costs (issue 69): ``export_onnx`` on a
model folder's cached export (``advance_pair`` in float32, checked against Paddle, and its int8
copy), this checkout against another (``--baseline_repo``), alternating, each conversion in a
fresh process on a fresh copy of the export's Paddle files.

The folder is ERNIE-4.5-0.3B's shape (``ernie45_decoding.SHAPES["0.3b"]``) at random
initialization with ``--layers`` layers (18: the model's 1.44 GB of float32 weights; 32: 2.24 GB,
over ONNX's 2 GB limit for one file), written by wenxin's own ``-PT`` writer in bfloat16, with the
test fixture's tokenizer (ids only matter). For each conversion it prints wall and CPU seconds
(the conversion's child processes included), the peak resident memory of the process, of its
largest child and of each child in turn (the conversion, the checks and the quantizer each run in
one), the ONNX files written and their sizes, and the logged differences from Paddle's logits; the
machine's load beside.

    python benchmarks/onnx_conversion.py --layers 18 --baseline_repo /tmp/before --rounds 1
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
from typing import Any, Dict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ernie45_decoding import COMMON, SHAPES  # noqa: E402
from measure import load_note  # noqa: E402
from model_folder_resources import WRITE  # noqa: E402  (a -PT folder at random initialization)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(REPO, "tests", "fixtures", "ernie45", "tied")
TOKENIZER = ("tokenizer.model", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")

BUILD = """
import sys
from wenxin.model_folders import FolderSettings, export_of_folder
print("EXPORT", export_of_folder(sys.argv[1], FolderSettings(graph_mode="dynamic")))
"""

CONVERT = """
import json, logging, os, resource, subprocess, sys, tempfile, time
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="LOG %(message)s")
steps = []

def measured(command, **settings):  # subprocess.run, with each child's own peak (wait4)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(command, stdout=out, stderr=err, text=True, env=settings.get("env"))
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        steps.append([next((c.split(".")[-1] for c in command if c.startswith("wenxin.")), command[0]),
                      usage.ru_maxrss * 1024])
        out.seek(0), err.seek(0)
        return subprocess.CompletedProcess(command, child.returncode, out.read(), err.read())

subprocess.run = measured
from wenxin.inference.onnx_export import export_onnx
started, cpu = time.perf_counter(), time.process_time()
export_onnx(sys.argv[1], {})
children = resource.getrusage(resource.RUSAGE_CHILDREN)
with open("/proc/self/status") as f:
    peak = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM"))
print("RESULT " + json.dumps({"wall": time.perf_counter() - started,
                              "cpu": time.process_time() - cpu + children.ru_utime + children.ru_stime,
                              "peak": peak, "child_peak": children.ru_maxrss * 1024,
                              "steps": [step for step in steps if step[0].startswith("onnx_")]}))
"""


def folder_of(layers: int, work: str) -> str:
    """A ``-PT`` folder of the 0.3B shape with ``layers`` layers (written once into ``work``)."""
    folder = os.path.join(work, f"folder-{layers}")
    if os.path.isdir(folder):
        return folder
    source = os.path.join(work, f"source-{layers}")
    os.makedirs(source, exist_ok=True)
    with open(os.path.join(FIXTURE, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    config.update(SHAPES["0.3b"], **COMMON, num_hidden_layers=layers)
    with open(os.path.join(source, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    for name in TOKENIZER:
        shutil.copy(os.path.join(FIXTURE, name), os.path.join(source, name))
    subprocess.run([sys.executable, "-c", WRITE, folder, source], check=True, env={**os.environ, "PYTHONPATH": REPO})
    return folder


def export_of(folder: str, work: str) -> str:
    """The folder's cached export (its Paddle step programs), built by this checkout."""
    env = {**os.environ, "PYTHONPATH": REPO, "WENXIN_CACHE": os.path.join(work, "cache"), "GLOG_minloglevel": "2"}
    done = subprocess.run([sys.executable, "-c", BUILD, folder], check=True, capture_output=True, text=True, env=env)
    return done.stdout.split("EXPORT")[-1].strip()


def convert(export: str, repo: str, work: str) -> Dict[str, Any]:
    """``export_onnx`` by the wenxin of ``repo`` on a fresh copy of ``export``'s Paddle files."""
    target = tempfile.mkdtemp(prefix="convert-", dir=work)
    try:
        for name in os.listdir(export):
            if not name.endswith((".onnx", ".data")):
                source = os.path.join(export, name)
                (shutil.copytree if os.path.isdir(source) else shutil.copy)(source, os.path.join(target, name))
        env = {**os.environ, "PYTHONPATH": repo, "GLOG_minloglevel": "2", "OMP_NUM_THREADS": "1"}
        done = subprocess.run([sys.executable, "-c", CONVERT, target], capture_output=True, text=True, env=env,
                              cwd=repo)  # (python -c puts its working folder first on the path)
        if done.returncode != 0:
            return {"error": (done.stderr.strip().splitlines() or ["?"])[-1]}
        result: Dict[str, Any] = json.loads(done.stdout.split("RESULT ")[-1])
        result["files"] = {name: os.path.getsize(os.path.join(target, name)) for name in sorted(os.listdir(target))
                           if ".onnx" in name}
        result["log"] = [line[4:] for line in done.stdout.splitlines() if line.startswith("LOG exported")]
        return result
    finally:
        shutil.rmtree(target, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=18)
    parser.add_argument("--baseline_repo", default="", help="another checkout to convert with, alternating")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--work", default="", help="a folder to work in (default: a new temporary one)")
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="onnx-conversion-")
    os.makedirs(work, exist_ok=True)
    started = time.perf_counter()
    export = export_of(folder_of(args.layers, work), work)
    weights = os.path.getsize(os.path.join(export, "steps.pdiparams"))
    print(f"0.3B shape, {args.layers} layers: {weights / 1e9:.2f} GB of float32 weights; export {export} "
          f"({time.perf_counter() - started:.0f} s to write and build)")
    repos = {"this": REPO, **({"baseline": args.baseline_repo} if args.baseline_repo else {})}
    for round_ in range(args.rounds):
        order = list(repos.items()) if round_ % 2 == 0 else list(reversed(repos.items()))
        for name, repo in order:
            print(f"{load_note()}; round {round_ + 1}, {name} converts:", flush=True)
            result = convert(export, repo, work)
            if "error" in result:
                print(f"  failed: {result['error']}")
                continue
            print(f"  {result['wall']:.1f} s, {result['cpu']:.1f} CPU-s; peak {result['peak'] / 2**30:.2f} GiB, "
                  f"largest child {result['child_peak'] / 2**30:.2f} GiB")
            print("  each child's peak: " + ", ".join(f"{step} {peak / 2**30:.2f} GiB" for step, peak in result["steps"]))
            print("  files: " + ", ".join(f"{n} {b / 1e9:.3f} GB" for n, b in result["files"].items()))
            for line in result["log"]:
                print(f"  {line}")


if __name__ == "__main__":
    main()
