"""SIGKILL at random moments (mid-step, mid-save, mid-epoch), resume, and compare with an
uninterrupted run: the final parameters must be bit-identical, in dynamic and static mode, and
with a streamed train reader (TSV, JSON lines and a Hugging Face dataset)."""
import json
import os
import random

import pytest

from conftest import resumed_run_matches_reference, saved_checkpoint, task_config

STEPS = 300


def run_config(data_dir, out, mode):
    config = task_config(data_dir, out, max_steps=STEPS, save_model_step=7, keep_checkpoint_max=2,
                         train_log_step=1000, is_eval_dev=0, is_eval_test=0, resume="auto")
    config["model"]["dropout"] = 0.3
    train = config["dataset_reader"]["train_reader"]
    if mode.endswith("streaming"):  # batches read from the files while training, through a shuffle buffer
        train["config"].update(streaming=True, shuffle_buffer=40)
    if mode == "hf_dataset streaming":  # the training rows as a Hugging Face dataset saved in 3 shards
        import datasets
        with open(train["config"]["data_path"], encoding="utf-8") as f:
            rows = [line.rstrip("\n").split("\t") for line in f]
        saved = os.path.join(data_dir, "train_dataset")
        if not os.path.isdir(saved):
            datasets.Dataset.from_dict({"text_a": [t for t, _ in rows], "label": [label for _, label in rows]}
                                       ).save_to_disk(saved, num_shards=3)
        train["config"].update(data_path=saved, format="hf_dataset")
    if mode == "jsonl streaming":  # the training rows as JSON lines
        jsonl = os.path.join(data_dir, "train.jsonl")
        with open(train["config"]["data_path"], encoding="utf-8") as f, open(jsonl, "w", encoding="utf-8") as out_file:
            for line in f:
                text, label = line.rstrip("\n").split("\t")
                out_file.write(json.dumps({"label": label, "text_a": text}, ensure_ascii=False) + "\n")
        train["config"].update(data_path=jsonl, format="jsonl")
    if mode == "static":
        config["model"]["is_dygraph"] = 0
        config["trainer"]["type"] = "CustomStaticTrainer"
    return config


@pytest.mark.parametrize("mode", ["dynamic", "static", "streaming", pytest.param("jsonl streaming", marks=pytest.mark.slow),
                                  pytest.param("hf_dataset streaming", marks=pytest.mark.slow)])
def test_sigkill_at_random_moments_then_resume_is_exact(tmp_path, data_dir, mode):
    resumed_run_matches_reference(tmp_path, lambda out: run_config(data_dir, out, mode), STEPS, random.Random(1234),
                                  runs=4, min_kills=2)


def test_output_path_that_cannot_be_created(tmp_path, data_dir):
    from conftest import build
    from wenxin.common.errors import ConfigError
    blocker = tmp_path / "file"
    blocker.write_text("precious", encoding="utf-8")
    with pytest.raises(ConfigError, match=f"trainer.output_path: cannot create {blocker}/out"):
        build(task_config(data_dir, str(blocker / "out")), tmp_path)
    assert blocker.read_text(encoding="utf-8") == "precious"


def test_nan_guard_with_amp_skips_and_stops(tmp_path, data_dir):
    from conftest import build
    from wenxin.common.constants import InstanceName, Phase
    from wenxin.common.errors import TrainingError
    config = task_config(data_dir, str(tmp_path / "out"), use_amp=True, max_steps=20, save_model_step=4,
                         is_eval_dev=0, is_eval_test=0, max_nan_steps=3)
    trainer = build(config, tmp_path)
    forward = trainer.model.forward

    def poisoned(fields, phase):
        outputs = forward(fields, phase)
        if phase == Phase.TRAINING and trainer.state.global_step >= 5:
            outputs[InstanceName.LOSS] = outputs[InstanceName.LOSS] * float("inf")
        return outputs

    trainer.model.forward = poisoned
    with pytest.raises(TrainingError, match="NaN/Inf for 3 step\\(s\\) in a row at step 8"):
        trainer.do_train()
    assert saved_checkpoint(os.path.join(str(tmp_path / "out"), "checkpoints")) == "step_4"
