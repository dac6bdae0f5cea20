"""The preference losses of ``Ernie45DPO``, by ``model.loss_type`` as ERNIEKit (and PaddleFormers'
DPO criterion) name them. Each pair's loss is ``-log sigmoid(m)`` of a margin ``m`` computed from
the chosen and rejected answers' log-probabilities:

- ``sigmoid`` (DPO): ``m = beta * ((log p(yc) - log q(yc)) - (log p(yr) - log q(yr)))``, the
  answers' summed log-probabilities under the policy ``p`` and the frozen reference ``q``;
- ``simpo`` (SimPO, reference-free): ``m = beta * (mean log p(yc) - mean log p(yr)) - simpo_gamma``,
  the log-probabilities averaged over each answer's tokens;
- ``orpo`` (ORPO, reference-free): ``m = log odds(yc) - log odds(yr)``, ``odds(y) = P / (1 - P)``
  with ``P = exp(mean log p(y))``; the loss adds the chosen answers' token-mean negative
  log-likelihood (``sft_loss_ratio``, 1 by default for ORPO as ERNIEKit sets it).

A new loss is one row of ``PREFERENCE_LOSSES``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict

import paddle

# ORPO's log(1 - P): a mean log-probability of exactly 0 (P = 1) would make it -inf; it is taken
# at most this high (P at most 1 - 1e-6), which changes nothing a real model computes
MAX_MEAN_LOG_PROB = -1e-6

Margin = Callable[[paddle.Tensor, paddle.Tensor, paddle.Tensor, paddle.Tensor, Dict[str, Any]], paddle.Tensor]


@dataclasses.dataclass(frozen=True)
class PreferenceLoss:
    """One ``loss_type``: whether it needs the frozen reference, whether it averages each answer's
    log-probabilities over its tokens (else sums them), its margin ``(chosen, rejected,
    reference chosen, reference rejected, model settings) -> [B]``, and its SFT term's default
    ratio."""

    reference_free: bool
    per_token: bool
    margin: Margin
    sft_loss_ratio: float = 0.0


def dpo_margin(chosen: paddle.Tensor, rejected: paddle.Tensor, reference_chosen: paddle.Tensor,
               reference_rejected: paddle.Tensor, settings: Dict[str, Any]) -> paddle.Tensor:
    return settings["beta"] * ((chosen - reference_chosen) - (rejected - reference_rejected))


def simpo_margin(chosen: paddle.Tensor, rejected: paddle.Tensor, reference_chosen: paddle.Tensor,
                 reference_rejected: paddle.Tensor, settings: Dict[str, Any]) -> paddle.Tensor:
    return settings["beta"] * (chosen - rejected) - settings["simpo_gamma"]


def log_odds(mean_log_prob: paddle.Tensor) -> paddle.Tensor:
    """``log(P / (1 - P))`` of ``P = exp(mean_log_prob)``; ``log(1 - P)`` as ``log(-expm1(.))``,
    exact where ``P`` is near 1 (PaddleFormers' ``log1p(-exp(.))`` loses digits there)."""
    capped = paddle.clip(mean_log_prob, max=MAX_MEAN_LOG_PROB)
    return capped - paddle.log(-paddle.expm1(capped))


def orpo_margin(chosen: paddle.Tensor, rejected: paddle.Tensor, reference_chosen: paddle.Tensor,
                reference_rejected: paddle.Tensor, settings: Dict[str, Any]) -> paddle.Tensor:
    return log_odds(chosen) - log_odds(rejected)


PREFERENCE_LOSSES: Dict[str, PreferenceLoss] = {
    "sigmoid": PreferenceLoss(reference_free=False, per_token=False, margin=dpo_margin),
    "simpo": PreferenceLoss(reference_free=True, per_token=True, margin=simpo_margin),
    "orpo": PreferenceLoss(reference_free=True, per_token=True, margin=orpo_margin, sft_loss_ratio=1.0),
}
PREFERENCE_LOSSES["or"] = PREFERENCE_LOSSES["orpo"]  # PaddleFormers' name for ORPO
