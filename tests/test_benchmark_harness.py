"""The benchmark harness: paced windows never overlap, take turns in rotated order, report
failures with the child's output, and every framework_overhead variant runs through it."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from typing import Dict, List, Tuple

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARKS = os.path.join(REPO, "benchmarks")
sys.path.insert(0, BENCHMARKS)

from paced import paired_ratio, run_paced_round  # noqa: E402

CHILD = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, {benchmarks!r})
    from paced import PacedClock
    name, out, steps, crash_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    clock, spans = PacedClock(warmup=2, window=3), []
    for step in range(1, steps + 1):
        if step == crash_at:
            raise SystemExit("crashed on purpose")
        begin = time.perf_counter()
        time.sleep(0.02)
        spans.append((begin, time.perf_counter()))
        clock.tick()
    with open(out, "w") as f:
        json.dump(spans, f)
""")


def run_children(tmp_path, crash_at: Dict[str, int], windows: int = 3) -> Tuple[dict, List[str], dict, dict]:
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(benchmarks=BENCHMARKS))
    steps = 2 + 3 * windows
    commands = {name: [sys.executable, str(script), name, str(tmp_path / f"{name}.json"), str(steps),
                       str(crash_at.get(name, 0))] for name in ["a", "b", "c"]}
    measured = run_paced_round(commands, windows, str(tmp_path), str(tmp_path), first=1)
    spans = {name: json.loads((tmp_path / f"{name}.json").read_text())
             for name in commands if (tmp_path / f"{name}.json").exists()}
    assert {name: len(times) for name, times in measured.cpu.items()} == \
        {name: len(times) for name, times in measured.wall.items()}
    return measured.wall, measured.failures, spans, measured.cpu


def test_windows_take_turns_without_overlap(tmp_path):
    durations, failures, spans, cpu = run_children(tmp_path, {})
    assert failures == []
    assert {name: len(d) for name, d in durations.items()} == {"a": 3, "b": 3, "c": 3}
    for name, times in durations.items():
        assert all(0.06 <= t < 1.0 for t in times), (name, times)  # 3 steps of 20 ms each
        # the steps sleep: their CPU time is a small part of the wall time (CPU time is not wall time)
        assert all(0 <= c < w for c, w in zip(cpu[name], times)), (name, cpu[name], times)
    # the timed steps (after 2 warm-up steps) of window k, per child: [start, end]
    windows = {(name, k): (s[2 + 3 * k][0], s[4 + 3 * k][1]) for name, s in spans.items() for k in range(3)}
    ordered = sorted(windows, key=lambda key: windows[key][0])
    for earlier, later in zip(ordered, ordered[1:]):
        assert windows[earlier][1] < windows[later][0], f"{earlier} overlaps {later}"
    # window k runs the children in their order rotated by first + k (first=1)
    assert [name for name, _ in ordered] == list("bca" "cab" "abc")
    assert [k for _, k in ordered] == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_failures_name_the_child_and_keep_its_finished_windows(tmp_path):
    durations, failures, _, _ = run_children(tmp_path, {"b": 7, "c": 1})
    assert len(durations["a"]) == 3 and len(durations["b"]) == 1 and durations["c"] == []
    assert len(failures) == 2
    joined = "\n".join(failures)
    assert "c did not get ready" in joined and "b stopped in window 2" in joined
    assert joined.count("crashed on purpose") == 2  # the child's own output is quoted


def test_paired_ratio():
    assert paired_ratio([2.0, 4.0, 3.0], [1.0, 4.0, 1.0]) == 2.0
    assert paired_ratio([1.0, 1.0], [2.0]) == 0.5  # only the windows both finished
    assert paired_ratio([], []) is None


@pytest.mark.slow
def test_framework_overhead_runs_every_variant():
    variants = ["eager", "static", "wenxin-dyn", "wenxin-st", "hapi"]
    result = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "framework_overhead.py"), "--rounds", "1",
                             "--workloads", "mlp", "--windows", "1", "--variants", *variants],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "failed" not in result.stdout and "stopped" not in result.stderr, result.stderr[-3000:]
    assert "load average" in result.stdout
    rows = [line for line in result.stdout.splitlines() if line.startswith("| mlp |")]
    assert len(rows) == 4  # by CPU time, then by wall time: speeds, then ratios
    for speed_row, ratio_row in (rows[:2], rows[2:]):
        rates = [float(x) for x in re.findall(r"\| (\d+\.\d+) \(", speed_row)]
        assert len(rates) == len(variants) and all(rate > 0 for rate in rates)
        assert len(re.findall(r"\d\.\d{3} \(", ratio_row)) == 4  # dyn/eager, dyn/hapi, st/static, st/hapi
