"""Data distillation from ERNIE-kit's files (``tasks/text_classification/examples/data_distillation/``,
ERNIE-kit's ``data_distillation`` task): ``wenxin distill`` runs ``run_distill.sh``'s three steps
in a folder laid out as ERNIE-kit's, on generated reviews: an ERNIE teacher, its labels for the
unlabeled texts, and a CNN student trained on them."""
import json
import os
import shutil

import pytest

from conftest import REPO, make_sentences, run_script
from ernie_helpers import make_ernie_model

EXAMPLES = os.path.join(REPO, "tasks", "text_classification", "examples", "data_distillation")


def distill_folder(tmp_path):
    """``tasks/data_distillation`` as ERNIE-kit lays it out after its download_data.sh:
    distill/chnsenticorp/teacher/{train,dev}, distill/chnsenticorp/student/{train/part.0, dev,
    unsup_train_aug/part.0 (student text<TAB>teacher text), vocab.txt}; the model hub at
    ../../models_hub."""
    root = tmp_path / "tasks" / "data_distillation"
    shutil.copytree(EXAMPLES, root / "examples")
    make_ernie_model(str(tmp_path / "models_hub" / "ernie_3.0_base_ch_dir"), "erniekit", max_position_embeddings=512)
    data = root / "distill" / "chnsenticorp"
    splits = {"train": make_sentences(240, 1), "dev": make_sentences(60, 2), "unlabeled": make_sentences(300, 4)}
    for side, split in (("teacher", "train"), ("teacher", "dev"), ("student", "train"), ("student", "dev")):
        os.makedirs(data / side / split)
        name = "part.0" if (side, split) == ("student", "train") else "part-0"
        rows = [(text if side == "teacher" else " ".join(text), label) for text, label in splits[split]]
        (data / side / split / name).write_text("".join(f"{t}\t{label}\n" for t, label in rows), encoding="utf-8")
    os.makedirs(data / "student" / "unsup_train_aug")
    (data / "student" / "unsup_train_aug" / "part.0").write_text(
        "".join(f"{' '.join(text)}\t{text}\n" for text, _ in splits["unlabeled"]), encoding="utf-8")
    chars = sorted({c for rows in splits.values() for text, _ in rows for c in text})
    (data / "student" / "vocab.txt").write_text(
        "".join(f"{token}\t{i}\n" for i, token in enumerate(["[PAD]", "[UNK]", *chars])), encoding="utf-8")
    return root, splits


def test_erniekit_distillation_runs_from_its_files(tmp_path):
    root, splits = distill_folder(tmp_path)
    proc = run_script(root, ["distill", "--teacher", "examples/cls_ernie_fc_ch.json",
                             "--student", "examples/cls_cnn_ch.json",
                             "--unlabeled", "distill/chnsenticorp/student/unsup_train_aug/part.0",
                             "--labels_out", "distill/chnsenticorp/student/train/part.1",
                             "--teacher_set", "model.optimization.learning_rate=0.002",
                             "--student_set", "model.optimization.learning_rate=0.005"], script="wenxin/cli.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "task: 'text_classification' from trainer.extra_param.meta.job_type 'data_distillation_text_classification'" \
        in proc.stderr
    assert "model.type: CNNClassification -> ErnieKitCnnClassification" in proc.stderr
    labelled = (root / "distill" / "chnsenticorp" / "student" / "train" / "part.1").read_text(encoding="utf-8")
    lines = [line.split("\t") for line in labelled.splitlines()]
    assert [text for text, _ in lines] == [" ".join(text) for text, _ in splits["unlabeled"]]
    agree = sum(label == str(gold) for (_, label), (_, gold) in zip(lines, splits["unlabeled"]))
    assert agree >= 0.9 * len(lines)  # the teacher learned the task
    assert sum(summary["label_counts"].values()) == len(lines)
    assert summary["teacher_model"].endswith("inference_step_150")  # 240 texts, batch 8, 5 epochs
    assert summary["student_metrics"]["dev_reader"]["acc"] >= 0.9
    student = summary["student_model"]
    assert os.path.isfile(os.path.join(root, student, "preprocess.json"))


def test_distill_reports_bad_unlabeled_input_and_reads_the_teacher_an_infer_file_names(tmp_path):
    from wenxin.common.errors import DataError
    from wenxin.distill import teacher_model_of, unlabeled_rows
    bad = tmp_path / "part.0"
    bad.write_text("a b\tab\nonly one column\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"part.0:2: 1 column\(s\), but the student reads column 0 and the teacher "
                                        r"column 1"):
        list(unlabeled_rows(str(bad), 0, 1))
    assert list(unlabeled_rows(str(bad), 0, -1)) == [("a b", "ab"), ("only one column", "only one column")]
    with pytest.raises(DataError, match="--unlabeled: data file not found: .*missing"):
        list(unlabeled_rows(str(tmp_path / "missing"), 0, -1))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="--unlabeled: folder has no data files"):
        list(unlabeled_rows(str(tmp_path / "empty"), 0, -1))
    infer = os.path.join(EXAMPLES, "cls_ernie_fc_ch_infer.json")
    assert teacher_model_of(infer) == "./output/cls_ernie_3.0_base_fc_ch_dy/save_inference_model/inference_step_4000/"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("gawk") is None or os.path.realpath(shutil.which("awk") or "") != os.path.realpath(
    shutil.which("gawk") or ""), reason="run_distill.sh needs GNU awk (its strtonum) as awk")
def test_erniekits_run_distill_sh_runs_unchanged_with_wenxins_scripts(tmp_path):
    """ERNIE-kit's own run_distill.sh, with wenxin's run_trainer.py and run_infer.py in the task
    folder: the teacher trains to its infer file's inference_step_4000 (6,400 texts, batch 8, 5
    epochs), labels the unlabeled texts through awk, and the student trains on them."""
    import subprocess
    import sys
    root, splits = distill_folder(tmp_path)
    rows = make_sentences(6400, 11)
    (root / "distill" / "chnsenticorp" / "teacher" / "train" / "part-0").write_text(
        "".join(f"{t}\t{label}\n" for t, label in rows), encoding="utf-8")
    with open(os.path.join(REPO, "tests", "fixtures", "run_distill.sh"), encoding="utf-8") as f:
        (root / "run_distill.sh").write_text(f.read(), encoding="utf-8")
    for script in ("run_trainer.py", "run_infer.py"):
        shutil.copy(os.path.join(REPO, script), root / script)
    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, "GLOG_minloglevel": "2", "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
           "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(["bash", "run_distill.sh"], cwd=root, capture_output=True, text=True, timeout=1200, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    labelled = (root / "distill" / "chnsenticorp" / "student" / "train" / "part.1").read_text(encoding="utf-8")
    lines = [line.split("\t") for line in labelled.splitlines()]
    assert [text for text, _ in lines] == [" ".join(text) for text, _ in splits["unlabeled"]]
    assert {label for _, label in lines} <= {"0", "1"}
    assert "result: ./output/cls_cnn_ch/" in proc.stdout
