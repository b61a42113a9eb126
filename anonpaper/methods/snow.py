"""Snow and VS-Snow: pixel-replacement obfuscation of retinal images (paper 2, "De-identification and Obfuscation
of Gender Attributes From Retinal Scans"; Snow is John et al., ETRA 2020).

Snow (whole image, paper eq. 1). The paper's text: "for each RGB channel, the method randomly selects a proportion,
p, of image pixels. It assigns the corresponding channel average pixel intensity to the selected pixels", with
``I(x)`` a scalar intensity in [0, 255]. We therefore draw the replacement mask **independently per channel** by
default (``mask_mode="per_channel"``): a red value and the green value at the same location are replaced or kept
independently, each by its own dataset channel mean ``mu_c``. ``mask_mode="per_location"`` replaces all channels of a
selected pixel location together (John et al.'s grayscale Snow carried to colour, the other reading of the text).

VS-Snow (vessels only, paper eq. 2). A fraction p of the vessel-mask pixel *locations* is selected; every channel of
a selected location is replaced by that channel's mean over its neighbouring vessel pixels. The paper does not
define "neighbouring"; we define it as:

    the vessel pixels inside the ``window_size`` x ``window_size`` window centred on the pixel (default 5 x 5)
    that are NOT themselves selected for replacement (so the pixel itself never counts).

In masked-convolution form, with ``keep = vessel & ~selected`` and a box window ``w``:
``value_c(x) = sum(w * keep * I_c)(x) / sum(w * keep)(x)``. Excluding selected pixels makes every released
replacement a function of released, unchanged pixels only, so a replaced pixel's original value never leaks into
its own or its neighbours' replacements. Fallback when the window holds no kept vessel pixel: the mean of all kept
vessel pixels of the same image; if the image has none (e.g. p = 1), the mean of all its unselected pixels; if every
pixel of the image is a selected vessel pixel, the mean of the whole image. Pixels outside the vessel mask are never
touched. The window is computed only at selected pixels (a gather over the window offsets), which is the same
arithmetic as the masked convolution but costs in proportion to the number of replaced pixels.

Sampling. ``sampling="bernoulli"`` (default) selects each pixel (per channel, per location or per vessel location)
independently with probability p, so the number replaced is Binomial(n, p); p is quantised to a multiple of 2^-16
(``effective_fraction``). ``sampling="exact"`` selects a uniformly random subset of exactly round(p * n) elements
per image (and channel), the paper's "subset S of size p * I_rows * I_cols"; it is slower (a top-k over random keys).
The two differ by O(1/sqrt(n)) in the fraction replaced (0.2 % of a 256 x 256 image).

Differential privacy (paper section 1.1, John et al.). Take two inputs that differ in one value x. With
probability p, x is replaced, and then the whole output is independent of x: Snow writes a constant, and VS-Snow
writes a mean of kept neighbours and never uses a selected pixel in any mean (the reason for excluding them). With
probability 1 - p, x survives. Hence ``Pr[M(x) in S] <= Pr[M(x') in S] + delta`` with ``epsilon = 0`` and
``delta = 1 - p``. The parameter is ``replace_fraction`` = p (larger = more private) and ``delta`` = 1 - p is the
probability a value *survives* (smaller = more private); both classes below expose ``delta`` as a derived property.
The statement is per value: one channel value in ``per_channel`` mode, one pixel location in ``per_location`` mode
and in VS-Snow. For a whole RGB location under ``per_channel`` Snow, all C channels are replaced only with
probability p^C, so ``location_delta = 1 - p**C``. VS-Snow's statement covers vessel pixels only (outside the mask,
delta = 1), treats the vessel mask as public (it is computed from the image), and fails in one degenerate case: an
image whose every pixel is a selected vessel pixel falls back to its own mean. Pixel-level DP says nothing about
image-level attributes (an attacker can still infer sex from the survivors), which is why the paper measures
privacy with an attacker.

Randomness. Functions take an explicit ``seed`` (int) or ``generator`` (``torch.Generator`` or
``numpy.random.Generator``). The bulk random bits come from NumPy's PCG64 (seeded from the generator when one is
given), because on CPU it produces raw bits about three times faster than torch's mt19937; bits are generated on the
CPU, so one seed gives the same output on every device. Within a batch, image i draws the i-th block of bits.

Shapes and dtypes. ``images`` is a (B, C, H, W) tensor, uint8 in [0, 255] or floating point (any range, finite);
outputs have the input's shape, dtype and device. uint8 outputs round replacement values to the nearest integer.
Vessel masks are (B, H, W) or (B, 1, H, W), bool or integer/float holding only 0 and 1. Inputs are never modified.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Literal

import numpy as np
import torch

MaskMode = Literal["per_channel", "per_location"]
Sampling = Literal["bernoulli", "exact"]

MASK_MODES = ("per_channel", "per_location")
SAMPLINGS = ("bernoulli", "exact")
# Bernoulli selection compares 16-bit uniform keys with a threshold, so p is used as a multiple of 2^-16.
_KEY_LEVELS = 1 << 16
_INT64_MAX = torch.iinfo(torch.int64).max
# VS-Snow's packed window sums: 16-bit fields per channel, the kept-pixel count in bits 48-63.
_FIELD = 1 << 16
_COUNT_SHIFT = 48


# ---------------------------------------------------------------------------------------------------------------
# validation and randomness
# ---------------------------------------------------------------------------------------------------------------
def _check_fraction(replace_fraction: float) -> float:
    if isinstance(replace_fraction, bool) or not isinstance(replace_fraction, (int, float, np.floating, np.integer)):
        raise ValueError(f"replace_fraction must be a number in [0, 1], got {replace_fraction!r}")
    value = float(replace_fraction)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"replace_fraction must lie in [0, 1] (the fraction of pixels replaced), got {value}")
    return value


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def _check_images(images: torch.Tensor) -> None:
    if not isinstance(images, torch.Tensor):
        raise ValueError(f"images must be a torch.Tensor of shape (B, C, H, W), got {type(images).__name__}")
    if images.ndim != 4:
        raise ValueError(f"images must have shape (B, C, H, W), got shape {tuple(images.shape)}")
    if images.dtype != torch.uint8 and not images.dtype.is_floating_point:
        raise ValueError(f"images must be uint8 (0-255) or floating point, got dtype {images.dtype}")
    if images.dtype.is_floating_point and images.numel() and not bool(torch.isfinite(images).all()):
        raise ValueError("images contain NaN or infinite values")


def _check_vessel_masks(vessel_masks: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
    """Return the masks as a bool (B, H, W) tensor on the images' device, or raise ValueError."""
    if not isinstance(vessel_masks, torch.Tensor):
        raise ValueError(f"vessel_masks must be a torch.Tensor, got {type(vessel_masks).__name__}")
    batch, _, height, width = images.shape
    masks = vessel_masks
    if masks.ndim == 4 and masks.shape[1] == 1:
        masks = masks[:, 0]
    if tuple(masks.shape) != (batch, height, width):
        raise ValueError(f"vessel_masks must have shape (B, H, W) or (B, 1, H, W) = ({batch}, {height}, {width}) "
                         f"to match images {tuple(images.shape)}, got {tuple(vessel_masks.shape)}")
    if masks.dtype != torch.bool:
        if masks.is_complex() or not bool(((masks == 0) | (masks == 1)).all()):
            raise ValueError(f"vessel_masks must be bool or hold only 0 and 1, got dtype {masks.dtype} with other "
                             "values")
        masks = masks != 0
    return masks.to(images.device)


def _numpy_generator(seed: int | None, generator) -> np.random.Generator:
    """One NumPy PCG64 stream from exactly one of ``seed`` / ``generator`` (explicit randomness only)."""
    if (seed is None) == (generator is None):
        raise ValueError("pass exactly one of seed (int) or generator (torch.Generator or numpy.random.Generator)")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        return np.random.Generator(np.random.PCG64(int(seed)))
    if isinstance(generator, np.random.Generator):
        return generator
    if isinstance(generator, torch.Generator):
        # Draw a 63-bit seed from the torch generator so that the caller's stream advances deterministically.
        child = int(torch.randint(0, _INT64_MAX, (1,), generator=generator, dtype=torch.int64))
        return np.random.Generator(np.random.PCG64(child))
    raise ValueError(f"generator must be a torch.Generator or numpy.random.Generator, got {type(generator).__name__}")


def _uniform_keys16(rng: np.random.Generator, count: int) -> torch.Tensor:
    """``count`` independent uniform 16-bit keys as int16 (values -32768..32767), four per 64-bit draw."""
    raw = rng.bit_generator.random_raw((count + 3) // 4)
    return torch.from_numpy(raw.view(np.int16)[:count])


def _uniform_keys64(rng: np.random.Generator, count: int) -> torch.Tensor:
    """``count`` independent uniform keys in [-2^61, 2^61) as int64 (headroom keeps INT64_MAX free as a sentinel)."""
    raw = rng.bit_generator.random_raw(count).view(np.int64) >> 2
    return torch.from_numpy(raw)


def _bernoulli_threshold(replace_fraction: float) -> int:
    return int(round(replace_fraction * _KEY_LEVELS))


def _bernoulli_mask(rng: np.random.Generator, shape: tuple[int, ...], replace_fraction: float) -> torch.Tensor:
    """Bool mask of ``shape``: each element True independently with probability round(p * 2^16) / 2^16."""
    threshold = _bernoulli_threshold(replace_fraction)
    count = math.prod(shape)
    if threshold <= 0:
        return torch.zeros(shape, dtype=torch.bool)
    if threshold >= _KEY_LEVELS:
        return torch.ones(shape, dtype=torch.bool)
    # int16 key + 2^15 is uniform on 0..65535, so key < threshold - 2^15 has probability threshold / 2^16. The
    # comparison runs in NumPy, which vectorises int16 comparisons several times faster than torch on CPU.
    keys = _uniform_keys16(rng, count).numpy()
    return torch.from_numpy(keys < np.int16(threshold - (1 << 15))).view(shape)


def _exact_mask(rng: np.random.Generator, rows: int, length: int, replace_fraction: float) -> torch.Tensor:
    """Bool (rows, length) mask with exactly round(p * length) True per row, a uniformly random subset."""
    chosen = int(round(replace_fraction * length))
    mask = torch.zeros(rows, length, dtype=torch.bool)
    if chosen == 0:
        return mask
    if chosen == length:
        return mask.fill_(True)
    keys = _uniform_keys64(rng, rows * length).view(rows, length)
    indices = torch.topk(keys, chosen, dim=1, largest=False, sorted=False).indices
    return mask.scatter_(1, indices, True)


def effective_fraction(replace_fraction: float, sampling: Sampling = "bernoulli", count: int | None = None) -> float:
    """The replacement probability actually used.

    Args:
        replace_fraction: Requested p in [0, 1].
        sampling: ``"bernoulli"``: p rounded to a multiple of 2^-16. ``"exact"``: round(p * count) / count.
        count: Number of candidate elements (needed for ``"exact"``).

    Returns:
        The per-element probability of replacement (float in [0, 1]).
    """
    p = _check_fraction(replace_fraction)
    _check_choice("sampling", sampling, SAMPLINGS)
    if sampling == "bernoulli":
        return _bernoulli_threshold(p) / _KEY_LEVELS
    if count is None or count <= 0:
        raise ValueError(f"sampling='exact' needs a positive count of candidate elements, got {count!r}")
    return round(p * count) / count


# ---------------------------------------------------------------------------------------------------------------
# dataset statistics
# ---------------------------------------------------------------------------------------------------------------
def channel_mean(images: torch.Tensor | np.ndarray | Iterable[torch.Tensor | np.ndarray],
                 channels_last: bool = False) -> torch.Tensor:
    """Per-channel mean over every pixel of every image (Snow's constants ``mu_c``; pixel-weighted).

    Args:
        images: One batch (N, C, H, W), or an iterable of batches (N, C, H, W) or single images (C, H, W); tensors or
            arrays of any real dtype; images may differ in size. With ``channels_last`` the layouts are
            (N, H, W, C) / (H, W, C) (the Cohort's NumPy layout).
        channels_last: Whether the channel axis is last.

    Returns:
        float64 tensor of shape (C,), in the images' units (0-255 for uint8).

    Raises:
        ValueError: No pixels, or images with different channel counts.
    """
    batches = [images] if isinstance(images, (torch.Tensor, np.ndarray)) else images
    total: torch.Tensor | None = None
    pixels = 0
    for batch in batches:
        tensor = torch.as_tensor(np.asarray(batch)) if not isinstance(batch, torch.Tensor) else batch
        if tensor.ndim not in (3, 4):
            raise ValueError(f"each image batch must have 3 or 4 dimensions, got shape {tuple(tensor.shape)}")
        if tensor.ndim == 3:
            tensor = tensor.unsqueeze(0)
        if channels_last:
            tensor = tensor.movedim(-1, 1)
        sums = tensor.to(torch.float64).sum(dim=(0, 2, 3)).cpu()
        if total is not None and sums.shape != total.shape:
            raise ValueError(f"images have different channel counts: {total.numel()} and {sums.numel()}")
        total = sums if total is None else total + sums
        pixels += tensor.shape[0] * tensor.shape[2] * tensor.shape[3]
    if total is None or pixels == 0:
        raise ValueError("channel_mean needs at least one non-empty image")
    return total / pixels


# ---------------------------------------------------------------------------------------------------------------
# Snow
# ---------------------------------------------------------------------------------------------------------------
def snow_mask(shape: tuple[int, int, int, int], replace_fraction: float, *, mask_mode: MaskMode = "per_channel",
              sampling: Sampling = "bernoulli", seed: int | None = None, generator=None) -> torch.Tensor:
    """The Snow replacement mask for a batch of ``shape`` = (B, C, H, W).

    Returns:
        bool CPU tensor, True where a value is replaced: (B, C, H, W) for ``per_channel``, (B, 1, H, W) for
        ``per_location``.
    """
    p = _check_fraction(replace_fraction)
    _check_choice("mask_mode", mask_mode, MASK_MODES)
    _check_choice("sampling", sampling, SAMPLINGS)
    if len(shape) != 4:
        raise ValueError(f"shape must be (B, C, H, W), got {shape}")
    batch, channels, height, width = (int(size) for size in shape)
    rng = _numpy_generator(seed, generator)
    planes = channels if mask_mode == "per_channel" else 1
    if sampling == "bernoulli":
        return _bernoulli_mask(rng, (batch, planes, height, width), p)
    return _exact_mask(rng, batch * planes, height * width, p).view(batch, planes, height, width)


def _mean_constants(channel_mean_values, images: torch.Tensor) -> torch.Tensor:
    """The (1, C, 1, 1) replacement constants in the images' dtype (rounded for uint8), validated."""
    channels = images.shape[1]
    means = torch.as_tensor(np.asarray(channel_mean_values.cpu() if isinstance(channel_mean_values, torch.Tensor)
                                       else channel_mean_values, dtype=np.float64))
    if means.ndim == 0:
        means = means.expand(channels)
    if means.shape != (channels,):
        raise ValueError(f"channel_mean must hold one value per channel ({channels}), got shape {tuple(means.shape)}")
    if not bool(torch.isfinite(means).all()):
        raise ValueError(f"channel_mean must be finite, got {means.tolist()}")
    if images.dtype == torch.uint8:
        if bool((means < 0).any()) or bool((means > 255).any()):
            raise ValueError(f"channel_mean must lie in [0, 255] for uint8 images, got {means.tolist()}")
        means = torch.round(means)
    return means.to(device=images.device, dtype=images.dtype).view(1, channels, 1, 1)


def snow(images: torch.Tensor, replace_fraction: float, channel_mean: torch.Tensor | np.ndarray | list[float],
         *, mask_mode: MaskMode = "per_channel", sampling: Sampling = "bernoulli", seed: int | None = None,
         generator=None, return_mask: bool = False):
    """Snow (paper 2, eq. 1): replace a random fraction ``replace_fraction`` of values by the dataset channel mean.

    Args:
        images: (B, C, H, W) tensor, uint8 in [0, 255] or floating point (finite). Not modified.
        replace_fraction: p in [0, 1], the probability that a value (per channel) or location is replaced; larger
            is more private. Gives (epsilon = 0, delta = 1 - p)-DP per value (see module docstring).
        channel_mean: The dataset's per-channel mean ``mu_c`` (C values, or one scalar for all), in the images'
            units (see :func:`channel_mean`); rounded to the nearest integer for uint8 images.
        mask_mode: ``"per_channel"`` (the paper: each channel draws its own mask) or ``"per_location"`` (all channels
            of a selected location are replaced together).
        sampling: ``"bernoulli"`` (independent per element, default) or ``"exact"`` (exactly round(p * H * W) per
            image and mask plane).
        seed: Non-negative int seed; or give ``generator`` (torch or NumPy) instead. Exactly one is required.
        generator: See ``seed``.
        return_mask: Also return the replacement mask.

    Returns:
        The obfuscated images (same shape, dtype, device); with ``return_mask`` a tuple (images, mask) where mask is
        a bool tensor on the images' device, (B, C, H, W) or (B, 1, H, W) (``per_location``), True where replaced.

    Raises:
        ValueError: Bad shapes, dtypes, ranges, options or seeds (the message names expected vs observed).
    """
    _check_images(images)
    p = _check_fraction(replace_fraction)
    constants = _mean_constants(channel_mean, images)
    mask = snow_mask(tuple(images.shape), p, mask_mode=mask_mode, sampling=sampling, seed=seed,
                     generator=generator).to(images.device)
    if images.dtype == torch.uint8:
        # out = x + m * (mu - x) in wrapping uint8 arithmetic: exactly mu where m = 1 and x where m = 0, and several
        # times faster on CPU than torch.where with a broadcast constant.
        output = constants - images
        output.mul_(mask.view(torch.uint8))
        output.add_(images)
    else:
        output = torch.where(mask, constants, images)
    return (output, mask) if return_mask else output


# ---------------------------------------------------------------------------------------------------------------
# VS-Snow
# ---------------------------------------------------------------------------------------------------------------
def vs_snow_mask(vessel_masks: torch.Tensor, replace_fraction: float, *, sampling: Sampling = "bernoulli",
                 seed: int | None = None, generator=None) -> torch.Tensor:
    """The VS-Snow selection: a fraction p of each image's vessel pixels.

    Args:
        vessel_masks: bool (B, H, W) (or (B, 1, H, W), or 0/1 values) vessel masks.
        replace_fraction: p in [0, 1].
        sampling: ``"bernoulli"``: each vessel pixel independently with probability p. ``"exact"``: exactly
            round(p * number of vessel pixels) per image.
        seed: Non-negative int seed; or ``generator``. Exactly one is required.
        generator: See ``seed``.

    Returns:
        bool (B, H, W) tensor on the masks' device, True at selected vessel pixels (always a subset of the mask).
    """
    p = _check_fraction(replace_fraction)
    _check_choice("sampling", sampling, SAMPLINGS)
    if not isinstance(vessel_masks, torch.Tensor) or vessel_masks.ndim not in (3, 4):
        raise ValueError("vessel_masks must be a (B, H, W) or (B, 1, H, W) tensor, got "
                         f"{getattr(vessel_masks, 'shape', type(vessel_masks).__name__)}")
    reference = torch.empty((vessel_masks.shape[0], 1) + tuple(vessel_masks.shape[-2:]), device=vessel_masks.device)
    vessels = _check_vessel_masks(vessel_masks, reference).cpu()
    batch, height, width = vessels.shape
    rng = _numpy_generator(seed, generator)
    if sampling == "bernoulli":
        selected = vessels & _bernoulli_mask(rng, (batch, height, width), p)
        return selected.to(vessel_masks.device)
    flat = vessels.view(batch, height * width)
    counts = flat.sum(dim=1)
    chosen = torch.round(counts.to(torch.float64) * p).to(torch.int64)
    largest = int(chosen.max()) if batch else 0
    if largest == 0:
        return torch.zeros_like(vessels).to(vessel_masks.device)
    # Random keys at vessel pixels, INT64_MAX elsewhere; the chosen[i] smallest keys of row i are its subset.
    keys = _uniform_keys64(rng, batch * height * width).view(batch, height * width)
    keys = torch.where(flat, keys, torch.full_like(keys, _INT64_MAX))
    smallest = torch.topk(keys, largest, dim=1, largest=False, sorted=True).values
    thresholds = smallest.gather(1, (chosen - 1).clamp(min=0).unsqueeze(1))
    selected = flat & (keys <= thresholds) & (chosen > 0).unsqueeze(1)
    return selected.view(batch, height, width).to(vessel_masks.device)


def vs_snow(images: torch.Tensor, vessel_masks: torch.Tensor, replace_fraction: float, *, window_size: int = 5,
            sampling: Sampling = "bernoulli", seed: int | None = None, generator=None, return_mask: bool = False):
    """VS-Snow (paper 2, eq. 2): replace a fraction p of vessel pixels by the mean of their kept vessel neighbours.

    Neighbourhood: the vessel pixels in the ``window_size`` x ``window_size`` window centred on the pixel that are
    not themselves selected; fallbacks (no such neighbour) are in the module docstring. All channels of a selected
    location are replaced, each by its own channel's neighbour mean.

    Args:
        images: (B, C, H, W) tensor, uint8 in [0, 255] or floating point (finite). Not modified.
        vessel_masks: (B, H, W) or (B, 1, H, W) vessel masks, bool or 0/1 values, same H and W as ``images``.
        replace_fraction: p in [0, 1], the probability a vessel pixel is replaced (larger is more private);
            (epsilon = 0, delta = 1 - p)-DP per vessel pixel, none outside the vessels.
        window_size: Odd neighbourhood width in pixels (>= 3).
        sampling: ``"bernoulli"`` (default) or ``"exact"``; see :func:`vs_snow_mask`.
        seed: Non-negative int seed; or ``generator``. Exactly one is required.
        generator: See ``seed``.
        return_mask: Also return the bool (B, 1, H, W) selection mask.

    Returns:
        The obfuscated images (same shape, dtype, device), and with ``return_mask`` the selection mask.

    Raises:
        ValueError: Bad shapes, dtypes, mask values, window size, fraction or seeds.
    """
    _check_images(images)
    vessels = _check_vessel_masks(vessel_masks, images)
    if isinstance(window_size, bool) or not isinstance(window_size, (int, np.integer)) or window_size < 3 \
            or window_size % 2 == 0:
        raise ValueError(f"window_size must be an odd integer >= 3, got {window_size!r}")
    selected = vs_snow_mask(vessels, replace_fraction, sampling=sampling, seed=seed, generator=generator)
    # A contiguous copy, whatever the input's layout (e.g. channels-last), so the flat pixel view below is valid.
    output = images.clone(memory_format=torch.contiguous_format)
    batch, channels, height, width = images.shape
    if bool(selected.any()):
        values, positions = _neighbour_means(images, vessels, selected, int(window_size))
        if images.dtype == torch.uint8:
            values = torch.round(values).clamp_(0, 255)
        image_index, pixel_index = positions
        output.view(batch, channels, height * width)[image_index, :, pixel_index] = values.to(images.dtype)
    return (output, selected.unsqueeze(1)) if return_mask else output


def _zeros(count: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A zero-filled 1-D tensor; on CPU from NumPy's calloc-backed zeros, which skips an explicit memset."""
    if device.type == "cpu":
        return torch.from_numpy(np.zeros(count, dtype=torch.empty(0, dtype=dtype).numpy().dtype))
    return torch.zeros(count, dtype=dtype, device=device)


def _window_sum(table: torch.Tensor, centres: torch.Tensor, offsets: list[int]) -> torch.Tensor:
    """Sum of ``table`` rows at ``centres + offset`` over all offsets: (S,) or (S, K) like a row of ``table``."""
    total = table.index_select(0, centres + offsets[0])
    for offset in offsets[1:]:
        total += table.index_select(0, centres + offset)
    return total


def _flat_nonzero(mask: torch.Tensor) -> torch.Tensor:
    """int64 flat indices of the True elements of ``mask`` (ascending); NumPy on CPU, where it is faster."""
    if mask.device.type == "cpu":
        return torch.from_numpy(np.flatnonzero(mask.contiguous().numpy()))
    return mask.reshape(-1).nonzero().flatten()


def _neighbour_means(images: torch.Tensor, vessels: torch.Tensor, selected: torch.Tensor, window_size: int):
    """Per-channel means of the kept vessel pixels around each selected pixel, with the documented fallbacks.

    Both paths below compute the masked box convolution ``sum(w * keep * I) / sum(w * keep)`` only at the selected
    pixels, by gathering each window offset from a zero-padded (B, H + 2r, W + 2r) table of kept vessel pixels
    (the padding keeps windows inside their own image, so no offset wraps to another row or image).

    Returns:
        (values, (image_index, pixel_index)): values float (S, C) for the S selected pixels, and their image index
        and flat pixel index (y * W + x), both int64 (S,).
    """
    batch, channels, height, width = images.shape
    device = images.device
    radius = window_size // 2
    padded_height, padded_width = height + 2 * radius, width + 2 * radius
    plane = height * width
    keep = vessels & ~selected

    def locate(mask: torch.Tensor):
        """Image index, pixel index and zero-padded-grid index of the True pixels of a (B, H, W) mask."""
        flat = _flat_nonzero(mask)
        image_index, pixel_index = flat // plane, flat % plane
        row = pixel_index // width
        padded = flat + image_index * (padded_height * padded_width - plane) + 2 * radius * row \
            + radius * padded_width + radius
        return image_index, pixel_index, padded

    keep_image, keep_pixel, keep_padded = locate(keep)
    sel_image, sel_pixel, sel_padded = locate(selected)
    offsets = [dy * padded_width + dx for dy in range(-radius, radius + 1) for dx in range(-radius, radius + 1)]
    table_rows = batch * padded_height * padded_width
    # Kept vessel values, (K, C): element (b, c, pixel) of the contiguous batch sits at (b * C + c) * H * W + pixel.
    flat_images = images.reshape(-1)
    keep_base = keep_image * (channels * plane) + keep_pixel
    kept_values = torch.stack([flat_images[keep_base + channel * plane] for channel in range(channels)], dim=1)

    if images.dtype == torch.uint8 and channels <= 3 and window_size ** 2 * 255 < _FIELD:
        # Fast path: pack each kept pixel's channels (16 bits each) and a count of 1 (bits 48-63) into one int64.
        # A window sum of packed words is the packed window sums (no field can carry: window^2 * 255 < 2^16), so one
        # 1-D gather per offset reads numerator and denominator together.
        packed = torch.full((keep_padded.numel(),), 1 << _COUNT_SHIFT, dtype=torch.int64, device=device)
        for channel in range(channels):
            packed |= kept_values[:, channel].to(torch.int64) << (16 * channel)
        table = _zeros(table_rows, torch.int64, device)
        table[keep_padded] = packed
        sums = _window_sum(table, sel_padded, offsets)
        counts = (sums >> _COUNT_SHIFT).to(torch.float32)
        channel_sums = torch.stack([(sums >> (16 * channel)) & (_FIELD - 1) for channel in range(channels)], dim=1)
        values = channel_sums.to(torch.float32) / counts.clamp(min=1).unsqueeze(1)
    else:
        # General path (floating point images, more channels or wider windows): a channels-last table with the
        # kept values in columns 0..C-1 and the kept count in column C.
        accumulate = torch.float64 if images.dtype == torch.float64 else torch.float32
        table = torch.zeros(table_rows, channels + 1, dtype=accumulate, device=device)
        table[keep_padded, :channels] = kept_values.to(accumulate)
        table[keep_padded, channels] = 1
        sums = _window_sum(table, sel_padded, offsets)
        counts = sums[:, channels]
        values = sums[:, :channels] / counts.clamp(min=1).unsqueeze(1)

    empty = counts == 0
    if bool(empty.any()):
        values[empty] = _image_fallback_means(images, keep, selected, keep_image, kept_values)[sel_image[empty]] \
            .to(values.dtype)
    return values, (sel_image, sel_pixel)


def _image_fallback_means(images: torch.Tensor, keep: torch.Tensor, selected: torch.Tensor, keep_image: torch.Tensor,
                          kept_values: torch.Tensor) -> torch.Tensor:
    """(B, C) float64 per-image means: of kept vessel pixels; else of unselected pixels; else of the whole image."""
    batch, channels = images.shape[:2]
    sums = torch.zeros(batch, channels, dtype=torch.float64, device=images.device)
    sums.index_add_(0, keep_image, kept_values.to(torch.float64))
    counts = torch.bincount(keep_image, minlength=batch)
    means = sums / counts.clamp(min=1).unsqueeze(1)
    # Images without any kept vessel pixel (rare: p near 1 or tiny masks) take the slower per-image route.
    for index in torch.nonzero(counts == 0).flatten().tolist():
        pixels = images[index].to(torch.float64)
        unselected = ~selected[index]
        if bool(unselected.any()):
            means[index] = (pixels * unselected).sum(dim=(1, 2)) / unselected.sum()
        else:
            means[index] = pixels.mean(dim=(1, 2))
    return means


# ---------------------------------------------------------------------------------------------------------------
# configured methods with their privacy statement
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Snow:
    """Snow with fixed settings and its (epsilon, delta) pixel-level DP statement.

    Attributes:
        replace_fraction: p, probability a value is replaced (larger = more private).
        channel_mean: Dataset per-channel means (C values, images' units).
        mask_mode: ``"per_channel"`` (paper) or ``"per_location"``.
        sampling: ``"bernoulli"`` or ``"exact"``.
    """

    replace_fraction: float
    channel_mean: tuple[float, ...]
    mask_mode: MaskMode = "per_channel"
    sampling: Sampling = "bernoulli"

    def __post_init__(self):
        _check_fraction(self.replace_fraction)
        _check_choice("mask_mode", self.mask_mode, MASK_MODES)
        _check_choice("sampling", self.sampling, SAMPLINGS)
        values = self.channel_mean
        values = values.tolist() if isinstance(values, (torch.Tensor, np.ndarray)) else values
        object.__setattr__(self, "channel_mean", tuple(float(value) for value in np.atleast_1d(values)))

    @property
    def epsilon(self) -> float:
        """Always 0: a replaced value carries no information about the input."""
        return 0.0

    @property
    def delta(self) -> float:
        """1 - p: probability a value survives, the DP delta per released value (smaller = more private)."""
        return 1.0 - self.replace_fraction

    @property
    def location_delta(self) -> float:
        """delta for a whole pixel location: 1 - p^C in ``per_channel`` mode (any channel survives), else 1 - p."""
        if self.mask_mode == "per_location":
            return self.delta
        return 1.0 - self.replace_fraction ** len(self.channel_mean)

    def __call__(self, images: torch.Tensor, *, seed: int | None = None, generator=None, return_mask: bool = False):
        """Apply :func:`snow` with these settings; see it for shapes and dtypes."""
        return snow(images, self.replace_fraction, self.channel_mean, mask_mode=self.mask_mode,
                    sampling=self.sampling, seed=seed, generator=generator, return_mask=return_mask)


@dataclass(frozen=True)
class VSSnow:
    """VS-Snow with fixed settings and its pixel-level DP statement (vessel pixels only).

    Attributes:
        replace_fraction: p, probability a vessel pixel is replaced (larger = more private).
        window_size: Odd neighbourhood width (pixels).
        sampling: ``"bernoulli"`` or ``"exact"``.
    """

    replace_fraction: float
    window_size: int = 5
    sampling: Sampling = "bernoulli"

    def __post_init__(self):
        _check_fraction(self.replace_fraction)
        _check_choice("sampling", self.sampling, SAMPLINGS)
        if isinstance(self.window_size, bool) or not isinstance(self.window_size, (int, np.integer)) \
                or self.window_size < 3 or self.window_size % 2 == 0:
            raise ValueError(f"window_size must be an odd integer >= 3, got {self.window_size!r}")

    @property
    def epsilon(self) -> float:
        """Always 0."""
        return 0.0

    @property
    def delta(self) -> float:
        """1 - p for a vessel pixel (probability it survives); pixels outside the vessel mask have delta = 1."""
        return 1.0 - self.replace_fraction

    def __call__(self, images: torch.Tensor, vessel_masks: torch.Tensor, *, seed: int | None = None, generator=None,
                 return_mask: bool = False):
        """Apply :func:`vs_snow` with these settings; see it for shapes and dtypes."""
        return vs_snow(images, vessel_masks, self.replace_fraction, window_size=self.window_size,
                       sampling=self.sampling, seed=seed, generator=generator, return_mask=return_mask)
