"""A model's name is a model (issue 68, point 3): ``wenxin download NAME`` and ``--model_dir NAME``
fetch it through the hub's own client library into wenxin's cache, tested against a loopback
server that answers as Hugging Face does (``HF_ENDPOINT``): a sharded model, a download
interrupted and resumed, a missing file, an unknown name, a wrong checksum, the cache offline."""
import os
import shutil

import pytest

pytest.importorskip("huggingface_hub")
pytest.importorskip("sentencepiece")

from fake_hubs import FakeHuggingFace  # noqa: E402
from test_chat_sft import FOLDER  # noqa: E402
from wenxin.cli import main  # noqa: E402

NAME = "baidu/Tied-PT"


@pytest.fixture
def hub(tmp_path, monkeypatch):
    missing_shard = tmp_path / "missing_shard"
    shutil.copytree(FOLDER, missing_shard)
    os.remove(missing_shard / "model-00003-of-00004.safetensors")
    fake = FakeHuggingFace({NAME: FOLDER, "baidu/Missing-Shard": str(missing_shard)})
    monkeypatch.setenv("HF_ENDPOINT", fake.url)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("WENXIN_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("WENXIN_HUB", raising=False)
    yield fake
    fake.close()


def downloaded(capsys, *args):
    code = main(["download", *args])
    captured = capsys.readouterr()
    return code, captured.out.strip(), captured.err


def same_files(folder, source=FOLDER):
    return sorted(os.listdir(folder)) == sorted(os.listdir(source)) and all(
        open(os.path.join(folder, name), "rb").read() == open(os.path.join(source, name), "rb").read()
        for name in os.listdir(source))


def test_a_sharded_model_downloads_by_name_and_the_cache_serves_it_offline(hub, tmp_path, capsys):
    code, folder, err = downloaded(capsys, NAME)
    assert code == 0, err
    assert folder.startswith(str(tmp_path / "cache" / "hubs" / "huggingface")) and same_files(folder)
    shards = [p for m, p, _ in hub.requests if m == "GET" and "/resolve/" in p and "model-0000" in p]
    assert len(shards) == 4  # each shard of the index, once
    hub.requests.clear()
    code, again, err = downloaded(capsys, NAME, "--offline")
    assert (code, again, hub.requests) == (0, folder, [])  # the cache alone: not a request
    # where a model folder is asked for, its name does the same
    assert main(["predict", "--model_dir", NAME, "--offline", "--text", "你好"]) == 0
    assert capsys.readouterr().out.startswith("你好\t")


def test_an_interrupted_download_is_tried_again_and_goes_on_from_the_files_it_has(hub, capsys):
    shard = "model-00002-of-00004.safetensors"
    hub.cut_after[shard] = 40_000  # the connection drops once: the library tries again itself
    code, folder, err = downloaded(capsys, NAME)
    assert code == 0 and same_files(folder), err
    assert len([p for m, p, _ in hub.requests if m == "GET" and p.endswith(shard)]) == 2
    shutil.rmtree(os.path.dirname(os.path.dirname(folder)))  # the model's cache, afresh
    hub.requests.clear()
    hub.cut_after[shard], hub.cuts = 1000, 1000  # it keeps dropping: the command stops, and says so
    code, _, err = downloaded(capsys, NAME)
    assert code == 4 and "the download stopped" in err and "run it again" in err and "Traceback" not in err
    hub.cuts = 0  # the network is back: run again
    hub.requests.clear()
    code, folder, err = downloaded(capsys, NAME)
    assert code == 0 and same_files(folder), err
    fetched = {p.rsplit("/", 1)[-1] for m, p, _ in hub.requests if m == "GET" and "/resolve/" in p}
    assert fetched == {shard}  # the files the stopped command had finished are kept, not fetched again


def test_a_wrong_checksum_is_named_deleted_and_downloaded_again(hub, capsys):
    shard = "model-00004-of-00004.safetensors"
    hub.corrupt.add(shard)
    code, _, err = downloaded(capsys, NAME)
    assert code == 4 and f"{shard} does not match the hub's checksum" in err
    hub.corrupt.clear()
    code, folder, err = downloaded(capsys, NAME)
    assert code == 0 and same_files(folder), err


def test_unknown_names_missing_files_and_an_empty_cache_offline_are_one_error_each(hub, tmp_path, capsys):
    code, _, err = downloaded(capsys, "baidu/No-Such-Model")
    assert code == 2 and "baidu/No-Such-Model on Hugging Face: no such model" in err
    code, _, err = downloaded(capsys, NAME, "--offline")
    assert code == 2 and "not in the cache" in err and "offline" in err
    code, _, err = downloaded(capsys, "not a name")
    assert code == 2 and "is not a model name" in err
    assert main(["predict", "--model_dir", "baidu/Missing-Shard", "--text", "你好"]) == 4
    err = capsys.readouterr().err
    assert "model.safetensors.index.json: lists shards that are not in the folder" in err
    assert "model-00003-of-00004.safetensors" in err
    code, _, err = downloaded(capsys, NAME, "--hub", "nohub")
    assert code == 2 and "--hub" in err and "nohub" in err
    os.makedirs(tmp_path / "baidu" / "Tied-PT")  # a path that exists is a path, never a name
    os.chdir(tmp_path)
    try:
        assert main(["predict", "--model_dir", NAME, "--text", "你好"]) == 2
        assert "baidu/Tied-PT is not an exported model" in capsys.readouterr().err
    finally:
        os.chdir(os.path.dirname(os.path.abspath(__file__)))


def test_a_task_file_names_its_model_and_wenxin_train_downloads_it(hub, tmp_path, capsys):
    from conftest import write_config, write_jsonl
    from test_chat_sft import conversations, sft_config
    from wenxin.common.errors import ConfigError
    from wenxin.config.loader import load_config
    data = str(tmp_path / "data")
    write_jsonl(os.path.join(data, "train.jsonl"), conversations(12, seed=1))
    write_jsonl(os.path.join(data, "dev.jsonl"), conversations(4, seed=2))
    config = sft_config(data, str(tmp_path / "out"), max_steps=2, is_eval_dev=0)
    config["model"]["model_dir"] = NAME
    for reader in config["dataset_reader"].values():
        reader["fields"][0]["model_dir"] = NAME
    task = write_config(str(tmp_path / "task.json"), config)
    with pytest.raises(ConfigError, match=f"model.model_dir: the model {NAME} is not downloaded yet: wenxin "
                                          f"download {NAME}"):
        load_config(task)  # a page listing task files never downloads: it says how
    assert hub.requests == []
    assert main(["train", "--param_path", task]) == 0, capsys.readouterr().err
    shards = [p for m, p, _ in hub.requests if m == "GET" and "model-0000" in p]
    assert len(shards) == 4  # downloaded once, for the model and every field that names it
    loaded = load_config(task)  # from the cache now
    assert loaded["model"]["model_dir"].startswith(str(tmp_path / "cache" / "hubs" / "huggingface"))
    assert same_files(loaded["model"]["model_dir"])
