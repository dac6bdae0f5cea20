"""Registry scoping and documentation kept in sync with the code."""
import os
import sys

import pytest
from wenxin.common.errors import ConfigError
from wenxin.common.registry import Registry

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "tools"))
from task_reference import render, render_taggers  # noqa: E402 (a tool of the repository, not of the package)


def _class_in(module: str, name: str = "Trainer") -> type:
    return type(name, (), {"__module__": module})


def test_task_scoped_names_prefer_the_task_then_builtin():
    registry = Registry("trainer")
    builtin = registry.register("CustomDynamicTrainer")(_class_in("wenxin.controller.x"))
    task_a = registry.register("CustomDynamicTrainer")(_class_in("wenxin_task_a.trainers"))
    task_b = registry.register("CustomDynamicTrainer")(_class_in("wenxin_task_b.trainers"))
    assert registry.get("CustomDynamicTrainer", "wenxin_task_a") is task_a
    assert registry.get("CustomDynamicTrainer", "wenxin_task_b") is task_b
    assert registry.get("CustomDynamicTrainer", "wenxin_task_c") is builtin
    replaced = registry.register("CustomDynamicTrainer")(_class_in("wenxin_task_a.other"))
    assert registry.get("CustomDynamicTrainer", "wenxin_task_a") is replaced


def test_unknown_name_lists_known_and_suggests(monkeypatch):
    from wenxin.common import registry as registry_module
    registry = Registry("model")
    registry.register("CnnClassification")(_class_in("wenxin.models"))
    monkeypatch.setattr(registry_module, "WITHOUT_PADDLE", [])
    with pytest.raises(ConfigError) as info:
        registry.get("CnnClasification", None, "model.type")
    assert str(info.value) == ("model.type: unknown model type 'CnnClasification' "
                               "(did you mean 'CnnClassification'?); known: CnnClassification")
    monkeypatch.setattr(registry_module, "WITHOUT_PADDLE", ["wenxin.models.ernie"])  # a venv without Paddle
    with pytest.raises(ConfigError, match=r"known: CnnClassification \(Paddle is not installed: "
                                          r"wenxin.models.ernie not loaded\)$"):
        registry.get("CnnClasification", None, "model.type")


@pytest.mark.paddle
def test_the_reference_pages_match_the_schema():
    def page(name):
        with open(os.path.join(REPO, "docs", name), encoding="utf-8") as f:
            return f.read()
    assert render() in page("reference.md"), \
        "docs/reference.md is stale: regenerate with python tools/task_reference.py --write docs/reference.md"
    assert render_taggers() in page("tasks.md"), \
        "docs/tasks.md's tagger keys are stale: regenerate with python tools/task_reference.py taggers --write docs/tasks.md"


def test_the_readme_and_changelog_link_to_files_that_exist():
    """The site's build checks the links inside docs/; these two live outside it."""
    import re
    for name in ("README.md", "CHANGELOG.md"):
        with open(os.path.join(REPO, name), encoding="utf-8") as f:
            text = f.read()
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" not in target:
                assert os.path.exists(os.path.join(REPO, target)), f"{name}: a link to {target}, which does not exist"


def test_the_sites_changelog_is_the_repositorys():
    """docs/changelog.md is CHANGELOG.md for the site (MkDocs reads only docs/): they must not drift."""
    with open(os.path.join(REPO, "CHANGELOG.md"), encoding="utf-8") as f, \
            open(os.path.join(REPO, "docs", "changelog.md"), encoding="utf-8") as g:
        assert f.read() == g.read(), "copy CHANGELOG.md to docs/changelog.md"


def test_ci_runs_the_readmes_test_command_and_the_chinese_quick_start_says_the_same():
    """CI must run exactly what the README tells users to run (the second quick-start command's
    pytest part), and the Chinese quick start must give users the same two commands."""
    import re

    def text(*parts):
        with open(os.path.join(REPO, *parts), encoding="utf-8") as f:
            return f.read()
    readme = text("README.md")
    block = re.search(r"## Quick start\s+```bash\n(.*?)```", readme, re.S)
    assert block, "README.md: no bash block under ## Quick start"
    commands = [line for line in block.group(1).splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2, commands
    pytest_part = commands[1].split("&&")[-1].strip()
    assert pytest_part.startswith("python -m pytest"), commands[1]
    assert pytest_part in text(".ci", "run"), f".ci/run does not run the README's test command: {pytest_part}"
    quickstart = text("docs", "quickstart.zh.md")
    for command in commands:
        assert command in quickstart, f"docs/quickstart.zh.md lacks the README's command: {command}"


def test_the_compatibility_tier_names_test_files_that_exist():
    """.ci/suite-on-python runs the files .ci/compat-tests lists on the oldest and newest Pythons; a
    renamed or deleted file must fail here, not leave CI's tier shorter than it reads."""
    with open(os.path.join(REPO, ".ci", "compat-tests"), encoding="utf-8") as f:
        paths = [line.split("#")[0].strip() for line in f]
    paths = [p for p in paths if p]
    assert len(paths) >= 10, paths
    missing = [p for p in paths if not os.path.isfile(os.path.join(REPO, p)) or not os.path.basename(p).startswith("test_")]
    assert not missing, f".ci/compat-tests names no test file: {missing}"
    assert len(set(paths)) == len(paths), "a file is listed twice"
