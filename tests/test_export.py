"""Inference export from both trainers and prediction parity with the trainer's evaluation."""
import os
import shutil

import numpy as np
import pytest

from conftest import build, task_config
from wenxin.common.constants import Phase
from wenxin.common.errors import ExportError, InferenceError
from wenxin.data.export_bundle import seal_export
from wenxin.inference.predictor import Predictor


def trained(tmp_path, data_dir, mode, model_type="BowClassification"):
    config = task_config(data_dir, str(tmp_path / mode), model_type=model_type, epoch=2, is_eval_test=0)
    if mode == "static":
        config["model"]["is_dygraph"] = 0
        config["trainer"]["type"] = "CustomStaticTrainer"
    trainer = build(config, tmp_path)
    trainer.do_train()
    return trainer


@pytest.mark.parametrize("mode", ["dynamic", "static"])
@pytest.mark.parametrize("model_type", ["BowClassification", "CnnClassification"])
def test_exported_model_matches_trainer_evaluation(tmp_path, data_dir, mode, model_type):
    trainer = trained(tmp_path, data_dir, mode, model_type)
    folder = trainer.export_inference(str(tmp_path / "export" / "model"))
    moved = str(tmp_path / "moved")
    shutil.move(folder, moved)  # self-contained: works from anywhere
    outputs, _ = trainer.collect_outputs("dev_reader", Phase.EVALUATE)
    with open(os.path.join(data_dir, "dev.tsv"), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t")[:1] for line in f]
    predictor = Predictor(moved)
    results = predictor.predict(rows, batch_size=7)  # batches differ from the trainer's: padding must not matter
    probs = np.array([r["probs"] for r in results])
    assert np.abs(probs - outputs["probs"]).max() < 1e-5
    predicted = np.array([int(r["label"]) for r in results])
    np.testing.assert_array_equal(predicted, outputs["predictions"])
    exported = {"probs": probs, "predictions": predicted, "labels": outputs["labels"]}
    trainer_metrics = trainer.model.get_metrics({k: outputs[k] for k in exported}, {}, Phase.EVALUATE)
    assert trainer.model.get_metrics(exported, {}, Phase.EVALUATE) == pytest.approx(trainer_metrics, abs=1e-9)
    assert sorted(os.listdir(moved)) == ["inference.json", "inference.pdiparams", "manifest.json", "preprocess.json", "vocab"]


def test_missing_or_corrupt_model_folder(tmp_path, data_dir):
    with pytest.raises(InferenceError, match="model folder not found"):
        Predictor(str(tmp_path / "nothing"))
    folder = trained(tmp_path, data_dir, "dynamic").export_inference(str(tmp_path / "model"))
    with open(os.path.join(folder, "inference.pdiparams"), "r+b") as f:
        f.truncate(10)
    with pytest.raises(ExportError, match="export file is damaged .*inference.pdiparams"):
        Predictor(folder)
    seal_export(folder)  # damaged and sealed again: the loader's own error
    with pytest.raises(InferenceError, match="cannot load the model"):
        Predictor(folder).predict([["好"]])
    os.remove(os.path.join(folder, "inference.json"))
    with pytest.raises(InferenceError, match="not an exported model folder"):
        Predictor(folder)


def test_an_export_whose_labels_are_fewer_than_its_classes_is_one_error(tmp_path, data_dir):
    """A hand-edited preprocess.json (sealed again, so the checksums pass) with one label for two
    classes: the first prediction is an error saying so (whatever class it answers), not an
    IndexError or a label named wrongly."""
    import json
    folder = trained(tmp_path, data_dir, "dynamic").export_inference(str(tmp_path / "model"))
    path = os.path.join(folder, "preprocess.json")
    with open(path, encoding="utf-8") as f:
        meta = json.load(f)
    meta["labels"] = meta["labels"][:1]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(meta, f)
    seal_export(folder)
    predictor = Predictor(folder)
    for rows in ([["好书好书"], ["坏书坏书"], ["好"], ["坏"]] * 4, [["好"]]):
        with pytest.raises(InferenceError, match=r"preprocess.json: labels names 1 classes, but the model gives 2 "
                                                 r"probabilities: the export's labels do not match its model"):
            predictor.predict(rows)


def test_a_wrong_model_folder_names_the_exports_near_it(tmp_path):
    """A mistyped step or a run's folder: the error lists the exported models near the path."""
    steps = tmp_path / "run" / "save_inference_model"
    for step, age in (("inference_step_100", 200), ("inference_step_190", 100)):
        (steps / step).mkdir(parents=True)
        (steps / step / "preprocess.json").write_text("{}")
        os.utime(steps / step / "preprocess.json", (1e9 - age, 1e9 - age))
    with pytest.raises(InferenceError, match=rf"model folder not found: {steps}/inference_step_200; exported models "
                                             rf"under {steps}: {steps}/inference_step_190, {steps}/inference_step_100$"):
        Predictor(str(steps / "inference_step_200"))
    with pytest.raises(InferenceError, match=rf"{tmp_path}/run: not an exported model folder .*; exported models under "
                                             rf"{tmp_path}/run: {steps}/inference_step_190, "):
        Predictor(str(tmp_path / "run"))  # a run's folder: its exports are named, newest first
    (tmp_path / "empty").mkdir()
    with pytest.raises(InferenceError, match=r"no exported model under .*empty \(export one with wenxin export"):
        Predictor(str(tmp_path / "empty" / "model"))


def test_save_inference_exports_beside_checkpoints_and_cli_export(tmp_path, data_dir):
    import subprocess
    import sys

    from conftest import REPO, write_config
    out = str(tmp_path / "out")
    config = task_config(data_dir, out, max_steps=6, save_model_step=3, is_eval_test=0, save_inference=True)
    build(config, tmp_path).do_train()
    for name in ("step_3", "step_6", "best"):
        assert os.path.isfile(os.path.join(out, "checkpoints", name, "inference", "preprocess.json"))
    path = write_config(str(tmp_path / "task.json"), config)
    target = str(tmp_path / "cli_export")
    proc = subprocess.run([sys.executable, "-m", "wenxin.cli", "export", "--param_path", path, "--checkpoint",
                           os.path.join(out, "checkpoints", "step_6"), "--output", target],
                          cwd=REPO, capture_output=True, text=True, env={**os.environ, "GLOG_minloglevel": "2"})
    assert proc.returncode == 0, proc.stderr
    rows = [["好看的书"], ["太差了"]]
    expected = Predictor(os.path.join(out, "checkpoints", "step_6", "inference")).predict(rows)
    got = Predictor(target).predict(rows)
    assert np.abs(np.array([r["probs"] for r in got]) - np.array([r["probs"] for r in expected])).max() < 1e-6
    bad = subprocess.run([sys.executable, "-m", "wenxin.cli", "export", "--param_path", path, "--checkpoint",
                          str(tmp_path / "missing")], cwd=REPO, capture_output=True, text=True)
    # a checkpoint error, found before Paddle loads
    assert bad.returncode == 4 and f"--checkpoint: not found: {tmp_path / 'missing'}" in bad.stderr


def test_run_infer_writes_one_prediction_per_line_with_hostile_inputs(tmp_path, data_dir):
    import json
    import subprocess
    import sys

    from conftest import REPO
    folder = trained(tmp_path, data_dir, "dynamic").export_inference(str(tmp_path / "model"))
    long_text = "好" * 20000  # truncated to max_seq_len like in training
    lines = ["这本书很好", "", long_text, "\U00020000\U0002A700", "太差了\t0\textra columns are ignored",
             "好\u2028差", "棒\u2029了", "a\x85b", "c\x0bd\x0ce", "f\x1cg\x1dh\x1ei", "j\rk"]  # one line each
    inputs = tmp_path / "in.txt"
    inputs.write_bytes(("\ufeff" + "\r\n".join(lines) + "\r\n").encode("utf-8"))  # a BOM and CRLF
    out = str(tmp_path / "pred" / "out.tsv")
    infer = {"model_dir": folder, "predict_reader": {"config": {"data_path": str(inputs)}},
             "output_file": out, "batch_size": 2}
    (tmp_path / "infer.json").write_text(json.dumps(infer), encoding="utf-8")
    proc = subprocess.run([sys.executable, os.path.join(REPO, "run_infer.py"), "--param_path",
                           str(tmp_path / "infer.json")], capture_output=True, text=True,
                          env={**os.environ, "GLOG_minloglevel": "2"})
    assert proc.returncode == 0, proc.stderr
    predictions = open(out, encoding="utf-8", newline="\n").read().split("\n")[:-1]
    assert len(predictions) == len(lines)
    predictor = Predictor(folder)
    direct = predictor.predict([[line.split("\t")[0]] for line in lines])
    for line, expected in zip(predictions, direct):
        label, probability = line.split("\t")
        assert label == expected["label"] and abs(float(probability) - expected["probability"]) < 1e-6
        assert 0.5 <= float(probability) <= 1.0
    limit = predictor.fields[0].max_seq_len
    assert predictor.predict([[long_text]])[0]["probs"] == pytest.approx(
        predictor.predict([["好" * limit]])[0]["probs"], abs=1e-6)
    bad = {**infer, "model_dir": str(tmp_path / "nope")}
    (tmp_path / "bad.json").write_text(json.dumps(bad), encoding="utf-8")
    proc = subprocess.run([sys.executable, os.path.join(REPO, "run_infer.py"), "--param_path",
                           str(tmp_path / "bad.json")], capture_output=True, text=True)
    assert proc.returncode == 2 and "model folder not found" in proc.stderr


def test_onednn_follows_the_models_rule_or_the_setting(exported_classifier, tmp_path, monkeypatch):
    """auto: the exported model's rule (``onednn_min_rows`` in preprocess.json), never a timing,
    so repeated runs give identical outputs; on/off are kept whatever the batch. Every way gives
    the same probabilities within float rounding."""
    import json
    import logging

    from conftest import make_sentences, with_rules
    rows = [[t] for t, _ in make_sentences(32, seed=5)]
    off = Predictor(exported_classifier, backend="paddle", onednn="off")
    expected = [r["probs"] for r in off.predict(rows, batch_size=16)]
    assert not off.engine.uses_onednn(1) and not off.engine.uses_onednn(64)
    on = Predictor(exported_classifier, backend="paddle", onednn="on")
    assert on.engine.uses_onednn(1) and on.engine.uses_onednn(64) and on.onednn == "on (set)"
    np.testing.assert_allclose([r["probs"] for r in on.predict(rows, batch_size=16)], expected, atol=1e-5)

    with open(os.path.join(exported_classifier, "preprocess.json"), encoding="utf-8") as f:
        assert json.load(f)["onednn_min_rows"] is None  # BoW: oneDNN is slower at every batch size
    auto = Predictor(exported_classifier, backend="paddle")
    assert auto.onednn == "off (the model's rule)" and not auto.engine.uses_onednn(128)
    first = [r["probs"] for r in auto.predict(rows, batch_size=16)]
    np.testing.assert_allclose(first, expected, atol=1e-6)
    assert [r["probs"] for r in auto.predict(rows, batch_size=16)] == first  # the same choice every time

    # a model whose class asks for oneDNN from some rows on (CNN, transformer, ERNIE: 8)
    ruled = with_rules(exported_classifier, tmp_path / "ruled", onednn_min_rows=16)
    logger, records, level = logging.getLogger("wenxin"), [], logging.getLogger("wenxin").level
    handler = logging.Handler()
    handler.emit = records.append
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    monkeypatch.setattr("wenxin.inference.predictor._logged_choices", set())  # logged once a process
    try:
        auto = Predictor(str(ruled), backend="paddle")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    choice = "on for batches of 16 or more rows, off below (the model's rule)"
    assert auto.onednn == choice and f"Paddle backend: oneDNN {choice}" in [r.getMessage() for r in records]
    assert not auto.engine.uses_onednn(15) and auto.engine.uses_onednn(16)
    first = [r["probs"] for r in auto.predict(rows, batch_size=16)]
    np.testing.assert_allclose(first, expected, atol=1e-5)
    assert [r["probs"] for r in auto.predict(rows, batch_size=16)] == first  # the same choice every time
    np.testing.assert_allclose([r["probs"] for r in auto.predict(rows, batch_size=8)], expected, atol=1e-6)
    with pytest.raises(InferenceError, match="onednn: 'fast' is not one of auto, on, off"):
        Predictor(exported_classifier, backend="paddle", onednn="fast")


def test_sorted_batches_follow_the_models_rule_and_keep_each_rows_result(exported_classifier, tmp_path):
    """``sorted_batch_rows`` (ERNIE's: 8) runs more rows than that sorted by length in batches of
    that many; each row still gets its own result, in the callers' order. Without the rule, or
    where one batch holds every row, or where Paddle would run the whole batch with oneDNN, the
    rows run in their order."""
    import json

    from conftest import make_sentences, with_rules
    with open(os.path.join(exported_classifier, "preprocess.json"), encoding="utf-8") as f:
        assert json.load(f)["sorted_batch_rows"] is None  # BoW: larger batches cost less per row
    rows = [[t] for t, _ in make_sentences(37, seed=8)]
    plain = Predictor(exported_classifier, backend="paddle")
    assert plain.sorted_batches(rows, 64) is None
    expected = plain.predict(rows, batch_size=64)

    ruled = Predictor(with_rules(exported_classifier, tmp_path / "ruled", sorted_batch_rows=8), backend="paddle")
    order = ruled.sorted_batches(rows, 64)
    assert [len(b) for b in order] == [8, 8, 8, 8, 5]
    flat = [i for b in order for i in b]
    assert sorted(flat) == list(range(37)) and flat != list(range(37))
    lengths = [len(rows[i][0]) for i in flat]
    assert lengths == sorted(lengths)  # shortest first: each batch pads to little
    assert [len(b) for b in ruled.sorted_batches(rows, 6)] == [6] * 6 + [1]  # batch_size below the rule
    assert ruled.sorted_batches(rows[:8], 64) is None and ruled.sorted_batches(rows, 40) is not None
    got = ruled.predict(rows, batch_size=64)
    assert [r["label"] for r in got] == [r["label"] for r in expected]
    np.testing.assert_allclose([r["probs"] for r in got], [r["probs"] for r in expected], atol=1e-6)

    onednn = Predictor(with_rules(exported_classifier, tmp_path / "onednn", sorted_batch_rows=8, onednn_min_rows=32),
                       backend="paddle")  # oneDNN runs whole batches faster: from 32 rows, no sorting
    assert onednn.sorted_batches(rows[:31], 64) is not None and onednn.sorted_batches(rows, 64) is None
    assert onednn.sorted_batches(rows, 31) is not None  # batches of 31 rows run without oneDNN


def test_label_names_show_predictions_by_name_and_keep_the_labels(tmp_path, data_dir):
    """Issue 67: the example printed 0 and 1 with nothing saying which is positive. A label
    field's ``label_names`` travel with the export: results carry ``name`` beside the data's
    ``label`` (which distillation and metrics keep using), and lines show the name."""
    from wenxin.common.errors import ConfigError
    config = task_config(data_dir, str(tmp_path / "out"), max_steps=4, is_eval_dev=0, is_eval_test=0)
    config["dataset_reader"]["train_reader"]["fields"][1]["label_names"] = {"0": "negative", "1": "positive"}
    folder = build(config, tmp_path).export_inference(str(tmp_path / "model"))
    predictor = Predictor(folder)
    assert predictor.meta["labels"] == ["0", "1"] and predictor.meta["label_names"] == ["negative", "positive"]
    results = predictor.predict([["好书好书"], ["坏书坏书"]])
    for result in results:
        assert result["name"] == {"0": "negative", "1": "positive"}[result["label"]]
        assert predictor.result_format.line(result).split("\t")[0] == result["name"]
    for names, said in (({"2": "x"}, r"fields\[1\].label_names: '2' is not a label of the label map \['0', '1'\]"),
                        ({"0": "same", "1": "same"}, "two labels would be shown as the same name")):
        config["dataset_reader"]["train_reader"]["fields"][1]["label_names"] = names
        with pytest.raises(ConfigError, match=said):
            build(config, tmp_path)
