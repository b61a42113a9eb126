"""Utility metrics for classifiers: accuracy, balanced accuracy, macro precision/recall/F1, AUROC, AP and quadratic
weighted kappa. Implemented in numpy and validated against scikit-learn in the tests.

Conventions: ``y_true`` is ``(N,)`` integer labels in ``0..K-1``; hard predictions ``y_pred`` are ``(N,)`` labels;
scores are ``(N,)`` (binary: score of class 1) or ``(N, K)`` (multiclass: per-class scores/probabilities). All
metrics are "higher is better"; a perfect classifier scores 1. Label-only metrics are NOT symmetric in
``(y_true, y_pred)`` except accuracy and kappa.
"""

from __future__ import annotations

import numpy as np

from ._validation import check_labels, to_numpy

__all__ = [
    "confusion_matrix",
    "accuracy",
    "balanced_accuracy",
    "precision_recall_f1",
    "macro_f1",
    "auroc",
    "average_precision",
    "quadratic_weighted_kappa",
    "classification_summary",
]


def _pair(y_true, y_pred, num_classes: int | None) -> tuple[np.ndarray, np.ndarray, int]:
    truth = check_labels(y_true, "y_true")
    predicted = check_labels(y_pred, "y_pred", length=truth.shape[0])
    observed_max = int(max(truth.max(), predicted.max()))
    if min(truth.min(), predicted.min()) < 0:
        raise ValueError("y_true/y_pred: expected labels >= 0, observed a negative label")
    classes = observed_max + 1 if num_classes is None else int(num_classes)
    if observed_max >= classes:
        raise ValueError(f"labels: expected values < num_classes={classes}, observed {observed_max}")
    return truth, predicted, classes


def confusion_matrix(y_true, y_pred, num_classes: int | None = None) -> np.ndarray:
    """``(K, K)`` counts, rows = true class, columns = predicted class (scikit-learn's layout).

    Example:
        >>> confusion_matrix([0, 1, 1], [0, 1, 0]).tolist()
        [[1, 0], [1, 1]]
    """
    truth, predicted, classes = _pair(y_true, y_pred, num_classes)
    return np.bincount(truth * classes + predicted, minlength=classes * classes).reshape(classes, classes)


def accuracy(y_true, y_pred) -> float:
    """Fraction of correct predictions, in ``[0, 1]``; higher is better; symmetric."""
    truth, predicted, _ = _pair(y_true, y_pred, None)
    return float(np.mean(truth == predicted))


def balanced_accuracy(y_true, y_pred) -> float:
    """Mean per-class recall over the classes present in ``y_true``; in ``[0, 1]``; higher is better."""
    matrix = confusion_matrix(y_true, y_pred)
    support = matrix.sum(axis=1)
    present = support > 0
    return float(np.mean(np.diag(matrix)[present] / support[present]))


def precision_recall_f1(y_true, y_pred, average: str = "macro") -> tuple[float, float, float]:
    """Precision, recall and F1.

    Args:
        y_true: ``(N,)`` labels.
        y_pred: ``(N,)`` labels.
        average: ``"macro"`` (unweighted mean over the union of labels in ``y_true`` and ``y_pred``, a class with
            an empty denominator counting 0, as scikit-learn's ``zero_division=0``) or ``"binary"`` (class 1).

    Returns:
        ``(precision, recall, f1)`` in ``[0, 1]``; higher is better.
    """
    truth, predicted, classes = _pair(y_true, y_pred, None)
    matrix = confusion_matrix(truth, predicted, classes)
    true_positive = np.diag(matrix).astype(np.float64)
    predicted_count = matrix.sum(axis=0).astype(np.float64)
    actual_count = matrix.sum(axis=1).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(predicted_count > 0, true_positive / predicted_count, 0.0)
        recall = np.where(actual_count > 0, true_positive / actual_count, 0.0)
        denominator = predicted_count + actual_count
        f1 = np.where(denominator > 0, 2 * true_positive / denominator, 0.0)
    if average == "binary":
        if classes > 2:
            raise ValueError(f"average='binary': expected labels in {{0, 1}}, observed {classes} classes")
        if classes < 2:
            return 0.0, 0.0, 0.0
        return float(precision[1]), float(recall[1]), float(f1[1])
    if average != "macro":
        raise ValueError(f"average: expected 'macro' or 'binary', observed {average!r}")
    present = (predicted_count + actual_count) > 0
    return float(precision[present].mean()), float(recall[present].mean()), float(f1[present].mean())


def macro_f1(y_true, y_pred) -> float:
    """Macro-averaged F1 (see :func:`precision_recall_f1`); in ``[0, 1]``; higher is better."""
    return precision_recall_f1(y_true, y_pred, "macro")[2]


def _check_scores(scores, length: int) -> np.ndarray:
    array = to_numpy(scores, "scores").astype(np.float64)
    if array.ndim not in (1, 2) or array.shape[0] != length:
        raise ValueError(f"scores: expected shape ({length},) or ({length}, K), observed {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError("scores: expected finite values, observed NaN or infinity")
    return array


def _binary_auroc(truth: np.ndarray, score: np.ndarray) -> float:
    """Mann-Whitney form: mean rank of positives, ties get average ranks."""
    from scipy.stats import rankdata

    positives = truth == 1
    count_positive, count_negative = int(positives.sum()), int((~positives).sum())
    if count_positive == 0 or count_negative == 0:
        raise ValueError("y_true: expected both classes for AUROC, observed only one")
    ranks = rankdata(score)
    return float((ranks[positives].sum() - count_positive * (count_positive + 1) / 2) / (count_positive * count_negative))


def _binary_average_precision(truth: np.ndarray, score: np.ndarray) -> float:
    """Step-wise AP = sum_n (R_n - R_{n-1}) P_n over distinct thresholds (scikit-learn's definition)."""
    positives_total = int(truth.sum())
    if positives_total == 0:
        raise ValueError("y_true: expected at least one positive for average precision, observed none")
    order = np.argsort(-score, kind="mergesort")
    sorted_score, sorted_truth = score[order], truth[order]
    distinct = np.r_[np.nonzero(np.diff(sorted_score))[0], sorted_truth.size - 1]  # last index of each threshold
    true_positives = np.cumsum(sorted_truth)[distinct]
    predicted = distinct + 1
    precision = true_positives / predicted
    recall = true_positives / positives_total
    previous_recall = np.r_[0.0, recall[:-1]]
    return float(np.sum((recall - previous_recall) * precision))


def _one_vs_rest(y_true, scores, metric) -> float:
    truth = check_labels(y_true, "y_true")
    values = _check_scores(scores, truth.shape[0])
    if values.ndim == 1:
        if not set(np.unique(truth).tolist()) <= {0, 1}:
            raise ValueError("y_true: expected binary labels with 1-D scores, observed more classes")
        return metric(truth, values)
    if truth.max() >= values.shape[1] or truth.min() < 0:
        raise ValueError(f"y_true: expected labels in 0..{values.shape[1] - 1}, observed {truth.min()}..{truth.max()}")
    return float(np.mean([metric((truth == k).astype(np.int64), values[:, k]) for k in range(values.shape[1])]))


def auroc(y_true, scores) -> float:
    """Area under the ROC curve; multiclass: unweighted mean of one-vs-rest AUROCs (scikit-learn
    ``roc_auc_score(multi_class="ovr", average="macro")``). In ``[0, 1]``; higher is better; 0.5 = chance.

    Example:
        >>> auroc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8])
        0.75
    """
    return _one_vs_rest(y_true, scores, _binary_auroc)


def average_precision(y_true, scores) -> float:
    """Average precision (area under the step precision-recall curve); multiclass: macro one-vs-rest. In
    ``[0, 1]``; higher is better; chance equals the positive rate."""
    return _one_vs_rest(y_true, scores, _binary_average_precision)


def quadratic_weighted_kappa(y_true, y_pred, num_classes: int | None = None) -> float:
    """Cohen's kappa with quadratic weights ``(i - j)^2 / (K - 1)^2`` (the DR-grading standard, k-SALSA).

    Returns:
        Value in ``[-1, 1]``; 1 = perfect agreement, 0 = chance; higher is better. Symmetric.
    """
    matrix = confusion_matrix(y_true, y_pred, num_classes).astype(np.float64)
    classes = matrix.shape[0]
    if classes < 2:
        return 1.0
    index = np.arange(classes)
    weights = (index[:, None] - index[None, :]) ** 2 / (classes - 1) ** 2
    expected = np.outer(matrix.sum(axis=1), matrix.sum(axis=0)) / matrix.sum()
    denominator = np.sum(weights * expected)
    if denominator == 0:
        return 1.0 if np.sum(weights * matrix) == 0 else 0.0
    return float(1.0 - np.sum(weights * matrix) / denominator)


def classification_summary(y_true, y_pred, scores=None) -> dict:
    """All utility metrics in one dict (``auroc`` and ``average_precision`` only when ``scores`` is given)."""
    precision, recall, f1 = precision_recall_f1(y_true, y_pred, "macro")
    summary = {
        "accuracy": accuracy(y_true, y_pred),
        "balanced_accuracy": balanced_accuracy(y_true, y_pred),
        "precision": precision,
        "recall": recall,
        "macro_f1": f1,
        "quadratic_weighted_kappa": quadratic_weighted_kappa(y_true, y_pred),
    }
    if scores is not None:
        summary["auroc"] = auroc(y_true, scores)
        summary["average_precision"] = average_precision(y_true, scores)
    return summary
