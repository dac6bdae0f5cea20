"""Imports run down the floors that ../shared/DESIGN.md draws (and docs/extending.md names): a
module imports only modules on its own floor or below. Imports under ``if TYPE_CHECKING:`` are
type-only and do not count; the registry's lazy loading of built-ins names modules as strings
and is no import statement. Read with ``ast``: nothing is imported to check it."""
import ast
import os
from typing import Iterator, Tuple

from conftest import REPO

# floor: the packages and modules on it (a longer prefix wins), top first
FLOORS = [
    ("face", ["wenxin.cli", "wenxin.__main__", "wenxin.api", "wenxin.inspection", "wenxin.lr_find", "wenxin.studio",
              "wenxin"]),
    ("runner", ["wenxin.runner"]),
    ("trainer, sweep, serving", ["wenxin.controller", "wenxin.sweep", "wenxin.sweep_methods", "wenxin.folds",
                                 "wenxin.inference"]),
    ("tasks, models", ["tasks", "wenxin.models"]),
    ("data, optim", ["wenxin.data", "wenxin.optim"]),
    ("config", ["wenxin.config"]),
    ("translation, compat", ["wenxin.translation", "wenxin.compat"]),
    ("ground", ["wenxin.common", "wenxin.metrics"]),
]
NEVER = [("wenxin.inference", "wenxin.controller", "serving never imports training code"),
         ("wenxin.inference", "wenxin.runner", "serving never imports training code")]


def floor_of(module: str) -> int:
    """The index of ``module``'s floor (0 is the top), by its longest matching prefix."""
    best, floor = -1, len(FLOORS)
    for index, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, floor = len(prefix), index
    return floor


def module_name(path: str) -> str:
    rel = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
    return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


def imports(path: str) -> Iterator[Tuple[int, str]]:
    """``(line, module)`` of each import of wenxin or tasks in the file, outside TYPE_CHECKING."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    type_only = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING":
            type_only.update(id(n) for child in node.body for n in ast.walk(child))
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        for name in names:
            if name.split(".")[0] in ("wenxin", "tasks"):
                yield node.lineno, name


def sources() -> Iterator[str]:
    for top in ("wenxin", "tasks"):
        for root, _, files in os.walk(os.path.join(REPO, top)):
            yield from (os.path.join(root, f) for f in sorted(files) if f.endswith(".py"))


def test_every_import_runs_down_the_floors():
    upward, forbidden = [], []
    for path in sources():
        importer = module_name(path)
        for line, imported in imports(path):
            where = f"{os.path.relpath(path, REPO)}:{line}: {importer} ({FLOORS[floor_of(importer)][0]}) imports " \
                    f"{imported} ({FLOORS[floor_of(imported)][0]})" if floor_of(imported) < len(FLOORS) else ""
            if floor_of(imported) < floor_of(importer):
                upward.append(where)
            for source, target, why in NEVER:
                if importer.startswith(source) and imported.startswith(target):
                    forbidden.append(f"{where}: {why}")
    assert not upward, "imports that run up:\n" + "\n".join(upward)
    assert not forbidden, "\n".join(forbidden)


def test_the_check_sees_an_import_that_runs_up(tmp_path):
    """The checker itself: an upward import is found, a type-only one is not."""
    path = tmp_path / "probe.py"
    path.write_text("from typing import TYPE_CHECKING\nfrom wenxin.controller import engine\n"
                    "if TYPE_CHECKING:\n    from wenxin.runner import build_trainer\n", encoding="utf-8")
    assert list(imports(str(path))) == [(2, "wenxin.controller")]
    assert floor_of("wenxin.controller.engine") < floor_of("wenxin.data.lines") < floor_of("wenxin.common.errors")
    assert floor_of("tasks.text_classification.models") == floor_of("wenxin.models.ernie")
