"""Install wenxin: ``pip install -e .`` (CPU paddle) or ``pip install -e .[gpu]`` guidance in README."""
import os
import re

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def version() -> str:
    """The one version, ``wenxin.__version__`` (read without importing wenxin)."""
    with open(os.path.join(HERE, "wenxin", "__init__.py"), encoding="utf-8") as f:
        return re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


def requirements(name: str) -> list:
    with open(os.path.join(HERE, name), encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


setup(
    name="wenxin",
    version=version(),
    description="A dual static/dynamic graph task framework on PaddlePaddle",
    long_description=open(os.path.join(HERE, "README.md"), encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    packages=find_packages(include=["wenxin", "wenxin.*"]),
    install_requires=requirements("requirements.txt"),
    extras_require={"examples": ["snownlp>=0.12"], "test": ["pytest>=7", "snownlp>=0.12"]},
    entry_points={"console_scripts": ["wenxin=wenxin.cli:main"]},
)
