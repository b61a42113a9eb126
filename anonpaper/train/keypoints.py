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
- Cross-acquisition mode (``pairs``): view B is instead a warp of ANOTHER image of the same patient (re-rendered
  pose and photometric acquisition), with the correspondences from the renderer's poses (:func:`cohort_pairs`).
  Synthetic warps of one image never show the blur, noise, colour and illumination changes between two real
  acquisitions; on the retina phantom, descriptors trained on synthetic warps alone separated same from different
  patients with AUROC about 0.8 under FS_SR, with true pairs about 0.95, with true pairs and 64 dense anchors
  0.97-1.0 (benchmarks/train_keypoint_detector.py, 128 px).
  :func:`acquisition_jitter` and ``dense_anchors`` (random descriptor anchors besides the keypoints) are optional.

All randomness of an epoch (order, warps, jitter, distractors) comes from the epoch generator of
:func:`anonpaper.train.loop.fit`, so runs are deterministic and resumable.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from anonpaper.models.keypoints import KeypointNet
from anonpaper.runtime import content_hash, get_device
from anonpaper.train.loop import TrainResult, TrainSettings, as_image_tensor, fit


def cohort_keypoints(cohort: Any, indices: Sequence[int] | None = None) -> list[np.ndarray]:
    """Bifurcations and crossings of a phantom cohort's rows, as one float32 (K_i, 2) (x, y) array per row."""
    indices = range(len(cohort)) if indices is None else indices
    output = []
    for index in indices:
        points = cohort.keypoints(int(index))
        output.append(np.concatenate([points["bifurcation"], points["crossing"]]).astype(np.float32).reshape(-1, 2))
    return output


def cohort_pairs(cohort: Any, indices: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Cross-acquisition training pairs of a retina phantom: every ordered pair of two different images of one
    patient, with the exact map between their pixel frames (from the renderer's pose affines).

    Args:
        cohort: A retina phantom cohort (rows with ``patient_id`` and :meth:`rendered` ``(i).affine``, the (2, 3)
            map from the patient's anatomy frame to row ``i``'s pixels).
        indices: Rows to use (default all); the returned pair indices are positions in ``indices``.

    Returns:
        ``(pairs int64 (P, 2), transforms float32 (P, 2, 3))``: ``transforms[p]`` maps pixel (x, y) of image
        ``pairs[p, 0]`` to the pixel of image ``pairs[p, 1]`` showing the same anatomy (``x' = M[:, :2] x + M[:, 2]``).
    """
    if not callable(getattr(cohort, "rendered", None)):
        raise ValueError(f"cohort {getattr(cohort, 'name', type(cohort).__name__)!r} has no rendered(i) poses; "
                         "use a retina phantom")
    indices = list(range(len(cohort))) if indices is None else [int(index) for index in indices]
    patients = cohort.table["patient_id"].to_numpy()[indices]
    affines = []
    for index in indices:
        affine = np.asarray(cohort.rendered(index).affine, dtype=np.float64)
        affines.append(np.vstack([affine.reshape(2, 3), [0.0, 0.0, 1.0]]))
    pairs, transforms = [], []
    for first in range(len(indices)):
        for second in range(len(indices)):
            if first != second and patients[first] == patients[second]:
                pairs.append((first, second))
                transforms.append((affines[second] @ np.linalg.inv(affines[first]))[:2])
    return (np.asarray(pairs, dtype=np.int64).reshape(-1, 2),
            np.asarray(transforms, dtype=np.float32).reshape(-1, 2, 3))


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
    warped = _warp_images(images, theta)
    positions_b, inside = _warp_points(theta, positions, height, width)
    return (photometric_jitter(images, generator, photometric), photometric_jitter(warped, generator, photometric),
            positions_b, valid & inside)


def cross_pair_views(images: torch.Tensor, positions: torch.Tensor, valid: torch.Tensor, partners: torch.Tensor,
                     partner_positions: torch.Tensor, partner_valid: torch.Tensor, transforms: torch.Tensor,
                     generator: torch.Generator, *, max_rotation_degrees: float = 15.0, max_scale: float = 0.1,
                     max_shift: float = 0.1, photometric: float = 0.15, acquisition_strength: float = 0.0
                     ) -> tuple[torch.Tensor, ...]:
    """Two views of each (image, partner) pair: view A = the image with photometric jitter, view B = the PARTNER
    (another acquisition of the same anatomy) after a random affine warp and independent jitter; the image's
    keypoints are carried into view B through the known pixel map ``transforms`` and the warp.

    Args:
        images: (B, C, H, W) float in [0, 1].
        positions, valid: (B, K, 2) keypoints (x, y) of ``images`` and (B, K) bool.
        partners: (B, C, H, W) float in [0, 1].
        partner_positions, partner_valid: (B, L, 2) keypoints of ``partners`` (detection targets of view B) and
            (B, L) bool.
        transforms: (B, 2, 3) float maps pixel (x, y) of ``images[i]`` -> pixel of ``partners[i]``
            (``x' = M[:, :2] x + M[:, 2]``), e.g. from :func:`cohort_pairs`.
        generator: Source of all randomness.
        max_rotation_degrees, max_scale, max_shift, photometric: As in :func:`warp_pair`.
        acquisition_strength: Extra :func:`acquisition_jitter` of both views (0 = none).

    Returns:
        ``(view_a, view_b, positions_b, valid_b, partner_positions_b, partner_valid_b)``: ``positions_b`` (B, K, 2)
        are the image's keypoints in view B, ``valid_b`` drops those outside view B or on its black surround
        (outside the partner's field of view, no content to describe); ``partner_positions_b`` / ``_valid_b`` are
        the partner's own keypoints in view B.
    """
    count, _, height, width = images.shape
    if partners.shape != images.shape or transforms.shape != (count, 2, 3):
        raise ValueError(f"partners {tuple(partners.shape)} must match images {tuple(images.shape)} and transforms "
                         f"{tuple(transforms.shape)} must be ({count}, 2, 3)")
    in_partner = positions @ transforms[:, :, :2].transpose(1, 2) + transforms[:, None, :, 2]
    theta = random_affine(count, generator, max_rotation_degrees, max_scale, max_shift)
    warped = _warp_images(partners, theta)
    positions_b, inside = _warp_points(theta, in_partner, height, width)
    own_b, own_inside = _warp_points(theta, partner_positions, height, width)
    on_content = _on_content(warped, positions_b)
    view_a = photometric_jitter(images, generator, photometric)
    view_b = photometric_jitter(warped, generator, photometric)
    if acquisition_strength > 0:
        view_a = acquisition_jitter(view_a, generator, acquisition_strength)
        view_b = acquisition_jitter(view_b, generator, acquisition_strength)
    return view_a, view_b, positions_b, valid & inside & on_content, own_b, partner_valid & own_inside


def _warp_images(images: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) images resampled by ``F.affine_grid`` thetas (B, 2, 3) (output -> input), zero padding."""
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def _warp_points(theta: torch.Tensor, positions: torch.Tensor, height: int, width: int
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Pixel (x, y) positions (B, K, 2) of the input of :func:`_warp_images` -> their positions in its output, and
    (B, K) bool: inside the output image."""
    # Input = A p_out + t, so p_out = A^-1 (p_in - t).
    linear, translation = theta[:, :, :2], theta[:, :, 2]
    normalised = _to_normalised(positions, height, width)
    moved = torch.linalg.solve(linear, (normalised - translation[:, None]).transpose(1, 2)).transpose(1, 2)
    moved = _to_pixels(moved, height, width)
    inside = ((moved[..., 0] >= 0) & (moved[..., 0] <= width - 1)
              & (moved[..., 1] >= 0) & (moved[..., 1] <= height - 1))
    return moved, inside


def photometric_jitter(images: torch.Tensor, generator: torch.Generator, photometric: float) -> torch.Tensor:
    """Per-image brightness gain ``1 +- photometric`` and gamma ``exp(+- photometric)`` of (B, C, H, W) in [0, 1]."""
    count = images.shape[0]
    gain = 1 + (torch.rand(count, 1, 1, 1, generator=generator) * 2 - 1) * photometric
    gamma = torch.exp((torch.rand(count, 1, 1, 1, generator=generator) * 2 - 1) * photometric)
    return (images.clamp(0, 1) ** gamma * gain).clamp(0, 1)


def acquisition_jitter(images: torch.Tensor, generator: torch.Generator, strength: float = 1.0) -> torch.Tensor:
    """Random acquisition differences of the retina phantom's kind (see ``_patient_rows`` of
    :mod:`anonpaper.data.phantoms.retina`), applied on top of an image: per-channel colour gains (sd
    ``0.05 strength``), a linear illumination gradient (sd ``0.08 strength`` per axis), Gaussian blur with sigma
    U(0, ``0.8 strength``) px and Gaussian noise with std U(0, ``0.015 strength``).

    Args:
        images: (B, C, H, W) float in [0, 1].
        generator: Source of all randomness.
        strength: Scale of every range (>= 0; 0 returns the images unchanged, clamped to [0, 1]).

    Returns:
        (B, C, H, W) float in [0, 1].
    """
    if strength < 0:
        raise ValueError(f"strength must be >= 0, got {strength!r}")
    count, channels, height, width = images.shape
    colour = 1 + torch.randn(count, channels, 1, 1, generator=generator) * 0.05 * strength
    slopes = torch.randn(count, 2, generator=generator) * 0.08 * strength
    columns = torch.linspace(-1, 1, width).view(1, 1, 1, width)
    rows = torch.linspace(-1, 1, height).view(1, 1, height, 1)
    illumination = 1 + slopes[:, 0].view(-1, 1, 1, 1) * columns + slopes[:, 1].view(-1, 1, 1, 1) * rows
    output = images * colour * illumination
    sigmas = torch.rand(count, generator=generator) * 0.8 * strength
    radius = 3
    offsets = torch.arange(-radius, radius + 1, dtype=torch.float32)
    blurred = []
    for index in range(count):
        sigma = float(sigmas[index])
        if sigma < 0.05:  # a kernel this narrow is the identity
            blurred.append(output[index:index + 1])
            continue
        kernel = torch.exp(-offsets**2 / (2 * sigma**2))
        kernel = (kernel / kernel.sum()).to(output.dtype)
        image = F.pad(output[index:index + 1], (radius, radius, radius, radius), mode="replicate")
        image = F.conv2d(image, kernel.view(1, 1, 1, -1).repeat(channels, 1, 1, 1), groups=channels)
        blurred.append(F.conv2d(image, kernel.view(1, 1, -1, 1).repeat(channels, 1, 1, 1), groups=channels))
    output = torch.cat(blurred)
    noise_std = torch.rand(count, 1, 1, 1, generator=generator) * 0.015 * strength
    output = output + torch.randn(output.shape, generator=generator) * noise_std
    return output.clamp(0, 1)


def _check_pairs(pairs: Any, pair_transforms: Any, count: int
                 ) -> list[tuple[list[int], list[torch.Tensor]]] | None:
    """Validated pairs -> per image: (partner indices, (2, 3) float32 maps to them); itself with the identity when
    an image has no partner. None without pairs."""
    if pairs is None:
        if pair_transforms is not None:
            raise ValueError("pair_transforms given without pairs")
        return None
    pair_array = np.asarray(pairs)
    transform_array = None if pair_transforms is None else np.asarray(pair_transforms, dtype=np.float32)
    if pair_array.ndim != 2 or pair_array.shape[1] != 2 or pair_array.dtype.kind not in "iu":
        raise ValueError(f"pairs: expected integer (P, 2), got {pair_array.dtype} {pair_array.shape}")
    if transform_array is None or transform_array.shape != (len(pair_array), 2, 3):
        raise ValueError(f"pair_transforms: expected float ({len(pair_array)}, 2, 3), got "
                         f"{None if transform_array is None else transform_array.shape}")
    if not np.isfinite(transform_array).all():
        raise ValueError("pair_transforms: non-finite values")
    if pair_array.size and (pair_array.min() < 0 or pair_array.max() >= count):
        raise ValueError(f"pairs: indices must lie in [0, {count}), got [{pair_array.min()}, {pair_array.max()}]")
    identity = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    partners: list[tuple[list[int], list[torch.Tensor]]] = [([], []) for _ in range(count)]
    for (first, second), transform in zip(pair_array.tolist(), transform_array):
        partners[first][0].append(second)
        partners[first][1].append(torch.from_numpy(transform.copy()))
    for index, (options, transforms) in enumerate(partners):
        if not options:
            options.append(index)
            transforms.append(identity)
    return partners


def _on_content(images: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """(B, K) bool: the (B, K, 2) pixel positions fall on image content, not on the black surround of a fundus
    photograph (outside the field of view every position looks alike, so none can anchor a descriptor)."""
    return _sample_field(images.amax(dim=1, keepdim=True), positions)[..., 0] > 0.02


def _random_positions(count: int, number: int, height: int, width: int, generator: torch.Generator) -> torch.Tensor:
    """(count, number, 2) uniform pixel positions (x, y) in the image."""
    scale = torch.tensor([width - 1, height - 1], dtype=torch.float32)
    return torch.rand(count, number, 2, generator=generator) * scale


def _sample_field(field: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Bilinear samples of a (B, C, H, W) field at (B, K, 2) pixel positions -> (B, K, C), zero outside."""
    height, width = field.shape[-2:]
    grid = _to_normalised(positions, height, width).to(field.device)[:, None]
    return F.grid_sample(field, grid, mode="bilinear", padding_mode="zeros", align_corners=False)[:, :, 0]\
        .transpose(1, 2)


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


def train_keypoint_detector(model: KeypointNet, images: Any, keypoints: Sequence[Any], settings: TrainSettings, *,
                            sigma: float = 1.5, temperature: float = 0.1,
                            descriptor_weight: float = 1.0, distractors: int = 64,
                            max_rotation_degrees: float = 15.0, max_scale: float = 0.1, max_shift: float = 0.1,
                            photometric: float = 0.15, acquisition_strength: float = 0.0, pairs: Any = None,
                            pair_transforms: Any = None, dense_anchors: int = 0,
                            val: tuple[Any, Sequence[Any]] | None = None) -> TrainResult:
    """Train :class:`KeypointNet` on images with exact keypoints (focal detection + InfoNCE descriptors).

    Args:
        model: A :class:`KeypointNet`.
        images: uint8 numpy (N, H, W[, C]) or float tensor (N, C, H, W) in [0, 1]; H, W divisible by
            ``model.size_multiple``.
        keypoints: N arrays (K_i, 2) of (x, y) pixel positions (e.g. :func:`cohort_keypoints`).
        settings: Epochs (one pass over the images each); images per batch (default 8, >= 2); Adam lr (default
            1e-3, always cosine-annealed over the epochs); seed, device, checkpoint, progress (as in
            :func:`anonpaper.train.loop.fit`). No weight decay or early stopping.
        sigma: Gaussian target width in pixels.
        temperature: InfoNCE temperature.
        descriptor_weight: Weight of the descriptor loss relative to the detection loss.
        distractors: Random positions of view B added as negatives per image (>= 0).
        max_rotation_degrees, max_scale, max_shift, photometric: Augmentation ranges (see :func:`warp_pair`).
        acquisition_strength: Scale of the extra acquisition jitter (colour, illumination gradient, blur, noise;
            see :func:`acquisition_jitter`) applied to both views; 0 (default) disables it.
        pairs: Optional int (P, 2) image indices of cross-acquisition pairs (two images of one patient, e.g. from
            :func:`cohort_pairs`). With pairs, each image of an epoch is paired with one of its partners (drawn at
            random; an image without partners with itself): view A is the image, view B the PARTNER after a random
            warp, and the descriptor loss uses the true correspondences, so descriptors learn to survive real
            acquisition changes and not only synthetic ones. Without pairs, view B is a warp of the image itself.
        pair_transforms: float (P, 2, 3) pixel maps from image ``pairs[p, 0]`` to image ``pairs[p, 1]``; required
            with ``pairs``.
        dense_anchors: Random positions of view A (inside the field of view) added to the keypoints as descriptor
            anchors with their exact correspondences in view B (>= 0). Detections at test time are often a few
            pixels off or not at a true keypoint; dense anchors train descriptors to match there too.
        val: Optional ``(images, keypoints)``; its loss on fixed warps (seeded by ``seed``) becomes the
            ``val_loss`` column that selects the best epoch (lower is better). Without it ``train_loss`` selects.

    Returns:
        :class:`TrainResult` whose ``model`` is the trained :class:`KeypointNet` (takes images in [0, 1]).
    """
    if not isinstance(model, KeypointNet):
        raise ValueError(f"model must be a KeypointNet, got {type(model).__name__}")
    settings.refuse("train_keypoint_detector", "weight_decay", "lr_schedule", "early_stopping_patience",
                    "channels_last")
    settings = settings.with_defaults(batch_size=8, lr=1e-3)
    epochs, batch_size, lr, seed = settings.epochs, settings.batch_size, settings.lr, settings.seed
    device, checkpoint_path, progress = settings.device, settings.checkpoint_path, settings.progress
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
    if not isinstance(dense_anchors, int) or dense_anchors < 0:
        raise ValueError(f"dense_anchors must be a non-negative integer, got {dense_anchors!r}")
    if acquisition_strength < 0:
        raise ValueError(f"acquisition_strength must be >= 0, got {acquisition_strength!r}")
    positions, valid = _padded_keypoints(keypoints, count, height, width)
    partners = _check_pairs(pairs, pair_transforms, count)
    device = get_device(device) if not isinstance(device, torch.device) else device
    augmentation = {"max_rotation_degrees": max_rotation_degrees, "max_scale": max_scale, "max_shift": max_shift,
                    "photometric": photometric}

    def anchors_of(index: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Descriptor anchors of view A: the keypoints, then ``dense_anchors`` random positions with content."""
        if dense_anchors == 0:
            return positions[index], valid[index]
        extra = _random_positions(index.numel(), dense_anchors, height, width, generator)
        content = _on_content(image_tensor[index], extra)
        return torch.cat([positions[index], extra], dim=1), torch.cat([valid[index], content], dim=1)

    def self_warp_views(index: torch.Tensor, anchors: torch.Tensor, anchors_valid: torch.Tensor,
                        generator: torch.Generator):
        """View B = a warp of the image itself; the same outputs as :func:`cross_pair_views`."""
        keypoint_count = positions.shape[1]
        view_a, view_b, positions_b, valid_b = warp_pair(image_tensor[index], anchors, anchors_valid,
                                                         generator, **augmentation)
        if dense_anchors:  # dense anchors warped onto the black surround have nothing to describe
            valid_b = valid_b & (_on_content(view_b, positions_b) | (torch.arange(anchors.shape[1]) < keypoint_count))
        if acquisition_strength > 0:
            view_a = acquisition_jitter(view_a, generator, acquisition_strength)
            view_b = acquisition_jitter(view_b, generator, acquisition_strength)
        return (view_a, view_b, positions_b, valid_b, positions_b[:, :keypoint_count],
                valid_b[:, :keypoint_count])

    def choose_partners(index: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """One partner image of each image (another image of its patient) and the (B, 2, 3) maps to it."""
        partner_index, transform = [], []
        for image_index in index.tolist():
            options_of_image, transforms_of_image = partners[image_index]
            choice = int(torch.randint(len(options_of_image), (1,), generator=generator))
            partner_index.append(options_of_image[choice])
            transform.append(transforms_of_image[choice])
        return torch.tensor(partner_index, dtype=torch.long), torch.stack(transform)

    def make_batch(index: torch.Tensor, generator: torch.Generator):
        # Partners are drawn before the anchors: one random stream, in a fixed order, per epoch.
        chosen = None if partners is None else choose_partners(index, generator)
        anchors, anchors_valid = anchors_of(index, generator)
        if chosen is None:
            views = self_warp_views(index, anchors, anchors_valid, generator)
        else:
            partner, transforms = chosen
            views = cross_pair_views(image_tensor[index], anchors, anchors_valid, image_tensor[partner],
                                     positions[partner], valid[partner], transforms, generator,
                                     acquisition_strength=acquisition_strength, **augmentation)
        view_a, view_b, positions_b, valid_b, own_b, own_valid_b = views
        heat_a = gaussian_heatmaps(positions[index], valid[index], height, width, sigma)
        heat_b = gaussian_heatmaps(own_b, own_valid_b, height, width, sigma)
        extra = _random_positions(index.numel(), distractors, height, width, generator)
        return view_a, view_b, heat_a, heat_b, anchors, positions_b, valid_b, extra

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
    if config is not None and (partners is not None or acquisition_strength > 0 or dense_anchors):
        # Only new options enter the hash, so checkpoints of runs without them stay valid.
        config["acquisition_strength"] = acquisition_strength
        config["dense_anchors"] = dense_anchors
        config["pairs"] = None if pairs is None else content_hash(np.asarray(pairs, np.int64),
                                                                   np.asarray(pair_transforms, np.float32))
    return fit(model, batches=batches, step=batch_loss, optimizer=optimizer, epochs=epochs, scheduler=scheduler,
               evaluate=evaluate, monitor="val_loss" if val is not None else "train_loss", mode="min", seed=seed,
               device=device, checkpoint_path=checkpoint_path, config=config, progress=progress,
               description="keypoints", batches_per_epoch=count // batch_size + int(count % batch_size >= 2))
