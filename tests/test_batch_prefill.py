"""How a turn's prompt tokens are shared among the prompts being prefilled and grouped into calls
(``wenxin.models.batch_prefill``), and which go beside the decoding rows where the engine runs
``advance_pair``; that the parts give each prompt's whole prefill is tested on real exports
(``test_generation_serving``, ``test_step_weights``, ``test_onnx_generation`` beside the rows)."""
import pytest

from wenxin.models.batch_prefill import fair_shares, similar_lengths


@pytest.mark.parametrize("needs, budget, shares", [
    ([100], 8, [8]),
    ([100, 3], 8, [5, 3]),          # the short prompt takes what it needs, the long one the rest
    ([100, 100], 8, [4, 4]),
    ([100, 100, 100], 8, [3, 3, 2]),  # the remainder to the first (the oldest)
    ([2, 2], 8, [2, 2]),            # less than the budget needed: no more given
    ([1, 50, 50, 4], 20, [1, 8, 7, 4]),
    ([5, 5, 5], 2, [1, 1, 0]),      # fewer tokens than prompts: one each, in order
    ([0, 9], 4, [0, 4]),
    ([9], 0, [0]),
])
def test_fair_shares_split_the_budget_evenly_and_give_a_short_prompt_what_it_needs(needs, budget, shares):
    assert fair_shares(needs, budget) == shares
    assert sum(shares) <= budget and all(0 <= s <= n for s, n in zip(shares, needs))


def test_similar_lengths_keep_padding_within_a_quarter_of_a_calls_tokens():
    assert similar_lengths([8, 8, 7]) == [[0, 1, 2]]
    assert similar_lengths([64, 4, 60, 3]) == [[0, 2], [1, 3]]  # a short part never pads to a long one
    assert similar_lengths([5, 0, 5]) == [[0, 2]]  # nothing to prefill: no row
    for counts in ([64, 4, 60, 3], [9, 8, 7, 6, 5, 4, 3, 2, 1], [100, 80, 75, 50, 10]):
        groups = similar_lengths(counts)
        assert sorted(i for g in groups for i in g) == [i for i, c in enumerate(counts) if c > 0]
        for group in groups:
            tokens = sum(counts[i] for i in group)
            assert max(counts[i] for i in group) * len(group) - tokens <= 0.25 * tokens



def test_the_longest_parts_of_similar_lengths_go_beside_the_decoding_rows_and_the_rest_alone():
    import numpy as np
    from wenxin.models.batch_prefill import PromptPrefill, fused_and_rest
    prompts = [PromptPrefill(np.arange(1, 80)) for _ in range(4)]
    parts = list(zip(prompts, [64, 4, 60, 3]))
    fused, rest = fused_and_rest(parts)
    assert fused == [parts[0], parts[2]] and rest == [parts[1], parts[3]]
    assert fused_and_rest([]) == ([], [])
    assert fused_and_rest(parts[:1]) == (parts[:1], [])


def test_prompt_parts_go_beside_only_a_step_of_rows_kept_in_place():
    import numpy as np
    from wenxin.models.batch_decoding import BatchDecoder
    from wenxin.models.batch_prefill import PartRows, PromptPrefill
    empty = np.zeros((2, 2, 1, 1, 0, 4), np.float32)
    part = PartRows([(PromptPrefill(np.arange(1, 6)), 3)], empty)
    assert part.inputs["tokens"].tolist() == [[1, 2, 3]] and part.inputs["visible"].shape == (1, 3, 4)  # a hidden column
    assert sorted(n for n in part.inputs if n.startswith(("keys_", "values_"))) == ["keys_0", "keys_1", "values_0",
                                                                                      "values_1"]
    with pytest.raises(ValueError, match="kept in place"):
        BatchDecoder(lambda name, inputs: {}, True, None).step(part)  # a padded cache's step
    with pytest.raises(ValueError, match="kept in place"):
        BatchDecoder(lambda name, inputs: {}, True, empty).step(part)  # no row decodes
