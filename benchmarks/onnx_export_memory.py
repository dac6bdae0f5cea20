"""What converting a run's result to ONNX (``trainer.save_onnx``, on by default) adds to the
training process (issue 56: on a large BoW model it raised the run's peak from 1.94 to 3.50 GB).

Each trial trains the README example for ``--steps`` steps in a fresh process, with
``save_onnx`` on or off (A/B, alternating which goes first each round), and reports that
process's own peak resident memory (``VmHWM``: the conversion and its check run in child
processes and are not counted) and its wall and CPU time. The model's size (its exported
``inference.pdiparams``) is printed beside them: the conversion may raise the run's peak by at
most that much.

    python examples/prepare_sentiment_data.py   # once
    python benchmarks/onnx_export_memory.py --rounds 2 --steps 20
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Dict, List

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "text_classification_bow.json")

# one run, in the child: train, then read this process's own peak (children excluded) and CPU time
TRIAL = """
import json, os, resource, sys, time
from wenxin.runner import train
started = time.time()
train(sys.argv[1], sys.argv[2:])
usage = resource.getrusage(resource.RUSAGE_SELF)
with open("/proc/self/status") as f:
    peak = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM"))
print("TRIAL " + json.dumps({"peak": peak, "wall": time.time() - started, "cpu": usage.ru_utime + usage.ru_stime}))
"""


def trial(save_onnx: bool, steps: int, folder: str, round_: int) -> Dict[str, Any]:
    output = os.path.join(folder, f"onnx_{save_onnx}_{round_}")
    overrides = [f"trainer.max_steps={steps}", f"trainer.output_path={output}", f"trainer.save_onnx={str(save_onnx).lower()}",
                 "trainer.is_eval_test=0"]
    proc = subprocess.run([sys.executable, "-c", TRIAL, EXAMPLE, *overrides], cwd=REPO, capture_output=True,
                          text=True, env={**os.environ, "GLOG_minloglevel": "2", "PYTHONPATH": REPO})
    if proc.returncode != 0:
        sys.exit(proc.stderr[-3000:])
    result: Dict[str, Any] = json.loads(next(line for line in proc.stdout.splitlines()
                                              if line.startswith("TRIAL "))[6:])
    params = os.path.join(output, "checkpoints", "best", "inference", "inference.pdiparams")
    result["model_bytes"] = os.path.getsize(params) if os.path.isfile(params) else 0
    result["onnx_written"] = os.path.isfile(os.path.join(os.path.dirname(params), "model.onnx"))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    results: Dict[bool, List[Dict[str, Any]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(args.rounds):
            for save_onnx in ((True, False) if round_ % 2 == 0 else (False, True)):
                results[save_onnx].append(trial(save_onnx, args.steps, folder, round_))
    load = os.getloadavg()[0]
    print(f"load average at the end: {load:.2f} on {os.cpu_count()} cores; {args.steps} steps a run")
    for save_onnx, runs in results.items():
        peak = max(r["peak"] for r in runs) / 2**20
        print(f"save_onnx={str(save_onnx).lower():5s}: peak {peak:.0f} MB (largest of {len(runs)}), "
              f"wall {min(r['wall'] for r in runs):.1f} s, CPU {min(r['cpu'] for r in runs):.1f} s (best of "
              f"{len(runs)}); model {runs[0]['model_bytes'] / 2**20:.1f} MB; model.onnx written: "
              f"{runs[0]['onnx_written']}")
    added = (max(r["peak"] for r in results[True]) - max(r["peak"] for r in results[False])) / 2**20
    print(f"the conversion added {added:.0f} MB to the run's peak")


if __name__ == "__main__":
    main()
