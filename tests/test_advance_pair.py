"""``advance_pair`` (issue 69, point 3): decoding rows and prompt parts in one step of an ERNIE 4.5
decoder, the dense layers over both groups' tokens at once and attention within each group. Each
row gets the logits, and each new token the keys and values, that ``advance`` gives its group
alone (within float32 rounding), for dense (tied and untied) and mixture-of-experts decoders, with
caches of different lengths, padding hidden by ``visible``, either group a single row, and either
group no rows (an engine holding only the pair runs a call of one group so)."""
import os

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

from wenxin.models.advance_pair import StepRows, advance_pair  # noqa: E402
from wenxin.models.advance_step import causal_visible  # noqa: E402
from wenxin.models.ernie45 import load_ernie45  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
MODELS = {"tied": os.path.join(FIXTURES, "ernie45", "tied"), "untied": os.path.join(FIXTURES, "ernie45", "untied"),
          "moe": os.path.join(FIXTURES, "ernie45_moe", "shared")}


def decoding_rows(config, rng, rows, columns):
    """``rows`` rows of one new token each after caches of different lengths (``columns`` wide,
    the columns past each row's length hidden)."""
    lengths = rng.integers(1, columns + 1, rows)
    visible = np.zeros((rows, 1, columns + 1), np.float32)
    for row, length in enumerate(lengths):
        visible[row, 0, :length] = 1.0
    visible[:, 0, columns] = 1.0  # the new token itself
    return as_rows(config, rng, rng.integers(3, config.vocab_size, (rows, 1)), lengths[:, None], visible, columns)


def prompt_rows(config, rng, counts, before):
    """Prompt parts of ``counts`` tokens after ``before`` cached tokens each, right-aligned in one
    call (padding first, hidden), as ``wenxin.models.batch_prefill`` lays them out."""
    rows, width, columns = len(counts), max(counts), max(before)
    tokens = rng.integers(3, config.vocab_size, (rows, width))
    positions = np.zeros((rows, width), np.int64)
    visible = np.zeros((rows, width, columns + width), np.float32)
    for row, (count, cached) in enumerate(zip(counts, before)):
        pad = width - count
        positions[row, pad:] = cached + np.arange(count)
        visible[row, :, columns - cached:columns] = 1.0
        visible[row, pad:, columns + pad:] = causal_visible(0, count)[0]
        visible[row, np.arange(pad), columns + np.arange(pad)] = 1.0  # padding sees itself
    return as_rows(config, rng, tokens, positions, visible, columns)


def as_rows(config, rng, tokens, positions, visible, columns):
    shape = (len(tokens), config.num_key_value_heads, columns, config.head_dim)
    past = [tuple(paddle.to_tensor(rng.standard_normal(shape).astype(np.float32)) for _ in range(2))
            for _ in range(config.num_hidden_layers)]
    return StepRows(paddle.to_tensor(np.asarray(tokens, np.int64)), paddle.to_tensor(np.asarray(positions, np.int64)),
                    paddle.to_tensor(visible), past)


def alone(model, rows):
    """``advance`` of one group: its logits ``[R, V]`` and new keys and values."""
    state, new = model.model.advance(rows.tokens, rows.positions, rows.visible, rows.past)
    return paddle.matmul(state, model.output_weight(), transpose_y=True).numpy(), new.numpy()


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("decoding, counts", [(5, (7, 4, 6)), (1, (9,)), (3, (1,))],
                         ids=["rows-and-parts", "one-row-one-part", "one-token-part"])
def test_both_groups_get_what_each_gets_alone(name, decoding, counts):
    model = load_ernie45(MODELS[name])
    model.eval()
    rng = np.random.default_rng(len(counts) + decoding)
    first = decoding_rows(model.config, rng, decoding, 6)
    second = prompt_rows(model.config, rng, counts, [int(c) for c in rng.integers(1, 5, len(counts))])
    with paddle.no_grad():
        logits, new_first, new_second = advance_pair(model.model, model.output_weight(), first, second)
        expected = [alone(model, group) for group in (first, second)]
    logits = logits.numpy()
    scale = max(np.abs(e[0]).max() for e in expected)
    assert logits.shape == (decoding + len(counts), model.config.vocab_size)
    np.testing.assert_allclose(logits[:decoding], expected[0][0], rtol=0, atol=1e-5 * scale)
    np.testing.assert_allclose(logits[decoding:], expected[1][0], rtol=0, atol=1e-5 * scale)
    np.testing.assert_allclose(new_first.numpy(), expected[0][1], rtol=0, atol=1e-5)
    np.testing.assert_allclose(new_second.numpy(), expected[1][1], rtol=0, atol=1e-5)
    # not the same call twice: the groups' logits differ
    assert not np.allclose(logits[0], logits[decoding])


def no_rows(config, columns):
    """A group of no rows (of one token after ``columns`` cached ones)."""
    return as_rows(config, np.random.default_rng(0), np.zeros((0, 1), np.int64), np.zeros((0, 1), np.int64),
                   np.zeros((0, 1, columns + 1), np.float32), columns)


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("empty", [1, 0], ids=["second-empty", "first-empty"])
def test_either_group_may_have_no_rows_and_the_other_gets_what_it_gets_alone(name, empty):
    """An engine holding only the pair runs a one-group call beside no rows: the group's logits and
    keys are ``advance``'s, and the empty group's outputs have no rows."""
    model = load_ernie45(MODELS[name])
    model.eval()
    config = model.config
    rows = decoding_rows(config, np.random.default_rng(5), 3, 6)
    groups = [rows, no_rows(config, 1)] if empty == 1 else [no_rows(config, 1), rows]
    with paddle.no_grad():
        logits, *new = advance_pair(model.model, model.output_weight(), *groups)
        expected_logits, expected_new = alone(model, rows)
    np.testing.assert_allclose(logits.numpy(), expected_logits, rtol=0, atol=1e-5 * np.abs(expected_logits).max())
    np.testing.assert_allclose(new[1 - empty].numpy(), expected_new, rtol=0, atol=1e-5)
    assert new[empty].shape[2] == 0 and logits.shape[0] == 3
