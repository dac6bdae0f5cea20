"""A generation export holds its weights once, on disk and in a serving process (issue 69, point 1):
an ERNIE 4.5 chat model exports one step program for Paddle, ``advance`` (prefill, a prompt's next
chunk and a decoding step), beside ``advance_pair`` (two groups in one step, which only the int8
ONNX engine loads) on one parameters file, so the predictor loads one program and one copy of the
weights, and its answers
and logits are those of the three programs exports held before (``prefill``, ``prefill_chunk``,
``extend``). Older exports, with a parameters file a step or one shared ``steps.pdiparams``,
still load and answer the same."""
import json
import os
import shutil
import sys

import numpy as np
import paddle
import pytest

pytest.importorskip("sentencepiece")

from test_chat_sft import FOLDER  # noqa: E402
from wenxin.common.task_loader import import_task  # noqa: E402
from wenxin.data.export_bundle import PREPROCESS_FILE, SHARED_PARAMS, seal_export  # noqa: E402
from wenxin.data.field_reader import TensorSpec  # noqa: E402
from wenxin.inference.backends import EngineOptions  # noqa: E402
from wenxin.inference.paddle_backend import PaddleBackend  # noqa: E402
from wenxin.inference.predictor import Predictor  # noqa: E402
from wenxin.model_folders import FolderSettings, export_of_folder  # noqa: E402
from wenxin.models.ernie45 import extend_step, prefill_step  # noqa: E402
from wenxin.models.lora import adapters_disabled  # noqa: E402

ROWS = [["你好"], ["今天天气很好吗？"], ["请用一句话介绍一下北京。"]]


def three_step_functions(monkeypatch):
    """The chat model's step functions as exports held them before ``advance``: three programs."""
    def step_specs(self):
        c = self.config
        cache = TensorSpec("cache", [c.num_hidden_layers, 2, -1, c.num_key_value_heads, -1, c.head_dim], "float32")
        return {"prefill": ([TensorSpec("ids", [1, -1], "int64")], ["logits", "cache", "position"]),
                "prefill_chunk": ([TensorSpec("ids", [1, -1], "int64"), cache], ["logits", "cache", "position"]),
                "extend": ([TensorSpec("tokens", [-1], "int64"), TensorSpec("positions", [-1], "int64"), cache,
                            TensorSpec("visible", [-1, -1], "float32")], ["logits", "cache"])}

    def prefill(self, ids):
        with adapters_disabled(self.model):
            return prefill_step(self.model, self.output_weight(), ids)

    def prefill_chunk(self, ids, cache):
        with adapters_disabled(self.model):
            return prefill_step(self.model, self.output_weight(), ids, cache)

    def extend(self, tokens, positions, cache, visible):
        with adapters_disabled(self.model):
            return extend_step(self.model, self.output_weight(), tokens, positions, cache, visible)

    chat_model = sys.modules[f"{import_task('chat')}.models"].Ernie45ChatModel  # as the folder's trainer builds it
    monkeypatch.setattr(chat_model, "step_specs", step_specs)
    for function in (prefill, prefill_chunk, extend):
        monkeypatch.setattr(chat_model, function.__name__, function, raising=False)


@pytest.fixture(params=["dynamic", "static"])
def exports(request, tmp_path, monkeypatch):
    """``(advance export, three-step export)`` of the fixture folder in one graph mode."""
    monkeypatch.setenv("WENXIN_CACHE", str(tmp_path / "cache"))
    current = export_of_folder(FOLDER, FolderSettings(graph_mode=request.param))
    older = str(tmp_path / "older")
    with monkeypatch.context() as patch:
        three_step_functions(patch)
        patch.setenv("WENXIN_CACHE", str(tmp_path / "older-cache"))
        shutil.copytree(export_of_folder(FOLDER, FolderSettings(graph_mode=request.param)), older)
    return current, older


def test_an_export_holds_one_step_program_and_the_predictor_loads_it_once(exports):
    current, _ = exports
    programs = sorted(name for name in os.listdir(current) if name.endswith((".pdiparams", ".json", ".pdmodel"))
                      and name != PREPROCESS_FILE and not name.startswith("manifest"))
    # advance and advance_pair (every engine's program) read one parameters file: the weights once
    assert [name for name in programs if name.endswith(".pdiparams")] == ["steps.pdiparams"]
    with open(os.path.join(current, PREPROCESS_FILE), encoding="utf-8") as f:
        steps = json.load(f)["steps"]
    assert sorted(steps) == ["advance", "advance_pair"]
    assert {entry["params"] for entry in steps.values()} == {"steps.pdiparams"}
    assert steps["advance_pair"]["empty_second"] is True  # its second group may have no rows
    predictor = Predictor(current)
    from wenxin.inference.paddle_backend import runs_empty_groups
    # Paddle loads the pair alone (an older Paddle, which fails on a group of no rows, advance): the weights once
    assert sorted(predictor.step_engines) == (["advance_pair"] if runs_empty_groups() else ["advance"])
    assert {"prefill", "prefill_chunk", "extend"} <= set(predictor.steps)  # run as advance


def test_advance_gives_the_three_programs_numbers(exports):
    current, older = exports
    new, old = Predictor(current), Predictor(older)
    # prefill runs as prefill_chunk after an empty cache (Paddle 3.0 fails on one: it loads prefill)
    chunk = PaddleBackend.runs_empty_caches()
    assert sorted(old.step_engines) == (["extend", "prefill_chunk"] if chunk else ["extend", "prefill", "prefill_chunk"])
    ids = np.asarray([[5, 9, 17, 3, 42, 8, 11]], dtype="int64")

    def same(a, b):
        assert sorted(a) == sorted(b)
        for name in a:
            assert a[name].shape == b[name].shape, name
            np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-5, err_msg=name)

    first = new.run_step("prefill", {"ids": ids[:, :4]})
    same(first, old.run_step("prefill", {"ids": ids[:, :4]}))
    chunk = {"ids": ids[:, 4:], "cache": first["cache"]}
    same(new.run_step("prefill_chunk", chunk), old.run_step("prefill_chunk", chunk))
    whole = new.run_step("prefill", {"ids": ids})
    # two rows, the first with a column of padding: extend hides it
    cache = np.concatenate([whole["cache"], np.pad(first["cache"], [(0, 0)] * 4 + [(3, 0), (0, 0)])], axis=2)
    visible = np.ones((2, 8), dtype=np.float32)
    visible[1, :3] = 0
    step = {"tokens": np.asarray([4, 6]), "positions": np.asarray([7, 4]), "cache": cache, "visible": visible}
    same(new.run_step("extend", step), old.run_step("extend", step))
    assert new.predict(ROWS) == old.predict(ROWS)


def test_a_three_program_export_in_either_older_layout_loads_and_answers_the_same(exports, tmp_path):
    current, shared = exports
    with open(os.path.join(shared, PREPROCESS_FILE), encoding="utf-8") as f:
        meta = json.load(f)
    assert os.listdir(shared).count(SHARED_PARAMS) == 1  # the layout of exports before advance
    own = str(tmp_path / "own")  # and of those before the steps shared one parameters file
    shutil.copytree(shared, own)
    for name, entry in meta["steps"].items():
        shutil.copyfile(os.path.join(own, SHARED_PARAMS), os.path.join(own, f"{name}.pdiparams"))
        entry.pop("params")
    os.remove(os.path.join(own, SHARED_PARAMS))
    with open(os.path.join(own, PREPROCESS_FILE), "w", encoding="utf-8") as f:
        json.dump(meta, f)
    seal_export(own)
    answers = Predictor(current).predict(ROWS)
    assert Predictor(shared).predict(ROWS) == answers
    assert Predictor(own).predict(ROWS) == answers
    # the older export's prefill program itself gives what its predictor gives through the chunk step
    program = PaddleBackend(own, meta, EngineOptions(False, 1, {"program": "prefill"}))
    ids = np.asarray([[5, 9, 17, 3]], dtype="int64")
    direct = dict(zip(meta["steps"]["prefill"]["outputs"], program.run({name: ids for name in program.input_names})))
    through_chunk = Predictor(own).run_step("prefill", {"ids": ids})
    for name, value in direct.items():
        assert np.array_equal(through_chunk[name], value), name


def test_advance_runs_several_rows_of_several_tokens_as_each_alone(exports):
    """Prompts of different lengths prefilled in one call (each row's tokens at its end, the
    columns before them padding hidden by ``visible``) give each prompt's lone logits and cache."""
    current, _ = exports
    predictor = Predictor(current)
    prompts = [np.asarray([[5, 9, 17, 3, 42]]), np.asarray([[8, 11]]), np.asarray([[7, 7, 2, 30]])]
    alone = [predictor.run_step("prefill", {"ids": ids}) for ids in prompts]
    width = max(ids.shape[1] for ids in prompts)
    tokens = np.zeros((3, width), dtype=np.int64)
    positions = np.zeros((3, width), dtype=np.int64)
    visible = np.zeros((3, width, width), dtype=np.float32)
    for row, ids in enumerate(prompts):
        length = ids.shape[1]
        tokens[row, width - length:] = ids[0]
        positions[row, width - length:] = np.arange(length)
        own = np.arange(width) >= width - length
        visible[row] = np.tril(np.ones((width, width))) * own[None, :]
        visible[row, :width - length, :] = np.eye(width)[:width - length]  # padding sees itself (no empty row)
    empty = np.zeros_like(alone[0]["cache"][:, :, :, :, :0]).repeat(3, axis=2)
    out = predictor.run_step("advance", {"tokens": tokens, "positions": positions, "cache": empty,
                                         "visible": visible})
    for row, (ids, lone) in enumerate(zip(prompts, alone)):
        np.testing.assert_allclose(out["logits"][row], lone["logits"][0], rtol=1e-5, atol=1e-5)
        own_columns = out["cache"][:, :, row, :, width - ids.shape[1]:]
        np.testing.assert_allclose(own_columns, lone["cache"][:, :, 0], rtol=1e-5, atol=1e-5)


def test_the_eager_model_advances_as_it_prefills_and_extends():
    """The model's own ``advance`` against its ``prefill`` (no export)."""
    from wenxin.models.ernie45 import Ernie45ForCausalLM, load_ernie45
    paddle.seed(0)
    model: Ernie45ForCausalLM = load_ernie45(FOLDER)
    model.eval()
    ids = paddle.to_tensor([[5, 9, 17, 3]], dtype="int64")
    with paddle.no_grad():
        logits, cache, _ = model.prefill(ids)
        hidden = paddle.zeros_like(cache[0, 0, :, :, :1])  # [1, KV, 1, D]: one column nobody sees
        visible = np.concatenate([np.zeros((1, 4, 1)), np.tril(np.ones((4, 4)))[None]], axis=2)  # [1, 4, 1 + 4]
        state, new = model.model.advance(ids, paddle.arange(4).unsqueeze(0), paddle.to_tensor(visible, "float32"),
                                         [(hidden, hidden)] * len(model.model.layers))
        again = paddle.matmul(state, model.output_weight(), transpose_y=True)
    np.testing.assert_allclose(again.numpy(), logits.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(new.numpy(), cache.numpy(), rtol=1e-5, atol=1e-5)  # the new tokens' keys and values


MEMORY_PROBE = """
import json, sys, numpy as np
def peak():
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return int(status["VmHWM"].split()[0]) * 1024
from wenxin.inference.predictor import Predictor
from wenxin.models.decoding import DecodeSettings, SteppedModel, decode
import paddle  # noqa: F401 (its own memory is not the model's)
before = peak()
predictor = Predictor(sys.argv[1], backend=sys.argv[2])
decode(SteppedModel(predictor.run_step, masked=True), {"ids": np.asarray([list(range(3, 19))])},
       DecodeSettings(strategy="greedy", max_new_tokens=8))
print(json.dumps({"before": before, "peak": peak()}))
"""


@pytest.mark.slow
def test_a_served_export_holds_its_weights_once_in_memory(tmp_path):
    """Issue 69's bound, on a random folder of 114 MB of float32 weights: loading the export and
    decoding raise the process's peak by at most 1.3 times the weights and 64 MiB (three programs
    held three copies)."""
    import json as json_module
    import subprocess
    from wenxin.models.ernie45 import Ernie45ForCausalLM
    from wenxin.models.ernie45_export import pt_layout_weights, write_pt_folder
    from wenxin.models.ernie45_folder import Ernie45Config
    with open(os.path.join(FOLDER, "config.json"), encoding="utf-8") as f:
        config = {**json_module.load(f), "vocab_size": 32000, "hidden_size": 512, "intermediate_size": 1536,
                  "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64}
    folder = str(tmp_path / "folder")
    os.makedirs(folder)
    paddle.seed(3)
    weights = pt_layout_weights(Ernie45ForCausalLM(Ernie45Config.from_dict(config, "test")).state_dict())
    write_pt_folder(folder, weights, FOLDER, "float32")
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        written = json_module.load(f)  # the fixture's config, with the dtype written
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json_module.dump({**written, **config}, f)
    size = sum(w.nbytes for w in weights.values())
    os.environ["WENXIN_CACHE"] = str(tmp_path / "cache")
    try:
        export = export_of_folder(folder)
    finally:
        del os.environ["WENXIN_CACHE"]
    done = subprocess.run([sys.executable, "-c", MEMORY_PROBE, export, "paddle"], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "GLOG_minloglevel": "2"})
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json_module.loads(done.stdout.strip().splitlines()[-1])
    grown = measured["peak"] - measured["before"]
    print(f"weights {size / 2**20:.0f} MiB; the process grew by {grown / 2**20:.0f} MiB")
    assert grown <= 1.3 * size + 64 * 2**20
