"""A model folder is a model (issue 68, point 1): an ERNIE 4.5 folder is predicted with, served
and evaluated without a task file; its decode step programs are built on first use and cached,
and answer exactly what the export of a checkpoint of the same weights answers, in both graph
modes."""
import json
import logging
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("sentencepiece")

from conftest import REPO, wait_until_serving  # noqa: E402
from test_chat_sft import FOLDER, sft_data  # noqa: E402,F401 (the fixture)
from test_pt_export import lora_checkpoint  # noqa: E402
from test_server_workers import free_port  # noqa: E402
from wenxin.cli import main  # noqa: E402
from wenxin.model_folders import FolderSettings, cached_exports, export_of_folder, is_model_folder  # noqa: E402

PROMPTS = [["今天天气很好吗？"], [json.dumps({"system": "你是一个生活小助理", "src": ["请问你是谁", "数字 123 和 456"],
                                     "tgt": ["我是文心大模型"]}, ensure_ascii=False)]]
SETTINGS = [{"strategy": "greedy", "max_new_tokens": 24},
            {"strategy": "sample", "temperature": 0.8, "top_p": 0.9, "seed": 7, "max_new_tokens": 24}]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WENXIN_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def answers(export):
    from wenxin.inference.generator import Generator
    from wenxin.inference.predictor import Predictor
    predictor = Predictor(export)
    generator = Generator(predictor)
    return [[r["text"] for r in generator.generate(PROMPTS, predictor.settings_for(s))] for s in SETTINGS]


@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_a_pt_export_answers_and_scores_as_its_checkpoint_does(tmp_path, sft_data, mode, capsys):  # noqa: F811
    task, checkpoint = lora_checkpoint(tmp_path, sft_data, "dynamic")
    assert main(["export", "--param_path", task, "--checkpoint", checkpoint, "--format", "pt", "--dtype",
                 "float32"]) == 0
    folder = capsys.readouterr().out.strip().splitlines()[-1]
    assert is_model_folder(folder)
    exported = str(tmp_path / f"export_{mode}")
    assert main(["export", "--param_path", task, "--checkpoint", checkpoint, "--output", exported,
                 "--set", f"model.is_dygraph={int(mode == 'dynamic')}", "--set", "trainer.type=CustomTrainer"]) == 0
    built = export_of_folder(folder, FolderSettings(graph_mode=mode))
    expected = answers(exported)
    assert answers(built) == expected and any(text for texts in expected for text in texts)
    # and the command line, as a user runs it: the folder itself is the model
    capsys.readouterr()
    assert main(["predict", "--model_dir", folder, "--graph_mode", mode, "--text", PROMPTS[0][0]]) == 0
    assert capsys.readouterr().out.startswith(PROMPTS[0][0] + "\t")
    # the folder scored without training equals the checkpoint scored with its task file
    dev = os.path.join(sft_data, "dev.jsonl")
    assert main(["evaluate", "--param_path", task, "--checkpoint", checkpoint, "--reader", "dev"]) == 0
    by_task = json.loads(capsys.readouterr().out)["dev_reader"]
    assert main(["evaluate", "--model_dir", folder, "--data", dev, "--max_seq_len", "160",
                 "--graph_mode", mode]) == 0
    by_folder = json.loads(capsys.readouterr().out)
    for key in ("loss", "ppl", "token_acc"):
        assert by_folder[key] == pytest.approx(by_task[key], rel=1e-5), key


class Said(logging.Handler):
    """What wenxin logs, as text (its logger does not propagate to pytest's)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())

    @property
    def text(self):
        return "\n".join(self.lines)


@pytest.fixture
def said():
    handler = Said()
    logger = logging.getLogger("wenxin")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_the_second_start_takes_the_cache_and_a_changed_folder_builds_again(tmp_path, cache, said):
    folder = str(tmp_path / "model")
    shutil.copytree(FOLDER, folder)
    first = export_of_folder(folder)
    assert "building its decode step programs" in said.text
    built_at = os.path.getmtime(os.path.join(first, "manifest.json"))
    said.lines.clear()
    assert export_of_folder(folder) == first
    assert "from the cache" in said.text
    assert os.path.getmtime(os.path.join(first, "manifest.json")) == built_at  # not built again
    with open(os.path.join(folder, ".mv"), "w") as f:  # a downloader's bookkeeping (aistudio-sdk rewrites it
        f.write("Revision:master")                     # at every download): not the model, not a new entry
    os.makedirs(os.path.join(folder, "._tmp"))
    assert export_of_folder(folder) == first
    assert export_of_folder(folder, FolderSettings(graph_mode="static")) != first  # another graph, another entry
    with open(os.path.join(folder, "generation_config.json"), "a", encoding="utf-8") as f:
        f.write("\n")  # the folder changed: its settings may have
    changed = export_of_folder(folder)
    assert changed != first and os.path.isdir(changed)
    os.remove(os.path.join(changed, "steps.pdiparams"))  # a damaged entry is built again, not served
    said.lines.clear()
    assert export_of_folder(folder) == changed
    assert "building it again" in said.text and os.path.isfile(os.path.join(changed, "steps.pdiparams"))
    sources = {entry["folder"] for entry in cached_exports()}
    assert sources == {os.path.abspath(folder)} and len(cached_exports()) == 3
    assert main(["cache", "--clear"]) == 0
    assert cached_exports() == [] and not os.path.exists(os.path.join(cache, "exports"))


def test_a_model_folders_errors_come_before_paddle_loads(tmp_path, capsys):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "ernie4_5"}')
    assert main(["predict", "--model_dir", str(broken), "--text", "x"]) == 2
    err = capsys.readouterr().err
    assert "--model_dir: " in err and "config.json: num_hidden_layers is missing" in err
    no_tokenizer = tmp_path / "no_tokenizer"
    shutil.copytree(FOLDER, no_tokenizer)
    os.remove(no_tokenizer / "tokenizer.model")
    assert main(["serve", "--model_dir", str(no_tokenizer)]) == 2
    assert "tokenizer.model" in capsys.readouterr().err
    assert main(["evaluate", "--model_dir", FOLDER]) == 2
    assert "give --param_path and --checkpoint" in capsys.readouterr().err
    assert main(["evaluate", "--model_dir", FOLDER, "--data", str(tmp_path / "missing.jsonl")]) == 3
    assert "--data: file not found" in capsys.readouterr().err
    assert main(["evaluate", "--model_dir", str(tmp_path), "--data", str(tmp_path / "x")]) == 2
    assert "is not a model folder" in capsys.readouterr().err


def test_an_unwritable_cache_is_one_error_naming_its_variable(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("WENXIN_CACHE", str(blocker / "cache"))
    assert main(["predict", "--model_dir", FOLDER, "--text", "你好"]) == 2
    err = capsys.readouterr().err
    assert "$WENXIN_CACHE: cannot create the cache folder" in err and "Traceback" not in err


def test_wenxin_serve_answers_openai_clients_from_the_tied_folder_without_a_task_file(tmp_path, cache):
    openai = pytest.importorskip("openai")
    port = free_port()
    env = {**os.environ, "GLOG_minloglevel": "2", "WENXIN_CACHE": str(cache),
           "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    log = open(tmp_path / "serve.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "wenxin", "serve", "--model_dir", FOLDER, "--port", str(port)],
                              stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(tmp_path))
    try:
        wait_until_serving(server, port, str(tmp_path / "serve.log"))
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        reply = client.chat.completions.create(model="tied", messages=[{"role": "user", "content": "你好"}],
                                               max_tokens=8, temperature=0)
        assert reply.choices[0].message.content and reply.usage.completion_tokens <= 8
        assert [model.id for model in client.models.list()] == ["tied"]  # the folder's name, not its cache entry
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()
    assert "building its decode step programs" in (tmp_path / "serve.log").read_text()


def test_a_moe_folder_answers_alike_in_baidus_pt_and_erniekits_paddle_layouts(tmp_path):
    """The same mixture-of-experts model, as Baidu's -PT folder and as ERNIEKit's -Paddle one
    (``ernie.`` names, fused projections), served from the folder: the same answers."""
    from test_ernie45 import erniekit_checkpoint
    from test_ernie45_moe import MOE
    from wenxin.models.ernie45 import Ernie45Config, paddle_layout_weights
    with open(os.path.join(MOE, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    paddle_folder = str(tmp_path / "ERNIE-moe-Paddle")
    erniekit_checkpoint(paddle_folder, paddle_layout_weights(MOE, Ernie45Config.from_folder(MOE)), config)
    for name in os.listdir(MOE):  # the tokenizer's and generation's files, as the -Paddle folder has them
        if not name.startswith("model") and name != "config.json":
            shutil.copy(os.path.join(MOE, name), paddle_folder)
    assert is_model_folder(paddle_folder) and is_model_folder(MOE)
    expected = answers(export_of_folder(MOE))
    assert answers(export_of_folder(paddle_folder)) == expected and any(t for texts in expected for t in texts)
