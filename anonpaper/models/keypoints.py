"""A SuperRetina-style retinal keypoint detector/descriptor and the FS_SR identity similarity of paper 1.

Paper 1 (Zhao et al., 2023) scores identity with FS_SR: SuperRetina keypoints (vessel bifurcations and crossings)
and descriptors of the original and the edited image, ratio-test matching, an LMEDS homography, and
``inliers / keypoints in the original``. SuperRetina's weights are not obtainable offline, so
:class:`KeypointNet` is a small fully-convolutional stand-in trained on the retina phantoms, whose bifurcations
and crossings are known exactly (see :mod:`anonpaper.train.keypoints`).

Architecture: a :class:`anonpaper.models.unet.UNet` trunk whose full-resolution head outputs ``1 + D`` channels:
channel 0 is the detection logit (sigmoid = probability that a bifurcation/crossing lies at the pixel), channels
``1..D`` a dense descriptor field, L2-normalised per pixel. Dense full-resolution descriptors keep sampling
trivial (no descriptor interpolation between coarse cells) at the small sizes used here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from anonpaper.metrics.identity import keypoint_similarity
from anonpaper.models.unet import UNet


class KeypointNet(nn.Module):
    """Detection heatmap + dense descriptor network on a U-Net trunk.

    Args:
        in_channels: Image channels (3 for RGB fundus).
        descriptor_dim: Descriptor dimension ``D`` (>= 2).
        base_width: U-Net stem width.
        depth: U-Net depth (inputs need H, W divisible by ``2 ** depth``; :func:`detect` pads).

    Inputs are images in [0, 1]; the network centres them (``x - 0.5``) itself, so no data statistics are needed.
    """

    def __init__(self, in_channels: int = 3, descriptor_dim: int = 32, base_width: int = 16, depth: int = 3):
        super().__init__()
        if not isinstance(descriptor_dim, int) or descriptor_dim < 2:
            raise ValueError(f"KeypointNet: descriptor_dim must be an integer >= 2, got {descriptor_dim!r}")
        self.trunk = UNet(in_channels, 1 + descriptor_dim, base_width=base_width, depth=depth)
        self.in_channels, self.descriptor_dim = in_channels, descriptor_dim
        self.base_width, self.depth = base_width, depth
        self.size_multiple = self.trunk.size_multiple
        # Keypoint pixels are rare (about 1 in 500): start the detection logit at a prior of 0.01, as CenterNet
        # does, so the first steps are not spent unlearning p = 0.5 everywhere.
        with torch.no_grad():
            self.trunk.head.bias[0].fill_(-math.log((1 - 0.01) / 0.01))

    @property
    def config(self) -> dict:
        """Constructor arguments (to rebuild the network from a cached state dict)."""
        return {"in_channels": self.in_channels, "descriptor_dim": self.descriptor_dim,
                "base_width": self.base_width, "depth": self.depth}

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Detection logits and unit descriptors.

        Args:
            x: Float tensor (N, in_channels, H, W) in [0, 1], H and W divisible by ``size_multiple``.

        Returns:
            ``(logits (N, 1, H, W), descriptors (N, D, H, W))``; descriptors have unit L2 norm over D.
        """
        output = self.trunk(x - 0.5)
        return output[:, :1], F.normalize(output[:, 1:].float(), dim=1)


def _image_tensor(image: Any, channels: int) -> torch.Tensor:
    """One image as float (1, C, H, W) in [0, 1]: uint8 (H, W[, C]) numpy or float tensor (C, H, W)."""
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8 or image.ndim not in (2, 3):
            raise ValueError(f"image: numpy input must be uint8 (H, W) or (H, W, C), got {image.dtype} {image.shape}")
        tensor = torch.from_numpy(image.astype(np.float32) / 255.0)
        tensor = tensor[None] if tensor.ndim == 2 else tensor.permute(2, 0, 1)
    elif isinstance(image, torch.Tensor):
        if not image.is_floating_point() or image.ndim != 3:
            raise ValueError(f"image: tensor input must be float (C, H, W), got {image.dtype} {tuple(image.shape)}")
        tensor = image.detach().to("cpu", torch.float32)
        if not torch.isfinite(tensor).all() or tensor.min() < 0 or tensor.max() > 1:
            raise ValueError("image: float values must be finite and in [0, 1]")
    else:
        raise ValueError(f"image: expected a uint8 numpy array or a float tensor, got {type(image).__name__}")
    if tensor.shape[0] != channels:
        raise ValueError(f"image: the model expects {channels} channels, got {tensor.shape[0]}")
    return tensor[None].contiguous()


def heatmap_and_descriptors(model: KeypointNet, image: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the network on one image (reflect-padded to its size multiple, cropped back), in eval mode.

    Returns:
        ``(probability (H, W) float32 in [0, 1], descriptors (D, H, W) float32 unit-norm)`` on the CPU.
    """
    tensor = _image_tensor(image, model.in_channels)
    height, width = tensor.shape[-2:]
    multiple = model.size_multiple
    pad_bottom, pad_right = (-height) % multiple, (-width) % multiple
    if pad_bottom or pad_right:
        tensor = F.pad(tensor, (0, pad_right, 0, pad_bottom), mode="replicate")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits, descriptors = model(tensor.to(device))
    finally:
        model.train(was_training)
    probability = torch.sigmoid(logits.float())[0, 0, :height, :width].cpu()
    return probability, descriptors[0, :, :height, :width].float().cpu()


# Detection threshold chosen on validation pairs of the retina phantom (benchmarks/train_keypoint_detector.py,
# 128 px, cross-acquisition training): same- vs different-patient AUROC of FS_SR on held-out val patients was
# 1.0 at 0.05 and 0.1, 0.999 at 0.2 and 0.954 at 0.3; the lowest of the tied thresholds is kept. Low thresholds
# keep more (less precise) detections, and descriptors trained with dense anchors still match there.
DEFAULT_THRESHOLD = 0.05


def detect(model: KeypointNet, image: Any, top_k: int = 100, nms_radius: int = 3,
           threshold: float = DEFAULT_THRESHOLD, border: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Keypoints and descriptors of one image.

    Local maxima of the detection probability within a ``(2 r + 1)^2`` window (non-maximum suppression by max
    pooling) above ``threshold``, at least ``border`` pixels from the edge, the ``top_k`` most probable kept
    (ties in probability broken by raster order, so the output is deterministic).

    Args:
        model: A trained :class:`KeypointNet`.
        image: uint8 numpy (H, W, C) / (H, W), or float tensor (C, H, W) in [0, 1].
        top_k: Maximum number of keypoints (>= 1).
        nms_radius: Suppression radius in pixels (>= 0; 0 keeps every pixel above the threshold).
        threshold: Minimum detection probability, in [0, 1).
        border: Pixels at the image border where nothing is detected (>= 0).

    Returns:
        ``(keypoints (N, 2) float32 (x = column, y = row), descriptors (N, D) float32 unit-norm)``, N <= top_k,
        sorted by decreasing probability.
    """
    if not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
    if not isinstance(nms_radius, int) or nms_radius < 0:
        raise ValueError(f"nms_radius must be a non-negative integer, got {nms_radius!r}")
    if not 0.0 <= threshold < 1.0:
        raise ValueError(f"threshold must lie in [0, 1), got {threshold!r}")
    if not isinstance(border, int) or border < 0:
        raise ValueError(f"border must be a non-negative integer, got {border!r}")
    probability, descriptors = heatmap_and_descriptors(model, image)
    height, width = probability.shape
    if nms_radius > 0:
        pooled = F.max_pool2d(probability[None, None], 2 * nms_radius + 1, stride=1, padding=nms_radius)[0, 0]
        keep = probability >= pooled
    else:
        keep = torch.ones_like(probability, dtype=torch.bool)
    keep &= probability > threshold
    if border:
        keep[:border] = False
        keep[-border:] = False
        keep[:, :border] = False
        keep[:, -border:] = False
    rows, columns = torch.nonzero(keep, as_tuple=True)
    scores = probability[rows, columns]
    order = torch.argsort(-scores, stable=True)[:top_k]
    rows, columns = rows[order], columns[order]
    keypoints = torch.stack([columns, rows], dim=1).float().numpy().astype(np.float32)
    return keypoints, descriptors[:, rows, columns].T.contiguous().numpy().astype(np.float32)


def fs_sr(model: KeypointNet, originals: Any, edited: Any, *, top_k: int = 100, nms_radius: int = 3,
          threshold: float = DEFAULT_THRESHOLD, ratio: float = 0.75, reduction: str = "mean",
          original_keypoints: Sequence[tuple[np.ndarray, np.ndarray]] | None = None):
    """FS_SR of paper 1 with the learned detector: per pair, :func:`detect` on both images, then
    :func:`anonpaper.metrics.identity.keypoint_similarity` (ratio test, LMEDS homography, inliers / keypoints in
    the original).

    Args:
        model: A trained :class:`KeypointNet`.
        originals: uint8 numpy (N, H, W[, C]) or float tensor (N, C, H, W) in [0, 1].
        edited: The same format and shape (image ``i`` is the edit of original ``i``).
        top_k, nms_radius, threshold: Detection settings (see :func:`detect`).
        ratio: Lowe ratio of the matching.
        reduction: ``"mean"`` (float) or ``"none"`` (float64 numpy (N,)).
        original_keypoints: :func:`detect` of each original with these settings, when the caller has them (a sweep
            that compares many edits with the same originals detects them once); None detects them.

    Returns:
        Values in [0, 1]; 1 for identical images with distinct descriptors; LOWER = less identity kept = better
        de-identification. A pair whose original has no keypoint has no score: the fraction is 0 / 0, and a 0 would
        read as perfect de-identification, so it is NaN (the mean skips it; NaN when no pair has a score).
    """
    if reduction not in ("mean", "none"):
        raise ValueError(f"reduction must be 'mean' or 'none', got {reduction!r}")
    for name, value in (("originals", originals), ("edited", edited)):
        if not isinstance(value, (np.ndarray, torch.Tensor)) or value.ndim not in (3, 4):
            raise ValueError(f"{name}: expected a batch (N, ...) as numpy or tensor, got "
                             f"{type(value).__name__} {getattr(value, 'shape', None)}")
    if tuple(originals.shape) != tuple(edited.shape):
        raise ValueError(f"originals {tuple(originals.shape)} and edited {tuple(edited.shape)} differ in shape")
    if originals.shape[0] == 0:
        raise ValueError("originals: no images (N = 0)")
    if original_keypoints is not None and len(original_keypoints) != originals.shape[0]:
        raise ValueError(f"original_keypoints: expected one entry per original ({originals.shape[0]}), got "
                         f"{len(original_keypoints)}")
    scores = np.zeros(originals.shape[0], dtype=np.float64)
    for index in range(originals.shape[0]):
        points_first, features_first = (detect(model, originals[index], top_k, nms_radius, threshold)
                                        if original_keypoints is None else original_keypoints[index])
        if len(points_first) == 0:
            scores[index] = np.nan
            continue
        points_second, features_second = detect(model, edited[index], top_k, nms_radius, threshold)
        scores[index] = keypoint_similarity(points_first, features_first, points_second, features_second,
                                            ratio=ratio)
    if reduction == "none":
        return scores
    return float(np.nanmean(scores)) if np.isfinite(scores).any() else float("nan")


def detection_precision_recall(model: KeypointNet, images: Any, keypoints: Any, tolerance: float = 3.0,
                               **detect_options: Any) -> dict[str, float]:
    """Detection quality against exact keypoints, pooled over images.

    Args:
        model: A trained :class:`KeypointNet`.
        images: uint8 numpy (N, H, W[, C]) or float tensor (N, C, H, W) in [0, 1].
        keypoints: N arrays (K_i, 2) of true (x, y) positions.
        tolerance: A detection is correct within this Euclidean distance in pixels of a true keypoint.
        **detect_options: Passed to :func:`detect`.

    Returns:
        ``{"precision", "recall", "keypoints_per_image"}``: precision = share of detections within ``tolerance``
        of a true keypoint, recall = share of true keypoints within ``tolerance`` of a detection (both higher is
        better; NaN without detections / true keypoints).
    """
    from scipy.spatial import cKDTree

    if len(keypoints) != len(images):
        raise ValueError(f"keypoints: expected one array per image ({len(images)}), got {len(keypoints)}")
    correct_detections = found_truth = detections = truths = 0
    for image, truth in zip(images, keypoints):
        truth = np.asarray(truth, dtype=np.float64).reshape(-1, 2)
        found, _ = detect(model, image, **detect_options)
        detections += len(found)
        truths += len(truth)
        if len(found) and len(truth):
            correct_detections += int((cKDTree(truth).query(found)[0] <= tolerance).sum())
            found_truth += int((cKDTree(found).query(truth)[0] <= tolerance).sum())
    return {"precision": correct_detections / detections if detections else float("nan"),
            "recall": found_truth / truths if truths else float("nan"),
            "keypoints_per_image": detections / max(len(images), 1)}
