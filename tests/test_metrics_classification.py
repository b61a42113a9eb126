"""Utility metrics against scikit-learn."""

import numpy as np
import pytest
from sklearn import metrics as skm

from anonpaper.metrics import (
    accuracy,
    auroc,
    average_precision,
    balanced_accuracy,
    classification_summary,
    confusion_matrix,
    macro_f1,
    precision_recall_f1,
    quadratic_weighted_kappa,
)

pytestmark = pytest.mark.unit


def _data(classes, seed, n=200, ties=False):
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, classes, n)
    logits = rng.normal(size=(n, classes)) + 1.2 * np.eye(classes)[truth]
    if ties:
        logits = np.round(logits, 1)  # many tied scores exercise the tie handling
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    return truth, probabilities.argmax(axis=1), probabilities


@pytest.mark.parametrize("classes, seed, ties", [(2, 0, False), (2, 1, True), (3, 2, False), (5, 3, True)])
def test_against_sklearn(classes, seed, ties):
    truth, predicted, probabilities = _data(classes, seed, ties=ties)
    assert accuracy(truth, predicted) == pytest.approx(skm.accuracy_score(truth, predicted))
    assert balanced_accuracy(truth, predicted) == pytest.approx(skm.balanced_accuracy_score(truth, predicted))
    precision, recall, f1 = precision_recall_f1(truth, predicted)
    assert precision == pytest.approx(skm.precision_score(truth, predicted, average="macro", zero_division=0))
    assert recall == pytest.approx(skm.recall_score(truth, predicted, average="macro", zero_division=0))
    assert f1 == pytest.approx(skm.f1_score(truth, predicted, average="macro", zero_division=0))
    assert macro_f1(truth, predicted) == pytest.approx(f1)
    np.testing.assert_array_equal(confusion_matrix(truth, predicted, classes), skm.confusion_matrix(truth, predicted))
    assert quadratic_weighted_kappa(truth, predicted) == pytest.approx(
        skm.cohen_kappa_score(truth, predicted, weights="quadratic"), abs=1e-12
    )
    if classes == 2:
        scores = probabilities[:, 1]
        assert auroc(truth, scores) == pytest.approx(skm.roc_auc_score(truth, scores), abs=1e-12)
        assert average_precision(truth, scores) == pytest.approx(skm.average_precision_score(truth, scores), abs=1e-12)
        assert precision_recall_f1(truth, predicted, "binary")[2] == pytest.approx(skm.f1_score(truth, predicted))
    else:
        assert auroc(truth, probabilities) == pytest.approx(
            skm.roc_auc_score(truth, probabilities, multi_class="ovr", average="macro"), abs=1e-12
        )
        one_hot = np.eye(classes)[truth]
        assert average_precision(truth, probabilities) == pytest.approx(
            skm.average_precision_score(one_hot, probabilities, average="macro"), abs=1e-12
        )


def test_perfect_classifier_scores_one():
    truth = np.array([0, 1, 2, 2, 1, 0])
    summary = classification_summary(truth, truth, np.eye(3)[truth])
    for name, value in summary.items():
        assert value == pytest.approx(1.0), name


def test_argument_order_documented():
    truth = np.array([0, 0, 0, 1])
    predicted = np.array([0, 1, 1, 1])
    # accuracy and kappa are symmetric, recall/precision swap roles
    assert accuracy(truth, predicted) == accuracy(predicted, truth)
    assert quadratic_weighted_kappa(truth, predicted) == pytest.approx(quadratic_weighted_kappa(predicted, truth))
    forward = precision_recall_f1(truth, predicted, "binary")
    backward = precision_recall_f1(predicted, truth, "binary")
    assert forward[0] == pytest.approx(backward[1]) and forward[1] == pytest.approx(backward[0])


def test_validation_errors():
    with pytest.raises(ValueError, match="length 3"):
        accuracy([0, 1, 1], [0, 1])
    with pytest.raises(ValueError, match="integer or boolean"):
        accuracy([0.5, 1.0], [0, 1])
    with pytest.raises(ValueError, match="both classes"):
        auroc([1, 1, 1], [0.2, 0.3, 0.4])
    with pytest.raises(ValueError, match=r"shape \(3,\) or \(3, K\)"):
        auroc([0, 1, 1], [0.2, 0.3])
    with pytest.raises(ValueError, match="finite"):
        auroc([0, 1], [0.1, np.nan])
