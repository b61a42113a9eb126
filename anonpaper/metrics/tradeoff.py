"""Privacy-utility trade-off summaries: paper 1's similarity trade-off score and Pareto fronts.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ._validation import check_features, check_probability, check_vector

__all__ = ["min_max_normalise", "similarity_tradeoff_score", "pareto_front"]


def min_max_normalise(values) -> np.ndarray:
    """Rescale ``(M,)`` values to ``[0, 1]`` by ``(v - min) / (max - min)``; all-equal values map to 0.

    Example:
        >>> min_max_normalise([2.0, 4.0, 3.0]).tolist()
        [0.0, 1.0, 0.5]
    """
    array = check_vector(values, "values")
    span = array.max() - array.min()
    return np.zeros_like(array) if span == 0 else (array - array.min()) / span


def similarity_tradeoff_score(fs_sift, fs_sr, rroi, ams, eta) -> np.ndarray:
    """Paper 1's similarity trade-off score (Eq. 14 of Zhao et al., Biomed. Opt. Express 2023), in our reading, per
    method and eta.

    The authors released no code. The paper defines ``IDsim = (norm FS_SIFT + norm FS_SR) / 2`` and
    ``Lesionsim = (norm RROI + norm AMS) / 2``, each metric min-max normalised across the ``M`` compared methods;
    its extracted Eq. 14 lost its layout and reads as ``(1 - eta) / IDsim + eta Lesionsim``, which is infinite for
    the method whose normalised identity similarity is 0. We use ``score(eta) = (1 - eta) * (1 - IDsim) + eta *
    Lesionsim``, which rewards low identity similarity and high lesion similarity, as the paper's text says.

    A metric with the same value for every method (e.g. AMS = 1 everywhere when the lesion detector finds nothing)
    normalises to 0 for all of them (:func:`min_max_normalise`) and so drops out of the score without a trace:
    callers should check each metric's range and say so.

    Args:
        fs_sift: ``(M,)`` per-method FS_SIFT (lower = better de-identification).
        fs_sr: ``(M,)`` FS_SR.
        rroi: ``(M,)`` RROI (higher = better lesion keeping).
        ams: ``(M,)`` AMS.
        eta: Scalar or ``(E,)`` weights in ``[0, 1]`` on lesion similarity.

    Returns:
        ``(E, M)`` scores in ``[0, 1]`` (``(M,)`` for a scalar eta); higher is better.
    """
    metrics = [check_vector(v, name) for v, name in ((fs_sift, "fs_sift"), (fs_sr, "fs_sr"), (rroi, "rroi"),
                                                     (ams, "ams"))]
    count = metrics[0].shape[0]
    for array, name in zip(metrics, ("fs_sift", "fs_sr", "rroi", "ams")):
        if array.shape[0] != count:
            raise ValueError(f"{name}: expected {count} methods like fs_sift, observed {array.shape[0]}")
    identity_similarity = (min_max_normalise(metrics[0]) + min_max_normalise(metrics[1])) / 2
    lesion_similarity = (min_max_normalise(metrics[2]) + min_max_normalise(metrics[3])) / 2
    scalar = np.ndim(eta) == 0
    etas = np.array([check_probability(value, "eta") for value in np.atleast_1d(np.asarray(eta, dtype=np.float64))])
    scores = (1 - etas[:, None]) * (1 - identity_similarity[None, :]) + etas[:, None] * lesion_similarity[None, :]
    return scores[0] if scalar else scores


def pareto_front(points, higher_is_better: Sequence[bool]) -> np.ndarray:
    """Indices of the non-dominated points.

    Point ``a`` dominates ``b`` when it is at least as good on every axis and strictly better on one (better =
    larger where ``higher_is_better[axis]`` else smaller). Duplicated points do not dominate each other: all copies
    stay on the front.

    Args:
        points: ``(P, A)`` e.g. ``(privacy, utility)`` per method/setting.
        higher_is_better: ``A`` booleans, one per axis.

    Returns:
        Sorted ``int64`` indices of the front (ascending).

    Example:
        >>> pareto_front([[0.9, 0.5], [0.8, 0.4], [0.5, 0.9]], [True, True]).tolist()
        [0, 2]
    """
    array = check_features(points, "points")
    directions = list(higher_is_better)
    if len(directions) != array.shape[1] or not all(isinstance(d, (bool, np.bool_)) for d in directions):
        raise ValueError(
            f"higher_is_better: expected {array.shape[1]} booleans (one per axis), observed {higher_is_better!r}"
        )
    oriented = array * np.where(directions, 1.0, -1.0)  # make every axis "larger is better"
    at_least = (oriented[:, None, :] >= oriented[None, :, :]).all(axis=2)
    strictly = (oriented[:, None, :] > oriented[None, :, :]).any(axis=2)
    dominated = (at_least & strictly).any(axis=0)  # column b is dominated if some row a dominates it
    return np.flatnonzero(~dominated).astype(np.int64)
