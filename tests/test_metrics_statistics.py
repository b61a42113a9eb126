"""The shared uncertainty helpers: the patient bootstrap on metrics that can be undefined, and seed combination."""

from __future__ import annotations

import numpy as np
import pytest

from anonpaper.metrics.statistics import combine_seeds, patient_bootstrap_se

pytestmark = pytest.mark.unit


def positive_recall(truth: np.ndarray, prediction: np.ndarray) -> float:
    """Recall of class 1: undefined (NaN) on a test set without positives."""
    positives = truth == 1
    return float(np.mean(prediction[positives] == 1)) if positives.any() else float("nan")


def test_patient_bootstrap_se_ignores_resamples_where_the_metric_is_undefined():
    # 10 patients, one image each, two positives: about 11 % of the resamples draw no positive (0.8^10).
    truth = np.array([1, 1, 0, 0, 0, 0, 0, 0, 0, 0])
    prediction = np.array([1, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    patients = np.arange(10)
    se = patient_bootstrap_se(truth, prediction, patients, positive_recall, 400, 0)
    assert np.isfinite(se) and 0.2 < se < 0.6  # recall 1/2 from two positives: SE near 0.5 / sqrt(2)
    # The SE is the SD over the defined resamples: the same draws by hand.
    rng = np.random.default_rng(0)
    defined = [value for value in (positive_recall(truth[rows], prediction[rows])
                                   for rows in (rng.integers(0, 10, 10) for _ in range(400))) if np.isfinite(value)]
    assert len(defined) < 400 and se == pytest.approx(np.std(defined, ddof=1))


def test_patient_bootstrap_se_is_nan_when_the_metric_is_never_defined():
    truth = np.zeros(6, dtype=int)
    assert np.isnan(patient_bootstrap_se(truth, truth, np.arange(6), positive_recall, 50, 0))


def test_combine_seeds_adds_the_seed_spread_to_the_bootstrap_error():
    values, errors = [0.60, 0.70, 0.80], [0.03, 0.04, 0.05]
    mean, se, seed_sd = combine_seeds(values, errors)
    # By hand: mean 0.7; sample SD over seeds 0.1; sqrt((0.0009 + 0.0016 + 0.0025) / 3 + 0.01 / 3).
    assert mean == pytest.approx(0.7)
    assert seed_sd == pytest.approx(0.1)
    assert se == pytest.approx(np.sqrt(0.005 / 3 + 0.01 / 3))
    assert combine_seeds([0.5, 0.5], [0.02, 0.02]) == pytest.approx((0.5, 0.02, 0.0))
    assert combine_seeds([0.4], [0.05]) == (0.4, 0.05, 0.0)


@pytest.mark.parametrize("values, errors", [([], []), ([0.5, 0.6], [0.01])])
def test_combine_seeds_rejects_mismatched_input(values, errors):
    with pytest.raises(ValueError, match="one score and one SE per seed"):
        combine_seeds(values, errors)
