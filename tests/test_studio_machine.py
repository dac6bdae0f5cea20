"""The machine and process figures the studio shows: GPUs read with ``nvidia-smi`` where it is
(here a stand-in script on PATH), none without it, and none when it hangs."""
import os
import stat
import sys

import pytest

pytest.importorskip("psutil", reason="wenxin studio needs the studio extra")

from wenxin.studio import machine  # noqa: E402

SMI = """#!{python}
import sys, time
if {hang}:
    time.sleep(60)
if sys.argv[1].startswith("--query-gpu"):
    print("0, NVIDIA H200, 37, 20480, 143771")
    print("1, NVIDIA H200, [N/A], 0, 143771")
else:
    print("{pid}, 1024")
    print("{pid}, 512")
    print("99999999, 7")
"""


def fake_smi(tmp_path, monkeypatch, hang=False):
    tool = tmp_path / "bin" / "nvidia-smi"
    tool.parent.mkdir()
    tool.write_text(SMI.format(python=sys.executable, hang=hang, pid=os.getpid()))
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(machine, "GPUS", machine.GpuReader())


def test_gpus_and_a_processes_gpu_memory_come_from_nvidia_smi(tmp_path, monkeypatch):
    fake_smi(tmp_path, monkeypatch)
    use = machine.machine_use()
    assert use["gpus"] == [
        {"index": "0", "name": "NVIDIA H200", "percent": 37.0, "memory_used": 20480 * 2**20,
         "memory_total": 143771 * 2**20},
        {"index": "1", "name": "NVIDIA H200", "percent": None, "memory_used": 0, "memory_total": 143771 * 2**20}]
    process = machine.process_use({"status": "running", "train_pid": os.getpid()})
    assert process["gpu_memory"] == 1536 * 2**20 and process["threads"] >= 1  # both GPUs' memory together
    assert machine.process_use({"status": "finished", "train_pid": os.getpid()}) is None


def test_no_gpu_figures_without_nvidia_smi_or_when_it_hangs(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(machine, "GPUS", machine.GpuReader())
    use = machine.machine_use()
    assert use["gpus"] == [] and use["cores"] >= 1 and use["memory_total"] > 0
    assert machine.process_use({"status": "running", "train_pid": os.getpid()})["gpu_memory"] is None
    fake_smi(tmp_path, monkeypatch, hang=True)
    monkeypatch.setattr(machine, "GPU_SECONDS", 0.5)
    assert machine.machine_use()["gpus"] == []
