"""wenxin's log format: its date and time (worked out once a second) as ``logging.Formatter``
writes them, and the service's lean records, which show the same lines."""
import logging
import os
import subprocess
import sys

from wenxin.common.logs import LOG_FORMAT, _Formatter


def record_at(created: float) -> logging.LogRecord:
    record = logging.LogRecord("wenxin.serve", logging.INFO, __file__, 1, "POST /predict %d", (200,), None)
    record.created, record.msecs = created, (created - int(created)) * 1000
    return record


def test_the_date_is_the_standard_formatters_at_every_second_and_millisecond():
    ours, standard = _Formatter(LOG_FORMAT), logging.Formatter(LOG_FORMAT)
    times = [1_800_000_000 + k * 0.1237 for k in range(40)] + [1_800_000_001.0, 1_800_000_000.9999, 1_700_000_000.5]
    for created in times:  # seconds that repeat, change and go back
        assert ours.format(record_at(created)) == standard.format(record_at(created))
    assert ours.formatTime(record_at(times[0]), "%H") == standard.formatTime(record_at(times[0]), "%H")


def test_lean_records_log_the_same_lines():
    """In a process of its own (it sets logging's process-wide options)."""
    code = ("import logging; from wenxin.common.logs import lean_records, setup_logging; setup_logging(); "
            "lean_records(); logging.getLogger('wenxin.serve').info('POST %s %d', '/predict', 200); "
            "assert logging._srcfile is None and not logging.logThreads")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "WENXIN_LOG_LEVEL": "INFO"}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    date, clock, rest = proc.stdout.strip().split(" ", 2)
    assert rest == "INFO wenxin.serve: POST /predict 200"
    assert len(date) == 10 and len(clock) == 12 and clock[8] == ","  # 2026-11-27 19:55:20,492
