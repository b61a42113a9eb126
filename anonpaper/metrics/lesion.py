"""Lesion-similarity metrics of paper 1: RROI (Eq. 12) and AMS (attribute matching score).

Both compare originals with their edits; both are "higher is better" for a de-identification that should keep
pathology: RROI large = the change concentrates in the region of interest (vessels) and spares the rest; AMS large =
the hard-exudate classifier gives the same label before and after.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ._validation import check_binary, check_image_pair, check_probability, check_reduction

__all__ = ["rroi", "attribute_matching_score", "attribute_matching_score_from_labels"]


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
        reduction: ``"mean"`` (float over images with a defined ratio) or ``"none"`` (``(N,)`` float64 array).

    Returns:
        Non-negative; higher is better. An image whose edit leaves the region of disinterest untouched gives +inf
        (if the region of interest changed) or NaN (identical images: the ratio is undefined, no alteration at
        all); the mean skips NaN and is NaN when every pair is undefined. NOT symmetric in ``mask``; symmetric in
        ``(original, edited)``.
    """
    original, edited = check_image_pair(original, edited, names=("original", "edited"))
    reduction = check_reduction(reduction)
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
    return float(defined.mean()) if defined.size else float("nan")


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
