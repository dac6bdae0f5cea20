"""The Python API (wenxin.Task) and its worked example in docs/notebook.md, run in a real Jupyter
kernel: the progress bar is one display output replaced in place, and the results print."""
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, build, task_config
from wenxin.api import Task
from wenxin.common.errors import ConfigError


EXECUTE_NOTEBOOK = """
import sys, nbformat, nbclient
path = sys.argv[1]
notebook = nbformat.read(path, as_version=4)
nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": "."}}).execute()
nbformat.write(notebook, path)
"""


def doc_cells():
    with open(os.path.join(REPO, "docs", "notebook.md"), encoding="utf-8") as f:
        return re.findall(r"```python\n(.*?)```", f.read(), re.S)


@pytest.mark.slow
def test_the_worked_example_runs_in_a_jupyter_kernel(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from wenxin.runner import copy_examples
    copy_examples(str(tmp_path))
    prepared = subprocess.run([sys.executable, "examples/prepare_sentiment_data.py"], cwd=str(tmp_path),
                              capture_output=True, text=True, timeout=300)
    assert prepared.returncode == 0, prepared.stderr[-2000:]
    cells = doc_cells()
    assert len(cells) == 5
    notebook_path = tmp_path / "worked_example.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code) for code in cells]),
                   str(notebook_path))
    # in an interpreter of its own: a kernel client leaves threads (zmq, asyncio) in its process,
    # and a later test's fork (the token cache's worker pool) could inherit their locks held
    executed = subprocess.run([sys.executable, "-c", EXECUTE_NOTEBOOK, str(notebook_path)], cwd=str(tmp_path),
                              capture_output=True, text=True, timeout=900)
    assert executed.returncode == 0, executed.stderr[-3000:]
    notebook = nbformat.read(str(notebook_path), as_version=4)
    outputs = [cell.outputs for cell in notebook.cells]

    def texts(cell_outputs, kinds=("stream", "display_data", "execute_result")):
        found = []
        for out in cell_outputs:
            if out.output_type in kinds:
                found.append(out.get("text") or out.get("data", {}).get("text/plain", ""))
        return found

    assert any("Task('text_classification'" in t for t in texts(outputs[0]))
    # training: its progress bar is one display output, replaced in place to its final state
    bars = [t for t in texts(outputs[1], ("display_data",)) if t.startswith("[train]")]
    assert len(bars) == 1 and "100%" in bars[0] and "60/60" in bars[0], texts(outputs[1])
    printed = "".join(t for out in outputs[1] if out.output_type == "stream" and out.name == "stdout"
                      for t in [out.text])
    assert re.search(r"output/notebook_bow/checkpoints/\S+ \d+\ndev accuracy: 0\.\d+", printed), printed
    assert "[train] step" in printed  # the log records print as the command line's do
    result_lines = "".join(out.text for out in outputs[2] if out.output_type == "stream" and out.name == "stdout")
    assert re.search(r"^\{'test_reader': \{.*'acc': 0\.\d+", result_lines, re.M), result_lines
    assert re.search(r"\n1 0\.\d+\n0 0\.\d+\n$", result_lines), result_lines  # good review, bad review
    assert "True" in "".join(out.text for out in outputs[3] if out.output_type == "stream" and out.name == "stdout")
    assert "trainer.epochs: unknown key (did you mean 'epoch'?)" in "".join(
        out.text for out in outputs[4] if out.output_type == "stream")


def test_a_task_from_a_dict_trains_evaluates_exports_and_predicts(tmp_path, data_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = task_config(data_dir, "out", max_steps=30, save_model_step=15, is_eval_test=1)  # a relative output
    task = Task(config, overrides={"trainer.train_log_step": 3})
    assert task.output_path == "out" and task.config["trainer"]["logging"]["train_log_step"] == 3
    assert config["trainer"]["train_log_step"] == 5  # the caller's dict is not changed
    result = task.train()
    assert result.step == 30 and not result.interrupted
    assert result.checkpoint == os.path.join("out", "checkpoints", "step_30")
    assert set(result.metrics) == {"dev_reader", "test_reader"}
    again = task.evaluate("dev")
    assert again["dev_reader"]["acc"] == pytest.approx(result.metrics["dev_reader"]["acc"])
    predictions = task.predict(["好棒赞", "差烂坏"])
    assert [p["label"] for p in predictions] == ["1", "0"] and all(0.5 < p["probability"] <= 1 for p in predictions)
    assert os.path.isfile(os.path.join(result.checkpoint, "inference", "preprocess.json"))
    earlier = task.evaluate(["test"], checkpoint=os.path.join("out", "checkpoints", "step_15"))
    assert set(earlier) == {"test_reader"}


def test_a_task_from_a_file_finds_the_newest_checkpoint_of_an_earlier_run(tmp_path, data_dir):
    config = task_config(data_dir, str(tmp_path / "out"), max_steps=6, is_eval_test=0)
    build(config, tmp_path).do_train()
    path = tmp_path / "task.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    task = Task.from_file(str(path), overrides=["trainer.is_eval_dev=0"])
    assert task.config["trainer"]["evaluation"]["is_eval_dev"] == 0
    assert set(task.evaluate()) == {"dev_reader", "test_reader"}  # those configured, of step 6
    fresh = Task.from_file(str(path), overrides={"trainer.output_path": str(tmp_path / "empty")})
    with pytest.raises(ConfigError, match=r"checkpoint: nothing to predict with: no checkpoint in .*empty"):
        fresh.predict(["好"])


def test_bad_configs_and_arguments_are_config_errors_naming_the_key(tmp_path, data_dir):
    config = task_config(data_dir, str(tmp_path / "out"))
    with pytest.raises(ConfigError, match=r"trainer.epochs: unknown key \(did you mean 'epoch'\?\)"):
        Task(config, overrides={"trainer.epochs": 2})
    with pytest.raises(ConfigError, match="overrides: a dict"):
        Task(config, overrides="trainer.epoch=2")
    with pytest.raises(ConfigError, match="config: a dict, like a task file's content, not a list"):
        Task([config])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"readers: valid_reader not configured in .*task.json"):
        Task(config).evaluate(["valid"], checkpoint=str(tmp_path))


def test_progress_draws_in_a_notebook_through_display_updates(monkeypatch):
    """In a kernel the bar is a display output, updated in place (no \\r, no ANSI codes)."""
    pytest.importorskip("IPython")
    import IPython
    import IPython.display

    from wenxin.common import progress
    shown = []

    class Handle:
        def update(self, obj):
            shown.append(("update", obj.data))

    def display(obj, display_id=False):
        shown.append(("display", obj.data))
        return Handle()

    class Kernel:
        kernel = object()

    monkeypatch.setattr(IPython, "get_ipython", lambda: Kernel())
    monkeypatch.setattr(IPython.display, "display", display)
    assert progress.in_notebook() and progress.progress_enabled("auto")
    clock = iter(range(100))
    bar = progress.ProgressBar(4, "train", clock=lambda: float(next(clock)), min_interval=0.0)
    for step in range(1, 5):
        bar.update(step)
    bar.clear()  # a log record: the display output is left alone
    bar.close()
    assert shown[0] == ("display", "") and all(kind == "update" for kind, _ in shown[1:])
    assert shown[-1][1].startswith("[train] 100%|") and "4/4" in shown[-1][1]
    assert not any("\r" in text or "\033" in text for _, text in shown)
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    assert not progress.in_notebook()
