"""Framework overhead: wenxin's trainers against plain Paddle loops, ``paddle.Model.fit`` (hapi)
and PaddleNLP's ``Trainer``, on the same synthetic workloads, in one run.

    python benchmarks/framework_overhead.py [--rounds 3] [--workloads bow cnn transformer mlp]
        [--paddlenlp-python /path/to/venv/bin/python] [--examples]

Workloads (deterministic synthetic data, 2 classes):
    bow          text classification, vocab 30000, seq len 128, batch 32, BowClassification
    cnn          the same data, CnnClassification (128 filters of widths 2, 3, 4)
    transformer  TransformerClassification: 2 layers, hidden 128, 4 heads, seq len 128, batch 32
    mlp          tabular: 64 features, batch 256, MlpClassification (256, 256)
    tiny         tabular: 64 features, batch 32, MlpClassification (16): the loop's own cost per step
                 (only when named in --workloads)

Variants (median steps/s and paired ratios are reported):
    eager        a plain loop: paddle.io.DataLoader, model, backward, AdamW step, loss printed every 10 steps
    static       a plain Program/Executor loop fetching the loss every step, printed every 10 steps
    wenxin-dyn   run_trainer's dynamic trainer with its defaults (hooks, logging every 10 steps, VisualDL)
    wenxin-st    the static trainer, same defaults
    hapi         paddle.Model(...).fit(..., verbose=2) with its default log_freq of 10
    paddlenlp    paddlenlp.trainer.Trainer with its defaults (only with --paddlenlp-python: PaddleNLP
                 is not a dependency; install it in a separate venv, see benchmarks/README.md)

Every variant trains the same model class (the wenxin model is a paddle.nn.Layer) with AdamW, so
the differences are the training loop's. Timing is paced (see paced.py): in each round, every
variant of a workload runs in its own process, and after the warm-up steps the processes take
turns running one window of steps each (a multiple of the 10-step logging interval, so every
window holds the same logging work). Ratios are medians over windows of the paired window times,
which cancels the machine's drift. Every window is timed in wall time and in the process's CPU time
(all its threads), and both tables are printed: on a shared machine CPU time per step is the
robust one, and the load average before and after the run states how shared it was. With
--examples, it also measures the share of data loading in the step time of the example configs.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
from typing import Any, Callable, Dict, List, Optional, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from wenxin.common.process_settings import apply_process_settings  # noqa: E402

apply_process_settings()  # as wenxin's entry points do, before Paddle loads

import paddle  # noqa: E402

from paced import PacedClock, paired_ratio, run_paced_round, window_ratios  # noqa: E402
os.environ.setdefault("GLOG_minloglevel", "2")

VOCAB, SEQ_LEN, FEATURES, SEED = 30000, 128, 64, 0
TEXT_MODEL = {"dropout": 0.1, "hidden_size": 128, "embedding": {"emb_dim": 128}}
# window: timed steps per turn (a multiple of LOG_EVERY); windows: turns per round
WORKLOADS: Dict[str, Dict[str, Any]] = {
    "bow": {"data": "text", "batch": 32, "warmup": 10, "window": 10, "windows": 10,
            "model": {"type": "BowClassification", **TEXT_MODEL}},
    "cnn": {"data": "text", "batch": 32, "warmup": 5, "window": 10, "windows": 4,
            "model": {"type": "CnnClassification", **TEXT_MODEL, "num_filters": 128, "filter_sizes": [2, 3, 4]}},
    "transformer": {"data": "text", "batch": 32, "warmup": 3, "window": 10, "windows": 4,
                    "model": {"type": "TransformerClassification", "hidden_size": 128, "dropout": 0.1,
                              "encoder": {"transformer": {"hidden_size": 128, "num_layers": 2, "num_heads": 4,
                                                          "max_position": SEQ_LEN}}}},
    "mlp": {"data": "tabular", "batch": 256, "warmup": 10, "window": 50, "windows": 10,
            "model": {"type": "MlpClassification", "hidden_sizes": [256, 256], "dropout": 0.1}},
    # almost no compute: the step time is the training loop's own cost (not in the default set)
    "tiny": {"data": "tabular", "batch": 32, "warmup": 20, "window": 100, "windows": 10,
             "model": {"type": "MlpClassification", "hidden_sizes": [16], "dropout": 0.0}},
}
DEFAULT_WORKLOADS = ["bow", "cnn", "transformer", "mlp"]
VARIANTS = ["eager", "static", "wenxin-dyn", "wenxin-st", "hapi", "paddlenlp"]
LOG_EVERY = 10
LEARNING_RATE = 1e-3


def total_steps(name: str) -> int:
    w = WORKLOADS[name]
    return w["warmup"] + w["window"] * w["windows"]


def new_clock(name: str) -> PacedClock:
    return PacedClock(WORKLOADS[name]["warmup"], WORKLOADS[name]["window"])


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
                        "output_path": output, "max_steps": total_steps(name),
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


# ---- variants (each runs in its own process) ----------------------------------------------------
def run_wenxin(name: str, data: str, mode: str) -> None:
    from wenxin.config.loader import load_config
    from wenxin.controller.hooks import HookBase
    from wenxin.runner import build_trainer

    class StepClock(HookBase):
        priority = 1  # right after the timer: the last step's checkpoint save is not counted

        def after_step(self) -> None:
            clock.tick()

    clock = new_clock(name)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "task.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(task_config(name, data, mode, os.path.join(tmp, "out")), f)
        trainer = build_trainer(load_config(path))
        trainer.register_hook(StepClock())
        trainer.do_train()


class ArrayDataset(paddle.io.Dataset):
    """Rows of the workload arrays as tuples (for paddle.io.DataLoader and hapi)."""

    def __init__(self, arrays: Dict[str, Any], names: List[str]) -> None:
        super().__init__()
        self.arrays, self.names = arrays, names

    def __getitem__(self, i: int):  # noqa: ANN204
        return tuple(self.arrays[n][i] for n in self.names)

    def __len__(self) -> int:
        return len(self.arrays["label"])


def run_eager(name: str, data: str) -> None:
    make_model, arrays = build_model(name, data)
    paddle.seed(SEED)
    model = make_model()
    optimizer = paddle.optimizer.AdamW(learning_rate=LEARNING_RATE, parameters=model.parameters())
    names = list(arrays)
    loader = paddle.io.DataLoader(ArrayDataset(arrays, names), batch_size=WORKLOADS[name]["batch"],
                                  shuffle=True, drop_last=True)
    clock = new_clock(name)
    model.train()
    for step, batch in enumerate(loader, 1):
        loss = model(dict(zip(names, batch)), "training")["loss"]
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        if step % LOG_EVERY == 0:
            print(f"step {step}: loss {float(loss):.4f}")
        clock.tick()


def run_static(name: str, data: str) -> None:
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
    clock = new_clock(name)
    for step in range(1, len(order) // batch + 1):
        rows = order[(step - 1) * batch:step * batch]
        value, = executor.run(main, feed={k: v[rows] for k, v in arrays.items()}, fetch_list=[loss])
        if step % LOG_EVERY == 0:
            print(f"step {step}: loss {float(value):.4f}")
        clock.tick()


def run_hapi(name: str, data: str) -> None:
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

    clock = new_clock(name)
    network = Network()
    specs = [paddle.static.InputSpec([None, *arrays[n].shape[1:]], str(arrays[n].dtype), n) for n in names]
    model = paddle.Model(network, inputs=specs)
    model.prepare(paddle.optimizer.AdamW(learning_rate=LEARNING_RATE, parameters=network.parameters()),
                  loss=lambda loss: loss)
    model.fit(ArrayDataset(arrays, names), batch_size=WORKLOADS[name]["batch"], epochs=1, shuffle=True,
              drop_last=True, verbose=2, callbacks=[Ticks()])


def run_paddlenlp(name: str, data: str) -> None:
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

    clock = new_clock(name)
    w = WORKLOADS[name]
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, per_device_train_batch_size=w["batch"], learning_rate=LEARNING_RATE,
                                 max_steps=total_steps(name), seed=SEED, save_strategy="no",
                                 dataloader_drop_last=True, report_to=[])
        Trainer(model=Network(), args=args, train_dataset=rows, data_collator=collate, callbacks=[Ticks()]).train()


RUNNERS: Dict[str, Callable[[str, str], None]] = {
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


# ---- the parent: paced rounds ----------------------------------------------------------------------
Windows = Dict[Tuple[str, str], List[List[float]]]  # (workload, variant) -> per round, window seconds
COMPARISONS = [("wenxin-dyn", "eager"), ("wenxin-dyn", "hapi"), ("wenxin-dyn", "paddlenlp"),
               ("wenxin-st", "static"), ("wenxin-st", "hapi"), ("wenxin-st", "paddlenlp")]


def steps_per_second(name: str, rounds: List[List[float]]) -> Tuple[float, float, float]:
    """Median steps/s over all windows, and the lowest and highest round median."""
    window = WORKLOADS[name]["window"]
    per_round = [window / statistics.median(r) for r in rounds if r]
    return window / statistics.median([d for r in rounds for d in r]), min(per_round), max(per_round)


def speedup(results: Windows, name: str, variant: str, base: str) -> Optional[Tuple[float, float, float]]:
    """``variant``'s speed over ``base``'s: the median over all paired windows, and the lowest
    and highest round median."""
    if (name, variant) not in results or (name, base) not in results:
        return None
    rounds = list(zip(results[(name, base)], results[(name, variant)]))
    per_round = [r for r in (paired_ratio(b, v) for b, v in rounds) if r is not None]
    pairs = [ratio for b, v in rounds for ratio in window_ratios(b, v)]
    return (statistics.median(pairs), min(per_round), max(per_round)) if pairs else None


def print_tables(workloads: List[str], variants: List[str], results: Windows, rounds: int, clock: str) -> None:
    print(f"\n**{clock} time** ({rounds} rounds of paced windows); steps a {clock} second: median over all windows "
          f"(lowest-highest round median)\n")
    print("| workload | " + " | ".join(variants) + " |")
    print("|---|" + "---|" * len(variants))
    for name in workloads:
        cells = []
        for variant in variants:
            runs = results.get((name, variant), [])
            if any(runs):
                median, low, high = steps_per_second(name, runs)
                cells.append(f"{median:.2f} ({low:.2f}-{high:.2f})")
            else:
                cells.append("failed")
        print(f"| {name} | " + " | ".join(cells) + " |")
    comparisons = [(v, b) for v, b in COMPARISONS if v in variants and b in variants]
    print(f"\nSpeed-ups by {clock} time, paired by window: median of base time / variant time over all windows "
          "(lowest-highest round median); above 1: the first is faster\n")
    print("| workload | " + " | ".join(f"{v} / {b}" for v, b in comparisons) + " |")
    print("|---|" + "---|" * len(comparisons))
    for name in workloads:
        cells = []
        for variant, base in comparisons:
            found = speedup(results, name, variant, base)
            cells.append(f"{found[0]:.3f} ({found[1]:.3f}-{found[2]:.3f})" if found else "-")
        print(f"| {name} | " + " | ".join(cells) + " |")


def load_note() -> str:
    """The machine's load: 1-minute load average against its CPUs."""
    return f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workloads", nargs="+", default=DEFAULT_WORKLOADS, choices=list(WORKLOADS))
    parser.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS)
    parser.add_argument("--windows", type=int, default=0, help="windows per round (default: the workload's)")
    parser.add_argument("--paddlenlp-python", default="", help="a python with paddlenlp installed")
    parser.add_argument("--examples", action="store_true", help="also measure data loading in examples/")
    parser.add_argument("--json", default="", help="also write every window's seconds to this JSON file")
    parser.add_argument("--child", nargs=2, metavar=("VARIANT", "WORKLOAD"), help=argparse.SUPPRESS)
    parser.add_argument("--data", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.windows:
        for w in WORKLOADS.values():
            w["windows"] = args.windows
    if args.child:
        RUNNERS[args.child[0]](args.child[1], args.data)
        return
    variants = [v for v in args.variants if v != "paddlenlp" or args.paddlenlp_python]
    root = tempfile.mkdtemp(prefix="wenxin-bench-")
    results: Windows = {}
    cpu_results: Windows = {}
    load_before = load_note()
    for name in args.workloads:
        make_data(os.path.join(root, name), WORKLOADS[name]["data"], WORKLOADS[name]["batch"] * total_steps(name))
    for round_index in range(args.rounds):
        for name in args.workloads:
            logs = os.path.join(root, f"logs-{round_index + 1}-{name}")
            os.makedirs(logs)
            commands = {}
            for variant in variants:
                python = args.paddlenlp_python if variant == "paddlenlp" else sys.executable
                commands[variant] = [python, os.path.abspath(__file__), "--child", variant, name,
                                     "--data", os.path.join(root, name)]
                if args.windows:
                    commands[variant] += ["--windows", str(args.windows)]
            measured = run_paced_round(commands, WORKLOADS[name]["windows"], logs, REPO, first=round_index)
            for message in measured.failures:
                sys.stderr.write(message + "\n")
            for variant in measured.wall:
                results.setdefault((name, variant), []).append(measured.wall[variant])
                cpu_results.setdefault((name, variant), []).append(measured.cpu[variant])
        print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr)
    if args.rounds:
        print(f"paddle {paddle.__version__}; before the run: {load_before}; after: {load_note()}")
        print_tables(args.workloads, variants, cpu_results, args.rounds, "CPU")
        print_tables(args.workloads, variants, results, args.rounds, "wall")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"paddle": paddle.__version__, "workloads": {n: WORKLOADS[n] for n in args.workloads},
                       "window_seconds": {f"{n}/{v}": rounds for (n, v), rounds in results.items()},
                       "window_cpu_seconds": {f"{n}/{v}": rounds for (n, v), rounds in cpu_results.items()}},
                      f, indent=1)
    if args.examples:
        from wenxin.common.errors import DataError
        print("\n| example config | data ms/step | step ms | data share |\n|---|---|---|---|")
        for config in sorted(os.listdir(os.path.join(REPO, "examples"))):
            if not config.endswith(".json"):
                continue
            try:
                share = data_share(os.path.join(REPO, "examples", config))
            except DataError as error:  # the example's data has not been prepared
                print(f"| {config} | - | - | not run: {error} |")
                continue
            print(f"| {config} | {share['data_ms']:.2f} | {share['step_ms']:.1f} | {share['share'] * 100:.1f}% |")


if __name__ == "__main__":
    main()
