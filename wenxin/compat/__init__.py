"""Everything wenxin takes from Paddle's, VisualDL's and uvicorn's private or unstable internals,
in one place (nothing else in wenxin reaches into them). The inventory, each module checked against
the versions in ``CHECKED`` (and tested over the ranges in ``TESTED``):

- ``paddle_internals``: small Paddle internals the trainers need (the GradScaler's scale, the
  static loss-scaling hooks, Adam's skip input, program pruning, the CPU thread count, dtype
  names, the oneDNN flag, bfloat16 support, stopping a failed DataLoader's workers); its
  docstring says why each;
- ``pir_programs``: the static engine's PIR program surgery (inputs, clones with value maps,
  dropping ops, inference mode, persistable values, what a startup program creates);
- ``program_runner``: the static trainer's step runner, which skips ``Executor.run``'s per-call
  program lookup through Executor internals;
- ``visualdl``: VisualDL records written on the training thread with VisualDL's record builders
  and framing;
- ``rng``: Paddle's generator states through their pickle protocol, as JSON;
- ``uvicorn_protocol``: uvicorn's httptools protocol with a request-start deadline (slow headers),
  a header size limit and one send per response.

Each fast path is checked where it starts against the public behaviour it replaces, falls back
to the public API when the check fails, and can be turned off in the task file
(``trainer.fast_paths``). The versions they were tested with are ``TESTED``; others log a
warning once.
"""
from __future__ import annotations

import logging
from typing import Dict, Tuple

from wenxin.common.paddle_support import require_paddle, version_tuple

require_paddle()
logger = logging.getLogger("wenxin")

# package -> the version each private interface above was last checked against
CHECKED: Dict[str, str] = {"paddle": "3.3.1", "visualdl": "2.5.3", "uvicorn": "0.55.0"}
# package -> (lowest tested, first untested) version. uvicorn's requirement carries the same bounds
# (pip then never resolves an uvicorn whose protocol internals were not checked; a new release is
# admitted by checking it and raising both, tests/test_package.py holds them equal); Paddle's and
# VisualDL's fast paths fall back by themselves and their requirements stay open above
TESTED: Dict[str, Tuple[str, str]] = {"paddle": ("3.0", "3.4"), "visualdl": ("2.5", "2.6"), "uvicorn": ("0.30", "0.56")}
_warned: set = set()


def warn_if_untested(package: str, version: str) -> bool:
    """Log once when ``version`` of ``package`` is outside the tested range; True if tested."""
    low, high = TESTED[package]
    tested = version_tuple(low) <= version_tuple(version) < version_tuple(high)
    if not tested and package not in _warned:
        _warned.add(package)
        logger.warning("%s %s is outside the versions wenxin's fast paths were tested with (%s to below %s); "
                       "they check themselves and fall back if they disagree (trainer.fast_paths turns them off)",
                       package, version, low, high)
    return tested
