"""Uncertainty of test-set metrics and the decision rules the chapters' claims use.

Images of one patient are correlated, so standard errors resample whole patients (:func:`patient_bootstrap_se`).
A claim compares numbers with their noise through :func:`sequence_falls` and :func:`beyond_noise`, both at
``z`` combined standard errors (the chapters use :data:`anonpaper.experiments.claims.DECISION_Z` = 2).
"""

from __future__ import annotations

from typing import Callable

import numpy as np


def patient_bootstrap_se(truth: np.ndarray, prediction: np.ndarray, patients: np.ndarray,
                         metric: Callable[[np.ndarray, np.ndarray], float], resamples: int, seed: int) -> float:
    """Standard error of ``metric(truth, prediction)`` by resampling whole patients with replacement.

    Several images of one patient are correlated; resampling patients keeps that in the error bar.

    Args:
        truth: (N,) labels.
        prediction: (N,) predictions.
        patients: (N,) patient of each image.
        metric: ``metric(truth, prediction) -> float``.
        resamples: Bootstrap test sets drawn.
        seed: Seed of the draws.

    Returns:
        The standard deviation of the metric over ``resamples`` bootstrap test sets (NaN if resamples < 2).

    Example:
        >>> truth = np.array([0, 1, 0, 1]); patients = np.array(["a", "a", "b", "b"])
        >>> patient_bootstrap_se(truth, truth, patients, lambda t, p: float(np.mean(t == p)), 50, 0)
        0.0
    """
    truth, prediction, patients = np.asarray(truth), np.asarray(prediction), np.asarray(patients)
    if not (truth.shape == prediction.shape == patients.shape) or truth.ndim != 1:
        raise ValueError(f"truth, prediction and patients must be (N,) arrays of one length, got {truth.shape}, "
                         f"{prediction.shape}, {patients.shape}")
    if resamples < 2:
        return float("nan")
    unique, inverse = np.unique(patients, return_inverse=True)
    members = [np.flatnonzero(inverse == index) for index in range(len(unique))]
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(resamples):
        chosen = rng.integers(0, len(unique), len(unique))
        rows = np.concatenate([members[index] for index in chosen])
        values.append(metric(truth[rows], prediction[rows]))
    return float(np.std(values, ddof=1))


def beyond_noise(difference: float, errors: tuple[float, ...] | list[float], z: float = 2.0) -> bool:
    """Whether ``|difference|`` exceeds ``z`` combined standard errors (``z * sqrt(sum(se^2))``).

    >>> beyond_noise(0.1, [0.03, 0.03]), beyond_noise(0.05, [0.03, 0.03])
    (True, False)
    """
    return bool(abs(difference) > z * float(np.sqrt(np.sum(np.square(errors)))))


def sequence_falls(values: list[float], errors: list[float], z: float = 2.0) -> bool | None:
    """Whether a score sequence (e.g. the original, then increasing obfuscation p) falls.

    True: the last value lies more than ``z`` combined standard errors below the first and no step rises by more
    than ``z`` combined standard errors. False: the last value is not below the first, or a step rises by more than
    ``z`` combined standard errors. None (undecided): it drops, but by less than the noise.

    >>> sequence_falls([0.8, 0.7, 0.5], [0.02, 0.02, 0.02]), sequence_falls([0.8, 0.79], [0.02, 0.02])
    (True, None)
    >>> sequence_falls([0.8, 0.9], [0.02, 0.02])
    False
    """
    values, errors = np.asarray(values, float), np.asarray(errors, float)
    if len(values) < 2 or len(values) != len(errors):
        raise ValueError(f"need matching values and errors of length >= 2, got {len(values)} and {len(errors)}")
    steps_ok = all(values[i + 1] - values[i] <= z * np.hypot(errors[i], errors[i + 1]) for i in range(len(values) - 1))
    drop = values[0] - values[-1]
    if not steps_ok or drop <= 0:
        return False
    if drop > z * np.hypot(errors[0], errors[-1]):
        return True
    return None
