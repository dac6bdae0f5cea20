"""The shape arithmetic of benchmarks/ernie45_moe_memory.py (docs/chat.md's 21B-A3B memory table):
ERNIE-4.5-21B-A3B's config gives Baidu's stated sizes, 21 B parameters with 3 B active a token."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "benchmarks"))
from ernie45_moe_memory import ERNIE_45_21B_A3B, counts, largest_layer_weights, lora_parameters, moe_layers  # noqa: E402,E501


def test_21b_a3b_counts_are_baidus_sizes():
    n = counts(ERNIE_45_21B_A3B)
    assert 21.0e9 < n["total"] < 22.0e9 and 3.0e9 < n["active"] < 3.5e9
    assert moe_layers(ERNIE_45_21B_A3B) == list(range(1, 28))  # layer 0 dense
    assert n["experts"] == 27 * 64 * 3 * 2560 * 1536


def test_lora_counts_are_rank_times_in_plus_out_of_each_adapted_layer():
    small = {**ERNIE_45_21B_A3B, "num_hidden_layers": 2, "moe_layer_end_index": 1}
    attention = 8 * ((2560 + 2560) * 2 + (2560 + 512) * 2)
    assert lora_parameters(small, 8, experts=False) == 2 * attention
    assert lora_parameters(small, 8, experts=True) == 2 * attention + 64 * 8 * (2560 + 1536) * 3


def test_the_largest_layer_is_a_moe_layer_with_every_expert():
    attention = 2560 * 2560 * 2 + 2560 * 512 * 2
    assert largest_layer_weights(ERNIE_45_21B_A3B) == attention + 3 * 2560 * 1536 * (64 + 2)
    dense = {**ERNIE_45_21B_A3B, "moe_num_experts": 0}
    assert largest_layer_weights({**dense, "moe_layer_start_index": 99}) == attention + 3 * 2560 * 12288
