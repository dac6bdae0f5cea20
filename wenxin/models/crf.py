"""A linear-chain conditional random field over per-token tag scores."""
from __future__ import annotations

import math

import wenxin.common.paddle_required  # noqa: F401 (before Paddle: one clear line if it cannot run wenxin)
import paddle
import paddle.nn as nn

from wenxin.models.modules import length_mask

NEG_INF = -1e4  # the log of "no path" (exp underflows to 0; -inf would give NaN gradients)
MAX_ROUNDS = 16  # static graphs: sequences up to 2**16 tokens


class LinearChainCrf(nn.Layer):
    """Tag-transition, start and end scores; the sequence negative log-likelihood (forward
    algorithm) for training and Viterbi decoding (``paddle.text.viterbi_decode``) for prediction.

    The partition function is computed by a parallel scan (``log_partition``): ceil(log2 T)
    rounds of batched ops, any length, in eager mode and in one static program alike.

    Args:
        num_tags: number of tags N.
    """

    def __init__(self, num_tags: int) -> None:
        super().__init__()
        self.num_tags = num_tags
        init = nn.initializer.Uniform(-0.1, 0.1)
        self.transitions = self.create_parameter([num_tags, num_tags], default_initializer=init)  # [from, to]
        self.start_scores = self.create_parameter([num_tags], default_initializer=init)
        self.end_scores = self.create_parameter([num_tags], default_initializer=init)

    def _with_boundaries(self, emissions: paddle.Tensor, seq_lens: paddle.Tensor) -> paddle.Tensor:
        """Emissions ``[B, T, N]`` plus start scores at t=0 and end scores at each sequence's last token."""
        max_len = paddle.shape(emissions)[1]
        positions = paddle.arange(max_len, dtype=seq_lens.dtype).unsqueeze(0)  # [1, T]
        first = (positions == 0).astype(emissions.dtype).unsqueeze(-1)  # [1, T, 1]
        last = (positions == (seq_lens - 1).unsqueeze(1)).astype(emissions.dtype).unsqueeze(-1)  # [B, T, 1]
        return emissions + first * self.start_scores + last * self.end_scores

    def negative_log_likelihood(self, emissions: paddle.Tensor, tags: paddle.Tensor,
                                seq_lens: paddle.Tensor) -> paddle.Tensor:
        """``[B, T, N]`` scores, ``[B, T]`` gold tags, ``[B]`` lengths -> ``[B]`` -log p(tags)."""
        scores = self._with_boundaries(emissions, seq_lens)  # [B, T, N]
        mask = length_mask(seq_lens, paddle.shape(scores)[1], scores.dtype)  # [B, T]
        gold_emissions = paddle.take_along_axis(scores, tags.unsqueeze(-1), axis=-1).squeeze(-1)  # [B, T]
        gold = (gold_emissions * mask).sum(axis=1)  # [B]
        pair_ids = tags[:, :-1] * self.num_tags + tags[:, 1:]  # [B, T-1] index into [N*N]
        gold_transitions = paddle.gather(self.transitions.reshape([-1]), pair_ids.reshape([-1]))
        gold += (gold_transitions.reshape(paddle.shape(pair_ids)) * mask[:, 1:]).sum(axis=1)
        return self.log_partition(scores, mask) - gold

    def log_partition(self, scores: paddle.Tensor, mask: paddle.Tensor) -> paddle.Tensor:
        """log Z, the log-sum of the scores of all tag paths: ``[B, T, N]`` scores (with
        boundaries) and ``[B, T]`` mask -> ``[B]``.

        The forward algorithm multiplies one ``[N, N]`` matrix per step in the (logsumexp, +)
        semiring; matrix products are associative, so this multiplies neighbouring pairs at
        once, halving the sequence each round: ceil(log2 T) rounds of batched ops instead of T
        sequential steps. A padded step's matrix is the identity. The round count is fixed by T
        in eager mode; a static graph, whose T is unknown when it is built, runs MAX_ROUNDS
        rounds (a round on one matrix costs a few tiny ops), so any length up to 2**MAX_ROUNDS
        works in one program."""
        n = self.num_tags
        identity = (1.0 - paddle.eye(n, dtype=scores.dtype)) * NEG_INF  # [N, N]: 0 on the diagonal
        steps = self.transitions.unsqueeze(0).unsqueeze(0) + scores[:, 1:].unsqueeze(2)  # [B, T-1, N, N]
        real = mask[:, 1:].unsqueeze(-1).unsqueeze(-1)  # [B, T-1, 1, 1]
        steps = real * steps + (1.0 - real) * identity  # padding: carry the paths unchanged
        first = paddle.zeros_like(steps[:, :1]) + identity  # [B, 1, N, N]: so that there is one matrix even at T=1
        matrices = paddle.concat([first, steps], axis=1)  # [B, K, N, N], K = T
        length, batch = scores.shape[1], scores.shape[0]
        if batch is None or batch < 0:
            batch = paddle.shape(scores)[0]
        rounds = max(1, math.ceil(math.log2(length))) if length is not None and length > 0 else MAX_ROUNDS
        for _ in range(rounds):
            odd = paddle.shape(matrices)[1] % 2  # pad an odd count with one identity matrix
            pad = paddle.slice(paddle.zeros_like(matrices[:, :1]) + identity, axes=[1], starts=[0], ends=[odd])
            matrices = paddle.concat([matrices, pad], axis=1)
            pairs = matrices.reshape([-1, 2, n, n])  # [B * K/2, 2, N, N]
            products = paddle.logsumexp(pairs[:, 0].unsqueeze(-1) + pairs[:, 1].unsqueeze(-3), axis=-2)
            matrices = products.reshape([batch, -1, n, n])  # [B, K/2, N, N]
        total = matrices[:, 0]  # [B, N, N]: all paths from the first tag to the last
        return paddle.logsumexp(scores[:, 0].unsqueeze(-1) + total, axis=[1, 2])

    def decode(self, emissions: paddle.Tensor, seq_lens: paddle.Tensor) -> paddle.Tensor:
        """Best tag sequences ``[B, T']`` (int64), T' the batch's longest length; 0 past each
        sequence's length. (Paddle 3.3 infers no static shape for it: do not compute on it in a graph.)"""
        scores = self._with_boundaries(emissions, seq_lens)  # [B, T, N]
        _, path = paddle.text.viterbi_decode(scores, self.transitions, seq_lens, include_bos_eos_tag=False)
        return path
