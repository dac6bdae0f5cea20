"""Print pip constraints that hold each runtime dependency (and the ``cpu`` extra's Paddle) to the
oldest minor line its lower bound in pyproject.toml allows: ``numpy>=1.23`` -> ``numpy==1.23.*``,
``httptools>=0.6.1`` -> ``httptools~=0.6.1``. (The newest patch of that line: the oldest patches
often lack wheels for the Pythons wenxin supports.)

Usage: python .ci/oldest_constraints.py pyproject.toml > oldest.txt
"""
from __future__ import annotations

import re
import sys
from typing import Iterator, List

LOWER_BOUND = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*>=\s*([0-9]+(?:\.[0-9]+)+)\s*(?:;.*)?$")


def requirement_lists(text: str) -> Iterator[str]:
    """The requirement strings of ``dependencies = [...]`` and the ``cpu = [...]`` extra."""
    for key in ("dependencies", "cpu"):
        match = re.search(rf"^{key} = \[(.*?)\]", text, re.S | re.M)
        if match is None:
            raise SystemExit(f"pyproject.toml: no {key} = [...] list")
        yield from re.findall(r'"([^"]+)"', match.group(1))


def oldest_constraints(text: str) -> List[str]:
    lines = []
    for requirement in requirement_lists(text):
        match = LOWER_BOUND.match(requirement.split(",")[0])
        if match is None:
            raise SystemExit(f"pyproject.toml: {requirement!r} has no lower bound (name>=X.Y)")
        name, version = match.groups()
        parts = version.split(".")
        lines.append(f"{name}=={version}.*" if len(parts) == 2 else f"{name}~={version}")
    return lines


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        print("\n".join(oldest_constraints(f.read())))
