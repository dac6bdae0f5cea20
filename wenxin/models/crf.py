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
        """Best tag sequences ``[B, T]`` (int64; positions past a sequence's length are 0).

        Eager mode uses Paddle's ``viterbi_decode`` kernel; a static graph unrolls the recursion
        over its fixed length (Paddle 3.3 infers no shape or dtype for the kernel's path there)."""
        scores = self._with_boundaries(emissions, seq_lens)  # [B, T, N]
        max_len = paddle.shape(emissions)[1]
        mask = length_mask(seq_lens, max_len, "int64")  # [B, T]
        if not paddle.in_dynamic_mode():
            return self.unrolled_decode(scores, mask)
        _, path = paddle.text.viterbi_decode(scores, self.transitions, seq_lens, include_bos_eos_tag=False)
        if path.shape[1] < emissions.shape[1]:  # the path covers the longest sequence: pad it to T
            padding = paddle.zeros([path.shape[0], emissions.shape[1] - path.shape[1]], dtype=path.dtype)
            path = paddle.concat([path, padding], axis=1)
        return path * mask

    def unrolled_decode(self, scores: paddle.Tensor, mask: paddle.Tensor) -> paddle.Tensor:
        """Viterbi over ``[B, T, N]`` scores (boundaries included) with a ``[B, T]`` int64 mask,
        as a Python loop over the time steps. Padding steps keep each tag (identity pointers)."""
        max_len = scores.shape[1]
        if max_len is None or max_len < 0:
            raise ConfigError("LinearChainCrf: a static graph needs a fixed sequence length: set "
                              "pad_to_max_seq_len: true on the text and tag fields")
        transitions = self.transitions.unsqueeze(0)  # [1, N, N]
        identity = paddle.arange(self.num_tags, dtype="int64").unsqueeze(0)  # [1, N]
        alpha = scores[:, 0]  # [B, N] best score of a path ending in each tag
        pointers = []
        for t in range(1, max_len):
            candidates = alpha.unsqueeze(-1) + transitions  # [B, N_from, N_to]
            keep = mask[:, t:t + 1]  # [B, 1]
            step = candidates.max(axis=1) + scores[:, t]  # [B, N]
            alpha = paddle.where(keep.astype("bool"), step, alpha)
            pointers.append(paddle.where(keep.astype("bool"), candidates.argmax(axis=1), identity))  # [B, N]
        best = alpha.argmax(axis=1)  # [B]
        path = [best]
        for pointer in reversed(pointers):
            best = paddle.take_along_axis(pointer, best.unsqueeze(-1), axis=1).squeeze(-1)
            path.append(best)
        return paddle.stack(path[::-1], axis=1) * mask  # [B, T]
