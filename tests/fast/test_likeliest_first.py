"""``likeliest_first``: sampling's ordering of the vocabulary by score, hand-written for speed
(``wenxin.models.decoding``), gives exactly NumPy's stable ``argsort`` of the negated scores: on
random scores of a real vocabulary's size, on many equal scores (ties by token id), signed zeros
and infinities, and through ``argsort`` itself where it does not apply (NaN, float64); and a
seeded sample draws the very token the ``argsort`` version drew, from float32 logits handed over in
float64 as a search hands them (ordered as float32), with many equal logits, at several
temperatures, and from logits that are not float32 values."""
import numpy as np
import pytest

from wenxin.models.decoding import DecodeSettings, likeliest_first, sample_token, sampling_order

VOCAB = 103_424  # ERNIE 4.5's


def reference(scores: np.ndarray) -> np.ndarray:
    return np.argsort(-scores, kind="stable")


@pytest.mark.parametrize("case", ["random", "ties", "many-tied-runs", "signed-zeros-and-infinities", "nan", "float64",
                                  "one"])
def test_the_order_is_a_stable_argsorts(case):
    rng = np.random.default_rng(7)
    scores = {
        "random": rng.standard_normal(VOCAB).astype(np.float32) * 3,
        "ties": np.round(rng.standard_normal(VOCAB), 1).astype(np.float32),  # -0.0 among them too
        # thousands of runs of equal values, as an int8 output layer's logits hold
        "many-tied-runs": np.round(rng.standard_normal(VOCAB), 3).astype(np.float32),
        "float64": rng.standard_normal(1000),
        "signed-zeros-and-infinities": np.array([0.0, -0.0, 1, -1, np.inf, -np.inf, 3, 3, -0.0, np.inf], np.float32),
        "nan": np.array([1, np.nan, 2, 2, -1], np.float32),
        "one": np.array([5.0], np.float32),
    }[case]
    np.testing.assert_array_equal(likeliest_first(scores), reference(scores))


@pytest.mark.parametrize("temperature", [0.8, 1.0, 1e-5, 5e5])
@pytest.mark.parametrize("logits_of", ["float32-values", "many-equal", "float64-values"])
def test_samplings_order_is_the_scores_stable_argsort(temperature, logits_of):
    rng = np.random.default_rng(5)
    logits = rng.standard_normal(VOCAB).astype(np.float32) * 4
    if logits_of == "many-equal":
        logits = np.round(logits * 64) / 64
    logits = logits.astype(np.float64)
    if logits_of == "float64-values":
        logits += rng.standard_normal(VOCAB) * 1e-9  # values float32 cannot hold: ordered by the scores
    scores = logits / temperature
    np.testing.assert_array_equal(sampling_order(logits, scores, temperature), reference(scores))


def reference_sample(logits, settings, rng):
    """``sample_token`` as it was, over ``np.argsort``."""
    scores = logits / settings.temperature
    order = np.argsort(-scores, kind="stable")
    if settings.top_k:
        order = order[:settings.top_k]
    probs = np.exp(scores[order] - scores[order[0]])
    probs /= probs.sum()
    if settings.top_p < 1.0:
        keep = int(np.searchsorted(np.cumsum(probs), settings.top_p) + 1)
        order, probs = order[:keep], probs[:keep] / probs[:keep].sum()
    return int(order[rng.choice(len(order), p=probs)])


@pytest.mark.parametrize("settings", [DecodeSettings("sample", temperature=0.8, top_p=0.8),
                                      DecodeSettings("sample", top_k=40, temperature=1.3), DecodeSettings("sample"),
                                      DecodeSettings("sample", temperature=1e-5)],
                         ids=["top-p", "top-k", "all", "beyond-the-order-keeping-temperatures"])
@pytest.mark.parametrize("logits_of", ["float32-values", "many-equal", "float64-values"])
def test_a_seeded_sample_draws_the_token_it_drew_before(settings, logits_of):
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((20, 5000)).astype(np.float32) * 4
    if logits_of == "many-equal":
        logits = np.round(logits * 4) / 4  # a few dozen distinct values a row
    logits = logits.astype(np.float64)  # as a search hands them over
    if logits_of == "float64-values":
        logits += rng.standard_normal(logits.shape) * 1e-9
    ours, theirs = np.random.default_rng(11), np.random.default_rng(11)
    drawn = [sample_token(row, settings, ours) for row in logits for _ in range(5)]
    assert drawn == [reference_sample(row, settings, theirs) for row in logits for _ in range(5)]
    assert len(set(drawn)) > 10  # draws, not one token
