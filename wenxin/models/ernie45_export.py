"""An ERNIE 4.5 decoder written as the ``-PT`` model folder that PaddleFormers, transformers,
FastDeploy and vLLM load, and wenxin's own ``load_ernie45`` too: its weights under the checkpoint
names (``model.layers.0.self_attn.q_proj.weight``, linear weights ``[out, in]``) in safetensors
shards (``safetensors_shards``), the ``config.json`` of the folder it was trained from with the
dtype written, its ``generation_config.json``, and its tokenizer's files.
"""
from __future__ import annotations

import json
import math
import os
import shutil
from typing import Any, Dict, List, Mapping

import numpy as np

from wenxin.common.errors import ConfigError
from wenxin.common.held_state import exact_array
from wenxin.models.ernie45 import is_linear_weight
from wenxin.models.ernie45_folder import CONFIG_FILE, GENERATION_CONFIG_FILE
from wenxin.models.lora import ADAPTER_NAMES
from wenxin.models.safetensors_shards import DTYPES, write_shards
# what a tokenizer of an ERNIE 4.5 folder is made of (those the source folder has are copied)
TOKENIZER_FILES = ("tokenizer.model", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "chat_template.jinja", "chat_template.json")
DEFAULT_MAX_SHARD_BYTES = 5 * 10**9  # Hugging Face's default shard size


def pt_layout_weights(state: Mapping[str, Any]) -> Dict[str, np.ndarray]:
    """The decoder's weights by checkpoint name as the ``-PT`` layout holds them (linear weights
    ``[out, in]``), from its parameters by the same names as Paddle holds them; adapters are left
    out (merge them into their layers first). A weight that is not finite is an error naming it."""
    weights: Dict[str, np.ndarray] = {}
    for name, value in state.items():
        if name.rsplit(".", 1)[-1] in ADAPTER_NAMES:
            continue
        array = np.asarray(exact_array(value), dtype=np.float32)  # a weight held in bfloat16 as its values
        if not np.isfinite(array).all():
            raise ConfigError(f"export: the weight {name} holds NaN or infinite values; such a model is not written")
        if is_linear_weight(name) and array.ndim == 2:
            array = array.T
        weights[name] = np.ascontiguousarray(array)
    return weights


def kept_in_float32(name: str) -> bool:
    """A weight a bfloat16 folder keeps in float32, as Baidu's ERNIE 4.5 MoE folders do and
    transformers loads them (``_keep_in_fp32_modules_strict``): a MoE layer's router
    (``mlp.gate.weight``) and its correction bias (``mlp.moe_statics.*``). Rounded, they could
    change which experts a token goes to."""
    parts = name.split(".")
    return parts[-3:-1] == ["mlp", "gate"] or "moe_statics" in parts


def write_pt_folder(folder: str, weights: Mapping[str, np.ndarray], source: str, dtype: str,
                    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES) -> List[str]:
    """Write the ``-PT`` folder of ``weights`` (``pt_layout_weights``) into the empty ``folder``:
    the shards in ``dtype`` (``float32`` or ``bfloat16``; the router's weights float32 either way:
    ``kept_in_float32``), and ``source``'s (the model folder it
    was trained from) config, generation config and tokenizer files. Returns the files written."""
    if dtype not in DTYPES:
        raise ConfigError(f"--dtype: {dtype!r} is not one of {', '.join(DTYPES)}")
    if max_shard_bytes < 1:
        raise ConfigError(f"--max_shard_mb: the largest shard must hold at least one byte, got {max_shard_bytes}")
    written, _ = write_shards(folder, weights, dtype, max_shard_bytes, [n for n in weights if kept_in_float32(n)])
    with open(os.path.join(source, CONFIG_FILE), encoding="utf-8") as f:
        config = json.load(f)
    config.update(torch_dtype=dtype, dtype=dtype)  # transformers reads either name, PaddleFormers dtype
    with open(os.path.join(folder, CONFIG_FILE), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
    written.append(CONFIG_FILE)
    for name in (GENERATION_CONFIG_FILE, *TOKENIZER_FILES):
        if os.path.isfile(os.path.join(source, name)):
            shutil.copyfile(os.path.join(source, name), os.path.join(folder, name))
            written.append(name)
    return written


def shard_bytes(megabytes: float) -> int:
    """``--max_shard_mb`` in bytes (at least one)."""
    if not math.isfinite(megabytes) or megabytes <= 0:
        raise ConfigError(f"--max_shard_mb: a positive number of megabytes, got {megabytes!r}")
    return max(1, int(megabytes * 10**6))
