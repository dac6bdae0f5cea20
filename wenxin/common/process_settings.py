"""Process-wide settings that make Paddle faster here, applied by wenxin's entry points.

Two settings change the whole process, so importing wenxin does not apply them: the command line
(``wenxin``, ``run_trainer.py``, ``run_infer.py``) and the Python API's ``Task`` apply them before
Paddle loads, and a script of your own may call ``apply_process_settings`` itself:

- ``wenxin.common.blas``: MKL's AVX2 kernels on AMD CPUs (``WENXIN_FAST_BLAS=0`` turns it off);
- ``wenxin.common.allocator``: freed large tensors stay with the process
  (``WENXIN_KEEP_FREED_MEMORY=0`` turns it off).

``WENXIN_PROCESS_SETTINGS=0`` turns both off. Each setting leaves alone what the user set.
"""
from __future__ import annotations

import os
from typing import List, MutableMapping

from wenxin.common import allocator, blas, startup_notes

SWITCH = "WENXIN_PROCESS_SETTINGS"  # "0": none of them
_applied: List[bool] = []


def apply_process_settings(environ: MutableMapping[str, str] = os.environ) -> None:
    """Apply the settings once per process (before Paddle loads, for the BLAS one to take);
    what each did is logged with the run's first lines (``startup_notes``)."""
    if _applied or environ.get(SWITCH, "1") == "0":
        return
    _applied.append(True)
    startup_notes.add(blas.choose_fast_blas(environ))
    startup_notes.add(allocator.keep_freed_memory(environ))
