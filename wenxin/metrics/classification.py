"""Classification metrics on numpy arrays."""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np


def accuracy(labels: np.ndarray, predictions: np.ndarray) -> float:
    labels, predictions = np.asarray(labels).reshape(-1), np.asarray(predictions).reshape(-1)
    return float((labels == predictions).mean()) if labels.size else 0.0


def precision_recall_f1(labels: np.ndarray, predictions: np.ndarray,
                        num_classes: Optional[int] = None) -> Dict[str, float]:
    """Macro-averaged precision, recall and F1 over the classes seen in labels or predictions
    (or over ``range(num_classes)``). A class with no predicted (or no true) examples counts 0."""
    labels, predictions = np.asarray(labels).reshape(-1), np.asarray(predictions).reshape(-1)
    classes = np.arange(num_classes) if num_classes else np.union1d(labels, predictions)
    precisions, recalls, f1s = [], [], []
    for c in classes:
        tp = float(np.sum((predictions == c) & (labels == c)))
        predicted, actual = float(np.sum(predictions == c)), float(np.sum(labels == c))
        p = tp / predicted if predicted else 0.0
        r = tp / actual if actual else 0.0
        precisions.append(p)
        recalls.append(r)
        f1s.append(2 * p * r / (p + r) if p + r else 0.0)
    return {"precision": float(np.mean(precisions)), "recall": float(np.mean(recalls)),
            "f1": float(np.mean(f1s))}


def binary_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve via the rank-sum statistic; ties get their average rank.
    Returns NaN when only one class is present."""
    labels = np.asarray(labels).reshape(-1).astype(bool)
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    ranks = np.empty(len(scores), dtype=np.float64)
    # average ranks (1-based) over runs of equal scores
    boundaries = np.flatnonzero(np.diff(sorted_scores)) + 1
    starts = np.concatenate(([0], boundaries))
    ends = np.concatenate((boundaries, [len(scores)]))
    for s, e in zip(starts, ends):
        ranks[order[s:e]] = (s + e + 1) / 2.0
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def classifier_metrics(outputs: Dict[str, np.ndarray], batch_sizes: Optional[np.ndarray], num_classes: int,
                       macro_f1: bool = True) -> Dict[str, float]:
    """The usual metrics of a softmax classifier's accumulated outputs (``labels``,
    ``predictions``, ``probs`` and, when present, per-batch ``loss``): accuracy, macro P/R/F1,
    AUC for two classes, and the mean loss weighted by ``batch_sizes``."""
    labels, predictions = outputs["labels"], outputs["predictions"]
    metrics = {"acc": accuracy(labels, predictions)}
    if macro_f1:
        metrics.update(precision_recall_f1(labels, predictions, num_classes))
    if num_classes == 2:
        metrics["auc"] = binary_auc(labels, outputs["probs"][:, 1])
    if "loss" in outputs:
        metrics["loss"] = float(np.average(outputs["loss"], weights=batch_sizes))
    return metrics


def multi_label_metrics(outputs: Dict[str, np.ndarray], batch_sizes: Optional[np.ndarray],
                        threshold: float = 0.5) -> Dict[str, float]:
    """Metrics of a multi-label classifier's accumulated ``labels`` and ``probs`` ``[N, C]``:
    ``acc`` (every label of an example right), micro ``precision``/``recall``/``f1`` over all
    (example, label) decisions, ``macro_f1`` (the mean of the labels' F1), and the mean loss."""
    gold = outputs["labels"] > 0.5  # [N, C]
    predicted = outputs["probs"] > threshold  # [N, C]
    hits = float((gold & predicted).sum())
    precision = hits / max(float(predicted.sum()), 1.0)
    recall = hits / max(float(gold.sum()), 1.0)
    per_label = [2 * float((g & p).sum()) / max(float(g.sum() + p.sum()), 1.0) for g, p in zip(gold.T, predicted.T)]
    metrics = {"acc": float((gold == predicted).all(axis=1).mean()) if len(gold) else 0.0,
               "precision": precision, "recall": recall,
               "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
               "macro_f1": float(np.mean(per_label)) if per_label else 0.0}
    if "loss" in outputs:
        metrics["loss"] = float(np.average(outputs["loss"], weights=batch_sizes))
    return metrics
