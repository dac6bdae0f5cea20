"""The step rule's settings (``wenxin.controller.step_rule``): which steps check their loss, which
skip, what a micro-batch differentiates and what a step reports. The three engines following it
are compared in ``tests/test_step_rule.py``."""
import math

from wenxin.controller.step_rule import StepRule


def test_which_steps_check_their_loss():
    assert [StepRule(nan_check_every=3).checks_loss(step) for step in range(6)] == [False, False, True] * 2
    assert all(StepRule().checks_loss(step) for step in range(4))  # every step by default
    assert not any(StepRule(nan_check_every=0).checks_loss(step) for step in range(4))  # off


def test_only_a_checked_nonfinite_step_skips():
    assert StepRule.skips(checked=True, nonfinite=True)
    assert not StepRule.skips(checked=False, nonfinite=True)  # unchecked: applied, as the user chose
    assert not StepRule.skips(checked=True, nonfinite=False)


def test_micro_batches_add_up_to_the_mean_gradient_and_the_step_reports_the_mean_loss():
    rule = StepRule(accumulate=4)
    assert sum(rule.micro_objective(g) for g in (1.0, 2.0, 3.0, 6.0)) == 3.0
    assert StepRule().micro_objective(5.0) == 5.0
    assert rule.step_loss([1.0, 2.0, 3.0, 6.0]) == 3.0
    assert math.isnan(rule.step_loss([1.0, float("nan")]))
