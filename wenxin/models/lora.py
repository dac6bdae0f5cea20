"""LoRA: low-rank adapters on a model's linear layers, trained while the model stays frozen.

A linear layer ``y = x W + b`` (``W`` ``[in, out]``, as Paddle holds it) gains two matrices,
``A`` ``[in, rank]`` and ``B`` ``[rank, out]``, and computes
``y = x W + b + dropout(x) A B * alpha / rank``. ``B`` starts at zero, so training starts from the
pretrained model exactly. Only ``A`` and ``B`` train; checkpoints hold only them (the frozen
weights come from the model's folder again on resume). At export the adapters are merged,
``W' = W + A B * alpha / rank`` (``merged_weights``), so an exported model has plain linear layers
and every inference path stays one format; the trainer restores the unmerged weights bit for bit
afterwards.

``apply_lora`` swaps the chosen layers (by their attribute name, ``q_proj``, ``v_proj``, ...)
for ``LoRALinear`` layers that keep the same ``weight`` and ``bias`` parameters, so parameter
names stay the checkpoint's (``...q_proj.weight``) and the adapters are ``...q_proj.lora_A`` and
``...q_proj.lora_B``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import zlib
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Set

import numpy as np
import wenxin.common.paddle_required  # noqa: F401 (before Paddle: one clear line if it cannot run wenxin)
import paddle
import paddle.nn.functional as F
from paddle import nn

from wenxin.common.errors import ConfigError
from wenxin.common.held_state import exact_array, state_held
from wenxin.models.held_dtype import computed, to_held

ADAPTER_NAMES = ("lora_A", "lora_B")
# the schema's bound on model.lora.rank (the widest linear layer of ERNIE 4.5 300B-A47B is 28,672);
# apply_lora bounds it by the adapted layers' own sizes
MAX_LORA_RANK = 1 << 16


@dataclasses.dataclass
class LoRASettings:
    """``rank`` and ``alpha`` (the update is scaled by ``alpha / rank``), ``dropout`` on the
    adapter's input, the attribute names of the linear layers that get adapters, and in a
    mixture-of-experts model which experts' layers of those names do (``experts``: ``all``, the
    routed and the shared ones; ``shared``; ``none``: the attention's and dense layers' only)."""

    rank: int
    alpha: float
    dropout: float
    target_modules: Sequence[str]
    experts: str = "all"

    def adapts(self, layer_path: str) -> bool:
        """Whether the experts choice lets the layer at ``layer_path`` (its parent's full name)
        have adapters."""
        parts = layer_path.split(".")
        if "experts" in parts:  # a routed expert: ...mlp.experts.<i>
            return self.experts == "all"
        if "shared_experts" in parts:
            return self.experts in ("all", "shared")
        return True

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank


class LoRALinear(nn.Linear):
    """A linear layer with a low-rank adapter (see the module docstring)."""

    def __init__(self, linear: nn.Linear, settings: LoRASettings, rng: Optional[np.random.Generator] = None) -> None:
        nn.Layer.__init__(self)  # the parameters are the wrapped layer's own, not new ones
        self.weight = linear.weight  # [in, out]
        self.bias = linear.bias
        self.name = getattr(linear, "name", None)
        fan_in, fan_out = self.weight.shape
        self.scaling = settings.scaling
        self.disabled = False  # the plain layer: merged for export, or the frozen model (DPO's reference)
        bound = 1.0 / math.sqrt(fan_in)  # A as nn.Linear initializes its weight (PEFT's choice too)
        # A's values are drawn here, by NumPy, rather than by Paddle's initializer: an eager model
        # and a static program draw from different Paddle streams, and the two graph modes must
        # start from the same adapters to give the same losses
        rng = rng if rng is not None else np.random.default_rng()
        initial = rng.uniform(-bound, bound, size=(fan_in, settings.rank)).astype(np.float32)
        self.lora_A = self.create_parameter([fan_in, settings.rank],
                                            default_initializer=nn.initializer.Assign(initial))
        self.lora_B = self.create_parameter([settings.rank, fan_out],
                                            default_initializer=nn.initializer.Constant(0.0))
        self.lora_dropout = nn.Dropout(settings.dropout) if settings.dropout > 0 else None

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        bias = None if self.bias is None else computed(self.bias, x.dtype)
        out = F.linear(x, computed(self.weight, x.dtype), bias)  # the weight may be held in bfloat16
        if self.disabled:
            return out
        adapter_input = self.lora_dropout(x) if self.lora_dropout is not None else x
        return out + paddle.matmul(paddle.matmul(adapter_input, self.lora_A), self.lora_B) * self.scaling



def adapter_seed() -> int:
    """The seed of the adapters' initial values: the next value of NumPy's global stream, which
    the trainer seeds with ``trainer.seed`` (so a run's seed chooses its adapters), read without
    advancing it (nothing drawn after it changes)."""
    state = np.random.get_state()
    seed = int(np.random.randint(0, 2**31 - 1))
    np.random.set_state(state)
    return seed


def apply_lora(model: nn.Layer, settings: LoRASettings, key: str = "model.lora") -> List[str]:
    """Swap every ``nn.Linear`` of ``model`` named in ``settings.target_modules`` for a
    ``LoRALinear`` and freeze every other parameter; returns the swapped layers' full names.
    A target name no linear layer has is a ``ConfigError`` naming ``key``."""
    targets = []  # (parent layer, attribute name, full name, layer)
    linear_names: Set[str] = set()
    for full_name, layer in list(model.named_sublayers()):
        for child_name, child in list(layer.named_children()):
            if not isinstance(child, nn.Linear) or isinstance(child, LoRALinear):
                continue
            linear_names.add(child_name)
            if child_name in settings.target_modules and settings.adapts(full_name):
                targets.append((layer, child_name, f"{full_name}.{child_name}" if full_name else child_name, child))
    found = {child_name for _, child_name, _, _ in targets}
    unknown = [name for name in settings.target_modules if name not in found]
    if unknown:
        raise ConfigError(f"{key}.target_modules: no linear layer is named {', '.join(map(repr, unknown))} "
                          f"(the model's: {', '.join(sorted(linear_names)) or 'none'})")
    _check_rank(settings.rank, [(name, child) for _, _, name, child in targets], key)
    seed = adapter_seed()
    for layer, child_name, name, child in targets:
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])  # each layer its own stream
        setattr(layer, child_name, LoRALinear(child, settings, rng))
    for name, parameter in model.named_parameters():
        if name.rsplit(".", 1)[-1] not in ADAPTER_NAMES:
            parameter.stop_gradient = True
            parameter.trainable = False
    return [name for _, _, name, _ in targets]


def _check_rank(rank: int, targets: Sequence[Any], key: str) -> None:
    """A rank above an adapted layer's smaller side (``min(in, out)``) adds parameters and memory
    but no capacity (``A B`` cannot exceed that rank): refused, naming the narrowest layer."""
    name, narrowest = min(((name, min(layer.weight.shape)) for name, layer in targets), key=lambda t: t[1])
    if rank > narrowest:
        raise ConfigError(f"{key}.rank: {rank} is above {narrowest}, the smaller side of the adapted layer {name} "
                          f"(an update A B of a larger rank has no more capacity, only more memory): use at most "
                          f"{narrowest}")


def adapter_parameter_names(model: nn.Layer) -> Set[str]:
    """The structured names of the model's adapter parameters (``...q_proj.lora_A``)."""
    return {name for name, _ in model.named_parameters() if name.rsplit(".", 1)[-1] in ADAPTER_NAMES}


def lora_layers(model: nn.Layer) -> List[LoRALinear]:
    return [layer for layer in model.sublayers() if isinstance(layer, LoRALinear)]


def merged_weights(model: nn.Layer, state: Mapping[str, Any]) -> Dict[str, np.ndarray]:
    """The weights of ``model``'s adapted layers with their adapters merged, ``W + A B * alpha /
    rank`` (computed in float64, rounded once), by structured name, from ``state`` (the model's
    parameters by structured name: tensors or arrays, eager or a static program's)."""
    merged = {}
    for name, layer in model.named_sublayers():
        if isinstance(layer, LoRALinear):
            weight = exact_array(state[f"{name}.weight"])  # float32 for a weight held in bfloat16
            delta = np.asarray(state[f"{name}.lora_A"], np.float64) @ np.asarray(state[f"{name}.lora_B"], np.float64)
            merged[f"{name}.weight"] = (weight.astype(np.float64) + delta * layer.scaling).astype(weight.dtype)
    return merged


@contextlib.contextmanager
def merged_adapters(model: nn.Layer) -> Iterator[int]:
    """Inside (eager): every adapter merged into its layer's weight, the adapters bypassed. After:
    the weights as they were, bit for bit. Yields how many layers were merged."""
    parameters = dict(model.named_parameters())

    def set_state(values: Dict[str, Any]) -> None:
        for name, value in values.items():
            parameters[name].set_value(to_held(value, parameters[name]))  # held in bfloat16: rounded
    merged = merged_weights(model, parameters)
    with state_held(parameters, merged, set_state), adapters_disabled(model):
        yield len(merged)


@contextlib.contextmanager
def adapters_disabled(model: nn.Layer) -> Iterator[None]:
    """Inside: every adapter bypassed, so the model computes as the frozen model it adapts (in a
    static graph, what is built inside computes that way)."""
    layers = lora_layers(model)
    try:
        for layer in layers:
            layer.disabled = True
        yield
    finally:
        for layer in layers:
            layer.disabled = False
