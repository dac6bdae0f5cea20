"""The router's training losses of ERNIE 4.5's MoE layers, as ERNIE's ``ernie/moe/topk_gate.py``
(what ERNIEKit trains with) and PaddleFormers' ``nn/moe/topk_gate.py`` compute them, over one
layer's ``N`` tokens and ``E`` experts:

- **load balancing** (``moe_aux_loss_lambda``): ``E * sum_e f_e * P_e``, where ``f_e`` is the
  share of the tokens whose top ``k`` probabilities (the correction bias left out) include
  expert ``e``, counted without gradient, and ``P_e`` the mean probability the router gives ``e``;
  both are over ``N``, so a perfectly balanced router scores ``k``;
- **z-loss** (``moe_z_loss_lambda``): the mean over tokens of ``logsumexp(logits) ** 2``;
- **orthogonality** (``moe_orthogonal_loss_lambda``): with ``w`` the router's weight ``[E,
  hidden]``, each expert's row scaled to length 1, the mean of ``(w w^T - I) ** 2`` over its ``E *
  E`` entries.

A layer's router loss is the three weighted by their lambdas. The reference adds every MoE layer's
to the gradient with weight 1 and reports the language model's loss alone; ``with_router_loss``
does the same. Padding tokens are left out (``token_mask``); the reference's batches route every
row it holds.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import wenxin.common.paddle_required  # noqa: F401 (before Paddle: one clear line if it cannot run wenxin)
import paddle
import paddle.nn.functional as F

MIN_TOKENS = 1e-6  # the reference's floor on the token count (a batch of padding alone)
MIN_NORM = 1e-12  # the reference's floor on an expert row's length


@dataclasses.dataclass(frozen=True)
class RouterLossWeights:
    """The three losses' weights; ERNIEKit's defaults for fine-tuning."""

    aux: float = 1e-5
    z: float = 0.0
    orthogonal: float = 0.0

    @property
    def any(self) -> bool:
        return bool(self.aux or self.z or self.orthogonal)


def load_balancing_loss(probabilities: paddle.Tensor, top_k: int, token_mask: Optional[paddle.Tensor] = None
                        ) -> paddle.Tensor:
    """``probabilities`` ``[N, E]`` (the router's softmax) and ``token_mask`` ``[N]`` (1: a token,
    0: padding; None: all tokens) -> the load-balancing loss (a scalar)."""
    experts = probabilities.shape[-1]
    if token_mask is not None:
        probabilities = probabilities * token_mask.astype(probabilities.dtype).unsqueeze(-1)
        tokens = paddle.clip(token_mask.astype(probabilities.dtype).sum(), min=MIN_TOKENS)
    else:
        tokens = paddle.clip(paddle.shape(probabilities)[0].astype(probabilities.dtype), min=MIN_TOKENS)
    _, chosen = paddle.topk(probabilities.detach(), top_k, axis=-1)  # [N, k]
    picked = F.one_hot(chosen, experts).sum(axis=1)  # [N, E]: 1 where the token chose the expert
    if token_mask is not None:
        picked = picked * token_mask.astype(picked.dtype).unsqueeze(-1)
    share = picked.sum(axis=0).detach() / tokens  # [E]: f_e
    mean_probability = probabilities.sum(axis=0) / tokens  # [E]: P_e
    return (share * mean_probability).sum() * experts


def z_loss(logits: paddle.Tensor, token_mask: Optional[paddle.Tensor] = None) -> paddle.Tensor:
    """``logits`` ``[N, E]`` -> the mean over the (unmasked) tokens of ``logsumexp ** 2``."""
    squared = paddle.logsumexp(logits, axis=-1).square()  # [N]
    if token_mask is None:
        return squared.mean()
    mask = token_mask.astype(squared.dtype)
    return (squared * mask).sum() / paddle.clip(mask.sum(), min=MIN_TOKENS)


def orthogonal_loss(gate_weight: paddle.Tensor) -> paddle.Tensor:
    """``gate_weight`` ``[hidden, E]`` (Paddle's layout of the router) -> how far its expert rows
    are from orthonormal."""
    rows = gate_weight.astype("float32").transpose([1, 0])  # [E, hidden]
    rows = rows / paddle.clip(rows.norm(axis=1, keepdim=True), min=MIN_NORM)
    experts = rows.shape[0]
    gap = paddle.matmul(rows, rows, transpose_y=True) - paddle.eye(experts, dtype=rows.dtype)  # [E, E]
    return gap.square().sum() / (experts * experts)


def router_loss(logits: paddle.Tensor, gate_weight: paddle.Tensor, top_k: int, weights: RouterLossWeights,
                token_mask: Optional[paddle.Tensor] = None, probabilities: Optional[paddle.Tensor] = None
                ) -> paddle.Tensor:
    """One MoE layer's router loss: ``logits`` ``[N, E]`` (float32), the router's weight, each
    loss weighted (a loss of weight 0 is not computed); ``probabilities``: the logits' softmax,
    where the caller has it already."""
    total = paddle.zeros([], dtype="float32")
    if weights.aux:
        if probabilities is None:
            probabilities = F.softmax(logits, axis=-1)
        total = total + weights.aux * load_balancing_loss(probabilities, top_k, token_mask)
    if weights.z:
        total = total + weights.z * z_loss(logits, token_mask)
    if weights.orthogonal:
        total = total + weights.orthogonal * orthogonal_loss(gate_weight)
    return total


def with_router_loss(loss: paddle.Tensor, router: Optional[paddle.Tensor]) -> paddle.Tensor:
    """``loss`` with ``router``'s gradient added and its value unchanged, as the reference reports
    the language model's loss and trains on both."""
    if router is None:
        return loss
    return loss + (router - router.detach())
