"""Metrics against hand-computed and brute-force values."""
import itertools

import numpy as np
import pytest
from wenxin.metrics.classification import accuracy, binary_auc, precision_recall_f1


def test_accuracy():
    assert accuracy(np.array([1, 0, 1, 1]), np.array([1, 1, 1, 0])) == 0.5


def test_macro_precision_recall_f1():
    labels = np.array([0, 0, 1, 1, 2, 2])
    preds = np.array([0, 1, 1, 1, 0, 2])
    m = precision_recall_f1(labels, preds)
    # class 0: p=1/2 r=1/2; class 1: p=2/3 r=1; class 2: p=1 r=1/2
    assert m["precision"] == pytest.approx((1 / 2 + 2 / 3 + 1) / 3)
    assert m["recall"] == pytest.approx((1 / 2 + 1 + 1 / 2) / 3)
    f1s = [0.5, 2 * (2 / 3) / (2 / 3 + 1), 2 * 0.5 / 1.5]
    assert m["f1"] == pytest.approx(np.mean(f1s))
    assert precision_recall_f1(np.array([0, 0]), np.array([0, 0]), num_classes=2)["recall"] == 0.5


def test_auc_matches_pairwise_definition():
    rng = np.random.RandomState(0)
    labels = rng.randint(0, 2, 200)
    scores = np.round(rng.rand(200), 1)  # many ties
    pos, neg = scores[labels == 1], scores[labels == 0]
    expected = np.mean([1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg)])
    assert binary_auc(labels, scores) == pytest.approx(expected)
    assert binary_auc(np.array([0, 1]), np.array([0.2, 0.9])) == 1.0
    assert np.isnan(binary_auc(np.array([1, 1]), np.array([0.2, 0.9])))
