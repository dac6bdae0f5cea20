"""Framework overhead: wenxin's trainers against plain Paddle loops, ``paddle.Model.fit`` (hapi)
and PaddleNLP's ``Trainer``, on the same synthetic workloads, in one run.

    python benchmarks/framework_overhead.py [--rounds 3] [--workloads bow cnn transformer mlp]
        [--paddlenlp-python /path/to/venv/bin/python] [--examples]

Workloads (deterministic synthetic data, 2 classes):
    bow          text classification, vocab 30000, seq len 128, batch 32, BowClassification
    cnn          the same data, CnnClassification (128 filters of widths 2, 3, 4)
    transformer  ErnieClassification: 2 layers, hidden 128, 4 heads, seq len 128, batch 32
    mlp          tabular: 64 features, batch 256, MlpClassification (256, 256)

Variants, each in a fresh process, interleaved over rounds (median steps/s is reported):
    eager        a plain loop: paddle.io.DataLoader, model, backward, AdamW step, loss printed every 10 steps
    static       a plain Program/Executor loop fetching the loss every step, printed every 10 steps
    wenxin-dyn   run_trainer's dynamic trainer with its defaults (hooks, logging every 10 steps, VisualDL)
    wenxin-st    the static trainer, same defaults
    hapi         paddle.Model(...).fit(..., verbose=2) with its default log_freq of 10
    paddlenlp    paddlenlp.trainer.Trainer with its defaults (only with --paddlenlp-python: PaddleNLP
                 is not a dependency; install it in a separate venv, see benchmarks/README.md)

Every variant trains the same model class (the wenxin model is a paddle.nn.Layer) with AdamW, so
the differences are the training loop's. The clock runs from the end of the warm-up steps to the
last step's end. With --examples, it also measures the share of data loading in the step time of
the example configs.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

import paddle

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("GLOG_minloglevel", "2")

VOCAB, SEQ_LEN, FEATURES, SEED = 30000, 128, 64, 0
TEXT_MODEL = {"dropout": 0.1, "hidden_size": 128, "embedding": {"emb_dim": 128}}
WORKLOADS: Dict[str, Dict[str, Any]] = {
    "bow": {"data": "text", "batch": 32, "steps": 100, "warmup": 10,
            "model": {"type": "BowClassification", **TEXT_MODEL}},
    "cnn": {"data": "text", "batch": 32, "steps": 40, "warmup": 5,
            "model": {"type": "CnnClassification", **TEXT_MODEL, "num_filters": 128, "filter_sizes": [2, 3, 4]}},
    "transformer": {"data": "text", "batch": 32, "steps": 40, "warmup": 3,
                    "model": {"type": "ErnieClassification", "hidden_size": 128, "dropout": 0.1,
                              "encoder": {"transformer": {"hidden_size": 128, "num_layers": 2, "num_heads": 4,
                                                          "max_position": SEQ_LEN}}}},
    "mlp": {"data": "tabular", "batch": 256, "steps": 100, "warmup": 10,
            "model": {"type": "MlpClassification", "hidden_sizes": [256, 256], "dropout": 0.1}},
}
VARIANTS = ["eager", "static", "wenxin-dyn", "wenxin-st", "hapi", "paddlenlp"]
LOG_EVERY = 10
LEARNING_RATE = 1e-3


# ---- data -------------------------------------------------------------------------------------
def make_data(folder: str, kind: str, rows: int) -> None:
    """``train.tsv`` (what wenxin reads), ``arrays.npz`` (what the plain loops read) and a vocab."""
    import numpy as np
    rng = np.random.RandomState(SEED)
    os.makedirs(folder, exist_ok=True)
    labels = rng.randint(0, 2, rows)
    if kind == "text":
        ids = rng.randint(2, VOCAB, (rows, SEQ_LEN))
        with open(os.path.join(folder, "vocab.txt"), "w", encoding="utf-8") as f:
            f.write("[PAD]\n[UNK]\n" + "".join(f"w{i}\n" for i in range(2, VOCAB)))
        lines = (" ".join(f"w{i}" for i in row) + f"\t{label}\n" for row, label in zip(ids, labels))
        arrays = {"text_a": ids.astype("int64"), "text_a_seq_lens": np.full(rows, SEQ_LEN, "int64")}
    else:
        features = rng.randn(rows, FEATURES).astype("float32")
        lines = (" ".join(f"{x:.5f}" for x in row) + f"\t{label}\n" for row, label in zip(features, labels))
        arrays = {"features": np.asarray([[float(f"{x:.5f}") for x in row] for row in features], "float32")}
    with open(os.path.join(folder, "train.tsv"), "w", encoding="utf-8") as f:
        f.writelines(lines)
    np.savez(os.path.join(folder, "arrays.npz"), label=labels.astype("int64"), **arrays)


def task_config(name: str, data: str, mode: str, output: str) -> Dict[str, Any]:
    w = WORKLOADS[name]
    if w["data"] == "text":
        fields = [{"name": "text_a", "reader": {"type": "TextFieldReader"}, "max_seq_len": SEQ_LEN,
                   "tokenizer": {"type": "WhitespaceTokenizer"}, "vocab_path": os.path.join(data, "vocab.txt")},
                  {"name": "label", "data_type": "int", "reader": {"type": "LabelFieldReader"}}]
        task = "text_classification"
    else:
        fields = [{"name": "features", "reader": {"type": "FloatVectorFieldReader"}, "dim": FEATURES},
                  {"name": "label", "data_type": "int", "reader": {"type": "LabelFieldReader"}}]
        task = "tabular_classification"
    return {"task": task,
            "dataset_reader": {"train_reader": {"fields": fields, "config": {
                "data_path": os.path.join(data, "train.tsv"), "shuffle": True, "batch_size": w["batch"],
                "drop_last": True}}},
            "model": {**w["model"], "is_dygraph": int(mode == "dynamic"),
                      "optimization": {"learning_rate": LEARNING_RATE}},
            "trainer": {"type": "CustomDynamicTrainer" if mode == "dynamic" else "CustomStaticTrainer",
                        "output_path": output, "max_steps": w["warmup"] + w["steps"],
                        "train_log_step": LOG_EVERY, "progress_bar": "off"}}


def build_model(name: str, data: str):  # noqa: ANN201
    """The workload's model, built through wenxin's config checks (outside any trainer)."""
    from wenxin.config.loader import load_config
    from wenxin.runner import resolve_classes
    import numpy as np
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "task.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(task_config(name, data, "dynamic", os.path.join(tmp, "out")), f)
        config = load_config(path)
    _, model_cls, _ = resolve_classes(config)
    loaded = np.load(os.path.join(data, "arrays.npz"))
    arrays = {k: loaded[k] for k in sorted(loaded.files, key=lambda k: k == "label")}  # the label last
    if WORKLOADS[name]["data"] == "text":
        info = {"text_a": {"vocab_size": VOCAB, "padding_id": 0, "max_seq_len": SEQ_LEN, "vocab_from": "text_a"}}
    else:
        info = {"features": {"dim": FEATURES}}
    info["label"] = {"num_labels": 2, "labels": ["0", "1"]}
    return lambda: model_cls(config["model"], info), arrays


class Clock:
    """Step-end times; ``rate(warmup)`` is the steps/s after the warm-up steps."""

    def __init__(self) -> None:
        self.times: List[float] = []

    def tick(self) -> None:
        self.times.append(time.perf_counter())

    def rate(self, warmup: int) -> float:
        return (len(self.times) - warmup) / (self.times[-1] - self.times[warmup - 1])


# ---- variants (each runs in its own process) ----------------------------------------------------
def run_wenxin(name: str, data: str, mode: str) -> float:
    from wenxin.config.loader import load_config
    from wenxin.controller.hooks import HookBase
    from wenxin.runner import build_trainer

    class StepClock(HookBase):
        priority = 1  # right after the timer: the last step's checkpoint save is not counted

        def after_step(self) -> None:
            clock.tick()

    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "task.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(task_config(name, data, mode, os.path.join(tmp, "out")), f)
        trainer = build_trainer(load_config(path))
        trainer.register_hook(StepClock())
        trainer.do_train()
    return clock.rate(WORKLOADS[name]["warmup"])


class ArrayDataset(paddle.io.Dataset):
    """Rows of the workload arrays as tuples (for paddle.io.DataLoader and hapi)."""

    def __init__(self, arrays: Dict[str, Any], names: List[str]) -> None:
        super().__init__()
        self.arrays, self.names = arrays, names

    def __getitem__(self, i: int):  # noqa: ANN204
        return tuple(self.arrays[n][i] for n in self.names)

    def __len__(self) -> int:
        return len(self.arrays["label"])


def run_eager(name: str, data: str) -> float:
    make_model, arrays = build_model(name, data)
    paddle.seed(SEED)
    model = make_model()
    optimizer = paddle.optimizer.AdamW(learning_rate=LEARNING_RATE, parameters=model.parameters())
    names = list(arrays)
    loader = paddle.io.DataLoader(ArrayDataset(arrays, names), batch_size=WORKLOADS[name]["batch"],
                                  shuffle=True, drop_last=True)
    clock = Clock()
    model.train()
    for step, batch in enumerate(loader, 1):
        loss = model(dict(zip(names, batch)), "training")["loss"]
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        if step % LOG_EVERY == 0:
            print(f"step {step}: loss {float(loss):.4f}")
        clock.tick()
    return clock.rate(WORKLOADS[name]["warmup"])


def run_static(name: str, data: str) -> float:
    import numpy as np
    make_model, arrays = build_model(name, data)
    paddle.enable_static()
    main, startup = paddle.static.Program(), paddle.static.Program()
    main.random_seed = startup.random_seed = SEED
    with paddle.static.program_guard(main, startup):
        model = make_model()
        feeds = {k: paddle.static.data(k, [-1, *v.shape[1:]], str(v.dtype)) for k, v in arrays.items()}
        loss = model(feeds, "training")["loss"]
        paddle.optimizer.AdamW(learning_rate=LEARNING_RATE).minimize(loss)
    executor = paddle.static.Executor(paddle.CPUPlace())
    executor.run(startup)
    batch = WORKLOADS[name]["batch"]
    order = np.random.RandomState(SEED).permutation(len(arrays["label"]))
    clock = Clock()
    for step in range(1, len(order) // batch + 1):
        rows = order[(step - 1) * batch:step * batch]
        value, = executor.run(main, feed={k: v[rows] for k, v in arrays.items()}, fetch_list=[loss])
        if step % LOG_EVERY == 0:
            print(f"step {step}: loss {float(value):.4f}")
        clock.tick()
    return clock.rate(WORKLOADS[name]["warmup"])


def run_hapi(name: str, data: str) -> float:
    make_model, arrays = build_model(name, data)
    paddle.seed(SEED)
    names = list(arrays)

    class Network(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.model = make_model()

        def forward(self, *tensors):  # noqa: ANN002, ANN201
            return self.model(dict(zip(names, tensors)), "training")["loss"]

    class Ticks(paddle.callbacks.Callback):
        def on_train_batch_end(self, step, logs=None) -> None:  # noqa: ANN001
            clock.tick()

    clock = Clock()
    network = Network()
    specs = [paddle.static.InputSpec([None, *arrays[n].shape[1:]], str(arrays[n].dtype), n) for n in names]
    model = paddle.Model(network, inputs=specs)
    model.prepare(paddle.optimizer.AdamW(learning_rate=LEARNING_RATE, parameters=network.parameters()),
                  loss=lambda loss: loss)
    model.fit(ArrayDataset(arrays, names), batch_size=WORKLOADS[name]["batch"], epochs=1, shuffle=True,
              drop_last=True, verbose=2, callbacks=[Ticks()])
    return clock.rate(WORKLOADS[name]["warmup"])


def run_paddlenlp(name: str, data: str) -> float:
    import numpy as np
    from paddlenlp.trainer import Trainer, TrainerCallback, TrainingArguments
    make_model, arrays = build_model(name, data)
    names = list(arrays)

    class Network(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.model = make_model()

        def forward(self, **fields):  # noqa: ANN003, ANN201
            return {"loss": self.model(fields, "training")["loss"]}

    class Ticks(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN003, ANN201
            clock.tick()

    rows = [{n: arrays[n][i] for n in names} for i in range(len(arrays["label"]))]

    def collate(features):  # noqa: ANN001, ANN202
        return {n: paddle.to_tensor(np.stack([f[n] for f in features])) for n in names}

    clock = Clock()
    w = WORKLOADS[name]
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, per_device_train_batch_size=w["batch"], learning_rate=LEARNING_RATE,
                                 max_steps=w["warmup"] + w["steps"], seed=SEED, save_strategy="no",
                                 dataloader_drop_last=True, report_to=[])
        Trainer(model=Network(), args=args, train_dataset=rows, data_collator=collate, callbacks=[Ticks()]).train()
    return clock.rate(w["warmup"])


RUNNERS: Dict[str, Callable[[str, str], float]] = {
    "eager": run_eager, "static": run_static, "hapi": run_hapi, "paddlenlp": run_paddlenlp,
    "wenxin-dyn": lambda n, d: run_wenxin(n, d, "dynamic"), "wenxin-st": lambda n, d: run_wenxin(n, d, "static"),
}


# ---- example configs: data-loading share -----------------------------------------------------------
def data_share(config_path: str, steps: int = 60) -> Dict[str, float]:
    """Mean data_time / step_time over ``steps`` steps of an example config (no evaluation)."""
    from wenxin.config.loader import load_config
    from wenxin.runner import build_trainer
    with tempfile.TemporaryDirectory() as out:
        logging.getLogger("wenxin").setLevel(logging.WARNING)
        config = load_config(config_path, [f"trainer.output_path={out}", f"trainer.max_steps={steps}",
                                           f"trainer.train_log_step={LOG_EVERY}",
                                           "trainer.is_eval_dev=false", "trainer.is_eval_test=false",
                                           "trainer.pre_train_model=[]", "trainer.progress_bar=off",
                                           "trainer.load_best_at_end=false", "trainer.save_inference=false"])
        build_trainer(config).do_train()
        with open(os.path.join(out, "logs", "metrics.jsonl"), encoding="utf-8") as f:
            records = [r for r in map(json.loads, f) if r["tag"] == "train"][1:]  # skip the warm-up interval
    data = statistics.mean(r["data_time"] for r in records)
    step = statistics.mean(r["step_time"] for r in records)
    return {"data_ms": data * 1000, "step_ms": step * 1000, "share": data / step}


# ---- the parent: rounds of child processes -------------------------------------------------------
def child(variant: str, workload: str, data: str, python: str) -> Optional[float]:
    command = [python, os.path.abspath(__file__), "--child", variant, workload, "--data", data]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    for line in reversed(result.stdout.splitlines()):
        if line.startswith("RESULT "):
            return float(line.split()[1])
    sys.stderr.write(f"{variant}/{workload} failed:\n{result.stderr[-2000:]}\n")
    return None


def print_table(workloads: List[str], variants: List[str], results: Dict[tuple, List[float]], rounds: int) -> None:
    print(f"paddle {paddle.__version__}, {os.cpu_count()} CPUs, {rounds} rounds, median steps/s "
          f"(min-max over rounds below); ratios to the plain loop of the same kind\n")
    print("| workload | " + " | ".join(variants) + " | wenxin-dyn / eager | wenxin-st / static |")
    print("|---|" + "---|" * (len(variants) + 2))
    for name in workloads:
        runs = {v: results[(name, v)] for v in variants if (name, v) in results}
        medians = {v: statistics.median(r) for v, r in runs.items()}
        cells = [f"{medians[v]:.2f} ({min(runs[v]):.2f}-{max(runs[v]):.2f})" if v in runs else "failed"
                 for v in variants]

        def ratio(a: str, b: str) -> str:
            return f"{medians[a] / medians[b]:.3f}" if a in medians and b in medians else "-"
        print(f"| {name} | " + " | ".join(cells) + f" | {ratio('wenxin-dyn', 'eager')} | {ratio('wenxin-st', 'static')} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS)
    parser.add_argument("--paddlenlp-python", default="", help="a python with paddlenlp installed")
    parser.add_argument("--examples", action="store_true", help="also measure data loading in examples/")
    parser.add_argument("--child", nargs=2, metavar=("VARIANT", "WORKLOAD"), help=argparse.SUPPRESS)
    parser.add_argument("--data", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(f"RESULT {RUNNERS[args.child[0]](args.child[1], args.data)}")
        return
    variants = [v for v in args.variants if v != "paddlenlp" or args.paddlenlp_python]
    root = tempfile.mkdtemp(prefix="wenxin-bench-")
    folders = {}
    for name in args.workloads:
        w = WORKLOADS[name]
        folders[name] = os.path.join(root, name)
        make_data(folders[name], w["data"], w["batch"] * (w["warmup"] + w["steps"]))
    results: Dict[tuple, List[float]] = {}
    for round_index in range(args.rounds):
        for name in args.workloads:
            for variant in variants:
                python = args.paddlenlp_python if variant == "paddlenlp" else sys.executable
                rate = child(variant, name, folders[name], python)
                if rate is not None:
                    results.setdefault((name, variant), []).append(rate)
        print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr)
    if args.rounds:
        print_table(args.workloads, variants, results, args.rounds)
    if args.examples:
        print("\n| example config | data ms/step | step ms | data share |\n|---|---|---|---|")
        for config in sorted(os.listdir(os.path.join(REPO, "examples"))):
            if config.endswith(".json"):
                share = data_share(os.path.join(REPO, "examples", config))
                print(f"| {config} | {share['data_ms']:.2f} | {share['step_ms']:.1f} | {share['share'] * 100:.1f}% |")


if __name__ == "__main__":
    main()
