"""A chat model's export runs on ONNX Runtime (issue 69, point 4): ``wenxin export --format onnx``
converts its step program ``advance_pair`` (two groups of rows in one step, either of which may
have no rows) to ``advance_pair.onnx`` (checked against Paddle on two groups and on one beside
none) and to its int8 copy ``advance_pair.int8.onnx``: every engine, Paddle's too, holds the pair
alone (the weights once), runs a one-group call beside no rows and a serving turn's prompt parts
beside its decoding rows. ``auto`` serves the float32 program with ONNX Runtime (answers and
logits as Paddle's, rows batched as alone; dense and MoE), and ``--backend onnxruntime-int8`` the
int8 one, whose logits stay near float32's, which picks float32's token wherever float32's
margin is more than twice int8's error, and whose rows batched get their logits alone (each token's
activations quantized with a scale of its own: tested for greedy, sampling and beam search as
prompts join and leave a running batch whose caches stay in place). An export made before the
pair ran no rows still converts to ``advance.onnx`` with the pair as int8 only, and its int8
engine runs a one-group call beside a lone row."""
import json
import os
import shutil

import numpy as np
import pytest

pytest.importorskip("sentencepiece")
pytest.importorskip("onnxruntime")
pytest.importorskip("paddle2onnx")

from test_chat_sft import FOLDER  # noqa: E402
from wenxin.data.export_bundle import verify_export  # noqa: E402
from wenxin.inference.generator import Generator  # noqa: E402
from wenxin.inference.onnx_export import export_onnx  # noqa: E402
from wenxin.inference.paddle_backend import runs_empty_groups  # noqa: E402
from wenxin.inference.predictor import Predictor  # noqa: E402
from wenxin.model_folders import FolderSettings, export_of_folder  # noqa: E402

ROWS = [["你好"], ["今天天气很好吗？"], ["请用一句话介绍一下北京。"]]
PROMPTS = [[5, 9, 17, 3, 42, 8, 11], [8, 11, 30], [7, 7, 2, 30, 4], [100, 200, 300, 400], [1, 2, 3, 4, 5, 6, 7, 8, 9]]


MOE_FOLDER = os.path.join(os.path.dirname(__file__), "fixtures", "ernie45_moe", "shared")


@pytest.fixture(scope="module", params=[("dense", "dynamic"), ("dense", "static"), ("moe", "dynamic")],
                ids=["dense-dynamic", "dense-static", "moe-dynamic"])
def converted(request, tmp_path_factory):
    kind, mode = request.param
    tmp_path = tmp_path_factory.mktemp(f"onnx-{kind}-{mode}")
    os.environ["WENXIN_CACHE"] = str(tmp_path / "cache")
    try:
        source = export_of_folder(MOE_FOLDER if kind == "moe" else FOLDER, FolderSettings(graph_mode=mode))
    finally:
        del os.environ["WENXIN_CACHE"]
    folder = str(tmp_path / "export")
    shutil.copytree(source, folder)
    assert export_onnx(folder, {}) == os.path.join(folder, "advance_pair.onnx")
    return folder


def test_the_converted_program_is_sealed_and_auto_serves_it_with_paddles_answers(converted):
    files = set(os.listdir(converted))
    assert {"advance_pair.onnx", "advance_pair.int8.onnx"} <= files
    assert not {"advance.onnx", "advance.int8.onnx"} & files  # the pair is every engine's one program
    verify_export(converted)  # the manifest covers both
    onnx, paddle = Predictor(converted), Predictor(converted, backend="paddle")
    for predictor in (onnx, paddle):  # the weights once, and a serving turn in one call
        if predictor is paddle and not runs_empty_groups():  # an older Paddle: advance, as before
            assert (sorted(predictor.step_engines), predictor.fuses_turns) == (["advance"], False)
            continue
        assert (sorted(predictor.step_engines), predictor.fuses_turns) == (["advance_pair"], True)
    assert onnx.backend == "onnxruntime"
    int8 = Predictor(converted, backend="onnxruntime-int8", load_model=False)
    assert int8.backend == "onnxruntime-int8"
    assert onnx.predict(ROWS) == paddle.predict(ROWS)
    for ids in PROMPTS:
        a, b = (p.run_step("prefill", {"ids": np.asarray([ids])}) for p in (onnx, paddle))
        np.testing.assert_allclose(a["logits"], b["logits"], rtol=0, atol=1e-5 * np.abs(b["logits"]).max())
        np.testing.assert_allclose(a["cache"], b["cache"], rtol=0, atol=1e-5)


def lone_and_batched_steps(predictor):
    """Each prompt's next logits after one more token, alone and as a row of one batch."""
    alone = [predictor.run_step("prefill", {"ids": np.asarray([ids])}) for ids in PROMPTS]
    width = max(a["cache"].shape[4] for a in alone)
    cache = np.concatenate([np.pad(a["cache"], [(0, 0)] * 4 + [(width - a["cache"].shape[4], 0), (0, 0)])
                            for a in alone], axis=2)
    visible = np.zeros((len(alone), width + 1), np.float32)
    for row, a in enumerate(alone):
        visible[row, width - a["cache"].shape[4]:] = 1
    tokens = np.arange(4, 4 + len(alone))
    batched = predictor.run_step("extend", {"tokens": tokens, "positions": np.concatenate([a["position"] for a in alone]),
                                            "cache": cache, "visible": visible})["logits"]
    lone = np.concatenate([predictor.run_step("extend", {
        "tokens": tokens[row:row + 1], "positions": a["position"], "cache": a["cache"],
        "visible": np.ones((1, a["cache"].shape[4] + 1), np.float32)})["logits"] for row, a in enumerate(alone)])
    return lone, batched


def test_float32_rows_batched_get_their_lone_logits(converted):
    lone, batched = lone_and_batched_steps(Predictor(converted))
    np.testing.assert_allclose(batched, lone, rtol=0, atol=1e-5 * np.abs(lone).max())


@pytest.mark.parametrize("strategy", ["greedy", "sample", "beam"])
@pytest.mark.parametrize("backend", ["onnxruntime", "onnxruntime-int8"])
def test_prompts_decoded_together_get_their_lone_logits_and_tokens_in_float32_and_int8(converted, backend, strategy):
    from decoding_helpers import alone, compare, together
    predictor = Predictor(converted, backend=backend)
    assert predictor.backend == backend
    prompts = [predictor.prompt(row) for row in ROWS + [["what is machine learning and why"], ["hi"]]]
    settings = predictor.settings_for({"greedy": {"strategy": "greedy", "max_new_tokens": 10},
                                       "sample": {"strategy": "sample", "max_new_tokens": 10, "temperature": 0.8,
                                                  "top_k": 20, "top_p": 0.95, "seed": 7},
                                       "beam": {"strategy": "beam", "max_new_tokens": 8, "beam_size": 3}}[strategy])
    references = [alone(predictor.run_step, True, prompt, settings) for prompt in prompts]
    # joining and leaving a running batch, every step's logits within float32 rounding of alone's
    seen = compare(together(predictor.run_step, True, prompts, settings, in_place=predictor.in_place_cache),
                   references)  # the service's batch: every row's cache in place (wenxin.models.kv_slots)
    print(f"{backend} {strategy}: largest logit difference {seen['largest_difference']:.2e} of the largest logit")


@pytest.mark.parametrize("backend", ["onnxruntime", "onnxruntime-int8"])
def test_the_step_program_with_its_weights_packed_on_disk_answers_as_it_is(converted, backend, tmp_path, monkeypatch):
    import onnxruntime

    from wenxin.inference.onnx_backend import INT8, onnx_file
    from wenxin.inference.onnx_prepacked import SETTING_ENV, cached_programs, runtime_writes_packed
    from wenxin.models.advance_step import PAIR
    monkeypatch.setenv("WENXIN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(SETTING_ENV, "off")
    plain = Predictor(converted, backend=backend)
    assert cached_programs() == []
    monkeypatch.setenv(SETTING_ENV, "on")  # the fixture's program is smaller than auto packs
    packed = Predictor(converted, backend=backend)
    expected = [os.path.join(converted, onnx_file(PAIR, INT8 if backend.endswith("int8") else ""))]
    assert [e["program"] for e in cached_programs()] == (expected if runtime_writes_packed(onnxruntime.__version__)
                                                         else [])
    for ids in PROMPTS:  # the same kernels on the same packed weights: the same numbers
        a, b = (p.run_step("prefill", {"ids": np.asarray([ids])}) for p in (packed, plain))
        np.testing.assert_array_equal(a["logits"], b["logits"])
        np.testing.assert_array_equal(a["cache"], b["cache"])
    assert packed.predict(ROWS[:1]) == plain.predict(ROWS[:1])


@pytest.mark.parametrize("backend", ["onnxruntime", "onnxruntime-int8"])
def test_a_program_whose_weights_lie_beside_it_answers_as_one_that_holds_them(converted, backend, tmp_path,
                                                                             monkeypatch):
    """Past ONNX's 2 GB limit for one file (``one_file_bytes``; here 0) the float32 program and its
    int8 copy keep their weights in ``<program>.data`` beside them (ONNX's external data, written
    by ``onnx_convert`` and ONNX Runtime's quantizer): sealed, the same logits as the programs that
    hold their weights, loaded as they are and from their packed copy."""
    import onnxruntime

    from wenxin.inference.onnx_backend import INT8, onnx_file
    from wenxin.inference.onnx_prepacked import SETTING_ENV, cached_programs, runtime_writes_packed
    from wenxin.models.advance_step import PAIR
    beside = str(tmp_path / "beside")
    shutil.copytree(converted, beside)
    export_onnx(beside, {}, one_file_bytes=0)
    verify_export(beside)
    program = onnx_file(PAIR, INT8 if backend.endswith("int8") else "")
    with open(os.path.join(beside, "manifest.json"), encoding="utf-8") as f:
        sealed = json.load(f)["files"]
    assert {program, program + ".data"} <= set(sealed)
    assert os.path.getsize(os.path.join(beside, program)) < os.path.getsize(os.path.join(converted, program))
    assert not os.path.exists(os.path.join(converted, program + ".data"))
    monkeypatch.setenv("WENXIN_CACHE", str(tmp_path / "cache"))
    reference = Predictor(converted, backend=backend)
    for packing in ("off", "on"):
        monkeypatch.setenv(SETTING_ENV, packing)
        predictor = Predictor(beside, backend=backend)
        for ids in PROMPTS:
            a, b = (p.run_step("prefill", {"ids": np.asarray([ids])}) for p in (predictor, reference))
            np.testing.assert_allclose(a["logits"], b["logits"], rtol=0, atol=1e-6 * np.abs(b["logits"]).max())
            np.testing.assert_allclose(a["cache"], b["cache"], rtol=0, atol=1e-6)
    packed = [e["program"] for e in cached_programs()]
    assert packed == ([os.path.join(beside, program)] if runtime_writes_packed(onnxruntime.__version__) else [])


def test_the_int8_copy_made_a_weight_at_a_time_gives_the_exports_logits_to_the_bit(converted, tmp_path):
    """``onnx_quantize_groups``: ONNX Runtime's quantizer handed one weight at a time (a large
    program's groups, here each weight alone) makes the program it makes of the whole at once."""
    from wenxin.inference.onnx_backend import open_session
    from wenxin.inference.onnx_export import advance_programs
    from wenxin.inference.onnx_quantize import quantize
    target = str(tmp_path / "advance_pair.int8.onnx")
    quantize(os.path.join(converted, "advance_pair.onnx"), target, group_bytes=0)
    ours, export = (open_session(path) for path in (target, os.path.join(converted, "advance_pair.int8.onnx")))
    graph = os.path.join(converted, "advance_pair.json")
    batches = advance_programs(converted, graph, os.path.join(converted, "steps.pdiparams"))[0].batches
    assert batches
    for batch in batches:
        feeds = {i.name: batch[i.name.split("__")[-1]] for i in ours.get_inputs()}
        for a, b in zip(ours.run(None, feeds), export.run(None, feeds)):
            np.testing.assert_array_equal(a, b)


def test_a_layer_of_the_step_program_is_lean(converted):
    """A decoder layer of the converted pair (both groups' attention) is at most 120 operators
    (107 here): queries and keys rotated as feature pairs by one reversing slice, group parts and
    the cached columns cut by sizes built once a call, no reshape after another. Before, a layer
    was 193: paddle2onnx's shape arithmetic at every use of a size, rotations in 11 operators
    (issue 69: a leaner step; a small step is mostly its operators' own cost). Counted from a
    layer's first weight product to the next layer's (each layer has seven; ``Constant`` and
    ``Identity`` are not operators that run)."""
    import onnx
    if "moe" in converted:
        pytest.skip("a mixture-of-experts layer has a product per expert")
    model = onnx.load(os.path.join(converted, "advance_pair.onnx"), load_external_data=False)
    weights = {initializer.name for initializer in model.graph.initializer}
    operators = [node for node in model.graph.node if node.op_type not in ("Constant", "Identity")]
    products = [index for index, node in enumerate(operators) if node.op_type == "MatMul" and node.input[1] in weights]
    assert len(products) >= 14  # two layers of seven
    assert products[7] - products[0] <= 120


def test_a_child_killed_without_a_word_is_named_by_its_signal():
    import signal

    from wenxin.inference.onnx_export import exit_words
    assert exit_words(-signal.SIGKILL) == "killed by SIGKILL, as the system does when it runs out of memory"
    assert exit_words(-signal.SIGSEGV) == "killed by SIGSEGV"
    assert exit_words(3) == "exit status 3"


def test_an_int8_copy_that_cannot_be_made_leaves_the_float32_program_and_says_why(converted, tmp_path, monkeypatch):
    """ONNX Runtime's quantizer holds the float32 weights several times over: where it is killed
    (as the system kills a process out of memory), the export keeps its checked float32 program,
    sealed and served, drops the int8 copy of an earlier export (not this program's) and says why;
    the int8 backend then says the copy is missing."""
    import logging
    import signal
    import sys

    from conftest import wenxin_log

    from wenxin.common.errors import WenxinError
    from wenxin.inference import onnx_export
    again = str(tmp_path / "again")
    shutil.copytree(converted, again)
    assert os.path.isfile(os.path.join(again, "advance_pair.int8.onnx"))  # the earlier export's
    killed = (f"import os, signal, sys; print('wenxin: a word of its own', file=sys.stderr, flush=True); "
              f"os.kill(os.getpid(), signal.{signal.SIGKILL.name})")
    monkeypatch.setattr(onnx_export, "QUANTIZER", [sys.executable, "-c", killed])
    with wenxin_log(logging.WARNING) as log:
        assert export_onnx(again, {}) == os.path.join(again, "advance_pair.onnx")
    assert f"{again}: a word of its own" in log  # what the quantizer says itself is passed on
    assert "quantizing the ONNX program to int8 failed (wenxin: a word of its own) (advance_pair.int8.onnx not " \
           "written; the float32 program is" in " ".join(log)
    files = set(os.listdir(again))
    assert "advance_pair.onnx" in files and not {"advance_pair.int8.onnx", "advance_pair.int8.onnx.data"} & files
    assert not [name for name in files if name.startswith(".onnx-")]  # nothing left building
    verify_export(again)
    np.testing.assert_array_equal(
        Predictor(again, backend="onnxruntime").run_step("prefill", {"ids": np.asarray([PROMPTS[0]])})["logits"],
        Predictor(converted, backend="onnxruntime").run_step("prefill", {"ids": np.asarray([PROMPTS[0]])})["logits"])
    with pytest.raises(WenxinError, match="no advance_pair.int8.onnx"):
        Predictor(again, backend="onnxruntime-int8")


LONE = "a lone row"


def recorded(predictor):
    """The second group of every call its pair engine runs, as the calls run: its tokens' shape, or
    ``LONE`` for ``advance_step.lone_row`` (token 0 at position 0)."""
    engine, seen = predictor.step_engines["advance_pair"], []
    run = engine.run

    def recording(batch):
        second = {k.split("second_")[-1]: v for k, v in batch.items() if "second_" in k}
        lone = second["tokens"].shape == (1, 1) and not second["tokens"].any() and not second["positions"].any()
        seen.append(LONE if lone else second["tokens"].shape)
        return run(batch)
    engine.run = recording
    return seen


@pytest.mark.parametrize("strategy, backend", [("greedy", "onnxruntime-int8"), ("sample", "onnxruntime-int8"),
                                               ("greedy", "onnxruntime"), ("sample", "paddle")])
def test_prompt_parts_prefilled_beside_the_decoding_rows_get_their_lone_logits(converted, strategy, backend):
    from decoding_helpers import alone, alone_in_parts, compare, prefilled_beside
    if backend == "paddle" and not runs_empty_groups():
        pytest.skip("this Paddle does not run a group of no rows: it loads advance (runs_empty_groups)")
    predictor = Predictor(converted, backend=backend)
    assert predictor.fuses_turns
    calls = recorded(predictor)

    prompts = [predictor.prompt(row) for row in ROWS + [["what is machine learning and why"], ["hi"]]]
    settings = predictor.settings_for({"greedy": {"strategy": "greedy", "max_new_tokens": 12},
                                       "sample": {"strategy": "sample", "max_new_tokens": 12, "temperature": 0.8,
                                                  "top_k": 20, "top_p": 0.95, "seed": 7}}[strategy])
    empty = predictor.in_place_cache
    beside = prefilled_beside(predictor.run_step, prompts, settings, empty, part_tokens=3)
    # as each prompt prefilled in the same parts by itself, then decoded alone
    in_parts = [alone(predictor.run_step, True, prompts[0], settings, empty)] + \
        [alone_in_parts(predictor.run_step, prompt, settings, empty, 3) for prompt in prompts[1:]]
    seen = compare(beside, in_parts, removed=())
    if "onnx-moe" not in converted:  # and, for a dense model, as each prompt prefilled whole
        # (a mixture of experts' int8 router reads hidden states that a prefill in parts rounds
        # otherwise; where its top experts nearly tie a token goes to another expert: a prompt
        # of the fixture's moves 1% so, beside other rows or not)
        compare(beside, [alone(predictor.run_step, True, prompt, settings, empty) for prompt in prompts], removed=())
    assert (2, 3) in calls  # two prompts' parts of 3 tokens beside the decoding rows
    assert (0, 1) in calls and LONE not in calls  # a call of one group: beside no rows, never a lone row
    print(f"{backend} {strategy}: largest logit difference {seen['largest_difference']:.2e} of the largest logit")


def test_an_export_whose_pair_runs_no_rows_only_since_then_serves_as_before(converted, tmp_path):
    """An export made before the pair ran a group of no rows (its steps without the flag): Paddle
    loads ``advance``, conversion keeps ``advance.onnx`` and the pair as int8 only, and the int8
    engine runs a one-group call beside a lone row; the answers are the new export's."""
    from wenxin.data.export_bundle import seal_export
    older = str(tmp_path / "older")
    shutil.copytree(converted, older, ignore=shutil.ignore_patterns("*.onnx", "manifest.json"))
    with open(os.path.join(older, "preprocess.json"), encoding="utf-8") as f:
        meta = json.load(f)
    del meta["steps"]["advance_pair"]["empty_second"]
    with open(os.path.join(older, "preprocess.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f)
    seal_export(older)
    paddle = Predictor(older, backend="paddle")
    assert (sorted(paddle.step_engines), paddle.fuses_turns) == (["advance"], False)
    assert export_onnx(older, {}) == os.path.join(older, "advance.onnx")
    files = set(os.listdir(older))
    assert {"advance.onnx", "advance_pair.int8.onnx"} <= files and "advance_pair.onnx" not in files
    onnx, int8 = Predictor(older), Predictor(older, backend="onnxruntime-int8")
    assert (sorted(onnx.step_engines), sorted(int8.step_engines)) == (["advance"], ["advance_pair"])
    calls = recorded(int8)

    def answers(predictor):
        return Generator(predictor).generate(ROWS, predictor.settings_for({"strategy": "greedy", "max_new_tokens": 6}))
    assert answers(int8) == answers(Predictor(converted, backend="onnxruntime-int8"))
    assert calls and set(calls) == {LONE}  # every call beside a lone row
    assert answers(onnx) == answers(paddle) == answers(Predictor(converted))


def test_int8_stays_near_float32_and_picks_its_token_where_float32s_margin_is_clear(converted):
    import onnx
    ops = {node.op_type for node in onnx.load(os.path.join(converted, "advance_pair.int8.onnx")).graph.node}
    assert "MatMulInteger" in ops  # the weights are int8 indeed
    f32, int8 = Predictor(converted), Predictor(converted, backend="onnxruntime-int8")
    assert (int8.backend, sorted(int8.step_engines), int8.fuses_turns) == ("onnxruntime-int8", ["advance_pair"], True)
    checked, near = 0, 0
    for ids in PROMPTS:
        exact, rough = (p.run_step("prefill", {"ids": np.asarray([ids])})["logits"][0] for p in (f32, int8))
        scale = np.abs(exact).max()
        error = np.abs(rough - exact).max()
        print(f"prompt of {len(ids)}: int8 logits within {error:.3g} of float32's (largest {scale:.3g})")
        near += error <= 0.1 * scale
        best, second = np.sort(exact)[-2:][::-1]
        if best - second > 2 * error:
            assert rough.argmax() == exact.argmax()
            checked += 1
    # a dense model's logits stay within 10% everywhere; a mixture of experts' router (kept float32)
    # still reads int8's hidden states, and where its top experts are nearly tied (random weights:
    # often) a token goes to another expert and its logits move more (one prompt of the fixture's five)
    assert near >= (len(PROMPTS) - 1 if "onnx-moe" in converted else len(PROMPTS))
    assert checked >= 1
    # each token's activations have their own int8 scale: a row batched gets its logits alone
    lone, batched = lone_and_batched_steps(int8)
    f32_lone, _ = lone_and_batched_steps(f32)
    print(f"int8 batched vs lone {np.abs(batched - lone).max():.3g}; int8 vs float32 {np.abs(lone - f32_lone).max():.3g}")
    np.testing.assert_allclose(batched, lone, rtol=0, atol=1e-5 * np.abs(lone).max())


def test_a_model_folder_served_with_onnx_runtime_is_converted_once(tmp_path):
    import subprocess
    import sys
    env = {**os.environ, "WENXIN_CACHE": str(tmp_path / "cache"), "GLOG_minloglevel": "2"}
    answers = {}
    for backend in ("paddle", "onnxruntime", "onnxruntime-int8", "onnxruntime"):
        done = subprocess.run([sys.executable, "-m", "wenxin", "predict", "--model_dir", FOLDER, "--backend", backend,
                               "--text", "你好"], capture_output=True, text=True, env=env, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        converting = "converting its decode step program to ONNX" in done.stderr
        assert converting == (backend == "onnxruntime" and not answers.get("onnxruntime")), backend  # once
        answers[backend] = done.stdout
    entries = [e for e in os.listdir(tmp_path / "cache" / "exports") if os.path.isdir(tmp_path / "cache" / "exports" / e)]
    assert len(entries) == 1
    assert {"advance_pair.onnx", "advance_pair.int8.onnx"} <= set(os.listdir(tmp_path / "cache" / "exports" / entries[0]))
    assert answers["onnxruntime"] == answers["paddle"] and answers["paddle"].strip()
