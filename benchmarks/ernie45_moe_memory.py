"""The memory a LoRA fine-tuning of ERNIE-4.5-21B-A3B needs, computed from its shapes (issue 58).

    python benchmarks/ernie45_moe_memory.py [--config path/to/config.json] [--tokens 4096] [--rank 8]

Nothing is run on a model: the parameters are counted from ``config.json``'s shapes (the defaults
are those of Baidu's ERNIE-4.5-21B-A3B-PT folder: 28 layers, hidden 2560, 20 query and 4
key/value heads of 128, 64 routed experts of 1536 with 6 chosen a token, 2 shared experts, layer 0
dense with 12288, a tied 103,424-token vocabulary). It prints, in GiB:

- the weights in bfloat16 and in float32 (wenxin's loader today holds them in float32);
- the LoRA adapters of two choices of layers (attention only; attention and every expert's three
  projections), with their gradients and AdamW's float32 moments and master copy;
- a step's logits over the vocabulary (float32, with their gradient) for ``--tokens`` tokens;
- the activations kept with recompute (each layer's input, bfloat16) and one layer's working set
  (its attention and the chosen experts' intermediates, about ten hidden-sized tensors and the
  experts' ``k * moe_intermediate_size`` a token, bfloat16), a lower bound of what the step needs.
"""
from __future__ import annotations

import argparse
import json
from typing import Any, Dict

GIB = 2 ** 30
ERNIE_45_21B_A3B: Dict[str, Any] = {  # the keys of baidu/ERNIE-4.5-21B-A3B-PT's config.json that size it
    "hidden_size": 2560, "intermediate_size": 12288, "moe_intermediate_size": 1536, "num_hidden_layers": 28,
    "num_attention_heads": 20, "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 103424,
    "tie_word_embeddings": True, "moe_num_experts": 64, "moe_k": 6, "moe_num_shared_experts": 2,
    "moe_layer_start_index": 1, "moe_layer_end_index": 27, "moe_layer_interval": 1,
}


def moe_layers(c: Dict[str, Any]) -> list:
    end = c.get("moe_layer_end_index", -1)
    end = c["num_hidden_layers"] - 1 if end in (None, -1) else end
    return [i for i in range(c["num_hidden_layers"])
            if (i + 1) % c.get("moe_layer_interval", 1) == 0 and c.get("moe_layer_start_index", 0) <= i <= end]


def counts(c: Dict[str, Any]) -> Dict[str, float]:
    """Parameters by part, in all and for one token (the chosen experts only)."""
    h, heads, kv, d = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    layers, moe = c["num_hidden_layers"], moe_layers(c)
    attention = h * heads * d * 2 + h * kv * d * 2  # q and o; k and v
    dense_mlp = 3 * h * c["intermediate_size"]
    expert = 3 * h * c["moe_intermediate_size"]
    shared = 3 * h * c["moe_intermediate_size"] * c.get("moe_num_shared_experts", 0)
    gate = h * c["moe_num_experts"] + c["moe_num_experts"]  # the router and its correction bias
    embedding = c["vocab_size"] * h * (1 if c.get("tie_word_embeddings", True) else 2)
    norms = (2 * layers + 1) * h
    total = embedding + norms + layers * attention + (layers - len(moe)) * dense_mlp + \
        len(moe) * (c["moe_num_experts"] * expert + shared + gate)
    active = embedding + norms + layers * attention + (layers - len(moe)) * dense_mlp + \
        len(moe) * (c["moe_k"] * expert + shared + gate)
    return {"total": total, "active": active, "attention": layers * attention, "experts": len(moe) * c[
        "moe_num_experts"] * expert, "moe_layers": len(moe)}


def lora_parameters(c: Dict[str, Any], rank: int, experts: bool) -> int:
    h, heads, kv, d = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    attention = rank * ((h + heads * d) * 2 + (h + kv * d) * 2)  # q, o, k, v: rank * (in + out) each
    per_expert = rank * (h + c["moe_intermediate_size"]) * 3  # gate, up, down
    return c["num_hidden_layers"] * attention + (len(moe_layers(c)) * c["moe_num_experts"] * per_expert
                                                 if experts else 0)


def largest_layer_weights(c: Dict[str, Any]) -> int:
    """The most weights one decoder layer holds (a MoE layer's: attention, every expert, the shared
    experts): what wenxin's bfloat16-held weights (``model.weight_dtype``) cast to float32 while
    that layer computes."""
    h, heads, kv, d = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    attention = h * heads * d * 2 + h * kv * d * 2
    routed = 3 * h * c["moe_intermediate_size"] * (c["moe_num_experts"] + c.get("moe_num_shared_experts", 0))
    return attention + max(3 * h * c["intermediate_size"], routed if moe_layers(c) else 0)


def report(c: Dict[str, Any], tokens: int, rank: int) -> None:
    n = counts(c)
    h, k = c["hidden_size"], c["moe_k"]
    print(f"parameters: {n['total'] / 1e9:.2f} B in all, {n['active'] / 1e9:.2f} B a token "
          f"({n['moe_layers']} MoE layers of {c['moe_num_experts']} experts, {k} chosen)")
    weights = {"bfloat16": n["total"] * 2 / GIB, "float32": n["total"] * 4 / GIB}
    print(f"weights: {weights['bfloat16']:.1f} GiB in bfloat16, {weights['float32']:.1f} GiB in float32")
    logits = 2 * tokens * c["vocab_size"] * 4 / GIB  # float32 logits and their gradient
    kept = c["num_hidden_layers"] * tokens * h * 2 / GIB  # recompute: each layer's input
    working = tokens * (10 * h + 3 * k * c["moe_intermediate_size"]) * 2 / GIB  # one layer, recomputed
    print(f"a step of {tokens} tokens: logits {logits:.2f} GiB; with recompute {kept:.2f} GiB kept and about "
          f"{working:.2f} GiB for the layer being recomputed")
    layer_copy = largest_layer_weights(c) * 4 / GIB
    print(f"bfloat16 weights held by wenxin (model.weight_dtype): the layer computing casts its weights to "
          f"float32, {layer_copy:.2f} GiB at most")
    for label, experts in (("attention (q, k, v, o)", False), ("attention and every expert", True)):
        adapters = lora_parameters(c, rank, experts)
        optimizer = adapters * (4 + 4 + 4 + 4) / GIB  # float32 value, gradient, AdamW's two moments
        need = weights["bfloat16"] + optimizer + logits + kept + working
        print(f"LoRA rank {rank} on {label}: {adapters / 1e6:.1f} M parameters, {optimizer:.2f} GiB with their "
              f"gradients and AdamW; the step needs at least {need:.1f} GiB with bfloat16 weights "
              f"(wenxin's: {need + layer_copy:.1f}), {need - weights['bfloat16'] + weights['float32']:.1f} GiB "
              f"with float32 weights")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="", help="a config.json (default: ERNIE-4.5-21B-A3B's shapes)")
    parser.add_argument("--tokens", type=int, default=4096, help="tokens a step (a packed row)")
    parser.add_argument("--rank", type=int, default=8, help="LoRA rank")
    args = parser.parse_args()
    config = dict(ERNIE_45_21B_A3B)
    if args.config:
        with open(args.config, encoding="utf-8") as f:
            config.update(json.load(f))
    report(config, args.tokens, args.rank)


if __name__ == "__main__":
    main()
