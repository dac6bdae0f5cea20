"""Fine-tuning random-init ERNIE checkpoints (PaddleNLP and ERNIE-kit layouts) through the ERNIE
task models in both graph modes; exports predict raw text as the trainer evaluates it."""
from __future__ import annotations

import http.client
import json
import re
import os
import shutil

import numpy as np
import paddle
import pytest

from conftest import REPO, build, make_sentences, run_script, write_config, write_tsv
from ernie_helpers import ernie_config, ernie_text, make_ernie_model, make_multi_label, make_tagged
from wenxin.common.constants import Phase
from wenxin.common.errors import ConfigError
from wenxin.inference.predictor import Predictor

LABEL = {"name": "label", "data_type": "int", "reader": {"type": "LabelFieldReader"}}


@pytest.fixture(scope="module")
def ernie_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ernie")
    make_ernie_model(str(folder / "paddlenlp"), "paddlenlp")
    make_ernie_model(str(folder / "erniekit"), "erniekit")
    write_tsv(str(folder / "data" / "train.tsv"), make_sentences(240, seed=1))
    write_tsv(str(folder / "data" / "dev.tsv"), make_sentences(60, seed=2))
    return folder


@pytest.fixture(scope="module")
def tuned_dir(ernie_dir, tmp_path_factory):
    """The random-init model after sentiment fine-tuning, saved in PaddleNLP's layout: a stand-in
    for a real pretrained model, whose [CLS] vectors already tell texts apart. (Random-init
    ones are near-identical for every text, and cosine-trained matchers barely move them.)"""
    folder = tmp_path_factory.mktemp("tuned")
    trainer = build(classification(ernie_dir, folder, "dynamic"), folder)
    trainer.do_train()
    weights = {name[len("ernie."):]: paddle.to_tensor(np.asarray(value))
               for name, value in trainer.engine.model_state_dict().items() if name.startswith("ernie.")}
    model = folder / "model"
    model.mkdir()
    paddle.save(weights, str(model / "model_state.pdparams"))
    for name in ("config.json", "vocab.txt"):
        shutil.copy(ernie_dir / "paddlenlp" / name, model / name)
    return model


def classification(ernie_dir, tmp_path, mode, layout="paddlenlp", **trainer):
    model_dir = str(ernie_dir / layout)
    config = ernie_config(str(ernie_dir / "data"), model_dir, str(tmp_path / "out"),
                          {"type": "ErnieClassification"}, "text_classification",
                          [ernie_text("text_a", model_dir), LABEL], mode=mode, epoch=8, layout=layout, **trainer)
    return config


def onnx_predictor(trainer, folder):
    """``model.onnx`` written beside the export (checked against Paddle on a dev batch), run by
    ONNX Runtime."""
    pytest.importorskip("paddle2onnx")
    from wenxin.inference.onnx_export import export_onnx
    export_onnx(folder, trainer.readers["dev_reader"].collate_rows(list(range(8))))
    return Predictor(folder, backend="onnxruntime")


def assert_export_matches_evaluation(trainer, folder, rows, atol=1e-5, backend="auto"):
    outputs, _ = trainer.collect_outputs("dev_reader", Phase.EVALUATE)
    results = Predictor(folder, backend=backend).predict(rows, batch_size=7)  # other batches: padding must not matter
    probs = np.array([r["probs"] for r in results])
    assert np.abs(probs - outputs["probs"]).max() < atol
    np.testing.assert_array_equal(np.array([int(r["label"]) for r in results]), outputs["predictions"])
    return outputs


@pytest.mark.parametrize("layout,mode", [("paddlenlp", "dynamic"), ("erniekit", "static")])
def test_ernie_classification_fine_tunes_and_exports(tmp_path, ernie_dir, mode, layout, capfd):
    trainer = build(classification(ernie_dir, tmp_path, mode, layout), tmp_path)
    report = capfd.readouterr().out
    assert "loaded 40 parameters" in report and f"({layout} layout)" in report
    assert "missing in file (2, keep their init): classifier.weight, classifier.bias" in report
    assert "unexpected" not in report
    trainer.do_train()
    metrics = trainer.evaluate("dev_reader")
    assert metrics["acc"] > 0.8, metrics
    folder = trainer.export_inference(str(tmp_path / "export"))
    moved = str(tmp_path / "moved")
    shutil.move(folder, moved)  # the export carries the WordPiece vocab and tokenizer settings
    with open(ernie_dir / "data" / "dev.tsv", encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t")[:1] for line in f]
    assert_export_matches_evaluation(trainer, moved, rows)
    if layout == "paddlenlp":  # ONNX Runtime: the same outputs (paddle2onnx converts the encoder)
        assert onnx_predictor(trainer, moved).backend == Predictor(moved).backend == "onnxruntime"
        assert_export_matches_evaluation(trainer, moved, rows, backend="onnxruntime")
    with open(os.path.join(moved, "preprocess.json"), encoding="utf-8") as f:
        meta = json.load(f)
    field = meta["fields"][0]
    assert field["tokenizer"]["type"] == "FullTokenizer" and field["vocab_path"] == "vocab/text_a.txt"
    # ERNIE's cost follows the padded length: rows run sorted by length (above, in batches of 7)
    assert meta["sorted_batch_rows"] == 8 and Predictor(moved).sorted_batches(rows, 7) is not None


def test_sentence_pairs_fine_tune_and_predict_raw_pairs(tmp_path, ernie_dir):
    """[CLS] a [SEP] b [SEP] with token types from two columns (pair_with), through run_infer."""
    rows = []
    for i, (text, label) in enumerate(make_sentences(300, seed=5)):
        other, other_label = make_sentences(1, seed=1000 + i)[0]
        rows.append((text, other, int(label == other_label)))
    write_tsv(str(tmp_path / "pairs" / "train.tsv"), rows[:240])
    write_tsv(str(tmp_path / "pairs" / "dev.tsv"), rows[240:])
    model_dir = str(ernie_dir / "paddlenlp")
    fields = [ernie_text("text_a", model_dir, max_seq_len=40, pair_with="text_b"),
              ernie_text("text_b", model_dir, max_seq_len=40), LABEL]
    config = ernie_config(str(tmp_path / "pairs"), model_dir, str(tmp_path / "out"), {"type": "ErnieClassification"},
                          "text_classification", fields, epoch=3, save_inference=True)
    trainer = build(config, tmp_path)
    batch = next(iter(trainer.readers["dev_reader"].make_loader(
        trainer.readers["dev_reader"].make_sampler(4, False, 0), numpy_batches=True)))
    assert set(batch) == {"text_a", "text_a_sent_ids", "text_a_pos_ids", "text_a_seq_lens", "label"}
    first = batch["text_a"][0][:batch["text_a_seq_lens"][0]]
    seps = np.flatnonzero(first == 2)  # [SEP]
    assert first[0] == 1 and len(seps) == 2 and seps[-1] == len(first) - 1
    np.testing.assert_array_equal(batch["text_a_sent_ids"][0][:len(first)],
                                  [0] * (seps[0] + 1) + [1] * (len(first) - seps[0] - 1))
    trainer.do_train()
    moved = str(tmp_path / "moved")  # self-contained: both texts' vocabularies travel with it
    shutil.copytree(tmp_path / "out" / "checkpoints" / "best" / "inference", moved)
    assert sorted(os.listdir(os.path.join(moved, "vocab"))) == ["text_a.txt", "text_b.txt"]
    infer = {"model_dir": moved,
             "predict_reader": {"config": {"data_path": str(tmp_path / "pairs" / "dev.tsv")}},
             "output_file": str(tmp_path / "predictions.txt")}
    done = run_script(tmp_path, ["--param_path", write_config(str(tmp_path / "infer.json"), infer)], "run_infer.py")
    assert done.returncode == 0, done.stderr
    with open(tmp_path / "predictions.txt", encoding="utf-8") as f:
        predicted = [line.split("\t")[0] for line in f]
    outputs, _ = trainer.collect_outputs("dev_reader", Phase.EVALUATE)
    assert [int(p) for p in predicted] == outputs["predictions"].tolist()
    # wenxin serve: raw pairs in, the same answers
    from wenxin.inference.server import Service
    service = Service(str(tmp_path / "out" / "checkpoints" / "best" / "inference"), port=0)
    thread = service.start_in_thread()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=30)
        conn.request("POST", "/predict", body=json.dumps({"rows": [list(r[:2]) for r in rows[240:]]}),
                     headers={"Content-Type": "application/json"})
        answer = json.loads(conn.getresponse().read())
    finally:
        service.stop()
        thread.join()
    assert [int(r["label"]) for r in answer["predictions"]] == outputs["predictions"].tolist()


def test_ernie_fields_and_models_check_what_they_are_given(tmp_path, ernie_dir):
    model_dir = str(ernie_dir / "paddlenlp")
    base = classification(ernie_dir, tmp_path, "dynamic")
    cases = [
        ("dataset_reader.train_reader.fields[0].vocab_path: ErnieTextFieldReader needs the pretrained model's vocab.txt",
         lambda c: c["dataset_reader"]["train_reader"]["fields"][0].update(vocab_path="")),
        ("model.encoder_config: ", lambda c: c["model"].update(encoder_config=str(tmp_path))),
        ("max_seq_len 100 of 'text_a' is more than the encoder's max_position_embeddings 64",
         lambda c: [r["fields"][0].update(max_seq_len=100) for r in c["dataset_reader"].values()]),
        ("'text_a' is not an ErnieTextFieldReader field",
         lambda c: [r["fields"][0].update(reader={"type": "TextFieldReader"}, tokenizer=None)
                    for r in c["dataset_reader"].values()]),
        ("the vocab of 'text_a' has 249 tokens, more than the encoder's vocab_size 160 (model.encoder_config): "
         "another model's vocab.txt?",
         lambda c: [r["fields"][0].update(vocab_path=os.path.join(REPO, "tests", "fixtures", "ernie", "vocab.txt"))
                    for r in c["dataset_reader"].values()]),
        ("pair_with: no other field named 'text_b'",
         lambda c: c["dataset_reader"]["train_reader"]["fields"][0].update(pair_with="text_b")),
    ]
    for expected, change in cases:
        config = json.loads(json.dumps(base))
        change(config)
        with pytest.raises(ConfigError, match=re.escape(expected)):
            build(config, tmp_path)
    assert os.path.isdir(model_dir)


@pytest.mark.parametrize("mode,decoder", [("static", "softmax"), ("dynamic", "crf")])
def test_ernie_tagger_fine_tunes_and_exports_word_tags(tmp_path, ernie_dir, mode, decoder):
    write_tsv(str(tmp_path / "tags" / "train.tsv"), make_tagged(300, seed=1))
    write_tsv(str(tmp_path / "tags" / "dev.tsv"), make_tagged(60, seed=2))
    model_dir = str(ernie_dir / "paddlenlp")
    tags = {"name": "label", "data_type": "string", "reader": {"type": "ErnieSeqlabelLabelFieldReader"}}
    config = ernie_config(str(tmp_path / "tags"), model_dir, str(tmp_path / "out"),
                          {"type": "ErnieFcSeqLabel", "decoder": decoder}, "sequence_labeling",
                          [ernie_text("text_a", model_dir, max_seq_len=40), tags], mode=mode, epoch=10, metric="f1")
    config["model"]["optimization"]["learning_rate"] = 0.01
    trainer = build(config, tmp_path)
    reader = trainer.readers["dev_reader"]
    example = next(e for e, (text, _) in zip(reader.examples, make_tagged(60, seed=2)) if "goods" in text)
    ids, tag_ids = example[0][0], example[1]
    tag_names = [reader.fields[1].vocab.tokens[t] for t in tag_ids]
    good = [i for i, t in enumerate(ids) if t == reader.fields[0].vocab.token_to_id["good"]][0]
    assert tag_names[good:good + 2] == ["B-ORG", "I-ORG"]  # "goods" is good ##s: one chunk of two pieces
    assert len(tag_ids) == len(ids) and tag_names[0] == tag_names[-1] == "O"  # [CLS] and [SEP]
    trainer.do_train()
    metrics = trainer.evaluate("dev_reader")
    assert metrics["f1"] > 0.8, metrics  # from 0: a random-init encoder, 190 steps
    folder = trainer.export_inference(str(tmp_path / "export"))
    rows = make_tagged(60, seed=2)
    results = Predictor(folder).predict([[text] for text, _ in rows], batch_size=7)
    outputs, _ = trainer.collect_outputs("dev_reader", Phase.EVALUATE)
    vocab = reader.fields[1].vocab.tokens
    for result, (text, _), predicted in zip(results, rows, outputs["predictions"]):
        words = text.split(" ")
        assert len(result["tags"]) == len(words)
        starts = np.cumsum([0] + [2 if w == "goods" else 1 for w in words])[:-1]
        assert result["tags"] == [vocab[predicted[1 + s]] for s in starts]  # first pieces, as evaluated
    assert sum(r["tags"] == gold.split(" ") for r, (_, gold) in zip(results, rows)) > 30  # whole lines right
    # a text of more than max_seq_len - 2 = 38 word pieces is cut after the last sentence end that
    # fits, between whole words; the pieces are tagged on their own and joined
    with open(os.path.join(folder, "preprocess.json"), encoding="utf-8") as f:
        assert json.load(f)["max_seq_len"] == {"text_a": {"tokens": 40, "longer": "split"}}
    sentences = [text + " 。" for text, _ in rows[:12]]
    sizes = [sum(2 if w == "goods" else 1 for w in s.split(" ")) for s in sentences]
    groups, used = [[]], 0
    for sentence, size in zip(sentences, sizes):  # whole sentences, as many as fit
        if groups[-1] and used + size > 38:
            groups.append([])
            used = 0
        groups[-1].append(sentence)
        used += size
    assert len(groups) > 1
    long_text = " ".join(sentences)
    whole, *parts = Predictor(folder).predict([[long_text]] + [[" ".join(g)] for g in groups])
    assert len(whole["tags"]) == len(long_text.split(" "))
    assert whole["tags"] == [t for part in parts for t in part["tags"]]
    expected, offset = [], 0
    for group, part in zip(groups, parts):
        expected += [{**c, "start": c["start"] + offset, "end": c["end"] + offset} for c in part["chunks"]]
        offset += len(" ".join(group)) + 1
    assert whole["chunks"] == expected and expected
    assert all(long_text[c["start"]:c["end"]] == c["text"] for c in whole["chunks"])
    if decoder == "softmax":  # ONNX Runtime tags the same (paddle2onnx cannot convert the CRF's decoding)
        onnx = onnx_predictor(trainer, folder).predict([[text] for text, _ in rows], batch_size=7)
        assert [r["tags"] for r in onnx] == [r["tags"] for r in results]


@pytest.mark.parametrize("model_type,mode,epoch", [("ErnieMatchingFcPointwise", "static", 6),
                                                   ("ErnieMatchingFcPointwise", "dynamic", 1),
                                                   ("ErnieMatchingSiamesePointwise", "dynamic", 6),
                                                   ("ErnieMatchingSiamesePointwise", "static", 1),
                                                   ("ErnieMatchingSiamesePairwise", "static", 6),
                                                   ("ErnieMatchingSiamesePairwise", "dynamic", 1)])
def test_ernie_matching_fine_tunes_and_exports(tmp_path, tuned_dir, model_type, mode, epoch):
    """Each model learns in one mode; in the other, one epoch shows it trains and exports the same."""
    from test_text_matching import make_pairs, make_triples

    def both_positive(n, seed):  # a rule over both texts that a small model learns in a few epochs
        rows = make_sentences(2 * n, seed)
        return [(a, b, int(la == lb == 1)) for (a, la), (b, lb) in zip(rows[::2], rows[1::2])]

    pairwise = model_type.endswith("Pairwise")
    folder = tmp_path / "match"
    write_tsv(str(folder / "train.tsv"), make_triples(300, 1) if pairwise else both_positive(300, 1))
    dev_rows = make_pairs(80, 2) if pairwise else both_positive(80, 2)
    write_tsv(str(folder / "dev.tsv"), dev_rows)
    model_dir = str(tuned_dir)
    label = {"name": "label", "data_type": "int", "reader": {"type": "LabelFieldReader"}}
    if model_type == "ErnieMatchingFcPointwise":
        train = dev = [ernie_text("text_a", model_dir, 48, pair_with="text_b"), ernie_text("text_b", model_dir, 48),
                       label]
    elif model_type == "ErnieMatchingSiamesePointwise":
        train = dev = [ernie_text("text_a", model_dir), ernie_text("text_b", model_dir), label]
    else:
        train = [ernie_text(name, model_dir) for name in ("text_a", "text_b", "text_c")]
        dev = [ernie_text("text_a", model_dir), ernie_text("text_b", model_dir),
               {"name": "label", "data_type": "int", "reader": {"type": "ScalarFieldReader"}, "is_label": True}]
    config = ernie_config(str(folder), model_dir, str(tmp_path / "out"), {"type": model_type}, "text_matching", train,
                          mode=mode, epoch=epoch, metric="auc")
    config["dataset_reader"]["dev_reader"]["fields"] = dev
    trainer = build(config, tmp_path)
    metrics = trainer.do_train()["dev_reader"]
    assert metrics["auc"] > (0.8 if epoch > 1 else 0.0), metrics
    outputs, _ = trainer.collect_outputs("dev_reader", Phase.EVALUATE)
    folder = trainer.export_inference(str(tmp_path / "export"))
    convert = model_type == "ErnieMatchingSiamesePairwise" and epoch == 1  # two encoders, a score
    predictors = [Predictor(folder)] + ([onnx_predictor(trainer, folder)] if convert else [])
    for predictor in predictors:  # Paddle Inference, and ONNX Runtime for one of the models
        results = predictor.predict([list(row[:2]) for row in dev_rows], batch_size=9)
        if pairwise:
            got, expected = [r["score"] for r in results], outputs["scores"]
        else:
            got, expected = [r["probs"][1] for r in results], outputs["probs"][:, 1]
        assert got == pytest.approx(list(expected), abs=1e-5), predictor.backend


@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_multi_label_classification_fine_tunes_and_exports(tmp_path, ernie_dir, mode):
    write_tsv(str(tmp_path / "ml" / "train.tsv"), make_multi_label(300, seed=1))
    write_tsv(str(tmp_path / "ml" / "dev.tsv"), make_multi_label(60, seed=2))
    model_dir = str(ernie_dir / "paddlenlp")
    labels = {"name": "label", "data_type": "int", "reader": {"type": "MultiLabelFieldReader"}}
    config = ernie_config(str(tmp_path / "ml"), model_dir, str(tmp_path / "out"), {"type": "MultiLabelClassification"},
                          "text_classification", [ernie_text("text_a", model_dir), labels], mode=mode, epoch=20,
                          metric="f1")
    config["model"]["optimization"]["learning_rate"] = 0.005
    trainer = build(config, tmp_path)
    assert trainer.readers["train_reader"].fields[1].vocab.tokens == ["0", "1", "2"]
    metrics = trainer.do_train()["dev_reader"]
    # a random-init encoder learns the three labels one after another; predicting every label
    # would score precision ~0.43 (in 20 epochs both modes pass from seeds 0, 5 and 42; in 12 or
    # 16 some seed of each fell short)
    assert metrics["f1"] > 0.7 and metrics["precision"] > 0.8, metrics
    outputs, _ = trainer.collect_outputs("dev_reader", Phase.EVALUATE)
    rows = make_multi_label(60, seed=2)
    results = Predictor(trainer.export_inference(str(tmp_path / "export"))).predict([[t] for t, _ in rows], batch_size=7)
    np.testing.assert_allclose([r["probs"] for r in results], outputs["probs"], atol=1e-5)
    assert [[int(x) for x in r["labels"]] for r in results] == [list(np.flatnonzero(p)) for p in outputs["predictions"]]


@pytest.mark.slow
def test_the_ernie3_example_runs_as_the_readme_says(tmp_path):
    """examples/text_classification_ernie3.json with a model where the README says to put a
    downloaded one (./models/ernie-3.0-mini-zh, PaddleNLP's layout), on review-shaped data."""
    make_ernie_model(str(tmp_path / "models" / "ernie-3.0-mini-zh"), "paddlenlp", max_position_embeddings=512)
    for name, seed, n in (("train", 1, 240), ("dev", 2, 60), ("test", 3, 60)):
        write_tsv(str(tmp_path / "examples" / "data" / "sentiment" / f"{name}.tsv"), make_sentences(n, seed))
    shutil.copy(os.path.join(REPO, "examples", "text_classification_ernie3.json"), tmp_path / "task.json")
    done = run_script(tmp_path, ["--param_path", "task.json", "--set", "trainer.epoch=8",
                                 "--set", "model.optimization.learning_rate=0.002"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "loaded 40 parameters from ./models/ernie-3.0-mini-zh/model_state.pdparams (paddlenlp layout)" in done.stderr
    records = [json.loads(line) for line in open(tmp_path / "output" / "text_classification_ernie3" / "logs" /
                                                 "metrics.jsonl")]
    assert [r for r in records if r["tag"] == "test"][-1]["acc"] > 0.8
    infer = {"model_dir": "./output/text_classification_ernie3/checkpoints/best/inference",
             "predict_reader": {"config": {"data_path": "./examples/data/sentiment/test.tsv"}},
             "output_file": "./output/predictions.txt"}
    done = run_script(tmp_path, ["--param_path", write_config(str(tmp_path / "infer.json"), infer)], "run_infer.py")
    assert done.returncode == 0, done.stderr[-3000:]
    assert len((tmp_path / "output" / "predictions.txt").read_text("utf-8").splitlines()) == 60


@pytest.mark.parametrize("layout", ["paddlenlp", "erniekit"])
def test_one_pretrained_key_fills_the_encoder_weights_and_vocabularies(tmp_path, ernie_dir, layout):
    from wenxin.config.loader import load_config
    config = classification(ernie_dir, tmp_path, "dynamic", layout, max_steps=1)
    model_dir = str(ernie_dir / layout)
    config["model"].pop("encoder_config")
    config["model"]["pretrained"] = model_dir  # the only place the folder is named
    config["trainer"].pop("pre_train_model")
    for reader in config["dataset_reader"].values():
        reader["fields"] = [{k: v for k, v in f.items() if k != "vocab_path"} for f in reader["fields"]]
    path = write_config(str(tmp_path / "task.json"), config)
    loaded = load_config(path)
    assert loaded["model"]["encoder_config"] == model_dir
    assert [e["params_path"] for e in loaded["trainer"]["checkpoints"]["pre_train_model"]] == [model_dir]
    for reader in ("train_reader", "dev_reader"):
        text, label = loaded["dataset_reader"][reader]["fields"]
        assert text["vocab_path"] == os.path.join(model_dir, "vocab.txt") and not label["vocab_path"]
    trainer = build(config, tmp_path)  # the weights load as from the explicit keys
    reference = build(classification(ernie_dir, tmp_path / "explicit", "dynamic", layout, max_steps=1), tmp_path)
    for name, value in reference.engine.model_state_dict().items():
        if name.startswith("ernie."):
            np.testing.assert_array_equal(np.asarray(trainer.engine.model_state_dict()[name]), np.asarray(value))
    config["dataset_reader"]["train_reader"]["fields"][0]["vocab_path"] = str(tmp_path / "own_vocab.txt")
    shutil.copy(os.path.join(model_dir, "vocab.txt"), tmp_path / "own_vocab.txt")
    explicit = load_config(write_config(str(tmp_path / "explicit.json"), config))  # an explicit key wins
    assert explicit["dataset_reader"]["train_reader"]["fields"][0]["vocab_path"] == str(tmp_path / "own_vocab.txt")
    config["model"]["pretrained"] = str(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="model.pretrained: model folder not found"):
        load_config(write_config(str(tmp_path / "missing.json"), config))
