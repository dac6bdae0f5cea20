"""Package layout (metadata is in pyproject.toml): the repository keeps the built-in tasks in
``tasks/`` and the example task files in ``examples/``; installed, they are ``wenxin.tasks`` and
``wenxin.examples``, so a wheel finds them by name from any working folder. And one optional C
extension, ``wenxin.speedups._char_ids_native`` (text to ids for character fields, see
``wenxin/speedups/char_ids.py``): where no C compiler is at hand it is skipped with a warning, and
wenxin converts that text in numpy instead, to the same ids."""
import os

from setuptools import Extension, find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))
MAPPED = {"wenxin.tasks": "tasks", "wenxin.examples": "examples"}
DATA_FILES = ("*.json", "*.tsv")  # what a task's data folders hold (ERNIE-kit's JSON lines, label maps, TSV)


def mapped_packages() -> dict:
    """Each package under a mapped folder -> its folder (relative, as setuptools wants). A task's
    folders of JSON or TSV files without Python (``examples/``, and ERNIE-kit's ``data/`` and ``dict/``
    layout) are listed as data packages of their own, so setuptools neither skips them nor warns
    that it would."""
    packages = {}
    for package, folder in MAPPED.items():
        packages[package] = folder
        for sub in find_packages(os.path.join(HERE, folder)):
            packages[f"{package}.{sub}"] = os.path.join(folder, *sub.split("."))
    for task in sorted(os.listdir(os.path.join(HERE, "tasks"))):
        root = os.path.join(HERE, "tasks", task)
        for folder, _, files in os.walk(root):
            relative = os.path.relpath(folder, root)
            if relative != "." and "__pycache__" not in relative and any(f.endswith((".json", ".tsv")) for f in files) \
                    and not os.path.isfile(os.path.join(folder, "__init__.py")):  # examples/, data/, dict/
                packages[f"wenxin.tasks.{task}." + relative.replace(os.sep, ".")] = os.path.relpath(folder, HERE)
    return packages


MAPPED_PACKAGES = mapped_packages()
DATA_PACKAGES = [p for p in MAPPED_PACKAGES if p.startswith("wenxin.tasks.") and p.count(".") > 2]

setup(
    # wenxin.studio.static: the studio's script, styles, messages (both languages), vendored uPlot (MIT): data
    packages=find_packages(include=["wenxin", "wenxin.*"]) + list(MAPPED_PACKAGES) + ["wenxin.studio.static"],
    package_dir=MAPPED_PACKAGES,
    package_data={**{p: list(DATA_FILES) for p in DATA_PACKAGES}, "wenxin.examples": ["*.json", "*.py", "*.yaml"],
                  # PEP 561: wenxin's type hints are for its users' type checkers too (the C kernel's too)
                  "wenxin": ["py.typed"], "wenxin.speedups": ["_char_ids_native.pyi"],
                  "wenxin.studio.static": ["*.js", "*.css", "*.json", "*.LICENSE"]},
    ext_modules=[Extension("wenxin.speedups._char_ids_native", ["wenxin/speedups/_char_ids_native.c"],
                           optional=True)],
)
