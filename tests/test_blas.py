"""The fast BLAS path: MKL_DEBUG_CPU_TYPE=5 only on AMD CPUs with AVX2, only before Paddle loads,
never over the user's own setting, and off with WENXIN_FAST_BLAS=0 or WENXIN_PROCESS_SETTINGS=0.
wenxin's entry points (the command line, the Python API's Task) apply it; importing wenxin does not."""
from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO
from wenxin.common import blas

AMD = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx avx2 fma\n\nprocessor\t: 1\n"
AMD_OLD = "vendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx\n"
INTEL = "vendor_id\t: GenuineIntel\nflags\t\t: fpu sse2 avx avx2 avx512f\n"


def test_only_amd_cpus_with_avx2_take_the_fast_path(tmp_path, monkeypatch):
    monkeypatch.delitem(sys.modules, "paddle", raising=False)  # as before Paddle loads
    for text, expected in ((AMD, True), (AMD_OLD, False), (INTEL, False)):
        (tmp_path / "cpuinfo").write_text(text, encoding="utf-8")
        environ = {}
        note = blas.choose_fast_blas(environ, str(tmp_path / "cpuinfo"))
        assert (environ == {"MKL_DEBUG_CPU_TYPE": "5"}) is expected and bool(note) is expected
    assert blas.choose_fast_blas({}, str(tmp_path / "missing")) is None


def test_the_users_choice_and_a_loaded_paddle_are_left_alone(tmp_path, monkeypatch):
    (tmp_path / "cpuinfo").write_text(AMD, encoding="utf-8")
    cpuinfo = str(tmp_path / "cpuinfo")
    monkeypatch.delitem(sys.modules, "paddle", raising=False)
    for environ in ({"MKL_DEBUG_CPU_TYPE": "0"}, {"WENXIN_FAST_BLAS": "0"}):
        before = dict(environ)
        assert blas.choose_fast_blas(environ, cpuinfo) is None and environ == before
    monkeypatch.setitem(sys.modules, "paddle", object())  # too late: MKL read its setting at load
    environ = {}
    assert blas.choose_fast_blas(environ, cpuinfo) is None and environ == {}


def blas_setting(code: str, tmp_path, **switches: str) -> list:
    """``MKL_DEBUG_CPU_TYPE`` after ``code`` in a fresh process, and whether this CPU is an AMD
    one with AVX2."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MKL_DEBUG_CPU_TYPE", "WENXIN_FAST_BLAS", "WENXIN_PROCESS_SETTINGS")}
    code = f"import os, sys, wenxin; from wenxin.common import blas; {code}; " \
           f"print(os.environ.get('MKL_DEBUG_CPU_TYPE'), blas.amd_with_avx2())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=str(tmp_path),
                          env={**env, "PYTHONPATH": REPO, **switches})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()[-2:]


def test_the_entry_points_decide_before_paddle_loads_and_importing_wenxin_does_not(tmp_path):
    amd = blas_setting("pass", tmp_path)[1] == "True"
    assert blas_setting("pass", tmp_path)[0] == "None"  # importing wenxin changes nothing
    command = "import wenxin.cli; wenxin.cli.main(['examples', 'copies'])"  # a command that loads no Paddle
    assert blas_setting(command, tmp_path) == (["5", "True"] if amd else ["None", "False"])
    task = ("from wenxin.api import Task; from wenxin.common.errors import ConfigError\n"
            "try: Task({})\nexcept ConfigError: pass")
    assert blas_setting(task, tmp_path)[0] == ("5" if amd else "None")
    assert blas_setting(command, tmp_path, WENXIN_FAST_BLAS="0")[0] == "None"
    assert blas_setting(command, tmp_path, WENXIN_PROCESS_SETTINGS="0")[0] == "None"
