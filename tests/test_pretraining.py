"""Masked-language-model pretraining and fine-tuning from its encoder through ``pre_train_model``
with a prefix map and a load report."""
from __future__ import annotations

import os

import numpy as np
import paddle
import pytest

from conftest import build, make_sentences, write_tsv
from wenxin.common.errors import ConfigError
from tasks.pretraining.models import IGNORED

ENCODER = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "max_position": 64}


@pytest.fixture
def text_dir(tmp_path):
    folder = str(tmp_path / "text")
    write_tsv(os.path.join(folder, "raw.txt"), [(t,) for t, _ in make_sentences(300, 5)])
    write_tsv(os.path.join(folder, "train.tsv"), make_sentences(200, 1))
    write_tsv(os.path.join(folder, "dev.tsv"), make_sentences(60, 2))
    return folder


def pretrain_config(folder, output, mode="dynamic"):
    def reader(shuffle, batch_size):
        return {"fields": [{"name": "text_a", "reader": {"type": "TextFieldReader"}, "max_seq_len": 32,
                            "special_tokens": ["[MASK]"]}],
                "config": {"data_path": os.path.join(folder, "raw.txt"), "shuffle": shuffle, "batch_size": batch_size}}
    return {"task": "pretraining",
            "dataset_reader": {"train_reader": reader(True, 16), "dev_reader": reader(False, 64)},
            "model": {"type": "ErnieMaskedLM", "is_dygraph": int(mode == "dynamic"), "encoder": ENCODER,
                      "optimization": {"learning_rate": 0.005}},
            "trainer": {"type": "CustomDynamicTrainer" if mode == "dynamic" else "CustomStaticTrainer",
                        "epoch": 2, "is_eval_dev": 1, "metric": "mlm_acc", "output_path": output,
                        "visualdl": False, "train_log_step": 100}}


def finetune_config(folder, output, vocab, pretrained=None):
    def reader(name, shuffle):
        return {"fields": [{"name": "text_a", "reader": {"type": "TextFieldReader"}, "max_seq_len": 32,
                            "vocab_path": vocab},
                           {"name": "label", "reader": {"type": "LabelFieldReader"}}],
                "config": {"data_path": os.path.join(folder, f"{name}.tsv"), "shuffle": shuffle, "batch_size": 16}}
    return {"task": "text_classification",
            "dataset_reader": {"train_reader": reader("train", True), "dev_reader": reader("dev", False)},
            "model": {"type": "TransformerClassification", "encoder": {"transformer": ENCODER}, "hidden_size": 32,
                      "optimization": {"learning_rate": 0.002}},
            "trainer": {"epoch": 1, "is_eval_dev": 1, "output_path": output, "visualdl": False,
                        "pre_train_model": pretrained or []}}


def test_masking_follows_bert_rates_and_skips_padding_and_specials(tmp_path, text_dir):
    model = build(pretrain_config(text_dir, str(tmp_path / "out")), tmp_path).model
    paddle.seed(0)
    ids = paddle.randint(model.num_special, model.vocab_size, [400, 32], dtype="int64")
    lengths = paddle.randint(1, 33, [400], dtype="int64")
    ids[:, 0] = 0  # a special token ([PAD]) at a real position is never chosen
    masked, labels = model._mask(ids, lengths)
    ids, masked, labels, lengths = ids.numpy(), masked.numpy(), labels.numpy(), lengths.numpy()
    real = np.arange(32)[None] < lengths[:, None]
    chosen = labels != IGNORED
    assert not chosen[~real].any() and not chosen[:, 0].any()
    eligible = real.copy()
    eligible[:, 0] = False
    assert chosen.sum() / eligible.sum() == pytest.approx(0.15, abs=0.015)
    np.testing.assert_array_equal(labels[chosen], ids[chosen])
    as_mask = (masked == model.mask_id) & chosen
    kept = (masked == ids) & chosen
    assert as_mask.sum() / chosen.sum() == pytest.approx(0.8, abs=0.04)
    assert kept.sum() / chosen.sum() == pytest.approx(0.1 + 0.1 / model.vocab_size, abs=0.04)
    np.testing.assert_array_equal(masked[~chosen], ids[~chosen])  # nothing else changes


@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_pretraining_learns_something(tmp_path, text_dir, mode):
    metrics = build(pretrain_config(text_dir, str(tmp_path / "out"), mode), tmp_path).do_train()["dev_reader"]
    # the synthetic text is random characters: above chance (1 / vocab) and a falling loss is all it can show
    assert metrics["mlm_acc"] > 2.0 / 40 and np.isfinite(metrics["loss"]) and metrics["ppl"] < 35, metrics


def test_finetuning_loads_the_pretrained_encoder_with_a_prefix_map(tmp_path, text_dir, capsys):
    pre = build(pretrain_config(text_dir, str(tmp_path / "pre")), tmp_path)
    pre.do_train()
    vocab = str(tmp_path / "pre" / "vocab" / "text_a.txt")
    pretrained = [{"params_path": str(tmp_path / "pre" / "checkpoints" / "best"),
                   "prefix_map": {"ernie.": "encoder.transformer."}}]
    capsys.readouterr()
    tuned = build(finetune_config(text_dir, str(tmp_path / "ft"), vocab, pretrained), tmp_path)
    report = capsys.readouterr().out  # the wenxin logger writes to stdout
    assert "loaded 22 parameters" in report
    assert "missing in file (4, keep their init): fc.weight, fc.bias, output_layer.weight, output_layer.bias" in report
    assert "unexpected in file (5, ignored): mlm_bias" in report
    from wenxin.controller.checkpoint import MODEL_FILE, load_arrays
    source = load_arrays(str(tmp_path / "pre" / "checkpoints" / "best" / MODEL_FILE), "best")  # what was loaded
    for name, value in tuned.model.state_dict().items():
        if name.startswith("encoder.transformer."):
            np.testing.assert_array_equal(value.numpy(), source["ernie." + name[len("encoder.transformer."):]])
    assert tuned.do_train()["dev_reader"]["acc"] > 0.5


def test_finetuning_without_a_prefix_map_loads_nothing_and_says_so(tmp_path, text_dir):
    build(pretrain_config(text_dir, str(tmp_path / "pre")), tmp_path).do_train()
    vocab = str(tmp_path / "pre" / "vocab" / "text_a.txt")
    pretrained = [{"params_path": str(tmp_path / "pre" / "checkpoints" / "best")}]
    with pytest.raises(Exception, match="no parameter matches the model"):
        build(finetune_config(text_dir, str(tmp_path / "ft"), vocab, pretrained), tmp_path)


def test_mask_token_must_be_in_the_vocab(tmp_path, text_dir):
    config = pretrain_config(text_dir, str(tmp_path / "out"))
    config["dataset_reader"]["train_reader"]["fields"][0]["special_tokens"] = []
    with pytest.raises(ConfigError, match=r"model.mask_token: '\[MASK\]' is not in the vocab.*special_tokens"):
        build(config, tmp_path)


def test_pretrained_encoder_exports_sentence_vectors(tmp_path, text_dir):
    from wenxin.inference.predictor import Predictor
    trainer = build(pretrain_config(text_dir, str(tmp_path / "pre"), "static"), tmp_path)
    trainer.do_train()
    predictor = Predictor(trainer.export_inference(str(tmp_path / "export")))
    results = predictor.predict([["这本书很好"], ["质量差"]])
    assert [len(r["pooled"]) for r in results] == [ENCODER["hidden_size"]] * 2
    assert predictor.result_format.line(results[0]).startswith('{"pooled": [')
