"""The newcomer's path of the README and the Chinese quick start (issue 68, "done means"), run as
a user runs it, each step a command in its own process: download a model by name, chat with it in
the terminal, serve it to OpenAI's client, fine-tune it with the 0.3B recipe (its folder where the
recipe looks, CPU settings as its comment says), and serve the fine-tuned model. The model is the
tied test fixture, served by loopback hubs answering as Hugging Face and ModelScope do."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("sentencepiece")
pytest.importorskip("huggingface_hub")
pytest.importorskip("modelscope_hub")
pexpect = pytest.importorskip("pexpect")
openai = pytest.importorskip("openai")

from conftest import REPO, wait_until_serving, write_jsonl  # noqa: E402
from fake_hubs import FakeHuggingFace, FakeModelScope  # noqa: E402
from test_chat_sft import FOLDER, conversations  # noqa: E402
from test_server_workers import free_port  # noqa: E402

pytestmark = pytest.mark.slow


def wenxin(env, cwd, *args, check=True):
    done = subprocess.run([sys.executable, "-m", "wenxin", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)
    assert not check or done.returncode == 0, done.stderr[-3000:]
    return done


def served(env, cwd, log_path, model_dir, model_id):
    """``wenxin serve --model_dir model_dir``: OpenAI's client gets an answer, and /v1/models names it."""
    port = free_port()
    with open(log_path, "w") as log:
        server = subprocess.Popen([sys.executable, "-m", "wenxin", "serve", "--model_dir", model_dir, "--port",
                                   str(port)], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        try:
            wait_until_serving(server, port, log_path)
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
            reply = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "你好"}],
                                                   max_tokens=8, temperature=0)
            assert reply.choices[0].message.content and reply.usage.completion_tokens <= 8
            assert [model.id for model in client.models.list()] == [model_id]
        finally:
            server.terminate()
            server.wait(timeout=60)


def test_download_chat_serve_fine_tune_and_serve_the_fine_tuned_model(tmp_path):
    hugging_face = FakeHuggingFace({"baidu/ERNIE-4.5-0.3B-PT": FOLDER})
    modelscope = FakeModelScope({"PaddlePaddle/ERNIE-4.5-0.3B-PT": FOLDER})
    env = {**os.environ, "GLOG_minloglevel": "2", "WENXIN_CACHE": str(tmp_path / "cache"), "LANG": "C.UTF-8",
           "HF_ENDPOINT": hugging_face.url, "HF_HUB_DISABLE_TELEMETRY": "1", "MODELSCOPE_ENDPOINT": modelscope.url,
           "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    env.pop("WENXIN_HUB", None)
    work = str(tmp_path / "work")
    os.makedirs(work)
    try:
        # 1. download by name (README: wenxin download baidu/ERNIE-4.5-0.3B-PT prints where it is)
        folder = wenxin(env, work, "download", "baidu/ERNIE-4.5-0.3B-PT").stdout.strip().splitlines()[-1]
        assert os.path.isfile(os.path.join(folder, "model.safetensors.index.json"))
        # 2. chat in the terminal, by name from ModelScope (the Chinese quick start's line)
        child = pexpect.spawn(sys.executable, ["-m", "wenxin", "chat", "PaddlePaddle/ERNIE-4.5-0.3B-PT", "--hub",
                                               "modelscope", "--temperature", "0", "--max_new_tokens", "8"],
                              env=env, encoding="utf-8", timeout=300, cwd=work)
        try:
            child.expect_exact(">>> ")
            child.sendline("你好")
            child.expect_exact(">>> ")
            assert child.before.replace("\r\n", "\n").startswith("你好\n") and len(child.before.strip()) > 2
            child.sendline("/exit")
            child.expect(pexpect.EOF)
        finally:
            child.close()
        assert child.exitstatus == 0
        # 3. serve it to OpenAI's client, by name
        served(env, work, str(tmp_path / "serve_base.log"), "baidu/ERNIE-4.5-0.3B-PT", "baidu/ERNIE-4.5-0.3B-PT")
        # 4. fine-tune with the recipe: its folder where the recipe looks, its data where it reads
        os.makedirs(os.path.join(work, "models"))
        os.symlink(folder, os.path.join(work, "models", "ERNIE-4.5-0.3B-PT"))
        write_jsonl(os.path.join(work, "examples", "data", "chat", "train.jsonl"), conversations(12, seed=1))
        write_jsonl(os.path.join(work, "examples", "data", "chat", "dev.jsonl"), conversations(4, seed=2))
        wenxin(env, work, "train", "--param_path", os.path.join(REPO, "examples", "chat_sft_ernie45_0.3b_lora.yaml"),
               "--set", "trainer.environment.PADDLE_PLACE_TYPE=cpu", "--set", "trainer.precision.use_amp=false",
               "--set", "trainer.epoch=1",  # and the fixture has 512 positions (the real model 131,072): rows
               "--set", "dataset_reader.train_reader.fields.0.max_seq_len=256",  # of 256 leave the export room
               "--set", "dataset_reader.dev_reader.fields.0.max_seq_len=256")    # for its answers
        best = os.path.join(work, "output", "chat_sft_ernie45_0.3b_lora", "checkpoints", "best")
        assert os.path.isdir(best)
        # 5. serve the fine-tuned model (README: wenxin serve --model_dir output/.../checkpoints/best)
        served(env, work, str(tmp_path / "serve_tuned.log"), "output/chat_sft_ernie45_0.3b_lora/checkpoints/best",
               "best")
    finally:
        hugging_face.close()
        modelscope.close()
