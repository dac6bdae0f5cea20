"""A run's keeper: the process that runs one studio run's command and keeps it alive.

``python -m wenxin.studio.keeper ROOT RUN_ID`` (the studio starts it, in a session of its own so
that it outlives the studio). It starts the run's command (an ordinary ``wenxin train`` or
``wenxin sweep``, with ``trainer.checkpoints.resume=auto``), waits for it, and decides from how it ended:

- exit 0: finished;
- exit 75 after the studio asked it to stop (SIGTERM: the run saved a checkpoint): stopped;
- exit 2, 3 or 4 (a task-file, data or checkpoint error): failed; starting again would fail again;
- anything else (killed by a signal, the kernel's out-of-memory kill, a crash, a SIGTERM the studio
  did not send): restarted from its newest checkpoint, while the run's restart budget lasts,
  after the run's back-off (10, 30, 60 s by default: a crash loop must not spend its budget in
  seconds), each restart recorded with its cause and wait; past the budget, failed.

A SIGTERM to the keeper itself goes on to the run. Where the studio did not ask for it (the
machine shutting down), the keeper records the run as interrupted, and the studio resumes it
on its next start.
"""
from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from typing import List, Optional

from wenxin.common.child_logs import last_error
from wenxin.common.errors import EXIT_CHECKPOINT, EXIT_CONFIG, EXIT_DATA, EXIT_OK, EXIT_PREEMPTED
from wenxin.studio.i18n import Notice, notice
from wenxin.studio.processes import process_start_time
from wenxin.studio.run_files import continuation, saved_step
from wenxin.studio.store import (FAILED, FINISHED, INTERRUPTED, LOG_NAME, RESTARTING, RUNNING, STOPPED, Store,
                                 backoff_delay, database_path)

NO_RETRY = {EXIT_CONFIG: notice("notice.reason_config"), EXIT_DATA: notice("notice.reason_data"),
            EXIT_CHECKPOINT: notice("notice.reason_checkpoint")}


def describe_exit(code: int) -> Notice:
    """``killed by SIGKILL`` or ``exit code 1``."""
    if code < 0:
        try:
            return notice("notice.exit_signal", signal=signal.Signals(-code).name)
        except ValueError:
            return notice("notice.exit_signal", signal=str(-code))
    return notice("notice.exit_code", code=code)


class Keeper:
    """Runs one studio run until it finishes, fails, stops or runs out of restarts."""

    def __init__(self, root: str, run_id: int) -> None:
        self.root = root
        self.run_id = run_id
        self.store = Store(database_path(root))
        self.child: Optional[subprocess.Popen] = None
        self.terminated = False

    def _on_sigterm(self, signum: int, frame: object) -> None:
        self.terminated = True
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)

    def _start(self, command: List[str], folder: str) -> subprocess.Popen:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, LOG_NAME), "ab") as log:
            return subprocess.Popen(command, cwd=self.root, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_sigterm)
        run = self.store.run(self.run_id)
        if run is None:
            return 1
        folder = os.path.join(self.root, run["folder"])
        restarts = run["restarts"]
        self.store.update(self.run_id, keeper_pid=os.getpid(), keeper_started=process_start_time(os.getpid()))
        while True:
            run = self.store.run(self.run_id)
            if run is None:  # deleted while it ran
                return 1
            if run["stop_requested"] or self.terminated:
                return self._end_before_start(bool(run["stop_requested"]))
            self.child = self._start(run["command"], folder)
            self.store.update(self.run_id, "started", notice("notice.started", pid=self.child.pid), status=RUNNING,
                              train_pid=self.child.pid, restart_at=None, attempt_started=time.time())
            if self.terminated and self.child.poll() is None:  # a SIGTERM between the start and the record
                self.child.send_signal(signal.SIGTERM)
            code = self.child.wait()
            # the CPU time of every attempt so far: the keeper's only children are its run's processes
            usage = resource.getrusage(resource.RUSAGE_CHILDREN)
            self.store.update(self.run_id, cpu_seconds=usage.ru_utime + usage.ru_stime)
            run = self.store.run(self.run_id)
            if run is None:
                return 1
            if self._ended(code, bool(run["stop_requested"]), folder):
                return 0
            cause = describe_exit(code)
            if code in NO_RETRY:
                message = notice("notice.no_retry", cause=cause, reason=NO_RETRY[code],
                                 detail=last_error(os.path.join(folder, LOG_NAME)))
                self.store.update(self.run_id, FAILED, message, status=FAILED, ended=time.time(), train_pid=None,
                                  cause=message)
                return 0
            detail = last_error(os.path.join(folder, LOG_NAME)) if code > 0 else ""
            cause = notice("notice.with_detail", cause=cause, detail=detail) if detail else cause
            if restarts >= run["restart_budget"]:
                message = notice("notice.no_restarts_left", cause=cause, budget=run["restart_budget"])
                self.store.update(self.run_id, FAILED, message, status=FAILED, ended=time.time(), train_pid=None,
                                  cause=message)
                return 0
            restarts += 1
            delay = backoff_delay(run["restart_backoff"], restarts)
            said = notice("notice.restart_in" if delay else "notice.restart", n=restarts, budget=run["restart_budget"],
                          delay=f"{delay:g}", cause=cause, continuation=continuation(folder))
            self.store.update(self.run_id, "restarted", said, status=RESTARTING, restarts=restarts, train_pid=None,
                              cause=cause, restart_at=time.time() + delay)
            self._wait_until(time.time() + delay)

    def _ended(self, code: int, stop_asked: bool, folder: str) -> bool:
        """Record an attempt's end that ends the run without a restart (finished, stopped from the
        studio, or the keeper itself terminated); False for a failure that may restart."""
        if code == EXIT_OK and not (self.terminated and not stop_asked):
            self.store.update(self.run_id, FINISHED, notice("notice.finished"), status=FINISHED, ended=time.time(),
                              train_pid=None, cause="")
        elif stop_asked:
            cause = notice("notice.stopped_by_studio") if code == EXIT_PREEMPTED else \
                notice("notice.stopped_by_studio_exit", exit=describe_exit(code))
            step = saved_step(folder)
            said = notice("notice.stopped_at", cause=cause, step=step) if step is not None else \
                notice("notice.stopped_before_checkpoint", cause=cause)
            self.store.update(self.run_id, STOPPED, said, status=STOPPED, ended=time.time(),
                              train_pid=None, cause=cause)
        elif self.terminated:  # the keeper got SIGTERM from someone else: the machine going down
            cause = notice("notice.keeper_terminated", exit=describe_exit(code))
            self.store.update(self.run_id, INTERRUPTED, cause, status=INTERRUPTED, train_pid=None, cause=cause)
        else:
            return False
        return True

    def _wait_until(self, deadline: float) -> None:
        """The back-off before a restart: a crash loop must not spend its budget in seconds. Ends
        early on SIGTERM or a stop asked from the studio (the loop's next round sees either)."""
        checked = 0.0
        while time.time() < deadline and not self.terminated:
            if time.time() - checked >= 1.0:
                checked = time.time()
                run = self.store.run(self.run_id)
                if run is None or run["stop_requested"]:
                    return
            time.sleep(min(0.2, max(0.0, deadline - time.time())))

    def _end_before_start(self, stop_asked: bool) -> int:
        if stop_asked:
            self.store.update(self.run_id, STOPPED, notice("notice.stopped_by_studio"), status=STOPPED,
                              ended=time.time(), train_pid=None, cause=notice("notice.stopped_by_studio"))
        else:
            self.store.update(self.run_id, INTERRUPTED, notice("notice.interrupted_before_start"), status=INTERRUPTED,
                              train_pid=None)
        return 0


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or not args[1].isdigit():
        print("usage: python -m wenxin.studio.keeper ROOT RUN_ID", file=sys.stderr)
        return 2
    return Keeper(os.path.abspath(args[0]), int(args[1])).run()


if __name__ == "__main__":
    sys.exit(main())
