"""An export folder is sealed by a manifest and checked before it predicts or serves: flipped
bytes, a missing, added or unlisted file, and a malformed ``preprocess.json`` (even one sealed
again) are each one ``error:`` block naming the file, never a traceback or a different answer."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, assert_one_error_block
from wenxin.cli import main
from wenxin.data.export_bundle import seal_export


def _copy(exported, tmp_path, name="model"):
    folder = tmp_path / name
    shutil.copytree(exported, folder)
    if (folder / "model.onnx").exists():
        os.remove(folder / "model.onnx")
        seal_export(str(folder))
    return folder


def _predict(folder, capsys):
    code = main(["predict", "--model_dir", str(folder), "--text", "好看的书"])
    out, err = capsys.readouterr()
    return code, out, err


def _flip(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_sealed_export_predicts(exported_classifier, tmp_path, capsys):
    folder = _copy(exported_classifier, tmp_path)
    code, out, err = _predict(folder, capsys)
    assert code == 0 and out.startswith("好看的书\t"), err
    manifest = json.loads((folder / "manifest.json").read_text())
    assert sorted(manifest["files"]) == ["inference.json", "inference.pdiparams", "preprocess.json", "vocab/text_a.txt"]


@pytest.mark.parametrize("damage", ["flip weights", "flip graph", "flip vocabulary", "delete vocabulary",
                                    "add a file", "delete manifest", "manifest lists none", "manifest omits weights"])
def test_damaged_or_tampered_exports_are_refused(exported_classifier, tmp_path, capsys, damage):
    folder = _copy(exported_classifier, tmp_path)
    manifest = folder / "manifest.json"
    table = json.loads(manifest.read_text())
    if damage == "flip weights":
        _flip(folder / "inference.pdiparams")
        expected = f"export file is damaged (its checksum does not match the manifest): {folder / 'inference.pdiparams'}"
    elif damage == "flip graph":
        _flip(folder / "inference.json")
        expected = f"export file is damaged (its checksum does not match the manifest): {folder / 'inference.json'}"
    elif damage == "flip vocabulary":
        _flip(folder / "vocab" / "text_a.txt")
        expected = f"{folder / 'vocab' / 'text_a.txt'}"
    elif damage == "delete vocabulary":
        os.remove(folder / "vocab" / "text_a.txt")
        expected = f"export file is missing: {folder / 'vocab' / 'text_a.txt'}"
    elif damage == "add a file":
        (folder / "model.onnx").write_bytes(b"not from the export")
        expected = f"export file is not in its manifest (added or left by something else): {folder / 'model.onnx'}"
    elif damage == "delete manifest":
        os.remove(manifest)
        expected = "an export without manifest.json"
    elif damage == "manifest lists none":
        manifest.write_text(json.dumps({"format": 1, "files": {}}))
        expected = "lists no files"
    else:
        del table["files"]["preprocess.json"]
        manifest.write_text(json.dumps(table))
        expected = "export manifest does not list preprocess.json"
    assert_one_error_block(*_predict(folder, capsys), expected)


def test_serve_refuses_flipped_weights(exported_classifier, tmp_path):
    folder = _copy(exported_classifier, tmp_path)
    _flip(folder / "inference.pdiparams")
    result = subprocess.run([sys.executable, "-m", "wenxin.cli", "serve", "--model_dir", str(folder), "--port", "0"],
                            capture_output=True, text=True, timeout=180,
                            env={**os.environ, "PYTHONPATH": REPO, "GLOG_minloglevel": "2"})
    assert_one_error_block(result.returncode, result.stdout, result.stderr,
                           f"export file is damaged (its checksum does not match the manifest): "
                           f"{folder / 'inference.pdiparams'}")


def _set(key, value):
    return lambda meta: meta.__setitem__(key, value)


def _field(key, value):
    return lambda meta: meta["fields"][0].__setitem__(key, value)


MALFORMED = {
    "not JSON": (None, "{\"fields\": [", "unreadable preprocessing description"),
    "empty": (None, "", "unreadable preprocessing description"),
    "a list": (None, "[]", "<root>: expected object, got list"),
    "no fields": (lambda meta: meta.pop("fields"), None, "fields: required key is missing"),
    "fields an object": (_set("fields", {}), None, "fields: expected list"),
    "a field a number": (_set("fields", [1]), None, "fields[0]: expected object"),
    "a field without reader": (lambda meta: meta["fields"][0].pop("reader"), None, "fields[0].reader"),
    "an unknown reader": (_field("reader", {"type": "NoSuchReader"}), None, "NoSuchReader"),
    "a bad max_seq_len": (_field("max_seq_len", "long"), None, "fields[0].max_seq_len: expected int"),
    "a vocab outside": (_field("vocab_path", "../../etc/passwd"), None, "fields[0].vocab_path: '../../etc/passwd' is outside"),
    "outputs a string": (_set("outputs", "probs"), None, "outputs: expected list"),
    "labels numbers": (_set("labels", [0, 1]), None, "labels[0]: expected string"),
    "result_format a number": (_set("result_format", 5), None, "result_format: expected string"),
    "an unknown result_format": (_set("result_format", "poetry"), None, "poetry"),
    "a newer format": (_set("format", 99), None, "format: 99 is above the maximum 1"),
    "an unknown key": (_set("extra", 1), None, "extra: unknown key"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_preprocess_json_sealed_again_is_one_error(exported_classifier, tmp_path, capsys, case):
    folder = _copy(exported_classifier, tmp_path)
    change, text, expected = MALFORMED[case]
    path = folder / "preprocess.json"
    if change is not None:
        meta = json.loads(path.read_text(encoding="utf-8"))
        change(meta)
        text = json.dumps(meta)
    path.write_text(text, encoding="utf-8")
    seal_export(str(folder))  # consistent tampering: only the content check can tell
    assert_one_error_block(*_predict(folder, capsys), [str(path), expected])
