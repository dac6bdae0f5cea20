"""What converting a run's result to ONNX (``trainer.save_onnx``, on by default) adds to the
training process (issue 56: on a large BoW model it raised the run's peak from 1.94 to 3.50 GB).

Each trial trains the README example for ``--steps`` steps in a fresh process, with
``save_onnx`` on or off (A/B, alternating which goes first each round), and reports that
process's own peak resident memory (``VmHWM``: the conversion and its check run in child
processes and are not counted), the largest child's peak (the conversion or the check), and
the run's wall and CPU time (its own and its children's). The model's size (its exported
``inference.pdiparams``) is printed beside them: the conversion may raise the run's peak by at
most that much. ``--emb_dims`` repeats it for larger models: the embedding width sets the size
(the table has one row per vocabulary word, 182,869 of them on the example's data).

    python examples/prepare_sentiment_data.py   # once
    python benchmarks/onnx_export_memory.py --rounds 2 --steps 20
    python benchmarks/onnx_export_memory.py --rounds 1 --steps 5 --emb_dims 64,256,512
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
children = resource.getrusage(resource.RUSAGE_CHILDREN)
with open("/proc/self/status") as f:
    peak = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM"))
print("TRIAL " + json.dumps({"peak": peak, "child_peak": children.ru_maxrss * 1024, "wall": time.time() - started,
                             "cpu": usage.ru_utime + usage.ru_stime + children.ru_utime + children.ru_stime}))
"""


def trial(save_onnx: bool, steps: int, folder: str, round_: int, emb_dim: int) -> Dict[str, Any]:
    output = os.path.join(folder, f"onnx_{save_onnx}_{round_}_{emb_dim}")
    overrides = [f"trainer.max_steps={steps}", f"trainer.output_path={output}", f"trainer.save_onnx={str(save_onnx).lower()}",
                 "trainer.is_eval_test=0", f"model.embedding.emb_dim={emb_dim}"]
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
    parser.add_argument("--emb_dims", default="64", help="comma-separated embedding widths (the example's: 64)")
    args = parser.parse_args()
    loads = []
    for emb_dim in (int(d) for d in args.emb_dims.split(",")):
        results: Dict[bool, List[Dict[str, Any]]] = {True: [], False: []}
        with tempfile.TemporaryDirectory() as folder:
            for round_ in range(args.rounds):
                for save_onnx in ((True, False) if round_ % 2 == 0 else (False, True)):
                    results[save_onnx].append(trial(save_onnx, args.steps, folder, round_, emb_dim))
                    loads.append(os.getloadavg()[0])
        print(f"emb_dim {emb_dim}: model {results[True][0]['model_bytes'] / 2**20:.1f} MB; {args.steps} steps a run")
        for save_onnx, runs in results.items():
            peak = max(r["peak"] for r in runs) / 2**20
            child = max(r["child_peak"] for r in runs) / 2**20
            print(f"  save_onnx={str(save_onnx).lower():5s}: run peak {peak:.0f} MB, largest child {child:.0f} MB "
                  f"(largest of {len(runs)}), wall {min(r['wall'] for r in runs):.1f} s, CPU with children "
                  f"{min(r['cpu'] for r in runs):.1f} s (best of {len(runs)}); model.onnx written: "
                  f"{runs[0]['onnx_written']}")
        added = (max(r["peak"] for r in results[True]) - max(r["peak"] for r in results[False])) / 2**20
        extra_wall = min(r["wall"] for r in results[True]) - min(r["wall"] for r in results[False])
        extra_cpu = min(r["cpu"] for r in results[True]) - min(r["cpu"] for r in results[False])
        print(f"  the conversion added {added:.0f} MB to the run's peak, {extra_wall:.1f} s wall, {extra_cpu:.1f} s CPU")
    print(f"load average after each run: {min(loads):.2f} to {max(loads):.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
