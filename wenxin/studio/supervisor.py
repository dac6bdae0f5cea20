"""The studio's supervisor: a queue of runs, a concurrency limit that fits the machine, and the
runs' keepers (``wenxin.studio.keeper``).

Each run is an ordinary command (``python -m wenxin.cli train --param_path TASK --set KEY=VALUE
... --set trainer.output_path=FOLDER/output --set trainer.checkpoints.resume=auto``) given as an argument list:
no shell ever reads a user's value. The supervisor starts a keeper for each queued run while fewer
than ``max_runs`` are active; each run gets ``cores // max_runs`` of the machine's cores
(``WENXIN_CPU_SHARE``, as a sweep shares them out). Keepers run in sessions of their own, so runs
go on while the studio restarts; on start the supervisor re-attaches to the keepers still alive
(a process is known by its pid and start time) and queues the runs whose keeper is gone (a reboot)
to continue from their checkpoints.
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Union

from wenxin.common.threads import SHARE_VARIABLE
from wenxin.studio.i18n import Notice, NoticedError, notice
from wenxin.studio.processes import process_alive, process_start_time, run_process
from wenxin.studio.run_files import continuation
from wenxin.studio.security import TOKEN_VARIABLE
from wenxin.studio.store import (ACTIVE, FAILED, INTERRUPTED, QUEUED, STATE_DIR, STOPPED, Store, backoff_delay,
                                 database_path)

logger = logging.getLogger("wenxin.studio")


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class Supervisor:
    """Starts queued runs' keepers within ``max_runs`` and re-attaches to live ones."""

    def __init__(self, root: str, max_runs: int = 0, poll_seconds: float = 0.5) -> None:
        self.root = root
        self.store = Store(database_path(root))
        cores = usable_cores()
        self.max_runs = max_runs or max(1, cores // 2)
        self.cpu_share = max(1, cores // self.max_runs)
        self.poll_seconds = poll_seconds
        self.keepers: Dict[int, subprocess.Popen] = {}  # the keepers this studio started (reaped here)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self.recovered: List[str] = []  # what the start found, one line a run

    # ---- start, re-attach, schedule ----
    def recover(self) -> List[str]:
        """On start: runs marked active whose keeper is gone were interrupted (the studio's machine
        rebooted, or their keeper was killed); they and the runs already marked interrupted are
        queued to continue. Returns what was done, one line a run."""
        lines = []
        for run in self.store.runs():
            if run["status"] in ACTIVE and process_alive(run["keeper_pid"], run["keeper_started"]):
                line = f"still running (keeper process {run['keeper_pid']}); re-attached"
                self.store.update(run["id"], "reattached", notice("notice.reattached", pid=run["keeper_pid"]))
                lines.append(f"run {run['id']}: {line}")
                continue
            if run["status"] in ACTIVE or run["status"] == INTERRUPTED:
                why: Union[str, Notice] = notice("notice.process_gone") if run["status"] in ACTIVE else \
                    Notice.from_json(run["cause_notice"]) if run["cause_notice"] else run["cause"]
                self._requeue_interrupted(run, why)
                lines.append(f"run {run['id']}: interrupted ({why.english() if isinstance(why, Notice) else why}); "
                             "queued to continue")
        return lines

    def _requeue_interrupted(self, run: dict, why: Union[str, Notice]) -> None:
        """An interruption is not the run's failure: it is queued again, its restart budget kept.
        A training process its dead keeper left behind is killed first: two processes must never
        write one run's checkpoints (the newest complete one is where the run continues)."""
        orphan = run_process(run.get("train_pid"), os.path.join(self.root, run["folder"]))
        if orphan is not None:
            with contextlib.suppress(Exception):
                orphan.kill()
                orphan.wait(timeout=60)
        self.store.update(run["id"], "interrupted", notice("notice.requeued", why=why, continuation=continuation(
                          os.path.join(self.root, run["folder"]))), status=QUEUED, keeper_pid=None, train_pid=None)

    def start(self) -> None:
        self.recovered = self.recover()
        for line in self.recovered:
            logger.info("studio: %s", line)
        self._thread = threading.Thread(target=self._loop, name="studio-supervisor", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop scheduling (the runs go on; their keepers are not the studio's to end)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def wake(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.schedule()
            except Exception:  # noqa: BLE001 (the loop outlives one failed round; the next retries)
                logger.exception("studio: scheduling failed")
            self._wake.wait(self.poll_seconds)
            self._wake.clear()

    def active_runs(self) -> List[dict]:
        return [run for run in self.store.runs() if run["status"] in ACTIVE]

    def schedule(self) -> List[int]:
        """Reap finished keepers and start queued runs (oldest first) while there is room; returns
        the runs started."""
        with self._lock:
            ended: Dict[int, int] = {}
            for run_id, keeper in list(self.keepers.items()):
                if keeper.poll() is not None:
                    del self.keepers[run_id]
                    ended[run_id] = keeper.returncode
            runs = self.store.runs()
            lost = [run for run in runs if run["status"] in ACTIVE and run["id"] in ended]
            for run in lost:  # the keeper ended without recording how its run ended
                self._keeper_ended(run, ended[run["id"]])
            dead = [run for run in runs  # a keeper that died (killed with its run) leaves its run marked active
                    if run["status"] in ACTIVE and run["keeper_pid"] and run["id"] not in self.keepers
                    and run["id"] not in ended and not process_alive(run["keeper_pid"], run["keeper_started"])]
            for run in dead:
                self._requeue_interrupted(run, "its keeper process died")
            if dead or lost:
                runs = self.store.runs()
            active = sum(run["status"] in ACTIVE for run in runs)
            started = []
            for run in sorted((r for r in runs if r["status"] == QUEUED), key=lambda r: r["id"]):
                if active >= self.max_runs:
                    break
                if self.store.claim_queued(run["id"]):
                    self._start_keeper(run["id"])
                    started.append(run["id"])
                    active += 1
            return started

    def _keeper_ended(self, run: dict, code: int) -> None:
        """A keeper this studio started ended and left its run marked active. Killed by a signal:
        the run is interrupted and queued again, counted against its restart budget (a keeper
        killed over and over must not restart for ever). Exited by itself (it could not start,
        say): the run failed, with the keeper's last error as the cause."""
        from wenxin.common.child_logs import last_error
        from wenxin.studio.keeper import describe_exit
        orphan = run_process(run.get("train_pid"), os.path.join(self.root, run["folder"]))
        if orphan is not None:
            with contextlib.suppress(Exception):
                orphan.kill()
                orphan.wait(timeout=60)
        detail = last_error(self.keeper_log(run["id"]))
        cause = notice("notice.keeper_ended_detail", exit=describe_exit(code), detail=detail) if detail else \
            notice("notice.keeper_ended", exit=describe_exit(code))
        if code < 0 and run["restarts"] < run["restart_budget"]:
            delay = backoff_delay(run["restart_backoff"], run["restarts"] + 1)
            said = notice("notice.interrupted_requeued_in" if delay else "notice.interrupted_requeued", cause=cause,
                          delay=f"{delay:g}", continuation=continuation(os.path.join(self.root, run["folder"])))
            self.store.update(run["id"], "interrupted", said, status=QUEUED,
                              keeper_pid=None, train_pid=None, cause=cause, restarts=run["restarts"] + 1,
                              restart_at=time.time() + delay)
        else:
            self.store.update(run["id"], FAILED, cause, status=FAILED, keeper_pid=None, train_pid=None, cause=cause,
                              ended=time.time())

    def keeper_log(self, run_id: int) -> str:
        """Where a keeper's own output goes (not its run's: that is the run's console log)."""
        return os.path.join(self.root, STATE_DIR, "keepers", f"{run_id}.log")

    def keeper_command(self, run_id: int) -> List[str]:
        return [sys.executable, "-m", "wenxin.studio.keeper", self.root, str(run_id)]

    def _start_keeper(self, run_id: int) -> None:
        import wenxin
        source = os.path.dirname(os.path.dirname(os.path.abspath(wenxin.__file__)))
        path = os.environ.get("PYTHONPATH", "")  # the keeper and its run import the wenxin this studio runs
        env = {**os.environ, SHARE_VARIABLE: str(self.cpu_share), "OMP_NUM_THREADS": "1", "CPU_NUM": "1",
               "GLOG_minloglevel": os.environ.get("GLOG_minloglevel", "2"),
               "PYTHONPATH": source + (os.pathsep + path if path else "")}
        env.pop(TOKEN_VARIABLE, None)  # a run's code has no business with the studio's token
        log_path = self.keeper_log(run_id)
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        with open(log_path, "ab") as log:
            keeper = subprocess.Popen(self.keeper_command(run_id), cwd=self.root, env=env, stdin=subprocess.DEVNULL,
                                      stdout=log, stderr=log, start_new_session=True)
        self.keepers[run_id] = keeper
        self.store.update(run_id, keeper_pid=keeper.pid, keeper_started=process_start_time(keeper.pid))

    # ---- control ----
    def stop(self, run_id: int) -> str:
        """Ask a run to stop: a queued run stops at once; a running one gets SIGTERM (it saves a
        checkpoint and exits 75) through its keeper."""
        run = self.store.run(run_id)
        if run is None:
            raise KeyError(run_id)
        if run["status"] == QUEUED:
            self.store.update(run_id, STOPPED, notice("notice.stopped_before_start"), status=STOPPED,
                              cause=notice("notice.stopped_before_start"))
            return STOPPED
        if run["status"] not in ACTIVE:
            raise NoticedError(notice("notice.nothing_to_stop", id=run_id, status=notice(f"status.{run['status']}")))
        self.store.update(run_id, "stopping", notice("notice.stopping"), stop_requested=1)
        if process_alive(run["keeper_pid"], run["keeper_started"]):
            with contextlib.suppress(ProcessLookupError):
                os.kill(run["keeper_pid"], signal.SIGTERM)
        return "stopping"

    def resume(self, run_id: int) -> None:
        """Queue a stopped, failed or finished run again: it continues from its newest checkpoint."""
        run = self.store.run(run_id)
        if run is None:
            raise KeyError(run_id)
        if run["status"] in ACTIVE or run["status"] == QUEUED:
            raise NoticedError(notice("notice.already", id=run_id, status=notice(f"status.{run['status']}")))
        where = continuation(os.path.join(self.root, run["folder"]))
        self.store.update(run_id, QUEUED, notice("notice.resume_asked", continuation=where),
                          status=QUEUED, stop_requested=0, restarts=0, cause="", ended=None, restart_at=None)
        self.wake()
