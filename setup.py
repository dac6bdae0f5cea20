"""Package layout only (metadata is in pyproject.toml): the repository keeps the built-in tasks
in ``tasks/`` and the example task files in ``examples/``; installed, they are ``wenxin.tasks``
and ``wenxin.examples``, so a wheel finds them by name from any working folder."""
import os

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))
MAPPED = {"wenxin.tasks": "tasks", "wenxin.examples": "examples"}


def mapped_packages() -> dict:
    """Each package under a mapped folder -> its folder (relative, as setuptools wants). A task's
    ``examples/`` folder (task files, no Python) is listed as a data package of its own, so
    setuptools neither skips it nor warns that it would."""
    packages = {}
    for package, folder in MAPPED.items():
        packages[package] = folder
        for sub in find_packages(os.path.join(HERE, folder)):
            packages[f"{package}.{sub}"] = os.path.join(folder, *sub.split("."))
    for task in sorted(os.listdir(os.path.join(HERE, "tasks"))):
        if os.path.isdir(os.path.join(HERE, "tasks", task, "examples")):
            packages[f"wenxin.tasks.{task}.examples"] = os.path.join("tasks", task, "examples")
    return packages


MAPPED_PACKAGES = mapped_packages()
EXAMPLE_PACKAGES = [p for p in MAPPED_PACKAGES if p.endswith(".examples") and p.startswith("wenxin.tasks.")]

setup(
    packages=find_packages(include=["wenxin", "wenxin.*"]) + list(MAPPED_PACKAGES),
    package_dir=MAPPED_PACKAGES,
    package_data={**{p: ["*.json", "*/*.json"] for p in EXAMPLE_PACKAGES},
                  "wenxin.examples": ["*.json", "*.py", "*.yaml"],
                  # ERNIE-kit's extraction demo data and label maps, laid out as ERNIE-kit's task
                  "wenxin.tasks.information_extraction_many_to_many": ["data/*/*/*.json", "dict/*.json"],
                  "wenxin": ["py.typed"]},  # PEP 561: wenxin's type hints are for its users' type checkers too
)
