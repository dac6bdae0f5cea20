"""The fast BLAS path on AMD CPUs, chosen before Paddle loads.

Paddle's CPU build links Intel MKL, which takes a generic (non-AVX2) code path on AMD processors:
measured on this repository's AMD EPYC machine, ``paddle.matmul`` ran 22 GFLOP/s against 43 with
``MKL_DEBUG_CPU_TYPE=5``, which tells this MKL to use its AVX2 kernels, and training the
ERNIE-style example became 1.45x faster (benchmarks/README.md). MKL reads the variable once,
when it loads, so wenxin's entry points set it before they load Paddle
(``wenxin.common.process_settings``; importing wenxin does not). It is left
alone when the user set it, when Paddle is already loaded, off Linux, on other CPUs, and when
``WENXIN_FAST_BLAS=0``.
"""
from __future__ import annotations

import os
import sys
from typing import MutableMapping, Optional

SWITCH = "WENXIN_FAST_BLAS"  # "0" turns the fast path off
MKL_VARIABLE = "MKL_DEBUG_CPU_TYPE"
CPUINFO = "/proc/cpuinfo"


def amd_with_avx2(cpuinfo: str = CPUINFO) -> bool:
    """Whether the first CPU listed in ``cpuinfo`` is an AMD one with AVX2 (False where unknown)."""
    vendor, flags = "", ""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "vendor_id" and not vendor:
                    vendor = value.strip()
                elif key == "flags" and not flags:
                    flags = value
                if vendor and flags:
                    break
    except OSError:
        return False
    return vendor == "AuthenticAMD" and "avx2" in flags.split()


def choose_fast_blas(environ: MutableMapping[str, str] = os.environ, cpuinfo: str = CPUINFO) -> Optional[str]:
    """Set ``MKL_DEBUG_CPU_TYPE=5`` in ``environ`` where it helps and nobody decided otherwise;
    returns the line to log, or None when nothing was set."""
    if environ.get(SWITCH, "1") == "0" or MKL_VARIABLE in environ or "paddle" in sys.modules:
        return None
    if not amd_with_avx2(cpuinfo):
        return None
    environ[MKL_VARIABLE] = "5"
    return (f"{MKL_VARIABLE}=5 set: Paddle's MKL uses its AVX2 kernels on this AMD CPU (about 2x faster "
            f"matrix products; {SWITCH}=0 turns this off)")

