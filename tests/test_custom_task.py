"""A task defined only under tests/ trains through run_trainer.py without touching wenxin/."""
import json
import os
import random
import subprocess
import sys

import pytest

from conftest import REPO, write_config, write_tsv

TASK_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_tasks", "keyword_spotting")


def rows(n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        text = "".join(rng.choice("abcdefgh") for _ in range(rng.randint(3, 10)))
        if rng.random() < 0.5:
            text += "Z"
        out.append((" ".join(rng.sample(text, len(text))), int("Z" in text)))  # space-separated letters
    return out


def keyword_config(tmp_path, task, trainer_type="CustomTrainer", is_dygraph=1):
    """The keyword-spotting task over generated data in ``tmp_path/data``."""
    data = str(tmp_path / "data")
    write_tsv(f"{data}/train.tsv", rows(300, 1))
    write_tsv(f"{data}/dev.tsv", rows(80, 2))
    fields = [{"name": "text", "reader": {"type": "TextFieldReader"},
               "tokenizer": {"type": "WhitespaceTokenizer", "split_char": " ", "lowercase": False}},
              {"name": "has_keyword", "reader": {"type": "LabelFieldReader"}}]
    return {
        "task": task,
        "dataset_reader": {
            "train_reader": {"fields": fields, "config": {"data_path": f"{data}/train.tsv", "shuffle": True,
                                                          "batch_size": 16}},
            "dev_reader": {"fields": fields, "config": {"data_path": f"{data}/dev.tsv", "batch_size": 32}},
        },
        "model": {"type": "KeywordModel", "emb_dim": 8, "is_dygraph": is_dygraph,
                  "optimization": {"learning_rate": 0.05}},
        "trainer": {"type": trainer_type, "epoch": 3, "is_eval_dev": 1, "metric": "acc",
                    "output_path": str(tmp_path / "out"), "visualdl": False},
    }


def test_task_outside_the_framework_trains_through_run_trainer(tmp_path):
    out = str(tmp_path / "out")
    config = keyword_config(tmp_path, TASK_DIR)
    path = write_config(str(tmp_path / "task.json"), config)
    proc = subprocess.run([sys.executable, os.path.join(REPO, "run_trainer.py"), "--param_path", path],
                          capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                          env={**os.environ, "GLOG_minloglevel": "2"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert open(os.path.join(out, "keyword_trainer_ran")).read() == "yes, dynamic"  # the task's own trainer
    with open(os.path.join(out, "logs", "metrics.jsonl"), encoding="utf-8") as f:
        dev = [json.loads(line) for line in f if '"dev"' in line]
    assert dev[-1]["acc"] >= 0.95 and dev[-1]["examples"] == 80


@pytest.mark.parametrize("trainer_type,is_dygraph", [("CustomDynamicTrainer", 1), ("CustomStaticTrainer", 0),
                                                     ("CustomTrainer", 0)])
def test_a_task_of_models_only_trains_with_the_built_in_trainers(tmp_path, trainer_type, is_dygraph):
    """No trainers of its own: the built-in trainers run it (``CustomTrainer`` is ERNIE-kit's name
    for the static one)."""
    import shutil
    from conftest import build
    task = tmp_path / "models_only_task"
    task.mkdir()
    shutil.copy(os.path.join(TASK_DIR, "model.py"), task / "model.py")
    (task / "__init__.py").write_text("from . import model  # noqa: F401\n")
    config = keyword_config(tmp_path, str(task), trainer_type, is_dygraph)
    trainer = build(config, tmp_path)
    assert type(trainer).__module__ == "wenxin.controller.task_trainers"
    assert trainer.mode == ("dynamic" if is_dygraph else "static")
    assert trainer.do_train()["dev_reader"]["acc"] >= 0.95


@pytest.mark.parametrize("is_dygraph", [1, 0])
def test_a_tasks_own_optimizer_and_schedule_replace_the_built_ins_of_that_name(tmp_path, is_dygraph):
    """A task registering its own ``adamw`` and ``linear_warmup_decay`` trains with them, not with
    the built-ins the config check also knows (the names were once looked up without the task's scope)."""
    import shutil

    import paddle
    from conftest import build
    task = tmp_path / "own_optimizer_task"
    task.mkdir()
    shutil.copy(os.path.join(TASK_DIR, "model.py"), task / "model.py")
    (task / "optim.py").write_text(
        "import paddle\n"
        "from wenxin.common.registry import RegisterSet\n"
        "USED = []\n\n"
        "@RegisterSet.optimizers.register('adamw')\n"
        "def adamw(opt, params, lr, clip, decay_filter):\n"
        "    USED.append('adamw')\n"
        "    return paddle.optimizer.SGD(learning_rate=lr, parameters=params, grad_clip=clip)\n\n"
        "@RegisterSet.lr_schedulers.register('linear_warmup_decay')\n"
        "def linear(opt, base, decay_steps):\n"
        "    USED.append('linear_warmup_decay')\n"
        "    return paddle.optimizer.lr.StepDecay(base, step_size=1000)\n")
    (task / "__init__.py").write_text("from . import model, optim  # noqa: F401\n")
    config = keyword_config(tmp_path, str(task), "CustomDynamicTrainer" if is_dygraph else "CustomStaticTrainer",
                            is_dygraph)
    config["model"]["optimization"].update(optimizer="adamw", lr_scheduler="linear_warmup_decay")
    trainer = build(config, tmp_path)
    trainer.do_train()
    assert set(sys.modules[f"{trainer.scope}.optim"].USED) == {"linear_warmup_decay", "adamw"}
    assert type(trainer.lr_scheduler) is paddle.optimizer.lr.StepDecay
    assert type(trainer.optimizer) is paddle.optimizer.SGD


def test_a_tasks_own_trainer_written_once_runs_in_both_modes_with_parity(tmp_path):
    """The keyword task's trainer subclasses BaseTrainer once: model.is_dygraph alone picks the
    engine, its do_train and do_evaluate run in both, and from the same weights the two modes
    train to the same losses and metrics."""
    import numpy as np
    import paddle
    from conftest import build, losses_of

    def config(mode):
        c = keyword_config(tmp_path, TASK_DIR, is_dygraph=1 if mode == "dynamic" else 0)
        c["trainer"].update(output_path=str(tmp_path / mode), train_log_step=1, epoch=1)
        return c

    dynamic = build(config("dynamic"), tmp_path)
    init = str(tmp_path / "init.pdparams")
    paddle.save({k: v.numpy() for k, v in dynamic.engine.model_state_dict().items()}, init)
    static_config = config("static")
    static_config["trainer"]["load_parameters"] = init
    static = build(static_config, tmp_path)
    assert type(dynamic).__name__ == type(static).__name__ == "KeywordTrainer"
    assert (dynamic.mode, static.mode) == ("dynamic", "static")
    results = {"dynamic": dynamic.do_train(), "static": static.do_train()}
    for mode in ("dynamic", "static"):
        assert open(os.path.join(tmp_path, mode, "keyword_trainer_ran")).read() == f"yes, {mode}"
    d, s = losses_of(str(tmp_path / "dynamic")), losses_of(str(tmp_path / "static"))
    assert sorted(d) == sorted(s) and len(d) > 10
    np.testing.assert_allclose([s[k] for k in sorted(s)], [d[k] for k in sorted(d)], atol=1e-5, rtol=0)
    dev = {mode: r["dev_reader"] for mode, r in results.items()}
    assert dev["static"]["acc"] == dev["dynamic"]["acc"]
    assert dev["static"]["predicted_positive"] == dev["dynamic"]["predicted_positive"]
