"""Pretrained ERNIE/BERT weights in the layouts people download them in, renamed to wenxin's
encoder names (``ernie.`` + PaddleNLP's ``ErnieModel`` names, see ``wenxin.models.ernie``).

Layouts:
- **PaddleNLP / PaddleFormers**: a folder with ``model_state.pdparams`` or ``model.safetensors``
  (and ``config.json`` / ``model_config.json``). Names are bare (``embeddings.*``), or carry the
  task model's prefix (``ernie.``, ``bert.``).
- **ERNIE-kit model hub**: ``<model>_dir/params``, either a folder of one tensor file per
  parameter (``paddle.static`` ``save_vars``, read here without unpickling) or one pickled dict,
  with the names ``erniekit/modules/ernie.py`` gives its parameters (``word_embedding``,
  ``encoder_layer_0_multi_head_att_query_fc.w_0``, ...), and ``ernie_config.json``.

Names that belong to neither an ERNIE encoder (a task head, say) pass through unchanged, so the
load report lists them as unexpected.
"""
from __future__ import annotations

import os
import re
import struct
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np

from wenxin.common.errors import CheckpointError
from wenxin.common.paddle_tensor_files import parse_tensor

ENCODER_PREFIX = "ernie."  # where wenxin's ERNIE task models keep their encoder
PADDLENLP_FILES = ("model.safetensors", "model_state.pdparams")
ENCODER_ROOTS = ("embeddings.", "encoder.", "pooler.")
OTHER_ENCODER_PREFIXES = ("bert.", "roberta.")  # task models' encoder prefixes other than ENCODER_PREFIX

_ERNIEKIT_NAMES = {
    "word_embedding": "embeddings.word_embeddings.weight",
    "pos_embedding": "embeddings.position_embeddings.weight",
    "sent_embedding": "embeddings.token_type_embeddings.weight",
    "task_embedding": "embeddings.task_type_embeddings.weight",
    "pre_encoder_layer_norm_scale": "embeddings.layer_norm.weight",
    "pre_encoder_layer_norm_bias": "embeddings.layer_norm.bias",
    "pooled_fc.w_0": "pooler.dense.weight",
    "pooled_fc.b_0": "pooler.dense.bias",
}
# ERNIE-Gen's output layer (ERNIE-kit's names) -> wenxin's ErnieInfillingGeneration.lm_head (not under ernie.)
_ERNIEKIT_HEAD_NAMES = {
    "mask_lm_trans_fc.w_0": "lm_head.transform.weight", "mask_lm_trans_fc.b_0": "lm_head.transform.bias",
    "mask_lm_trans_layer_norm_scale": "lm_head.layer_norm.weight",
    "mask_lm_trans_layer_norm_bias": "lm_head.layer_norm.bias",
    "mask_lm_out_fc.b_0": "lm_head.bias", "mask_lm_out_fc.w_0": "lm_head.decoder.weight",
}
_ERNIEKIT_LAYER_MODULES = {
    "multi_head_att_query_fc": "self_attn.q_proj", "multi_head_att_key_fc": "self_attn.k_proj",
    "multi_head_att_value_fc": "self_attn.v_proj", "multi_head_att_output_fc": "self_attn.out_proj",
    "ffn_fc_0": "linear1", "ffn_fc_1": "linear2",
}
_ERNIEKIT_LAYER = re.compile(r"^encoder_layer_(\d+)_(?:(post_att|post_ffn)_layer_norm_(scale|bias)|"
                             r"(multi_head_att_(?:query|key|value|output)_fc|ffn_fc_[01])\.([wb])_0)$")



def erniekit_to_paddlenlp(name: str) -> Optional[str]:
    """PaddleNLP's name of one ERNIE-kit parameter, or None for names that are not the encoder's."""
    if name in _ERNIEKIT_NAMES:
        return _ERNIEKIT_NAMES[name]
    match = _ERNIEKIT_LAYER.match(name)
    if not match:
        return None
    index, norm, norm_kind, module, kind = match.groups()
    if norm:
        return f"encoder.layers.{index}.{'norm1' if norm == 'post_att' else 'norm2'}." \
               f"{'weight' if norm_kind == 'scale' else 'bias'}"
    return f"encoder.layers.{index}.{_ERNIEKIT_LAYER_MODULES[module]}.{'weight' if kind == 'w' else 'bias'}"


def to_wenxin_names(params: Mapping[str, Any]) -> Tuple[Dict[str, Any], str]:
    """Rename a PaddleNLP, BERT or ERNIE-kit state dict to ``ernie.<PaddleNLP name>``; returns
    the renamed dict and the layout found (``erniekit``, ``paddlenlp`` or ``wenxin`` when nothing
    needed renaming)."""
    if "word_embedding" in params or any(_ERNIEKIT_LAYER.match(n) for n in params):
        renamed = {}
        for name, value in params.items():
            new = erniekit_to_paddlenlp(name)
            renamed[ENCODER_PREFIX + new if new else _ERNIEKIT_HEAD_NAMES.get(name, name)] = value
        return renamed, "erniekit"
    if any(name.startswith(ENCODER_ROOTS) for name in params):  # a bare ErnieModel / BertModel
        return {(ENCODER_PREFIX + n if n.startswith(ENCODER_ROOTS) else n): v for n, v in params.items()}, "paddlenlp"
    renamed, layout = {}, "wenxin"
    for name, value in params.items():
        for prefix in OTHER_ENCODER_PREFIXES:  # bert.embeddings... -> ernie.embeddings...
            if name.startswith(prefix) and name[len(prefix):].startswith(ENCODER_ROOTS):
                name, layout = ENCODER_PREFIX + name[len(prefix):], "paddlenlp"
                break
        renamed[name] = value
    return renamed, layout


def find_weights(path: str) -> Optional[str]:
    """The weights of a pretrained-model folder: PaddleNLP's ``model.safetensors`` or
    ``model_state.pdparams``, or ERNIE-kit's ``params``; None when the folder has none of them."""
    if not os.path.isdir(path):
        return None
    for name in PADDLENLP_FILES + ("params",):
        if os.path.exists(os.path.join(path, name)):
            return os.path.join(path, name)
    return None


def is_tensor_folder(path: str) -> bool:
    """A folder of one Paddle tensor file per parameter (ERNIE-kit's ``params``)."""
    if not os.path.isdir(path):
        return False
    names = [n for n in os.listdir(path) if not n.startswith(".")]
    return bool(names) and all(os.path.isfile(os.path.join(path, n)) for n in names) \
        and not any(n.endswith((".json", ".txt", ".pdparams", ".safetensors", ".pdmodel")) for n in names)


def read_tensor_folder(folder: str) -> Dict[str, np.ndarray]:
    """Every tensor file of ``folder``, named by its file name; an entry that is not one is named."""
    tensors = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.startswith("."):
            continue
        if not os.path.isfile(path):
            raise CheckpointError(f"{path}: not a file; an ERNIE-kit params folder holds one tensor file per "
                                  f"parameter")
        tensors[name] = read_tensor_file(path)
    return tensors


def read_tensor_file(path: str) -> np.ndarray:
    """One tensor in Paddle's dense tensor format (what ``paddle.static.save_vars`` and ERNIE-kit's
    ``params`` folders hold), read with numpy (``paddle_tensor_files``), so a foreign file is never
    unpickled."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        return parse_tensor(data)
    except (ValueError, struct.error) as e:
        raise CheckpointError(f"{path}: not a Paddle tensor file ({e})") from None


SAFETENSORS_FILE = PADDLENLP_FILES[0]  # model.safetensors: what a folder's converted weights are named


def convert_to_safetensors(source: str, output: str = "") -> Tuple[str, int]:
    """Write the weights of ``source`` once as safetensors, so only safe files need be kept.

    ``source`` is a pickled params file (``.pdparams``, ERNIE-kit's single-file ``params``), or
    a PaddleNLP / ERNIE-kit model folder, whose weights become ``<folder>/model.safetensors``
    (which the folder then loads first). A file becomes ``<name>.safetensors`` beside it.
    Parameter names stay as saved. An existing ``output`` is never overwritten. Returns the
    file written and the number of parameters."""
    from wenxin.common.pickled_weights import load_pickled_weights
    from wenxin.common.state_io import save_arrays

    if not os.path.exists(source):
        raise CheckpointError(f"weights not found: {source}")
    weights = find_weights(source) if os.path.isdir(source) else source
    if weights is None:
        raise CheckpointError(f"{source}: a folder without weights (looked for {', '.join(PADDLENLP_FILES)} "
                              f"and params)")
    if weights.endswith(".safetensors"):
        raise CheckpointError(f"{weights}: already safetensors")
    if not output:
        output = os.path.join(source, SAFETENSORS_FILE) if os.path.isdir(source) else \
            (weights[:-len(".pdparams")] if weights.endswith(".pdparams") else weights) + ".safetensors"
    if os.path.exists(output):
        raise CheckpointError(f"{output}: exists; it is kept (remove it, or name another --output)")
    params = read_tensor_folder(weights) if is_tensor_folder(weights) else load_pickled_weights(weights, "weights file")
    tmp = f"{output}.tmp"
    try:
        save_arrays(tmp, params)
        os.replace(tmp, output)
    except OSError as e:
        raise CheckpointError(f"{output}: cannot write ({e.strerror or e})") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return output, len(params)
