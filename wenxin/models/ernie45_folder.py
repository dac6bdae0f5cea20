"""Reading an ERNIE 4.5 model folder that someone else wrote: ``config.json``,
``generation_config.json`` and the safetensors weights (one ``model.safetensors``, or shards listed
by ``model.safetensors.index.json``), each value checked before it is used.

A folder is input like any other: every problem is one error naming the file and the key or
tensor, never a traceback, never a silently wrong model, never work out of proportion to the
folder's size. So: config values are typed and ranged; the index's shards must lie in the folder;
each safetensors header is checked before a byte of data is read (a JSON object; every tensor
floating point, its shape a list of sizes, its byte range inside the file and as long as its shape
and dtype make it); the config's sizes must not ask for more parameters than the files hold (a
model is never built from a typo in ``vocab_size``); and every weight must be finite.

The tensors are read with the safetensors library, except bfloat16 ones: numpy has no bfloat16,
and Paddle's safetensors backend reinterprets bytes with a strided view, which a trainer's process
turns off (``FLAGS_use_stride_kernel``), so ``read_weights`` widens them to float32 itself (exact:
a bfloat16 is the high half of a float32).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, BinaryIO, Dict, List, Mapping, Optional, Tuple

import numpy as np

from wenxin.common.errors import CheckpointError, ConfigError
from wenxin.common.files import read_json_object

CONFIG_FILE = "config.json"
GENERATION_CONFIG_FILE = "generation_config.json"
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
MAX_INT = 2**31 - 1  # sizes and ids are int32 in Paddle's kernels
MAX_HEADER_BYTES = 100 * 2**20  # safetensors' own limit on a header
MAX_INDEX_BYTES = 64 * 2**20  # an index lists names and file names: megabytes even for the largest models
# safetensors dtype -> (numpy dtype as stored, bytes an element); bfloat16 is widened by hand (above)
FLOAT_DTYPES: Dict[str, Tuple[Optional[str], int]] = {"F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": (None, 2),
                                                      "F64": ("<f8", 8)}


# settings of Baidu's configs whose other values would change what the model computes, with the
# value wenxin computes (a config that sets another is refused by name); scoring_func is
# PaddleFormers' and transformers' name, moe_gate_act and moe_gate ERNIEKit's (ERNIE's
# configuration.py, whose use_rmsnorm false would mean LayerNorm and moe_dropout_prob dropout
# inside the experts while training)
FIXED_SETTINGS = {"hidden_act": "silu", "use_rmsnorm": True, "scoring_func": "softmax", "moe_gate_act": "softmax",
                  "moe_gate": "topk", "moe_norm_gate_logits": True, "moe_group_experts": False,
                  "moe_use_hard_gate": False, "moe_use_token_type_bias": False, "multimodel_experts": False,
                  "moe_dropout_prob": 0.0}
# other names of a fixed setting's value that compute the same. ERNIE picks its gate class by
# moe_gate (case-insensitive): top2_fused (TopKGateFused, the default of ERNIEKit's and
# PaddleFormers' training arguments) hands its logits to a softmax top-moe_k with the correction
# bias, as topk routes; top2 (Top2Gate) always takes two experts, picks the second from a softmax
# renormalized without the first, and adds Gumbel noise in training: another routing, refused.
# What a gate's capacity may drop is moe_capacity's to say (checked below).
SAME_AS = {"moe_gate": ("top2_fused",)}
# what marks a folder of quantized weights (FP8, W4A8C8, 2-bit): transformers' and PaddleFormers' keys
QUANTIZATION_KEYS = ("quantization_config", "is_quantized", "weight_quantize_algo")


def unsupported_settings(values: Dict[str, Any], source: str) -> List[str]:
    """The problems of a config's settings that wenxin does not compute: another activation or
    norm; a vision-language model's per-modality experts, routing other than softmax top-k with
    normalized weights, dropout inside the experts, a capacity that can drop tokens (wenxin's
    experts take every token routed to them), and quantized weights."""
    problems = []
    experts = values.get("moe_num_experts")
    if isinstance(experts, list) or isinstance(values.get("moe_intermediate_size"), list):
        problems.append(f"{source}: moe_num_experts / moe_intermediate_size: a list per modality is a "
                        f"vision-language model's (text and image experts); not supported")
    for key, wanted in FIXED_SETTINGS.items():
        value = values.get(key)
        accepted = (wanted, *SAME_AS.get(key, ()))
        if value is not None and value not in accepted and not (isinstance(value, str) and value.lower() in accepted):
            problems.append(f"{source}: {key} {value!r} is not supported ({', '.join(map(repr, accepted))} "
                            f"{'are' if len(accepted) > 1 else 'is'})")
    for key in QUANTIZATION_KEYS:
        if values.get(key) not in (None, False, {}, ""):
            described = values[key].get("quant_method") or values[key].get("quantization") \
                if isinstance(values[key], dict) else None
            problems.append(f"{source}: {key}: quantized weights{f' ({described})' if described else ''} are not "
                            f"supported; take the model's bfloat16 folder")
    capacity = values.get("moe_capacity")
    if experts and _is_int(experts) and capacity is not None:
        factors = capacity if isinstance(capacity, list) else [capacity]
        if not all(_is_number(f) for f in factors) or any(f < experts for f in factors):
            problems.append(f"{source}: moe_capacity {capacity!r} can drop tokens (a factor below moe_num_experts "
                            f"{experts}); wenxin's experts take every token routed to them, so results would "
                            f"differ: not supported")
    return problems


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


@dataclasses.dataclass
class Ernie45Config:
    """The shape of an ERNIE 4.5 decoder, dense or a mixture of experts (``moe_num_experts`` > 0:
    ``ernie45_moe``), read from its ``config.json``."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    tie_word_embeddings: bool = True
    use_bias: bool = False
    pad_token_id: int = 0
    bos_token_id: int = 1
    eos_token_id: int = 2
    moe_num_experts: int = 0  # 0: a dense decoder
    moe_k: int = 2
    moe_intermediate_size: int = 0
    moe_num_shared_experts: int = 0
    moe_layer_start_index: int = 0
    moe_layer_end_index: int = -1  # -1: the last layer
    moe_layer_interval: int = 1
    moe_norm_min: float = 1e-12
    moe_use_aux_free: bool = True  # the router's correction bias is in the weights

    def is_moe_layer(self, index: int) -> bool:
        """Whether decoder layer ``index`` holds routed experts."""
        end = self.num_hidden_layers - 1 if self.moe_layer_end_index == -1 else self.moe_layer_end_index
        return bool(self.moe_num_experts) and (index + 1) % self.moe_layer_interval == 0 and \
            self.moe_layer_start_index <= index <= end

    @classmethod
    def from_dict(cls, values: Dict[str, Any], source: str) -> "Ernie45Config":
        """The config from ``config.json``'s values; ``source`` names the file in errors."""
        problems: List[str] = []
        model_type = values.get("model_type")
        if model_type not in (None, "ernie4_5", "ernie4_5_moe"):
            problems.append(f"{source}: model_type is {model_type!r}, not an ERNIE 4.5 decoder (ernie4_5 or "
                            f"ernie4_5_moe)")
        problems += unsupported_settings(values, source)
        if values.get("compression_ratio") not in (None, 1, 1.0):
            problems.append(f"{source}: compression_ratio {values['compression_ratio']!r}: positions scaled for "
                            f"longer contexts are not supported (1.0 only)")
        if values.get("rope_scaling"):
            problems.append(f"{source}: rope_scaling: scaled rotary embeddings are not supported")
        required = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                    "max_position_embeddings")
        problems += [f"{source}: {key} is missing" for key in required if values.get(key) is None]
        if problems:
            raise ConfigError("\n".join(problems))
        fields = {f.name for f in dataclasses.fields(cls)}
        settings = {key: values[key] for key in fields if values.get(key) is not None}
        heads, hidden = values["num_attention_heads"], values["hidden_size"]
        if _is_int(heads) and _is_int(hidden) and heads > 0:
            settings.setdefault("num_key_value_heads", heads)
            settings.setdefault("head_dim", hidden // heads)
        parameters = values.get("rope_parameters")
        theta = parameters.get("rope_theta") if isinstance(parameters, dict) else None
        if "rope_theta" not in settings and theta is not None:
            settings["rope_theta"] = theta
        config = cls(**settings)
        config.check(source)
        return config

    @classmethod
    def from_folder(cls, folder: str) -> "Ernie45Config":
        path = os.path.join(folder, CONFIG_FILE)
        if not os.path.isfile(path):
            raise ConfigError(f"{folder}: no {CONFIG_FILE} (an ERNIE 4.5 model folder holds config.json and "
                              f"its safetensors weights)")
        return cls.from_dict(read_json_object(path), path)

    def check(self, source: str) -> None:
        """Every value typed and in range; each problem names ``source`` and the key."""
        problems = self._value_problems(source)
        if not problems and self.num_attention_heads % self.num_key_value_heads:
            problems.append(f"{source}: num_attention_heads {self.num_attention_heads} is not a multiple of "
                            f"num_key_value_heads {self.num_key_value_heads}")
        if not problems and self.head_dim % 2:
            problems.append(f"{source}: head_dim {self.head_dim} must be even (rotary embeddings turn pairs)")
        if problems:
            raise ConfigError(problems=problems)

    def _value_problems(self, source: str) -> List[str]:
        """Each value that is not of its type or range, one problem each."""
        problems = []
        for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                    "num_key_value_heads", "head_dim", "max_position_embeddings"):
            value = getattr(self, key)
            if not _is_int(value) or not 1 <= value <= MAX_INT:
                problems.append(f"{source}: {key} must be an integer from 1 to {MAX_INT}, got {value!r}")
        for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
            value = getattr(self, key)
            if not _is_int(value) or value < 0 or (_is_int(self.vocab_size) and value >= self.vocab_size):
                problems.append(f"{source}: {key} must be a token id (0 to vocab_size - 1), got {value!r}")
        if not _is_number(self.rms_norm_eps) or not 0 < self.rms_norm_eps < 1:
            problems.append(f"{source}: rms_norm_eps must be a number between 0 and 1, got {self.rms_norm_eps!r}")
        if not _is_number(self.rope_theta) or self.rope_theta <= 0:
            problems.append(f"{source}: rope_theta must be a positive number, got {self.rope_theta!r}")
        problems += self._moe_problems(source)
        for key in ("tie_word_embeddings", "use_bias", "moe_use_aux_free"):
            if not isinstance(getattr(self, key), bool):
                problems.append(f"{source}: {key} must be true or false, got {getattr(self, key)!r}")
        return problems

    def _moe_problems(self, source: str) -> List[str]:
        """The MoE sizes' problems (none for a dense config)."""
        if self.moe_num_experts == 0:
            return []
        problems = []
        for key in ("moe_num_experts", "moe_k", "moe_intermediate_size", "moe_layer_interval"):
            value = getattr(self, key)
            if not _is_int(value) or not 1 <= value <= MAX_INT:
                problems.append(f"{source}: {key} must be an integer from 1 to {MAX_INT}, got {value!r}")
        for key in ("moe_num_shared_experts", "moe_layer_start_index"):
            if not _is_int(getattr(self, key)) or getattr(self, key) < 0:
                problems.append(f"{source}: {key} must be a whole number, got {getattr(self, key)!r}")
        if not _is_int(self.moe_layer_end_index) or self.moe_layer_end_index < -1:
            problems.append(f"{source}: moe_layer_end_index must be a layer index or -1, got "
                            f"{self.moe_layer_end_index!r}")
        if not problems and self.moe_k > self.moe_num_experts:
            problems.append(f"{source}: moe_k {self.moe_k} is more than moe_num_experts {self.moe_num_experts}")
        if not _is_number(self.moe_norm_min) or not 0 < self.moe_norm_min < 1:
            problems.append(f"{source}: moe_norm_min must be a number between 0 and 1, got {self.moe_norm_min!r}")
        return problems

    def parameter_count(self) -> int:
        """How many numbers a model of this config holds (what its files must hold at least)."""
        hidden = self.hidden_size
        queries, keys = self.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim
        attention = hidden * (queries + 2 * keys) + queries * hidden
        biases = (queries + 2 * keys + hidden) if self.use_bias else 0
        total = self.vocab_size * hidden + hidden + (0 if self.tie_word_embeddings else self.vocab_size * hidden)
        for index in range(self.num_hidden_layers):
            total += attention + biases + 2 * hidden + self._feed_forward_count(index)
        return total

    def _feed_forward_count(self, index: int) -> int:
        """The parameters of layer ``index``'s feed-forward part: a SwiGLU, or the experts, the
        shared experts, the router and its correction bias."""
        def swiglu(inner: int) -> int:
            return 3 * self.hidden_size * inner + ((2 * inner + self.hidden_size) if self.use_bias else 0)
        if not self.is_moe_layer(index):
            return swiglu(self.intermediate_size)
        shared = self.moe_intermediate_size * self.moe_num_shared_experts
        return (self.moe_num_experts * swiglu(self.moe_intermediate_size) + (swiglu(shared) if shared else 0)
                + self.hidden_size * self.moe_num_experts + (self.moe_num_experts if self.moe_use_aux_free else 0))


def generation_defaults(folder: str) -> Dict[str, Any]:
    """Decoding settings the folder's ``generation_config.json`` gives (``strategy``: sample
    where it says ``do_sample``, else greedy; ``temperature``, ``top_p``, ``top_k``; the end
    tokens ``eos_token_id``, one id or a list), empty without the file. Each value is checked:
    an error names the file and the key."""
    path = os.path.join(folder, GENERATION_CONFIG_FILE)
    if not os.path.isfile(path):
        return {}
    values = read_json_object(path)
    do_sample = values.get("do_sample", False)
    if not isinstance(do_sample, bool):
        raise ConfigError(f"{path}: do_sample must be true or false, got {do_sample!r}")
    settings: Dict[str, Any] = {"strategy": "sample" if do_sample else "greedy"}
    ranges = {"temperature": (float, lambda v: v >= 0, "a number of at least 0"),
              "top_p": (float, lambda v: 0 < v <= 1, "a number above 0 and at most 1"),
              "top_k": (int, lambda v: _is_int(v) and 0 <= v <= MAX_INT, "a whole number of at least 0")}
    for key, (kind, fits, said) in ranges.items():
        value = values.get(key)
        if value is not None:
            if not _is_number(value) or not fits(value):
                raise ConfigError(f"{path}: {key} must be {said}, got {value!r}")
            settings[key] = kind(value)
    eos = values.get("eos_token_id")
    eos_ids = eos if isinstance(eos, list) else [] if eos is None else [eos]
    if not all(_is_int(i) and 0 <= i <= MAX_INT for i in eos_ids):
        raise ConfigError(f"{path}: eos_token_id must be a token id or a list of them, got {eos!r}")
    settings["stop_ids"] = eos_ids
    return settings


# ---- the weights ----
@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """One tensor of a safetensors file, as its checked header says: dtype, shape, byte range."""

    dtype: str
    shape: Tuple[int, ...]
    begin: int
    end: int

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def tensor_specs(path: str) -> Dict[str, TensorSpec]:
    """The checked header of the safetensors file at ``path``: every tensor floating point, with a
    shape of sizes and a byte range inside the file exactly as long as they make it."""
    try:
        file_size = os.path.getsize(path)
        with open(path, "rb") as f:
            length = int.from_bytes(f.read(8), "little")
            if file_size < 8 or not 2 <= length <= min(MAX_HEADER_BYTES, file_size - 8):
                raise CheckpointError(f"{path}: not a safetensors file (it does not start with the length of a "
                                      f"header that fits in the file; a pickle saved under this name?)")
            header = json.loads(f.read(length).decode("utf-8"))
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e})") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{path}: not a safetensors file (its header is not JSON: {e})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: not a safetensors file (its header is a {type(header).__name__}, not an "
                              f"object of tensors)")
    data_bytes = file_size - 8 - length
    specs = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        specs[name] = _tensor_spec(path, name, spec, data_bytes)
    return specs


def _tensor_spec(path: str, name: str, spec: Any, data_bytes: int) -> TensorSpec:
    where = f"{path}: tensor {name!r}"
    if not isinstance(spec, dict):
        raise CheckpointError(f"{where}: its header entry is not an object")
    dtype, shape, offsets = spec.get("dtype"), spec.get("shape"), spec.get("data_offsets")
    if dtype not in FLOAT_DTYPES:
        raise CheckpointError(f"{where} is {dtype!r}; model weights are floating point "
                              f"({', '.join(FLOAT_DTYPES)})")
    if not isinstance(shape, list) or not all(_is_int(s) and 0 <= s <= MAX_INT for s in shape):
        raise CheckpointError(f"{where}: its shape must be a list of sizes, got {shape!r}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)
            and 0 <= offsets[0] <= offsets[1] <= data_bytes):
        raise CheckpointError(f"{where}: its data_offsets must be [begin, end] inside the file's "
                              f"{data_bytes} bytes of data, got {offsets!r}")
    result = TensorSpec(dtype, tuple(shape), offsets[0], offsets[1])
    if result.end - result.begin != result.size * FLOAT_DTYPES[dtype][1]:
        raise CheckpointError(f"{where}: {result.end - result.begin} bytes, but its shape {shape} of {dtype} "
                              f"makes {result.size * FLOAT_DTYPES[dtype][1]}")
    return result


def checkpoint_files(folder: str) -> Dict[str, str]:
    """Weight name -> the safetensors file that holds it, from the index or the single file. An
    index must map names to file names inside the folder."""
    index = os.path.join(folder, INDEX_FILE)
    if not os.path.isfile(index):
        single = os.path.join(folder, SINGLE_FILE)
        if not os.path.isfile(single):
            raise CheckpointError(f"{folder}: no {INDEX_FILE} and no {SINGLE_FILE}")
        return {name: single for name in tensor_specs(single)}
    if os.path.getsize(index) > MAX_INDEX_BYTES:
        raise CheckpointError(f"{index}: {os.path.getsize(index)} bytes; an index is at most {MAX_INDEX_BYTES}")
    try:
        weight_map = read_json_object(index).get("weight_map")
    except ConfigError as e:
        raise CheckpointError(str(e)) from None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index}: weight_map must be an object of weight name -> shard file, got "
                              f"{type(weight_map).__name__}")
    home = os.path.abspath(folder)
    files = {}
    for name, file in weight_map.items():
        if not isinstance(file, str) or not file:
            raise CheckpointError(f"{index}: weight_map[{name!r}] must be a shard's file name, got {file!r}")
        # by the name, not the link's target: a hub's cache links each file of a folder to its blob
        path = os.path.normpath(os.path.join(home, file))
        if os.path.dirname(path) != home and not path.startswith(home + os.sep):
            raise CheckpointError(f"{index}: weight_map[{name!r}] names {file!r}, outside the model folder")
        files[name] = path
    missing = sorted({path for path in files.values() if not os.path.isfile(path)})
    if missing:
        raise CheckpointError(f"{index}: lists shards that are not in the folder: {', '.join(missing)}")
    return files


def weight_layout(folder: str) -> Tuple[Dict[str, str], Dict[str, Dict[str, TensorSpec]]]:
    """The folder's weights by file, checked but not read: name -> file, and file -> its specs."""
    files = checkpoint_files(folder)
    specs = {path: tensor_specs(path) for path in sorted(set(files.values()))}
    for name, path in files.items():
        if name not in specs[path]:
            raise CheckpointError(f"{path}: the index puts {name!r} here, but the file does not hold it")
    return files, specs


def sized_layout(folder: str, config: Ernie45Config) -> Tuple[Dict[str, str], Dict[str, Dict[str, TensorSpec]]]:
    """``weight_layout``, after checking that the files hold at least as many values as the
    config's model: called before a model of the config's size is built."""
    layout = weight_layout(folder)
    held = held_values(layout[1])
    if held < config.parameter_count():
        raise CheckpointError(f"{folder}: config.json's sizes make a model of {config.parameter_count():,} "
                              f"parameters, but its weight files hold {held:,} values (vocab_size "
                              f"{config.vocab_size}, hidden_size {config.hidden_size}, num_hidden_layers "
                              f"{config.num_hidden_layers})")
    return layout


def read_weights(folder: str, specs: Optional[Tuple[Dict[str, str], Dict[str, Dict[str, TensorSpec]]]] = None
                 ) -> Dict[str, np.ndarray]:
    """Every tensor the folder's index (or single file) names, as float32 numpy arrays; a tensor
    with a NaN or an infinity is refused by name. ``specs``: ``weight_layout``'s, when read."""
    from safetensors import SafetensorError, safe_open
    files, by_file = specs or weight_layout(folder)
    names_by_file: Dict[str, List[str]] = {}
    for name, path in files.items():
        names_by_file.setdefault(path, []).append(name)
    weights: Dict[str, np.ndarray] = {}
    for path, names in names_by_file.items():
        file_specs = by_file[path]
        try:
            with safe_open(path, "np") as f, open(path, "rb") as raw:
                data_start = 8 + int.from_bytes(raw.read(8), "little")  # after the header (checked)
                for name in names:
                    if file_specs[name].dtype == "BF16":
                        value = _bfloat16_tensor(raw, data_start, file_specs[name])
                    else:
                        value = f.get_tensor(name).astype(np.float32, copy=False)
                    _check_finite(path, name, value)
                    weights[name] = value
        except SafetensorError as e:
            raise CheckpointError(f"{path}: not a readable safetensors file ({e})") from None
    return weights


def held_values(specs: Mapping[str, Mapping[str, TensorSpec]]) -> int:
    """How many numbers the folder's files hold."""
    return sum(spec.size for file_specs in specs.values() for spec in file_specs.values())


def _bfloat16_tensor(raw: BinaryIO, data_start: int, spec: TensorSpec) -> np.ndarray:
    """One bfloat16 tensor of an open safetensors file whose data begin at ``data_start``."""
    raw.seek(data_start + spec.begin)
    halves = np.frombuffer(raw.read(spec.end - spec.begin), dtype="<u2")
    return (halves.astype(np.uint32) << 16).view(np.float32).reshape(spec.shape)


def _check_finite(path: str, name: str, value: np.ndarray) -> None:
    if value.size and not np.isfinite(value).all():
        bad = int(value.size - np.count_nonzero(np.isfinite(value)))
        raise CheckpointError(f"{path}: tensor {name!r} holds {bad} NaN or infinite values of {value.size}; a "
                              f"model's weights must be finite")
