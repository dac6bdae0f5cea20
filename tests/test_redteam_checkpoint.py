"""Red team, checkpoints: damaged, tampered, foreign and malicious checkpoints, and full disks.

Loading a damaged checkpoint ends in one ``error:`` block naming the damaged file (exit 2, no
traceback, no hang) and leaves it as it was; ``resume: auto`` skips it with a warning and takes
the previous good one. Nothing in a checkpoint is executed. A full disk during a checkpoint, an
export or ``run_infer.py`` is one error naming the path, leaving no partial output and every
earlier result intact."""
import errno
import hashlib
import json
import os
import pickle
import shutil

import numpy as np
import pytest
from safetensors.numpy import save_file

from conftest import (assert_one_error_block, build, checkpoint_params, make_sentences, task_config, write_config,
                      write_tsv)
from wenxin.cli import main
from wenxin.common.errors import CheckpointError, DataError, TrainingError

FILES = ["model.safetensors", "optimizer.json", "optimizer.safetensors", "extra.json", "extra.safetensors",
         "trainer_state.json", "config.json", "vocab/text_a.txt", "vocab/label.txt", "manifest.json"]


def _flip(path):
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x01
    open(path, "wb").write(bytes(data))


def _truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def _empty(path):
    open(path, "wb").close()


def _delete(path):
    os.remove(path)


DAMAGE = {"flip": _flip, "truncate": _truncate, "empty": _empty, "delete": _delete}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A finished run with checkpoints step_5 and step_10 (and best)."""
    root = tmp_path_factory.mktemp("pristine")
    data = str(root / "data")
    for name, seed, n in (("train", 1, 160), ("dev", 2, 40), ("test", 3, 40)):
        write_tsv(os.path.join(data, f"{name}.tsv"), make_sentences(n, seed=seed))
    config = task_config(data, str(root / "out"), max_steps=10, save_model_step=5, eval_step=5, is_eval_test=0,
                         keep_optimizer_state="all")  # every checkpoint resumable, so resume can fall back
    build(config, root).do_train()
    return root


@pytest.fixture
def run(tmp_path, pristine, capsys):
    """A copy of the pristine run, and a function that runs the CLI on a config of it."""
    shutil.copytree(pristine / "data", tmp_path / "data")
    shutil.copytree(pristine / "out", tmp_path / "out")
    ckpts = tmp_path / "out" / "checkpoints"

    def config(**trainer):
        base = task_config(str(tmp_path / "data"), str(tmp_path / "out2"), max_steps=11, save_model_step=5,
                           eval_step=5, is_eval_test=0, keep_optimizer_state="all")
        base["trainer"].update(trainer)
        return base

    def cli(cfg):
        code = main(["train", "--param_path", write_config(str(tmp_path / "task.json"), cfg)])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return ckpts, config, cli


def _reseal(folder):
    """Recompute a checkpoint's manifest after tampering (an attacker who knows the format)."""
    manifest_path = os.path.join(folder, "manifest.json")
    manifest = json.load(open(manifest_path))
    for rel in manifest["files"]:
        data = open(os.path.join(folder, rel), "rb").read()
        manifest["files"][rel] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    json.dump(manifest, open(manifest_path, "w"))


def _bytes_of(folder):
    return {rel: open(os.path.join(folder, rel), "rb").read() for rel in FILES if os.path.isfile(os.path.join(folder, rel))}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("filename", FILES)
def test_damaged_file_is_named_and_left_alone(run, hang_guard, filename, damage):
    hang_guard(120)
    ckpts, config, cli = run
    target = ckpts / "step_10"
    DAMAGE[damage](str(target / filename))
    before = _bytes_of(target)
    expected = "manifest" if filename == "manifest.json" else str(target / filename)
    assert_one_error_block(*cli(config(load_checkpoint=str(target))), expected)
    assert _bytes_of(target) == before


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_resume_auto_skips_a_damaged_checkpoint(run, damage):
    ckpts, config, cli = run
    DAMAGE[damage](str(ckpts / "step_10" / "model.safetensors"))
    code, out, err = cli(config(output_path=str(ckpts.parent), resume="auto"))
    assert code == 0, err[-3000:]
    assert "skipping a damaged checkpoint" in err and f"resumed from {ckpts / 'step_5'} at step 5" in err


def test_resume_auto_refuses_when_every_checkpoint_is_damaged(run):
    ckpts, config, cli = run
    for name in ("step_5", "step_10", "best"):
        _flip(str(ckpts / name / "model.safetensors"))
    before = {name: _bytes_of(ckpts / name) for name in ("step_5", "step_10", "best")}
    assert_one_error_block(*cli(config(output_path=str(ckpts.parent), resume="auto")), "no usable checkpoint")
    assert {name: _bytes_of(ckpts / name) for name in ("step_5", "step_10", "best")} == before


def _omit(rel):
    def change(manifest):
        del manifest["files"][rel]
    return change


MANIFEST_GAPS = {
    "omits the model": (_omit("model.safetensors"), "manifest does not list model.safetensors"),
    "omits the trainer state": (_omit("trainer_state.json"), "manifest does not list trainer_state.json"),
    "omits a vocabulary": (_omit("vocab/text_a.txt"), "file is not in its manifest"),
    "omits the optimizer's arrays": (_omit("optimizer.safetensors"), "optimizer.safetensors"),
    "lists no files": (lambda manifest: manifest.update(files={}), "lists no files"),
}


@pytest.mark.parametrize("gap", sorted(MANIFEST_GAPS))
def test_a_manifest_must_cover_every_file_the_loader_reads(run, gap):
    ckpts, config, cli = run
    change, expected = MANIFEST_GAPS[gap]
    folder = str(ckpts / "step_10")
    _tamper_json(os.path.join(folder, "manifest.json"), change)
    assert_one_error_block(*cli(config(load_checkpoint=folder)), [expected, "checkpoint"])


def test_a_file_added_to_a_checkpoint_is_refused(run):
    ckpts, config, cli = run
    folder = ckpts / "step_10"
    (folder / "vocab" / "text_b.txt").write_text("planted\n", encoding="utf-8")
    assert_one_error_block(*cli(config(load_checkpoint=str(folder))),
                           f"checkpoint file is not in its manifest (added or left by something else): "
                           f"{folder / 'vocab' / 'text_b.txt'}")


@pytest.mark.parametrize("marker", ["garbage\x00\xff", "../../etc", "step_99", "", "best/../../x"])
def test_an_older_wenxins_latest_marker_is_not_read_and_is_deleted(run, marker):
    ckpts, config, cli = run
    (ckpts / "latest").write_bytes(marker.encode("utf-8", "surrogateescape"))
    code, out, err = cli(config(output_path=str(ckpts.parent), resume="auto"))
    assert code == 0, err[-3000:]
    assert f"resumed from {ckpts / 'step_10'} at step 10" in err
    assert not (ckpts / "latest").exists()  # the folders are the one record of what exists


def _tamper_json(path, change):
    data = json.load(open(path))
    change(data)
    json.dump(data, open(path, "w"))


TAMPERING = {
    "step-not-an-int": ("trainer_state.json", lambda d: d.update(global_step="x"), "trainer state is malformed"),
    "step-negative": ("trainer_state.json", lambda d: d.update(global_step=-3), "trainer state is malformed"),
    "state-missing-key": ("trainer_state.json", lambda d: d.pop("epoch"), "trainer state is malformed"),
    "state-not-object": ("trainer_state.json", lambda d: d.clear() or d.update(x=[1]), "trainer state is malformed"),
    "step-10^18": ("trainer_state.json", lambda d: d.update(global_step=10**18),  # not "the run already finished"
                   "says global_step 1000000000000000000, but the folder is step 10's"),
    "extra-missing-rng": ("extra.json", lambda d: d["value"].pop("rng"), "extra state is malformed"),
    "extra-rng-garbage": ("extra.json", lambda d: d["value"].update(rng={"paddle": [1], "numpy": 2, "python": 3}),
                          "extra state is malformed"),
    "extra-array-ref": ("extra.json", lambda d: d["value"].update(hooks={"__array__": "/nope"}),
                        "extra state is malformed"),
    "extra-no-value": ("extra.json", lambda d: d.pop("value"), "extra state is malformed"),
    "optimizer-array-ref": ("optimizer.json", lambda d: d["value"].update(x={"__array__": "/nope"}),
                            "optimizer state is malformed"),
    "model-type-changed": ("config.json", lambda d: d["model"].update(type="CnnClassification"),
                           "model.type: checkpoint 'CnnClassification', now 'BowClassification'"),
    "optimizer-changed": ("config.json", lambda d: d["model"]["optimization"].update(optimizer="momentum"),
                          "model.optimization.optimizer: checkpoint 'momentum', now 'adamw'"),
}


@pytest.mark.parametrize("name", sorted(TAMPERING))
def test_consistently_tampered_state_is_refused(run, name):
    ckpts, config, cli = run
    filename, change, expected = TAMPERING[name]
    _tamper_json(str(ckpts / "step_10" / filename), change)
    _reseal(str(ckpts / "step_10"))
    assert_one_error_block(*cli(config(load_checkpoint=str(ckpts / "step_10"))), expected)


@pytest.mark.parametrize("name,arrays,expected", [
    ("nan-parameters", lambda p: {k: np.full_like(v, np.nan) for k, v in p.items()}, "hold NaN/Inf"),
    ("wrong-shapes", lambda p: {k: np.zeros((3,) + v.shape, v.dtype) for k, v in p.items()}, "shape mismatch"),
    ("missing-parameters", lambda p: dict(list(p.items())[:1]), "missing in file"),
    ("extra-parameters", lambda p: {**p, "evil.weight": np.zeros(2, "float32")}, "unexpected in file"),
])
def test_tampered_parameters_are_refused(run, name, arrays, expected):
    ckpts, config, cli = run
    folder = str(ckpts / "step_10")
    save_file(arrays(checkpoint_params(folder)), os.path.join(folder, "model.safetensors"))
    _reseal(folder)
    assert_one_error_block(*cli(config(load_checkpoint=folder)), expected)


def test_safetensors_header_bomb(run):
    ckpts, config, cli = run
    folder = str(ckpts / "step_10")
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write((2**62).to_bytes(8, "little") + b"{}")
    _reseal(folder)
    assert_one_error_block(*cli(config(load_checkpoint=folder)), "model.safetensors")


@pytest.mark.parametrize("entry", ["../../../etc/passwd", "/etc/passwd"])
def test_manifest_naming_files_outside_the_checkpoint(run, entry):
    ckpts, config, cli = run
    folder = str(ckpts / "step_10")
    _tamper_json(os.path.join(folder, "manifest.json"),
                 lambda d: d["files"].update({entry: {"bytes": 1, "sha256": "0" * 64}}))
    assert_one_error_block(*cli(config(load_checkpoint=folder)), "outside the checkpoint")


def test_manifest_with_wrong_types(run):
    ckpts, config, cli = run
    folder = str(ckpts / "step_10")
    _tamper_json(os.path.join(folder, "manifest.json"), lambda d: d.update(files={"model.safetensors": "abc"}))
    assert_one_error_block(*cli(config(load_checkpoint=folder)), "manifest is malformed")


class _Planted:
    """Unpickling this runs ``open(marker, "w")``: the attack of a crafted pickle."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_planted_pickle_is_never_executed(run, tmp_path):
    ckpts, config, cli = run
    marker = str(tmp_path / "pwned")
    folder = ckpts / "step_10"
    for name in ("extra.pdstate", "optimizer.pdopt", "model.pdparams"):
        with open(folder / name, "wb") as f:
            pickle.dump({"x": _Planted(marker)}, f)
    assert_one_error_block(*cli(config(load_checkpoint=str(folder))),  # files the manifest does not list
                           "checkpoint file is not in its manifest (added or left by something else)")
    os.remove(folder / "manifest.json")  # an old-format checkpoint: only pickles
    for name in FILES:
        if os.path.isfile(folder / name):
            os.remove(folder / name)
    assert_one_error_block(*cli(config(load_checkpoint=str(folder), output_path=str(tmp_path / "out3"))),
                           "older wenxin")
    assert not os.path.exists(marker)


def test_resume_keeps_the_saved_vocabulary_when_the_data_changes(run, tmp_path):
    ckpts, config, cli = run
    saved = (ckpts / "step_10" / "vocab" / "text_a.txt").read_text()
    write_tsv(str(tmp_path / "data" / "train.tsv"), [("新字符号完全不同" * 3, 1), ("另外一些新的字", 0)] * 40)
    code, out, err = cli(config(output_path=str(ckpts.parent), resume="auto"))
    assert code == 0, err[-3000:]
    assert (ckpts.parent / "vocab" / "text_a.txt").read_text() == saved
    assert (ckpts / "step_11" / "vocab" / "text_a.txt").read_text() == saved


def test_resume_with_a_changed_vocab_file_is_refused(run, tmp_path):
    ckpts, config, cli = run
    vocab = tmp_path / "vocab.txt"
    tokens = (ckpts / "step_10" / "vocab" / "text_a.txt").read_text().splitlines()
    vocab.write_text("\n".join(tokens) + "\n")
    cfg = config(load_checkpoint=str(ckpts / "step_10"))
    cfg["dataset_reader"]["train_reader"]["fields"][0]["vocab_path"] = str(vocab)
    code, out, err = cli(cfg)
    assert code == 0, err[-3000:]  # the same vocabulary: fine
    vocab.write_text("\n".join(tokens[:2] + tokens[3:] + tokens[2:3]) + "\n")
    cfg["trainer"]["output_path"] = str(tmp_path / "out4")
    assert_one_error_block(*cli(cfg), "vocabulary of 'text_a': checkpoint")


# ---- full disks ------------------------------------------------------------------------------------
def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_full_disk_during_a_checkpoint(tmp_path, data_dir, monkeypatch):
    import wenxin.controller.checkpoint as ckpt_module
    out = str(tmp_path / "out")
    trainer = build(task_config(data_dir, out, max_steps=10, save_model_step=5, is_eval_dev=0, is_eval_test=0),
                    tmp_path)
    real = ckpt_module.save_arrays
    calls = []

    def fail_second(path, arrays):
        calls.append(path)
        if len(calls) > 1:
            _enospc()
        real(path, arrays)

    monkeypatch.setattr(ckpt_module, "save_arrays", fail_second)
    with pytest.raises(CheckpointError, match=r"step_10: cannot write the checkpoint \(No space left on device\)"):
        trainer.do_train()
    root = os.path.join(out, "checkpoints")
    assert sorted(n for n in os.listdir(root)) == ["index.json", "step_5"]  # no partial folder left
    assert ckpt_module.is_valid(os.path.join(root, "step_5")) is None


def test_full_disk_during_an_export(tmp_path, data_dir, monkeypatch):
    import paddle
    out = str(tmp_path / "out")
    trainer = build(task_config(data_dir, out, max_steps=2, is_eval_dev=0, is_eval_test=0), tmp_path)
    trainer.do_train()
    target = os.path.join(out, "exported")
    trainer.export_inference(target)
    before = sorted(os.listdir(target))
    monkeypatch.setattr(paddle.jit, "save", _enospc)
    with pytest.raises(CheckpointError, match=f"{target}: cannot write the inference model"):
        trainer.export_inference(target)
    assert sorted(os.listdir(target)) == before  # the earlier export is intact
    assert not [n for n in os.listdir(out) if n.startswith(".exported.")]  # nothing left beside it


def test_full_disk_during_run_infer(tmp_path, monkeypatch):
    from wenxin.common import files
    from wenxin.inference import batch

    class FakePredictor:
        fields = [type("Field", (), {"name": "text_a"})()]
        labels = ["0", "1"]

        class result_format:
            @staticmethod
            def line(result):
                return "x"

        def __init__(self, *args, **kwargs):
            pass

        def predict(self, rows, batch_size, progress=None):
            return [{}] * len(rows)

    data = tmp_path / "in.txt"
    data.write_text("a\nb\n")
    out = tmp_path / "pred.txt"
    out.write_text("earlier\n")
    infer = tmp_path / "infer.json"
    infer.write_text(json.dumps({"model_dir": str(tmp_path), "predict_reader": {"config": {"data_path": str(data)}},
                                 "output_file": str(out)}))
    monkeypatch.setattr(batch, "Predictor", FakePredictor)
    real_open = open

    def full_open(path, mode="r", *args, **kwargs):
        handle = real_open(path, mode, *args, **kwargs)
        if "w" in mode:
            handle.write = _enospc
        return handle

    monkeypatch.setattr(files, "open", full_open, raising=False)  # where the prediction file is written
    with pytest.raises(DataError, match=f"cannot write {out}"):
        batch.run_inference(str(infer))
    assert out.read_text() == "earlier\n" and not os.path.exists(f"{out}.tmp")


def test_full_disk_for_the_metrics_log(tmp_path, data_dir, monkeypatch):
    from wenxin.controller.hooks import writers
    trainer = build(task_config(data_dir, str(tmp_path / "out"), max_steps=10, is_eval_dev=0, is_eval_test=0),
                    tmp_path)
    monkeypatch.setattr(writers, "open", _enospc, raising=False)
    with pytest.raises(TrainingError, match="metrics.jsonl: cannot write the metrics log"):
        trainer.do_train()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_really_full_disk(tmp_path, data_dir):
    """The same on a real 1 MiB filesystem that fills up after the first checkpoint."""
    import subprocess
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        out = str(mount / "out")
        trainer = build(task_config(data_dir, out, max_steps=10, save_model_step=5, is_eval_dev=0,
                                    is_eval_test=0, visualdl=False), tmp_path)

        def fill(name, path):  # after the first checkpoint, leave a few hundred bytes free
            if name == "step_5":
                free = os.statvfs(out).f_bavail * os.statvfs(out).f_frsize
                with open(mount / "filler", "wb") as f:
                    f.write(b"\0" * max(0, free - 512))

        from wenxin.controller.hooks import HookBase

        class Filler(HookBase):
            def after_save(self, name, path):
                fill(name, path)

        trainer.register_hook(Filler())
        with pytest.raises((CheckpointError, TrainingError), match="No space left on device"):
            trainer.do_train()
        root = os.path.join(out, "checkpoints")
        assert not [n for n in os.listdir(root) if n.startswith(".")]
        from wenxin.controller.checkpoint import is_valid
        assert is_valid(os.path.join(root, "step_5")) is None
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)  # -l: the log file may still be open


def test_cases_count():
    assert len(FILES) * len(DAMAGE) + len(DAMAGE) + 1 + 5 + len(TAMPERING) + 4 + 1 + 2 + 1 + 1 + 2 >= 40
