"""An ERNIE 4.5 chat model after SFT answers through its export (issue 40): the exported step
functions (LoRA adapters merged) generate what the trained model itself decodes, through the
Predictor, ``wenxin predict`` and ``wenxin serve`` (one answer, or a stream of tokens), stopping at
the model's end-of-turn token; training goes on from unchanged weights after an export."""
import json
import os
import shutil

import numpy as np
import pytest

pytest.importorskip("sentencepiece")

import paddle  # noqa: E402

from conftest import build, run_script, write_jsonl  # noqa: E402
from test_chat_sft import sft_config  # noqa: E402
from test_text_generation import events_of, post  # noqa: E402
from wenxin.data.chat_format import encode_prompt  # noqa: E402

QA = [("今天天气很好吗？", "很好，我们一起去公园散步吧。"), ("what is machine learning", "models learn from data"),
      ("请问你是谁", "我是文心大模型"), ("hello world", "你好 world")]
LORA = {"rank": 8, "alpha": 16.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                     "down_proj"]}


def memorizing_config(tmp_path, mode, lora, steps=80, encoding="template"):
    data = str(tmp_path / "data")
    rows = [{"src": [q], "tgt": [a]} for q, a in QA]
    write_jsonl(os.path.join(data, "train.jsonl"), rows * 4)
    write_jsonl(os.path.join(data, "dev.jsonl"), rows)
    config = sft_config(data, str(tmp_path / "out"), mode, max_steps=steps, is_eval_dev=0, train_log_step=20)
    config["dataset_reader"]["train_reader"]["config"]["batch_size"] = 4
    config["model"]["optimization"] = {"learning_rate": 2e-2 if lora else 5e-3, "warmup_steps": 5}
    if lora:
        config["model"]["lora"] = dict(LORA)
    config["model"]["generation"] = {"max_new_tokens": 40, "strategy": "greedy"}
    for reader in config["dataset_reader"].values():
        reader["fields"][0]["chat_encoding"] = encoding
    return config


def greedy_answer(trainer, question):
    """What the trained model (adapters unmerged) answers, by full forward passes: no cache, no export."""
    model = trainer.model
    field = trainer.readers["train_reader"].fields[0]
    tokenizer = field.tokenizer
    prompt = encode_prompt(tokenizer, None, [], question, field.encoding)  # as training encoded its prompts
    ids = list(prompt)
    model.eval()
    with paddle.no_grad():
        for _ in range(40):
            states = model.model(paddle.to_tensor(np.asarray(ids, dtype="int64")[None]))
            token = int(paddle.matmul(states[:, -1], model.output_weight(), transpose_y=True).numpy()[0].argmax())
            if token in model.stop_ids:
                break
            ids.append(token)
    model.train()
    return tokenizer.decode(ids[len(prompt):], skip_special_tokens=True)


@pytest.mark.parametrize("mode,lora,encoding", [("dynamic", False, "template"), ("dynamic", True, "template"),
                                                ("static", True, "template"), ("dynamic", True, "erniekit")])
def test_the_export_answers_as_the_trained_model_does(tmp_path, mode, lora, encoding):
    # with ERNIEKit's piecewise encoding too: the export keeps the field's encoding, so what it serves is encoded as
    # the training conversations were
    trainer = build(memorizing_config(tmp_path, mode, lora, encoding=encoding), tmp_path)
    trainer.do_train()
    before = {name: np.array(value) for name, value in trainer.engine.model_state_dict().items()}
    folder = trainer.export_inference(str(tmp_path / "export"))
    after = trainer.engine.model_state_dict()
    for name, value in before.items():  # merged only while exporting
        np.testing.assert_array_equal(np.asarray(after[name]), value, err_msg=name)
    with open(os.path.join(folder, "preprocess.json"), encoding="utf-8") as f:
        assert json.load(f)["fields"][0]["chat_encoding"] == encoding
    from wenxin.inference.predictor import Predictor
    predictor = Predictor(folder)
    answers = [result["text"] for result in predictor.predict([[q] for q, _ in QA])]
    assert answers == [a for _, a in QA]  # it learned them
    if mode == "dynamic":
        assert answers == [greedy_answer(trainer, q) for q, _ in QA]
    # the program reads the plain decoder's weights only; Paddle 3.3's jit.save keeps just those, Paddle
    # 3.0's also writes the layer's unused parameters (the adapters: never read by the program)
    assert sorted(f for f in os.listdir(folder) if f.endswith(".pdiparams")) == ["steps.pdiparams"]  # once
    own = tmp_path / "advance-alone"  # advance's program with the parameters file it shares, as jit.load reads them
    own.mkdir()
    shutil.copyfile(os.path.join(folder, "advance.json"), own / "advance.json")
    shutil.copyfile(os.path.join(folder, "steps.pdiparams"), own / "advance.pdiparams")
    exported = paddle.jit.load(str(own / "advance")).state_dict()
    names = list(trainer.engine.model_state_dict())
    base = [name for name in names if not name.endswith(("lora_A", "lora_B"))]
    unused = [v for v in exported.values() if LORA["rank"] in v.shape] if lora else []
    assert len(exported) - len(unused) == len(base) and len(unused) in (0, len(names) - len(base))


@pytest.fixture(scope="module")
def chat_export(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("chat")
    trainer = build(memorizing_config(tmp_path, "dynamic", True), tmp_path)
    trainer.do_train()
    return trainer.export_inference(str(tmp_path / "export"))


def test_wenxin_predict_answers_prompts_and_multi_turn_json(tmp_path, chat_export):
    history = json.dumps({"system": "你是一个生活小助理", "src": ["hello world", "请问你是谁"], "tgt": ["你好 world"]},
                         ensure_ascii=False)
    proc = run_script(tmp_path, ["predict", "--model_dir", chat_export, "--text", QA[2][0], "--text", history],
                      script="wenxin/cli.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 and lines[0] == f"{QA[2][0]}\t{json.dumps(QA[2][1], ensure_ascii=False)}"
    assert lines[1].startswith(history + "\t") and isinstance(json.loads(lines[1].rsplit("\t", 1)[1]), str)


def test_wenxin_serve_streams_an_answer_that_stops_at_the_end_of_turn(chat_export):
    from wenxin.inference.server import Service
    service = Service(chat_export, port=0)
    service.start_in_thread()
    try:
        status, kind, body = post(service.port, "/generate", {"text": QA[0][0]})
        assert status == 200, body
        answer = json.loads(body)
        assert answer["text"] == QA[0][1] and answer["finish_reason"] == "eos"
        status, kind, body = post(service.port, "/generate", {"text": QA[1][0], "stream": True})
        assert status == 200 and kind.startswith("text/event-stream")
        events = events_of(body)
        assert [e for e, _ in events] == ["token"] * (len(events) - 1) + ["done"] and len(events) > 3
        done = events[-1][1]
        assert "".join(d["text"] for _, d in events[:-1]) == done["text"] == QA[1][1]
        status, _, body = post(service.port, "/generate", {"text": QA[0][0], "max_new_tokens": 3})
        assert status == 200 and json.loads(body)["finish_reason"] == "length"
        status, _, body = post(service.port, "/generate", {"text": QA[0][0], "stop": "散步", "stream": True})
        events = events_of(body)
        assert "".join(d["text"] for e, d in events if e == "token") == events[-1][1]["text"] == "很好，我们一起去公园"
        assert events[-1][1]["finish_reason"] == "stop"
        status, _, body = post(service.port, "/generate", {"text": QA[0][0], "strategy": "sample", "temperature": 0.7,
                                                           "top_p": 0.9, "seed": 3})
        assert status == 200 and json.loads(body)["finish_reason"] in ("eos", "length")
        for bad, message in [({"text": "hi", "max_new_tokens": 10 ** 6}, "max_new_tokens"),
                             ({"text": "hi", "stop_ids": [1]}, "unknown decoding settings"),
                             ({"text": "hi", "temperature": -1}, "temperature"),
                             ({"text": "hi", "stop": [""]}, '"stop": each string needs 1 to 256 characters')]:
            status, _, body = post(service.port, "/generate", bad)
            assert status == 400 and message in json.loads(body)["error"], body
    finally:
        service.stop()


@pytest.fixture(scope="module")
def chat_service(chat_export):
    from wenxin.inference.server import Limits, ServeOptions, Service
    service = Service(chat_export, port=0, options=ServeOptions(limits=Limits(max_new_tokens=100)))
    service.start_in_thread()
    yield service
    service.stop()


def test_openai_clients_chat_with_the_service(chat_export, chat_service):
    """OpenAI's own client: a completion (greedy at temperature 0), a stream whose deltas add up
    to it with usage at the end, a history with a system prompt answered as /generate answers the
    same ERNIEKit line, a length stop, and the one model listed."""
    openai = pytest.importorskip("openai")
    from wenxin.data.chat_format import encode_prompt
    from wenxin.inference.predictor import Predictor
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{chat_service.port}/v1", api_key="unused", max_retries=0)
    name = os.path.basename(chat_export)
    assert [m.id for m in client.models.list().data] == [name]
    reply = client.chat.completions.create(model=name, messages=[{"role": "user", "content": QA[0][0]}],
                                           temperature=0)
    tokenizer = Predictor(chat_export, load_model=False).fields[0].tokenizer
    prompt_tokens = len(encode_prompt(tokenizer, None, [], QA[0][0]))
    assert reply.choices[0].message.content == QA[0][1] and reply.choices[0].finish_reason == "stop"
    assert reply.model == name and reply.object == "chat.completion" and reply.id.startswith("chatcmpl-")
    assert (reply.usage.prompt_tokens, reply.usage.total_tokens) == (prompt_tokens, prompt_tokens
                                                                     + reply.usage.completion_tokens)
    assert reply.usage.completion_tokens == len(tokenizer.encode(QA[0][1]))  # the answer (its end token not counted)

    chunks = list(client.chat.completions.create(model=name, messages=[{"role": "user", "content": QA[1][0]}],
                                                 temperature=0, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == QA[1][1] and chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert not chunks[-1].choices and chunks[-1].usage.completion_tokens >= 2 and len({c.id for c in chunks}) == 1

    history = [{"role": "system", "content": "你是一个生活小助理"}, {"role": "user", "content": QA[3][0]},
               {"role": "assistant", "content": [{"type": "text", "text": QA[3][1]}]},
               {"role": "user", "content": QA[2][0]}]
    reply = client.chat.completions.create(model=name, messages=history, temperature=0, max_tokens=60)
    line = json.dumps({"system": "你是一个生活小助理", "src": [QA[3][0], QA[2][0]], "tgt": [QA[3][1]]}, ensure_ascii=False)
    status, _, body = post(chat_service.port, "/generate", {"text": line, "max_new_tokens": 60, "strategy": "greedy"})
    assert status == 200 and reply.choices[0].message.content == json.loads(body)["text"]
    assert reply.usage.prompt_tokens == len(encode_prompt(tokenizer, "你是一个生活小助理", [QA[3]], QA[2][0]))

    reply = client.chat.completions.create(model=name, messages=[{"role": "user", "content": QA[0][0]}],
                                           max_completion_tokens=3, temperature=0)
    assert reply.choices[0].finish_reason == "length" and reply.usage.completion_tokens == 3
    reply = client.chat.completions.create(model=name, messages=[{"role": "user", "content": QA[0][0]}],
                                           temperature=0.8, top_p=0.9, seed=5, max_tokens=20)
    again = client.chat.completions.create(model=name, messages=[{"role": "user", "content": QA[0][0]}],
                                           temperature=0.8, top_p=0.9, seed=5, max_tokens=20)
    assert reply.choices[0].message.content == again.choices[0].message.content  # the seed decides

    before_stop = QA[0][1].split("公园")[0]
    reply = client.chat.completions.create(model=name, messages=[{"role": "user", "content": QA[0][0]}],
                                           temperature=0, stop=["公园", "never said"])
    assert reply.choices[0].message.content == before_stop and reply.choices[0].finish_reason == "stop"
    chunks = list(client.chat.completions.create(model=name, messages=[{"role": "user", "content": QA[0][0]}],
                                                 temperature=0, stop="园散", stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == QA[0][1].split("园散")[0]
    assert chunks[-1].choices[0].finish_reason == "stop"


@pytest.mark.parametrize("change,param,message", [
    ({"stop": ["。"] * 5}, "stop", "stop: 5 strings; at most 4"),
    ({"n": 2}, "n", "not supported"),
    ({"presence_penalty": 0.5}, "presence_penalty", "not supported"),
    ({"logprobs": True}, "logprobs", "not supported"),
    ({"temperature": 3}, "temperature", "from 0 to 2"),
    ({"max_tokens": 0}, "max_tokens", "at least 1"),
    ({"max_tokens": 101}, "max_tokens", "over the service's limit 100"),
    ({"max_completion_tokens": 10 ** 30}, "max_completion_tokens", "over the service's limit 100"),
    ({"top_p": 0}, "top_p", "top_p: expected a number above 0 and at most 1"),
    ({"temperature": 5e-324}, "temperature", "expected 0 (greedy) or a number from 1e-06 to 2"),
    ({"seed": -1}, "seed", "seed: expected an integer from 0 to 9223372036854775807"),
    ({"seed": 2 ** 70}, "seed", "seed: expected an integer from 0"),
    ({"top_k": 2 ** 40}, "top_k", "top_k: expected an integer from 0 to 2147483647"),
    ({"frobnicate": 1}, "frobnicate", "unknown field"),
    ({"model": 3}, "model", "model: expected a string"),
    ({"messages": []}, "messages", "non-empty list"),
    ({"messages": [{"role": "assistant", "content": "hi"}]}, "messages[0].role", "answers a user message"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}, "messages[1].role",
     "two user messages in a row"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]}, "messages[1].role",
     "comes first"),
    ({"messages": [{"role": "tool", "content": "a"}]}, "messages[0].role", "not system, developer, user"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "messages[0].content[0]", "only text parts"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}, "messages",
     "the last message must be the user's"),
])
def test_chat_completions_refuse_what_they_cannot_honour_naming_the_field(chat_service, change, param, message):
    body = {"model": "any", "messages": [{"role": "user", "content": "hi"}], **change}
    status, kind, text = post(chat_service.port, "/v1/chat/completions", body)
    error = json.loads(text)["error"]
    assert status == 400 and kind.startswith("application/json") and message in error["message"], text
    assert error["param"] == param and error["type"] == "invalid_request_error"


def test_sampling_without_a_seed_draws_one_per_request():
    from wenxin.inference.openai_chat import parse_chat_request
    body = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0.7}
    seeds = {parse_chat_request(body, "greedy").overrides["seed"] for _ in range(4)}
    assert len(seeds) == 4
    assert "seed" not in parse_chat_request({"messages": body["messages"]}, "greedy").overrides  # greedy: no seed
    assert "seed" in parse_chat_request({"messages": body["messages"]}, "sample").overrides  # the export samples
    assert parse_chat_request({**body, "seed": 9}, "greedy").overrides == {"strategy": "sample", "temperature": 0.7,
                                                                           "seed": 9}


def test_wenxin_export_of_a_lora_checkpoint_merges_the_adapters_into_the_folder_weights(tmp_path):
    from conftest import write_config
    from wenxin.controller.parameters import resolve_params_file
    from wenxin.inference.predictor import Predictor
    config = memorizing_config(tmp_path, "dynamic", True)
    path = write_config(str(tmp_path / "task.json"), config)
    train = run_script(tmp_path, ["train", "--param_path", path], script="wenxin/cli.py")
    assert train.returncode == 0, train.stderr[-3000:]
    checkpoint = os.path.join(config["trainer"]["output_path"], "checkpoints", "step_80")
    from safetensors.numpy import load_file
    assert all(name.endswith(("lora_A", "lora_B")) for name in load_file(resolve_params_file(checkpoint)))
    exported = run_script(tmp_path, ["export", "--param_path", path, "--checkpoint", checkpoint],
                          script="wenxin/cli.py")
    assert exported.returncode == 0, exported.stderr[-3000:]
    predictor = Predictor(os.path.join(checkpoint, "inference"))
    assert [r["text"] for r in predictor.predict([[q] for q, _ in QA])] == [a for _, a in QA]


def test_wenxin_predict_streams_the_answer_as_it_is_generated(tmp_path, chat_export):
    proc = run_script(tmp_path, ["predict", "--model_dir", chat_export, "--stream", "--text", QA[3][0],
                                 "--text", QA[0][0]], script="wenxin/cli.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [f"{QA[3][0]}\t{QA[3][1]}", f"{QA[0][0]}\t{QA[0][1]}"]


def test_wenxin_predict_stream_on_a_classifier_is_one_error(tmp_path, exported_classifier):
    proc = run_script(tmp_path, ["predict", "--model_dir", exported_classifier, "--stream", "--text", "很好"],
                      script="wenxin/cli.py")
    assert proc.returncode != 0 and "--stream: this model does not generate" in proc.stderr


def studio_run_with_export(root, export):
    """A finished studio run whose best checkpoint holds ``export`` (as a training run leaves it)."""
    from wenxin.studio.store import Store, database_path
    store = Store(database_path(root))
    run_id = store.add_run(name="chat", kind="train", task_path="task.json", sweep_path="", overrides={},
                           command=[], folder="", restart_budget=0)
    folder = os.path.join(root, "studio_runs", "0001-chat")
    checkpoints = os.path.join(folder, "output", "checkpoints")
    shutil.copytree(export, os.path.join(checkpoints, "best", "inference"))
    with open(os.path.join(checkpoints, "index.json"), "w", encoding="utf-8") as f:
        json.dump({"checkpoints": [{"name": "best", "kind": "best", "step": 80, "resumable": False}]}, f)
    store.set_folder_and_command(run_id, "studio_runs/0001-chat", [])
    store.update(run_id, "finished", status="finished")
    return run_id


def test_the_studio_chats_with_a_chat_run_streaming_its_answer_on_the_servers_decoder(tmp_path, monkeypatch,
                                                                                       chat_export):
    pytest.importorskip("starlette")
    import threading

    from studio_helpers import Client, serving
    from wenxin.studio.trying import ModelShelf
    root = str(tmp_path / "root")
    os.makedirs(root)
    run_id = studio_run_with_export(root, chat_export)
    with serving(root, monkeypatch) as server:
        client = Client(server.port)
        client.get("/")
        run = client.get(f"/api/runs/{run_id}")
        with open(os.path.join(chat_export, "preprocess.json"), encoding="utf-8") as f:
            limit = min(2048, json.load(f)["generation"]["max_new_tokens_limit"])  # the model's, not the studio's
        assert run["export_kind"] == {"generates": True, "chat": True, "max_new_tokens": limit}
        assert run["exports"][0]["name"] == "best"
        for question, answer in QA[:2]:
            status, text, headers = client.request("POST", f"/api/runs/{run_id}/chat", {
                "messages": [{"role": "system", "content": "你好"}, {"role": "user", "content": "hi"},
                             {"role": "assistant", "content": "hello"}, {"role": "user", "content": question}]
                if question == QA[0][0] else [{"role": "user", "content": question}],
                "temperature": 0, "max_tokens": 60})
            assert status == 200 and headers["content-type"].startswith("text/event-stream")
            events = [json.loads(line[6:]) for line in text.split("\n\n") if line.startswith("data: ")]
            pieces = [e["text"] for e in events if "text" in e]
            assert len(pieces) > 1 and events[-1]["done"]["tokens"] > 1  # streamed, piece by piece
            if question != QA[0][0]:  # alone, the memorized answer (the first has turns before it)
                assert "".join(pieces) == answer == events[-1]["done"]["text"]
        status, text, _ = client.request("POST", f"/api/runs/{run_id}/chat", {
            "messages": [{"role": "user", "content": "x"}], "temperature": 5})
        events = [json.loads(line[6:]) for line in text.split("\n\n") if line.startswith("data: ")]
        assert events == [{"error": events[0]["error"]}] and "temperature" in events[0]["error"]
        status, text, _ = client.request("POST", f"/api/runs/{run_id}/chat", {
            "messages": [{"role": "user", "content": "x"}], "max_tokens": limit + 1})
        assert f'"error": "max_tokens: at most {limit} for this model' in text
    # the page's stop: the decoding ends at its next step
    shelf = ModelShelf()
    said = []
    stopped = threading.Event()
    stopped.set()
    shelf.chat(chat_export, {"messages": [{"role": "user", "content": QA[0][0]}]}, said.append, stopped).result()
    assert said == [{"done": {"stopped_by_reader": True}}]
    shelf.close()
