"""Reference implementations of the resampling and activation primitives: plain PyTorch, every step explicit.

These are the ground truth that the fast CPU path (:mod:`~anonpaper.models.stylegan.ops.fast`) and the Triton
kernels (:mod:`~anonpaper.models.stylegan.ops.triton_ops`) are tested against. They rely on PyTorch's autograd for
every derivative order and for forward-mode AD (``torch.func.jvp``).

* :func:`upfirdn2d`: upsample (zero insertion) -> pad/crop -> separable FIR filter -> downsample (Karras et al.
  2020, 2021 use it for every resampling step).
* :func:`bias_act`: bias + activation (linear or leaky ReLU with slope 0.2) times a gain, optionally clamped.
* :func:`filtered_lrelu`: StyleGAN3's alias-free nonlinearity (Karras et al., NeurIPS 2021, Sec. 3.2): bias,
  upsample with a low-pass filter, leaky ReLU at the higher rate, low-pass and downsample. The upsampled tensor
  is materialised (``up ** 2`` times the input's memory).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

LEAKY_RELU_SLOPE = 0.2
LEAKY_RELU_GAIN = math.sqrt(2.0)
ACTIVATIONS = ("linear", "lrelu")


def check_padding(padding) -> tuple[int, int, int, int]:
    """Validate an (x_lo, x_hi, y_lo, y_hi) padding; returns it as a tuple of ints."""
    padding = tuple(int(p) for p in padding)
    if len(padding) != 4:
        raise ValueError(f"padding must be (x_lo, x_hi, y_lo, y_hi), got {padding}")
    return padding


def upfirdn2d_output_size(size: int, taps: int, up: int, down: int, pad_lo: int, pad_hi: int) -> int:
    """Output length along one axis: ``(size * up + pad_lo + pad_hi - taps) // down + 1``."""
    return (size * up + pad_lo + pad_hi - taps) // down + 1


def upfirdn2d(x: torch.Tensor, filter_1d: torch.Tensor | None, up: int = 1, down: int = 1,
              padding: tuple[int, int, int, int] = (0, 0, 0, 0), gain: float = 1.0) -> torch.Tensor:
    """Upsample, pad, filter (separably, the same 1-D filter on both axes), downsample.

    Output side = ``(in * up + pad_lo + pad_hi - taps) // down + 1``. Negative padding crops.

    Args:
        x: (N, C, H, W) float tensor.
        filter_1d: (taps,) filter or None (identity).
        up: Integer upsampling factor (zeros inserted after every sample).
        down: Integer downsampling factor (every ``down``-th sample kept, starting at the first).
        padding: (x_lo, x_hi, y_lo, y_hi) pixels added (negative: removed) after upsampling.
        gain: Overall gain of the 2-D filter (``up ** 2`` keeps the mean when upsampling).

    Returns:
        (N, C, H', W') tensor of the input's dtype.
    """
    batch, channels, height, width = x.shape
    if up > 1 and filter_1d is not None and filter_1d.numel() > 1:
        return _upsample_polyphase(x, filter_1d, up, down, padding, gain)
    if up > 1:
        x = x.reshape(batch, channels, height, 1, width, 1)
        x = F.pad(x, [0, up - 1, 0, 0, 0, up - 1])
        x = x.reshape(batch, channels, height * up, width * up)
    pad_x0, pad_x1, pad_y0, pad_y1 = padding
    x = F.pad(x, [max(pad_x0, 0), max(pad_x1, 0), max(pad_y0, 0), max(pad_y1, 0)])
    x = x[:, :, max(-pad_y0, 0): x.shape[2] - max(-pad_y1, 0), max(-pad_x0, 0): x.shape[3] - max(-pad_x1, 0)]
    if filter_1d is None or filter_1d.numel() == 1:
        scale = gain * (1.0 if filter_1d is None else float(filter_1d.reshape(-1)[0]) ** 2)
        x = x * scale if scale != 1.0 else x
        return x[:, :, ::down, ::down] if down > 1 else x
    # Convolution (not correlation): flip the taps. Half of the gain goes to each axis.
    taps = (filter_1d.to(device=x.device, dtype=x.dtype) * math.sqrt(gain)).flip(0)
    size = taps.numel()
    x = F.conv2d(x, taps.view(1, 1, 1, size).expand(channels, 1, 1, size), groups=channels, stride=(1, down))
    x = F.conv2d(x, taps.view(1, 1, size, 1).expand(channels, 1, size, 1), groups=channels, stride=(down, 1))
    return x


def _upsample_polyphase(x: torch.Tensor, filter_1d: torch.Tensor, up: int, down: int,
                        padding: tuple[int, int, int, int], gain: float) -> torch.Tensor:
    """Same result as zero insertion + pad + filter, computed with strided transposed convolutions.

    A transposed convolution with stride ``up`` is the full convolution of the zero-inserted signal with the taps,
    without multiplying the inserted zeros (``up`` times less work per axis). Output sample ``j`` of upfirdn2d is
    sample ``j + taps - 1 - pad_lo`` of that full convolution, so the result is a crop/zero-pad of it.
    """
    channels = x.shape[1]
    taps = filter_1d.to(device=x.device, dtype=x.dtype) * math.sqrt(gain)
    size = taps.numel()
    pad_x0, pad_x1, pad_y0, pad_y1 = padding
    for axis, (pad_lo, pad_hi) in ((3, (pad_x0, pad_x1)), (2, (pad_y0, pad_y1))):
        length = x.shape[axis]
        shape = (channels, 1, 1, size) if axis == 3 else (channels, 1, size, 1)
        stride = (1, up) if axis == 3 else (up, 1)
        x = F.conv_transpose2d(x, taps.view(1, 1, *shape[2:]).expand(*shape), stride=stride, groups=channels)
        full_length = (length - 1) * up + size
        out_length = length * up + pad_lo + pad_hi - size + 1
        left = pad_lo - (size - 1)
        right = out_length - full_length - left
        x = F.pad(x, [left, right, 0, 0] if axis == 3 else [0, 0, left, right])
    return x[:, :, ::down, ::down] if down > 1 else x


def bias_act(x: torch.Tensor, bias: torch.Tensor | None = None, activation: str = "linear", gain: float = 1.0,
             clamp: float | None = None) -> torch.Tensor:
    """``clamp(act(x + bias) * gain, -clamp, clamp)`` with the bias broadcast over dim 1.

    Args:
        x: (N, C, ...) float tensor.
        bias: (C,) tensor or None.
        activation: ``"linear"`` or ``"lrelu"`` (slope 0.2).
        gain: Multiplies the activation's output (sqrt(2) for lrelu in StyleGAN).
        clamp: If given, the result is clamped to [-clamp, clamp] (StyleGAN's fp16 layers use 256).

    Returns:
        Tensor shaped like ``x``.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if bias is not None:
        x = x + bias.to(x.dtype).reshape([1, -1] + [1] * (x.ndim - 2))
    if activation == "lrelu":
        x = F.leaky_relu(x, LEAKY_RELU_SLOPE)
    if gain != 1.0:
        x = x * gain
    if clamp is not None:
        x = x.clamp(-clamp, clamp)
    return x


def filtered_lrelu(x: torch.Tensor, up_filter: torch.Tensor | None, down_filter: torch.Tensor | None,
                   bias: torch.Tensor | None = None, up: int = 1, down: int = 1,
                   padding: tuple[int, int, int, int] = (0, 0, 0, 0), gain: float = LEAKY_RELU_GAIN,
                   slope: float = LEAKY_RELU_SLOPE, clamp: float | None = None,
                   scale: torch.Tensor | None = None) -> torch.Tensor:
    """StyleGAN3's filtered leaky ReLU, step by step (materialises the upsampled tensor).

    ``down(lrelu(up(x * scale + bias)) * gain)`` where ``up`` is :func:`upfirdn2d` with ``up``, ``padding`` and gain
    ``up ** 2`` and ``down`` is :func:`upfirdn2d` with ``down`` and no padding.

    Args:
        x: (N, C, H, W) float tensor.
        up_filter: (taps_up,) low-pass filter of the upsampling (None or one tap: no filtering).
        down_filter: (taps_down,) low-pass filter of the downsampling.
        bias: (C,) bias added before upsampling, or None.
        up: Upsampling factor.
        down: Downsampling factor.
        padding: (x_lo, x_hi, y_lo, y_hi) padding of the upsampling step.
        gain: Gain after the leaky ReLU (sqrt(2)).
        slope: Negative slope of the leaky ReLU (0.2).
        clamp: Clamp of the activation's output (after the gain), or None.
        scale: (N, C) per-sample, per-channel factor applied before the bias (StyleGAN's weight demodulation), or
            None.

    Returns:
        (N, C, H', W') tensor.
    """
    if scale is not None:
        x = x * scale.to(x.dtype)[:, :, None, None]
    if bias is not None:
        x = x + bias.to(x.dtype)[None, :, None, None]
    x = upfirdn2d(x, up_filter, up=up, padding=padding, gain=up ** 2)
    x = F.leaky_relu(x, slope) * gain
    if clamp is not None:
        x = x.clamp(-clamp, clamp)
    return upfirdn2d(x, down_filter, down=down)
