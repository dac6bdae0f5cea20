"""ERNIE-kit task files run as they are: this repository's ERNIE-kit-format examples
(``tasks/<task>/examples/``), run unchanged in folders laid out as ERNIE-kit's tasks are, on small
generated data."""
import json
import os
import shutil

import numpy as np
import pytest

from conftest import REPO, make_sentences, run_script
from wenxin.translation.erniekit import is_erniekit, translate


def example(task, name):
    """One of this repository's ERNIE-kit-format example files, ``tasks/<task>/examples/<name>``."""
    with open(os.path.join(REPO, "tasks", task, "examples", name), encoding="utf-8") as f:
        return json.load(f)


def task_folder(tmp_path, task):
    """A folder laid out as an ERNIE-kit task, ``tasks/<task>`` with this repository's examples/
    (the model hub goes to ``../../models_hub``, as in ERNIE-kit); runs start in it."""
    folder = tmp_path / "tasks" / task
    shutil.copytree(os.path.join(REPO, "tasks", task, "examples"), folder / "examples")
    return folder


def hub_model(tmp_path):
    """A random-init ERNIE 3.0-shaped model in ERNIE-kit's hub layout, where the examples expect it."""
    from ernie_helpers import make_ernie_model
    make_ernie_model(str(tmp_path / "models_hub" / "ernie_3.0_base_ch_dir"), "erniekit", max_position_embeddings=512)


def metric_records(root, run_folder):
    """The metrics a run of ``output/<run_folder>`` logged."""
    with open(root / "output" / run_folder / "logs" / "metrics.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def predict_unchanged(root, infer_file, data_folder, rows):
    """Write ``rows`` as ERNIE-kit's prediction data in ``data/<data_folder>``, run the example
    infer file as it is, and return the lines it wrote."""
    os.makedirs(root / "data" / data_folder)
    (root / "data" / data_folder / "infer.txt").write_text("".join(row + "\n" for row in rows), encoding="utf-8")
    proc = run(root, ["--param_path", f"examples/{infer_file}"], script="run_infer.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return (root / "output" / "predict_result.txt").read_text(encoding="utf-8").split("\n")[:-1]


def cls_bow_config(epoch=5):
    """cls_bow_ch.json: written the way ERNIE-kit's is."""
    config = example("text_classification", "cls_bow_ch.json")
    config["dataset_reader"]["train_reader"]["config"]["epoch"] = epoch
    return config


def cls_bow_infer_config():
    return example("text_classification", "cls_bow_ch_infer.json")


def erniekit_tree(root):
    """data/{train,dev,test}_data/*.txt (space-separated words<TAB>label), data/dict/vocab.txt
    (token<TAB>id, ERNIE-kit's specials first), and a decoy ``text_classification`` package of the
    user's own that must never be imported."""
    words = set()
    for folder, seed, n in (("train_data", 1, 240), ("dev_data", 2, 60), ("test_data", 3, 60)):
        os.makedirs(root / "data" / folder)
        rows = [(" ".join(text), label) for text, label in make_sentences(n, seed)]
        words.update(w for text, _ in rows for w in text.split(" "))
        (root / "data" / folder / f"{folder.split('_')[0]}.txt").write_text(
            "".join(f"{t}\t{label}\n" for t, label in rows), encoding="utf-8")
    os.makedirs(root / "data" / "dict")
    tokens = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"] + sorted(words)
    (root / "data" / "dict" / "vocab.txt").write_text("".join(f"{t}\t{i}\n" for i, t in enumerate(tokens)),
                                                      encoding="utf-8")
    decoy = root / "text_classification"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise RuntimeError('the user tree package was imported')\n")
    (root / "tasks").mkdir()
    os.symlink(decoy, root / "tasks" / "text_classification")
    return len(tokens)


run = run_script


def test_erniekit_bow_classification_trains_unchanged(tmp_path):
    root = task_folder(tmp_path, "text_classification")
    assert erniekit_tree(root) <= cls_bow_config()["model"]["vocab_size"]
    proc = run(root, ["--param_path", "examples/cls_bow_ch.json"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = proc.stderr
    assert "ERNIE-kit task file: task: 'text_classification'" in log  # the built-in, not the decoy
    assert "model.type: BowClassification -> ErnieKitBowClassification" in log
    assert "dataset_reader.train_reader.config.epoch -> trainer.epoch (5)" in log
    records = metric_records(root, "cls_bow_ch")
    test = [r for r in records if r["tag"] == "test"]
    assert test and test[-1]["acc"] >= 0.9
    assert max(r["step"] for r in records) == 5 * 8  # 5 epochs of 240 / 32 batches
    out = root / "output" / "cls_bow_ch"  # where an ERNIE-kit user looks
    assert sorted(os.listdir(out / "save_checkpoints")) == ["checkpoints_step_40", "index.json"]
    assert sorted(os.listdir(out / "save_inference_model")) == ["inference_step_40"]
    assert {"inference.json", "inference.pdiparams", "preprocess.json"} <= set(
        os.listdir(out / "save_inference_model" / "inference_step_40"))
    again = run(root, ["--param_path", "examples/cls_bow_ch.json"])  # never over an earlier run
    assert again.returncode == 2 and "trainer.checkpoints.resume=auto" in again.stderr and "move" in again.stderr

    # ERNIE-kit's infer file, as it is: predictions in ERNIE-kit's format
    texts = [" ".join(text) for text, _ in make_sentences(12, seed=9)]
    lines = predict_unchanged(root, "cls_bow_ch_infer.json", "predict_data", texts)
    assert len(lines) == len(texts)
    from wenxin.inference.predictor import Predictor
    expected = Predictor(str(out / "save_inference_model" / "inference_step_40")).predict([[t] for t in texts])
    for line, text, result in zip(lines, texts, expected):
        written_text, probs = line.split("\t")
        assert written_text == text
        np.testing.assert_allclose(json.loads(probs), result["probs"], rtol=1e-6, atol=1e-7)  # oneDNN: 1e-10 apart
    bad = cls_bow_infer_config()
    bad["inference"]["num_labels"] = 3
    (root / "bad_infer.json").write_text(json.dumps(bad), encoding="utf-8")
    proc = run(root, ["--param_path", "bad_infer.json"], script="run_infer.py")
    assert proc.returncode == 2 and "num_labels: 3, but the model" in proc.stderr


def test_translation_of_each_key():
    config, notes = translate(cls_bow_config(epoch=3))
    assert config["task"].endswith(os.path.join("tasks", "text_classification"))
    assert config["trainer"]["epoch"] == 3
    for reader in config["dataset_reader"].values():
        assert "epoch" not in reader["config"] and "key_tag" not in reader["config"]
        text, label = reader["fields"]
        assert text["reader"]["type"] == "TextFieldReader"
        assert text["tokenizer"]["type"] == "WhitespaceTokenizer" and text["tokenizer"]["lowercase"] is False
        assert label["reader"]["type"] == "LabelFieldReader"
    assert config["model"]["type"] == "ErnieKitBowClassification"
    raw = cls_bow_config()
    raw["trainer"].update(ramdom_seed=7, save_inference_model=1, is_do_train=1)
    config, notes = translate(raw)
    assert config["trainer"]["seed"] == 7 and config["trainer"]["save_inference"] is True
    assert "is_do_train" not in config["trainer"] and any("is_do_train" in n for n in notes)


def test_keys_wenxin_cannot_honour_are_reported_together():
    from wenxin.common.errors import ConfigError
    raw = cls_bow_config()
    raw["trainer"]["is_do_train"] = 0
    raw["trainer"]["extra_param"]["meta"]["job_type"] = "machine_reading_comprehension"
    raw["dataset_reader"]["train_reader"]["config"]["key_tag"] = True
    raw["dataset_reader"]["dev_reader"]["fields"][0].update(
        reader={"type": "ErnieTextFieldReader"},
        tokenizer={"type": "FullTokenizer", "params": {"use_sentence_piece_vocab": True}})  # ERNIE-M's
    with pytest.raises(ConfigError) as info:
        translate(raw)
    assert len(info.value.problems) == 4
    assert "a SentencePiece vocabulary (ERNIE-M's) is read by ERNIE-M's field" in str(info.value)


def test_erniekit_leftover_keys_and_erniem_fields():
    from wenxin.common.errors import ConfigError
    from wenxin.translation.erniekit_infer import translate_infer
    raw = example("text_matching", "mtch_bow_pairwise_ch.json")  # its dev/test labels carry reader_type
    config, notes = translate(raw)
    assert "reader_type" not in config["dataset_reader"]["dev_reader"]["fields"][2]
    assert "dataset_reader.dev_reader.fields[2].reader_type: dropped (ERNIE-kit reads reader.type)" in notes
    raw["dataset_reader"]["dev_reader"]["fields"][2]["reader_type"] = "TextFieldReader"
    with pytest.raises(ConfigError, match="reader_type: 'TextFieldReader' differs from reader.type"):
        translate(raw)
    infer = example("sequence_labeling", "seqlab_ernie_fc_ch_infer.json")  # PADDLE_IS_LOCAL and is_ernie
    native, notes = translate_infer(infer)
    assert "PADDLE_IS_LOCAL" not in native and any("inference.is_ernie: dropped" in n for n in notes)
    infer["inference"]["PADDLE_IS_LOCAL"] = 0
    with pytest.raises(ConfigError, match="PADDLE_IS_LOCAL: 0 .* not supported"):
        translate_infer(infer)
    raw = cls_bow_config()  # ERNIE-M's fields, as cls_ernie_m_1.0_base_one_sent.json has them
    for reader in raw["dataset_reader"].values():
        reader["fields"][0].update(reader={"type": "ErnieTextFieldReaderForMultilingual"},
                                   tokenizer={"type": "FullTokenizerErnieM", "split_char": " ",
                                              "params": {"do_lower_case": "false",
                                                         "spm_model_file": "./data/dict/sentencepiece.bpe.model"}})
    config, notes = translate(raw)
    field = config["dataset_reader"]["train_reader"]["fields"][0]
    assert field["reader"] == {"type": "ErnieMTextFieldReader"}
    assert field["tokenizer"] == {"type": "ErnieMTokenizer", "lowercase": False, "piece_rules": "erniekit",
                                  "spm_model_file": "./data/dict/sentencepiece.bpe.model"}
    raw["dataset_reader"]["train_reader"]["fields"][0]["tokenizer"]["params"]["do_lower_case"] = "true"
    config, notes = translate(raw)  # FullTokenizerErnieM takes the flag and never lower-cases
    assert config["dataset_reader"]["train_reader"]["fields"][0]["tokenizer"]["lowercase"] is False
    assert any("do_lower_case: true, but ERNIE-kit's FullTokenizerErnieM does not lower-case" in n for n in notes)
    raw["dataset_reader"]["train_reader"]["fields"][0]["tokenizer"]["params"].update(do_lower_case="maybe", x=1)
    with pytest.raises(ConfigError) as info:
        translate(raw)
    assert "do_lower_case: 'maybe' is not true or false" in str(info.value)


def test_a_sentencepiece_vocab_is_refused_by_fulltokenizer(tmp_path):
    from wenxin.common.errors import ConfigError
    from wenxin.data.vocab import Vocab
    from wenxin.data.wordpiece import FullTokenizer
    vocab = Vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + [f"\u2581w{i}" for i in range(20)] + ["a", "##b"], "[UNK]")
    with pytest.raises(ConfigError, match="SentencePiece vocabulary .*read ERNIE-M's with ErnieMTextFieldReader"):
        FullTokenizer({"unk_token": "[UNK]"}).bind_vocab(vocab)


def test_native_files_are_not_translated():
    raw = cls_bow_config()
    raw["task"] = "text_classification"
    assert not is_erniekit(raw) and is_erniekit(cls_bow_config())


def test_migrate_writes_a_native_file_that_trains_to_the_same_parameters(tmp_path):
    from conftest import checkpoint_params
    vocab_size = erniekit_tree(tmp_path)
    config = cls_bow_config(epoch=2)
    config["model"]["vocab_size"] = vocab_size
    (tmp_path / "cls_bow_ch.json").write_text(json.dumps(config), encoding="utf-8")
    proc = run(tmp_path, ["migrate", "cls_bow_ch.json", "-o", "native.json"], script="wenxin/cli.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "translated: model.type: BowClassification -> ErnieKitBowClassification" in proc.stderr
    native = json.loads((tmp_path / "native.json").read_text())
    assert "task" in native and not is_erniekit(native)
    native["trainer"]["output_path"] = "./output/native"
    (tmp_path / "native.json").write_text(json.dumps(native), encoding="utf-8")
    for path in ("cls_bow_ch.json", "native.json"):
        proc = run(tmp_path, ["--param_path", path])
        assert proc.returncode == 0, proc.stderr[-3000:]
    steps = 2 * 8
    original = checkpoint_params(tmp_path / "output" / "cls_bow_ch" / "save_checkpoints" / f"checkpoints_step_{steps}")
    migrated = checkpoint_params(tmp_path / "output" / "native" / "save_checkpoints" / f"checkpoints_step_{steps}")
    assert original.keys() == migrated.keys()
    for name in original:
        np.testing.assert_array_equal(original[name], migrated[name], err_msg=name)
    proc = run(tmp_path, ["migrate", "native.json"], script="wenxin/cli.py")
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "already a native" in proc.stderr


def test_optimization_keys():
    raw = cls_bow_config()
    raw["model"]["optimization"] = {"learning_rate": 0.1, "use_lr_decay": True, "use_default_decay": False,
                                    "warmup_steps": 3, "max_train_steps": 100, "init_loss_scaling": 128.0,
                                    "incr_every_n_steps": 100, "decr_every_n_nan_or_inf": 2, "incr_ratio": 2.0,
                                    "decr_ratio": 0.8, "use_dynamic_loss_scaling": True}
    config, notes = translate(raw)
    opt, trainer = config["model"]["optimization"], config["trainer"]
    assert opt == {"learning_rate": 0.1, "lr_scheduler": "linear_warmup_decay", "warmup_steps": 3,
                   "optimizer": "adam"}
    assert (trainer["init_loss_scaling"], trainer["incr_every_n_steps"], trainer["decr_every_n_nan_or_inf"],
            trainer["incr_ratio"], trainer["decr_ratio"], trainer["use_dynamic_loss_scaling"]) == (
        128.0, 100, 2, 2.0, 0.8, True)
    raw["model"]["optimization"] = {"use_lr_decay": False}
    opt = translate(raw)[0]["model"]["optimization"]
    assert opt == {"lr_scheduler": "constant", "optimizer": "adam", "learning_rate": 2e-5}  # ERNIE-kit's BoW defaults


def matching_tree(root):
    """ERNIE-kit's text-matching layout: pairwise training triples, labelled dev/test pairs."""
    import random
    rng = random.Random(4)
    by_label = {0: [], 1: []}
    for text, label in make_sentences(600, seed=11):
        by_label[label].append(" ".join(text))
    words = {w for texts in by_label.values() for t in texts for w in t.split(" ")}

    def pick(label):
        return rng.choice(by_label[label])

    triples = [(pick(y), pick(y), pick(1 - y)) for y in (rng.randint(0, 1) for _ in range(400))]
    files = {"train_data_pairwise_tokenized": triples}
    for name in ("dev_data_tokenized", "test_data_tokenized"):
        rows = []
        for _ in range(80):
            y, same = rng.randint(0, 1), rng.randint(0, 1)
            rows.append((pick(y), pick(y if same else 1 - y), same))
        files[name] = rows
    for folder, rows in files.items():
        os.makedirs(root / "data" / folder)
        (root / "data" / folder / "part-0").write_text("".join("\t".join(map(str, r)) + "\n" for r in rows),
                                                     encoding="utf-8")
    os.makedirs(root / "data" / "dict")
    tokens = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"] + sorted(words)
    (root / "data" / "dict" / "vocab.txt").write_text("".join(f"{t}\t{i}\n" for i, t in enumerate(tokens)),
                                                      encoding="utf-8")
    return len(tokens)


@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_erniekit_bow_pairwise_matching_trains_and_predicts_unchanged(tmp_path, mode):
    root = task_folder(tmp_path, "text_matching")
    assert matching_tree(root) <= example("text_matching", "mtch_bow_pairwise_ch.json")["model"]["vocab_size"]
    args = [] if mode == "dynamic" else ["--set", "model.is_dygraph=0", "--set", "trainer.type=CustomTrainer"]
    proc = run(root, ["--param_path", "examples/mtch_bow_pairwise_ch.json", *args])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "model.type: BowMatchingPairwise -> ErnieKitBowMatchingPairwise" in proc.stderr
    records = metric_records(root, "mtch_bow_pairwise_ch")
    test = [r for r in records if r["tag"] == "test"][-1]
    assert test["auc"] >= 0.7, test
    assert max(r["step"] for r in records) == 3 * 25  # 3 epochs of 400 triples in batches of 16: the infer file's
    pairs = [line.split("\t")[:2] for line in open(root / "data" / "test_data_tokenized" / "part-0",
                                                   encoding="utf-8").read().splitlines()]
    lines = predict_unchanged(root, "mtch_bow_pairwise_ch_infer.json", "predict_data", ["\t".join(p) for p in pairs])
    assert len(lines) == len(pairs) and all(line.split("\t")[:2] == pair for line, pair in zip(lines, pairs))
    assert all(abs(sum(json.loads(line.split("\t")[2])) - 1.0) < 1e-5 for line in lines)


@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_erniekit_cnn_classification_trains_unchanged(tmp_path, mode):
    root = task_folder(tmp_path, "text_classification")
    erniekit_tree(root)
    args = [] if mode == "dynamic" else ["--set", "model.is_dygraph=0", "--set", "trainer.type=CustomTrainer"]
    proc = run(root, ["--param_path", "examples/cls_cnn_ch.json", *args])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "model.type: CNNClassification -> ErnieKitCnnClassification" in proc.stderr
    records = metric_records(root, "cls_cnn_ch")
    assert [r for r in records if r["tag"] == "test"][-1]["acc"] >= 0.85


def cls_ernie_config(epoch=8):
    """cls_ernie_fc_ch.json: written the way ERNIE-kit's is, over ../../models_hub."""
    config = example("text_classification", "cls_ernie_fc_ch.json")
    config["dataset_reader"]["train_reader"]["config"]["epoch"] = epoch
    return config


def ernie_data(root, folders):
    """ERNIE-kit's ERNIE classification data: raw text (no spaces between words), a label."""
    for folder, seed, n in folders:
        os.makedirs(root / "data" / folder)
        (root / "data" / folder / "part-0").write_text(
            "".join(f"{text}\t{label}\n" for text, label in make_sentences(n, seed)), encoding="utf-8")


@pytest.mark.parametrize("mode", ["static"])  # dynamic: the sequence labeling and matching jobs below
def test_erniekit_ernie_classification_runs_unchanged(tmp_path, mode):
    """cls_ernie_fc_ch.json over an ERNIE-kit model hub folder (params/, ernie_config.json,
    vocab.txt): trains, exports and predicts with ERNIE-kit's infer file."""
    root = task_folder(tmp_path, "text_classification")
    hub_model(tmp_path)
    ernie_data(root, [("train_data", 1, 240), ("test_data", 3, 60)])
    args = [] if mode == "dynamic" else ["--set", "model.is_dygraph=0", "--set", "trainer.type=CustomTrainer"]
    proc = run(root, ["--param_path", "examples/cls_ernie_fc_ch.json", *args])
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = proc.stderr
    assert "model.embedding.config_path -> model.encoder_config" in log
    assert "loaded 40 parameters from ../../models_hub/ernie_3.0_base_ch_dir/params (erniekit layout)" in log
    assert "missing in file (2, keep their init): classifier.weight, classifier.bias" in log
    records = metric_records(root, "cls_ernie_3.0_base_fc_ch_dy")
    test = [r for r in records if r["tag"] == "test"]
    assert test and test[-1]["acc"] >= 0.9, test
    assert max(r["step"] for r in records) == 120  # the infer file's inference_step_120
    texts = [text for text, _ in make_sentences(12, seed=9)] + ["Hello 😀 world！", "ＡＢＣ e\u0301"]
    lines = predict_unchanged(root, "cls_ernie_fc_ch_infer.json", "predict_data", texts)
    assert [line.split("\t")[0] for line in lines] == texts
    assert all(abs(sum(json.loads(line.split("\t")[1])) - 1) < 1e-5 for line in lines)


def seqlab_ernie_config():
    return example("sequence_labeling", "seqlab_ernie_fc_ch.json")


def test_erniekit_ernie_sequence_labeling_runs_unchanged(tmp_path):
    """seqlab_ernie_fc_ch.json with \\x02-separated words and tags, ERNIE-kit's label map
    (tag<TAB>id), trained, exported and predicted with ERNIE-kit's output lines."""
    from ernie_helpers import make_tagged
    root = task_folder(tmp_path, "sequence_labeling")
    hub_model(tmp_path)
    for folder, seed, n in (("train_data", 1, 300), ("dev_data", 2, 60), ("test_data", 3, 60)):
        os.makedirs(root / "data" / folder)
        rows = make_tagged(n, seed, sep="\x02")
        (root / "data" / folder / "part-0").write_text("".join(f"{t}\t{g}\n" for t, g in rows), encoding="utf-8")
    os.makedirs(root / "dict")
    tag_map = ["B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "O"]  # ERNIE-kit's example map
    (root / "dict" / "vocab_label_map.txt").write_text("".join(f"{t}\t{i}\n" for i, t in enumerate(tag_map)))
    proc = run(root, ["--param_path", "examples/seqlab_ernie_fc_ch.json"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "model.vocab_path: dropped (the tags are those of the label field's vocab_path)" in proc.stderr
    records = metric_records(root, "seqlab_ernie_3.0_base_fc_ch")
    test = [r for r in records if r["tag"] == "test"]
    assert test and test[-1]["f1"] > 0.8, test
    assert max(r["step"] for r in records) == 190  # the infer file's inference_step_190
    predict = [t for t, _ in make_tagged(10, seed=9, sep="\x02")]
    lines = predict_unchanged(root, "seqlab_ernie_fc_ch_infer.json", "predict_data", predict)
    assert [line.split("\t")[0] for line in lines] == predict
    for line, text in zip(lines, predict):
        ids = json.loads(line.split("\t")[1])
        assert len(ids) == len(text.split("\x02")) and all(0 <= i < len(tag_map) for i in ids)


def test_erniekit_ernie_pointwise_matching_runs_unchanged(tmp_path):
    """mtch_ernie_fc_pointwise_ch.json: ErnieClassificationDataSetReader with two
    ErnieClassificationFieldReader fields, encoded together as one pair."""
    root = task_folder(tmp_path, "text_matching")
    hub_model(tmp_path)
    rows = make_sentences(720, seed=4)
    pairs = [(a, b, int(la == lb == 1)) for (a, la), (b, lb) in zip(rows[::2], rows[1::2])]
    for folder, part in (("train_data_pointwise", pairs[:300]), ("test_data_pointwise", pairs[300:])):
        os.makedirs(root / "data" / folder)
        (root / "data" / folder / "part-0").write_text("".join(f"{a}\t{b}\t{y}\n" for a, b, y in part), "utf-8")
    proc = run(root, ["--param_path", "examples/mtch_ernie_fc_pointwise_ch.json"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "one ErnieTextFieldReader pair ([CLS] text_a [SEP] text_b [SEP])" in proc.stderr
    assert "ErnieClassificationDataSetReader -> BasicDataSetReader" in proc.stderr
    records = metric_records(root, "mtch_ernie_fc_pointwise_ch")
    test = [r for r in records if r["tag"] == "test"]
    assert test and test[-1]["auc"] > 0.8, test
    assert max(r["step"] for r in records) == 152  # the infer file's inference_step_152
    lines = predict_unchanged(root, "mtch_ernie_fc_pointwise_ch_infer.json", "predict_data_pointwise",
                              [f"{a}\t{b}" for a, b, _ in pairs[300:320]])
    assert [line.split("\t")[:2] for line in lines] == [[a, b] for a, b, _ in pairs[300:320]]
    assert all(len(json.loads(line.split("\t")[2])) == 2 for line in lines)


def test_erniekit_multi_label_classification_runs_unchanged(tmp_path):
    """cls_ernie_multi_label_ch.json: MultiLabelFieldReader labels (``0 2``), sigmoid outputs, and
    ERNIE-kit's infer lines (the text, then the probabilities)."""
    from ernie_helpers import make_multi_label
    root = task_folder(tmp_path, "text_classification")
    hub_model(tmp_path)
    for folder, seed, n in (("train_data", 1, 240), ("test_data", 3, 60)):
        os.makedirs(root / "data" / "multi_label_data" / folder)
        (root / "data" / "multi_label_data" / folder / "part-0").write_text(
            "".join(f"{text}\t{labels}\n" for text, labels in make_multi_label(n, seed)), encoding="utf-8")
    proc = run(root, ["--param_path", "examples/cls_ernie_multi_label_ch.json"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "model.embedding.config_path -> model.encoder_config" in proc.stderr
    records = metric_records(root, "cls_ernie_3.0_base_multi_label")
    test = [r for r in records if r["tag"] == "test"][-1]
    assert test["f1"] > 0.7 and test["precision"] > 0.8, test  # all labels everywhere: precision ~0.43
    assert max(r["step"] for r in records) == 240  # the infer file's inference_step_240
    texts = [text for text, _ in make_multi_label(10, seed=9)]
    lines = predict_unchanged(root, "cls_ernie_multi_label_ch_infer.json", "predict_data", texts)
    assert [line.split("\t")[0] for line in lines] == texts
    assert all(len(json.loads(line.split("\t")[1])) == 3 for line in lines)


def test_erniekit_wordpiece_keys_have_their_effect():
    """FullTokenizer's params.do_lower_case, and ERNIE-kit's symbol rule, on real token ids."""
    from wenxin.config.schema import validate
    from wenxin.config.task_schema import FIELD
    from wenxin.data.ernie_fields import ErnieTextFieldReader
    vocab = os.path.join(os.path.dirname(__file__), "fixtures", "ernie", "vocab.txt")

    def field_of(params):
        config = cls_ernie_config()
        for reader in config["dataset_reader"].values():
            reader["fields"][0]["tokenizer"]["params"] = params
            reader["fields"][0]["vocab_path"] = vocab
        native, _ = translate(config)
        spec = native["dataset_reader"]["train_reader"]["fields"][0]
        return spec, ErnieTextFieldReader(validate(spec, FIELD, "f"), "f")

    spec, lower = field_of(None)
    assert spec["tokenizer"]["lowercase"] is True and spec["tokenizer"]["split_symbols"] is False
    cased_spec, cased = field_of({"do_lower_case": False})
    assert cased_spec["tokenizer"]["lowercase"] is False
    hello_lower, hello_cased = lower.vocab.token_to_id["hello"], cased.vocab.token_to_id["Hello"]
    assert lower.convert("Hello")[0].tolist()[1:-1] == [hello_lower]
    assert cased.convert("Hello")[0].tolist()[1:-1] == [hello_cased]
    # ERNIE-kit keeps an emoji inside its word (one unknown word); PaddleNLP splits it off
    assert lower.convert("hello😀")[0].tolist()[1:-1] == [lower.vocab.token_to_id["[UNK]"]]
    with pytest.raises(Exception, match="params.vocab_size: not a FullTokenizer setting"):
        field_of({"vocab_size": 3})


def test_a_gpu_place_in_an_infer_file_on_the_cpu_build_is_one_line(tmp_path, capsys):
    import paddle

    from conftest import assert_one_error_block
    from wenxin.cli import main
    if paddle.is_compiled_with_cuda():
        pytest.skip("a GPU build of Paddle")
    infer = example("sequence_labeling", "seqlab_ernie_fc_ch_infer.json")
    infer["inference"]["PADDLE_PLACE_TYPE"] = "gpu"  # as ERNIE-kit's own infer files have it
    path = tmp_path / "infer.json"
    path.write_text(json.dumps(infer), encoding="utf-8")
    code = main(["infer", "--param_path", str(path)])
    lines = assert_one_error_block(code, *capsys.readouterr(), "inference.PADDLE_PLACE_TYPE: 'gpu', but the installed "
                                                              "Paddle (paddlepaddle")
    assert code == 2 and len(lines) == 1 and "is a CPU build" in lines[0]
    assert lines[0].endswith("or run on the CPU: --set inference.PADDLE_PLACE_TYPE=cpu"), lines[0]
    # the option it names works, and so does the native key's form; each gets past the place to the
    # next thing this file lacks (its exported model)
    for option in ("inference.PADDLE_PLACE_TYPE=cpu", "PADDLE_PLACE_TYPE=cpu"):
        code = main(["infer", "--param_path", str(path), "--set", option])
        err = capsys.readouterr().err  # (with the log on, the translation's notes name the key too)
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert code != 0 and len(errors) == 1, (option, err)
        assert "PADDLE_PLACE_TYPE" not in errors[0] and "unknown key" not in errors[0], (option, errors)
        assert "model" in errors[0].lower(), errors


def test_pairwise_scores_in_erniekits_output_format():
    """ERNIE-kit's text_matching infer writes the input columns, then its pairwise model's output
    [1 - s, s] (s the cosine moved into [0, 1]) as a Python list, in float32."""
    import numpy

    from wenxin.inference.formatters import ScoreFormat
    score = float(numpy.float32(0.8123))
    line = ScoreFormat([], []).erniekit_line({"score": score}, ["查询", "标题"])
    query, title, pair = line.split("\t")
    assert (query, title) == ("查询", "标题")
    assert json.loads(pair) == [float(numpy.float32(1.0) - numpy.float32(score)), score]


def test_migrate_translates_infer_files_and_refuses_what_still_does_not_fit(tmp_path, capsys):
    from conftest import assert_one_error_block
    from wenxin.cli import main
    from wenxin.config.infer_schema import INFER_SCHEMA
    from wenxin.config.schema import validate
    for task, name in [("sequence_labeling", "seqlab_ernie_fc_ch_infer.json"),
                       ("text_matching", "mtch_bow_pairwise_ch_infer.json"),
                       ("text_classification", "cls_bow_ch_infer.json")]:
        out = tmp_path / f"native_{name}"
        assert main(["migrate", os.path.join(REPO, "tasks", task, "examples", name), "-o", str(out)]) == 0
        native = json.loads(out.read_text(encoding="utf-8"))
        validate(native, INFER_SCHEMA)  # a native infer file: wenxin infer reads it as it is
        assert native["output_format"] == "erniekit" and "inference" not in native
    capsys.readouterr()
    raw = cls_bow_config()
    raw["trainer"]["is_erniekit_only"] = 1  # a key neither ERNIE-kit's translation nor wenxin knows
    source = tmp_path / "odd.json"
    source.write_text(json.dumps(raw), encoding="utf-8")
    target = tmp_path / "odd_native.json"
    code = main(["migrate", str(source), "-o", str(target)])
    assert_one_error_block(code, *capsys.readouterr(), f"{source}: translated, the task file still does not fit: "
                                                       f"trainer.is_erniekit_only: unknown key")
    assert not target.exists()


@pytest.mark.parametrize("task, name, said", [
    ("text_generation", "cls_ernie_gen_infilling_ch_infer.json", "the generated tokens, tab-separated"),
    ("information_extraction_many_to_many", "many_to_many_ie_relation_ernie_fc_ch_infer.json",
     "one JSON list of every text's record"),
    ("text_classification", "cls_ernie_fc_ch_infer.json", "the input columns, then the result"),
])
def test_the_infer_log_says_what_each_output_line_holds(task, name, said, monkeypatch):
    """ERNIE-Gen's lines hold only the generated tokens, extraction writes one document: the log
    of the translation says which, not "the input columns, then the result" for every task."""
    from wenxin.translation.erniekit_infer import translate_infer
    monkeypatch.chdir(os.path.join(REPO, "tasks", task))  # where its files name their dictionaries from
    _, notes = translate_infer(example(task, name))
    assert [n for n in notes if n.startswith("output_format")] == [
        f"output_format: erniekit (each line as ERNIE-kit's inference wrote it: {said})"]
