"""Training of the SuperRetina-style keypoint detector/descriptor (:class:`anonpaper.models.keypoints.KeypointNet`).

Supervision comes from exact keypoints (the retina phantom's bifurcations and crossings,
:meth:`RetinaPhantomCohort.keypoints`), in the spirit of SuperRetina's supervised detection + self-supervised
descriptors:

- Detection: a Gaussian blob (``sigma`` pixels, peak 1 at the keypoint's nearest pixel) per keypoint; the
  penalty-reduced pixel-wise focal loss of CornerNet/CenterNet (``-(1-p)^2 log p`` at peaks,
  ``-(1-y)^4 p^2 log(1-p)`` elsewhere, normalised by the number of peaks), which copes with the extreme sparsity
  of keypoint pixels.
- Description: each training image is paired with a random affine warp of itself (rotation, scale, shift) plus
  independent photometric jitter, so every keypoint has an exact correspondence; an InfoNCE loss (temperature
  ``temperature``) makes a keypoint's descriptor in view A most similar to its own descriptor in view B, against
  the other keypoints of view B and ``distractors`` random positions of view B.

All randomness of an epoch (order, warps, jitter, distractors) comes from the epoch generator of
:func:`anonpaper.train.loop.fit`, so runs are deterministic and resumable.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from anonpaper.models.keypoints import KeypointNet
from anonpaper.runtime import content_hash, get_device
from anonpaper.train.loop import TrainResult, as_image_tensor, fit


def cohort_keypoints(cohort: Any, indices: Sequence[int] | None = None) -> list[np.ndarray]:
    """Bifurcations and crossings of a phantom cohort's rows, as one float32 (K_i, 2) (x, y) array per row."""
    indices = range(len(cohort)) if indices is None else indices
    output = []
    for index in indices:
        points = cohort.keypoints(int(index))
        output.append(np.concatenate([points["bifurcation"], points["crossing"]]).astype(np.float32).reshape(-1, 2))
    return output


def _padded_keypoints(keypoints: Sequence[Any], count: int, height: int, width: int
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged keypoint lists -> (N, K_max, 2) float32 positions and (N, K_max) bool validity."""
    if len(keypoints) != count:
        raise ValueError(f"keypoints: expected one array per image ({count}), got {len(keypoints)}")
    arrays = []
    for index, points in enumerate(keypoints):
        array = np.asarray(points, dtype=np.float32).reshape(-1, 2) if np.size(points) else np.zeros((0, 2),
                                                                                                     np.float32)
        if not np.isfinite(array).all():
            raise ValueError(f"keypoints[{index}]: non-finite coordinates")
        if array.size and (array[:, 0].min() < -0.5 or array[:, 0].max() > width - 0.5
                           or array[:, 1].min() < -0.5 or array[:, 1].max() > height - 0.5):
            raise ValueError(f"keypoints[{index}]: (x, y) must lie inside the {width}x{height} image, got range "
                             f"x [{array[:, 0].min()}, {array[:, 0].max()}], y [{array[:, 1].min()}, "
                             f"{array[:, 1].max()}]")
        arrays.append(array)
    maximum = max(1, max(len(array) for array in arrays))
    positions = torch.zeros(count, maximum, 2)
    valid = torch.zeros(count, maximum, dtype=torch.bool)
    for index, array in enumerate(arrays):
        positions[index, :len(array)] = torch.from_numpy(array)
        valid[index, :len(array)] = True
    return positions, valid


def gaussian_heatmaps(positions: torch.Tensor, valid: torch.Tensor, height: int, width: int,
                      sigma: float) -> torch.Tensor:
    """Detection targets: per image the maximum of Gaussian blobs centred on the keypoints' nearest pixels.

    Args:
        positions: (B, K, 2) float (x, y) pixel positions.
        valid: (B, K) bool; invalid entries draw nothing.
        height, width: Output size.
        sigma: Blob standard deviation in pixels (> 0).

    Returns:
        float32 (B, 1, H, W) in [0, 1], exactly 1 at each valid keypoint's rounded pixel inside the image.
    """
    if sigma <= 0:
        raise ValueError(f"sigma must be positive, got {sigma!r}")
    centres = torch.round(positions)
    rows = torch.arange(height, dtype=torch.float32).view(1, 1, height, 1)
    columns = torch.arange(width, dtype=torch.float32).view(1, 1, 1, width)
    squared = (columns - centres[..., 0, None, None]) ** 2 + (rows - centres[..., 1, None, None]) ** 2
    blobs = torch.exp(-squared / (2.0 * sigma**2)) * valid[..., None, None]
    if blobs.shape[1] == 0:
        return torch.zeros(positions.shape[0], 1, height, width)
    return blobs.amax(dim=1, keepdim=True)


def focal_heatmap_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """CenterNet's penalty-reduced focal loss (alpha 2, beta 4), normalised by the number of peaks (>= 1).

    Args:
        logits: (B, 1, H, W) detection logits.
        target: (B, 1, H, W) Gaussian targets in [0, 1], 1 at keypoints.
    """
    logits = logits.float()
    probability = torch.sigmoid(logits)
    peaks = target >= 1.0 - 1e-6
    # log-sigmoid forms are stable for large |logits|.
    positive = -((1 - probability) ** 2) * F.logsigmoid(logits)
    negative = -((1 - target) ** 4) * probability**2 * F.logsigmoid(-logits)
    total = torch.where(peaks, positive, negative).sum()
    return total / peaks.sum().clamp(min=1)


def random_affine(count: int, generator: torch.Generator, max_rotation_degrees: float, max_scale: float,
                  max_shift: float) -> torch.Tensor:
    """``count`` random affine ``theta`` (count, 2, 3) for ``F.affine_grid`` (output -> input, normalised
    coordinates): rotation U(-r, r) degrees, isotropic scale U(1-s, 1+s), shift U(-t, t) (fraction of half-size)."""
    angle = (torch.rand(count, generator=generator) * 2 - 1) * math.radians(max_rotation_degrees)
    scale = 1 + (torch.rand(count, generator=generator) * 2 - 1) * max_scale
    shift = (torch.rand(count, 2, generator=generator) * 2 - 1) * max_shift
    cosine, sine = torch.cos(angle) * scale, torch.sin(angle) * scale
    return torch.stack([torch.stack([cosine, -sine, shift[:, 0]], dim=1),
                        torch.stack([sine, cosine, shift[:, 1]], dim=1)], dim=1)


def _to_normalised(points: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Pixel (x, y) (pixel centres at integers) -> grid_sample coordinates with align_corners=False."""
    scale = torch.tensor([width, height], dtype=points.dtype)
    return (2 * points + 1) / scale - 1


def _to_pixels(points: torch.Tensor, height: int, width: int) -> torch.Tensor:
    scale = torch.tensor([width, height], dtype=points.dtype)
    return ((points + 1) * scale - 1) / 2


def warp_pair(images: torch.Tensor, positions: torch.Tensor, valid: torch.Tensor, generator: torch.Generator, *,
              max_rotation_degrees: float = 15.0, max_scale: float = 0.1, max_shift: float = 0.1,
              photometric: float = 0.15) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two views of each image: view A = photometric jitter of the image, view B = a random affine warp of it
    with independent jitter; keypoints follow the warp.

    Args:
        images: (B, C, H, W) float in [0, 1].
        positions: (B, K, 2) keypoints (x, y) of ``images``.
        valid: (B, K) bool.
        generator: Source of all randomness.
        max_rotation_degrees, max_scale, max_shift: Warp ranges (see :func:`random_affine`).
        photometric: Range of the per-image brightness gain ``1 +- photometric`` and of the gamma exponent
            ``exp(+- photometric)``.

    Returns:
        ``(view_a, view_b, positions_b, valid_b)``; ``valid_b`` also drops keypoints warped outside view B.
    """
    count, _, height, width = images.shape
    theta = random_affine(count, generator, max_rotation_degrees, max_scale, max_shift)
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    warped = F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    # Input = A p_out + t, so p_out = A^-1 (p_in - t).
    linear, translation = theta[:, :, :2], theta[:, :, 2]
    normalised = _to_normalised(positions, height, width)
    moved = torch.linalg.solve(linear, (normalised - translation[:, None]).transpose(1, 2)).transpose(1, 2)
    positions_b = _to_pixels(moved, height, width)
    inside = ((positions_b[..., 0] >= 0) & (positions_b[..., 0] <= width - 1)
              & (positions_b[..., 1] >= 0) & (positions_b[..., 1] <= height - 1))

    def jitter(batch: torch.Tensor) -> torch.Tensor:
        gain = 1 + (torch.rand(count, 1, 1, 1, generator=generator) * 2 - 1) * photometric
        gamma = torch.exp((torch.rand(count, 1, 1, 1, generator=generator) * 2 - 1) * photometric)
        return (batch.clamp(0, 1) ** gamma * gain).clamp(0, 1)

    return jitter(images), jitter(warped), positions_b, valid & inside


def _sample_descriptors(descriptors: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Bilinear samples of a (B, D, H, W) descriptor field at (B, K, 2) pixel positions -> unit (B, K, D)."""
    height, width = descriptors.shape[-2:]
    grid = _to_normalised(positions, height, width).to(descriptors.device)[:, None]
    sampled = F.grid_sample(descriptors, grid, mode="bilinear", align_corners=False)[:, :, 0]
    return F.normalize(sampled.transpose(1, 2), dim=2)


def descriptor_loss(descriptors_a: torch.Tensor, descriptors_b: torch.Tensor, positions_a: torch.Tensor,
                    positions_b: torch.Tensor, valid: torch.Tensor, distractors_b: torch.Tensor,
                    temperature: float) -> torch.Tensor:
    """InfoNCE over corresponding keypoints: row k of view A must pick column k of view B among B's valid
    keypoints and the distractor positions. Mean over valid keypoints; 0 when a batch has none."""
    first = _sample_descriptors(descriptors_a, positions_a)
    second = _sample_descriptors(descriptors_b, positions_b)
    extra = _sample_descriptors(descriptors_b, distractors_b)
    losses = []
    for index in range(first.shape[0]):
        rows = torch.nonzero(valid[index], as_tuple=True)[0].to(first.device)
        if rows.numel() == 0:
            continue
        candidates = torch.cat([second[index, rows], extra[index]])
        logits = first[index, rows] @ candidates.T / temperature
        losses.append(F.cross_entropy(logits, torch.arange(rows.numel(), device=logits.device), reduction="sum"))
    count = valid.sum()
    if not losses or count == 0:
        return descriptors_a.sum() * 0.0
    return torch.stack(losses).sum() / count.to(first.device)


def train_keypoint_detector(model: KeypointNet, images: Any, keypoints: Sequence[Any], *, epochs: int,
                            batch_size: int = 8, lr: float = 1e-3, sigma: float = 1.5, temperature: float = 0.1,
                            descriptor_weight: float = 1.0, distractors: int = 64,
                            max_rotation_degrees: float = 15.0, max_scale: float = 0.1, max_shift: float = 0.1,
                            photometric: float = 0.15, val: tuple[Any, Sequence[Any]] | None = None, seed: int = 0,
                            device: str | torch.device | None = None, checkpoint_path: str | Path | None = None,
                            progress: bool = True) -> TrainResult:
    """Train :class:`KeypointNet` on images with exact keypoints (focal detection + InfoNCE descriptors).

    Args:
        model: A :class:`KeypointNet`.
        images: uint8 numpy (N, H, W[, C]) or float tensor (N, C, H, W) in [0, 1]; H, W divisible by
            ``model.size_multiple``.
        keypoints: N arrays (K_i, 2) of (x, y) pixel positions (e.g. :func:`cohort_keypoints`).
        epochs: Number of epochs (one pass over the images each).
        batch_size: Images per batch (>= 2).
        lr: Adam learning rate (cosine-annealed over the epochs).
        sigma: Gaussian target width in pixels.
        temperature: InfoNCE temperature.
        descriptor_weight: Weight of the descriptor loss relative to the detection loss.
        distractors: Random positions of view B added as negatives per image (>= 0).
        max_rotation_degrees, max_scale, max_shift, photometric: Augmentation ranges (see :func:`warp_pair`).
        val: Optional ``(images, keypoints)``; its loss on fixed warps (seeded by ``seed``) becomes the
            ``val_loss`` column that selects the best epoch (lower is better). Without it ``train_loss`` selects.
        seed, device, checkpoint_path, progress: As in :func:`anonpaper.train.loop.fit`.

    Returns:
        :class:`TrainResult` whose ``model`` is the trained :class:`KeypointNet` (takes images in [0, 1]).
    """
    if not isinstance(model, KeypointNet):
        raise ValueError(f"model must be a KeypointNet, got {type(model).__name__}")
    image_tensor = as_image_tensor(images)
    count, channels, height, width = image_tensor.shape
    if channels != model.in_channels:
        raise ValueError(f"images have {channels} channels, the model expects {model.in_channels}")
    if height % model.size_multiple or width % model.size_multiple:
        raise ValueError(f"image size {height}x{width} must be divisible by {model.size_multiple}")
    if not isinstance(batch_size, int) or batch_size < 2:
        raise ValueError(f"batch_size must be an integer >= 2, got {batch_size!r}")
    if not isinstance(distractors, int) or distractors < 0:
        raise ValueError(f"distractors must be a non-negative integer, got {distractors!r}")
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature!r}")
    positions, valid = _padded_keypoints(keypoints, count, height, width)
    device = get_device(device) if not isinstance(device, torch.device) else device
    augmentation = {"max_rotation_degrees": max_rotation_degrees, "max_scale": max_scale, "max_shift": max_shift,
                    "photometric": photometric}

    def make_batch(index: torch.Tensor, generator: torch.Generator):
        view_a, view_b, positions_b, valid_b = warp_pair(image_tensor[index], positions[index], valid[index],
                                                         generator, **augmentation)
        heat_a = gaussian_heatmaps(positions[index], valid[index], height, width, sigma)
        heat_b = gaussian_heatmaps(positions_b, valid_b, height, width, sigma)
        scale = torch.tensor([width - 1, height - 1], dtype=torch.float32)
        extra = torch.rand(index.numel(), distractors, 2, generator=generator) * scale
        return view_a, view_b, heat_a, heat_b, positions[index], positions_b, valid_b, extra

    def batches(epoch: int, generator: torch.Generator):
        order = torch.randperm(count, generator=generator)
        for start in range(0, count, batch_size):
            index = order[start:start + batch_size]
            if index.numel() < 2:  # BatchNorm cannot train on one image
                continue
            yield make_batch(index, generator)

    def batch_loss(network: nn.Module, batch) -> torch.Tensor:
        view_a, view_b, heat_a, heat_b, positions_a, positions_b, valid_b, extra = batch
        logits, descriptors = network(torch.cat([view_a, view_b]))
        size = view_a.shape[0]
        detection = focal_heatmap_loss(logits, torch.cat([heat_a, heat_b]))
        description = descriptor_loss(descriptors[:size], descriptors[size:], positions_a.cpu(), positions_b.cpu(),
                                      valid_b.cpu(), extra.cpu(), temperature)
        return detection + descriptor_weight * description

    evaluate = None
    if val is not None:
        val_images = as_image_tensor(val[0], "val images")
        if val_images.shape[1:] != image_tensor.shape[1:]:
            raise ValueError(f"val images {tuple(val_images.shape[1:])} differ from train images "
                             f"{tuple(image_tensor.shape[1:])}")
        val_positions, val_valid = _padded_keypoints(val[1], val_images.shape[0], height, width)
        fixed = torch.Generator().manual_seed(int(seed) + 1_000_003)
        val_batches = []
        for start in range(0, val_images.shape[0], batch_size):
            index = torch.arange(start, min(start + batch_size, val_images.shape[0]))
            view_a, view_b, positions_b, valid_b = warp_pair(val_images[index], val_positions[index],
                                                             val_valid[index], fixed, **augmentation)
            extra = torch.rand(index.numel(), distractors, 2, generator=fixed) * torch.tensor(
                [width - 1, height - 1], dtype=torch.float32)
            val_batches.append((view_a, view_b,
                                gaussian_heatmaps(val_positions[index], val_valid[index], height, width, sigma),
                                gaussian_heatmaps(positions_b, valid_b, height, width, sigma),
                                val_positions[index], positions_b, valid_b, extra))

        def evaluate(network: nn.Module) -> dict[str, float]:
            losses = [float(batch_loss(network, tuple(part.to(device) for part in batch))) for batch in val_batches]
            return {"val_loss": float(np.mean(losses))}

    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    config = None if checkpoint_path is None else {
        "trainer": "keypoints", "data": content_hash(image_tensor.numpy(), positions.numpy(), valid.numpy()),
        "val": None if val is None else content_hash(val_images.numpy(), val_positions.numpy()),
        "model": model.config, "batch_size": batch_size, "lr": lr, "sigma": sigma, "temperature": temperature,
        "descriptor_weight": descriptor_weight, "distractors": distractors, "augmentation": augmentation}
    return fit(model, batches=batches, step=batch_loss, optimizer=optimizer, epochs=epochs, scheduler=scheduler,
               evaluate=evaluate, monitor="val_loss" if val is not None else "train_loss", mode="min", seed=seed,
               device=device, checkpoint_path=checkpoint_path, config=config, progress=progress,
               description="keypoints", batches_per_epoch=count // batch_size + int(count % batch_size >= 2))
