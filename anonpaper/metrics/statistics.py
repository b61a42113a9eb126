"""Uncertainty of test-set metrics and the decision rules the chapters' claims use.

Images of one patient are correlated, so standard errors resample whole patients (:func:`patient_bootstrap_se`);
a score averaged over networks trained with several seeds adds the seed spread to that error
(:func:`combine_seeds`).
A claim is decided by one rule, :func:`rule_verdict`, from an effect, its standard error and (for retention and
equivalence claims) a margin fixed before the run, at ``z`` standard errors (the chapters use
:data:`anonpaper.experiments.claims.DECISION_Z` = 2); :func:`difference_se` combines independent errors.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np


def patient_bootstrap_se(truth: np.ndarray, prediction: np.ndarray, patients: np.ndarray,
                         metric: Callable[[np.ndarray, np.ndarray], float], resamples: int, seed: int) -> float:
    """Standard error of ``metric(truth, prediction)`` by resampling whole patients with replacement.

    Several images of one patient are correlated; resampling patients keeps that in the error bar. A resample on
    which the metric is undefined (NaN, e.g. an AUROC when the drawn patients lack a class) is ignored: the SE is
    the standard deviation over the resamples where the metric is defined, so one such draw no longer turns the
    whole SE into NaN. Ignored resamples are not redrawn.

    Args:
        truth: (N,) labels.
        prediction: (N,) predictions.
        patients: (N,) patient of each image.
        metric: ``metric(truth, prediction) -> float``.
        resamples: Bootstrap test sets drawn.
        seed: Seed of the draws.

    Returns:
        The standard deviation of the metric over the ``resamples`` bootstrap test sets on which it is defined
        (NaN when fewer than 2 are).

    Example:
        >>> truth = np.array([0, 1, 0, 1]); patients = np.array(["a", "a", "b", "b"])
        >>> patient_bootstrap_se(truth, truth, patients, lambda t, p: float(np.mean(t == p)), 50, 0)
        0.0
        >>> only_a_is_positive = lambda t, p: float(np.mean(p[t == 1])) if (t == 1).any() else float("nan")
        >>> truth = np.array([1, 0, 0, 0]); patients = np.array(["a", "b", "c", "d"])
        >>> bool(np.isfinite(patient_bootstrap_se(truth, np.array([1, 0, 1, 0]), patients, only_a_is_positive, 50, 0)))
        True
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
    values = np.asarray(values, dtype=np.float64)
    values = values[~np.isnan(values)]
    return float(np.std(values, ddof=1)) if len(values) >= 2 else float("nan")


def combine_seeds(values: list[float] | np.ndarray, errors: list[float] | np.ndarray) -> tuple[float, float, float]:
    """A score over networks trained with different seeds: its mean, an SE with both noises, and the seed spread.

    Each network is scored on the same test set with a test-patient bootstrap SE; the networks differ only in
    their training seed. The mean's SE adds the spread between seeds (training randomness, large for small
    training sets) to the bootstrap SE: ``sqrt(mean(se_boot^2) + var(seeds) / seeds)``, where ``var`` is the
    sample variance over seeds (``ddof=1``; 0 for one seed, so one seed gives back its bootstrap SE).

    Args:
        values: (S,) the score of each seed's network.
        errors: (S,) the patient-bootstrap SE of each score.

    Returns:
        ``(mean, se, seed_sd)``: the mean over seeds, the combined standard error and the standard deviation
        between seeds (0 for one seed).

    Raises:
        ValueError: When ``values`` is empty or ``errors`` has another length.

    Example:
        >>> mean, se, seed_sd = combine_seeds([0.4, 0.6], [0.04, 0.04])
        >>> round(mean, 3), round(se, 3), round(seed_sd, 3)
        (0.5, 0.108, 0.141)
        >>> combine_seeds([0.7], [0.03])
        (0.7, 0.03, 0.0)
    """
    values, errors = np.asarray(values, dtype=np.float64), np.asarray(errors, dtype=np.float64)
    if values.ndim != 1 or len(values) == 0 or errors.shape != values.shape:
        raise ValueError(f"need one score and one SE per seed, got shapes {values.shape} and {errors.shape}")
    count = len(values)
    spread = float(values.std(ddof=1)) if count > 1 else 0.0
    return float(values.mean()), float(np.sqrt(np.mean(errors**2) + spread**2 / count)), spread


RULES = ("directional", "retention", "equivalence")


def difference_se(*errors: float) -> float:
    """Standard error of a sum or difference of independent estimates: ``sqrt(sum(se^2))``.

    >>> round(difference_se(0.03, 0.04), 3)
    0.05
    """
    return float(np.sqrt(np.sum(np.square(np.asarray(errors, dtype=np.float64)))))


def rule_verdict(rule: str, effect: float, se: float, *, z: float, margin: float | None = None) -> bool | None:
    """The one decision rule of every claim: True (holds), False (does not hold) or None (undecided).

    Conventions, so that anyone can recompute a verdict from a record's ``effect``, ``se``, ``z`` and ``margin``:

    - ``"directional"`` ("A lowers B", "X beats Y"): ``effect`` is signed so that positive is the paper's
      direction. Holds iff ``effect > z * se``; does not hold iff ``effect < -z * se``.
    - ``"retention"`` ("keeps utility", "non-inferior"): ``effect`` is signed so that negative is a loss and
      ``margin > 0`` is the loss allowed, fixed before the run. Holds iff ``effect - z * se >= -margin``; does not
      hold iff ``effect + z * se < -margin``.
    - ``"equivalence"`` ("at chance", "unlinkable"): ``effect`` is the distance from the reference value (e.g.
      ``AUC - 0.5``), ``margin > 0``. Holds iff ``|effect| + z * se <= margin``; does not hold iff
      ``|effect| - z * se > margin``.

    Otherwise, and whenever ``effect`` is not finite or ``se`` is not a finite positive number, undecided.

    Args:
        rule: One of :data:`RULES`.
        effect: The measured effect, signed as above.
        se: Its standard error (> 0).
        z: Standard errors a decision needs.
        margin: The allowed loss (retention) or distance (equivalence); unused by ``"directional"``.

    Raises:
        ValueError: On an unknown rule, a non-positive ``z``, or a missing or non-positive ``margin`` for a rule
            that needs one.

    Example:
        >>> rule_verdict("directional", 0.10, 0.03, z=2), rule_verdict("directional", -0.10, 0.03, z=2)
        (True, False)
        >>> print(rule_verdict("directional", 0.05, 0.03, z=2))
        None
        >>> rule_verdict("retention", -0.01, 0.01, z=2, margin=0.05), rule_verdict("retention", -0.2, 0.05, z=2, margin=0.05)
        (True, False)
        >>> rule_verdict("equivalence", 0.01, 0.01, z=2, margin=0.05), rule_verdict("equivalence", -0.3, 0.05, z=2, margin=0.05)
        (True, False)
        >>> print(rule_verdict("directional", 0.5, 0.0, z=2))  # no noise estimate: cannot decide
        None
    """
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    if not (isinstance(z, (int, float)) and z > 0):
        raise ValueError(f"z must be a positive number, got {z!r}")
    if rule != "directional" and (margin is None or not math.isfinite(margin) or margin <= 0):
        raise ValueError(f"a {rule} claim needs a margin > 0 fixed before the run, got {margin!r}")
    try:
        effect, se = float(effect), float(se)
    except (TypeError, ValueError):
        return None
    if not (math.isfinite(effect) and math.isfinite(se) and se > 0):
        return None
    if rule == "directional":
        return True if effect > z * se else False if effect < -z * se else None
    if rule == "retention":
        return True if effect - z * se >= -margin else False if effect + z * se < -margin else None
    return True if abs(effect) + z * se <= margin else False if abs(effect) - z * se > margin else None


def sequence_drop(values: list[float], errors: list[float]) -> tuple[float, float]:
    """The drop of a score sequence from its first to its last value, with the SE of that difference.

    For "B falls as the knob rises" claims decided by :func:`rule_verdict` (``"directional"``): the effect is
    ``values[0] - values[-1]`` (positive = a fall) and its SE combines the two end points' errors.

    >>> effect, se = sequence_drop([0.8, 0.7, 0.5], [0.03, 0.02, 0.04])
    >>> round(effect, 3), round(se, 3)
    (0.3, 0.05)
    """
    values, errors = np.asarray(values, float), np.asarray(errors, float)
    if len(values) < 2 or len(values) != len(errors):
        raise ValueError(f"need matching values and errors of length >= 2, got {len(values)} and {len(errors)}")
    return float(values[0] - values[-1]), difference_se(errors[0], errors[-1])


def resolution_se(se: float, n: int) -> float:
    """A standard error no smaller than the resolution of a score measured on ``n`` items.

    A bootstrap SE is 0 when the score sits at its bound on every resample (an AUROC or accuracy of exactly 1, every
    pair separated), and the one rule cannot decide on an SE of 0. The smallest change such a score can register is
    one item in ``n``; the standard deviation of rounding to a grid of step ``1 / n`` is ``1 / (n * sqrt(12))``,
    used as the floor.

    >>> resolution_se(0.0, 400) == 1 / (400 * 12 ** 0.5)
    True
    >>> resolution_se(0.03, 400)
    0.03
    """
    if n < 1:
        raise ValueError(f"n must be a positive count, got {n!r}")
    floor = 1.0 / (n * math.sqrt(12.0))
    return float(se) if math.isfinite(float(se)) and float(se) >= floor else (floor if math.isfinite(float(se))
                                                                              else float("nan"))


def two_sample_bootstrap_se(first: np.ndarray, second: np.ndarray,
                            statistic: Callable[[np.ndarray, np.ndarray], float], resamples: int, seed: int) -> float:
    """Standard error of ``statistic(first, second)`` for two independent samples (e.g. real and generated images),
    resampling the rows of each with replacement, independently.

    Args:
        first: (N, ...) rows of the first sample.
        second: (M, ...) rows of the second sample.
        statistic: ``statistic(first_rows, second_rows) -> float``.
        resamples: Bootstrap draws (NaN below 2).
        seed: Seed of the draws.

    Returns:
        The standard deviation of the statistic over the draws on which it is finite (NaN when fewer than 2 are).

    Example:
        >>> rng = np.random.default_rng(0)
        >>> a, b = rng.normal(0, 1, 400), rng.normal(0, 1, 400)
        >>> se = two_sample_bootstrap_se(a, b, lambda x, y: float(x.mean() - y.mean()), 200, 0)
        >>> 0.05 < se < 0.09  # sqrt(2 / 400) = 0.071
        True
    """
    first, second = np.asarray(first), np.asarray(second)
    if len(first) == 0 or len(second) == 0 or resamples < 2:
        return float("nan")
    rng = np.random.default_rng(seed)
    values = np.array([statistic(first[rng.integers(0, len(first), len(first))],
                                 second[rng.integers(0, len(second), len(second))]) for _ in range(resamples)],
                      dtype=np.float64)
    values = values[np.isfinite(values)]
    return float(np.std(values, ddof=1)) if len(values) >= 2 else float("nan")
