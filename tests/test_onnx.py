"""The ONNX Runtime backend: ``wenxin export --format onnx`` writes a checked ``model.onnx``, and
both backends give the trainer's own evaluation outputs, through the Predictor, ``wenxin
predict``, ``run_infer.py`` and ``wenxin serve``."""
from __future__ import annotations

import json
import logging
import os
import sys

import numpy as np
import pytest

from conftest import build, task_config, wenxin_log, write_config
from wenxin.cli import main
from wenxin.common.constants import Phase
from wenxin.inference.onnx_backend import ONNX_FILE
from wenxin.common.errors import InferenceError
from wenxin.inference.predictor import Predictor

pytest.importorskip("onnxruntime")
pytest.importorskip("paddle2onnx")


def _dev_rows(data_dir):
    with open(os.path.join(data_dir, "dev.tsv"), encoding="utf-8") as f:
        return [[line.rstrip("\n").split("\t")[0]] for line in f]


@pytest.mark.parametrize("model_type", ["BowClassification", "CnnClassification"])
def test_both_backends_give_the_trainers_evaluation(tmp_path, data_dir, model_type):
    from wenxin.inference.onnx_export import export_onnx
    trainer = build(task_config(data_dir, str(tmp_path / "out"), model_type=model_type, epoch=2, is_eval_test=0),
                    tmp_path)
    trainer.do_train()
    folder = trainer.export_inference(str(tmp_path / "model"))
    with pytest.raises(InferenceError, match="no model.onnx; export it with wenxin export --format onnx"):
        Predictor(folder, backend="onnxruntime")
    assert Predictor(folder).backend == "paddle"
    export_onnx(folder, trainer.readers["dev_reader"].collate_rows(list(range(8))))
    outputs, _ = trainer.collect_outputs("dev_reader", Phase.EVALUATE)
    rows = _dev_rows(data_dir)
    for backend in ("paddle", "onnxruntime"):
        predictor = Predictor(folder, backend=backend)
        assert predictor.backend == backend
        results = predictor.predict(rows, batch_size=16)
        np.testing.assert_allclose([r["probs"] for r in results], outputs["probs"], atol=1e-5)
        assert [int(r["label"]) for r in results] == outputs["predictions"].tolist()
    assert Predictor(folder).backend == "onnxruntime"  # auto: the faster one, when it is there


def test_a_mismatching_onnx_model_is_not_written(tmp_path, data_dir):
    from wenxin.inference.onnx_export import export_onnx
    trainer = build(task_config(data_dir, str(tmp_path / "out"), max_steps=3, is_eval_dev=0, is_eval_test=0), tmp_path)
    trainer.do_train()
    folder = trainer.export_inference(str(tmp_path / "model"))
    with pytest.raises(InferenceError, match="differ from Paddle's by .* was not written"):
        export_onnx(folder, trainer.readers["train_reader"].collate_rows([0, 1, 2]), tolerance=-1.0)
    assert sorted(os.listdir(folder)) == ["inference.json", "inference.pdiparams", "manifest.json", "preprocess.json",
                                          "vocab"]


def test_weights_past_one_files_limit_lie_beside_the_program_and_give_the_same_outputs(exported_classifier,
                                                                                        tmp_path):
    """Protobuf stops at 2 GB, so a program whose weights would take it past ``one_file_bytes``
    keeps them in ``model.onnx.data`` beside it (ONNX's external data; here the limit is 0): the
    same outputs as Paddle's, the data file sealed in the manifest; converted again under the
    limit, the weights go back inside and the data file is deleted."""
    import shutil

    from wenxin.data.export_bundle import verify_export
    from wenxin.inference.onnx_export import export_onnx
    folder = str(tmp_path / "model")
    shutil.copytree(exported_classifier, folder)
    reference = Predictor(folder, backend="paddle")
    rows = [["好棒"], ["差"], ["的了是在"]]
    expected = [r["probs"] for r in reference.predict(rows)]
    for limit, beside in ((0, True), (2**31, False)):
        export_onnx(folder, reference.convert(rows), one_file_bytes=limit)
        verify_export(folder)
        with open(os.path.join(folder, "manifest.json"), encoding="utf-8") as f:
            sealed = json.load(f)["files"]
        assert (ONNX_FILE + ".data" in sealed) is beside
        assert os.path.exists(os.path.join(folder, ONNX_FILE + ".data")) is beside
        assert not [name for name in os.listdir(folder) if name.startswith(".")]  # its build folder went
        if beside:
            assert os.path.getsize(os.path.join(folder, ONNX_FILE + ".data")) > \
                os.path.getsize(os.path.join(folder, "inference.pdiparams")) // 2
        got = [r["probs"] for r in Predictor(folder, backend="onnxruntime").predict(rows)]
        np.testing.assert_allclose(got, expected, atol=1e-5)


def test_the_command_line_exports_and_runs_onnx(tmp_path, data_dir, capsys):
    out = str(tmp_path / "out")
    path = write_config(str(tmp_path / "task.json"), task_config(data_dir, out, epoch=1, is_eval_test=0))
    assert main(["train", "--param_path", path]) == 0
    best = os.path.join(out, "checkpoints", "best")
    target = str(tmp_path / "exported")
    capsys.readouterr()
    assert main(["export", "--param_path", path, "--checkpoint", best, "--output", target, "--format", "onnx"]) == 0
    printed = capsys.readouterr().out
    assert printed.strip().splitlines()[-1] == target and "[I]" not in printed  # paddle2onnx's chatter kept out
    assert os.path.isfile(os.path.join(target, ONNX_FILE))
    lines = {}
    for backend in ("paddle", "onnxruntime"):
        assert main(["predict", "--model_dir", target, "--backend", backend, "--text", "好棒赞", "--text", "差烂"]) == 0
        lines[backend] = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [row[:2] for row in lines["paddle"]] == [row[:2] for row in lines["onnxruntime"]]
    assert np.allclose([float(r[2]) for r in lines["paddle"]], [float(r[2]) for r in lines["onnxruntime"]], atol=1e-5)
    infer = {"model_dir": target, "backend": "onnxruntime", "output_file": str(tmp_path / "pred.tsv"),
             "predict_reader": {"config": {"data_path": os.path.join(data_dir, "dev.tsv")}}}
    assert main(["infer", "--param_path", write_config(str(tmp_path / "infer.json"), infer)]) == 0
    with open(tmp_path / "pred.tsv", encoding="utf-8") as f:
        onnx_labels = [line.split("\t")[0] for line in f]
    paddle_labels = [r["label"] for r in Predictor(target, backend="paddle").predict(_dev_rows(data_dir))]
    assert onnx_labels == paddle_labels


def test_the_service_runs_onnx(exported_classifier, tmp_path):
    import http.client
    import shutil

    from wenxin.inference.onnx_export import export_onnx
    from wenxin.inference.server import Service
    folder = str(tmp_path / "model")
    shutil.copytree(exported_classifier, folder)
    reference = Predictor(folder, backend="paddle")
    export_onnx(folder, reference.convert([["好棒"], ["差"], ["的了是在"]]))
    service = Service(folder, port=0)
    thread = service.start_in_thread()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=30)
        conn.request("GET", "/health")
        assert json.loads(conn.getresponse().read())["backend"] == "onnxruntime"
        conn.request("POST", "/predict", body=json.dumps({"texts": ["好棒", "差"]}))
        answer = json.loads(conn.getresponse().read())["predictions"]
    finally:
        service.stop()
        thread.join(timeout=60)
    expected = reference.predict([["好棒"], ["差"]])
    np.testing.assert_allclose([a["probs"] for a in answer], [e["probs"] for e in expected], atol=1e-5)


def test_a_model_paddle2onnx_cannot_convert_is_one_error(tmp_path):
    """paddle2onnx aborts its process on an unsupported operator (the CRF taggers' decoding): the
    conversion runs in a child process, so the export says so in one error and keeps going."""
    from wenxin.inference import onnx_export
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "inference.json").write_text("{not a model", encoding="utf-8")
    (folder / "inference.pdiparams").write_bytes(b"")
    with pytest.raises(InferenceError, match="paddle2onnx cannot convert this model .*runs with the paddle backend"):
        onnx_export.convert_in_subprocess(str(folder / "inference.json"), str(folder / "inference.pdiparams"),
                                          str(folder / ".model.onnx.tmp"), str(folder))
    assert not os.path.exists(folder / ".model.onnx.tmp")


def test_a_legacy_program_over_onnxs_2_gb_limit_is_one_error_naming_it(tmp_path, monkeypatch):
    """paddle2onnx 2.1, converting a program with its weights, says its ONNX file would pass
    protobuf's 2 GB limit, then writes an empty file and exits 0 (measured on an ERNIE 4.5 shape of
    2.24 GB of weights; its external_file option is not applied). A PIR program is converted with
    its weights as inputs (``onnx_convert``), but a legacy ``.pdmodel`` one is not: here a stand-in
    converter does what paddle2onnx does, and the export says why in one error instead of ONNX
    Runtime's "no graph was found"."""
    from wenxin.inference import onnx_export
    folder = tmp_path / "model"
    folder.mkdir()
    stand_in = ("import sys\n"
                "sys.stderr.write('[libprotobuf ERROR message_lite.cc:449] onnx.ModelProto exceeded maximum "
                "protobuf size of 2GB: 2236734116\\n')\n"
                "open(sys.argv[3], 'wb').close()\n")
    monkeypatch.setattr(onnx_export, "CONVERTER", [sys.executable, "-c", stand_in])
    with pytest.raises(InferenceError, match=r"2,236,734,116 bytes, over ONNX's 2 GB limit .*paddle backend"):
        onnx_export.convert_in_subprocess(str(folder / "inference.pdmodel"), str(folder / "inference.pdiparams"),
                                          str(folder / "model.onnx"), str(folder))
    empty = "import sys\nopen(sys.argv[3], 'wb').close()\n"  # an empty file said nothing: still refused
    monkeypatch.setattr(onnx_export, "CONVERTER", [sys.executable, "-c", empty])
    with pytest.raises(InferenceError, match=r"paddle2onnx cannot convert this model \(an empty file written\)"):
        onnx_export.convert_in_subprocess(str(folder / "inference.pdmodel"), str(folder / "inference.pdiparams"),
                                          str(folder / "model.onnx"), str(folder))


def test_the_conversion_installs_nothing(tmp_path, data_dir):
    """paddle2onnx's default optimizer (Polygraphy, which it runs with auto-install on) ran
    `python -m pip install sympy` during a first export. Here sympy looks missing and `pip` is a
    stand-in that records any call: the conversion must still work and call no pip."""
    from wenxin.inference.onnx_export import export_onnx
    shadow = tmp_path / "shadow"
    (shadow / "sympy").mkdir(parents=True)
    (shadow / "sympy" / "__init__.py").write_text("raise ImportError('sympy is hidden by the test')\n")
    (shadow / "pip").mkdir()
    marker = tmp_path / "pip_was_run"
    (shadow / "pip" / "__init__.py").write_text("")
    (shadow / "pip" / "__main__.py").write_text(f"open({str(marker)!r}, 'a').write('ran\\n')\nraise SystemExit(1)\n")
    trainer = build(task_config(data_dir, str(tmp_path / "out"), epoch=1, is_eval_test=0), tmp_path)
    trainer.do_train()
    folder = trainer.export_inference(str(tmp_path / "model"))
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(shadow)] + ([old] if old else []))
    try:
        path = export_onnx(folder, trainer.readers["dev_reader"].collate_rows(list(range(8))))
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old
    assert os.path.isfile(path)
    assert not marker.exists()


def test_save_inference_converts_the_runs_result_to_onnx_once(tmp_path, data_dir):
    """With save_inference (and save_onnx, its default) the result's inference folder holds a
    checked model.onnx when training ends, and the Predictor runs it with ONNX Runtime; the
    other checkpoints keep Paddle's model only (a conversion takes seconds)."""
    trainer = build(task_config(data_dir, str(tmp_path / "out"), epoch=2, save_model_step=15, save_inference=True,
                                is_eval_test=0), tmp_path)
    trainer.do_train()
    root = trainer.checkpoints.root
    final, earlier = os.path.join(root, "step_30", "inference"), os.path.join(root, "step_15", "inference")
    assert os.path.isfile(os.path.join(final, ONNX_FILE)) and not os.path.exists(os.path.join(earlier, ONNX_FILE))
    assert Predictor(final).backend == "onnxruntime"
    rows = _dev_rows(data_dir)
    by_onnx = Predictor(final).predict(rows, batch_size=16)
    by_paddle = Predictor(final, backend="paddle").predict(rows, batch_size=16)
    np.testing.assert_allclose([r["probs"] for r in by_onnx], [r["probs"] for r in by_paddle], atol=1e-5)
    with open(os.path.join(final, "manifest.json"), encoding="utf-8") as f:
        assert ONNX_FILE in json.load(f)["files"]  # sealed with the rest of the export


def test_save_onnx_false_and_a_stopped_run_convert_nothing(tmp_path, data_dir):
    trainer = build(task_config(data_dir, str(tmp_path / "off"), epoch=1, save_inference=True, save_onnx=False,
                                is_eval_test=0), tmp_path)
    trainer.do_train()
    assert not os.path.exists(os.path.join(trainer.checkpoints.latest(), "inference", ONNX_FILE))
    trainer = build(task_config(data_dir, str(tmp_path / "stopped"), epoch=1, save_inference=True, is_eval_test=0),
                    tmp_path)
    trainer.state.interrupted = True  # as a stop signal leaves it
    from wenxin.controller.hooks.onnx_result import OnnxResultHook
    hook = next(h for h in trainer.hooks.hooks if isinstance(h, OnnxResultHook))
    hook.after_train()  # nothing to convert yet, and a stopped run converts nothing
    assert not os.path.exists(trainer.checkpoints.root) or not any(
        ONNX_FILE in files for _, _, files in os.walk(trainer.checkpoints.root))
    # a model above save_onnx_max_mb is not converted, and the log says why and what converts it later
    trainer = build(task_config(data_dir, str(tmp_path / "large"), epoch=1, save_inference=True, is_eval_test=0,
                                save_onnx_max_mb=0.001), tmp_path)
    with wenxin_log(logging.INFO) as messages:
        trainer.do_train()
    assert not os.path.exists(os.path.join(trainer.checkpoints.latest(), "inference", ONNX_FILE))
    assert any("above trainer.export.save_onnx_max_mb (0.001" in m and "wenxin export --format onnx" in m for m in messages)


def test_a_result_that_does_not_convert_keeps_its_paddle_model_and_says_why(tmp_path, data_dir, monkeypatch):
    from wenxin.inference import onnx_export

    def refuse(graph, params, target, folder, one_file_bytes):
        raise InferenceError(f"{folder}: paddle2onnx cannot convert this model (an operator it lacks); the Paddle "
                             "model is exported and runs with the paddle backend")
    monkeypatch.setattr(onnx_export, "convert_in_subprocess", refuse)
    trainer = build(task_config(data_dir, str(tmp_path / "out"), epoch=1, save_inference=True, is_eval_test=0),
                    tmp_path)
    with wenxin_log(logging.WARNING) as messages:
        trainer.do_train()
    final = os.path.join(trainer.checkpoints.latest(), "inference")
    assert not os.path.exists(os.path.join(final, ONNX_FILE)) and Predictor(final).backend == "paddle"
    assert any("trainer.export.save_onnx:" in m and "an operator it lacks" in m for m in messages), messages


def test_the_check_runs_outside_the_exporting_process(tmp_path, data_dir, monkeypatch):
    """Issue 56: the Paddle predictor and ONNX Runtime session of the check held about twice the
    model's memory in the training process that exports its result. They are the child's now: in
    this process neither may be opened."""
    from wenxin.inference import onnx_backend, onnx_export, predictor
    trainer = build(task_config(data_dir, str(tmp_path / "out"), max_steps=3, is_eval_dev=0, is_eval_test=0), tmp_path)
    trainer.do_train()
    folder = trainer.export_inference(str(tmp_path / "model"))

    def refuse(*args, **kwargs):
        raise AssertionError("the check opened a model in the exporting process")
    monkeypatch.setattr(onnx_backend, "open_session", refuse)
    monkeypatch.setattr(predictor.Predictor, "__init__", refuse)
    path = onnx_export.export_onnx(folder, trainer.readers["dev_reader"].collate_rows(list(range(8))))
    assert os.path.isfile(path)
