"""Text generation (ERNIE-Gen): ERNIE-kit's task files run unchanged from its task layout; training
in both graph modes with parity; decoding over the key/value cache equals decoding without it;
the export, ``run_infer.py``, the ``Predictor`` and the service (one answer, or a stream of
tokens, with its limits and cancellation) generate from raw text what the trainer decoded."""
import http.client
import json
import os
import shutil
import socket
import time

import numpy as np
import paddle
import pytest

from conftest import REPO, build, losses_of, run_script, write_config
from ernie_helpers import gen_config, make_ernie_model, make_gen_rows, write_gen_tsv
from wenxin.controller.engine import model_step_meta
from wenxin.models.decoding import DecodeSettings, SteppedModel, decode
from wenxin.models.step_runners import steps_runner

TASK = "text_generation"
SHAPE = {"type_vocab_size": 8, "use_task_id": False, "max_position_embeddings": 128, "hidden_dropout_prob": 0.0,
         "attention_probs_dropout_prob": 0.0, "hidden_size": 64, "intermediate_size": 128}
# the copy task, learned in 1000 steps without infilling noise (1.0 BLEU-4 from 3 of 3 random
# initializations at this width and rate; at width 32 from 1 of 3)
LEARN = {"mask_prob": 0.0, "label_smooth": 0.0, "optimization": {"learning_rate": 0.003, "warmup_proportion": 0.1}}


@pytest.fixture(scope="module")
def gen_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("gen")
    make_ernie_model(str(root / "model"), **SHAPE)
    for split, seed, n in (("train", 1, 400), ("dev", 2, 40), ("predict", 3, 12)):
        write_gen_tsv(str(root / f"{split}.tsv"), make_gen_rows(n, seed), target=split != "predict")
    return root


def config_for(gen_data, out, mode="dynamic", **model):
    return gen_config(str(gen_data), str(gen_data / "model"), str(out), mode, **model)


def decoding_calls(trainer):
    """``prefill`` and ``extend`` of the trainer's model, run through its one step program
    (``infill``) as the evaluation and an export's Predictor run them."""
    steps = {name: model_step_meta(trainer.model, name, *spec) for name, spec in trainer.model.step_specs().items()}
    assert list(steps) == ["infill"]
    return steps_runner(trainer.engine.run_step_function, steps)


def erniekit_folder(tmp_path):
    """``tasks/text_generation`` as ERNIE-kit lays it out: examples/, data/ernie_gen_dureader/
    {train,dev,test}.tsv (headers answer, paragraph[, tgt]); the model hub at ``../../models_hub``."""
    root = tmp_path / "tasks" / TASK
    shutil.copytree(os.path.join(REPO, "tasks", TASK, "examples"), root / "examples")
    hub = tmp_path / "models_hub" / "ernie_gen_ch_dir"
    make_ernie_model(str(hub), "erniekit", type_vocab_size=8, use_task_id=False, max_position_embeddings=512)
    os.rename(hub / "vocab.txt", hub / "vocab_ernie_gen_ch.txt")
    os.rename(hub / "ernie_config.json", hub / "ernie_gen_ch_config.json")
    data = root / "data" / "ernie_gen_dureader"
    os.makedirs(data)
    for split, seed, n in (("train", 1, 64), ("dev", 2, 16), ("test", 3, 8)):
        write_gen_tsv(str(data / f"{split}.tsv"), make_gen_rows(n, seed), target=split != "test")
    return root


def test_erniekit_generation_files_run_unchanged(tmp_path):
    """cls_ernie_gen_infilling_ch.json as ERNIE-kit ships it, by ERNIE-kit's script name
    (static graph, 20 epochs of batch 8, beam search of 4, evaluated on dev at the end, an export
    at every save); its infer file, pointed at the export as ERNIE-kit's README says to, writes
    ERNIE-kit's prediction file: each line the best beam's tokens, tab-separated."""
    root = erniekit_folder(tmp_path)
    proc = run_script(root, ["--param_path", "examples/cls_ernie_gen_infilling_ch.json"],
                      script="run_trainer_ernie_gen.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "InfillingGenReader -> BasicDataSetReader of TSV with a header: sources ['answer', 'paragraph']" in proc.stderr
    assert "(erniekit layout)" in proc.stderr and "training (static): 160 steps" in proc.stderr
    with open(root / "output" / "ernie_gen_ch" / "logs" / "metrics.jsonl", encoding="utf-8") as f:
        dev = [r for r in map(json.loads, f) if r["tag"] == "dev"]
    assert dev[-1]["step"] == 160 and {"bleu4", "rouge_l", "loss", "ppl"} <= set(dev[-1])
    exports = root / "output" / "ernie_gen_ch" / "save_inference_model"
    files = set(os.listdir(exports / "inference_step_160"))
    assert {"infill.json", "infill.pdiparams", "preprocess.json"} <= files  # one step program: the weights once
    assert not files & {"prefill.json", "extend.json", "steps.pdiparams"}
    shutil.copytree(exports / "inference_step_160", exports / "inference_step_39421")  # the infer file's path
    proc = run_script(root, ["--param_path", "examples/cls_ernie_gen_infilling_ch_infer.json"], script="run_infer.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(root / "output" / "predict_result.txt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    vocab = set((tmp_path / "models_hub" / "ernie_gen_ch_dir" / "vocab_ernie_gen_ch.txt").read_text("utf-8").split())
    assert len(lines) == 8
    for line in lines:  # an empty line: the model ended the text at once
        tokens = line.split("\t") if line else []
        assert len(tokens) <= 32 and set(tokens) <= vocab


def test_both_graph_modes_train_with_parity_and_decode_alike(tmp_path, gen_data):
    """Same initial weights and batches: the losses of 20 steps agree within 1e-5, with label
    smoothing on; then both engines' step functions give the same logits and caches, and the
    same decoded tokens."""
    def parity(name, mode):
        config = config_for(gen_data, tmp_path / name, mode, mask_prob=0.0, label_smooth=0.1, beam_size=3)
        config["trainer"].update(max_steps=20, train_log_step=1, is_eval_dev=0)
        return config

    dynamic = build(parity("dynamic", "dynamic"), tmp_path)
    init = str(tmp_path / "init.pdparams")
    paddle.save({k: v.numpy() for k, v in dynamic.engine.model_state_dict().items()}, init)
    static_config = parity("static", "static")
    static_config["trainer"]["load_parameters"] = init
    static = build(static_config, tmp_path)
    dynamic.do_train()
    static.do_train()
    d, s = losses_of(str(tmp_path / "dynamic")), losses_of(str(tmp_path / "static"))
    assert len(d) == len(s) == 20
    np.testing.assert_allclose([s[k] for k in sorted(s)], [d[k] for k in sorted(d)], atol=1e-5, rtol=0)
    assert np.mean([d[k] for k in sorted(d)][-5:]) < np.mean([d[k] for k in sorted(d)][:5])
    batch = next(iter(dynamic.eval_loader("dev_reader")))
    arrays = {k: v.numpy() for k, v in batch.items()}
    source = dynamic.model.prompt_source().prompts(arrays)[0]
    outputs = []
    for trainer in (dynamic, static):
        with trainer.engine.running():
            trainer.engine.begin_eval()
            run = decoding_calls(trainer)
            first = run("prefill", source)
            width = first["cache"].shape[4]
            second = run("extend", {"tokens": np.array([5], dtype=np.int64), "positions": first["position"],
                                    "cache": first["cache"], "visible": np.ones((1, width + 1), np.float32)})
            generated = trainer.model.generate_outputs(arrays, run)["generated"]
            trainer.engine.end_eval()
        outputs.append((first, second, generated))
    (d1, d2, dg), (s1, s2, sg) = outputs
    for a, b in ((d1, s1), (d2, s2)):
        np.testing.assert_allclose(a["logits"], b["logits"], atol=1e-4)
        np.testing.assert_allclose(a["cache"], b["cache"], atol=1e-4)
    assert d2["cache"].shape[4] == d1["cache"].shape[4] + 1  # one position more
    np.testing.assert_array_equal(dg, sg)


class Uncached:
    """The ERNIE-Gen model decoded without a cache: every step runs the whole source and target
    so far through ``streams`` (the training computation) and reads the last query's logits."""

    def __init__(self, model, prompt):
        self.model = model
        self.src = paddle.to_tensor(prompt["src_ids"])
        self.types = paddle.to_tensor(prompt["src_types"])
        self.positions = paddle.to_tensor(prompt["src_positions"]) if "src_positions" in prompt else None

    def logits(self, seqs):
        rows = []
        cls = self.model.special["cls_id"]
        with paddle.no_grad():
            for seq in seqs:
                target = paddle.to_tensor([[cls] + seq], dtype="int64")
                states = self.model.streams(self.src, self.types, self.positions,
                                               paddle.to_tensor([self.src.shape[1]], dtype="int64"), target,
                                               paddle.to_tensor([len(seq) + 1], dtype="int64"), len(seq) + 2)
                rows.append(self.model.logits(states[:, -1]).numpy()[0])
        return np.stack(rows)

    def prefill(self, prompt):
        return self.logits([[]]), [[]]

    def extend(self, tokens, cache):
        seqs = [list(c) + [t] for c, t in zip(cache, tokens)]
        return self.logits(seqs), seqs

    def select(self, cache, rows):
        return [list(cache[r]) for r in rows]


@pytest.mark.parametrize("continuous", [True, False])
def test_cached_decoding_equals_decoding_without_cache(tmp_path, gen_data, continuous):
    """After some training (so that outputs depend on the source), greedy search, beam search
    and seeded sampling over the key/value cache choose exactly the tokens that recomputing the
    whole sequence at every step chooses, and their logits agree; with positions running on
    over source and target, and restarting (``continuous_position: false``)."""
    config = config_for(gen_data, tmp_path / "out", continuous_position=continuous, **LEARN)
    config["trainer"].update(max_steps=150, is_eval_dev=0)
    trainer = build(config, tmp_path)
    trainer.do_train()
    model = trainer.model
    model.eval()
    batch = next(iter(trainer.eval_loader("dev_reader")))
    prompts = model.prompt_source().prompts({k: v.numpy() for k, v in batch.items()})[:5]
    cached = SteppedModel(decoding_calls(trainer), masked=True)
    for settings in (DecodeSettings("greedy", 8, eos_id=None), DecodeSettings("beam", 6, eos_id=model.special["sep_id"],
                                                                             beam_size=3),
                     DecodeSettings("sample", 8, eos_id=None, top_k=5, top_p=0.9, temperature=1.3, seed=4)):
        for prompt in prompts:
            assert decode(cached, prompt, settings) == decode(Uncached(model, prompt), prompt, settings), settings
    # several sources in one call (each row's padding before its source) get their lone prefills
    from wenxin.models.batch_prefill import prefill_whole
    batches = [model.prompt_source().prompts({k: v.numpy() for k, v in b.items()}) for b in trainer.eval_loader("dev_reader")]
    mixed = batches[0][:3] + batches[-1][:3]  # the reader sorts by length: its first and last batches differ
    assert len({prompt["src_ids"].shape[1] for prompt in mixed}) > 1
    run, calls = decoding_calls(trainer), []
    for prompt, together in zip(mixed, prefill_whole(lambda name, inputs: calls.append(name) or run(name, inputs),
                                                     mixed, True)):
        alone = run("prefill", prompt)
        for name in ("logits", "cache", "position"):
            np.testing.assert_allclose(together[name], alone[name], rtol=1e-5, atol=1e-5, err_msg=name)
    assert "prefill_rows" in calls
    logits, cache = cached.prefill(prompts[0])
    assert cache[1] == (prompts[0]["src_ids"].shape[1] + 1 if continuous else 1)  # the first new token's position
    uncached = Uncached(model, prompts[0])
    np.testing.assert_allclose(logits, uncached.logits([[]]), atol=1e-5)
    for seq in ([7], [7, 9], [7, 9, 11]):
        logits, cache = cached.extend([seq[-1]], cache)
        np.testing.assert_allclose(logits, uncached.logits([seq]), atol=1e-5)


def post(port, path, body, timeout=60):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    return response.status, response.getheader("content-type"), response.read().decode("utf-8")


def events_of(text):
    """The (event, data) pairs of a server-sent event stream."""
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


@pytest.mark.parametrize("mode", ["dynamic", "static"])
@pytest.mark.slow
def test_generation_learns_exports_and_serves_what_it_decoded(tmp_path, gen_data, mode):
    """The copy task learned to dev BLEU-4 >= 0.9 in either graph mode; the export's Predictor,
    run_infer.py and the service (one answer, and a stream whose tokens add up to it) generate
    from raw text exactly what the trainer's evaluation decoded."""
    config = config_for(gen_data, tmp_path / "out", mode, beam_size=2, **LEARN)
    config["trainer"]["epoch"] = 40
    trainer = build(config, tmp_path)
    metrics = trainer.do_train()
    assert metrics["dev_reader"]["bleu4"] >= 0.9 and metrics["dev_reader"]["rouge_l"] >= 0.95
    outputs, _ = trainer.collect_outputs("dev_reader", "evaluate")
    expected = [trainer.model.text_of(row) for row in outputs["generated"]]
    folder = trainer.export_inference(str(tmp_path / "export"))

    from wenxin.inference.predictor import Predictor
    rows = [line.split("\t")[:2] for line in (gen_data / "dev.tsv").read_text("utf-8").splitlines()[1:]]
    predictor = Predictor(folder)
    assert [r["text"] for r in predictor.predict(rows, batch_size=7)] == expected
    assert all(r["text"] == " ".join(r["tokens"]) for r in predictor.predict(rows[:3]))  # letters: one token each

    infer = write_config(str(tmp_path / "infer.json"), {
        "model_dir": folder, "output_file": str(tmp_path / "pred.txt"),
        "predict_reader": {"config": {"data_path": str(gen_data / "dev.tsv"), "has_header": True}}})
    proc = run_script(tmp_path, ["--param_path", infer], script="run_infer.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "pred.txt").read_text("utf-8").splitlines() == expected

    from wenxin.inference.server import Service
    service = Service(folder, port=0)
    service.start_in_thread()
    try:
        status, kind, body = post(service.port, "/generate", {"row": rows[0]})
        assert status == 200 and kind.startswith("application/json")
        answer = json.loads(body)
        assert answer["text"] == expected[0] and answer["finish_reason"] == "eos"
        status, kind, body = post(service.port, "/generate", {"row": rows[1], "stream": True, "strategy": "greedy"})
        assert status == 200 and kind.startswith("text/event-stream")
        events = events_of(body)
        assert [e for e, _ in events] == ["token"] * (len(events) - 1) + ["done"]
        done = events[-1][1]
        assert "".join(d["text"] for _, d in events[:-1]) == done["text"]
        assert [d["token"] for _, d in events[:-1]] == done["tokens"]
        status, _, body = post(service.port, "/predict", {"rows": rows[:2]})
        assert status == 200 and [p["text"] for p in json.loads(body)["predictions"]] == expected[:2]
    finally:
        service.stop()


@pytest.fixture(scope="module")
def untrained_export(tmp_path_factory, gen_data):
    """The export of a model that never ends a text ([SEP]'s output bias at -1e4), so decoding
    runs to its limits."""
    tmp_path = tmp_path_factory.mktemp("untrained")
    config = config_for(gen_data, tmp_path / "out", max_dec_len=60, decoding="greedy")
    config["trainer"].update(max_steps=1, is_eval_dev=0)
    trainer = build(config, tmp_path)
    trainer.do_train()
    bias = trainer.model.lm_head.bias
    values = bias.numpy()
    values[trainer.model.special["sep_id"]] = -1e4
    bias.set_value(values)
    return trainer.export_inference(str(tmp_path / "export"))


def generation_finished(port):
    """The service's count of finished generations by reason (its Prometheus text)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    counts = {}
    for line in text.splitlines():
        if line.startswith("wenxin_generations_total{"):
            reason = line.split('reason="')[1].split('"')[0]
            counts[reason] = float(line.rsplit(" ", 1)[1])
    return counts


def test_service_limits_generation_and_survives_a_client_that_left(untrained_export):
    """Requests are checked (settings, limits, fields, the model's positions) with one 400 each;
    max_new_tokens caps an answer (finish_reason length); a time limit ends decoding
    (time_limit); a client that closes its stream mid-way ends its request, and the service goes
    on answering."""
    from wenxin.inference.server import Limits, ServeOptions, Service
    service = Service(untrained_export, port=0, options=ServeOptions(limits=Limits(max_new_tokens=50)))
    service.start_in_thread()
    try:
        port = service.port
        for body, message in (({"row": ["a b"]}, '"row" must be a list of 2 strings'),
                              ({"text": "a b"}, 'this model reads 2 fields: send "row"'),
                              ({"row": ["a", "b"], "max_new_tokens": 51}, "over the service's limit 50"),
                              ({"row": ["a", "b"], "top_p": 0}, "top_p 0 must be in (0, 1]"),
                              ({"row": ["a", "b"], "eos_id": 3}, "unknown decoding settings ['eos_id']"),
                              ({"row": ["a", "b"], "max_new_tokens": 2.5}, "max_new_tokens: 2.5 is not an integer"),
                              ({"row": ["a", "b"], "stream": "yes"}, '"stream" must be true or false')):
            status, _, text = post(port, "/generate", body)
            assert status == 400 and message in json.loads(text)["error"], (body, text)
        status, _, text = post(port, "/v1/chat/completions", {"model": "m", "messages": [{"role": "user",
                                                                                         "content": "a b"}]})
        assert status == 404 and "no chat model" in json.loads(text)["error"]["message"]  # OpenAI's error object
        status, _, text = post(port, "/generate", {"row": ["a b c", "d e f"]})
        answer = json.loads(text)
        assert status == 200 and answer["finish_reason"] == "length" and len(answer["tokens"]) == 50  # 60 capped
        status, _, text = post(port, "/generate", {"row": ["a b c", "d e f"], "max_new_tokens": 4})
        assert json.loads(text)["finish_reason"] == "length" and len(json.loads(text)["tokens"]) == 4

        # a client that reads one token and leaves: its request ends (cancelled, or done first)
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        body = json.dumps({"row": ["a b c", "d e f"], "stream": True}).encode()
        sock.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        received = b""
        while b"event: token" not in received:
            received += sock.recv(4096)
        sock.close()
        deadline = time.monotonic() + 300  # a guard against a hang, not a timing the test needs
        while sum(generation_finished(port).values()) < 3:  # waits for the state
            assert time.monotonic() < deadline, generation_finished(port)
        assert set(generation_finished(port)) <= {"length", "cancelled"}
        status, _, text = post(port, "/generate", {"row": ["a", "b"], "max_new_tokens": 3})
        assert status == 200 and len(json.loads(text)["tokens"]) == 3
    finally:
        service.stop()
    limits = Limits(max_new_tokens=500, generation_timeout=1e-6)
    timed = Service(untrained_export, port=0, options=ServeOptions(limits=limits))
    timed.start_in_thread()
    try:
        status, _, text = post(timed.port, "/generate", {"row": ["a b", "c d"]})
        assert status == 200 and json.loads(text)["finish_reason"] == "time_limit"
        status, _, text = post(timed.port, "/generate", {"row": ["a b", "c d"], "max_new_tokens": 200})
        assert status == 400 and "export can add after a prompt of its longest length" in json.loads(text)["error"]
    finally:
        timed.stop()


def test_a_cancelled_generation_stops_at_its_next_step(untrained_export):
    """The two halves of stopping for a client that left, each without a race: the endpoint's
    watch cancels a request's job when its connection reports the disconnect, and the scheduler
    ends a cancelled job before its next model step (finish_reason cancelled, nothing decoded)."""
    import asyncio

    from wenxin.inference.generation_api import ClientWatch
    from wenxin.inference.generation_scheduler import GenerationScheduler
    from wenxin.inference.scheduler_front import GenerationJob
    from wenxin.inference.http_io import Call

    scheduler = GenerationScheduler(untrained_export)
    try:
        async def scenario():
            loop = asyncio.get_running_loop()
            prompt = await scheduler.prepare(["a b", "c d"])
            job = GenerationJob(["a b", "c d"], prompt, scheduler.settings_for({}), time.monotonic() + 60, loop)
            messages = iter([{"type": "http.disconnect"}])

            async def receive():
                return next(messages)

            watch = ClientWatch(Call({}, receive, None))
            watch.attach(job)
            await watch.left.wait()
            assert job.cancelled.is_set()
            scheduler.submit(job)
            return [await job.events.get()]

        events = asyncio.run(scenario())
        assert [(e.kind, e.payload["finish_reason"], e.payload["tokens"]) for e in events] == [("done", "cancelled", [])]
    finally:
        scheduler.close()


def test_label_smoothing_is_cross_entropy_against_the_smoothed_labels():
    """The loss's smoothing term (logsumexp - mean of the logits, for speed) equals Paddle's
    cross-entropy against ``label_smooth``'s soft labels."""
    import paddle.nn.functional as F
    rng = np.random.default_rng(0)
    logits = paddle.to_tensor(rng.normal(size=(3, 5, 11)).astype("float32"))
    labels = paddle.to_tensor(rng.integers(0, 11, size=(3, 5)))
    smooth = 0.1
    ours = (1 - smooth) * F.cross_entropy(logits, labels.unsqueeze(-1), reduction="none").squeeze(-1) \
        + smooth * (paddle.logsumexp(logits, axis=-1) - logits.mean(axis=-1))
    soft = F.label_smooth(F.one_hot(labels, 11), epsilon=smooth)
    reference = F.cross_entropy(logits, soft, soft_label=True, reduction="none").squeeze(-1)
    np.testing.assert_allclose(ours.numpy(), reference.numpy(), atol=1e-5)


def test_an_older_generation_export_is_refused_by_onnx_with_its_reason(untrained_export, tmp_path):
    """``infill`` converts (tests/test_infill_export.py); an export of ERNIE-Gen's two programs,
    ``prefill`` and ``extend``, from before it, does not: one error saying what to do."""
    pytest.importorskip("paddle2onnx")
    import shutil

    from wenxin.common.errors import InferenceError
    from wenxin.inference.onnx_export import export_onnx
    older = tmp_path / "older"
    shutil.copytree(untrained_export, older)
    for suffix in (".json", ".pdiparams"):
        os.rename(older / f"infill{suffix}", older / f"prefill{suffix}")
    with pytest.raises(InferenceError, match=r"step program is prefill.json \(from an older wenxin\).*not supported "
                                             r"\(only an export with advance or infill: export it again\)"):
        export_onnx(str(older), {})


@pytest.mark.parametrize("model, message", [
    ({"tgt_type_id": 8}, "model.tgt_type_id: 8 is outside the encoder's type_vocab_size 8"),
    ({"tgt_type_id": 1}, "model.tgt_type_id: 1, but the 2 sources take the token types 0..1"),
    ({"max_dec_len": 100}, "need 141 positions, more than the encoder's max_position_embeddings 128"),
    ({"source_field": "paragraph"}, "model.source_field: 'paragraph' must be the first ErnieGenSourceFieldReader"),
    ({"target_field": "answer"}, "model.target_field: 'answer' is not an ErnieGenTargetFieldReader field")])
def test_model_settings_that_cannot_work_are_one_error_naming_the_key(tmp_path, gen_data, model, message):
    """Each is found while the trainer is built, before any training."""
    import re

    from wenxin.common.errors import ConfigError
    with pytest.raises(ConfigError, match=re.escape(message)):
        build(config_for(gen_data, tmp_path / "out", **model), tmp_path)


def test_a_stop_signal_ends_an_evaluation_at_its_next_decoding_step(tmp_path, gen_data):
    """SIGTERM arrives in the middle of the dev set's beam search: the evaluation ends at the next
    model step (not after the reader), the run saves its step and stops, and the resumed run
    evaluates that step first, with the uninterrupted run's scores."""
    import signal

    from wenxin.controller.hooks import HookBase

    def cfg(out):
        config = config_for(gen_data, tmp_path / out, decoding="beam", beam_size=3, max_dec_len=12)
        config["trainer"].update(max_steps=4, eval_step=4, save_model_step=100, resume="auto", metric="bleu4",
                                 metric_mode="max")
        config["dataset_reader"]["dev_reader"]["config"]["batch_size"] = 8
        return config

    class Scores(HookBase):
        def __init__(self):
            self.scores = {}

        def after_eval(self, reader_name, metrics):
            self.scores[(reader_name, self.trainer.state.global_step)] = metrics

    reference = build(cfg("reference"), tmp_path)
    expected = Scores()
    reference.register_hook(expected)
    evaluation_calls = []
    reference_run = reference.engine.run_step_function

    def counted_reference(name, inputs):
        if reference.state.global_step == 4:
            evaluation_calls.append(name)
        return reference_run(name, inputs)

    reference.engine.run_step_function = counted_reference
    reference.do_train()
    stop_at = len(evaluation_calls) // 2  # the signal comes in the middle of the evaluation's calls
    assert stop_at >= 5

    stopped = build(cfg("stopped"), tmp_path)
    calls = {"before": 0, "after": 0}
    run = stopped.engine.run_step_function

    def counted(name, inputs):
        if stopped.state.global_step == 4:  # the evaluation at step 4 (not the preflight's batch)
            calls["after" if stopped.state.interrupted else "before"] += 1
            if calls["before"] == stop_at and not stopped.state.interrupted:
                os.kill(os.getpid(), signal.SIGTERM)
        return run(name, inputs)

    stopped.engine.run_step_function = counted
    stopped.do_train()
    assert stopped.state.interrupted and stopped.state.evaluation_pending
    assert calls["before"] == stop_at and calls["after"] == 0  # the signal's step was the last one run
    resumed = build(cfg("stopped"), tmp_path)
    scores = Scores()
    resumed.register_hook(scores)
    resumed.do_train()
    assert scores.scores == expected.scores
