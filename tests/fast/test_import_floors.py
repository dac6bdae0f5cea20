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
    ("data, optim", ["wenxin.data", "wenxin.optim", "wenxin.speedups"]),
    ("config", ["wenxin.config"]),
    ("translation, compat", ["wenxin.translation", "wenxin.compat"]),
    ("ground", ["wenxin.common", "wenxin.metrics", "wenxin.hubs"]),
]
NEVER = [("wenxin.inference", "wenxin.controller", "serving never imports training code"),
         ("wenxin.data", "wenxin.speedups", "the speed-ups plug themselves into wenxin.data.text_speedups"),
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


def module_edges(path: str, known: set) -> Iterator[Tuple[int, str]]:
    """``(line, module)`` of every import of a module in ``known`` from the file, type-only and
    function-local ones included: ``from a.b import c`` names ``a.b.c`` where that is a module."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in known else node.module
                     for alias in node.names]
        else:
            continue
        yield from ((node.lineno, name) for name in names if name in known)


def circles(graph: dict) -> list:
    """The strongly connected groups of more than one module in ``graph`` (Tarjan's algorithm)."""
    index: dict = {}
    low: dict = {}
    stack: list = []
    on_stack: set = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_modules_import_each_other_in_a_circle():
    """No circle of imports among wenxin's modules, counting type-only and function-local imports
    too (a part that must name something above it names a Protocol of what it uses instead).
    A package importing its own modules (an ``__init__`` that registers them) is no circle."""
    paths = {module_name(path): path for path in sources()}
    known = set(paths)
    graph = {module: {target for _, target in module_edges(path, known)
                      if target != module and not (path.endswith("__init__.py") and target.startswith(module + "."))}
             for module, path in paths.items()}
    found = circles(graph)
    assert not found, "modules in a circle of imports:\n" + "\n".join(" <-> ".join(group) for group in found)


def test_the_circle_check_sees_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
