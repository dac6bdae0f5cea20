"""ERNIE-M: the encoder against PaddleNLP 2.8.1's ``ErnieMModel`` from PaddleNLP's and ERNIE-kit's
layouts in both graph modes, and ERNIE-kit's multilingual classification example
(``cls_ernie_m_1.0_base_one_sent.json``) trained, exported and predicted unchanged (fixtures:
``tests/fixtures/make_ernie_m_reference.py``)."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from conftest import REPO, run_script
from ernie_helpers import run_encoder
from wenxin.controller.parameters import load_pretrained_params
from wenxin.models.ernie import ErnieConfig, ErnieEncoder

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "ernie_m")
REFERENCE = np.load(os.path.join(FIXTURES, "encoder_reference.npz"))
TOLERANCE = 1e-5  # as for ERNIE: room for another CPU's BLAS paths


def inputs():
    ids, lengths = REFERENCE["ids"], REFERENCE["lengths"]
    positions = np.broadcast_to(np.arange(ids.shape[1]) + 2, ids.shape).copy()  # ERNIE-M's fields: from 2
    return ids, lengths, positions


def encoder_params(folder: str, config: ErnieConfig) -> dict:
    names = ["ernie." + n for n in ErnieEncoder(config).state_dict()]
    params, _, layout = load_pretrained_params(os.path.join(FIXTURES, folder), names)
    assert layout == folder and set(params) == set(names)  # nothing missing, nothing left over
    return {name[len("ernie."):]: np.asarray(value.numpy() if hasattr(value, "numpy") else value)
            for name, value in params.items()}


@pytest.mark.parametrize("folder", ["paddlenlp", "erniekit"])
@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_encoder_matches_paddlenlps_ernie_m(folder, mode):
    config = ErnieConfig.from_file(os.path.join(FIXTURES, folder))
    assert config.type_vocab_size == 0 and config.layer_norm_eps == 1e-5
    if folder == "paddlenlp":  # PaddleNLP's ErnieMModel: a feed-forward of 4 x hidden, whatever the config says
        assert config.model_type == "ernie_m" and config.intermediate_size == 0
    params = encoder_params(folder, config)
    assert "embeddings.token_type_embeddings.weight" not in params and len(params) == 6 + 16 * 2
    ids, lengths, positions = inputs()
    states, pooled = run_encoder(config, params, mode, ids, lengths, position_ids=positions)
    real = np.arange(ids.shape[1])[None, :] < lengths[:, None]
    np.testing.assert_allclose(states[real], REFERENCE["states"][real], atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(pooled, REFERENCE["pooled"], atol=TOLERANCE, rtol=0)


def test_an_ernie_m_encoder_refuses_an_ernie_text_field():
    from wenxin.common.errors import ConfigError
    from wenxin.models.ernie_task import ErnieTaskModel

    class Probe(ErnieTaskModel):
        def structure(self) -> None:
            self.build_encoder()
            self.ernie_field("text_a", "model.text_field")

    info = {"text_a": {"ernie_inputs": True, "vocab_size": 600, "max_seq_len": 32}}
    with pytest.raises(ConfigError, match="the encoder is ERNIE-M .* is an ErnieTextFieldReader"):
        Probe({"encoder_config": os.path.join(FIXTURES, "paddlenlp")}, info)
    with pytest.raises(ConfigError, match=r"max_seq_len 513 of 'text_a' \(positions from 2\) is more than"):
        Probe({"encoder_config": os.path.join(FIXTURES, "paddlenlp")},
              {"text_a": {**info["text_a"], "max_seq_len": 513, "ernie_m": True, "position_offset": 2}})


def multilingual_sentences(n: int, seed: int):
    """Texts in the fixture's vocabulary with a label: 1 when a text holds 好, 明 or "hello", 0
    when it holds 买, 西 or "world" (never both), amid neutral Chinese, English and digits."""
    import random
    rng = random.Random(seed)
    neutral = list("我们你他是的了在有这个中国人大学时间工作") + [" the ", " model ", " 2024 ", " Paris "]
    rows = []
    for _ in range(n):
        label = rng.randint(0, 1)
        cues = list("好明") + [" hello "] if label else list("买西") + [" world "]
        parts = [rng.choice(neutral) for _ in range(rng.randint(2, 8))]
        for _ in range(rng.randint(1, 2)):
            parts.insert(rng.randint(0, len(parts)), rng.choice(cues))
        rows.append(("".join(parts).strip(), label))
    return rows


def erniekit_ernie_m_folder(tmp_path):
    """text_classification as ERNIE-kit lays it out for its ERNIE-M example: data/dict/
    sentencepiece.bpe.model, data/train_data_one_sent_multilingual, ../../models_hub/
    ernie_m_1.0_base_dir/{params, ernie_m_1.0_base_config.json, erniem.vocab.txt}."""
    root = tmp_path / "tasks" / "text_classification"
    shutil.copytree(os.path.join(REPO, "tasks", "text_classification", "examples"), root / "examples")
    hub = tmp_path / "models_hub" / "ernie_m_1.0_base_dir"
    shutil.copytree(os.path.join(FIXTURES, "erniekit", "params"), hub / "params")
    shutil.copy(os.path.join(FIXTURES, "erniekit", "ernie_m_1.0_base_config.json"), hub / "ernie_m_1.0_base_config.json")
    # the fixture's vocab as ERNIE-kit writes its vocabularies: token<TAB>id
    with open(os.path.join(FIXTURES, "vocab.txt"), encoding="utf-8") as f:
        tokens = [line.rstrip("\n") for line in f]
    (hub / "erniem.vocab.txt").write_text("".join(f"{t}\t{i}\n" for i, t in enumerate(tokens)), encoding="utf-8")
    os.makedirs(root / "data" / "dict")
    shutil.copy(os.path.join(FIXTURES, "sentencepiece.bpe.model"), root / "data" / "dict" / "sentencepiece.bpe.model")
    for folder, seed, n in (("train_data_one_sent_multilingual", 1, 448), ("dev_data_one_sent_multilingual", 2, 60),
                            ("test_data_one_sent_multilingual", 3, 60)):
        os.makedirs(root / "data" / folder)
        rows = multilingual_sentences(n, seed)
        (root / "data" / folder / "part-0").write_text("".join(f"{t}\t{label}\n" for t, label in rows), encoding="utf-8")
    return root


def test_erniekit_ernie_m_classification_runs_unchanged(tmp_path):
    root = erniekit_ernie_m_folder(tmp_path)
    # ERNIE-kit's file fine-tunes a pretrained ERNIE-M (2e-5, 3 epochs); a random-init one needs more
    proc = run_script(root, ["--param_path", "examples/cls_ernie_m_1.0_base_one_sent.json",
                             "--set", "model.optimization.learning_rate=0.002",
                             "--set", "trainer.epoch=8"])  # 14 steps an epoch: 112
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ErnieTextFieldReaderForMultilingual -> ErnieMTextFieldReader" in proc.stderr
    assert "loaded 38 parameters from ../../models_hub/ernie_m_1.0_base_dir/params (erniekit layout)" in proc.stderr
    with open(root / "output" / "cls_ernie_m_1.0_base_one_sent" / "logs" / "metrics.jsonl", encoding="utf-8") as f:
        test = [r for r in map(json.loads, f) if r["tag"] == "test"]
    assert test and test[-1]["acc"] >= 0.85, test
    os.makedirs(root / "data" / "predict_data_one_sent_multilingual")
    texts = [t for t, _ in multilingual_sentences(12, seed=9)] + ["Hello 😀 world！", "ＡＢＣ e\u0301"]
    (root / "data" / "predict_data_one_sent_multilingual" / "part-0").write_text("".join(t + "\n" for t in texts),
                                                                                encoding="utf-8")
    proc = run_script(root, ["--param_path", "examples/cls_ernie_m_1.0_base_one_sent_infer.json"], script="run_infer.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = (root / "output" / "predict_result.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert [line.split("\t")[0] for line in lines] == texts
    assert all(abs(sum(json.loads(line.split("\t")[1])) - 1) < 1e-5 for line in lines)
