"""A tiny causal transformer in NumPy whose step functions keep the contract of a generation
export's (``wenxin.models.batch_decoding``): ``prefill`` (``ids`` ``[1, S]`` -> ``logits``
``[1, V]``, ``cache`` ``[layers, 2, 1, heads, S, d]``, ``position`` ``[1]``) and ``extend``
(``tokens`` ``[R]``, ``positions`` ``[R]``, ``cache``, and ``visible`` ``[R, N + 1]`` where the model
is ``masked`` -> ``logits`` ``[R, V]`` and the grown cache), or, ``in_place``, one in-place ``advance``
(``wenxin.models.advance_step``: ``tokens``, ``positions`` ``[R, T]``, ``visible`` ``[R, T, N + T]``
and each layer's ``keys_<i>`` and ``values_<i>`` ``[R, heads, N, d]`` -> ``logits`` and the new
tokens' ``new_cache`` ``[layers, 2, R, heads, T, d]``). ``logits_of`` recomputes a whole sequence
without a cache: the reference. float32 throughout, as the exports compute."""
from __future__ import annotations

from typing import Dict, List

import numpy as np

VOCAB, HIDDEN, HEADS, LAYERS, POSITIONS = 29, 16, 2, 2, 512
HEAD = HIDDEN // HEADS
EOS = 1


class NumpyDecoder:
    """The model (see the module docstring); ``calls`` counts each step function's runs and
    ``rows_run`` the rows ``extend`` was given in all."""

    def __init__(self, seed: int = 0, masked: bool = True, in_place: bool = False) -> None:
        rng = np.random.default_rng(seed)
        w = lambda *shape: rng.normal(0, 0.5, size=shape).astype(np.float32)  # noqa: E731
        self.embed, self.position = w(VOCAB, HIDDEN), w(POSITIONS, HIDDEN)
        self.layers = [{n: w(HIDDEN, HIDDEN) for n in ("q", "k", "v", "o", "up")} for _ in range(LAYERS)]
        self.out = w(HIDDEN, VOCAB)
        self.masked, self.in_place = masked, in_place
        self.calls: Dict[str, int] = {"prefill": 0, "extend": 0, "advance": 0}
        self.rows_run = 0
        self.fed: Dict[str, np.ndarray] = {}  # the inputs of the last advance

    @staticmethod
    def empty() -> np.ndarray:
        """The cache of one row holding nothing ``[layers, 2, 1, heads, 0, d]``."""
        return np.zeros((LAYERS, 2, 1, HEADS, 0, HEAD), dtype=np.float32)

    @staticmethod
    def _heads(x: np.ndarray) -> np.ndarray:  # [R, T, H] -> [R, heads, T, d]
        return x.reshape(x.shape[0], x.shape[1], HEADS, HEAD).transpose(0, 2, 1, 3)

    def _layer(self, p: Dict[str, np.ndarray], x: np.ndarray, keys: np.ndarray, values: np.ndarray,
               bias: np.ndarray) -> np.ndarray:
        q = self._heads(x @ p["q"])  # [R, heads, T, d]
        scores = q @ keys.transpose(0, 1, 3, 2) / np.float32(np.sqrt(HEAD)) + bias  # [R, heads, T, K]
        scores = scores - scores.max(-1, keepdims=True)
        weights = np.exp(scores)
        weights /= weights.sum(-1, keepdims=True)
        attended = (weights @ values).transpose(0, 2, 1, 3).reshape(x.shape)  # [R, T, H]
        x = x + attended @ p["o"]
        return x + np.tanh(x @ p["up"])

    def _run(self, x: np.ndarray, past: List[np.ndarray], bias: np.ndarray):
        cache = []
        for index, p in enumerate(self.layers):
            k, v = self._heads(x @ p["k"]), self._heads(x @ p["v"])
            if past:
                k = np.concatenate([past[index][0], k], axis=2)
                v = np.concatenate([past[index][1], v], axis=2)
            cache.append(np.stack([k, v]))
            x = self._layer(p, x, k, v, bias)
        return x, np.stack(cache).astype(np.float32)

    def logits_of(self, ids: List[int]) -> np.ndarray:
        """``[1, V]``: the whole sequence, no cache."""
        length = len(ids)
        x = (self.embed[ids] + self.position[:length])[None]
        causal = np.where(np.tril(np.ones((length, length), dtype=bool)), 0.0, -1e9).astype(np.float32)
        states, _ = self._run(x, [], causal)
        return (states[:, -1] @ self.out).astype(np.float32)

    def __call__(self, name: str, inputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """The step runner: ``prefill`` or ``extend`` on named inputs (``advance``, ``in_place``)."""
        self.calls[name] += 1
        if name == "advance":
            assert self.in_place
            return self._advance(inputs)
        if name == "prefill":
            ids = np.asarray(inputs["ids"])[0].tolist()
            length = len(ids)
            x = (self.embed[ids] + self.position[:length])[None]
            causal = np.where(np.tril(np.ones((length, length), dtype=bool)), 0.0, -1e9).astype(np.float32)
            states, cache = self._run(x, [], causal)
            return {"logits": (states[:, -1] @ self.out).astype(np.float32), "cache": cache,
                    "position": np.asarray([length], dtype=np.int64)}
        tokens, positions, cache = inputs["tokens"], inputs["positions"], inputs["cache"]
        assert set(inputs) == {"tokens", "positions", "cache"} | ({"visible"} if self.masked else set()), inputs
        rows, width = len(tokens), cache.shape[4]
        self.rows_run += rows
        visible = inputs["visible"] if self.masked else np.ones((rows, width + 1), dtype=np.float32)
        assert visible.shape == (rows, width + 1)
        bias = ((visible - 1.0) * 1e9).astype(np.float32)[:, None, None, :]  # [R, 1, 1, N + 1]
        x = (self.embed[tokens] + self.position[positions])[:, None]  # [R, 1, H]
        past = [(cache[i, 0], cache[i, 1]) for i in range(LAYERS)]
        states, grown = self._run(x, past, bias)
        return {"logits": (states[:, 0] @ self.out).astype(np.float32), "cache": grown}

    def _advance(self, inputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        self.fed = dict(inputs)
        tokens, positions, visible = inputs["tokens"], inputs["positions"], inputs["visible"]
        rows, width = tokens.shape
        cached = inputs["keys_0"].shape[2]
        assert cached >= 1 and visible.shape == (rows, width, cached + width)  # never an empty cache
        self.rows_run += rows
        x = self.embed[tokens] + self.position[positions]  # [R, T, H]
        bias = ((visible - 1.0) * 1e9).astype(np.float32)[:, None]  # [R, 1, T, N + T]
        new = []
        for index, p in enumerate(self.layers):
            k, v = self._heads(x @ p["k"]), self._heads(x @ p["v"])  # [R, heads, T, d]
            new.append(np.stack([k, v]))
            keys = np.concatenate([inputs[f"keys_{index}"], k], axis=2)  # the reference may copy
            values = np.concatenate([inputs[f"values_{index}"], v], axis=2)
            x = self._layer(p, x, keys, values, bias)
        return {"logits": (x[:, -1] @ self.out).astype(np.float32), "new_cache": np.stack(new).astype(np.float32)}
