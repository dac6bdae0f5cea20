"""Tracker hooks, each checked with its own library's reader: TensorBoard's event reader,
MLflow's client, and wandb's offline run files read with wandb's own record type."""
import glob
import json
import os
import struct
import sys
import zlib

import pytest

from conftest import build, run_script, task_config, write_config


def records(out):
    with open(os.path.join(out, "logs", "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def tracked_config(data_dir, out, hook, **trainer):
    return task_config(data_dir, out, max_steps=6, eval_step=3, train_log_step=2, save_model_step=3,
                       hooks=[hook], **trainer)


def test_tensorboard_events_hold_every_record_the_config_and_the_final_metrics(tmp_path, data_dir):
    pytest.importorskip("tensorboardX")
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    out = str(tmp_path / "out")
    proc = run_script(tmp_path, ["--param_path", write_config(str(tmp_path / "task.json"),
                                                              tracked_config(data_dir, out, {"type": "TensorBoardHook"}))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = event_accumulator.EventAccumulator(os.path.join(out, "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    logged = records(out)
    for tag, name in (("train", "loss"), ("train", "lr"), ("dev", "acc"), ("test", "f1")):
        expected = [(r["step"], r[name]) for r in logged if r["tag"] == tag]
        assert expected
        got = [(e.step, e.value) for e in events.Scalars(f"{tag}/{name}")]
        assert [s for s, _ in got] == [s for s, _ in expected]
        assert [v for _, v in got] == pytest.approx([v for _, v in expected], rel=1e-6)
    final = {r["tag"]: r for r in logged if r["step"] == 6 and r["tag"] in ("dev", "test")}
    assert events.Scalars("final/dev_reader/acc")[0].value == pytest.approx(final["dev"]["acc"], rel=1e-6)
    text = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode("utf-8")
    assert '"type": "BowClassification"' in text


@pytest.mark.slow
def test_mlflow_run_holds_params_metrics_and_continues_after_a_resume(tmp_path, data_dir):
    mlflow = pytest.importorskip("mlflow")
    out = str(tmp_path / "out")
    uri = f"sqlite:///{out}/mlflow.db"  # the default store
    hook = {"type": "MLflowHook", "params": {"experiment": "tests"}}
    config = tracked_config(data_dir, out, hook, resume="auto")
    config["trainer"]["max_steps"] = 3
    assert run_script(tmp_path, ["--param_path", write_config(str(tmp_path / "a.json"), config)]).returncode == 0
    config["trainer"]["max_steps"] = 6  # the same run, resumed from step 3
    proc = run_script(tmp_path, ["--param_path", write_config(str(tmp_path / "b.json"), config)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = mlflow.tracking.MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("tests").experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    run = runs[0]
    assert run.data.params["model.type"] == "BowClassification"
    assert run.data.params["trainer.max_steps"] == "3"  # MLflow keeps a parameter's first value
    assert "keeps the first values of trainer.max_steps" in proc.stdout + proc.stderr
    logged = records(out)
    for tag, name in (("train", "loss"), ("dev", "acc")):
        expected = sorted({r["step"]: r[name] for r in logged if r["tag"] == tag}.items())
        history = sorted({m.step: m.value for m in client.get_metric_history(run.info.run_id, f"{tag}/{name}")}.items())
        assert [s for s, _ in history] == [s for s, _ in expected]
        assert [v for _, v in history] == pytest.approx([v for _, v in expected], rel=1e-9)
    assert "final/dev_reader/acc" in run.data.metrics
    artifact = client.download_artifacts(run.info.run_id, "config.json", str(tmp_path / "artifacts"))
    resolved = json.load(open(artifact, encoding="utf-8"))
    # the artifacts are in the output folder, nothing in the working folder
    assert client.get_experiment_by_name("tests").artifact_location.startswith(f"file://{out}/mlflow-artifacts")
    assert not os.path.exists(tmp_path / "mlruns")
    assert resolved["model"]["type"] == "BowClassification" and resolved["trainer"]["max_steps"] == 6


def wandb_records(path):
    """The records of a wandb run file (``run-<id>.wandb``). wandb 0.31 has no Python reader of
    them (its writer is Go), so this reads the format: a 7-byte header (``:W&B``, magic 0xBEE1,
    version 0), then LevelDB's log format (32 KiB blocks of chunks with a CRC-32 of the chunk
    type and data, a 2-byte length and a type: full, first, middle or last), each record a
    protobuf ``wandb_internal_pb2.Record``."""
    from wandb.proto import wandb_internal_pb2
    with open(path, "rb") as f:
        data = f.read()
    assert data[:7] == b":W&B" + struct.pack("<HB", 0xBEE1, 0)
    block, records, pending, pos = 32768, [], b"", 7
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # too little room for a chunk header: the block's padding
            pos += block - pos % block
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk = data[pos + 7:pos + 7 + length]
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) == crc, (path, pos)
        pos += 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):  # full, last
            records.append(wandb_internal_pb2.Record.FromString(pending))
    return records


def wandb_items(items):
    return {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items}


@pytest.mark.slow
def test_wandb_offline_run_holds_the_config_every_record_and_the_final_metrics_across_a_resume(tmp_path, data_dir):
    pytest.importorskip("wandb")
    out = str(tmp_path / "out")
    config = tracked_config(data_dir, out, {"type": "WandbHook", "params": {"project": "tests"}}, resume="auto")
    config["trainer"]["max_steps"] = 3
    first = run_script(tmp_path, ["--param_path", write_config(str(tmp_path / "a.json"), config)])
    assert first.returncode == 0, first.stderr[-3000:]
    config["trainer"]["max_steps"] = 6  # resumed from step 3: the same run id, a second offline folder
    proc = run_script(tmp_path, ["--param_path", write_config(str(tmp_path / "b.json"), config)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = sorted(glob.glob(os.path.join(out, "wandb", "offline-run-*", "run-*.wandb")))
    assert len(files) == 2 and len({os.path.basename(f) for f in files}) == 1  # one run id
    runs = [wandb_records(f) for f in files]  # in start order, as `wandb sync` joins them
    history, summary, configs = {}, {}, []
    for run_records in runs:
        kinds = [r.WhichOneof("record_type") for r in run_records]
        run = run_records[kinds.index("run")].run
        assert run.project == "tests" and run.run_id == os.path.basename(files[0])[4:-6]
        configs.append({})
        for r in run_records:
            kind = r.WhichOneof("record_type")
            if kind == "history":
                history.update({(r.history.step.num, k): v for k, v in wandb_items(r.history.item).items()})
            elif kind == "config":
                configs[-1].update(wandb_items(r.config.update))
            elif kind == "summary":
                summary.update(wandb_items(r.summary.update))
        assert run_records[kinds.index("exit")].exit.exit_code == 0
    assert [c["trainer"]["max_steps"] for c in configs] == [3, 6]  # each start's resolved config
    assert configs[1]["model"]["type"] == "BowClassification"
    logged = records(out)
    for tag, name in (("train", "loss"), ("train", "lr"), ("dev", "acc"), ("test", "f1")):
        expected = {r["step"]: r[name] for r in logged if r["tag"] == tag}
        got = {step: v for (step, key), v in history.items() if key == f"{tag}/{name}"}
        assert sorted(got) == sorted(expected)
        assert [got[s] for s in sorted(got)] == pytest.approx([expected[s] for s in sorted(expected)], rel=1e-9)
    final_dev = [r for r in logged if r["tag"] == "dev" and r["step"] == 6][-1]
    assert summary["final/dev_reader/acc"] == pytest.approx(final_dev["acc"], rel=1e-9)
    assert not os.path.exists(tmp_path / "wandb")  # nothing in the working folder


@pytest.mark.parametrize("hook,module,extra", [("TensorBoardHook", "tensorboardX", "tensorboard"),
                                               ("MLflowHook", "mlflow", "mlflow"),
                                               ("WandbHook", "wandb", "wandb")])
def test_a_tracker_without_its_library_is_one_error_naming_the_extra(tmp_path, data_dir, monkeypatch, hook,
                                                                     module, extra):
    from wenxin.common.errors import ConfigError
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if it were not installed
    with pytest.raises(ConfigError, match=rf"trainer.hooks\[0\]: {hook} needs the {module} package: "
                                          rf"pip install \"wenxin\[{extra}\]\""):
        build(tracked_config(data_dir, str(tmp_path / "out"), {"type": hook}), tmp_path)
