"""Models by name from the hubs Chinese users reach (issue 68, point 3): ModelScope through
``modelscope-hub`` and AI Studio through ``aistudio-sdk``, each tested against a loopback server
that answers the calls its library makes (tests/fake_hubs.py; ``MODELSCOPE_ENDPOINT`` and
``STUDIO_GIT_HOST``): a sharded model, a download interrupted and resumed from the byte it
reached, a missing file, an unknown name, a wrong checksum, the cache offline. The libraries'
retry counts and waits are lowered here (module constants, in this process) so that a download
that keeps failing fails in a second rather than after their 30 s of backing off."""
import os
import shutil
import sys
from dataclasses import dataclass
from typing import Callable

import pytest

pytest.importorskip("sentencepiece")

from fake_hubs import FakeAIStudio, FakeHub, FakeModelScope  # noqa: E402
from test_chat_sft import FOLDER  # noqa: E402
from wenxin.cli import main  # noqa: E402

NAME = "baidu/Tied-PT"
SHARD = "model-00002-of-00004.safetensors"


@dataclass
class Hub:
    name: str
    library: str
    fake: Callable[..., FakeHub]
    endpoint: str  # the variable its library takes the server from

    def fetched(self, fake: FakeHub, file_name: str):
        """The Range headers of the requests that downloaded ``file_name`` (not AI Studio's 2-byte probe
        for a CDN redirect)."""
        if self.name == "modelscope":
            return [r for m, p, r in fake.requests if m == "GET" and p.endswith(f"FilePath={file_name}")]
        return [r for m, p, r in fake.requests if m == "GET" and p.endswith(f"/media/{file_name}")
                and r != "bytes=0-1"]


HUBS = [Hub("modelscope", "modelscope_hub", FakeModelScope, "MODELSCOPE_ENDPOINT"),
        Hub("aistudio", "aistudio_sdk", FakeAIStudio, "STUDIO_GIT_HOST")]


@pytest.fixture(params=HUBS, ids=[h.name for h in HUBS])
def hub(request, tmp_path, monkeypatch):
    spec: Hub = request.param
    pytest.importorskip(spec.library)
    missing_shard = tmp_path / "missing_shard"
    shutil.copytree(FOLDER, missing_shard)
    os.remove(missing_shard / "model-00003-of-00004.safetensors")
    fake = spec.fake({NAME: FOLDER, "baidu/Missing-Shard": str(missing_shard)})
    monkeypatch.setenv(spec.endpoint, fake.url)
    monkeypatch.setenv("WENXIN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WENXIN_HUB", spec.name)
    if spec.name == "modelscope":
        from modelscope_hub import _download
        monkeypatch.setattr(_download, "DOWNLOAD_RETRY_TIMES", 2)
        monkeypatch.setattr(_download, "DOWNLOAD_RETRY_MAX_DELAY_SECONDS", 0)
        monkeypatch.setattr(_download, "DOWNLOAD_INTEGRITY_RETRY_BACKOFF", 0)
    else:
        import aistudio_sdk.file_download
        import aistudio_sdk.snapshot_download
        reported = []  # the library reports each download to AI Studio's statistics: not from a test
        monkeypatch.setattr(aistudio_sdk.snapshot_download, "post_repo_statistic", lambda *a: reported.append(a))
        monkeypatch.setattr(aistudio_sdk.file_download, "API_FILE_DOWNLOAD_RETRY_TIMES", 1)
        monkeypatch.setattr(aistudio_sdk.file_download, "API_FILE_DOWNLOAD_CHUNK_SIZE", 8192)  # parts smaller than a shard
    fake.spec = spec
    yield fake
    fake.close()


def downloaded(capsys, *args):
    code = main(["download", *args])
    captured = capsys.readouterr()
    return code, captured.out.strip().splitlines()[-1] if captured.out.strip() else "", captured.err


def same_files(folder, source=FOLDER):
    names = sorted(name for name in os.listdir(folder) if not name.startswith("."))  # not the library's bookkeeping
    return names == sorted(os.listdir(source)) and all(
        open(os.path.join(folder, name), "rb").read() == open(os.path.join(source, name), "rb").read()
        for name in os.listdir(source))


def test_a_sharded_model_downloads_by_name_and_the_cache_serves_it_offline(hub, tmp_path, capsys):
    code, folder, err = downloaded(capsys, NAME, "--hub", hub.spec.name)
    assert code == 0, err
    assert folder.startswith(str(tmp_path / "cache" / "hubs" / hub.spec.name)) and same_files(folder)
    for index in range(1, 5):
        assert len(hub.spec.fetched(hub, f"model-0000{index}-of-00004.safetensors")) == 1  # each shard once
    hub.requests.clear()
    code, again, err = downloaded(capsys, NAME, "--offline")  # the hub from $WENXIN_HUB
    assert (code, again, hub.requests) == (0, folder, [])  # the cache alone: not a request
    assert main(["predict", "--model_dir", NAME, "--offline", "--text", "你好"]) == 0
    assert capsys.readouterr().out.startswith("你好\t")


def test_an_interrupted_download_goes_on_from_the_byte_it_reached(hub, capsys):
    hub.cut_after[SHARD], hub.cuts = 40_000, 1  # the connection drops once: the library tries again itself
    code, folder, err = downloaded(capsys, NAME)
    assert code == 0 and same_files(folder), err
    ranges = hub.spec.fetched(hub, SHARD)
    assert len(ranges) == 2 and int(ranges[1].split("=")[1].split("-")[0]) >= 32_768  # from where it stopped
    shutil.rmtree(os.path.join(os.environ["WENXIN_CACHE"], "hubs"))  # the cache, afresh
    hub.requests.clear()
    hub.cut_after[SHARD], hub.cuts = 20_000, 1000  # it keeps dropping: the command stops, and says so
    code, _, err = downloaded(capsys, NAME)
    assert code == 4 and SHARD in err and "run it again: it goes on from what it has" in err and "Traceback" not in err
    reached = hub.spec.fetched(hub, SHARD)
    # the files the stopped run finished (one still in flight when it stopped, as under load, is not)
    others = [name for name in os.listdir(FOLDER) if name != SHARD]
    finished = [name for name in others if os.path.isfile(os.path.join(folder, name)) and
                open(os.path.join(folder, name), "rb").read() == open(os.path.join(FOLDER, name), "rb").read()]
    assert finished, os.listdir(folder) if os.path.isdir(folder) else folder
    hub.cuts = 0  # the network is back: run again
    hub.requests.clear()
    code, again, err = downloaded(capsys, NAME)
    assert code == 0 and again == folder and same_files(folder), err
    assert [name for name in finished if hub.spec.fetched(hub, name)] == []  # the files it had finished are kept
    resumed_from = int(hub.spec.fetched(hub, SHARD)[0].split("=")[1].split("-")[0])
    assert resumed_from >= 16_384 and len(reached) >= 2  # the part it had is kept too


def test_a_wrong_checksum_is_named_and_downloaded_again(hub, capsys):
    shard = "model-00004-of-00004.safetensors"
    hub.corrupt.add(shard)
    code, _, err = downloaded(capsys, NAME)
    assert code == 4 and shard in err and ("Hash mismatch" in err or "SHA-256" in err), err
    hub.corrupt.clear()
    code, folder, err = downloaded(capsys, NAME)
    assert code == 0 and same_files(folder), err


def test_unknown_names_missing_files_and_an_empty_cache_offline_are_one_error_each(hub, capsys):
    title = {"modelscope": "ModelScope", "aistudio": "AI Studio"}[hub.spec.name]
    code, _, err = downloaded(capsys, "baidu/No-Such-Model")
    assert code == 2 and f"baidu/No-Such-Model on {title}: no such model" in err, err
    code, _, err = downloaded(capsys, NAME, "--offline")
    assert code == 2 and "not in the cache" in err and "offline" in err and f"--hub {hub.spec.name}" in err
    assert main(["predict", "--model_dir", "baidu/Missing-Shard", "--text", "你好"]) == 4
    err = capsys.readouterr().err
    assert "model.safetensors.index.json: lists shards that are not in the folder" in err
    assert "model-00003-of-00004.safetensors" in err


@pytest.mark.parametrize("hub_name,module,library", [("huggingface", "huggingface_hub", "huggingface_hub"),
                                                     ("modelscope", "modelscope_hub", "modelscope-hub"),
                                                     ("aistudio", "aistudio_sdk", "aistudio-sdk")])
def test_a_hub_without_its_client_library_says_how_to_install_it(hub_name, module, library, tmp_path, monkeypatch,
                                                                 capsys):
    monkeypatch.setenv("WENXIN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed: importing it fails
    code, _, err = downloaded(capsys, NAME, "--hub", hub_name)
    assert code != 0 and f"needs {library}" in err and 'pip install "wenxin[hub]"' in err and "Traceback" not in err
