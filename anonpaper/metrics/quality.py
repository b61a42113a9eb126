"""Paired image-quality metrics: MSE, PSNR, SSIM, IW-SSIM, LPIPS (local weights only) and feature-tap LPIPS.

All functions take two batches in the metric convention: ``torch`` floating tensors ``(N, C, H, W)`` in ``[0, 1]``
(numpy ``uint8`` batches go through :func:`anonpaper.metrics.images_from_uint8`). They compare image ``i`` of the
first batch with image ``i`` of the second and return either one value per image (``reduction="none"``, shape
``(N,)``) or their mean (``reduction="mean"``, a 0-d tensor). Every metric here is symmetric in its two arguments
except where a docstring says otherwise.

Direction: MSE, LPIPS and the feature-tap distance are distances (lower = more similar, 0 for identical inputs);
PSNR, SSIM and IW-SSIM are similarities (higher = more similar; PSNR is +inf, SSIM and IW-SSIM 1 for identical
inputs).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from ._validation import check_image_pair, check_positive_int, check_reduction, resolve_local_weights

__all__ = [
    "mse",
    "psnr",
    "ssim",
    "iw_ssim",
    "feature_tap_distance",
    "domain_lpips",
    "load_lpips",
    "lpips_distance",
    "PairedImageMetric",
]

# SSIM constants of Wang et al. (2004), also scikit-image's defaults for gaussian_weights=True.
SSIM_K1 = 0.01
SSIM_K2 = 0.03
SSIM_SIGMA = 1.5
SSIM_WINDOW = 11  # scikit-image: truncate 3.5 -> radius int(3.5 * 1.5 + 0.5) = 5 -> 11 taps
IW_SSIM_SCALE_WEIGHTS = (0.0448, 0.2856, 0.3001, 0.2363, 0.1333)


def _reduce(values: torch.Tensor, reduction: str) -> torch.Tensor:
    return values.mean() if check_reduction(reduction) == "mean" else values


def mse(first: torch.Tensor, second: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Mean squared error per image, averaged over channels and pixels.

    Args:
        first: ``(N, C, H, W)`` float in ``[0, 1]``.
        second: Same shape as ``first``.
        reduction: ``"mean"`` (0-d tensor) or ``"none"`` (``(N,)``).

    Returns:
        Values in ``[0, 1]``; lower is more similar; 0 for identical images. Symmetric.

    Example:
        >>> a = torch.zeros(1, 1, 4, 4); b = torch.full((1, 1, 4, 4), 0.5)
        >>> float(mse(a, b))
        0.25
    """
    first, second = check_image_pair(first, second)
    return _reduce((first - second).pow(2).flatten(1).mean(dim=1), reduction)


def psnr(first: torch.Tensor, second: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Peak signal-to-noise ratio per image, ``10 log10(1 / MSE)`` with data range 1.

    The mean over images is the mean of per-image PSNR values (not the PSNR of the pooled MSE), as in GMIA's
    evaluation; an identical pair contributes +inf.

    Args:
        first: ``(N, C, H, W)`` float in ``[0, 1]``.
        second: Same shape as ``first``.
        reduction: ``"mean"`` or ``"none"``.

    Returns:
        Decibels; higher is more similar; +inf for identical images. Symmetric.

    Example:
        >>> a = torch.zeros(1, 1, 4, 4); b = torch.full((1, 1, 4, 4), 0.1)
        >>> round(float(psnr(a, b)), 6)
        20.0
    """
    first, second = check_image_pair(first, second)
    error = (first.double() - second.double()).pow(2).flatten(1).mean(dim=1)
    with torch.no_grad():
        values = 10.0 * torch.log10(1.0 / error)  # error 0 -> +inf, by definition of PSNR
    return _reduce(values.to(first.dtype), reduction)


def _gaussian_window(size: int, sigma: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    coordinates = torch.arange(size, dtype=torch.float64) - (size - 1) / 2.0
    kernel = torch.exp(-(coordinates**2) / (2.0 * sigma**2))
    return (kernel / kernel.sum()).to(dtype=dtype, device=device)


def _separable_filter(images: torch.Tensor, kernel_1d: torch.Tensor) -> torch.Tensor:
    """Valid (unpadded) separable filtering of every channel independently."""
    channels = images.shape[1]
    horizontal = kernel_1d.view(1, 1, 1, -1).repeat(channels, 1, 1, 1)
    vertical = kernel_1d.view(1, 1, -1, 1).repeat(channels, 1, 1, 1)
    return F.conv2d(F.conv2d(images, horizontal, groups=channels), vertical, groups=channels)


def ssim(first: torch.Tensor, second: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Structural similarity (Wang et al. 2004) with an 11x11 Gaussian window (sigma 1.5), data range 1.

    Matches ``skimage.metrics.structural_similarity(a, b, data_range=1, gaussian_weights=True, sigma=1.5,
    use_sample_covariance=False, channel_axis=...)``: local statistics over the valid window positions (scikit-image
    filters the whole image and crops the 5-pixel border, the same positions), the SSIM map averaged over pixels and
    channels. Computed in the input's dtype: float64 inputs agree with scikit-image to about 1e-15, float32 inputs
    to about 1e-6 (variance = E[x^2] - E[x]^2 loses digits in float32) and run 3-10x faster on CPU.

    Args:
        first: ``(N, C, H, W)`` float in ``[0, 1]``, ``H, W >= 11``.
        second: Same shape as ``first``.
        reduction: ``"mean"`` or ``"none"``.

    Returns:
        Values in ``[-1, 1]``; higher is more similar; 1 for identical images. Symmetric.
    """
    first, second = check_image_pair(first, second, min_size=SSIM_WINDOW)
    x, y = first, second
    channels = x.shape[1]
    window = _gaussian_window(SSIM_WINDOW, SSIM_SIGMA, x.dtype, x.device)
    # One grouped convolution for all five local moments.
    moments = _separable_filter(torch.cat([x, y, x * x, y * y, x * y], dim=1), window)
    mean_x, mean_y, square_x, square_y, product = moments.split(channels, dim=1)
    variance_x = square_x - mean_x**2
    variance_y = square_y - mean_y**2
    covariance = product - mean_x * mean_y
    c1, c2 = SSIM_K1**2, SSIM_K2**2
    ssim_map = ((2 * mean_x * mean_y + c1) * (2 * covariance + c2)) / (
        (mean_x**2 + mean_y**2 + c1) * (variance_x + variance_y + c2)
    )
    return _reduce(ssim_map.flatten(1).mean(dim=1), reduction)


def iw_ssim(
    first: torch.Tensor, second: torch.Tensor, scales: int = 5, reduction: str = "mean"
) -> torch.Tensor:
    """Information-content-weighted SSIM (Wang and Li 2011) through ``piq.information_weighted_ssim``.

    piq's defaults (11x11 Gaussian window, 5 scales with weights 0.0448/0.2856/0.3001/0.2363/0.1333) need images of
    at least ``10 * 2**(scales - 1) + 1`` pixels a side (161 for 5 scales). For smaller images pass fewer
    ``scales``: the first ``scales`` weights are used, renormalised to sum to 1 (piq normalises them). RGB inputs are
    reduced to the Y channel of YIQ by piq. Computed in the input's dtype, like piq: float32 is
    about 5x faster, float64 inputs give float64 results (the two differ by about 1e-4).

    Args:
        first: ``(N, C, H, W)`` float in ``[0, 1]``, ``C`` in {1, 3}.
        second: Same shape as ``first``.
        scales: Number of pyramid scales, 1 to 5.
        reduction: ``"mean"`` or ``"none"``.

    Returns:
        Values at most 1; higher is more similar; 1 for identical images. Symmetric up to floating error.

    Raises:
        ValueError: On invalid inputs, ``scales`` outside 1..5, images too small for ``scales``, or images without
            content (e.g. constant), where piq's information-content matrix is singular.
    """
    import piq

    scales = check_positive_int(scales, "scales")
    if scales > len(IW_SSIM_SCALE_WEIGHTS):
        raise ValueError(f"scales: expected 1 to {len(IW_SSIM_SCALE_WEIGHTS)}, observed {scales}")
    min_size = (SSIM_WINDOW - 1) * 2 ** (scales - 1) + 1
    first, second = check_image_pair(first, second, channels=(1, 3))
    if min(first.shape[2:]) < min_size:
        raise ValueError(
            f"iw_ssim: expected height and width >= {min_size} for {scales} scales, observed "
            f"{first.shape[2]}x{first.shape[3]}; pass fewer scales"
        )
    weights = torch.tensor(IW_SSIM_SCALE_WEIGHTS[:scales], dtype=first.dtype, device=first.device)
    try:
        # clamp: check_images allows 1e-6 of float slack outside [0, 1]; piq does not
        values = piq.information_weighted_ssim(
            first.clamp(0, 1), second.clamp(0, 1), data_range=1.0, scale_weights=weights, reduction="none"
        )
    except RuntimeError as error:  # torch.linalg errors on singular information-content matrices
        raise ValueError(
            f"iw_ssim: expected images with texture at every scale, observed a singular information-content "
            f"matrix (flat image?): {error}"
        ) from None
    return _reduce(values, reduction)


FeatureTaps = Callable[[torch.Tensor], Sequence[torch.Tensor]]


def feature_tap_distance(
    first: torch.Tensor,
    second: torch.Tensor,
    feature_taps: FeatureTaps,
    reduction: str = "mean",
    expected_layers: int | None = None,
    taps_first: Sequence[torch.Tensor] | None = None,
) -> torch.Tensor:
    """LPIPS-style distance on any feature-tap network: mean over layers of spatially averaged cosine distance.

    For each layer ``l`` with features ``f_l(x)`` of shape ``(N, C_l, H_l, W_l)``:
    ``d_l = mean_{h,w} (1 - cos(f_l(x)[:, :, h, w], f_l(y)[:, :, h, w]))`` (cosine along channels), and the
    distance is ``mean_l d_l``. This is paper 1's domain LPIPS (``LPIPS_vessel`` / ``LPIPS_lesion``) when
    ``feature_taps`` is a segmentation U-Net's ``forward_features`` returning its 8 taps (4 encoder outputs after
    downsampling, 4 decoder outputs after upsampling). The per-location term is computed as
    ``0.5 * ||u - v||^2`` with ``u, v`` the channel vectors divided by (norm + 1e-10), as in LPIPS' normalisation:
    it equals ``1 - cos`` for non-zero vectors and is 0 where both vectors are zero (ReLU taps often are), so
    identical inputs give exactly 0.

    Gradients flow through (usable as a training loss); wrap in ``torch.no_grad()`` for evaluation.

    Args:
        first: ``(N, C, H, W)`` float in ``[0, 1]``.
        second: Same shape.
        feature_taps: Callable mapping a batch to a list/tuple of ``(N, C_l, H_l, W_l)`` tensors.
        reduction: ``"mean"`` or ``"none"``.
        expected_layers: If given, the number of taps the callable must return (8 for paper 1's U-Nets).
        taps_first: ``feature_taps(first)``, when the caller has them (a sweep that compares many edits with the same
            originals computes them once); None computes them.

    Returns:
        Values in ``[0, 2]`` (cosine distance); lower is more similar; 0 for identical inputs (up to float error, for
        non-zero features). Symmetric.

    Raises:
        ValueError: On invalid images or if the callable returns the wrong number or shapes of taps.
    """
    first, second = check_image_pair(first, second)
    taps_first = feature_taps(first) if taps_first is None else taps_first
    taps_second = feature_taps(second)
    if not isinstance(taps_first, (list, tuple)) or len(taps_first) == 0:
        raise ValueError(
            f"feature_taps: expected a non-empty list of (N, C, H, W) tensors, observed {type(taps_first).__name__}"
        )
    if expected_layers is not None and len(taps_first) != expected_layers:
        raise ValueError(f"feature_taps: expected {expected_layers} taps, observed {len(taps_first)}")
    per_layer = []
    for index, (tap_first, tap_second) in enumerate(zip(taps_first, taps_second)):
        if tap_first.ndim != 4 or tap_first.shape != tap_second.shape or tap_first.shape[0] != first.shape[0]:
            raise ValueError(
                f"feature_taps: tap {index} expected shape (N={first.shape[0]}, C, H, W) for both inputs, observed "
                f"{tuple(tap_first.shape)} and {tuple(tap_second.shape)}"
            )
        unit_first = tap_first / (tap_first.norm(dim=1, keepdim=True) + 1e-10)
        unit_second = tap_second / (tap_second.norm(dim=1, keepdim=True) + 1e-10)
        cosine_distance = 0.5 * (unit_first - unit_second).pow(2).sum(dim=1)
        per_layer.append(cosine_distance.flatten(1).mean(dim=1))
    return _reduce(torch.stack(per_layer, dim=0).mean(dim=0), reduction)


def domain_lpips(
    first: torch.Tensor,
    second: torch.Tensor,
    feature_taps: Sequence[FeatureTaps] | FeatureTaps,
    reduction: str = "mean",
) -> torch.Tensor:
    """Paper 1's domain LPIPS: sum over feature-tap networks of :func:`feature_tap_distance`.

    ``L_lpips = LPIPS_vessel + LPIPS_lesion`` with the vessel and hard-exudate U-Nets' 8-tap ``forward_features``.

    Args:
        first: ``(N, C, H, W)`` float in ``[0, 1]``.
        second: Same shape.
        feature_taps: One callable or a sequence of callables (e.g. ``[vessel_unet.forward_features,
            lesion_unet.forward_features]``), each returning a list of feature maps.
        reduction: ``"mean"`` or ``"none"``.

    Returns:
        Values in ``[0, 2 * number of networks]``; lower is more similar; 0 for identical inputs. Symmetric.
    """
    networks = [feature_taps] if callable(feature_taps) else list(feature_taps)
    if not networks or not all(callable(network) for network in networks):
        raise ValueError("feature_taps: expected a callable or a non-empty sequence of callables")
    total = None
    for network in networks:
        value = feature_tap_distance(first, second, network, reduction="none")
        total = value if total is None else total + value
    return _reduce(total, reduction)


TORCHVISION_BACKBONE_FILES = {"alex": "alexnet-owt-7be5be79.pth", "vgg": "vgg16-397923af.pth"}


def load_lpips(weights_path: str | Path | None = None, net: str = "alex") -> torch.nn.Module:
    """Build the official LPIPS metric from a LOCAL ImageNet backbone file; never downloads.

    The linear calibration heads ship inside the ``lpips`` package; only the backbone (torchvision ``alexnet`` or
    ``vgg16`` state dict, keys ``features.<i>.weight``/``bias``) must come from ``weights_path``.

    Args:
        weights_path: Path to a torchvision state dict (``.pth``) of the backbone; ``None`` looks for torchvision's
            cached file in ``$TORCH_HOME/hub/checkpoints`` (``alexnet-owt-7be5be79.pth`` / ``vgg16-397923af.pth``).
        net: ``"alex"`` or ``"vgg"``.

    Returns:
        An ``lpips.LPIPS`` module in eval mode (expects inputs in ``[-1, 1]``; :func:`lpips_distance` rescales).

    Raises:
        ValueError: If the file is missing, ``net`` is unsupported, or the state dict does not fit the backbone.
    """
    import lpips

    if net not in ("alex", "vgg"):
        raise ValueError(f"net: expected 'alex' or 'vgg', observed {net!r}")
    path = resolve_local_weights(
        weights_path, TORCHVISION_BACKBONE_FILES[net],
        f"LPIPS-{net} backbone (without it use feature_tap_distance with a cohort-trained network)",
    )
    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and "state_dict" in state:
        state = state["state_dict"]
    # pnet_rand=True builds the backbone without torchvision's download; the heads load from the package.
    with warnings.catch_warnings():  # torchvision's 'pretrained' deprecation notice, triggered inside lpips
        warnings.simplefilter("ignore", UserWarning)
        model = lpips.LPIPS(net=net, pretrained=True, pnet_rand=True, verbose=False)
    remapped = {}
    for name, _ in model.net.named_parameters():
        slice_name, layer_index, kind = name.split(".")
        source = f"features.{layer_index}.{kind}"
        if source not in state:
            raise ValueError(f"{path}: expected key {source!r} of a torchvision {net} state dict, not found")
        remapped[name] = state[source]
    try:
        model.net.load_state_dict(remapped, strict=True)
    except RuntimeError as error:
        raise ValueError(f"{path}: state dict does not fit the {net} backbone: {error}") from None
    return model.eval()


def lpips_distance(
    first: torch.Tensor, second: torch.Tensor, model: torch.nn.Module, reduction: str = "mean"
) -> torch.Tensor:
    """Official LPIPS distance with a model from :func:`load_lpips` (inputs rescaled from [0, 1] to [-1, 1]).

    Args:
        first: ``(N, C, H, W)`` float in ``[0, 1]``, ``C`` in {1, 3} (grey is repeated to 3 channels).
        second: Same shape.
        model: ``lpips.LPIPS`` module.
        reduction: ``"mean"`` or ``"none"``.

    Returns:
        Non-negative values; lower is more similar; 0 for identical inputs. Symmetric.
    """
    first, second = check_image_pair(first, second, channels=(1, 3))
    if first.shape[1] == 1:
        first, second = first.repeat(1, 3, 1, 1), second.repeat(1, 3, 1, 1)
    with torch.no_grad():
        values = model(first * 2 - 1, second * 2 - 1).flatten()
    return _reduce(values, reduction)


class PairedImageMetric:
    """Accumulates a paired per-image metric over batches (e.g. for a data loader loop).

    Args:
        metric: A paired metric taking ``(first, second, reduction="none")`` and returning one value per image
            (tensor or numpy array), e.g. :func:`ssim` or :func:`anonpaper.metrics.fs_sift`.
        **kwargs: Passed to ``metric`` on every update.

    Example:
        >>> accumulator = PairedImageMetric(mse)
        >>> accumulator.update(torch.zeros(2, 1, 4, 4), torch.ones(2, 1, 4, 4))
        >>> accumulator.update(torch.zeros(2, 1, 4, 4), torch.zeros(2, 1, 4, 4))
        >>> float(accumulator.compute()), accumulator.count
        (0.5, 4)
    """

    def __init__(self, metric: Callable[..., torch.Tensor], **kwargs) -> None:
        if not callable(metric):
            raise ValueError(f"metric: expected a callable, observed {type(metric).__name__}")
        self.metric, self.kwargs = metric, kwargs
        self._values: list[torch.Tensor] = []

    def update(self, first: torch.Tensor, second: torch.Tensor) -> None:
        """Add one batch of image pairs."""
        values = self.metric(first, second, reduction="none", **self.kwargs)
        # some metrics (fs_sift) return numpy arrays per image; keep everything as CPU float64 tensors
        values = values.detach().cpu() if isinstance(values, torch.Tensor) else torch.as_tensor(values)
        self._values.append(values.to(torch.float64).reshape(-1))

    @property
    def count(self) -> int:
        """Number of image pairs seen."""
        return sum(int(values.numel()) for values in self._values)

    def values(self) -> torch.Tensor:
        """All per-image values seen so far, ``(count,)``."""
        if not self._values:
            raise ValueError("PairedImageMetric: expected at least one update before compute, observed none")
        return torch.cat(self._values)

    def compute(self) -> torch.Tensor:
        """Mean over every image pair seen (0-d tensor)."""
        return self.values().mean()

    def reset(self) -> None:
        """Forget all accumulated values."""
        self._values = []

