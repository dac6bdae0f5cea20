"""A run's keeper on its own (no studio, no training): the back-off between restarts, truthful
restart messages (a checkpoint to continue from, or none), and a stopped run's saved step."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("psutil", reason="wenxin studio needs the studio extra")

from studio_helpers import WAIT_SECONDS  # noqa: E402

from wenxin.studio.i18n import Notice, notice  # noqa: E402
from wenxin.studio.store import QUEUED, Store, backoff_delay, database_path  # noqa: E402


def add_run(root, script, budget=2, backoff=(0.4, 0.8)):
    store = Store(database_path(root))
    run_id = store.add_run(name="r", kind="train", task_path="task.json", sweep_path="", overrides={},
                           command=[sys.executable, "-c", script], folder="runs/r", restart_budget=budget,
                           restart_backoff=backoff)
    return store, run_id


def keeper(root, run_id):
    return subprocess.Popen([sys.executable, "-m", "wenxin.studio.keeper", root, str(run_id)])


def write_checkpoint_index(root, step):
    folder = os.path.join(root, "runs", "r", "output", "checkpoints")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "index.json"), "w", encoding="utf-8") as f:
        json.dump({"checkpoints": [{"name": f"step_{step}", "kind": "periodic", "step": step, "resumable": True},
                                   {"name": "best", "kind": "best", "step": step + 5, "resumable": False}]}, f)


def test_backoff_delays_take_the_last_one_past_the_list():
    assert [backoff_delay([10, 30, 60], n) for n in (1, 2, 3, 4, 9)] == [10, 30, 60, 60, 60]
    assert backoff_delay([], 1) == 0 and backoff_delay([5], 0) == 0


def test_a_crashing_run_waits_its_backoff_before_each_restart_and_says_where_it_continues(tmp_path):
    root = str(tmp_path)
    store, run_id = add_run(root, "import sys; sys.exit(1)")
    assert keeper(root, run_id).wait(timeout=WAIT_SECONDS) == 0
    events = store.events(run_id)
    assert [e["kind"] for e in events] == ["queued", "started", "restarted", "started", "restarted", "started",
                                           "failed"], events
    restarts = [e for e in events if e["kind"] == "restarted"]
    assert restarts[0]["message"] == ("restart 1 of 2 in 0.4 s after exit code 1; it starts over (no checkpoint "
                                      "was saved yet)")
    assert restarts[1]["message"].startswith("restart 2 of 2 in 0.8 s after exit code 1;")
    starts = [e["time"] for e in events if e["kind"] == "started"]
    for wait, restarted, started in zip((0.4, 0.8), restarts, starts[1:]):  # a lower bound: never sooner
        assert started - restarted["time"] >= wait
    write_checkpoint_index(root, 40)
    store, second = add_run(root, "import sys; sys.exit(1)", budget=1, backoff=(0,))
    assert keeper(root, second).wait(timeout=WAIT_SECONDS) == 0
    said = [e for e in store.events(second) if e["kind"] == "restarted"]
    assert [e["message"] for e in said] == ["restart 1 of 1 after exit code 1; it continues from its checkpoint at "
                                            "step 40"]
    # the page says it in its reader's language: the event keeps the message's key and values
    assert Notice.from_json(said[0]["notice"]).render("zh") == "第 1 次重启（共 1 次），原因：退出码 1；将从第 40 步的检查点继续"
    run = store.run(second)
    assert run["cause"] == "exit code 1; no restarts left (budget 1)"
    assert Notice.from_json(run["cause_notice"]).render("zh") == "退出码 1；重启次数已用完（上限 1 次）"


def test_a_stop_during_the_backoff_ends_the_run_without_starting_it_again(tmp_path):
    root = str(tmp_path)
    store, run_id = add_run(root, "import sys; sys.exit(1)", budget=3, backoff=(600,))
    process = keeper(root, run_id)
    deadline = time.time() + WAIT_SECONDS
    while store.run(run_id)["status"] != "restarting":
        assert time.time() < deadline and process.poll() is None
        time.sleep(0.1)
    assert store.run(run_id)["restart_at"] > time.time() + 500  # the wait the page shows
    store.update(run_id, stop_requested=1)
    process.send_signal(signal.SIGTERM)  # what the supervisor's stop does
    assert process.wait(timeout=60) == 0
    run = store.run(run_id)
    assert run["status"] == "stopped" and [e["kind"] for e in store.events(run_id)].count("started") == 1


def test_a_stopped_run_says_the_step_of_the_checkpoint_it_saved(tmp_path):
    root = str(tmp_path)
    script = ("import json, os, signal, sys, time\n"
              "def stop(*_):\n"
              "    d = 'runs/r/output/checkpoints'; os.makedirs(d, exist_ok=True)\n"
              "    json.dump({'checkpoints': [{'kind': 'periodic', 'step': 169, 'resumable': True}]},"
              " open(d + '/index.json', 'w'))\n"
              "    sys.exit(75)\n"
              "signal.signal(signal.SIGTERM, stop)\n"
              "open('runs/r/ready', 'w').close()\n"
              "time.sleep(600)\n")
    store, run_id = add_run(root, script)
    process = keeper(root, run_id)
    ready = os.path.join(root, "runs", "r", "ready")
    deadline = time.time() + WAIT_SECONDS
    while not os.path.exists(ready):
        assert time.time() < deadline and process.poll() is None
        time.sleep(0.1)
    from wenxin.studio.supervisor import Supervisor
    assert Supervisor(root).stop(run_id) == "stopping"
    assert process.wait(timeout=60) == 0
    stopped = [e["message"] for e in store.events(run_id) if e["kind"] == "stopped"]
    assert stopped == ["stopped from the studio at step 169 (its checkpoint, where a resume continues)"]
    Supervisor(root).resume(run_id)
    assert store.run(run_id)["status"] == QUEUED
    assert store.events(run_id)[-1]["message"] == "resume asked: queued; it continues from its checkpoint at step 169"


def test_an_older_database_gains_the_new_columns(tmp_path):
    import sqlite3
    path = database_path(str(tmp_path))
    os.makedirs(os.path.dirname(path))
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, kind TEXT NOT NULL, "
               "task_path TEXT NOT NULL, sweep_path TEXT NOT NULL DEFAULT '', overrides TEXT NOT NULL, "
               "command TEXT NOT NULL, folder TEXT NOT NULL, status TEXT NOT NULL, cause TEXT NOT NULL DEFAULT '', "
               "restarts INTEGER NOT NULL DEFAULT 0, restart_budget INTEGER NOT NULL, stop_requested INTEGER NOT "
               "NULL DEFAULT 0, keeper_pid INTEGER, keeper_started REAL, train_pid INTEGER, created REAL NOT NULL, "
               "started REAL, ended REAL)")
    db.execute("INSERT INTO runs (name, kind, task_path, overrides, command, folder, status, restart_budget, created) "
               "VALUES ('old', 'train', 'task.json', '{}', '[]', 'runs/old', 'finished', 3, 0)")
    db.commit()
    db.close()
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id INTEGER NOT NULL, "
               "time REAL NOT NULL, kind TEXT NOT NULL, message TEXT NOT NULL)")
    db.execute("INSERT INTO events (run_id, time, kind, message) VALUES (1, 0, 'finished', 'finished')")
    db.commit()
    db.close()
    store = Store(path)
    run = store.run(1)
    assert run["name"] == "old" and run["restart_backoff"] == [10, 30, 60] and run["restart_at"] is None
    assert run["cause_notice"] is None
    store.update(1, "stopping", notice("notice.stopping"))
    assert [(e["message"], e["notice"]) for e in store.events(1)] == [
        ("finished", None), ("stop asked: the run saves a checkpoint and ends", {"key": "notice.stopping", "values": {}})]


def test_a_resumed_run_keeps_its_place_in_the_queue(tmp_path, monkeypatch):
    """Queued runs start in the order they were first launched: a resumed run goes ahead of the
    runs launched after it, and a run waiting out its restart back-off lets the next one start."""
    from wenxin.studio.supervisor import Supervisor
    root = str(tmp_path)
    started = []
    monkeypatch.setattr(Supervisor, "_start_keeper", lambda self, run_id: started.append(run_id))
    supervisor = Supervisor(root, max_runs=1)
    store = supervisor.store
    first, second, third = (add_run(root, "pass")[1] for _ in range(3))
    store.update(first, "stopped", status="stopped")  # stopped from the studio while the others waited
    supervisor.resume(first)
    assert supervisor.schedule() == [first] and started == [first]
    store.update(first, "finished", status="finished")
    store.update(second, restart_at=time.time() + 600)  # waiting out a back-off: not startable yet
    assert supervisor.schedule() == [third]
    assert store.run(second)["status"] == QUEUED


def test_the_eta_is_blank_not_stale_while_a_restarted_run_reloads(tmp_path):
    from wenxin.studio.workspace import Studio
    from wenxin.studio.supervisor import Supervisor
    root = str(tmp_path)
    store, run_id = add_run(root, "pass")
    logs = os.path.join(root, "runs", "r", "output", "logs")
    os.makedirs(logs)
    before = time.time() - 60
    with open(os.path.join(logs, "metrics.jsonl"), "w", encoding="utf-8") as f:
        f.write(json.dumps({"tag": "train", "step": 150, "time": before, "eta_sec": 42.0, "total_steps": 300.0}) + "\n")
    write_checkpoint_index(root, 169)
    store.update(run_id, status="running", attempt_started=time.time())  # started again: reloading its data
    studio = Studio(root, Supervisor(root))  # its supervisor not started: the run is left as it is
    try:
        summary = studio.summary(store.run(run_id))
        assert summary["eta_sec"] is None and summary["step"] == 169 and summary["total_steps"] == 300
        with open(os.path.join(logs, "metrics.jsonl"), "a", encoding="utf-8") as f:  # its first record since
            f.write(json.dumps({"tag": "train", "step": 175, "time": time.time() + 1, "eta_sec": 30.0}) + "\n")
        assert studio.summary(store.run(run_id))["eta_sec"] == 30.0
    finally:
        studio.close()
