"""Private or unstable interfaces of Paddle, VisualDL and uvicorn are reached only through
``wenxin/compat/``, whose docstring is their inventory, each checked against a version it names.
Read as text: nothing is imported to check it."""
import ast
import os
import re

from conftest import REPO

PRIVATE = re.compile(r"\b(paddle\.(base|pir|fluid|framework\.core|static\.pir_io)|uvicorn\.(protocols|server|lifespan)"
                     r"|visualdl\.(proto|io|component))\b")
COMPAT = os.path.join(REPO, "wenxin", "compat")


def code_lines(path: str):
    """(line number, line) of the file's code, comments and docstrings left out."""
    text = open(path, encoding="utf-8").read()
    docstrings = set()
    for node in ast.walk(ast.parse(text, path)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(getattr(node.body[0], "value", None), ast.Constant):
            docstrings.update(range(node.body[0].lineno, node.body[0].end_lineno + 1))
    for number, line in enumerate(text.splitlines(), 1):
        if number not in docstrings:
            yield number, line.split("#", 1)[0]


def test_only_compat_reaches_into_private_interfaces():
    found = []
    for top in ("wenxin", "tasks"):
        for root, _, files in os.walk(os.path.join(REPO, top)):
            if root.startswith(COMPAT):
                continue
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(root, name)
                    found += [f"{os.path.relpath(path, REPO)}:{n}: {line.strip()}" for n, line in code_lines(path)
                              if PRIVATE.search(line)]
    assert not found, "private interfaces outside wenxin/compat/ (move them there and list them):\n" + "\n".join(found)


def test_the_inventory_names_every_compat_module_and_the_versions_checked():
    init = open(os.path.join(COMPAT, "__init__.py"), encoding="utf-8").read()
    inventory = ast.get_docstring(ast.parse(init))
    modules = sorted(name[:-3] for name in os.listdir(COMPAT) if name.endswith(".py") and name != "__init__.py")
    assert [m for m in modules if f"``{m}``" not in inventory] == []
    checked = next(node.value for node in ast.parse(init).body if isinstance(node, ast.AnnAssign)
                   and getattr(node.target, "id", "") == "CHECKED")
    assert sorted(ast.literal_eval(checked)) == ["paddle", "uvicorn", "visualdl"]


def test_the_check_sees_a_private_interface():
    assert PRIVATE.search("x = paddle.pir.core.create_persistable_value(")
    assert PRIVATE.search("from paddle.base.data_feeder import convert_dtype")
    assert not PRIVATE.search("paddle.static.data(name, shape)")
