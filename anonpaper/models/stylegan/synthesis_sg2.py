"""StyleGAN2 synthesis network (Karras et al. 2020, "config F" with skip ToRGB), pure PyTorch.

A learned 4x4 constant is refined by blocks of modulated/demodulated 3x3 convolutions, one block per resolution
(4, 8, ..., R). Blocks above 4 px first upsample (zero insertion + [1, 3, 3, 1] filter, with NVIDIA's border
handling: see :func:`upsample_conv2d`) in their first conv. Every
conv adds per-pixel noise scaled by a learned strength. Each block's ToRGB (1x1 modulated conv, no demodulation)
adds to the upsampled image of the previous blocks (skip architecture).

w indices follow the official layout: conv layers consume ws[0], ws[1], ...; a block's ToRGB shares the w of the
next block's first conv, so ``num_ws = num_convs + 1`` (14 at 256 px).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Callable

import torch
from torch import nn

from anonpaper.models.stylegan.config import StyleGANConfig
import torch.nn.functional as F

from anonpaper.models.stylegan import ops
from anonpaper.models.stylegan.layers import (LEAKY_RELU_GAIN, LEAKY_RELU_SLOPE, EqualizedLinear,
                                              demodulation_coefficients, lowpass_filter_1d, modulated_conv2d,
                                              upfirdn2d, upsample2d)
from anonpaper.models.stylegan.sspace import StyleCodes, StyleLayout

NOISE_MODES = ("const", "random", "none")


def sg2_channels(resolution: int, channel_base: int, channel_max: int) -> int:
    """Feature maps at ``resolution`` in StyleGAN2: ``min(channel_base // resolution, channel_max)``."""
    return max(1, min(channel_base // resolution, channel_max))


def reduced_precision_dtype(mixed_precision: str | None) -> torch.dtype | None:
    """``None`` / ``"fp16"`` / ``"bf16"`` -> the compute dtype of the mixed-precision layers (None: all fp32)."""
    choices = {None: None, "fp16": torch.float16, "bf16": torch.bfloat16}
    if mixed_precision not in choices:
        raise ValueError(f"mixed_precision must be one of {list(choices)}, got {mixed_precision!r}")
    return choices[mixed_precision]


def upsample_conv2d(x: torch.Tensor, weight: torch.Tensor, resample_filter: torch.Tensor,
                    implementation: str = "auto") -> torch.Tensor:
    """x2 upsampling followed by a 3x3 convolution, with NVIDIA's border handling (StyleGAN2, Karras et al. 2020).

    The official layer runs a stride-2 transposed convolution (output ``2L + 1``) and then the [1, 3, 3, 1] FIR with
    padding 1 on each side and gain 4: the full linear convolution of the zero-inserted input with the kernel and
    the filter, cropped to ``2L``. Convolutions commute, so the same numbers come from upsampling with the filter
    *keeping its full support* (padding (3, 2): ``2L + 2`` samples) and a valid 3x3 correlation. Filtering to
    ``2L`` samples first and zero-padding the 3x3 convolution (the previous formulation) loses the filter's tails
    at the first and last row/column.

    Weight orientation: this is a correlation with ``weight``; NVIDIA's transposed convolution convolves, so an
    official kernel corresponds to ``weight.flip([2, 3])`` here.

    Args:
        x: (N, C_in, L, L) activations.
        weight: (C_out, C_in, 3, 3) weights.
        resample_filter: (4,) low-pass filter summing to one.
        implementation: Resampling implementation (see :mod:`anonpaper.models.stylegan.ops`).

    Returns:
        (N, C_out, 2L, 2L) tensor.
    """
    if weight.shape[-2:] != (3, 3) or resample_filter.numel() != 4:
        raise ValueError(f"upsample_conv2d expects a 3x3 kernel and a 4-tap filter, got kernel "
                         f"{tuple(weight.shape[-2:])} and {resample_filter.numel()} taps")
    # Padding (taps - 1, taps - 2) keeps the whole support of the filtered signal: 2L + taps - 2 = 2L + 2 samples,
    # which the valid 3x3 correlation brings back to 2L.
    pad_lo, pad_hi = 3, 2
    x = upfirdn2d(x, resample_filter, up=2, padding=(pad_lo, pad_hi, pad_lo, pad_hi), gain=4,
                  implementation=implementation)
    return F.conv2d(x, weight.to(x.dtype))


class ModulatedConvLayer(nn.Module):
    """3x3 modulated conv + noise + bias + leaky ReLU, optionally upsampling x2 first.

    ``compute_dtype`` (None: the input's dtype) and ``clamp`` (None: no clamp) implement mixed precision;
    ``implementation`` selects the ops (see :mod:`anonpaper.models.stylegan.ops`).
    """

    def __init__(self, in_channels: int, out_channels: int, w_dim: int, resolution: int, upsample: bool,
                 implementation: str = "auto", compute_dtype: torch.dtype | None = None,
                 clamp: float | None = None):
        super().__init__()
        self.in_channels, self.out_channels, self.resolution, self.upsample = (in_channels, out_channels,
                                                                               resolution, upsample)
        self.implementation = ops.check_implementation(implementation)
        self.compute_dtype, self.clamp = compute_dtype, clamp
        self.affine = EqualizedLinear(w_dim, in_channels, bias_init=1.0)
        self.weight = nn.Parameter(torch.randn(out_channels, in_channels, 3, 3))
        self.weight_gain = 1.0 / math.sqrt(in_channels * 9)
        self.bias = nn.Parameter(torch.zeros(out_channels))
        self.noise_strength = nn.Parameter(torch.zeros([]))
        self.register_buffer("noise_const", torch.randn(resolution, resolution))
        self.register_buffer("resample_filter", lowpass_filter_1d())

    def forward_from_style(self, x: torch.Tensor, style: torch.Tensor, noise_mode: str = "const",
                           noise_generator: torch.Generator | None = None,
                           noise: torch.Tensor | None = None) -> torch.Tensor:
        if self.compute_dtype is not None:
            x = x.to(self.compute_dtype)
        implementation = ops.resolve_implementation(self.implementation, x)
        weight = self.weight * self.weight_gain
        if noise is None:
            if noise_mode == "const":
                noise = self.noise_const[None, None]
            elif noise_mode == "random":
                noise = torch.randn(x.shape[0], 1, self.resolution, self.resolution, generator=noise_generator,
                                    device="cpu" if noise_generator is not None else x.device)
        if implementation == "reference":
            if self.upsample:
                # Upsampling commutes with the per-channel modulation, so it can come first.
                x = upfirdn2d(x, self.resample_filter, up=2, padding=(3, 2, 3, 2), gain=4,
                              implementation=implementation)
            x = modulated_conv2d(x, weight, style, demodulate=True, padding=0 if self.upsample else 1)
            if noise is not None:
                x = x + noise.to(device=x.device, dtype=x.dtype) * self.noise_strength.to(x.dtype)
            return ops.bias_act(x, self.bias, "lrelu", LEAKY_RELU_GAIN, self.clamp, implementation=implementation)
        # Fast path: modulate the input, one shared convolution, then demodulation, gain, bias and noise in one
        # fused multiply-add (leaky ReLU is positively homogeneous, so its gain moves inside).
        x = x * style.to(x.dtype)[:, :, None, None]
        if self.upsample:
            y = upsample_conv2d(x, weight, self.resample_filter, implementation)
        else:
            y = F.conv2d(x, weight.to(x.dtype), padding=1)
        if implementation == "triton":
            y = y * demodulation_coefficients(weight, style).to(y.dtype)[:, :, None, None]
            if noise is not None:
                y = y + noise.to(device=y.device, dtype=y.dtype) * self.noise_strength.to(y.dtype)
            return ops.bias_act(y, self.bias, "lrelu", LEAKY_RELU_GAIN, self.clamp, implementation=implementation)
        coefficients = demodulation_coefficients(weight, style) * LEAKY_RELU_GAIN
        y = torch.addcmul((self.bias * LEAKY_RELU_GAIN).to(y.dtype)[None, :, None, None], y,
                          coefficients.to(y.dtype)[:, :, None, None])
        if noise is not None:
            y = y + noise.to(device=y.device, dtype=y.dtype) * (self.noise_strength * LEAKY_RELU_GAIN).to(y.dtype)
        y = F.leaky_relu(y, LEAKY_RELU_SLOPE)
        return y.clamp(-self.clamp, self.clamp) if self.clamp is not None else y


class ToRGBLayer(nn.Module):
    """1x1 modulated conv without demodulation to image channels, plus bias (linear); output in float32."""

    def __init__(self, in_channels: int, image_channels: int, w_dim: int, compute_dtype: torch.dtype | None = None,
                 clamp: float | None = None):
        super().__init__()
        self.in_channels = in_channels
        self.compute_dtype, self.clamp = compute_dtype, clamp
        self.affine = EqualizedLinear(w_dim, in_channels, bias_init=1.0)
        self.weight = nn.Parameter(torch.randn(image_channels, in_channels, 1, 1))
        self.weight_gain = 1.0 / math.sqrt(in_channels)
        self.bias = nn.Parameter(torch.zeros(image_channels))

    def forward_from_style(self, x: torch.Tensor, style: torch.Tensor, **_) -> torch.Tensor:
        if self.compute_dtype is not None:
            x = x.to(self.compute_dtype)
        y = modulated_conv2d(x, self.weight, style * self.weight_gain, demodulate=False)
        y = y + self.bias.to(y.dtype)[None, :, None, None]
        if self.clamp is not None:
            y = y.clamp(-self.clamp, self.clamp)
        return y if self.compute_dtype is None else y.float()


class SynthesisNetworkSG2(nn.Module):
    """StyleGAN2 synthesis: ws (N, num_ws, w_dim) -> images (N, C, R, R), nominally in [-1, 1] (not clamped).

    Args:
        config: Architecture.
        implementation: Ops implementation, ``"auto"`` (default), ``"reference"``, ``"fast"`` or ``"triton"``
            (see :mod:`anonpaper.models.stylegan.ops`); :meth:`set_implementation` changes it later.
        mixed_precision: None (float32 everywhere, the default), ``"fp16"`` or ``"bf16"``: the layers of the
            ``mixed_precision_resolutions`` highest resolutions compute in that dtype with their outputs clamped to
            ``[-conv_clamp, conv_clamp]`` (StyleGAN2-ADA's recipe: 4 resolutions, clamp 256); the image is float32.
        mixed_precision_resolutions: Number of highest resolutions in reduced precision.
        conv_clamp: Activation clamp of the reduced-precision layers.
    """

    def __init__(self, config: StyleGANConfig, implementation: str = "auto", mixed_precision: str | None = None,
                 mixed_precision_resolutions: int = 4, conv_clamp: float = 256.0):
        super().__init__()
        self.config = config
        self.implementation = ops.check_implementation(implementation)
        reduced = reduced_precision_dtype(mixed_precision)
        first_reduced = max(2 ** (config.log2_resolution + 1 - mixed_precision_resolutions), 8)
        self.resolution, self.image_channels, self.w_dim = config.resolution, config.image_channels, config.w_dim
        resolutions = [2 ** i for i in range(2, config.log2_resolution + 1)]
        width = {r: sg2_channels(r, config.channel_base, config.channel_max) for r in resolutions}
        self.const = nn.Parameter(torch.randn(width[4], 4, 4))
        self.register_buffer("resample_filter", lowpass_filter_1d())
        self.layers = nn.ModuleDict()
        self.w_index: dict[str, int] = {}
        conv_count = 0
        for r in resolutions:
            dtype = reduced if reduced is not None and r >= first_reduced else None
            clamp = conv_clamp if dtype is not None else None
            options = dict(implementation=implementation, compute_dtype=dtype, clamp=clamp)
            if r > 4:
                self.layers[f"b{r}_conv0"] = ModulatedConvLayer(width[r // 2], width[r], self.w_dim, r, upsample=True,
                                                                **options)
                self.w_index[f"b{r}_conv0"] = conv_count
                conv_count += 1
            self.layers[f"b{r}_conv1"] = ModulatedConvLayer(width[r], width[r], self.w_dim, r, upsample=False,
                                                            **options)
            self.w_index[f"b{r}_conv1"] = conv_count
            conv_count += 1
            self.layers[f"b{r}_torgb"] = ToRGBLayer(width[r], self.image_channels, self.w_dim, compute_dtype=dtype,
                                                    clamp=clamp)
            self.w_index[f"b{r}_torgb"] = conv_count  # shared with the next block's conv0
        self.num_ws = conv_count + 1

    @property
    def layout(self) -> StyleLayout:
        return StyleLayout(tuple(self.layers), tuple(layer.in_channels for layer in self.layers.values()))

    def set_implementation(self, implementation: str) -> None:
        """Switch every layer to another ops implementation (weights unchanged)."""
        self.implementation = ops.check_implementation(implementation)
        for layer in self.layers.values():
            if isinstance(layer, ModulatedConvLayer):
                layer.implementation = implementation

    def noise_buffers(self) -> "OrderedDict[str, torch.Tensor]":
        """The constant noise maps by conv layer name, each (R_l, R_l) (e.g. to initialise a projector)."""
        return OrderedDict((name, layer.noise_const) for name, layer in self.layers.items()
                           if isinstance(layer, ModulatedConvLayer))

    def _check_ws(self, ws: torch.Tensor) -> None:
        if ws.ndim != 3 or ws.shape[1] != self.num_ws or ws.shape[2] != self.w_dim:
            raise ValueError(f"ws must have shape (N, {self.num_ws}, {self.w_dim}), got {tuple(ws.shape)}")

    def styles(self, ws: torch.Tensor) -> StyleCodes:
        """Affine outputs of every layer: S codes for ws (N, num_ws, w_dim)."""
        self._check_ws(ws)
        return StyleCodes(OrderedDict((name, layer.affine(ws[:, self.w_index[name]]))
                                      for name, layer in self.layers.items()))

    def forward(self, ws: torch.Tensor, noise_mode: str = "const", noise_generator: torch.Generator | None = None,
                noise_inputs: dict | None = None, return_features: bool = False, **_):
        """Synthesise from ws, computing each layer's style on the fly (same ops as :meth:`forward_from_styles`)."""
        self._check_ws(ws)
        return self._run(lambda name, layer: layer.affine(ws[:, self.w_index[name]]), ws.shape[0], noise_mode,
                         noise_generator, noise_inputs, return_features)

    def forward_from_styles(self, codes: StyleCodes, noise_mode: str = "const",
                            noise_generator: torch.Generator | None = None, noise_inputs: dict | None = None,
                            return_features: bool = False, **_):
        """Synthesise from S codes (see :class:`StyleCodes`)."""
        layout = codes.layout
        if layout != self.layout:
            raise ValueError(f"style codes layout {list(zip(layout.names, layout.sizes))} does not match the "
                             f"generator's {list(zip(self.layout.names, self.layout.sizes))}")
        return self._run(lambda name, layer: codes.styles[name], codes.batch_size, noise_mode, noise_generator,
                         noise_inputs, return_features)

    def _run(self, style_of: Callable, batch: int, noise_mode: str, noise_generator, noise_inputs,
             return_features: bool):
        if noise_mode not in NOISE_MODES:
            raise ValueError(f"noise_mode must be one of {NOISE_MODES}, got {noise_mode!r}")
        noise_inputs = noise_inputs or {}
        x = self.const.unsqueeze(0).expand(batch, -1, -1, -1)
        image = None
        features = []
        for name, layer in self.layers.items():
            style = style_of(name, layer)
            if isinstance(layer, ToRGBLayer):
                y = layer.forward_from_style(x, style)
                image = y if image is None else upsample2d(image, self.resample_filter,
                                                           implementation=self.implementation) + y
                if return_features:
                    features.append((name, y))
            else:
                x = layer.forward_from_style(x, style, noise_mode=noise_mode, noise_generator=noise_generator,
                                             noise=noise_inputs.get(name))
                if return_features:
                    features.append((name, x))
        return (image, features) if return_features else image
