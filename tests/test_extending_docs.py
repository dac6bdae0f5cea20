"""docs/extending.md's worked examples, as the page shows them: its code blocks are written to
files, and the task they make trains in both modes with its tokenizer, model, hook, optimizer and
trainer; the inference backend predicts; the sweep method runs a sweep."""
import json
import os
import random
import re
import subprocess
import sys

import pytest

from conftest import REPO, write_tsv

PAGE = os.path.join(REPO, "docs", "extending.md")
FILE_BLOCK = re.compile(r"<!-- file: (\S+) -->\n```\w*\n(.*?)```", re.S)
CODE_BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)
GOOD, BAD = ["good", "great", "lovely", "excellent"], ["bad", "awful", "poor", "boring"]
NEUTRAL = ["the", "book", "plot", "was", "really", "and", "a", "story", "movie", "it"]


def reviews_of(n, seed, good, bad, neutral, lengths, finish):
    """``n`` (text, label) rows: neutral words and one good (label 1) or bad (0) word, shuffled,
    made a text by ``finish(words, rng)``."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        label = rng.randint(0, 1)
        words = [rng.choice(neutral) for _ in range(rng.randint(*lengths))] + [rng.choice(good if label else bad)]
        rng.shuffle(words)
        rows.append((finish(words, rng), label))
    return rows


def reviews(n, seed):
    return reviews_of(n, seed, GOOD, BAD, NEUTRAL, (3, 8),
                      lambda words, rng: " ".join(words).capitalize() + rng.choice(["!", ".", "..."]))


def run(args, cwd, code=None):
    env = {**os.environ, "GLOG_minloglevel": "2", "PYTHONPATH": os.pathsep.join([str(cwd), REPO])}
    command = [sys.executable, "-c", code] if code is not None else [sys.executable, "-m", "wenxin.cli", *args]
    proc = subprocess.run(command, cwd=str(cwd), capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_the_worked_examples_of_extending_run_as_written(tmp_path):
    page = open(PAGE, encoding="utf-8").read()
    files = FILE_BLOCK.findall(page)
    assert {name for name, _ in files} >= {"tasks/my_task/__init__.py", "tasks/my_task/tokenizers.py", "tasks/my_task/models.py",
                                           "tasks/my_task/hooks.py", "tasks/my_task/optimizers.py", "tasks/my_task/trainer.py",
                                           "tasks/my_task/sweep_methods.py", "my_task.json", "rounding_backend.py",
                                           "halving.json"}
    for name, text in files:
        os.makedirs(os.path.dirname(os.path.join(tmp_path, name)) or str(tmp_path), exist_ok=True)
        with open(os.path.join(tmp_path, name), "w", encoding="utf-8") as f:
            f.write(text)
    write_tsv(str(tmp_path / "data" / "train.tsv"), reviews(240, 1))
    write_tsv(str(tmp_path / "data" / "dev.tsv"), reviews(60, 2))

    # the two training commands, as the page writes them
    commands = [block for kind, block in CODE_BLOCK.findall(page) if kind == "bash" and "wenxin train" in block]
    assert len(commands) == 1
    for line in commands[0].replace("\\\n", " ").splitlines():
        args = line.split("#")[0].split()[1:]  # after "wenxin"
        run(args, tmp_path)
    for out, mode in (("my_task", "dynamic"), ("my_task_static", "static")):
        folder = tmp_path / "output" / out
        history = json.load(open(folder / "dev_history.json"))
        assert [step for step, _ in history] == [15, 30, 45] and history[-1][1] >= 0.8, history  # DevHistoryHook
        records = [json.loads(line) for line in open(folder / "logs" / "metrics.jsonl")]
        dev = [r for r in records if r["tag"] == "dev"]
        assert dev and all("confidence" in r for r in dev)  # the task's trainer
        state = json.load(open(folder / "checkpoints" / "step_45" / "trainer_state.json"))
        assert state["mode"] == mode
        optimizer_state = open(folder / "checkpoints" / "step_45" / "optimizer.json", encoding="utf-8").read()
        assert "mean_square" in optimizer_state  # RMSProp's accumulator: the task's optimizer

    # the backend: the page's Python block, run as written
    code = next(block for kind, block in CODE_BLOCK.findall(page) if kind == "python" and "import rounding_backend" in block)
    printed = run([], tmp_path, code=code)
    probs = [float(p) for p in re.findall(r"'probs': \[([^\]]*)\]", printed)[0].split(",")]
    assert len(probs) == 2 and all(abs(p * 1000 - round(p * 1000)) < 1e-3 for p in probs), printed  # rounded

    # without the task named, its tokenizer is unknown: one error saying how to name it, and no code
    # is imported from the export's folder by itself
    env = {**os.environ, "GLOG_minloglevel": "2", "PYTHONPATH": REPO}
    proc = subprocess.run([sys.executable, "-m", "wenxin.cli", "predict", "--model_dir", "output/my_task/checkpoints/best",
                           "--text", "Great!"], cwd=str(tmp_path), capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2 and "unknown tokenizer type 'WordPunctTokenizer'" in proc.stderr
    assert "the model was trained by task 'my_task': import it with --task my_task" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert run(["predict", "--model_dir", "output/my_task/checkpoints/best", "--text", "Great!", "--task", "my_task"],
               tmp_path).startswith("Great!\t")

    # the sweep method, through wenxin sweep
    run(["sweep", "--param_path", "my_task.json", "--sweep", "halving.json"], tmp_path)
    trials = json.load(open(tmp_path / "output" / "my_task_sweep" / "sweep.json"))["trials"]
    rates = [t["values"]["model.optimization.learning_rate"] for t in trials]
    value, best = 0.05, None  # the method's rule, replayed over the trials' results
    for trial, rate in zip(trials, rates):
        assert rate == value, rates
        if trial["status"] == "done" and (best is None or trial["metric"] > best):
            best = trial["metric"]
        else:
            value /= 2
    assert len(rates) == 3
