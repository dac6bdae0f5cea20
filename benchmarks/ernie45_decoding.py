"""Decoding speed of an ERNIE 4.5 dense decoder on this CPU: wenxin against PaddleFormers'
``generate`` on the same model, in the same run (issue 40).

A model of the chosen shape is built at random initialization by PaddleFormers in its own
virtual environment (``--pf_python``; ``pip install paddlepaddle==3.3.1 paddleformers==1.2.0``)
and saved as users download one (float32 safetensors, ``config.json``). Then, in rounds that
alternate which goes first, fresh processes decode ``--new`` tokens greedily after the same
``--prompt`` tokens:

- ``paddleformers``: ``Ernie4_5ForCausalLM.generate(decode_strategy="greedy_search")`` with its
  key/value cache (``use_cache=True``), the unfused kernels (its fused ones have no CPU kernel);
- ``wenxin eager``: ``load_ernie45`` and ``wenxin.models.decoding`` over the model's ``prefill``
  and ``extend`` (what a trainer's evaluation runs);
- ``wenxin export``: the exported step functions through ``Predictor.stream`` on Paddle
  Inference (what ``wenxin predict`` and ``wenxin serve`` run), from an export of a zero-step
  SFT run of the folder.

Each process times only its decoding (after one warm-up decoding), as tokens per CPU-second and
per wall-second, and reports the tokens it chose: the three must agree (the same weights, greedy).
Every process runs one thread, with ``MKL_DEBUG_CPU_TYPE=5`` (the BLAS path wenxin picks on AMD).

    python benchmarks/ernie45_decoding.py --shape 0.3b --prompt 64 --new 32 --rounds 3
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure import load_note  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = {
    # ERNIE-4.5-0.3B's config.json (vocabulary, widths, depth, heads)
    "0.3b": {"vocab_size": 103424, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 18,
             "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 128},
    "small": {"vocab_size": 32000, "hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 6,
              "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64},
    # 0.3B's depth with next to no arithmetic: what a step's operators cost by themselves
    "tiny": {"vocab_size": 4096, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 18,
             "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16},
}
COMMON = {"max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "pad_token_id": 0,
          "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": True}

BUILD = """
import sys, paddle
from paddleformers.transformers.ernie4_5.configuration import Ernie4_5Config
from paddleformers.transformers.ernie4_5.modeling import Ernie4_5ForCausalLM
paddle.seed(7)
model = Ernie4_5ForCausalLM(Ernie4_5Config(**{shape}, use_flash_attention=False, fuse_rms_norm=False,
                                          fuse_swiglu=False, fuse_rope=False, fuse_linear=False))
model.save_pretrained(sys.argv[1], safe_serialization=True)
"""

# what each contender's code ends with: a warm-up decoding, then the timed one, reported as JSON
TIMED = """
run(2)
cpu, wall = time.process_time(), time.perf_counter()
tokens = run(new)
print(json.dumps({"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall, "tokens": tokens}))
"""

PADDLEFORMERS = """
import json, sys, time, paddle
from paddleformers.transformers.ernie4_5.modeling import Ernie4_5ForCausalLM
folder, prompt, new = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
model = Ernie4_5ForCausalLM.from_pretrained(folder, use_flash_attention=False, fuse_rms_norm=False,
                                            fuse_swiglu=False, fuse_rope=False, fuse_linear=False, use_cache=True)
model.eval()
ids = paddle.to_tensor([prompt])
def run(count):
    with paddle.no_grad():
        return model.generate(input_ids=ids, max_new_tokens=count, decode_strategy="greedy_search",
                              eos_token_id=[10 ** 9], pad_token_id=0)[0].numpy()[0].tolist()
"""

WENXIN_EAGER = """
import json, sys, time
import wenxin, paddle
from wenxin.models.decoding import DecodeSettings, SteppedModel, decode
from wenxin.models.ernie45 import load_ernie45
folder, prompt, new = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
model = load_ernie45(folder)
model.eval()
def step(name, inputs):
    with paddle.no_grad():
        outputs = getattr(model, name)(*[paddle.to_tensor(v) for v in inputs.values()])
    return dict(zip(["logits", "cache", "position"], [o.numpy() for o in outputs]))
import numpy as np
prompt_inputs = {"ids": np.asarray([prompt], dtype="int64")}
run = lambda count: decode(SteppedModel(step), prompt_inputs, DecodeSettings(strategy="greedy", max_new_tokens=count))
"""

WENXIN_EXPORT = """
import json, sys, time
import numpy as np
import wenxin
from wenxin.inference.predictor import Predictor
from wenxin.models.decoding import DecodeSettings, SteppedModel, decode
folder, prompt, new = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
predictor = Predictor(folder)
prompt_inputs = {"ids": np.asarray([prompt], dtype="int64")}
masked = "visible" in {i["name"] for i in predictor.steps["extend"]["inputs"]}  # exports since batched serving
run = lambda count: decode(SteppedModel(predictor.run_step, masked=masked), prompt_inputs,
                           DecodeSettings(strategy="greedy", max_new_tokens=count))
"""


def export_of(folder: str, work: str, repo: str = REPO) -> str:
    """An export of ``folder`` after a zero-learning-rate SFT step (its weights unchanged), with
    the tokenizer files of the repository's test fixture (decoding here feeds ids directly), made
    by the wenxin of ``repo`` (another checkout: its own export format)."""
    fixture = os.path.join(REPO, "tests", "fixtures", "ernie45", "tied")
    for name in ("tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(os.path.join(fixture, name), os.path.join(folder, name))
    data = os.path.join(work, "train.jsonl")
    with open(data, "w", encoding="utf-8") as f:
        f.write(json.dumps({"src": ["你好"], "tgt": ["你好呀"]}, ensure_ascii=False) + "\n")
    reader = {"name": "train_reader", "type": "BasicDataSetReader",
              "fields": [{"name": "conversation", "reader": {"type": "ChatFieldReader"}, "model_dir": folder,
                          "max_seq_len": 256}],
              "config": {"data_path": data, "format": "jsonl", "batch_size": 1}}
    task = {"task": "chat", "dataset_reader": {"train_reader": reader},
            "model": {"type": "Ernie45SFT", "model_dir": folder,
                      "optimization": {"learning_rate": 0.0, "optimizer": "sgd", "lr_scheduler": "constant"}},
            "trainer": {"type": "CustomDynamicTrainer", "max_steps": 1, "output_path": os.path.join(work, "out"),
                        "visualdl": False, "metric": "loss", "metric_mode": "min"}}
    checkpoint = os.path.join(work, "out", "checkpoints", "step_1")
    path = os.path.join(work, "task.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(task, f)
    for command in (["train", "--param_path", path],
                    ["export", "--param_path", path, "--checkpoint", checkpoint]):
        subprocess.run([sys.executable, os.path.join(repo, "wenxin", "cli.py"), *command], check=True,
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": repo}, cwd=repo)
    return os.path.join(checkpoint, "inference")


def run(python: str, code: str, folder: str, prompt: List[int], new: int) -> Dict[str, Any]:
    # every process on the AVX2 BLAS path wenxin picks on AMD CPUs (wenxin.common.blas), so the
    # comparison is of the decoding, not of MKL's CPU dispatch
    env = {**os.environ, "GLOG_minloglevel": "2", "OMP_NUM_THREADS": "1", "MKL_DEBUG_CPU_TYPE": "5",
           "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([python, "-c", code, folder, json.dumps(prompt), str(new)], capture_output=True,
                          text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{python}: failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="small")
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens")
    parser.add_argument("--new", type=int, default=32, help="tokens decoded")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pf_python", default="/tmp/pf/bin/python", help="the PaddleFormers venv's python")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="ernie45-decoding-")
    folder = os.path.join(work, "model")
    build = BUILD.replace("{shape}", repr({**SHAPES[args.shape], **COMMON}))
    subprocess.run([args.pf_python, "-c", build, folder], check=True, capture_output=True, text=True,
                   env={**os.environ, "GLOG_minloglevel": "2"})
    exported = export_of(folder, work)
    prompt = [(7 * i + 3) % (SHAPES[args.shape]["vocab_size"] - 10) + 10 for i in range(args.prompt)]
    contenders = {"paddleformers": (args.pf_python, PADDLEFORMERS + TIMED, folder),
                  "wenxin eager": (sys.executable, WENXIN_EAGER + TIMED, folder),
                  "wenxin export": (sys.executable, WENXIN_EXPORT + TIMED, exported)}
    print(f"shape {args.shape}, prompt {args.prompt} tokens, {args.new} new tokens, greedy, one thread; "
          f"{load_note()}")
    results: Dict[str, List[Dict[str, Any]]] = {name: [] for name in contenders}
    names = list(contenders)
    for round_index in range(args.rounds):
        order = names[round_index % len(names):] + names[:round_index % len(names)]  # each goes first in turn
        for name in order:
            python, code, model = contenders[name]
            results[name].append(run(python, code, model, prompt, args.new))
    tokens = {name: rows[0]["tokens"][-args.new:] for name, rows in results.items()}
    agree = len({json.dumps(t) for t in tokens.values()}) == 1
    print(f"greedy tokens agree: {agree}")
    base = sorted(r["cpu"] for r in results["paddleformers"])[len(results["paddleformers"]) // 2]
    print(f"{'':16s} {'tokens/CPU-s':>13s} {'tokens/s':>9s} {'CPU vs PaddleFormers':>21s}")
    for name, rows in results.items():
        cpu = sorted(r["cpu"] for r in rows)[len(rows) // 2]
        wall = sorted(r["wall"] for r in rows)[len(rows) // 2]
        print(f"{name:16s} {args.new / cpu:13.1f} {args.new / wall:9.1f} {base / cpu:20.2f}x")
    print(load_note())
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
