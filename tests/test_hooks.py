"""Hook ordering, configured hooks, early stopping and the NaN guard."""
import os

import numpy as np
import pytest

from conftest import build, checkpoint_params, tabular_config, task_config
from wenxin.common.constants import InstanceName, Phase
from wenxin.common.errors import TrainingError
from wenxin.controller.hooks import HookBase, HookList, Priority


class Recorder(HookBase):
    def __init__(self, name, log, priority):
        self.name, self.log, self.priority = name, log, priority

    def after_step(self):
        self.log.append(self.name)


def test_hooks_run_in_priority_order_stable_for_ties():
    log = []
    hooks = HookList()
    hooks.add(Recorder("normal-1", log, Priority.NORMAL))
    hooks.add(Recorder("low", log, Priority.LOW))
    hooks.add(Recorder("first", log, Priority.NORMAL), priority=Priority.HIGHEST)
    hooks.add(Recorder("normal-2", log, Priority.NORMAL))
    hooks.call("after_step")
    assert log == ["first", "normal-1", "normal-2", "low"]


def test_events_call_only_the_hooks_that_handle_them(monkeypatch):
    log = []

    class StepOnly(HookBase):
        def after_step(self):
            log.append("step")

    class Interval(Recorder):  # inherits its handler from a subclass of HookBase
        pass

    hooks = HookList()
    hooks.add(StepOnly())
    hooks.add(Interval("interval", log, Priority.LOW))
    hooks.add(HookBase())

    def never(self, *args):
        raise AssertionError("an event a hook does not handle was dispatched to it")

    for event in ("before_step", "after_eval", "after_step"):  # HookBase's own no-ops
        monkeypatch.setattr(HookBase, event, never)
    hooks.call("after_step")
    hooks.call("before_step")
    hooks.call("after_eval", "dev_reader", {})
    assert log == ["step", "interval"]
    with pytest.raises(KeyError):
        hooks.call("after_stpe")  # a misspelt event is an error, not a silent no-op


def test_default_hooks_and_event_order_in_a_run(tmp_path, data_dir):
    events = []

    class Spy(HookBase):
        priority = Priority.LOWEST

        def before_train(self): events.append("before_train")
        def before_epoch(self): events.append("before_epoch")
        def after_epoch(self): events.append("after_epoch")
        def after_step(self): events.append(f"step{self.trainer.state.global_step}")
        def after_eval(self, name, metrics): events.append(f"eval:{name}")
        def after_save(self, name, path): events.append(f"save:{name}")
        def after_train(self): events.append("after_train")

    config = task_config(data_dir, str(tmp_path / "out"), max_steps=3, eval_step=2, save_model_step=2,
                         is_eval_test=0)
    config["dataset_reader"]["train_reader"]["config"]["batch_size"] = 120  # 2 steps per epoch
    trainer = build(config, tmp_path)
    trainer.register_hook(Spy())
    names = [type(h).__name__ for h in trainer.hooks.hooks]
    assert names == ["IterationTimerHook", "LRSchedulerHook", "NaNGuardHook", "EvaluationHook",
                     "LoggerHook", "CheckpointHook", "Spy"]
    trainer.do_train()
    # within one event hooks run by priority: the checkpoint hook (70) saves "best" from its
    # after_eval before the spy (100) sees the eval; after_step saves step_2 before the spy's step
    second_best = ["save:best"] if trainer.state.best_step == 3 else []
    assert events == ["before_train", "before_epoch", "step1",
                      "save:best", "eval:dev_reader", "save:step_2", "step2", "after_epoch",
                      "before_epoch", "step3",
                      *second_best, "eval:dev_reader", "save:step_3", "after_train"]


@pytest.mark.parametrize("key", ["trainer.early_stopping", "trainer.hooks"])
def test_early_stopping_from_config(tmp_path, data_dir, key):
    settings = {"patience": 2, "min_delta": 10.0}
    where = {"early_stopping": settings} if key == "trainer.early_stopping" else \
        {"hooks": [{"type": "EarlyStoppingHook", "params": settings}]}
    config = task_config(data_dir, str(tmp_path / "out"), max_steps=40, eval_step=2, is_eval_test=0, **where)
    trainer = build(config, tmp_path)
    trainer.do_train()
    # first eval sets the best; no later eval improves by 10: stops at the third eval
    assert trainer.state.global_step == 6
    assert "early stopping" in trainer.state.stop_reason
    assert os.path.isdir(os.path.join(str(tmp_path / "out"), "checkpoints", "step_6"))


def test_early_stopping_key_errors_name_it(tmp_path, data_dir):
    from wenxin.common.errors import ConfigError
    config = task_config(data_dir, str(tmp_path / "a"), max_steps=4, early_stopping={"patience": 0})
    with pytest.raises(ConfigError, match="trainer.early_stopping.patience: 0 is below the minimum 1"):
        build(config, tmp_path)
    config = task_config(data_dir, str(tmp_path / "b"), max_steps=4, early_stopping={"metric": "bleu"})
    with pytest.raises(ConfigError, match="trainer.evaluation.early_stopping: EarlyStoppingHook metric 'bleu' is not a dev metric"):
        build(config, tmp_path).do_train()  # found on one dev batch, before the first step
    config = task_config(data_dir, str(tmp_path / "c"), max_steps=4, early_stopping={},
                         hooks=[{"type": "EarlyStoppingHook"}])
    with pytest.raises(ConfigError, match="trainer.evaluation.early_stopping: set, and an EarlyStoppingHook in trainer.hooks too"):
        build(config, tmp_path)


def test_nan_guard_skips_bad_updates_and_stops(tmp_path, data_dir):
    out = str(tmp_path / "out")
    config = task_config(data_dir, out, max_steps=20, save_model_step=5, is_eval_dev=0, is_eval_test=0,
                         max_nan_steps=2)
    trainer = build(config, tmp_path)
    forward = trainer.model.forward
    snapshot = {}

    def poisoned(fields, phase):
        outputs = forward(fields, phase)
        if phase == Phase.TRAINING and trainer.state.global_step >= 6:
            if not snapshot:
                snapshot.update({k: v.numpy().copy() for k, v in trainer.model.state_dict().items()})
            outputs[InstanceName.LOSS] = outputs[InstanceName.LOSS] * float("nan")
        return outputs

    trainer.model.forward = poisoned
    with pytest.raises(TrainingError) as info:
        trainer.do_train()
    message = str(info.value)
    assert "NaN/Inf for 2 step(s) in a row at step 8" in message
    assert message.count(os.path.join(out, "checkpoints", "step_5")) == 1
    for name, value in trainer.model.state_dict().items():  # bad updates were skipped
        np.testing.assert_array_equal(value.numpy(), snapshot[name])
    assert sorted(os.listdir(os.path.join(out, "checkpoints"))) == ["index.json", "step_5"]


def test_load_best_at_end_restores_best_weights(tmp_path, data_dir):
    out = str(tmp_path / "out")
    config = task_config(data_dir, out, epoch=3, eval_step=5, load_best_at_end=True)
    config["model"]["optimization"]["learning_rate"] = 0.05
    trainer = build(config, tmp_path)
    captured = {}

    class Capture(HookBase):
        priority = Priority.VERY_LOW  # after the checkpoint hook, before LoadBestModelHook

        def after_train(self):
            captured["final"] = {k: v.numpy().copy() for k, v in trainer.model.state_dict().items()}

    trainer.register_hook(Capture())
    metrics = trainer.do_train()
    best = checkpoint_params(os.path.join(out, "checkpoints", "best"))
    # deterministic run whose dev accuracy peaks before the end, so there is something to restore
    assert trainer.state.best_step != trainer.state.global_step
    for name, value in trainer.model.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), np.asarray(best[name]))
    assert any(not np.array_equal(captured["final"][n], np.asarray(best[n])) for n in best)
    final_ckpt = checkpoint_params(os.path.join(out, "checkpoints", f"step_{trainer.state.global_step}"))
    for name, value in captured["final"].items():  # the step checkpoint keeps the final weights
        np.testing.assert_array_equal(np.asarray(final_ckpt[name]), value)
    assert metrics["dev_reader"][trainer.trainer_config["evaluation"]["metric"]] == trainer.state.best_metric
    import json
    tags = [json.loads(line)["tag"] for line in open(os.path.join(out, "logs", "metrics.jsonl"))]
    assert tags[-2:] == ["best_dev", "best_test"]


def test_progress_bar_draws_on_request_and_stays_off_without_a_terminal(tmp_path, data_dir, capsys):
    config = task_config(data_dir, str(tmp_path / "on"), max_steps=20, progress_bar="on")
    build(config, tmp_path).do_train()
    err = capsys.readouterr().err
    assert "[train] 100%|" in err and "20/20" in err and "it/s" in err
    assert "[dev]" in err  # the evaluation bar (erased once evaluation ends)
    config = task_config(data_dir, str(tmp_path / "auto"), max_steps=20)  # auto; pytest's stderr is no tty
    build(config, tmp_path).do_train()
    assert "it/s" not in capsys.readouterr().err


def test_progress_bar_redraws_at_most_every_interval():
    import io
    from wenxin.common.progress import ProgressBar
    stream = io.StringIO()
    now = [100.0]
    bar = ProgressBar(1000, "train", stream=stream, min_interval=0.2, clock=lambda: now[0])
    calls = []
    for step in range(1, 1001):
        now[0] += 0.001  # 1 ms a step: 1 s in all, so a redraw every 200 steps
        bar.update(step, lambda step=step: calls.append(step) or "loss 1")
    assert calls == [1, 201, 401, 601, 801, 1000]  # the first, one per 0.2 s, and the final step
    assert bar.draws == len(calls)
    assert "1000/1000 [0:00:01<0:00:00, 1000.0 it/s] loss 1" in stream.getvalue()
    bar.close()
    assert ProgressBar.active is None


def _poison_batches(trainer, steps):
    """Overflowing features in the training batches of ``steps``: the first layer's sums reach
    +-Inf and the next layer turns them into NaN, so the loss is NaN in either mode (NaN inputs
    themselves would be zeroed by the ReLU)."""
    import paddle
    original = trainer.run_step

    def run_step(group):
        if trainer.state.global_step + 1 in steps:
            for batch in group:
                features = np.full(tuple(batch["features"].shape), np.finfo(np.float32).max, dtype="float32")
                batch["features"] = features if trainer.engine.numpy_batches else paddle.to_tensor(features)
        return original(group)

    trainer.run_step = run_step


@pytest.mark.parametrize("optimizer", ["adamw", "momentum"])  # a skip in Adam's ops, a cond around others
@pytest.mark.parametrize("accumulate", [1, 2])
@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_nan_guard_skips_the_update_in_both_modes(tmp_path, tab_dir, mode, accumulate, optimizer):
    """Steps 6 and 7 have NaN losses: their updates are skipped (parameters and optimizer state
    exactly as after step 5), training goes on, and ends like a run that never saw them."""
    out = str(tmp_path / "out")
    config = tabular_config(tab_dir, out, mode)
    config["trainer"].update(max_steps=12, save_model_step=5, is_eval_dev=0, max_nan_steps=3,
                             gradient_accumulation_steps=accumulate)
    config["model"]["optimization"].update(optimizer=optimizer, weight_decay=0.01)
    trainer = build(config, tmp_path)
    _poison_batches(trainer, {6, 7})
    seen = {}

    class Watch(HookBase):
        def after_step(self):
            step = self.trainer.state.global_step
            if step in (5, 7):
                seen[step] = ({k: np.array(v) for k, v in self.trainer.engine.model_state_dict().items()},
                              {k: np.array(v) for k, v in self.trainer.engine.optimizer_state_dict().items()
                               if not isinstance(v, dict)})
            if step in (6, 7):
                seen[f"nonfinite{step}"] = self.trainer.state.nonfinite_loss

    trainer.register_hook(Watch())
    trainer.do_train()
    assert seen["nonfinite6"] and seen["nonfinite7"]
    for part in (0, 1):
        assert seen[5][part].keys() == seen[7][part].keys()
        for name in seen[5][part]:
            np.testing.assert_array_equal(seen[7][part][name], seen[5][part][name], err_msg=name)
    assert trainer.state.global_step == 12
    assert all(np.isfinite(np.asarray(v)).all() for v in trainer.engine.model_state_dict().values())


def test_two_hooks_of_one_class_keep_their_own_state_across_a_resume(tmp_path, data_dir):
    out = str(tmp_path / "out")
    hooks = [{"type": "EarlyStoppingHook", "params": {"metric": "acc", "patience": 50}},
             {"type": "EarlyStoppingHook", "params": {"metric": "loss", "mode": "min", "patience": 50}}]
    config = task_config(data_dir, out, max_steps=6, eval_step=2, save_model_step=6, is_eval_test=0, hooks=hooks)
    first = build(config, tmp_path)
    first.do_train()
    acc_hook, loss_hook = [h for h in first.hooks.hooks if type(h).__name__ == "EarlyStoppingHook"]
    assert acc_hook.best != loss_hook.best  # an accuracy and a loss
    config["trainer"].update(max_steps=8, resume="auto")
    resumed = build(config, tmp_path)
    again = [h for h in resumed.hooks.hooks if type(h).__name__ == "EarlyStoppingHook"]
    assert [(h.metric, h.best, h.bad_evals) for h in again] == [
        ("acc", acc_hook.best, acc_hook.bad_evals), ("loss", loss_hook.best, loss_hook.bad_evals)]
