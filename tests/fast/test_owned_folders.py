"""Folders an export replaces only when it proves it wrote them (``wenxin.common.owned_folders``,
issue 67 point 1): what may be replaced and what is refused untouched, one error for a write
that fails, and a process killed at every file operation of a replacing write, with the one-step
swap and with the two-rename one, leaving the old or the new folder whole (the latter put back by
the next write) and no leftover after the next write."""
import builtins
import contextlib
import errno
import hashlib
import os
import shutil
import subprocess
from typing import Any, Dict, List, Optional

import pytest
from wenxin.common import manifest, owned_folders
from wenxin.common.errors import CheckpointError, ConfigError

KIND = "pretrained"


def write_export(folder: str, version: str, kind: str = KIND, files: int = 3) -> None:
    """A folder as an export writes it: a few files, a subfolder, sealed with its kind."""
    os.makedirs(os.path.join(folder, "sub"), exist_ok=True)
    for i in range(files):
        with open(os.path.join(folder, f"part-{i}.safetensors"), "w") as f:
            f.write(f"{version} {i}")
    with open(os.path.join(folder, "config.json"), "w") as f:
        f.write("{}")
    with open(os.path.join(folder, "sub", "tokenizer.model"), "w") as f:
        f.write(version)
    manifest.write_manifest(folder, 1, kind=kind)


def tree(folder: str) -> Dict[str, str]:
    """Every file below ``folder`` (hidden ones too) with its SHA-256; links by their target."""
    found = {}
    for root, dirs, names in os.walk(folder):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, folder)
            found[rel] = ("-> " + os.readlink(path) if os.path.islink(path) else
                          hashlib.sha256(open(path, "rb").read()).hexdigest())
    return found


def version_of(folder: str) -> Optional[str]:
    """Which export is whole at ``folder`` (its files all as sealed), or None."""
    if not os.path.isdir(folder):
        return None
    manifest.verify_folder(folder, "export", CheckpointError)
    assert owned_folders.foreign_content(folder, KIND) is None
    with open(os.path.join(folder, "sub", "tokenizer.model")) as f:
        return f.read()


def export(final: str, version: str) -> None:
    with owned_folders.writing(final, KIND) as tmp:
        write_export(tmp, version)


# ---- what may be replaced ---------------------------------------------------------------------
def test_an_earlier_export_of_the_same_kind_is_replaced(tmp_path):
    final = str(tmp_path / "out")
    export(final, "old")
    export(final, "new")
    assert version_of(final) == "new"
    assert sorted(os.listdir(tmp_path)) == ["out"]  # nothing left beside it
    empty = tmp_path / "empty"
    empty.mkdir()
    export(str(empty), "new")
    assert version_of(str(empty)) == "new"


def test_temporaries_a_killed_writer_of_the_kind_left_do_not_make_it_foreign(tmp_path):
    """A writer killed while it sealed (``manifest.json.tmp``) or added a file afterwards
    (``.model.onnx.tmp`` of an ONNX conversion) left its own temporary: the folder is still its
    own. A ``.tmp`` file of any other name is not."""
    final = tmp_path / "out"
    write_export(str(final), "old", kind="inference")
    (final / "manifest.json.tmp").write_text("half a manifest")
    (final / ".model.onnx.tmp").write_text("half a model")
    assert owned_folders.foreign_content(str(final), "inference") is None
    (final / "notes.tmp").write_text("the user's")
    assert "holds notes.tmp" in owned_folders.foreign_content(str(final), "inference")


def test_an_older_wenxins_export_without_a_kind_is_known_by_its_files(tmp_path):
    final = str(tmp_path / "out")
    write_export(final, "old")
    manifest.write_manifest(final, 1)  # no kind: as wenxin wrote a -PT folder before
    assert owned_folders.kind_of(final) == KIND
    export(final, "new")
    assert version_of(final) == "new"


@pytest.mark.parametrize("case", ["checkpoint", "inference export", "an older checkpoint", "user folder",
                                  "added file", "added hidden file", "changed file", "file", "link",
                                  "dangling link", "unreadable manifest"])
def test_anything_else_is_refused_before_anything_is_written_and_left_as_it_was(tmp_path, case):
    final = tmp_path / "out"
    expected = {"checkpoint": "holds a checkpoint", "inference export": "holds an inference export",
                "an older checkpoint": "holds a checkpoint", "user folder": "is not an earlier export",
                "added file": "holds notes.txt, which the earlier export did not write",
                "added hidden file": "holds .git/HEAD, which the earlier export did not write",
                "changed file": "holds config.json, changed since", "file": "is a file, not a folder",
                "link": "is a symbolic link", "dangling link": "which does not exist",
                "unreadable manifest": "is not an earlier export"}[case]
    if case in ("checkpoint", "inference export"):
        write_export(str(final), "mine", kind={"checkpoint": "checkpoint", "inference export": "inference"}[case])
    elif case == "an older checkpoint":
        final.mkdir()
        (final / "trainer_state.json").write_text("{}")
        (final / "model.safetensors").write_text("weights")
        manifest.write_manifest(str(final), 2)
    elif case == "user folder":
        final.mkdir()
        (final / "notes.txt").write_text("keep me")
    elif case.startswith("added") or case == "changed file":
        write_export(str(final), "mine")
        extra = {"added file": "notes.txt", "added hidden file": ".git/HEAD", "changed file": "config.json"}[case]
        os.makedirs(os.path.dirname(str(final / extra)), exist_ok=True)
        (final / extra).write_text("something longer of the user's")
    elif case == "file":
        final.write_text("a file")
    elif case == "link":
        write_export(str(tmp_path / "real"), "mine")
        final.symlink_to(tmp_path / "real")
    elif case == "dangling link":
        final.symlink_to(tmp_path / "nowhere")
    else:
        write_export(str(final), "mine")
        (final / "manifest.json").write_text("{not json")
    before = tree(str(tmp_path))
    with pytest.raises(ConfigError, match=expected):
        export(str(final), "new")
    assert tree(str(tmp_path)) == before


# ---- failed writes: one error, the earlier export kept, nothing left -------------------------
def test_a_full_disk_is_one_error_and_the_earlier_export_stays(tmp_path):
    final = str(tmp_path / "out")
    export(final, "old")
    before = tree(str(tmp_path))
    with pytest.raises(CheckpointError, match=rf"{final}: cannot write the model folder \(No space left on device\); "
                                              r"the earlier one is kept"):
        with owned_folders.writing(final, KIND) as tmp:
            write_export(tmp, "new")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert tree(str(tmp_path)) == before


def test_a_path_through_a_file_is_one_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=f"is inside {tmp_path / 'file'}, which is not a folder"):
        export(str(tmp_path / "file" / "out" / "deeper"), "new")
    assert (tmp_path / "file").read_text() == "x"


@contextlib.contextmanager
def read_only(folder: str):
    """``folder`` made unwritable, even for root (``chattr +i``) where chmod does not bind."""
    if os.geteuid() != 0:
        os.chmod(folder, 0o555)
        try:
            yield
        finally:
            os.chmod(folder, 0o755)
        return
    if not shutil.which("chattr") or subprocess.run(["chattr", "+i", folder], capture_output=True).returncode:
        pytest.skip("running as root, and chattr +i does not work on this file system")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", folder], check=True)


def test_a_read_only_destination_is_one_error_and_the_earlier_export_stays(tmp_path):
    parent = tmp_path / "exports"
    final = str(parent / "out")
    export(final, "old")
    before = tree(str(tmp_path))
    with read_only(str(parent)):
        with pytest.raises(CheckpointError, match=f"{final}: cannot write the model folder .*the earlier one is kept"):
            export(final, "new")
    assert tree(str(tmp_path)) == before


# ---- a kill at every file operation ---------------------------------------------------------------
class Killed(BaseException):
    """The process is gone: nothing after this reaches the disk."""


class Operations:
    """Counts the operations that change the disk; raises ``Killed`` at the ``kill_at``-th and at
    every one after it (no cleanup runs after SIGKILL)."""

    def __init__(self, kill_at: Optional[int] = None) -> None:
        self.kill_at, self.count, self.dead = kill_at, 0, False
        self.seen: List[str] = []

    def __call__(self, what: str) -> None:
        if self.dead:
            raise Killed(what)
        self.count += 1
        self.seen.append(what)
        if self.count == self.kill_at:
            self.dead = True
            raise Killed(what)


def watched(monkeypatch: pytest.MonkeyPatch, ops: Operations, one_step_swap: bool) -> None:
    def wrap(module: Any, name: str) -> None:
        real = getattr(module, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            ops(name)
            return real(*args, **kwargs)
        monkeypatch.setattr(module, name, call)

    for name in ("rename", "replace", "remove", "unlink", "rmdir", "mkdir"):
        wrap(os, name)
    real_open = builtins.open

    def watched_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if any(c in mode for c in "wax+"):
            ops("open-for-writing")
        return real_open(file, mode, *args, **kwargs)
    monkeypatch.setattr(builtins, "open", watched_open)
    if one_step_swap:
        wrap(owned_folders, "exchange")
    else:
        monkeypatch.setattr(owned_folders, "exchange", lambda a, b: ops("exchange (unsupported)") or False)


@pytest.mark.parametrize("one_step_swap", [True, False], ids=["renameat2 exchange", "two renames"])
def test_a_kill_at_every_file_operation_leaves_the_old_or_the_new_export_and_the_next_cleans_up(
        tmp_path, monkeypatch, one_step_swap):
    if one_step_swap and not owned_folders.exchange(str(tmp_path), str(tmp_path)):
        pytest.skip("this system cannot exchange two folders in one step")
    probe = Operations()
    with monkeypatch.context() as m:
        export(str(tmp_path / "probe"), "old")
        watched(m, probe, one_step_swap)
        export(str(tmp_path / "probe"), "new")
    swap = "exchange" if one_step_swap else "rename"
    assert probe.count > 10 and {swap, "replace", "rmdir", "unlink", "mkdir", "open-for-writing"} <= set(probe.seen)
    outcomes = set()
    for kill_at in range(1, probe.count + 1):
        final = str(tmp_path / f"kill-{kill_at}")
        export(final, "old")
        with monkeypatch.context() as m:
            watched(m, Operations(kill_at), one_step_swap)
            with pytest.raises(Killed):
                export(final, "new")
        found = version_of(final)
        if found is None:  # only between the two renames, and never with the one-step swap
            assert not one_step_swap, kill_at
            owned_folders.tidy_leftovers(final)
            found = version_of(final)
            assert found == "old", kill_at
        outcomes.add(found)
        export(final, "newest")  # the next export cleans whatever the killed one left
        assert version_of(final) == "newest"
        assert not [n for n in os.listdir(tmp_path) if n.startswith(f".kill-{kill_at}.")], kill_at
    assert outcomes == {"old", "new"}  # killed before the swap, and after it
