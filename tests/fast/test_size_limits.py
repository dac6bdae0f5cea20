"""Size limits on wenxin's code (issue 57): no source file over 600 lines, no class over 300.
The classes still over their limit are named below with their size today; each may only shrink
(splitting them is open work, listed in docs/status.md). Read as text: nothing is imported."""
import ast
import os

from conftest import REPO

FILE_LINES, CLASS_LINES = 600, 300
# class -> its lines when the limit was set: not split yet, and not to grow
OVER_THE_CLASS_LIMIT = {"wenxin/data/dataset_reader.py:BasicDataSetReader": 383,
                        "wenxin/controller/static_engine.py:StaticEngine": 350,
                        "wenxin/studio/workspace.py:Studio": 334}


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


def test_no_class_is_over_300_lines_but_the_named_ones_and_those_do_not_grow():
    over = {name: size for name, size in class_sizes() if size > CLASS_LINES}
    new = {name: size for name, size in over.items() if name not in OVER_THE_CLASS_LIMIT}
    grown = {name: (OVER_THE_CLASS_LIMIT[name], size) for name, size in over.items()
             if name in OVER_THE_CLASS_LIMIT and size > OVER_THE_CLASS_LIMIT[name]}
    assert not new, f"classes over {CLASS_LINES} lines: {new}"
    assert not grown, f"classes over the limit that grew (was, now): {grown}"
