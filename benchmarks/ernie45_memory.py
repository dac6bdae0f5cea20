"""Memory and time of an ERNIE-4.5-0.3B-shaped SFT step on this CPU: LoRA against full
fine-tuning, with and without recompute (issue 40).

A random-init model of ERNIE-4.5-0.3B's config is built by PaddleFormers in its own virtual
environment (``--pf_python``) and saved as float32 safetensors; the tokenizer files come from the
test fixture (ids only matter here). Each setting runs ``wenxin train`` for ``--steps`` steps of
``--rows`` packed rows of ``--tokens`` tokens (the chat example's conversations), in a process of
its own, and reports that process's peak resident memory (its own ``getrusage``) and CPU
seconds a step. Float32 weights, as this CPU trains; a GPU in bfloat16 holds about half the
weights and activations.

    python examples/prepare_chat_data.py
    python benchmarks/ernie45_memory.py --tokens 1024 --rows 1 --steps 3 [--modes dynamic static]
        [--settings "LoRA r8" "LoRA r8 + recompute" full "full + recompute"]

(Static mode refuses ``recompute``: docs/performance.md says why.)
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
from ernie45_decoding import BUILD, COMMON, SHAPES  # noqa: E402
from measure import load_note  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# runs a script, then reports the process's own peak resident memory (KiB) on stderr
PEAK = ("import atexit, resource, runpy, sys\n"
        "atexit.register(lambda: print('PEAK_RSS_KIB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
        "file=sys.stderr))\n"
        "sys.argv = sys.argv[1:]\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n")
SETTINGS = {"LoRA r8": {"lora": {"rank": 8, "alpha": 16.0}}, "LoRA r8 + recompute": {"lora": {"rank": 8, "alpha": 16.0},
                                                                                      "recompute": True},
            "full": {}, "full + recompute": {"recompute": True}}


def task(folder: str, data: str, out: str, tokens: int, rows: int, steps: int, setting: dict,
         mode: str = "dynamic") -> dict:
    field = {"name": "conversation", "reader": {"type": "ChatFieldReader"}, "model_dir": folder,
             "max_seq_len": tokens, "packing": True, "pad_to_max_seq_len": True}
    reader = {"name": "train_reader", "type": "BasicDataSetReader", "fields": [field],
              "config": {"data_path": data, "format": "jsonl", "batch_size": 0, "skip_bad_lines": True}}
    model = {"type": "Ernie45SFT", "model_dir": folder, "optimization": {"learning_rate": 1e-4},
             "is_dygraph": int(mode == "dynamic")}
    if "lora" in setting:
        model["lora"] = setting["lora"]
    trainer = "CustomDynamicTrainer" if mode == "dynamic" else "CustomStaticTrainer"
    return {"task": "chat", "dataset_reader": {"train_reader": reader}, "model": model,
            "trainer": {"type": trainer, "max_steps": steps, "output_path": out, "visualdl": False,
                        "metric": "loss", "metric_mode": "min", "save_model_step": 10 ** 6,
                        "recompute": bool(setting.get("recompute")), "train_log_step": 1}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=1024, help="tokens a packed row")
    parser.add_argument("--rows", type=int, default=1, help="conversations a batch (packed into rows)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--data", default=os.path.join(REPO, "examples", "data", "chat", "train.jsonl"))
    parser.add_argument("--pf_python", default="/tmp/pf/bin/python")
    parser.add_argument("--modes", nargs="+", default=["dynamic"], choices=["dynamic", "static"])
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="ernie45-memory-")
    folder = os.path.join(work, "model")
    subprocess.run([args.pf_python, "-c", BUILD.replace("{shape}", repr({**SHAPES["0.3b"], **COMMON})), folder],
                   check=True, capture_output=True, text=True, env={**os.environ, "GLOG_minloglevel": "2"})
    fixture = os.path.join(REPO, "tests", "fixtures", "ernie45", "tied")
    for name in ("tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(os.path.join(fixture, name), os.path.join(folder, name))
    weights = sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder) if n.endswith(".safetensors"))
    print(f"ERNIE-4.5-0.3B shape, float32 weights {weights / 2 ** 30:.2f} GiB; batches of {args.rows} conversations "
          f"packed into rows of {args.tokens} tokens; {load_note()}")
    print(f"{'mode':8s} {'setting':22s} {'peak RSS GiB':>12s} {'CPU s/step':>10s}")
    for mode, name in ((mode, name) for mode in args.modes for name in args.settings):
        setting = SETTINGS[name]
        out = os.path.join(work, mode + "_" + name.replace(" ", "_").replace("+", ""))
        config = task(folder, args.data, out, args.tokens, args.rows, args.steps, setting, mode)
        config["dataset_reader"]["train_reader"]["config"]["batch_size"] = args.rows
        path = os.path.join(work, "task.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(config, f)
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", PEAK, os.path.join(REPO, "wenxin", "cli.py"), "train",
                               "--param_path", path], capture_output=True, text=True,
                              env={**os.environ, "GLOG_minloglevel": "2"})
        if proc.returncode != 0:
            raise SystemExit(proc.stderr[-3000:])
        peak_kib = int(proc.stderr.rsplit("PEAK_RSS_KIB", 1)[1].split()[0])
        with open(os.path.join(out, "logs", "metrics.jsonl"), encoding="utf-8") as f:
            cpu = [r["step_cpu_time"] for r in map(json.loads, f) if r.get("tag") == "train" and "step_cpu_time" in r]
        later = cpu[1:] or cpu  # the first step builds what the others reuse
        step_cpu = sorted(later)[len(later) // 2] if later else float("nan")
        print(f"{mode:8s} {name:22s} {peak_kib / 2 ** 20:12.2f} {step_cpu:10.1f}   "
              f"(the run: {time.perf_counter() - start:.0f} s)", flush=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
