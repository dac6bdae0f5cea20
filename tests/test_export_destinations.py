"""Where ``wenxin export`` writes, on real checkpoints (issue 67 point 1): an export, in every
format, leaves the checkpoint it came from verifiable (``evaluate``, another export and
``resume: auto`` take it); ``--output`` replaces only an earlier export of the same format and
refuses a checkpoint, another kind of export, a folder of the user's, links, files and
unwritable places with one error, leaving them byte for byte; and a real SIGKILL at each file
operation of a ``-PT`` export leaves the old or the new export whole, which the next export
replaces without leftovers. ``wenxin migrate -o`` never writes through a link or over a file."""
import hashlib
import json
import os
import signal
import subprocess
import sys

import pytest

pytest.importorskip("sentencepiece")

from conftest import REPO, assert_one_error_block, build, task_config, write_config  # noqa: E402
from test_chat_sft import LORA, sft_config, sft_data  # noqa: E402,F401 (the fixture)
from wenxin.cli import main  # noqa: E402
from wenxin.common import owned_folders  # noqa: E402
from wenxin.controller.checkpoint import is_valid  # noqa: E402

sys.path.insert(0, os.path.join(REPO, "tests", "fast"))
from test_owned_folders import read_only, tree  # noqa: E402


def chat_run(tmp_path, data):
    """A LoRA SFT run with checkpoints at steps 2 and 4 (resume: auto); its task file and checkpoints."""
    config = sft_config(data, str(tmp_path / "out"), max_steps=4, save_model_step=2, is_eval_dev=0,
                        keep_checkpoint_max=3, resume="auto")
    config["model"]["lora"] = dict(LORA, dropout=0.0)
    path = write_config(str(tmp_path / "task.json"), config)
    build(config, tmp_path).do_train()
    root = tmp_path / "out" / "checkpoints"
    return path, str(root / "step_2"), str(root / "step_4")


def cli(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_checkpoint_still_serves(capsys, task, checkpoint, later_steps):
    """The checkpoint verifies, evaluates, exports again, and ``resume: auto`` continues from it."""
    assert is_valid(checkpoint) is None
    code, out, err = cli(capsys, "evaluate", "--param_path", task, "--checkpoint", checkpoint)
    assert code == 0, err[-2000:]
    code, out, err = cli(capsys, "train", "--param_path", task, "--set", f"trainer.max_steps={later_steps}")
    assert code == 0, err[-2000:]
    assert f"resumed from {checkpoint} at step" in err, err[-3000:]


def test_every_export_format_leaves_its_checkpoint_verifiable(tmp_path, sft_data, capsys):  # noqa: F811
    task, _, checkpoint = chat_run(tmp_path, sft_data)
    for format_ in ("pt", "paddle"):
        for _ in range(2):  # a second export replaces the first
            code, out, err = cli(capsys, "export", "--param_path", task, "--checkpoint", checkpoint,
                                 "--format", format_, "--max_shard_mb", "0.2")
            assert code == 0, err[-2000:]
        assert is_valid(checkpoint) is None, format_
    assert {"pretrained", "inference"} <= set(os.listdir(checkpoint))
    assert_checkpoint_still_serves(capsys, task, checkpoint, 6)


def test_an_onnx_export_leaves_its_checkpoint_verifiable(tmp_path, data_dir, capsys):
    pytest.importorskip("paddle2onnx")
    pytest.importorskip("onnxruntime")
    config = task_config(data_dir, str(tmp_path / "out"), max_steps=4, save_model_step=4, is_eval_test=0,
                         resume="auto")
    task = write_config(str(tmp_path / "task.json"), config)
    code, out, err = cli(capsys, "train", "--param_path", task)
    assert code == 0, err[-2000:]
    checkpoint = str(tmp_path / "out" / "checkpoints" / "step_4")
    code, out, err = cli(capsys, "export", "--param_path", task, "--checkpoint", checkpoint, "--format", "onnx")
    assert code == 0, err[-2000:]
    assert "model.onnx" in os.listdir(os.path.join(checkpoint, "inference"))
    assert_checkpoint_still_serves(capsys, task, checkpoint, 6)


def test_an_output_that_is_not_an_earlier_export_of_its_format_is_refused_untouched(tmp_path, sft_data, capsys):  # noqa: F811,E501
    task, other, checkpoint = chat_run(tmp_path, sft_data)
    assert cli(capsys, "export", "--param_path", task, "--checkpoint", checkpoint)[0] == 0  # <checkpoint>/inference
    mine = tmp_path / "my_results"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    (tmp_path / "a_file").write_text("keep me too")
    os.symlink(str(tmp_path / "elsewhere"), str(tmp_path / "dangling"))
    os.symlink(checkpoint, str(tmp_path / "link"))
    inference = os.path.join(checkpoint, "inference")
    cases = {  # --output: (--format, what the error says)
        checkpoint: ("pt", "holds a checkpoint"), other: ("pt", "holds a checkpoint"),
        checkpoint + "/": ("paddle", "holds a checkpoint"),
        inference: ("pt", "holds an inference export"), str(mine): ("pt", "is not an earlier export"),
        str(tmp_path / "out"): ("paddle", "is not an earlier export"),
        str(tmp_path / "link"): ("pt", "is a symbolic link"), str(tmp_path / "dangling"): ("pt", "does not exist"),
        str(tmp_path / "a_file"): ("paddle", "is a file"),
        str(tmp_path / "a_file" / "out" / "x"): ("pt", "a_file, which is not a folder"),
    }
    before = tree(str(tmp_path))
    for output, (format_, expected) in cases.items():
        code, out, err = cli(capsys, "export", "--param_path", task, "--checkpoint", checkpoint, "--format", format_,
                             "--output", output)
        assert_one_error_block(code, out, err, expected)
        assert tree(str(tmp_path)) == before, output
    assert cli(capsys, "export", "--param_path", task, "--checkpoint", checkpoint, "--format", "pt")[0] == 0
    pretrained = os.path.join(checkpoint, "pretrained")
    code, out, err = cli(capsys, "export", "--param_path", task, "--checkpoint", checkpoint, "--output", pretrained)
    assert_one_error_block(code, out, err, "holds a model folder export (wenxin export --format pt), not an "
                                           "inference export")
    before = tree(str(tmp_path))
    with read_only(checkpoint):
        code, out, err = cli(capsys, "export", "--param_path", task, "--checkpoint", checkpoint, "--format", "pt")
        assert_one_error_block(code, out, err, f"{pretrained}: cannot write the model folder")
    assert tree(str(tmp_path)) == before
    assert is_valid(checkpoint) is None and is_valid(other) is None


def test_a_full_disk_during_a_pt_export_is_one_error_and_the_earlier_export_stays(tmp_path, sft_data, capsys,  # noqa: F811,E501
                                                                                   monkeypatch):
    import errno

    from wenxin.models import safetensors_shards
    task, _, checkpoint = chat_run(tmp_path, sft_data)
    assert cli(capsys, "export", "--param_path", task, "--checkpoint", checkpoint, "--format", "pt")[0] == 0
    before = tree(checkpoint)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(safetensors_shards, "write_bfloat16_file", full)
    code, out, err = cli(capsys, "export", "--param_path", task, "--checkpoint", checkpoint, "--format", "pt")
    assert_one_error_block(code, out, err, "pretrained: cannot write the model folder (No space left on device); "
                                           "the earlier one is kept")
    assert tree(checkpoint) == before


# ---- a real SIGKILL at each file operation of a -PT export -------------------------------------
CHILD = r"""
import builtins, os, signal, sys
from wenxin.common import owned_folders, state_io
kill_at, watched, counted, argv = int(sys.argv[1]), os.path.abspath(sys.argv[2]), sys.argv[3], sys.argv[4:]
if argv[:1] == ["--two-renames"]:
    argv = argv[1:]
    owned_folders.exchange = lambda a, b: False
seen = []
def op(name, path, dir_fd=None):
    if dir_fd is None and not os.path.abspath(os.fsdecode(path)).startswith(watched):
        return
    seen.append(name)
    if len(seen) == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
def wrap(module, name, at=0):
    real = getattr(module, name)
    def call(*args, **kwargs):
        op(name, args[at], kwargs.get("dir_fd"))
        return real(*args, **kwargs)
    setattr(module, name, call)
for name in ("rename", "replace", "remove", "unlink", "rmdir", "mkdir"):
    wrap(os, name)
wrap(owned_folders, "exchange", 1)
wrap(state_io, "save_file", 1)
real_open = builtins.open
def opened(file, mode="r", *args, **kwargs):
    if isinstance(file, (str, bytes, os.PathLike)) and any(c in mode for c in "wax+"):
        op("open-for-writing", file)
    return real_open(file, mode, *args, **kwargs)
builtins.open = opened
from wenxin.cli import main
code = main(argv)
with real_open(counted, "w") as f:
    f.write(" ".join(seen))
sys.exit(code)
"""


def export_child(kill_at, watched, counted, argv, two_renames=False):
    env = {**os.environ, "PYTHONPATH": REPO}
    return subprocess.run([sys.executable, "-c", CHILD, str(kill_at), watched, counted, *(
        ["--two-renames"] if two_renames else []), *argv], capture_output=True, text=True, env=env, timeout=1800)


def dtype_whole_at(folder):
    """The dtype of the whole -PT export at ``folder`` (None: nothing there)."""
    if not os.path.lexists(folder):
        return None
    from wenxin.common.errors import CheckpointError
    from wenxin.common.manifest import verify_folder
    verify_folder(folder, "export", CheckpointError)
    assert owned_folders.foreign_content(folder, "pretrained") is None
    return json.load(open(os.path.join(folder, "config.json")))["dtype"]


def kill_sweep(tmp_path, sft_data, two_renames, every):  # noqa: F811
    task, _, checkpoint = chat_run(tmp_path, sft_data)
    pretrained = os.path.join(checkpoint, "pretrained")
    argv = ["export", "--param_path", task, "--checkpoint", checkpoint, "--format", "pt", "--max_shard_mb", "0.2"]
    counted = str(tmp_path / "ops.txt")
    assert main(argv + ["--dtype", "float32"]) == 0
    probe = export_child(0, checkpoint, counted, argv, two_renames)  # bfloat16 over float32: every operation
    assert probe.returncode == 0, probe.stderr[-3000:]
    operations = open(counted).read().split()
    swap = "rename" if two_renames else "exchange"
    assert swap in operations and "open-for-writing" in operations
    points = range(1, len(operations) + 1) if every else [operations.index(swap) + 1, operations.index(swap) + 2]
    for kill_at in points:
        killed = export_child(kill_at, checkpoint, counted, argv, two_renames)
        assert killed.returncode == -signal.SIGKILL, (kill_at, killed.stderr[-2000:])
        found = dtype_whole_at(pretrained)
        if found is None:  # two renames, killed between them: the next export puts the old one back
            assert two_renames and operations[kill_at - 1] == "rename", kill_at
        else:
            assert found in ("float32", "bfloat16"), kill_at
        assert is_valid(checkpoint) is None, kill_at
        assert main(argv + ["--dtype", "float32"]) == 0
        assert dtype_whole_at(pretrained) == "float32"
        assert not [n for n in os.listdir(checkpoint) if n.startswith(".pretrained.")], (kill_at, operations)
    return hashlib.sha256(" ".join(operations).encode()).hexdigest()


@pytest.mark.parametrize("two_renames", [False, True], ids=["exchange", "two renames"])
def test_a_sigkill_at_the_swap_of_a_pt_export_leaves_an_export_whole(tmp_path, sft_data, two_renames):  # noqa: F811
    kill_sweep(tmp_path, sft_data, two_renames, every=False)


@pytest.mark.slow
def test_a_sigkill_at_every_file_operation_of_a_pt_export_leaves_an_export_whole(tmp_path, sft_data):  # noqa: F811
    kill_sweep(tmp_path, sft_data, two_renames=False, every=True)


# ---- migrate -o ------------------------------------------------------------------------------
def test_migrate_never_writes_through_a_link_or_over_a_file(tmp_path, capsys):
    source = os.path.join(REPO, "tasks", "text_classification", "examples", "cls_bow_ch.json")
    target = tmp_path / "target.json"
    target.write_text("the user's file")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    for output, held in ((link, "a symbolic link to"), (target, "an existing file")):
        code, out, err = cli(capsys, "migrate", source, "-o", str(output))
        assert_one_error_block(code, out, err, [held, "add --force to replace it"])
        assert target.read_text() == "the user's file" and link.is_symlink()
    assert cli(capsys, "migrate", source, "-o", str(link), "--force")[0] == 0
    assert target.read_text() == "the user's file"  # the link itself was replaced, not its target
    assert not link.is_symlink() and json.loads(link.read_text())["trainer"]
    assert cli(capsys, "migrate", source, "-o", str(tmp_path / "new.json"))[0] == 0
