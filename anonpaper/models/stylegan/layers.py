"""Building blocks shared by the StyleGAN2 / StyleGAN3-T generators and the discriminator, in pure PyTorch.

* Equalised-learning-rate fully connected and convolution layers (Karras et al. 2018): weights are stored with
  unit variance and scaled by ``lr_multiplier / sqrt(fan_in)`` at run time, so Adam's step size is the same for
  every layer.
* :func:`upfirdn2d`: upsample (zero insertion) -> pad/crop -> separable FIR filter -> downsample, the resampling
  primitive of both papers; dispatches to :mod:`anonpaper.models.stylegan.ops` (reference, polyphase "fast"
  PyTorch, or Triton kernels on CUDA).
* :func:`modulated_conv2d`: style modulation and weight demodulation (StyleGAN2, Eq. 1-3), computed in the
  mathematically equivalent "scale activations, shared convolution, scale outputs" form, which needs no per-sample
  grouped convolution and so runs fast on CPU as well as GPU.
* :func:`minibatch_std`: the discriminator's minibatch standard-deviation feature.
* :func:`to_signed_range` / :func:`to_unit_range`: conversions between image data in [0, 1] and the generator's
  [-1, 1] convention.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from anonpaper.models.stylegan import ops

from anonpaper.models.stylegan.ops.reference import LEAKY_RELU_GAIN, LEAKY_RELU_SLOPE


def to_signed_range(images: torch.Tensor) -> torch.Tensor:
    """Map images from [0, 1] (the cohorts' convention) to [-1, 1] (the generator's); returns a new tensor."""
    return images * 2.0 - 1.0


def to_unit_range(images: torch.Tensor, clamp: bool = True) -> torch.Tensor:
    """Map generator images from [-1, 1] to [0, 1]; ``clamp`` clips the (unbounded) generator output."""
    out = (images + 1.0) * 0.5
    return out.clamp(0.0, 1.0) if clamp else out


def leaky_relu_gain(x: torch.Tensor) -> torch.Tensor:
    """Leaky ReLU (slope 0.2) times sqrt(2), which keeps the activation's second moment at unit input variance."""
    return F.leaky_relu(x, LEAKY_RELU_SLOPE) * LEAKY_RELU_GAIN


class EqualizedLinear(nn.Module):
    """Fully connected layer with equalised learning rate.

    Args:
        in_features: Input size.
        out_features: Output size.
        bias: Whether to add a bias.
        bias_init: Initial bias value (1 for style affines, so styles start near one).
        lr_multiplier: Learning-rate multiplier (0.01 in the mapping network).
        activation: ``"linear"`` or ``"lrelu"`` (leaky ReLU with gain sqrt(2)).
        weight_init_scale: Multiplies the initial weights (0 gives a layer that outputs its bias at start).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, bias_init: float = 0.0,
                 lr_multiplier: float = 1.0, activation: str = "linear", weight_init_scale: float = 1.0):
        super().__init__()
        if activation not in ("linear", "lrelu"):
            raise ValueError(f"activation must be 'linear' or 'lrelu', got {activation!r}")
        self.in_features, self.out_features, self.activation = in_features, out_features, activation
        self.weight = nn.Parameter(torch.randn(out_features, in_features) * (weight_init_scale / lr_multiplier))
        self.bias = nn.Parameter(torch.full([out_features], float(bias_init) / lr_multiplier)) if bias else None
        self.weight_gain = lr_multiplier / math.sqrt(in_features)
        self.bias_gain = lr_multiplier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight.to(x.dtype) * self.weight_gain
        bias = None if self.bias is None else self.bias.to(x.dtype) * self.bias_gain
        x = F.linear(x, weight, bias)
        return leaky_relu_gain(x) if self.activation == "lrelu" else x

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, activation={self.activation}"


def lowpass_filter_1d(values=(1, 3, 3, 1)) -> torch.Tensor:
    """A 1-D FIR filter normalised to unit sum (the [1, 3, 3, 1] binomial filter of StyleGAN2 by default)."""
    f = torch.as_tensor(values, dtype=torch.float32)
    return f / f.sum()


def design_lowpass_filter(numtaps: int, cutoff: float, width: float, sampling_rate: float) -> torch.Tensor | None:
    """Kaiser-windowed separable low-pass filter (StyleGAN3, Appendix C), or None for a single tap.

    Args:
        numtaps: Filter length; 1 means "no filtering".
        cutoff: Cutoff frequency (same units as ``sampling_rate``).
        width: Transition band width.
        sampling_rate: Sampling rate at which the filter runs.

    Returns:
        float32 tensor of shape (numtaps,) summing to one, or None.
    """
    if numtaps == 1:
        return None
    import scipy.signal

    taps = scipy.signal.firwin(numtaps=numtaps, cutoff=cutoff, width=width, fs=sampling_rate)
    return torch.as_tensor(np.asarray(taps), dtype=torch.float32)


def upfirdn2d(x: torch.Tensor, filter_1d: torch.Tensor | None, up: int = 1, down: int = 1,
              padding: tuple[int, int, int, int] = (0, 0, 0, 0), gain: float = 1.0,
              implementation: str = "auto") -> torch.Tensor:
    """Upsample, pad, separable FIR, downsample; output side ``(in * up + pad_lo + pad_hi - taps) // down + 1``.

    Arguments, shapes and result as :func:`anonpaper.models.stylegan.ops.reference.upfirdn2d`; ``implementation``
    picks ``"auto"``, ``"reference"``, ``"fast"`` or ``"triton"`` (see :mod:`anonpaper.models.stylegan.ops`).
    """
    return ops.upfirdn2d(x, filter_1d, up, down, padding, gain, implementation=implementation)


def upsample2d(x: torch.Tensor, filter_1d: torch.Tensor, up: int = 2, implementation: str = "auto") -> torch.Tensor:
    """Upsample by ``up`` with the FIR filter, keeping the mean (output side = input side * up)."""
    taps = filter_1d.numel()
    pad0, pad1 = (taps + up - 1) // 2, (taps - up) // 2
    return upfirdn2d(x, filter_1d, up=up, padding=(pad0, pad1, pad0, pad1), gain=up * up,
                     implementation=implementation)


def downsample2d(x: torch.Tensor, filter_1d: torch.Tensor, down: int = 2,
                 implementation: str = "auto") -> torch.Tensor:
    """Low-pass filter and downsample by ``down`` (output side = input side / down)."""
    taps = filter_1d.numel()
    pad0, pad1 = (taps - down + 1) // 2, (taps - down) // 2
    return upfirdn2d(x, filter_1d, down=down, padding=(pad0, pad1, pad0, pad1), implementation=implementation)


def modulated_conv2d(x: torch.Tensor, weight: torch.Tensor, styles: torch.Tensor, demodulate: bool = True,
                     padding: int = 0, input_gain: torch.Tensor | None = None,
                     prenormalize: bool = False) -> torch.Tensor:
    """Modulated (and optionally demodulated) convolution, StyleGAN2 Eq. 1-3.

    Computes ``conv(x, w * s)`` with ``w'_{oikk} = w_{oikk} s_i`` per sample and, when demodulating, divides each
    output channel by ``sqrt(sum_{ikk} w'^2 + 1e-8)``. Because modulation scales input channels and demodulation
    scales output channels, this equals ``demod * conv(x * s, w)``, which is what is computed (no grouped conv).

    Args:
        x: (N, C_in, H, W) activations.
        weight: (C_out, C_in, k, k) weights (already multiplied by any equalised-lr gain).
        styles: (N, C_in) per-sample styles.
        demodulate: Normalise each output channel to unit expected variance.
        padding: Zero padding of the convolution.
        input_gain: Optional scalar tensor multiplying the input (StyleGAN3's running magnitude normalisation).
        prenormalize: StyleGAN3's pre-normalisation: weights to unit RMS per output channel and styles to unit RMS
            per sample (the official code takes the RMS over the whole batch; per sample keeps samples independent
            of their batch mates, and with demodulation the two differ only through the 1e-8 epsilon).

    Returns:
        (N, C_out, H', W') tensor.
    """
    if x.ndim != 4 or styles.ndim != 2 or styles.shape[0] != x.shape[0] or styles.shape[1] != weight.shape[1]:
        raise ValueError(f"modulated_conv2d expects x (N, {weight.shape[1]}, H, W) and styles (N, {weight.shape[1]});"
                         f" got x {tuple(x.shape)}, styles {tuple(styles.shape)}")
    if prenormalize and demodulate:
        weight = weight * weight.square().mean(dim=[1, 2, 3], keepdim=True).rsqrt()
        styles = styles * styles.square().mean(dim=1, keepdim=True).rsqrt()
    weight = weight.to(x.dtype)
    styles = styles.to(x.dtype)
    scale_in = styles
    if input_gain is not None:
        scale_in = scale_in * input_gain.to(x.dtype)
    y = F.conv2d(x * scale_in[:, :, None, None], weight, padding=padding)
    if demodulate:
        y = y * demodulation_coefficients(weight, styles)[:, :, None, None]
    return y


def demodulation_coefficients(weight: torch.Tensor, styles: torch.Tensor) -> torch.Tensor:
    """StyleGAN2 Eq. 3: ``1 / sqrt(sum_{i,k} (w_oik s_i)^2 + 1e-8)`` per sample and output channel.

    Uses ``sum_{i,k} (w_oik s_i)^2 = sum_i (sum_k w_oik^2) s_i^2`` (no per-sample weight tensor). The input gain of
    StyleGAN3 is applied after demodulation, so it does not enter the coefficient.

    Args:
        weight: (C_out, C_in, k, k) weights.
        styles: (N, C_in) styles.

    Returns:
        (N, C_out) positive tensor of the styles' dtype.
    """
    energy = styles.square() @ weight.square().sum(dim=[2, 3]).t()
    return (energy + 1e-8).rsqrt()


def minibatch_std(x: torch.Tensor, group_size: int = 4, num_channels: int = 1) -> torch.Tensor:
    """Append the minibatch standard deviation as extra feature maps (Karras et al. 2018).

    Samples are split into groups of ``group_size`` (the largest divisor of N not above it); for each group the
    per-feature std over the group is averaged over features, pixels and channel splits.

    Args:
        x: (N, C, H, W) activations; C must be divisible by ``num_channels``.

    Returns:
        (N, C + num_channels, H, W) tensor.
    """
    batch, channels, height, width = x.shape
    if channels % num_channels:
        raise ValueError(f"minibatch_std: channels {channels} not divisible by num_channels {num_channels}")
    group = min(group_size, batch)
    while batch % group:
        group -= 1
    y = x.reshape(group, -1, num_channels, channels // num_channels, height, width)
    y = y - y.mean(dim=0)
    y = (y.square().mean(dim=0) + 1e-8).sqrt()
    y = y.mean(dim=[2, 3, 4]).reshape(-1, num_channels, 1, 1)
    y = y.repeat(group, 1, height, width)
    return torch.cat([x, y], dim=1)
