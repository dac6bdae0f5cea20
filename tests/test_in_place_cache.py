"""The decoding cache kept in place on a real export (issue 69, point 2): an ERNIE 4.5 chat model's
``advance`` reads each layer's cached keys and values as inputs of their own and returns only the
new tokens' (``new_cache``); the service's batch keeps every row's cache in one array
(``wenxin.models.kv_slots``), fed as views of it (no copy on wenxin's side: the bytes a step
moves are counted) and never written by the program; rows decoded together get their lone logits (every
strategy, both graph modes); an export of the ``advance`` before this (one ``cache`` array in,
the whole grown one out) still loads and answers the same."""
import json
import os
import shutil
import sys

import numpy as np
import pytest

pytest.importorskip("sentencepiece")

from decoding_helpers import alone, compare, together  # noqa: E402
from test_chat_sft import FOLDER  # noqa: E402
from test_generation_serving import strategies  # noqa: E402
from wenxin.common.task_loader import import_task  # noqa: E402
from wenxin.data.export_bundle import PREPROCESS_FILE  # noqa: E402
from wenxin.data.field_reader import TensorSpec  # noqa: E402
from wenxin.inference.generator import Generator  # noqa: E402
from wenxin.inference.predictor import Predictor  # noqa: E402
from wenxin.model_folders import FolderSettings, export_of_folder  # noqa: E402
from wenxin.models.advance_step import layer_cache_names  # noqa: E402
from wenxin.models.decoding import DecodeSettings, new_search  # noqa: E402
from wenxin.models.lora import adapters_disabled  # noqa: E402

ROWS = [["你好"], ["今天天气很好吗？"], ["请用一句话介绍一下北京。"], ["hi"], ["what is machine learning?"]]


@pytest.fixture(scope="module", params=["dynamic", "static"])
def export(request, tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WENXIN_CACHE", str(tmp_path_factory.mktemp(f"cache-{request.param}")))
        yield export_of_folder(FOLDER, FolderSettings(graph_mode=request.param))


def test_advance_takes_each_layers_cache_and_gives_the_new_tokens_keys_and_values(export):
    with open(os.path.join(export, PREPROCESS_FILE), encoding="utf-8") as f:
        step = json.load(f)["steps"]["advance"]
    names = [i["name"] for i in step["inputs"]]
    layers = sum(1 for name in names if name.startswith("keys_"))
    assert layers > 1 and names == ["tokens", "positions", "visible", *layer_cache_names(layers)]
    assert step["outputs"] == ["logits", "new_cache"]
    predictor = Predictor(export)
    assert predictor.in_place_cache is not None and predictor.in_place_cache.shape[0] == layers


@pytest.mark.parametrize("strategy", ["greedy", "sample", "beam"])
def test_rows_decoded_in_place_get_their_lone_logits(export, strategy):
    predictor = Predictor(export)
    settings = strategies(predictor)[strategy]
    prompts = [predictor.prompt(row) for row in ROWS]
    empty = predictor.in_place_cache
    references = [alone(predictor.run_step, True, prompt, settings) for prompt in prompts]  # the padded cache
    seen = compare(together(predictor.run_step, True, prompts, settings, in_place=empty), references)
    print(f"{strategy}: largest logit difference {seen['largest_difference']:.2e} of the largest logit")


def test_a_step_writes_only_the_new_tokens_and_the_program_never_writes_the_cache(export):
    predictor = Predictor(export)
    decoder = Generator(predictor).decoder()
    settings = DecodeSettings("greedy", max_new_tokens=40, eos_id=None)  # no row ends in the 5 steps
    for key, row in enumerate(ROWS):
        decoder.add(key, predictor.prompt(row), new_search(settings))
    slots = decoder.cohorts[0].slots
    fed = []
    run = decoder.run
    decoder.run = lambda name, inputs: (fed.append(inputs), run(name, inputs))[1]
    for _ in range(5):
        lengths, before = slots.lengths.copy(), slots.store.copy()
        written = slots.bytes_copied
        decoder.step()
        assert all(np.shares_memory(fed[-1][name], slots.store) for name in fed[-1] if name.startswith("keys_"))
        if slots.store.shape == before.shape:  # not grown this step: only the new tokens were written
            assert slots.bytes_copied - written == len(ROWS) * slots.token_bytes
            for row, length in enumerate(lengths):
                assert np.array_equal(slots.store[:, :, row, :, :length], before[:, :, row, :, :length])
                assert not slots.store[:, :, row, :, length + 1:].any()  # nothing past its new token


def single_cache_advance(monkeypatch):
    """The chat model's ``advance`` as exports held it before the cache stayed in place: one
    ``cache`` array ``[layers, 2, R, KV, N, D]`` in, the whole grown one out."""
    import paddle

    from wenxin.models.ernie45 import advance_step

    def step_specs(self):
        c = self.config
        cache = TensorSpec("cache", [c.num_hidden_layers, 2, -1, c.num_key_value_heads, -1, c.head_dim], "float32")
        return {"advance": ([TensorSpec("tokens", [-1, -1], "int64"), TensorSpec("positions", [-1, -1], "int64"),
                             cache, TensorSpec("visible", [-1, -1, -1], "float32")], ["logits", "cache"])}

    def advance(self, tokens, positions, cache, visible):
        layers = self.config.num_hidden_layers
        with adapters_disabled(self.model):
            logits, new = advance_step(self.model, self.output_weight(), tokens, positions, visible,
                                       [(cache[i, 0], cache[i, 1]) for i in range(layers)])
        return logits, paddle.concat([cache, new], axis=4)

    chat_model = sys.modules[f"{import_task('chat')}.models"].Ernie45ChatModel
    monkeypatch.setattr(chat_model, "step_specs", step_specs)
    monkeypatch.setattr(chat_model, "advance", advance)


def test_an_export_of_the_single_cache_advance_still_loads_and_answers_the_same(export, tmp_path):
    older = str(tmp_path / "older")
    with pytest.MonkeyPatch.context() as patch:
        single_cache_advance(patch)
        patch.setenv("WENXIN_CACHE", str(tmp_path / "older-cache"))
        shutil.copytree(export_of_folder(FOLDER, FolderSettings(graph_mode="dynamic")), older)
    old = Predictor(older)
    assert old.in_place_cache is None and Generator(old).decoder().in_place is None
    assert old.predict(ROWS) == Predictor(export).predict(ROWS)
