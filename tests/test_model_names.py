"""Models by name (model.pretrained): a folder, or a name found in PaddleNLP's, AI Studio's or the
Hugging Face Hub's cache, laid out on disk as each writes it, or in wenxin's hub cache; a download
(through wenxin's hubs) only where the task allows it, tested offline against the caches and
against a loopback server answering as ModelScope does, never the network."""
import os
import shutil
import sys

import pytest

from conftest import write_config
from ernie_helpers import make_ernie_model
from test_ernie_tasks import classification, ernie_dir  # noqa: F401 (a fixture)
from wenxin.hubs import model_names
from wenxin.common.errors import ConfigError
from wenxin.config.loader import load_config

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def hub_setting(monkeypatch, name, value):
    """Set a huggingface_hub environment variable (None: unset) as a user would before starting,
    and, where huggingface_hub is already imported (it reads them once, at import: another test
    in this process may have imported it), its constant too."""
    if value is None:
        monkeypatch.delenv(name, raising=False)
    else:
        monkeypatch.setenv(name, value)
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        monkeypatch.setattr(constants, name, value == "1" if name == "HF_HUB_OFFLINE" else value)


@pytest.fixture(autouse=True)
def empty_caches(tmp_path, monkeypatch):
    """Every cache in the test's folder, empty; the Hub offline (never the network)."""
    monkeypatch.setenv("PPNLP_HOME", str(tmp_path / "ppnlp"))
    monkeypatch.setenv("AISTUDIO_CACHE_HOME", str(tmp_path / "aistudio_home"))
    monkeypatch.setenv("WENXIN_CACHE", str(tmp_path / "wenxin_cache"))
    monkeypatch.delenv("WENXIN_HUB", raising=False)
    hub_setting(monkeypatch, "HF_HUB_CACHE", str(tmp_path / "hf_hub"))
    hub_setting(monkeypatch, "HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)


def hub_cache(tmp_path, repo, source):
    """``source``'s files as huggingface_hub caches a snapshot of ``repo``: blobs, a snapshot of
    links to them, and refs/main naming the commit."""
    folder = tmp_path / "hf_hub" / f"models--{repo.replace('/', '--')}"
    snapshot = folder / "snapshots" / COMMIT
    os.makedirs(snapshot)
    os.makedirs(folder / "blobs")
    for name in os.listdir(source):
        blob = folder / "blobs" / f"blob-{name}"
        shutil.copyfile(os.path.join(source, name), blob)
        os.symlink(os.path.relpath(blob, snapshot), snapshot / name)
    os.makedirs(folder / "refs")
    (folder / "refs" / "main").write_text(COMMIT)
    return str(snapshot)


def named_config(ernie_dir, tmp_path, name, **model):  # noqa: F811
    config = classification(ernie_dir, tmp_path, "dynamic", max_steps=1)
    config["model"].pop("encoder_config")
    config["model"].update(pretrained=name, **model)
    config["trainer"].pop("pre_train_model")
    for reader in config["dataset_reader"].values():
        reader["fields"] = [{k: v for k, v in f.items() if k != "vocab_path"} for f in reader["fields"]]
    return config


def resolved(config, tmp_path):
    loaded = load_config(write_config(str(tmp_path / "task.json"), config))
    folder = loaded["model"]["pretrained"]
    assert loaded["model"]["encoder_config"] == folder
    assert [e["params_path"] for e in loaded["trainer"]["checkpoints"]["pre_train_model"]] == [folder]
    assert loaded["dataset_reader"]["train_reader"]["fields"][0]["vocab_path"] == os.path.join(folder, "vocab.txt")
    return folder


def test_a_name_in_paddlenlps_cache(tmp_path, ernie_dir):  # noqa: F811
    shutil.copytree(ernie_dir / "paddlenlp", tmp_path / "ppnlp" / "models" / "ernie-tiny-zh")
    folder = resolved(named_config(ernie_dir, tmp_path, "ernie-tiny-zh"), tmp_path)
    assert folder == str(tmp_path / "ppnlp" / "models" / "ernie-tiny-zh")


def test_an_org_and_name_in_ai_studios_cache_takes_its_newest_commit(tmp_path, ernie_dir):  # noqa: F811
    snapshots = tmp_path / "aistudio_home" / ".cache" / "aistudio" / "models" / "ernie-tiny-zh" / "snapshots"
    shutil.copytree(ernie_dir / "erniekit", snapshots / "master" / "old")
    shutil.copytree(ernie_dir / "paddlenlp", snapshots / "master" / "new")
    os.utime(snapshots / "master" / "old", (1, 1))
    folder = resolved(named_config(ernie_dir, tmp_path, "PaddlePaddle/ernie-tiny-zh"), tmp_path)
    assert folder == str(snapshots / "master" / "new")


def test_an_org_and_name_in_the_hugging_face_cache_through_huggingface_hub(tmp_path, ernie_dir, monkeypatch):  # noqa: F811
    pytest.importorskip("huggingface_hub")
    snapshot = hub_cache(tmp_path, "PaddlePaddle/ernie-tiny-zh", str(ernie_dir / "paddlenlp"))
    hub_setting(monkeypatch, "HF_HUB_OFFLINE", None)  # read with local_files_only: no download is allowed
    assert resolved(named_config(ernie_dir, tmp_path, "PaddlePaddle/ernie-tiny-zh"), tmp_path) == snapshot
    hub_setting(monkeypatch, "HF_HUB_OFFLINE", "1")  # allowed, but offline: huggingface_hub's own cache answers
    config = named_config(ernie_dir, tmp_path, "PaddlePaddle/ernie-tiny-zh", pretrained_download=True)
    assert resolved(config, tmp_path) == snapshot


def test_a_download_that_finds_nothing_offline_says_so(tmp_path, ernie_dir):  # noqa: F811
    pytest.importorskip("huggingface_hub")
    config = named_config(ernie_dir, tmp_path, "PaddlePaddle/ernie-absent", pretrained_download=True)
    with pytest.raises(ConfigError) as info:
        load_config(write_config(str(tmp_path / "task.json"), config))
    first = str(info.value).splitlines()[0]  # (then: model.encoder_config, which the model would have filled)
    assert first.startswith("model.pretrained: model 'PaddlePaddle/ernie-absent' not found: ")
    assert first.endswith(f"not in the Hugging Face Hub's cache; PaddlePaddle/ernie-absent on Hugging Face: not in "
                          f"the cache ({tmp_path / 'wenxin_cache' / 'hubs' / 'huggingface'}) and offline; run it once "
                          f"online (or: wenxin download PaddlePaddle/ernie-absent)")


def test_a_name_found_nowhere_lists_where_it_was_looked_for(tmp_path, ernie_dir):  # noqa: F811
    config = named_config(ernie_dir, tmp_path, "ernie-absent")
    with pytest.raises(ConfigError) as info:
        load_config(write_config(str(tmp_path / "task.json"), config))
    message = str(info.value).splitlines()[0]
    assert message.startswith("model.pretrained: model 'ernie-absent' not found: no folder ernie-absent; "
                              f"not in PaddleNLP's cache ({tmp_path / 'ppnlp' / 'models' / 'ernie-absent'}); "
                              f"not in AI Studio's cache ({tmp_path / 'aistudio_home' / '.cache' / 'aistudio' / 'models'})")
    assert message.endswith("; not in the Hugging Face Hub's cache; not an <org>/<name> a hub holds; set "
                            "model.pretrained_download: true to download it (from the hub $WENXIN_HUB names: "
                            "huggingface, the default, modelscope or aistudio)")


def test_a_classic_ernie_by_name_downloads_from_the_hub_wenxin_hub_names(tmp_path, ernie_dir, monkeypatch):  # noqa: F811
    pytest.importorskip("modelscope_hub")
    from fake_hubs import FakeModelScope
    source = tmp_path / "hub_side"
    shutil.copytree(ernie_dir / "paddlenlp", source)
    (source / "README.md").write_text("a model card")  # not a file a model folder needs: not fetched
    fake = FakeModelScope({"PaddlePaddle/ernie-tiny-zh": str(source)})
    monkeypatch.setenv("MODELSCOPE_ENDPOINT", fake.url)
    monkeypatch.setenv("WENXIN_HUB", "modelscope")
    try:
        with pytest.raises(ConfigError, match="PaddlePaddle/ernie-tiny-zh on ModelScope: not in the cache"):
            resolved(named_config(ernie_dir, tmp_path, "PaddlePaddle/ernie-tiny-zh"), tmp_path)
        assert fake.requests == []  # not allowed to download: not a request
        folder = resolved(named_config(ernie_dir, tmp_path, "PaddlePaddle/ernie-tiny-zh", pretrained_download=True),
                          tmp_path)
        assert folder.startswith(str(tmp_path / "wenxin_cache" / "hubs" / "modelscope"))
        assert sorted(os.listdir(folder)) == sorted(os.listdir(ernie_dir / "paddlenlp"))
        fake.requests.clear()
        assert resolved(named_config(ernie_dir, tmp_path, "PaddlePaddle/ernie-tiny-zh"), tmp_path) == folder
        assert fake.requests == []  # from wenxin's cache now, without pretrained_download
    finally:
        fake.close()


def test_paths_are_folders_only_and_files_are_refused(tmp_path):
    (tmp_path / "weights.pdparams").write_bytes(b"x")
    with pytest.raises(ConfigError, match=r"model.pretrained: weights.pdparams is a file, not a model folder"):
        model_names.resolve_model("weights.pdparams")
    for path in ("./models/ernie", str(tmp_path / "nowhere"), "~/models/x", "a/b/c", "../ernie"):
        with pytest.raises(ConfigError, match=f"model.pretrained: model folder not found: {path}"):
            model_names.resolve_model(path)
    os.makedirs(tmp_path / "ppnlp" / "models" / "local")
    os.makedirs(tmp_path / "local")  # a folder by that name wins over the cache
    assert model_names.resolve_model("local") == "local"


def test_the_resolved_model_trains_as_its_folder_does(tmp_path, ernie_dir):  # noqa: F811
    from conftest import build
    make_ernie_model(str(tmp_path / "ppnlp" / "models" / "ernie-seed-3"), "paddlenlp", seed=3)
    trainer = build(named_config(ernie_dir, tmp_path / "a", "ernie-seed-3"), tmp_path)
    explicit = build(named_config(ernie_dir, tmp_path / "b", str(tmp_path / "ppnlp" / "models" / "ernie-seed-3")),
                     tmp_path)
    for name, value in explicit.engine.model_state_dict().items():
        if name.startswith("ernie."):
            assert (trainer.engine.model_state_dict()[name].numpy() == value.numpy()).all(), name
