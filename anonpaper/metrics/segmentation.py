"""Segmentation overlap metrics (vessel and lesion masks)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def dice_score(prediction: Any, target: Any) -> float:
    """Dice coefficient ``2 |P and T| / (|P| + |T|)`` of two binary masks over all their elements.

    Higher is better; 1.0 when both masks are empty.

    Args:
        prediction: Boolean or {0, 1} array/tensor of any shape.
        target: Same shape as ``prediction``.
    """
    prediction = np.asarray(prediction.cpu() if isinstance(prediction, torch.Tensor) else prediction).astype(bool)
    target = np.asarray(target.cpu() if isinstance(target, torch.Tensor) else target).astype(bool)
    if prediction.shape != target.shape:
        raise ValueError(f"dice_score: prediction shape {prediction.shape} != target shape {target.shape}")
    total = prediction.sum() + target.sum()
    if total == 0:
        return 1.0
    return float(2.0 * np.logical_and(prediction, target).sum() / total)
