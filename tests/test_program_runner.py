"""ProgramRunner: the static trainer's step runner equals Executor.run, and falls back to it."""
from __future__ import annotations

import numpy as np
import paddle
import pytest

from wenxin.common.graph_mode import static_mode
from wenxin.compat.program_runner import ProgramRunner


def build(seed: int = 3):
    """A small regression program with a warmup LR schedule, and its own scope."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    main.random_seed = startup.random_seed = seed
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [-1, 4], "float32")
        y = paddle.static.data("y", [-1, 1], "float32")
        layer = paddle.nn.Linear(4, 1)
        loss = ((layer(x) - y) ** 2).mean()
        schedule = paddle.optimizer.lr.LinearWarmup(0.1, warmup_steps=5, start_lr=0.0, end_lr=0.1)
        paddle.optimizer.Adam(learning_rate=schedule).minimize(loss)
    scope, executor = paddle.static.Scope(), paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(scope):
        executor.run(startup)
    return main, loss, layer, schedule, scope, executor


def batches(n: int):
    rng = np.random.RandomState(0)
    for _ in range(n):
        x = rng.randn(8, 4).astype("float32")
        yield {"x": x, "y": x.sum(1, keepdims=True).astype("float32")}


def weights(scope, layer):
    return [np.array(scope.find_var(p.name).get_tensor()) for p in (layer.weight, layer.bias)]


def train_with_executor(steps: int):
    with static_mode():
        main, loss, layer, schedule, scope, executor = build()
        losses = []
        with paddle.static.scope_guard(scope):
            for feed in batches(steps):
                losses.append(float(executor.run(main, feed=feed, fetch_list=[loss])[0]))
                schedule.step()
        return losses, weights(scope, layer)


def train_with_runner(steps: int):
    with static_mode():
        main, loss, layer, schedule, scope, executor = build()
        runner = ProgramRunner(executor, main, ["x", "y"], [loss], scope)
        losses = []
        for feed in batches(steps):
            losses.append(float(runner.run(feed)[0]))
            schedule.step()
        return losses, weights(scope, layer), runner


@pytest.mark.parametrize("break_internals", [False, True])
def test_runner_trains_exactly_like_executor_run(break_internals, monkeypatch):
    """Same losses and weights over 12 steps, the learning rate following its warmup schedule."""
    expected_losses, expected_weights = train_with_executor(12)
    if break_internals:  # as if another Paddle version had other Executor internals
        def missing(self):
            raise AttributeError("'Executor' object has no attribute '_executor_cache'")
        monkeypatch.setattr(ProgramRunner, "_look_up_interpreter", missing)
    losses, trained, runner = train_with_runner(12)
    assert (runner._interpreter is None) == break_internals  # noqa: SLF001
    assert losses == expected_losses
    for a, b in zip(trained, expected_weights):
        np.testing.assert_array_equal(a, b)
    assert len(set(losses[:5])) == 5  # the schedule moved the weights from the first steps on


def test_runner_keeps_paddles_feed_checks():
    with static_mode():
        main, loss, _, _, scope, executor = build()
        runner = ProgramRunner(executor, main, ["x", "y"], [loss], scope)
        with pytest.raises(ValueError, match="x"):
            runner.run({"x": np.zeros([8, 5], "float32"), "y": np.zeros([8, 1], "float32")})


def test_a_learning_rate_the_runner_cannot_set_makes_it_fall_back(monkeypatch):
    """As if another Paddle version kept the learning rate elsewhere: setting it would not reach
    the program, and the fast path would train with a frozen learning rate."""
    with static_mode():
        main, loss, _, _, scope, executor = build()
        real = ProgramRunner._set_learning_rate

        def lost(self, value=None):  # writes a copy the program never reads
            self._lr_tensor = paddle.base.core.DenseTensor()
            real(self, value)

        monkeypatch.setattr(ProgramRunner, "_set_learning_rate", lost)
        import logging
        records = []
        handler = logging.Handler()
        handler.emit = records.append
        logging.getLogger("wenxin").addHandler(handler)
        try:
            runner = ProgramRunner(executor, main, ["x", "y"], [loss], scope, has_lr_schedule=True)
        finally:
            logging.getLogger("wenxin").removeHandler(handler)
        assert not runner.fast
    assert any("uses Executor.run" in r.getMessage() and "learning-rate" in r.getMessage() for r in records)


def test_a_read_only_program_whose_fast_outputs_differ_falls_back():
    """The first run of an evaluation program is compared with Executor.run's; on a difference
    the runner returns Executor.run's outputs and uses it from then on."""
    with static_mode():
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [-1, 4], "float32")
            out = paddle.nn.Linear(4, 2)(x)
        scope, executor = paddle.static.Scope(), paddle.static.Executor(paddle.CPUPlace())
        with paddle.static.scope_guard(scope):
            executor.run(startup)
        runner = ProgramRunner(executor, main, ["x"], [out], scope, read_only=True)
        assert runner.fast

        class Skewed:  # as if the fast path fed or fetched the wrong thing
            def __init__(self, inner):
                self.inner = inner

            def run(self, names, flag):
                return [np.asarray(v) + 1.0 for v in self.inner.run(names, flag)]

        runner._interpreter = Skewed(runner._interpreter)  # noqa: SLF001
        feed = {"x": np.ones([3, 4], "float32")}
        first = runner.run(feed)
        assert not runner.fast
        with paddle.static.scope_guard(scope):
            expected = executor.run(main, feed=feed, fetch_list=[out])
        np.testing.assert_array_equal(first[0], expected[0])


def test_fast_path_switched_off_runs_executor(monkeypatch):
    with static_mode():
        main, loss, _, _, scope, executor = build()
        runner = ProgramRunner(executor, main, ["x", "y"], [loss], scope, fast=False)
        assert not runner.fast
        assert np.isfinite(runner.run(next(batches(1)))[0]).all()
