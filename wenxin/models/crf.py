"""A linear-chain conditional random field over per-token tag scores."""
from __future__ import annotations

import paddle
import paddle.nn as nn

from wenxin.common.errors import ConfigError
from wenxin.models.modules import length_mask


class LinearChainCrf(nn.Layer):
    """Tag-transition, start and end scores; the sequence negative log-likelihood (forward
    algorithm) for training and Viterbi decoding (``paddle.text.viterbi_decode``) for prediction.

    The forward algorithm loops over time steps. In eager mode the length is the batch's; a static
    graph needs a fixed length, so its text and tag fields must set ``pad_to_max_seq_len``.

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
        max_len = emissions.shape[1]
        if max_len is None or max_len < 0:
            raise ConfigError("LinearChainCrf: a static graph needs a fixed sequence length: set "
                              "pad_to_max_seq_len: true on the text and tag fields")
        scores = self._with_boundaries(emissions, seq_lens)  # [B, T, N]
        mask = length_mask(seq_lens, max_len, scores.dtype)  # [B, T]
        gold_emissions = paddle.take_along_axis(scores, tags.unsqueeze(-1), axis=-1).squeeze(-1)  # [B, T]
        gold = (gold_emissions * mask).sum(axis=1)  # [B]
        if max_len > 1:
            pair_ids = tags[:, :-1] * self.num_tags + tags[:, 1:]  # [B, T-1] index into [N*N]
            gold_transitions = paddle.gather(self.transitions.reshape([-1]), pair_ids.reshape([-1]))
            gold += (gold_transitions.reshape(pair_ids.shape) * mask[:, 1:]).sum(axis=1)
        alpha = scores[:, 0]  # [B, N] log-sum of all paths ending in each tag
        transitions = self.transitions.unsqueeze(0)  # [1, N, N]
        for t in range(1, max_len):
            step = paddle.logsumexp(alpha.unsqueeze(-1) + transitions, axis=1) + scores[:, t]  # [B, N]
            keep = mask[:, t:t + 1]  # [B, 1]: padding carries alpha forward unchanged
            alpha = keep * step + (1.0 - keep) * alpha
        return paddle.logsumexp(alpha, axis=1) - gold

    def decode(self, emissions: paddle.Tensor, seq_lens: paddle.Tensor) -> paddle.Tensor:
        """Best tag sequences ``[B, T']`` (int64), T' the batch's longest length; 0 past each
        sequence's length. (Paddle 3.3 infers no static shape for it: do not compute on it in a graph.)"""
        scores = self._with_boundaries(emissions, seq_lens)  # [B, T, N]
        _, path = paddle.text.viterbi_decode(scores, self.transitions, seq_lens, include_bos_eos_tag=False)
        return path
