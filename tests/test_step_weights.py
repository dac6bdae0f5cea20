"""A generation export holds its weights once on disk (issue 69, point 1, in part): its step
functions' parameters files were byte for byte the same, so one ``steps.pdiparams`` serves them
all; and the predictor runs ``prefill`` as ``prefill_chunk`` after an empty cache, one program's
weights fewer in memory, with the very numbers the ``prefill`` program gives. Older exports, a
parameters file a step, still load and answer the same."""
import json
import os
import shutil

import numpy as np
import pytest

pytest.importorskip("sentencepiece")

from test_chat_sft import FOLDER  # noqa: E402
from wenxin.data.export_bundle import PREPROCESS_FILE, SHARED_PARAMS, seal_export  # noqa: E402
from wenxin.inference.backends import EngineOptions  # noqa: E402
from wenxin.inference.paddle_backend import PaddleBackend  # noqa: E402
from wenxin.inference.predictor import Predictor  # noqa: E402
from wenxin.model_folders import FolderSettings, export_of_folder  # noqa: E402


@pytest.fixture(params=["dynamic", "static"])
def export(request, tmp_path, monkeypatch):
    monkeypatch.setenv("WENXIN_CACHE", str(tmp_path / "cache"))
    return export_of_folder(FOLDER, FolderSettings(graph_mode=request.param))


def test_the_steps_share_one_parameters_file_and_prefill_runs_as_the_chunk_step(export):
    assert sorted(name for name in os.listdir(export) if name.endswith(".pdiparams")) == [SHARED_PARAMS]
    with open(os.path.join(export, PREPROCESS_FILE), encoding="utf-8") as f:
        steps = json.load(f)["steps"]
    assert {name: entry["params"] for name, entry in steps.items()} == {name: SHARED_PARAMS for name in steps}
    predictor = Predictor(export)
    assert sorted(predictor.step_engines) == ["extend", "prefill_chunk"]  # no engine (no weights) for prefill
    ids = np.asarray([[5, 9, 17, 3, 42, 8, 11]], dtype="int64")
    through_chunk = predictor.run_step("prefill", {"ids": ids})
    with open(os.path.join(export, PREPROCESS_FILE), encoding="utf-8") as f:
        meta = json.load(f)
    program = PaddleBackend(export, meta, EngineOptions(False, 1, {"program": "prefill"}))  # its own program
    own = dict(zip(steps["prefill"]["outputs"], program.run({name: ids for name in program.input_names})))
    assert sorted(own) == sorted(through_chunk) == ["cache", "logits", "position"]
    for name, value in own.items():
        assert through_chunk[name].shape == value.shape and np.array_equal(through_chunk[name], value), name


def test_an_older_export_with_a_parameters_file_a_step_loads_and_answers_the_same(export, tmp_path):
    older = str(tmp_path / "older")
    shutil.copytree(export, older)
    with open(os.path.join(older, PREPROCESS_FILE), encoding="utf-8") as f:
        meta = json.load(f)
    for name, entry in meta["steps"].items():  # as exports were written before the steps shared one file
        shutil.copyfile(os.path.join(older, SHARED_PARAMS), os.path.join(older, f"{name}.pdiparams"))
        entry.pop("params")
    os.remove(os.path.join(older, SHARED_PARAMS))
    with open(os.path.join(older, PREPROCESS_FILE), "w", encoding="utf-8") as f:
        json.dump(meta, f)
    seal_export(older)
    rows = [["你好"], ["今天天气很好吗？"]]
    assert Predictor(older).predict(rows) == Predictor(export).predict(rows)
