"""The trainer's loop, hooks, evaluation, checkpoints, resume and signal handling on the numpy
engine (``fake_engine``): real readers and real checkpoint files, no Paddle operation."""
import glob
import json
import os
import signal

import numpy as np
import pytest
from fake_engine import numpy_trainer
from wenxin.common.errors import CheckpointError, ConfigError, TrainingError
from wenxin.controller.hooks import HookBase

from conftest import task_config, write_sentence_splits


@pytest.fixture
def data(tmp_path):
    return write_sentence_splits(str(tmp_path / "data"), 96, 40, 40)


def config(data, out, **trainer):
    c = task_config(data, str(out), **{"type": "CustomTrainer", "train_log_step": 1000, "is_eval_test": 0,
                                       **trainer})
    c["model"]["optimization"]["learning_rate"] = 2.0
    return c


def params_of(trainer):
    return {k: np.asarray(v) for k, v in trainer.engine.model_state_dict().items()}


def assert_same(a, b):
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


class Recorder(HookBase):
    """Every event, with the step it came at."""

    def __init__(self):
        self.events = []

    def _add(self, name, *args):
        self.events.append((name, self.trainer.state.global_step, *args))

    def before_train(self): self._add("before_train")
    def after_train(self): self._add("after_train")
    def before_epoch(self): self._add("before_epoch")
    def after_epoch(self): self._add("after_epoch")
    def before_step(self): self._add("before_step")
    def after_step(self): self._add("after_step")
    def before_eval(self, reader_name): self._add("before_eval", reader_name)
    def after_eval(self, reader_name, metrics): self._add("after_eval", reader_name)
    def after_save(self, name, path): self._add("after_save", name)


class StopAt(HookBase):
    """Raises (as a crash would end the process) once ``step`` steps are done."""

    def __init__(self, step, error=RuntimeError):
        self.step, self.error = step, error

    def after_step(self):
        if self.trainer.state.global_step == self.step:
            raise self.error(f"stopped at step {self.step}")


def test_events_come_in_order_and_the_numpy_model_learns(data, tmp_path):
    trainer = numpy_trainer(config(data, tmp_path / "out", epoch=2, eval_step=0, save_model_step=0), tmp_path)
    recorder = Recorder()
    trainer.register_hook(recorder)
    metrics = trainer.do_train()
    steps = trainer.state.steps_per_epoch
    assert steps == 6 and trainer.state.global_step == 12
    names = [e[0] for e in recorder.events]
    assert names[0] == "before_train" and names[-1] == "after_train"
    assert names.count("before_step") == names.count("after_step") == 12
    assert [e[1] for e in recorder.events if e[0] == "after_epoch"] == [6, 12]
    assert ("after_save", 6, "step_6") in recorder.events and ("after_save", 12, "step_12") in recorder.events
    # each epoch: its steps, then the epoch end's evaluation and checkpoint
    first_epoch = names[:names.index("after_epoch") + 1]
    assert first_epoch == ["before_train", "before_epoch"] + ["before_step", "after_step"] * 6 + \
        ["before_eval", "after_eval", "after_save", "after_epoch"]
    assert metrics["dev_reader"]["loss"] < np.log(2) and metrics["dev_reader"]["examples"] == 40  # it learned


def test_hooks_run_by_priority_and_a_task_hook_sees_the_default_hooks_work(data, tmp_path):
    order = []

    class Tag(HookBase):
        def __init__(self, tag):
            self.tag = tag

        def after_step(self):
            order.append((self.tag, self.trainer.state.global_step, self.trainer.lr_scheduler.last_epoch))

    trainer = numpy_trainer(config(data, tmp_path / "out", max_steps=2, is_eval_dev=0), tmp_path)
    trainer.register_hook(Tag("low"), priority=90)
    trainer.register_hook(Tag("high"), priority=0)
    trainer.do_train()
    # the LR schedule (priority 10) steps between the two: a higher priority runs first
    assert order == [("high", 1, 0), ("low", 1, 1), ("high", 2, 1), ("low", 2, 2)]


def test_a_crashed_run_resumes_to_the_same_parameters_and_optimizer_state(data, tmp_path):
    """Checkpoints every 4 steps; a crash after step 10 loses steps 9-10; resume: auto continues
    from step 8 and ends bit for bit where an uninterrupted run ends."""
    def cfg(out):
        return config(data, tmp_path / out, max_steps=18, save_model_step=4, eval_step=6, resume="auto")

    reference = numpy_trainer(cfg("reference"), tmp_path)
    reference.do_train()
    crashed = numpy_trainer(cfg("crashed"), tmp_path)
    crashed.register_hook(StopAt(10))
    with pytest.raises(RuntimeError, match="stopped at step 10"):
        crashed.do_train()
    resumed = numpy_trainer(cfg("crashed"), tmp_path)
    assert resumed.state.global_step == 8
    resumed.do_train()
    assert resumed.state.global_step == 18
    assert_same(params_of(reference), params_of(resumed))
    assert_same(reference.engine.optimizer_state_dict(), resumed.engine.optimizer_state_dict())
    assert reference.lr_scheduler.last_epoch == resumed.lr_scheduler.last_epoch == 18
    assert reference.state.metrics["dev_reader"] == resumed.state.metrics["dev_reader"]


def test_sigterm_saves_the_current_step_and_the_run_continues_from_it(data, tmp_path):
    class Terminate(HookBase):
        def after_step(self):
            if self.trainer.state.global_step == 7:
                os.kill(os.getpid(), signal.SIGTERM)

    def cfg(out):
        return config(data, tmp_path / out, max_steps=15, save_model_step=100, is_eval_dev=0, resume="auto")

    reference = numpy_trainer(cfg("reference"), tmp_path)
    reference.do_train()
    stopped = numpy_trainer(cfg("stopped"), tmp_path)
    stopped.register_hook(Terminate())
    stopped.do_train()
    assert stopped.state.interrupted and stopped.state.global_step == 7
    assert "received SIGTERM" in stopped.state.stop_reason
    assert signal.getsignal(signal.SIGTERM) is not None  # the handler is put back
    assert os.path.isdir(tmp_path / "stopped" / "checkpoints" / "step_7")
    resumed = numpy_trainer(cfg("stopped"), tmp_path)
    assert resumed.state.global_step == 7
    resumed.do_train()
    assert_same(params_of(reference), params_of(resumed))


def test_sigterm_during_an_evaluation_stops_it_and_the_resumed_run_evaluates_that_step_first(data, tmp_path):
    """The signal arrives as step 6's dev evaluation starts: the evaluation ends at its next batch
    (not after the whole reader), the checkpoint of step 6 says it is pending, and the resumed run
    evaluates step 6 before training on, so its dev scores, best checkpoint and weights are the
    uninterrupted run's."""
    class TerminateInEvaluation(HookBase):
        def before_eval(self, reader_name):
            if self.trainer.state.global_step == 6 and not self.trainer.state.interrupted:
                os.kill(os.getpid(), signal.SIGTERM)

    class DevScores(HookBase):
        def __init__(self):
            self.scores = {}

        def after_eval(self, reader_name, metrics):
            self.scores[self.trainer.state.global_step] = metrics["loss"]

    def cfg(out):
        return config(data, tmp_path / out, max_steps=12, eval_step=3, save_model_step=100, metric="loss",
                      metric_mode="min", resume="auto", eval_batch_size=4)

    reference = numpy_trainer(cfg("reference"), tmp_path)
    expected = DevScores()
    reference.register_hook(expected)
    reference.do_train()
    stopped = numpy_trainer(cfg("stopped"), tmp_path)
    first = DevScores()
    stopped.register_hook(first)
    stopped.register_hook(TerminateInEvaluation())
    evaluated = []
    run_eval = stopped.evaluator.eval_step
    stopped.evaluator.eval_step = lambda *a, **k: evaluated.append(1) or run_eval(*a, **k)  # count the batches run
    stopped.do_train()
    assert stopped.state.interrupted and stopped.state.global_step == 6 and 6 not in first.scores
    assert len(evaluated) == 1 + 10  # the preflight's batch, step 3's (40 rows in batches of 4), none of step 6's
    saved = json.load(open(tmp_path / "stopped" / "checkpoints" / "step_6" / "trainer_state.json"))
    assert saved["evaluation_pending"] is True
    resumed = numpy_trainer(cfg("stopped"), tmp_path)
    second = DevScores()
    resumed.register_hook(second)
    resumed.do_train()
    assert {**first.scores, **second.scores} == expected.scores and min(second.scores) == 6
    assert resumed.state.best_step == reference.state.best_step
    assert_same(params_of(reference), params_of(resumed))


def test_nonfinite_steps_skip_their_update_and_too_many_stop_the_run(data, tmp_path):
    trainer = numpy_trainer(config(data, tmp_path / "out", max_steps=10, is_eval_dev=0, max_nan_steps=2), tmp_path)
    trainer.engine.poisoned_steps = {4}
    snapshots = {}

    class Snapshot(HookBase):
        def after_step(self):
            snapshots[self.trainer.state.global_step] = params_of(self.trainer)

    trainer.register_hook(Snapshot())
    trainer.do_train()
    assert_same(snapshots[3], snapshots[4])  # step 4's update was skipped
    assert not np.array_equal(snapshots[4]["out.bias"], snapshots[5]["out.bias"])
    stopping = numpy_trainer(config(data, tmp_path / "out2", max_steps=10, is_eval_dev=0, max_nan_steps=2), tmp_path)
    stopping.engine.poisoned_steps = {5, 6}
    with pytest.raises(TrainingError, match="2"):
        stopping.do_train()
    assert not glob.glob(str(tmp_path / "out2" / "checkpoints" / "step_*"))  # nothing poisoned was saved


def test_the_best_checkpoints_early_stopping_and_the_best_weights_at_the_end(data, tmp_path):
    trainer = numpy_trainer(config(data, tmp_path / "out", epoch=6, eval_step=2, save_model_step=2, save_top_k=2,
                                   metric="loss", metric_mode="min", load_best_at_end=True,
                                   early_stopping={"patience": 2}), tmp_path)
    trainer.engine.lr_scheduler.base = 200.0  # far too large: the dev loss soon rises again
    losses = {}

    class DevLoss(HookBase):
        def after_eval(self, reader_name, metrics):
            if reader_name == "dev_reader":
                losses.setdefault(self.trainer.state.global_step, metrics["loss"])

    trainer.register_hook(DevLoss())
    trainer.do_train()
    best_step = min(losses, key=losses.get)
    assert trainer.state.should_stop and trainer.state.global_step < 36  # stopped early
    state = json.load(open(tmp_path / "out" / "checkpoints" / "best" / "trainer_state.json"))
    assert state["global_step"] == best_step
    top = sorted(os.path.basename(p) for p in glob.glob(str(tmp_path / "out" / "checkpoints" / "top_step_*")))
    assert top == sorted(f"top_step_{s}" for s in sorted(losses, key=losses.get)[:2])
    from conftest import checkpoint_params
    assert_same(checkpoint_params(tmp_path / "out" / "checkpoints" / "best"), params_of(trainer))  # loaded at the end


def test_resume_auto_passes_over_a_damaged_newest_checkpoint(data, tmp_path):
    def cfg():
        return config(data, tmp_path / "out", max_steps=12, save_model_step=4, is_eval_dev=0, resume="auto")

    reference = numpy_trainer(config(data, tmp_path / "ref", max_steps=12, is_eval_dev=0), tmp_path)
    reference.do_train()
    first = numpy_trainer(cfg(), tmp_path)
    first.register_hook(StopAt(9))
    with pytest.raises(RuntimeError):
        first.do_train()
    model_file = glob.glob(str(tmp_path / "out" / "checkpoints" / "step_8" / "model*"))[0]
    with open(model_file, "r+b") as f:
        f.seek(-8, os.SEEK_END)
        f.write(b"\x00" * 8)  # flipped bytes in the newest checkpoint
    resumed = numpy_trainer(cfg(), tmp_path)
    assert resumed.state.global_step == 4  # the previous good one
    resumed.do_train()
    assert_same(params_of(reference), params_of(resumed))


def test_a_checkpoint_of_another_run_or_of_a_finished_one(data, tmp_path):
    trainer = numpy_trainer(config(data, tmp_path / "out", max_steps=4, is_eval_dev=0), tmp_path)
    trainer.do_train()
    again = numpy_trainer(config(data, tmp_path / "out", max_steps=4, is_eval_dev=0, resume="auto"), tmp_path)
    assert again.state.finished and again.do_train() == again.state.metrics  # nothing to train
    with pytest.raises(ConfigError, match="already holds checkpoints of an earlier run"):
        numpy_trainer(config(data, tmp_path / "out", max_steps=4), tmp_path)
    other = config(data, tmp_path / "other", max_steps=4, is_eval_dev=0,
                   load_checkpoint=str(tmp_path / "out" / "checkpoints" / "step_4"))
    other["model"]["optimization"]["optimizer"] = "sgd"
    with pytest.raises(CheckpointError, match="this checkpoint is of another run; differences:\n  "
                                              "model.optimization.optimizer: checkpoint 'adamw', now 'sgd'"):
        numpy_trainer(other, tmp_path)


def test_gradient_accumulation_of_two_equals_a_batch_twice_the_size(data, tmp_path):
    small = config(data, tmp_path / "small", max_steps=6, is_eval_dev=0, gradient_accumulation_steps=2)
    large = config(data, tmp_path / "large", max_steps=6, is_eval_dev=0)
    for c in (small, large):
        c["dataset_reader"]["train_reader"]["config"]["shuffle"] = False
    large["dataset_reader"]["train_reader"]["config"]["batch_size"] = 32
    a, b = numpy_trainer(small, tmp_path), numpy_trainer(large, tmp_path)
    a.do_train()
    b.do_train()
    for name, value in params_of(b).items():
        np.testing.assert_allclose(params_of(a)[name], value, rtol=1e-12, atol=1e-15, err_msg=name)
