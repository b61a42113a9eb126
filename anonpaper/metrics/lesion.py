"""Lesion-similarity metrics of paper 1: RROI (Eq. 12) and AMS (attribute matching score).

Both compare originals with their edits; both are "higher is better" for a de-identification that should keep
pathology: RROI large = the change concentrates in the region of interest (vessels) and spares the rest; AMS large =
the hard-exudate classifier gives the same label before and after.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from ._validation import check_binary, check_image_pair, check_probability

__all__ = ["rroi", "RROISummary", "rroi_summary", "attribute_matching_score", "attribute_matching_score_from_labels"]

RROI_REDUCTIONS = ("mean", "median", "none")


def rroi(mask: torch.Tensor, original: torch.Tensor, edited: torch.Tensor, reduction: str = "mean"):
    """Ratio of alteration in the region of interest over the region of disinterest (paper 1, Eq. 12).

    ``RROI = 1/N sum_i ||M_i * (X_i - X'_i)|| / ||(1 - M_i) * (X_i - X'_i)||`` with Frobenius (L2) norms over
    channels and pixels. In paper 1, ``M`` is the vessel mask: a larger RROI means the edit changed the vessels
    more than the rest, so lesions outside the vessels are better kept.

    Args:
        mask: ``(N, 1, H, W)`` or ``(N, C, H, W)`` soft or binary mask in ``[0, 1]`` (1 = region of interest;
            a one-channel mask is broadcast over the image channels).
        original: ``(N, C, H, W)`` in ``[0, 1]``.
        edited: Same shape as ``original``.
        reduction: ``"mean"`` (paper 1's Eq. 12: float over images with a defined ratio; +inf as soon as one edit
            leaves the region of disinterest untouched), ``"median"`` (over images with a defined ratio; finite
            unless more than half are unbounded) or ``"none"`` (``(N,)`` float64 array). For reporting use
            :func:`rroi_summary`, which gives the median, the mean of the finite ratios and the counts.

    Returns:
        Non-negative; higher is better. An image whose edit leaves the region of disinterest untouched gives +inf
        (if the region of interest changed) or NaN (identical images: the ratio is undefined, no alteration at
        all); mean and median skip NaN and are NaN when every pair is undefined. NOT symmetric in ``mask``;
        symmetric in ``(original, edited)``.
    """
    original, edited = check_image_pair(original, edited, names=("original", "edited"))
    if reduction not in RROI_REDUCTIONS:
        raise ValueError(f"reduction: expected one of {RROI_REDUCTIONS}, observed {reduction!r}")
    if not isinstance(mask, torch.Tensor) or mask.ndim != 4 or mask.shape[0] != original.shape[0] \
            or mask.shape[2:] != original.shape[2:] or mask.shape[1] not in (1, original.shape[1]):
        observed = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(
            f"mask: expected a tensor (N={original.shape[0]}, 1 or {original.shape[1]}, {original.shape[2]}, "
            f"{original.shape[3]}), observed {observed}"
        )
    mask = check_image_pair(mask, mask, names=("mask", "mask"))[0].to(torch.float64)
    difference = original.double() - edited.double()
    inside = (mask * difference).flatten(1).norm(dim=1).cpu().numpy()
    outside = ((1.0 - mask) * difference).flatten(1).norm(dim=1).cpu().numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = inside / outside  # 0/0 -> NaN (undefined), x/0 -> inf, by design
    if reduction == "none":
        return ratios
    defined = ratios[~np.isnan(ratios)]
    if not defined.size:
        return float("nan")
    # np.median sorts +inf last, so the median stays finite while at most half the ratios are unbounded.
    return float(defined.mean()) if reduction == "mean" else float(np.median(defined))


@dataclass(frozen=True)
class RROISummary:
    """RROI over a set of edits, reported with finite statistics and the edge-case counts.

    Attributes:
        median: Median ratio over images with a defined ratio (+inf sorts last; +inf only when more than half are
            unbounded; NaN when none is defined). The headline number.
        mean_finite: Mean over the finite ratios only (NaN when there are none); paper 1's mean when
            ``n_unbounded == 0``.
        n_images: Number of pairs.
        n_unbounded: Pairs whose edit left the region of disinterest unchanged but not the region of interest
            (ratio +inf).
        n_undefined: Identical pairs (ratio 0 / 0).
    """

    median: float
    mean_finite: float
    n_images: int
    n_unbounded: int
    n_undefined: int


def rroi_summary(mask: torch.Tensor, original: torch.Tensor, edited: torch.Tensor) -> RROISummary:
    """RROI of every pair (:func:`rroi`) summarised without infinities: median, mean of finite ratios, counts.

    Args:
        mask: As :func:`rroi`.
        original: ``(N, C, H, W)`` in ``[0, 1]``.
        edited: Same shape.

    Returns:
        :class:`RROISummary`; higher ratios are better.

    Example:
        >>> original = torch.zeros(3, 1, 2, 2); mask = torch.zeros(3, 1, 2, 2); mask[:, :, 0] = 1
        >>> edited = original.clone(); edited[:, :, 0] = 0.5; edited[1, :, 1] = 0.25; edited[2, :, 1] = 0.5
        >>> rroi_summary(mask, original, edited)  # image 0: only the region of interest changed
        RROISummary(median=2.0, mean_finite=1.5, n_images=3, n_unbounded=1, n_undefined=0)
    """
    ratios = rroi(mask, original, edited, reduction="none")
    finite = ratios[np.isfinite(ratios)]
    defined = ratios[~np.isnan(ratios)]
    return RROISummary(
        median=float(np.median(defined)) if defined.size else float("nan"),
        mean_finite=float(finite.mean()) if finite.size else float("nan"),
        n_images=int(ratios.size),
        n_unbounded=int(np.isposinf(ratios).sum()),
        n_undefined=int(np.isnan(ratios).sum()),
    )


def attribute_matching_score_from_labels(labels_original, labels_edited) -> float:
    """AMS from binary labels: fraction of pairs where the classifier's label is unchanged.

    Returns:
        Value in ``[0, 1]``; 1 for identical labels; higher is better (pathology kept). Symmetric.

    Example:
        >>> attribute_matching_score_from_labels([1, 0, 1, 1], [1, 0, 0, 1])
        0.75
    """
    first = check_binary(labels_original, "labels_original")
    second = check_binary(labels_edited, "labels_edited", length=first.shape[0])
    return float(np.mean(first == second))


def attribute_matching_score(
    classifier: Callable[[torch.Tensor], torch.Tensor],
    original: torch.Tensor,
    edited: torch.Tensor,
    threshold: float = 0.5,
    batch_size: int = 64,
) -> float:
    """AMS (paper 1): agreement of a binary hard-exudate classifier on originals and their edits.

    Args:
        classifier: Callable mapping ``(B, C, H, W)`` images in ``[0, 1]`` to ``(B,)`` or ``(B, 1)`` probabilities
            of "hard exudates present" in ``[0, 1]`` (apply a sigmoid to logits first).
        original: ``(N, C, H, W)`` in ``[0, 1]``.
        edited: Same shape.
        threshold: Probability at or above which the label is 1.
        batch_size: Images per classifier call.

    Returns:
        Value in ``[0, 1]``; 1 for identical images; higher is better. Symmetric.
    """
    original, edited = check_image_pair(original, edited, names=("original", "edited"))
    threshold = check_probability(threshold, "threshold")

    def labels(images: torch.Tensor) -> np.ndarray:
        outputs = []
        with torch.no_grad():
            for start in range(0, images.shape[0], batch_size):
                batch = images[start : start + batch_size]
                probability = classifier(batch).reshape(-1)
                if probability.shape[0] != batch.shape[0]:
                    raise ValueError(
                        f"classifier: expected {batch.shape[0]} probabilities, observed shape "
                        f"{tuple(probability.shape)}"
                    )
                if float(probability.min()) < 0 or float(probability.max()) > 1:
                    raise ValueError("classifier: expected probabilities in [0, 1], observed values outside")
                outputs.append((probability >= threshold).long().cpu().numpy())
        return np.concatenate(outputs)

    return attribute_matching_score_from_labels(labels(original), labels(edited))
