"""Size limits on wenxin's code (issue 57): no source file over 600 lines, no class over 300.
Read as text: nothing is imported."""
import ast
import os

from conftest import REPO

FILE_LINES, CLASS_LINES = 600, 300


def sources(extensions=(".py", ".js", ".c", ".css", ".html")):
    for top in ("wenxin", "tasks"):
        for root, _, files in os.walk(os.path.join(REPO, top)):
            yield from (os.path.join(root, f) for f in sorted(files) if f.endswith(extensions))


def test_no_source_file_is_over_600_lines():
    long_files = {os.path.relpath(p, REPO): n for p in sources() if (n := len(open(p, encoding="utf-8").readlines()))
                  > FILE_LINES}
    assert not long_files, f"files over {FILE_LINES} lines (split them by concept): {long_files}"


def class_sizes():
    for path in sources((".py",)):
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
            if isinstance(node, ast.ClassDef):
                yield f"{os.path.relpath(path, REPO)}:{node.name}", node.end_lineno - node.lineno + 1


def test_no_class_is_over_300_lines():
    over = {name: size for name, size in class_sizes() if size > CLASS_LINES}
    assert not over, f"classes over {CLASS_LINES} lines (split them by concept): {over}"
