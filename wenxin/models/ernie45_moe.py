"""The mixture-of-experts feed-forward layer of ERNIE 4.5's MoE decoders (ERNIE-4.5-21B-A3B and its
kind), as PaddleFormers' ``ernie4_5_moe`` and transformers' ``Ernie4_5_MoeSparseMoeBlock`` compute it:

- a router ``gate`` (``[hidden, experts]``, float32, no bias) scores each token; the scores'
  softmax over the experts are the token's routing probabilities;
- the token goes to the ``moe_k`` experts whose probabilities plus the correction bias
  (``moe_statics.e_score_correction_bias``, ``[1, experts]``, float32, fixed here: the bias only
  chooses, it does not weigh; a model with ``moe_use_aux_free`` false has none) are largest;
- each chosen expert (a SwiGLU of ``moe_intermediate_size``) adds its output weighted by its
  probability over the sum of the chosen probabilities (at least ``moe_norm_min``);
- shared experts (one SwiGLU of ``moe_intermediate_size * moe_num_shared_experts``), when the
  config has them, add theirs for every token.

Every token routed to an expert is computed by it ("dropless"): the reference's capacity drops no
token when every capacity factor is at least the number of experts, which ``Ernie45Config``
requires. The layers ``moe_layer_start_index`` to ``moe_layer_end_index``, every
``moe_layer_interval``-th, are MoE layers; the others are dense.

While training with router losses (``router_loss_weights``; ``ernie45_router_loss``), ``routed``
also returns the layer's router loss.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Tuple

import wenxin.common.paddle_required  # noqa: F401 (before Paddle: one clear line if it cannot run wenxin)
import paddle
import paddle.nn.functional as F
from paddle import nn

from wenxin.models.ernie45_router_loss import RouterLossWeights, router_loss
from wenxin.models.held_dtype import FLOAT32, HeldLinear, default_dtype

if TYPE_CHECKING:
    from wenxin.models.ernie45_folder import Ernie45Config


class SwiGLU(nn.Layer):
    """``down(silu(gate(x)) * up(x))``."""

    def __init__(self, hidden: int, inner: int, bias: bool) -> None:
        super().__init__()
        attr = None if bias else False
        self.gate_proj = HeldLinear(hidden, inner, bias_attr=attr)
        self.up_proj = HeldLinear(hidden, inner, bias_attr=attr)
        self.down_proj = HeldLinear(inner, hidden, bias_attr=attr)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MoEStatics(nn.Layer):
    """Holds the router's correction bias under the checkpoint's name."""

    def __init__(self, experts: int) -> None:
        super().__init__()
        self.e_score_correction_bias = self.create_parameter([1, experts], dtype="float32",
                                                             default_initializer=nn.initializer.Constant(0.0))
        self.e_score_correction_bias.stop_gradient = True
        self.e_score_correction_bias.trainable = False


class Ernie45SparseMoE(nn.Layer):
    """Routed experts with top-k gating and optional shared experts (see the module docstring)."""

    def __init__(self, config: "Ernie45Config") -> None:
        super().__init__()
        self.top_k, self.norm_min = config.moe_k, config.moe_norm_min
        with default_dtype(FLOAT32):  # the router computes in float32 however the model is held
            self.gate = nn.Linear(config.hidden_size, config.moe_num_experts, bias_attr=False)
        # the correction bias: a model trained without it (moe_use_aux_free false) has none
        self.moe_statics = MoEStatics(config.moe_num_experts) if config.moe_use_aux_free else None
        self.experts = nn.LayerList([SwiGLU(config.hidden_size, config.moe_intermediate_size, config.use_bias)
                                     for _ in range(config.moe_num_experts)])
        shared = config.moe_intermediate_size * config.moe_num_shared_experts
        self.shared_experts = SwiGLU(config.hidden_size, shared, config.use_bias) if shared else None
        self.router_loss_weights: Optional[RouterLossWeights] = None  # None: no router loss

    def computes_router_loss(self) -> bool:
        """Whether ``routed`` returns a router loss: training, with a loss of non-zero weight."""
        return self.training and self.router_loss_weights is not None and self.router_loss_weights.any

    def route(self, tokens: paddle.Tensor) -> List[paddle.Tensor]:
        """``tokens`` ``[N, hidden]`` -> the chosen experts ``[N, k]`` and their weights ``[N, k]``."""
        return self._route(F.softmax(self.gate(tokens.astype("float32")), axis=-1))

    def _route(self, probabilities: paddle.Tensor) -> List[paddle.Tensor]:
        """The router's probabilities ``[N, E]`` (float32) -> chosen experts and weights ``[N, k]``."""
        bias = None if self.moe_statics is None else self.moe_statics.e_score_correction_bias  # [1, E]
        scores = probabilities if bias is None else probabilities + bias
        _, chosen = paddle.topk(scores, self.top_k, axis=-1)
        weights = paddle.take_along_axis(probabilities, chosen, axis=-1)  # [N, k]: without the bias
        weights = weights / paddle.clip(weights.sum(axis=-1, keepdim=True), min=self.norm_min)
        return [chosen, weights]

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.routed(x)[0]

    def routed(self, x: paddle.Tensor, token_mask: Optional[paddle.Tensor] = None
               ) -> Tuple[paddle.Tensor, Optional[paddle.Tensor]]:
        """``x`` ``[..., hidden]`` -> the layer's output, shaped as ``x``, and its router loss (a
        scalar) where ``computes_router_loss``, else None; ``token_mask`` (``x``'s shape without
        the last axis; 1: a token, 0: padding) leaves padding out of the router loss."""
        hidden = x.shape[-1]
        tokens = x.reshape([-1, hidden])  # [N, hidden]
        logits = self.gate(tokens.astype("float32"))  # [N, E], in float32 (the router's weight is)
        probabilities = F.softmax(logits, axis=-1)  # [N, E]
        chosen, weights = self._route(probabilities)
        # a zero row N joins every expert's rows with weight 0, so that no expert's rows are empty
        # (Paddle's scatter and static executor fail on empty tensors)
        padded = paddle.concat([tokens, paddle.zeros([1, hidden], dtype=tokens.dtype)])  # [N + 1, hidden]
        dummy = paddle.shape(tokens)[0:1].astype("int64")  # [1]: the index N
        no_weight = paddle.zeros([1], dtype=weights.dtype)
        out = paddle.zeros_like(padded)
        for index, expert in enumerate(self.experts):
            picked = chosen == index  # [N, k]: at most one slot a token
            rows = paddle.concat([paddle.nonzero(picked.any(axis=-1)).reshape([-1]), dummy])  # [M + 1]
            weight = paddle.concat([(weights * picked.astype(weights.dtype)).sum(axis=-1), no_weight])  # [N + 1]
            scale = paddle.gather(weight, rows).unsqueeze(-1).astype(x.dtype)  # [M + 1, 1]
            # each row once a scatter, the experts in turn: the same sum in the same order every run
            out = paddle.scatter_nd_add(out, rows.unsqueeze(-1), expert(paddle.gather(padded, rows)) * scale)
        out = out[:-1]  # [N, hidden]
        if self.shared_experts is not None:
            out = out + self.shared_experts(tokens)
        loss = None
        if self.computes_router_loss() and self.router_loss_weights is not None:
            mask = None if token_mask is None else token_mask.reshape([-1])  # [N]
            loss = router_loss(logits, self.gate.weight, self.top_k, self.router_loss_weights, mask, probabilities)
        return out.reshape(paddle.shape(x)), loss
