"""Where a classifier looks: how concentrated a saliency map is on a region (e.g. the vessels)."""

from __future__ import annotations

import numpy as np


def saliency_vessel_enrichment(maps: np.ndarray, vessels: np.ndarray, fov: np.ndarray | None = None) -> np.ndarray:
    """How concentrated saliency is on vessels: mean saliency on vessel pixels / mean saliency in the field.

    1 means vessels get their area's share of the saliency; above 1, more (higher = the model relies more on
    vessel pixels). Invariant to the scale of each map.

    Args:
        maps: Non-negative saliency (N, H, W).
        vessels: bool (N, H, W) vessel masks.
        fov: Optional bool (N, H, W) field-of-view masks (None: the whole image).

    Returns:
        float64 (N,); NaN for an image without vessel pixels or with an all-zero map.
    """
    maps = np.asarray(maps, dtype=np.float64)
    vessels = np.asarray(vessels).astype(bool)
    if maps.ndim != 3 or vessels.shape != maps.shape:
        raise ValueError(f"maps and vessels must both be (N, H, W) of one shape, got {maps.shape} and {vessels.shape}")
    if np.any(maps < 0):
        raise ValueError("saliency maps must be non-negative")
    region = np.ones_like(vessels) if fov is None else np.asarray(fov).astype(bool)
    if region.shape != maps.shape:
        raise ValueError(f"fov must have shape {maps.shape}, got {region.shape}")
    inside = vessels & region
    result = np.full(len(maps), np.nan)
    for index in range(len(maps)):
        field_mean = maps[index][region[index]].mean() if region[index].any() else 0.0
        if inside[index].any() and field_mean > 0:
            result[index] = maps[index][inside[index]].mean() / field_mean
    return result
