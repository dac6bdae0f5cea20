"""The ERNIE encoder against PaddleNLP 2.8.1's ``ErnieModel`` (fixtures written by
``tests/fixtures/make_ernie_reference.py``), in both graph modes and from both checkpoint layouts."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil

import numpy as np
import paddle
import pytest

from wenxin.common.errors import CheckpointError, ConfigError
from wenxin.controller.parameters import load_pretrained_params
from wenxin.translation import pretrained
from ernie_helpers import run_encoder
from wenxin.models.ernie import ErnieConfig, ErnieEncoder

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "ernie")
REFERENCE = np.load(os.path.join(FIXTURES, "encoder_reference.npz"))
# Measured here: the outputs equal the reference exactly (0.0) in both modes, as both run the same
# Paddle kernels in the same order; 1e-5 leaves room for another CPU's BLAS paths.
TOLERANCE = 1e-5


def encoder_params(folder: str) -> dict:
    names = ["ernie." + n for n in ErnieEncoder(ErnieConfig.from_file(os.path.join(FIXTURES, "paddlenlp"))).state_dict()]
    params, _, _ = load_pretrained_params(os.path.join(FIXTURES, folder), names)
    return {name[len("ernie."):]: np.asarray(value.numpy() if hasattr(value, "numpy") else value)
            for name, value in params.items()}


def real_positions() -> np.ndarray:
    """PaddleNLP masks padding by token id, wenxin by length: the outputs agree where tokens are."""
    return np.arange(REFERENCE["ids"].shape[1])[None, :] < REFERENCE["seq_lens"][:, None]


@pytest.mark.parametrize("folder", ["paddlenlp", "paddlenlp_safetensors", "erniekit", "erniekit/params"])
@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_encoder_matches_paddlenlp(folder, mode):
    config = ErnieConfig.from_file(os.path.join(FIXTURES, folder.split("/")[0]))
    assert config.use_task_id and config.type_vocab_size == 4 and config.num_hidden_layers == 3
    if folder.startswith("erniekit"):
        # ERNIE-kit's LayerNorms keep Paddle's default epsilon; PaddleNLP's config says 1e-12
        assert config.layer_norm_eps == 1e-5
        config = dataclasses.replace(config, layer_norm_eps=1e-12)
    params = encoder_params(folder)
    assert len(params) == 8 + 16 * 3  # ERNIE 3.0 shape: token-type and task-type embeddings included
    hidden, pooled = run_encoder(config, params, mode, REFERENCE["ids"], REFERENCE["seq_lens"],
                                 token_type_ids=REFERENCE["token_type_ids"])
    np.testing.assert_allclose(hidden[real_positions()], REFERENCE["hidden"][real_positions()], atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(pooled, REFERENCE["pooled"], atol=TOLERANCE, rtol=0)


def test_both_layouts_hold_the_same_weights():
    nlp, kit = encoder_params("paddlenlp"), encoder_params("erniekit")
    assert set(nlp) == set(kit)
    for name in nlp:
        np.testing.assert_array_equal(nlp[name], kit[name], err_msg=name)


def test_tensor_files_read_as_paddle_reads_them():
    folder = os.path.join(FIXTURES, "erniekit", "params")
    ours = pretrained.read_tensor_folder(folder)
    theirs = paddle.load(folder)
    assert set(ours) == set(theirs)
    for name, value in theirs.items():
        np.testing.assert_array_equal(ours[name], np.asarray(value), err_msg=name)


def test_names_map_both_ways():
    assert pretrained.erniekit_to_paddlenlp("encoder_layer_11_post_ffn_layer_norm_scale") == "encoder.layers.11.norm2.weight"
    assert pretrained.erniekit_to_paddlenlp("encoder_layer_0_multi_head_att_output_fc.b_0") == \
        "encoder.layers.0.self_attn.out_proj.bias"
    assert pretrained.erniekit_to_paddlenlp("cls_out.w_0") is None
    renamed, layout = pretrained.to_wenxin_names({"bert.pooler.dense.weight": 1, "classifier.weight": 2})
    assert layout == "paddlenlp" and renamed == {"ernie.pooler.dense.weight": 1, "classifier.weight": 2}
    renamed, layout = pretrained.to_wenxin_names({"ernie.pooler.dense.weight": 1})
    assert layout == "wenxin" and renamed == {"ernie.pooler.dense.weight": 1}


def test_configs_of_every_source(tmp_path):
    legacy = tmp_path / "model_config.json"
    legacy.write_text(json.dumps({"init_args": [{"vocab_size": 50, "hidden_size": 16, "num_hidden_layers": 1,
                                                 "num_attention_heads": 2, "hidden_act": "relu"}],
                                  "init_class": "ErnieModel"}))
    config = ErnieConfig.from_file(str(tmp_path))
    assert (config.vocab_size, config.hidden_act, config.layer_norm_eps, config.type_vocab_size) == (50, "relu", 1e-5, 2)
    bad = tmp_path / "bad" / "ernie_config.json"
    bad.parent.mkdir()
    for values, message in [({"hidden_size": 16}, "no 'vocab_size'"),
                            ({"vocab_size": 50, "hidden_size": 15, "num_attention_heads": 2}, "not a multiple"),
                            ({"vocab_size": 50, "hidden_size": "16"}, "'hidden_size' must be an integer"),
                            ({"vocab_size": 50, "hidden_act": "swish"}, "hidden_act 'swish'"),
                            ({"vocab_size": 50, "emb_size": 128, "hidden_size": 768}, "factorized")]:
        bad.write_text(json.dumps(values))
        with pytest.raises(ConfigError, match=message) as info:
            ErnieConfig.from_file(str(bad))
        assert str(bad) in str(info.value)
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read the encoder config"):
        ErnieConfig.from_file(str(bad.parent))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no encoder config in this folder"):
        ErnieConfig.from_file(str(tmp_path / "empty"))

def test_damaged_tensor_files_are_named(tmp_path):
    folder = tmp_path / "params"
    shutil.copytree(os.path.join(FIXTURES, "erniekit", "params"), folder)
    target = folder / "pooled_fc.w_0"
    target.write_bytes(target.read_bytes()[:-7])
    with pytest.raises(CheckpointError, match=r"pooled_fc.w_0: not a Paddle tensor file \(shape \[48, 48\]"):
        load_pretrained_params(str(folder), [])
    target.write_bytes(b"\x00" * 3)
    with pytest.raises(CheckpointError, match="pooled_fc.w_0: not a Paddle tensor file"):
        load_pretrained_params(str(folder), [])


def test_a_models_own_names_are_kept(tmp_path):
    """A wenxin model whose layers are called ``encoder.*`` or ``embeddings.*`` loads its own
    params unchanged: names are renamed only when that matches more of the model."""
    path = str(tmp_path / "own.pdparams")
    paddle.save({"encoder.convs.0.weight": np.ones([2, 2], "float32"), "embeddings.weight": np.ones([3], "float32")},
                path)
    params, _, layout = load_pretrained_params(path, ["encoder.convs.0.weight", "embeddings.weight"])
    assert layout == "wenxin" and sorted(params) == ["embeddings.weight", "encoder.convs.0.weight"]
    params, _, layout = load_pretrained_params(path, ["ernie.encoder.convs.0.weight"])
    assert layout == "paddlenlp" and "ernie.encoder.convs.0.weight" in params


def test_erniekit_params_as_one_pickled_file(tmp_path):
    """ERNIE-kit's dynamic-graph trainer also wrote ``params`` as one ``paddle.save`` dict."""
    folder = tmp_path / "ernie_dir"
    folder.mkdir()
    tensors = pretrained.read_tensor_folder(os.path.join(FIXTURES, "erniekit", "params"))
    paddle.save({name: paddle.to_tensor(value) for name, value in tensors.items()}, str(folder / "params"))
    names = ["ernie." + n for n in encoder_params("paddlenlp")]
    params, source, layout = load_pretrained_params(str(folder), names)
    assert layout == "erniekit" and source == str(folder / "params") and set(params) == set(names)
    reference = encoder_params("paddlenlp")
    for name in reference:
        np.testing.assert_array_equal(np.asarray(params["ernie." + name]), reference[name])
