"""Package layout only (metadata is in pyproject.toml): the repository keeps the built-in tasks
in ``tasks/`` and the example task files in ``examples/``; installed, they are ``wenxin.tasks``
and ``wenxin.examples``, so a wheel finds them by name from any working folder."""
import os

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))
MAPPED = {"wenxin.tasks": "tasks", "wenxin.examples": "examples"}


def mapped_packages() -> dict:
    """Each package under a mapped folder -> its folder (relative, as setuptools wants)."""
    packages = {}
    for package, folder in MAPPED.items():
        packages[package] = folder
        for sub in find_packages(os.path.join(HERE, folder)):
            packages[f"{package}.{sub}"] = os.path.join(folder, *sub.split("."))
    return packages


MAPPED_PACKAGES = mapped_packages()

setup(
    packages=find_packages(include=["wenxin", "wenxin.*"]) + list(MAPPED_PACKAGES),
    package_dir=MAPPED_PACKAGES,
    package_data={"wenxin.tasks": ["*/examples/*.json"], "wenxin.examples": ["*.json", "*.py", "*.yaml"]},
)
