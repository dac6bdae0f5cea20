"""Which PaddlePaddle build is installed, and one clear line when wenxin cannot run on it.

Paddle ships as several distributions (``paddlepaddle`` for CPU, ``paddlepaddle-gpu`` and
others) that all install the same ``paddle`` package, so wenxin does not depend on any of them
(see pyproject.toml). The checks here read package metadata only; they never import Paddle.
"""
from __future__ import annotations

import functools
import importlib.util
from importlib import metadata
from typing import List, Optional, Tuple

from wenxin.common.errors import InstallError

MIN_PADDLE = (3, 0)
# Distributions that install the ``paddle`` package (Paddle's own index adds the device builds).
PADDLE_DISTRIBUTIONS = ("paddlepaddle", "paddlepaddle-gpu", "paddlepaddle-xpu", "paddlepaddle-dcu",
                        "paddlepaddle-rocm", "paddlepaddle-npu")
INSTALL_HINT = ("install one build: pip install \"wenxin[cpu]\" for CPU, or paddlepaddle-gpu 3.x from "
                "Paddle's package index for CUDA (docs/install.md)")


def version_tuple(text: str) -> Tuple[int, ...]:
    """``"3.3.1"`` -> ``(3, 3, 1)``; suffixes such as ``rc0`` or ``.post120`` are dropped."""
    parts = []
    for piece in text.split(".")[:3]:
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def installed_builds() -> List[Tuple[str, str]]:
    """(distribution, version) of each installed Paddle build."""
    builds = []
    for name in PADDLE_DISTRIBUTIONS:
        try:
            builds.append((name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            continue
    return builds


def paddle_problem() -> Optional[str]:
    """Why wenxin cannot use the installed Paddle, or None."""
    builds = installed_builds()
    if len(builds) > 1:
        listed = ", ".join(f"{name} {version}" for name, version in builds)
        return (f"more than one PaddlePaddle build is installed ({listed}); they overwrite each other's "
                f"`paddle` package: pip uninstall all of them, then {INSTALL_HINT}")
    if not builds:
        if importlib.util.find_spec("paddle") is None:
            return f"PaddlePaddle is not installed; {INSTALL_HINT}"
        return None  # built from source: checked by its version after import
    name, version = builds[0]
    return old_paddle_problem(name, version)


def old_paddle_problem(name: str, version: str) -> Optional[str]:
    """The problem with Paddle ``version`` if it is older than wenxin needs (a source build's
    ``0.0.0`` passes)."""
    found = version_tuple(version)
    if found == (0, 0, 0) or found[:2] >= MIN_PADDLE:
        return None
    return (f"wenxin needs PaddlePaddle >= {'.'.join(map(str, MIN_PADDLE))}, but {name} {version} is installed "
            f"(PyPI's newest paddlepaddle-gpu is 2.6; 3.x CUDA builds come from Paddle's own index); {INSTALL_HINT}")


@functools.lru_cache(maxsize=1)
def require_paddle() -> None:
    """Raise one ``InstallError`` line if the installed Paddle cannot run wenxin."""
    problem = paddle_problem()
    if problem:
        raise InstallError(problem)


def cpu_build_problem(key: str) -> Optional[str]:
    """Why ``key`` (a config key asking for a GPU) cannot have one, where the installed builds tell
    without importing Paddle: a CPU build alone. None where it may (a GPU build, which ``require_gpu``
    checks once Paddle loads)."""
    builds = installed_builds()
    if len(builds) != 1 or builds[0][0] != "paddlepaddle":
        return None
    return _cpu_build(key, f"paddlepaddle {builds[0][1]}")


def _cpu_build(key: str, build: str) -> str:
    return (f"{key}: 'gpu', but the installed Paddle ({build}) is a CPU build: install paddlepaddle-gpu 3.x from "
            f"Paddle's package index in its place (docs/install.md), or run on the CPU: --set {key}=cpu")


def require_gpu(key: str) -> None:
    """One ``InstallError`` naming ``key`` (the config key that asked for a GPU) when the
    installed Paddle is a CPU build or sees no GPU."""
    import paddle
    build = ", ".join(f"{name} {version}" for name, version in installed_builds()) or f"paddle {paddle.__version__}"
    if not paddle.is_compiled_with_cuda():
        raise InstallError(_cpu_build(key, build))
    if paddle.device.cuda.device_count() == 0:
        raise InstallError(f"{key}: 'gpu', but the installed Paddle ({build}) sees no GPU (check the driver, "
                           f"CUDA_VISIBLE_DEVICES, and that the build's CUDA version matches the driver), or run on "
                           f"the CPU: --set {key}=cpu")
