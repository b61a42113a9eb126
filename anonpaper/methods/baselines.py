"""Trivial anonymisation baselines: Gaussian blur, pixelation, additive Gaussian noise and a constant image, and
blur and pixelation at a matched distortion (a target PSNR).

A generative anonymisation changes an image by some amount; to ask what the generative model buys, compare it with a
trivial distortion of the same strength: blur or pixelate every image until its PSNR against the original equals the
PSNR of the generative method's output (per image, or on average over the set), then measure privacy and utility of
both. PSNR is :func:`anonpaper.metrics.psnr` (data range 1, per image; a set's PSNR is the mean of per-image values,
as GMIA reports it).

* :func:`gaussian_blur`: separable Gaussian filter, kernel radius ``int(4 sigma + 0.5)`` and edge replication, the
  same as ``scipy.ndimage.gaussian_filter(x, sigma, mode="nearest", truncate=4.0)``; ``sigma = 0`` is the identity.
* :func:`pixelate`: every ``b x b`` block (aligned at the top-left corner; partial blocks at the right and bottom
  edges) replaced by its mean.
* :func:`gaussian_noise`: independent zero-mean Gaussian noise of standard deviation ``sigma`` (in [0, 1] intensity
  units) added to every value, clipped to [0, 1]; the draws come from NumPy's PCG64 seeded by ``seed``, so one seed
  gives the same noise on every device.
* :func:`constant_images`: every image replaced by one constant image (a value per channel): the zero-information
  release, which keeps nothing of any patient.
* :func:`blur_to_psnr`: bisection on sigma. Blurring more never raises the error for a Gaussian (every frequency's
  gain ``exp(-sigma^2 omega^2 / 2)`` falls with sigma), so PSNR decreases with sigma and bisection converges; the
  search stops when the PSNR is within ``tolerance`` dB of the target.
* :func:`pixelate_to_psnr`: block sizes are integers and PSNR is not monotone in them (a block size that divides
  the image can distort less than a smaller one that does not), so instead of bisection every block size up to
  ``max_block_size`` is tried and the one whose PSNR is closest to the target kept; the match is only as close as
  the nearest block size allows (the result reports the PSNR reached).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from anonpaper.metrics._validation import check_images
from anonpaper.metrics.quality import psnr

GAUSSIAN_TRUNCATE = 4.0


@dataclass
class MatchedDistortion:
    """Output of :func:`blur_to_psnr` / :func:`pixelate_to_psnr`.

    Attributes:
        images: (N, C, H, W) distorted images in [0, 1], same dtype as the input.
        parameter: (N,) float64 sigma (blur) or block size (pixelation) used per image (all equal for
            ``per_image=False``).
        psnr: (N,) float64 PSNR of each distorted image against its original (dB).
        target_psnr: The requested PSNR (dB).
        per_image: Whether each image was matched on its own (else the set's mean PSNR was matched).
    """

    images: torch.Tensor
    parameter: torch.Tensor
    psnr: torch.Tensor
    target_psnr: float
    per_image: bool


def _per_image(values, count: int, name: str, dtype=torch.float64) -> torch.Tensor:
    values = torch.as_tensor(values, dtype=dtype).flatten()
    if values.numel() == 1:
        values = values.expand(count)
    if values.numel() != count:
        raise ValueError(f"{name}: expected a scalar or {count} values (one per image), observed {values.numel()}")
    return values


def _gaussian_kernels(sigmas: torch.Tensor) -> torch.Tensor:
    """(N, 2 R + 1) normalised 1-D kernels, image i's of radius ``int(4 sigma_i + 0.5)`` zero-padded to the largest."""
    radii = (GAUSSIAN_TRUNCATE * sigmas + 0.5).floor()
    radius = int(radii.max())
    offsets = torch.arange(-radius, radius + 1, dtype=torch.float64)
    safe = sigmas.clamp_min(1e-12)[:, None]
    kernels = torch.exp(-0.5 * (offsets[None, :] / safe) ** 2) * (offsets.abs()[None, :] <= radii[:, None])
    kernels[sigmas == 0] = (offsets == 0).double()  # the identity
    return kernels / kernels.sum(dim=1, keepdim=True)


def gaussian_blur(images: torch.Tensor, sigma) -> torch.Tensor:
    """Gaussian blur with edge replication (scipy ``gaussian_filter(mode="nearest", truncate=4.0)``).

    Args:
        images: (N, C, H, W) float in [0, 1]. Not modified.
        sigma: Standard deviation in pixels, >= 0: a scalar or one per image (N,).

    Returns:
        (N, C, H, W) blurred images, same dtype and device (values stay in [0, 1]).

    Example:
        >>> x = torch.zeros(1, 1, 9, 9); x[0, 0, 4, 4] = 1.0
        >>> y = gaussian_blur(x, 0.5)  # radius int(4 * 0.5 + 0.5) = 2: the impulse never reaches an edge
        >>> round(float(y.sum()), 6), bool(y[0, 0, 4, 4] == y.max())
        (1.0, True)
    """
    images = check_images(images, "images")
    count, channels, height, width = images.shape
    sigmas = _per_image(sigma, count, "sigma")
    if not bool(torch.isfinite(sigmas).all()) or bool((sigmas < 0).any()):
        raise ValueError(f"sigma: expected finite values >= 0, observed {sigmas.tolist()}")
    kernels = _gaussian_kernels(sigmas).to(device=images.device, dtype=images.dtype)
    radius = (kernels.shape[1] - 1) // 2
    if radius == 0:
        return images.clone()
    # One group per image: (1, N*C, H, W) convolved with N*C per-image kernels.
    weights = kernels.repeat_interleave(channels, dim=0)[:, None, :]
    x = images.reshape(1, count * channels, height, width)
    x = F.conv2d(F.pad(x, (radius, radius, 0, 0), mode="replicate"), weights[:, :, None, :], groups=count * channels)
    x = F.conv2d(F.pad(x, (0, 0, radius, radius), mode="replicate"), weights[:, :, :, None], groups=count * channels)
    return x.reshape(count, channels, height, width).clamp(0.0, 1.0)


def pixelate(images: torch.Tensor, block_size) -> torch.Tensor:
    """Replace every ``b x b`` block (top-left aligned; partial blocks at the edges) by its mean.

    Args:
        images: (N, C, H, W) float in [0, 1]. Not modified.
        block_size: Positive integer block side: a scalar or one per image (N,). 1 is the identity.

    Returns:
        (N, C, H, W) pixelated images, same dtype and device.

    Example:
        >>> pixelate(torch.tensor([[[[0.0, 1.0, 0.5]]]]), 2)
        tensor([[[[0.5000, 0.5000, 0.5000]]]])
    """
    images = check_images(images, "images")
    count, _, height, width = images.shape
    sizes = _per_image(block_size, count, "block_size", dtype=torch.float64)
    if bool((sizes != sizes.round()).any()) or bool((sizes < 1).any()):
        raise ValueError(f"block_size: expected positive integers, observed {sizes.tolist()}")
    output = torch.empty_like(images)
    for size in sizes.unique().tolist():
        chosen = (sizes == size).nonzero().flatten().to(images.device)
        b = int(size)
        x = images[chosen]
        rows, columns = math.ceil(height / b), math.ceil(width / b)
        padding = (0, columns * b - width, 0, rows * b - height)
        # Exact means of partial blocks: pool the zero-padded image and a mask of real pixels alike.
        sums = F.avg_pool2d(F.pad(x, padding), b, divisor_override=1)
        counts = F.avg_pool2d(F.pad(torch.ones_like(x[:1, :1]), padding), b, divisor_override=1)
        means = sums / counts
        output[chosen] = means.repeat_interleave(b, dim=2).repeat_interleave(b, dim=3)[:, :, :height, :width]
    return output


def gaussian_noise(images: torch.Tensor, sigma: float, seed: int) -> torch.Tensor:
    """Add zero-mean Gaussian noise of standard deviation ``sigma`` and clip to [0, 1].

    Args:
        images: (N, C, H, W) float in [0, 1]. Not modified.
        sigma: Noise standard deviation in [0, 1] intensity units (0.1 = a tenth of the full range), >= 0.
        seed: Non-negative seed of the draws (NumPy PCG64, the same on every device); image i takes the i-th block.

    Returns:
        (N, C, H, W) noisy images in [0, 1], same dtype and device.

    Example:
        >>> x = torch.full((1, 1, 2, 2), 0.5)
        >>> torch.equal(gaussian_noise(x, 0.0, seed=0), x), bool((gaussian_noise(x, 0.1, seed=0) != x).any())
        (True, True)
    """
    images = check_images(images, "images")
    if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not math.isfinite(sigma) or sigma < 0:
        raise ValueError(f"sigma: expected a finite number >= 0 (intensity units, 1 = full range), observed {sigma!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: expected a non-negative integer, observed {seed!r}")
    if sigma == 0:
        return images.clone()
    noise = np.random.Generator(np.random.PCG64(int(seed))).standard_normal(tuple(images.shape), dtype=np.float32)
    noise = torch.from_numpy(noise).to(device=images.device, dtype=images.dtype)
    return (images + float(sigma) * noise).clamp(0.0, 1.0)


def constant_images(images: torch.Tensor, value) -> torch.Tensor:
    """One constant image in place of every image (the zero-information release).

    Args:
        images: (N, C, H, W) float in [0, 1]; only its shape, dtype and device are used.
        value: The constant in [0, 1]: a scalar or one value per channel (C,).

    Returns:
        (N, C, H, W) tensor whose every pixel of channel c is ``value[c]``.

    Example:
        >>> constant_images(torch.zeros(2, 3, 1, 1), [0.1, 0.5, 1.0]).flatten().tolist()[:3]
        [0.10000000149011612, 0.5, 1.0]
    """
    images = check_images(images, "images")
    channels = images.shape[1]
    values = torch.as_tensor(value, dtype=torch.float64).flatten()
    if values.numel() == 1:
        values = values.expand(channels)
    if values.numel() != channels:
        raise ValueError(f"value: expected a scalar or {channels} values (one per channel), observed {values.numel()}")
    if not bool(torch.isfinite(values).all()) or bool((values < 0).any()) or bool((values > 1).any()):
        raise ValueError(f"value: expected values in [0, 1], observed {values.tolist()}")
    return values.to(device=images.device, dtype=images.dtype).view(1, channels, 1, 1).expand_as(images).clone()


def _check_target(target_psnr: float, tolerance: float) -> tuple[float, float]:
    if not isinstance(target_psnr, (int, float)) or not math.isfinite(target_psnr) or target_psnr <= 0:
        raise ValueError(f"target_psnr: expected a finite positive number of dB, observed {target_psnr!r}")
    if not isinstance(tolerance, (int, float)) or not tolerance > 0:
        raise ValueError(f"tolerance: expected a positive number of dB, observed {tolerance!r}")
    return float(target_psnr), float(tolerance)


def blur_to_psnr(images: torch.Tensor, target_psnr: float, *, per_image: bool = True, tolerance: float = 0.01,
                 max_sigma: float | None = None, max_iterations: int = 60) -> MatchedDistortion:
    """Gaussian blur whose PSNR against the original equals ``target_psnr`` (bisection on sigma).

    Args:
        images: (N, C, H, W) float in [0, 1]. Not modified.
        target_psnr: Target in dB (e.g. the PSNR of a generative method's outputs against the same images).
        per_image: Match each image's PSNR (True) or the mean PSNR of the set with one sigma (False).
        tolerance: Stop once ``|PSNR - target| <= tolerance`` dB (per image, or for the mean).
        max_sigma: Upper end of the search (default: the larger image side).
        max_iterations: Bisection steps at most (60 halvings pin sigma to about 1e-18 of ``max_sigma``).

    Returns:
        :class:`MatchedDistortion` with the sigma of each image.

    Raises:
        ValueError: If some image (or the set) cannot be blurred down to the target with ``sigma <= max_sigma``
            (e.g. a constant image, which blur does not change), naming the images and the lowest PSNR reached.
    """
    images = check_images(images, "images")
    target, tolerance = _check_target(target_psnr, tolerance)
    count = images.shape[0]
    high_sigma = float(max(images.shape[2:]) if max_sigma is None else max_sigma)

    def measure(sigmas: torch.Tensor) -> torch.Tensor:
        return psnr(gaussian_blur(images, sigmas), images, reduction="none").double().cpu()

    def summary(values: torch.Tensor) -> torch.Tensor:
        return values if per_image else values.mean().expand(count)

    size = count if per_image else 1
    low = torch.zeros(size, dtype=torch.float64)
    high = torch.full((size,), high_sigma, dtype=torch.float64)
    lowest = summary(measure(high.expand(count)))
    unreachable = (lowest > target + tolerance).nonzero().flatten().tolist()
    if unreachable:
        raise ValueError(f"target_psnr {target} dB is below the lowest PSNR reachable with sigma <= {high_sigma} for "
                         f"images {unreachable[:10]} (lowest {lowest[unreachable[:10]].tolist()} dB); raise max_sigma "
                         "or the target")
    sigma = (low + high) / 2
    values = summary(measure(sigma.expand(count)))
    for _ in range(max_iterations):
        done = (values - target).abs()[:size] <= tolerance
        if bool(done.all()):
            break
        too_sharp = values[:size] > target  # PSNR too high: blur more
        low = torch.where(~done & too_sharp, sigma, low)
        high = torch.where(~done & ~too_sharp, sigma, high)
        sigma = torch.where(done, sigma, (low + high) / 2)
        values = summary(measure(sigma.expand(count)))
    sigmas = sigma.expand(count).clone()
    blurred = gaussian_blur(images, sigmas)
    return MatchedDistortion(images=blurred, parameter=sigmas, psnr=psnr(blurred, images, reduction="none").double().cpu(),
                             target_psnr=target, per_image=per_image)


def pixelate_to_psnr(images: torch.Tensor, target_psnr: float, *, per_image: bool = True,
                     max_block_size: int | None = None) -> MatchedDistortion:
    """Pixelation whose PSNR against the original is closest to ``target_psnr`` (all block sizes tried).

    Args:
        images: (N, C, H, W) float in [0, 1]. Not modified.
        target_psnr: Target in dB.
        per_image: Match each image (True) or the set's mean PSNR with one block size (False).
        max_block_size: Largest block size tried (default: the larger image side).

    Returns:
        :class:`MatchedDistortion` with the block size of each image. Ties go to the smaller block.
    """
    images = check_images(images, "images")
    target, _ = _check_target(target_psnr, 1.0)
    largest = int(max(images.shape[2:]) if max_block_size is None else max_block_size)
    if largest < 1:
        raise ValueError(f"max_block_size: expected a positive integer, observed {max_block_size!r}")
    sizes = torch.arange(1, largest + 1, dtype=torch.float64)
    table = torch.stack([psnr(pixelate(images, int(b)), images, reduction="none").double().cpu()
                         for b in sizes.tolist()], dim=1)  # (N, sizes), +inf for block size 1
    if per_image:
        chosen = (table - target).abs().argmin(dim=1)  # argmin returns the first (smallest block) of ties
    else:
        chosen = (table.mean(dim=0) - target).abs().argmin().expand(images.shape[0])
    blocks = sizes[chosen]
    return MatchedDistortion(images=pixelate(images, blocks), parameter=blocks,
                             psnr=table.gather(1, chosen[:, None]).flatten(), target_psnr=target,
                             per_image=per_image)
