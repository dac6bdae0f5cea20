"""An ERNIE-Gen export holds one step program, ``infill``, so a serving process loads its weights
once (issue 69, point 1; ``prefill`` and ``extend`` were a Paddle predictor and a copy of the
weights each), in either graph mode; its Predictor gives the logits, caches and answers of the
two programs exports held before, which still load and answer the same. ``infill`` reads each
layer's cache where the batch keeps it (point 2: no cache copied at a step, the bytes counted),
and prefills several sources in one call (point 3), each row getting its lone outputs."""
import json
import os
import shutil
import sys

import numpy as np
import paddle
import pytest

from conftest import build
from decoding_helpers import alone, compare, together
from test_generation_serving import (endless, gate, read_until, service_of, stream_request, strategies,  # noqa: F401
                                     wait_ready)
from test_text_generation import LEARN, config_for, gen_data, post  # noqa: F401 (the data fixture)
from wenxin.common.errors import ExportError, InferenceError
from wenxin.common.task_loader import import_task
from wenxin.data.export_bundle import PREPROCESS_FILE, SHARED_PARAMS, seal_export
from wenxin.data.field_reader import TensorSpec
from wenxin.inference.generator import Generator
from wenxin.inference.predictor import Predictor
from wenxin.models.decoding import DecodeSettings, new_search


def two_step_functions(patch):
    """ERNIE-Gen's step functions as exports held them before ``infill``: ``prefill`` (a source
    -> the first logits, the cache of source and ``[CLS]``, the first target position) and
    ``extend`` (a token a row), here computed by ``infill`` (the export's format is what is old)."""
    def step_specs(self):
        config = self.ernie.config
        heads = config.num_attention_heads
        cache = TensorSpec("cache", [config.num_hidden_layers, 2, -1, heads, -1, config.hidden_size // heads],
                           "float32")
        return {"prefill": ([TensorSpec("src_ids", [1, -1], "int64"), TensorSpec("src_types", [1, -1], "int64")],
                            ["logits", "cache", "position"]),
                "extend": ([TensorSpec("tokens", [-1], "int64"), TensorSpec("positions", [-1], "int64"), cache,
                            TensorSpec("visible", [-1, -1], "float32")], ["logits", "cache"])}

    def prefill(self, src_ids, src_types):
        config = self.ernie.config
        heads = config.num_attention_heads
        length = paddle.shape(src_ids)[1]
        tokens = paddle.concat([src_ids, paddle.full([1, 1], self.special["cls_id"], "int64")], axis=1)
        types = paddle.concat([src_types, paddle.full([1, 1], self.model_params["tgt_type_id"], "int64")], axis=1)
        positions = paddle.arange(length + 1, dtype="int64").unsqueeze(0)  # [1, S + 1]
        columns = paddle.arange(length + 2, dtype="int64").unsqueeze(0)  # a hidden column, the source, [CLS]
        rows = paddle.arange(length + 1, dtype="int64").unsqueeze(1)
        visible = ((columns >= 1) & ((columns <= length) | (rows == length))).astype("float32").unsqueeze(0)
        hidden = paddle.zeros([1, heads, 1, config.hidden_size // heads], "float32")  # each layer's keys, values
        logits, cache = self.infill(tokens, types, positions, visible, *[hidden] * (2 * config.num_hidden_layers))
        return logits, cache, paddle.full([1], 1, "int64") + length.astype("int64")

    def extend(self, tokens, positions, cache, visible):
        rows = tokens.unsqueeze(1)
        past = [cache[layer, kind] for layer in range(self.ernie.config.num_hidden_layers) for kind in (0, 1)]
        logits, new = self.infill(rows, paddle.full_like(rows, self.model_params["tgt_type_id"]),
                                  positions.unsqueeze(1), visible.unsqueeze(1), *past)
        return logits, paddle.concat([cache, new], axis=4)

    model = sys.modules[f"{import_task('text_generation')}.models"].ErnieInfillingGeneration
    patch.setattr(model, "step_specs", step_specs)
    patch.delattr(model, "step_notes")
    for function in (prefill, extend):
        patch.setattr(model, function.__name__, function, raising=False)


@pytest.fixture(scope="module", params=["dynamic", "static"])
def exports(request, tmp_path_factory, gen_data):  # noqa: F811
    """``(infill export, two-program export)`` of one trained model in one graph mode."""
    tmp_path = tmp_path_factory.mktemp(request.param)
    config = config_for(gen_data, tmp_path / "out", request.param, decoding="greedy", **LEARN)
    config["trainer"].update(max_steps=40, is_eval_dev=0)
    trainer = build(config, tmp_path)
    trainer.do_train()
    current = trainer.export_inference(str(tmp_path / "current"))
    weights = str(tmp_path / "trained.pdparams")
    paddle.save({k: np.asarray(v) for k, v in trainer.engine.model_state_dict().items()}, weights)
    with pytest.MonkeyPatch.context() as patch:
        two_step_functions(patch)
        config["trainer"].update(load_parameters=weights, output_path=str(tmp_path / "older-out"))
        older = build(config, tmp_path).export_inference(str(tmp_path / "older"))
    return current, older


def rows_of(gen_data):  # noqa: F811
    lines = (gen_data / "dev.tsv").read_text("utf-8").splitlines()[1:]
    return [line.split("\t")[:2] for line in lines[:8]]


def test_an_erniegen_export_holds_one_program_and_gives_the_two_programs_numbers(exports, gen_data):  # noqa: F811
    current, older = exports
    params = sorted(name for name in os.listdir(current) if name.endswith(".pdiparams"))
    assert params == ["infill.pdiparams"]  # one program, one copy of the weights
    with open(os.path.join(current, PREPROCESS_FILE), encoding="utf-8") as f:
        steps = json.load(f)["steps"]
    assert sorted(steps) == ["infill"] and set(steps["infill"]["target_start"]) == {"id", "type", "continuous"}
    new, old = Predictor(current), Predictor(older)
    assert sorted(new.step_engines) == ["infill"]  # a serving process loads the weights once
    # the encoder's oneDNN rule (from 8 rows) is its inference graph's: a step program runs without
    # oneDNN under auto, measured slower at every row count (docs/serving.md)
    for engine in (*new.step_engines.values(), *old.step_engines.values()):
        assert not engine.uses_onednn(64) and engine.choices() == {"onednn": "off (a generation step program)"}
    assert sorted(old.step_engines) == ["extend", "prefill"]
    assert os.listdir(older).count(SHARED_PARAMS) == 1

    def same(a, b):
        assert sorted(a) == sorted(b)
        for name in a:
            assert np.asarray(a[name]).shape == np.asarray(b[name]).shape, name
            np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-5, err_msg=name)

    prompts = [new.prompt(row) for row in rows_of(gen_data)[:2]]
    first = [new.run_step("prefill", prompt) for prompt in prompts]
    for prompt, out in zip(prompts, first):
        same(out, old.run_step("prefill", prompt))
    # two rows, the shorter one's cache padded at its start: extend hides the padding
    short, long_ = sorted(first, key=lambda out: out["cache"].shape[4])
    pad = long_["cache"].shape[4] - short["cache"].shape[4]
    cache = np.concatenate([long_["cache"], np.pad(short["cache"], [(0, 0)] * 4 + [(pad, 0), (0, 0)])], axis=2)
    visible = np.ones((2, cache.shape[4] + 1), dtype=np.float32)
    visible[1, :pad] = 0
    step = {"tokens": np.asarray([4, 6]), "positions": np.concatenate([long_["position"], short["position"]]),
            "cache": cache, "visible": visible}
    same(new.run_step("extend", step), old.run_step("extend", step))
    rows = rows_of(gen_data)
    answers = new.predict(rows, batch_size=3)
    assert answers == old.predict(rows, batch_size=3) and any(answer["text"] for answer in answers)


def test_an_infill_export_without_its_target_start_is_one_clear_error(exports, tmp_path):
    current, _ = exports
    broken = str(tmp_path / "broken")
    shutil.copytree(current, broken)
    with open(os.path.join(broken, PREPROCESS_FILE), encoding="utf-8") as f:
        meta = json.load(f)
    del meta["steps"]["infill"]["target_start"]
    with open(os.path.join(broken, PREPROCESS_FILE), "w", encoding="utf-8") as f:
        json.dump(meta, f)
    seal_export(broken)
    with pytest.raises((ExportError, InferenceError), match=r"steps\.infill\.target_start: missing"):
        Predictor(broken)


def test_several_sources_prefilled_in_one_call_get_their_lone_outputs(exports, gen_data):  # noqa: F811
    """``prefill_whole`` runs sources of similar lengths as rows of one ``infill`` call (each row's
    padding before its source): each gets the logits, cache and position of its lone prefill;
    ``Predictor.predict`` answers the same with the batch as one row at a time."""
    from wenxin.models.batch_prefill import prefill_whole
    current, _ = exports
    predictor = Predictor(current)
    assert predictor.steps["prefill_rows"]  # the export's one program runs it
    prompts = [predictor.prompt(row) for row in rows_of(gen_data)]
    assert len({prompt["src_ids"].shape[1] for prompt in prompts}) > 2  # of different lengths
    calls = []

    def run(name, inputs):
        calls.append((name, len(inputs["src_ids"]) if "src_ids" in inputs else 0))
        return predictor.run_step(name, inputs)

    together = prefill_whole(run, prompts, True)
    assert any(name == "prefill_rows" and rows > 1 for name, rows in calls)
    assert sum(rows for _, rows in calls) == len(prompts) and len(calls) < len(prompts)
    for prompt, outputs in zip(prompts, together):
        alone = predictor.run_step("prefill", prompt)
        assert outputs["cache"].shape == alone["cache"].shape and outputs["cache"].flags.c_contiguous
        for name in ("logits", "cache", "position"):
            np.testing.assert_allclose(outputs[name], alone[name], rtol=1e-5, atol=1e-5, err_msg=name)
    rows = rows_of(gen_data)
    assert predictor.predict(rows, batch_size=8) == predictor.predict(rows, batch_size=1)


@pytest.mark.parametrize("together_fails", [False, True])
def test_a_service_turn_prefills_its_newcomers_sources_in_one_call(endless, gate, monkeypatch,  # noqa: F811
                                                                    together_fails):
    """Requests that wait while a step runs are let in at the next turn together: their sources
    are prefilled in one call, and each answer is the one it gets alone. Where that call fails,
    each source is prefilled alone instead (only a bad one fails its request)."""
    rows = [["a b", "c d"], ["e f", "g h"], ["b a", "d c"]]  # sources of one length: one call
    if together_fails:
        gated = Predictor.run_step

        def failing(self, name, inputs):
            if name == "prefill_rows":
                raise RuntimeError("a call of several rows failed")
            return gated(self, name, inputs)
        monkeypatch.setattr(Predictor, "run_step", failing)
    service = service_of(endless, max_rows=8, max_new_tokens=60)
    try:
        port = service.port
        wait_ready(port)
        expected = [json.loads(post(port, "/generate", {"row": row, "max_new_tokens": 4})[2])["tokens"]
                    for row in rows]
        gate.calls.clear()
        gate.close()
        running = stream_request(port, {"row": ["e", "f g"], "max_new_tokens": 30})
        read_until(running, b"event: token")  # its prefill's token; its first step waits at the gate
        asking = [stream_request(port, {"row": row, "max_new_tokens": 4}) for row in rows]
        for sock in asking:
            read_until(sock, b"200 OK")  # queued
        gate.open()
        for sock, tokens in zip(asking, expected):
            text = read_until(sock, b"event: done").decode()
            assert json.loads(text.split("event: done\ndata: ")[1].split("\n")[0])["tokens"] == tokens
            sock.close()
        prefills = [name for name, _ in gate.calls if name.startswith("prefill")]
        # the running request's alone, then the three in one (or, that call failing, each alone)
        assert prefills == (["prefill"] * 4 if together_fails else ["prefill", "prefill_rows"])
        running.close()
    finally:
        gate.open()
        service.stop()


@pytest.mark.parametrize("strategy", ["greedy", "sample", "beam"])
def test_rows_decoded_in_place_get_the_lone_logits_of_the_two_program_export(exports, gen_data, strategy):  # noqa: F811
    """The batch keeps ERNIE-Gen's rows in place (``KVSlots``; ``infill`` reads each layer's cache
    and returns the new keys and values): rows joining and leaving get, step by step, the logits
    and tokens each gets alone from the older export's ``prefill`` and ``extend``."""
    current, older = exports
    new, old = Predictor(current), Predictor(older)
    assert new.in_place_cache is not None and old.in_place_cache is None
    settings = strategies(new)[strategy]
    prompts = [new.prompt(row) for row in rows_of(gen_data)[:5]]
    references = [alone(old.run_step, True, prompt, settings) for prompt in prompts]
    compare(together(new.run_step, True, prompts, settings, in_place=new.in_place_cache), references)


def test_a_decoding_step_copies_no_cache(exports, gen_data):  # noqa: F811
    """Each step feeds every layer's cache as views of the batch's one array and writes only the
    new token's keys and values (the bytes moved, counted); the program never writes the cache."""
    current, _ = exports
    predictor = Predictor(current)
    decoder = Generator(predictor).decoder()
    settings = DecodeSettings("greedy", max_new_tokens=40, eos_id=None)  # no row ends in the 5 steps
    rows = rows_of(gen_data)[:4]
    for key, row in enumerate(rows):
        decoder.add(key, predictor.prompt(row), new_search(settings))
    slots = decoder.cohorts[0].slots
    fed = []
    run = decoder.run
    decoder.run = lambda name, inputs: (fed.append((name, inputs)), run(name, inputs))[1]
    for _ in range(5):
        lengths, before = slots.lengths.copy(), slots.store.copy()
        written = slots.bytes_copied
        decoder.step()
        name, inputs = fed[-1]
        assert name == "advance" and "cache" not in inputs
        assert all(np.shares_memory(inputs[key], slots.store) for key in inputs if key.startswith(("keys_", "values_")))
        if slots.store.shape == before.shape:  # not grown this step: only the new tokens were written
            assert slots.bytes_copied - written == len(rows) * slots.token_bytes
            for row, length in enumerate(lengths):
                assert np.array_equal(slots.store[:, :, row, :, :length], before[:, :, row, :, :length])


@pytest.fixture(scope="module")
def converted(exports, tmp_path_factory):
    """The infill export converted by ``wenxin export --format onnx``: ``infill.onnx`` and its int8 copy."""
    pytest.importorskip("paddle2onnx")
    pytest.importorskip("onnxruntime")
    from wenxin.inference.onnx_export import export_onnx
    folder = str(tmp_path_factory.mktemp("onnx") / "export")
    shutil.copytree(exports[0], folder)
    assert export_onnx(folder, {}) == os.path.join(folder, "infill.onnx")
    return folder


def test_an_erniegen_export_converts_to_onnx_and_auto_serves_paddles_answers(converted, gen_data):  # noqa: F811
    from wenxin.data.export_bundle import verify_export
    assert {"infill.onnx", "infill.int8.onnx"} <= set(os.listdir(converted))
    verify_export(converted)  # the manifest covers both
    onnx, paddle_ = Predictor(converted), Predictor(converted, backend="paddle")
    assert onnx.backend == "onnxruntime" and sorted(onnx.step_engines) == ["infill"]
    int8 = Predictor(converted, backend="onnxruntime-int8")
    for row in rows_of(gen_data)[:3]:
        prompt = onnx.prompt(row)
        got, expected, quantized = (p.run_step("prefill", prompt) for p in (onnx, paddle_, int8))
        scale = np.abs(expected["logits"]).max()
        np.testing.assert_allclose(got["logits"], expected["logits"], rtol=0, atol=1e-5 * scale)
        np.testing.assert_allclose(got["cache"], expected["cache"], rtol=0, atol=1e-5)
        assert np.abs(quantized["logits"] - expected["logits"]).max() < 0.05 * scale  # int8: near float32's
    rows = rows_of(gen_data)
    answers = onnx.predict(rows, batch_size=3)
    assert answers == paddle_.predict(rows, batch_size=3) and any(answer["text"] for answer in answers)


def test_erniegens_int8_copy_made_a_weight_at_a_time_gives_the_exports_outputs_to_the_bit(converted, tmp_path):
    """``onnx_quantize_groups`` on ERNIE-Gen's program (biases, position and type tables): each weight
    handed to ONNX Runtime's quantizer alone makes the program it makes of them all at once."""
    from wenxin.inference.onnx_backend import open_session
    from wenxin.inference.onnx_export import infill_programs
    from wenxin.inference.onnx_quantize import quantize
    target = str(tmp_path / "infill.int8.onnx")
    quantize(os.path.join(converted, "infill.onnx"), target, group_bytes=0)
    ours, export = (open_session(path) for path in (target, os.path.join(converted, "infill.int8.onnx")))
    graph = next(os.path.join(converted, name) for name in os.listdir(converted) if name.startswith("infill.")
                 and name.endswith((".json", ".pdmodel")))
    for batch in infill_programs(converted, graph, "")[0].batches:
        feeds = {i.name: batch[i.name.split("__")[-1]] for i in ours.get_inputs()}
        for a, b in zip(ours.run(None, feeds), export.run(None, feeds)):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("backend", ["onnxruntime", "onnxruntime-int8"])
@pytest.mark.parametrize("strategy", ["greedy", "sample", "beam"])
def test_erniegen_rows_decoded_together_on_onnx_runtime_get_their_lone_logits(converted, gen_data, backend,  # noqa: F811
                                                                                strategy):
    """On ONNX Runtime too, float32 and int8 (each token's activations quantized with its own scale,
    each product's bias added apart from the fused product: ``onnx_quantize.biases_apart``), rows
    joining and leaving a batch whose caches stay in place get, step by step, their lone logits."""
    predictor = Predictor(converted, backend=backend)
    assert predictor.backend == backend and predictor.in_place_cache is not None
    settings = strategies(predictor)[strategy]
    prompts = [predictor.prompt(row) for row in rows_of(gen_data)[:5]]
    references = [alone(predictor.run_step, True, prompt, settings) for prompt in prompts]
    compare(together(predictor.run_step, True, prompts, settings, in_place=predictor.in_place_cache), references)
