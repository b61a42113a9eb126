"""StyleGAN2 synthesis network (Karras et al. 2020, "config F" with skip ToRGB), pure PyTorch.

A learned 4x4 constant is refined by blocks of modulated/demodulated 3x3 convolutions, one block per resolution
(4, 8, ..., R). Blocks above 4 px first upsample (zero insertion + [1, 3, 3, 1] filter) in their first conv. Every
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
from anonpaper.models.stylegan.layers import (EqualizedLinear, leaky_relu_gain, lowpass_filter_1d, modulated_conv2d,
                                              upsample2d)
from anonpaper.models.stylegan.sspace import StyleCodes, StyleLayout

NOISE_MODES = ("const", "random", "none")


def sg2_channels(resolution: int, channel_base: int, channel_max: int) -> int:
    """Feature maps at ``resolution`` in StyleGAN2: ``min(channel_base // resolution, channel_max)``."""
    return max(1, min(channel_base // resolution, channel_max))


class ModulatedConvLayer(nn.Module):
    """3x3 modulated conv + noise + bias + leaky ReLU, optionally upsampling x2 first."""

    def __init__(self, in_channels: int, out_channels: int, w_dim: int, resolution: int, upsample: bool):
        super().__init__()
        self.in_channels, self.out_channels, self.resolution, self.upsample = (in_channels, out_channels,
                                                                               resolution, upsample)
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
        if self.upsample:
            # Upsampling commutes with the per-channel modulation, so it can come first.
            x = upsample2d(x, self.resample_filter)
        x = modulated_conv2d(x, self.weight * self.weight_gain, style, demodulate=True, padding=1)
        if noise is None:
            if noise_mode == "const":
                noise = self.noise_const[None, None]
            elif noise_mode == "random":
                noise = torch.randn(x.shape[0], 1, self.resolution, self.resolution, generator=noise_generator,
                                    device="cpu" if noise_generator is not None else x.device)
        if noise is not None:
            x = x + noise.to(device=x.device, dtype=x.dtype) * self.noise_strength.to(x.dtype)
        return leaky_relu_gain(x + self.bias.to(x.dtype)[None, :, None, None])


class ToRGBLayer(nn.Module):
    """1x1 modulated conv without demodulation to image channels, plus bias (linear)."""

    def __init__(self, in_channels: int, image_channels: int, w_dim: int):
        super().__init__()
        self.in_channels = in_channels
        self.affine = EqualizedLinear(w_dim, in_channels, bias_init=1.0)
        self.weight = nn.Parameter(torch.randn(image_channels, in_channels, 1, 1))
        self.weight_gain = 1.0 / math.sqrt(in_channels)
        self.bias = nn.Parameter(torch.zeros(image_channels))

    def forward_from_style(self, x: torch.Tensor, style: torch.Tensor, **_) -> torch.Tensor:
        y = modulated_conv2d(x, self.weight, style * self.weight_gain, demodulate=False)
        return y + self.bias.to(y.dtype)[None, :, None, None]


class SynthesisNetworkSG2(nn.Module):
    """StyleGAN2 synthesis: ws (N, num_ws, w_dim) -> images (N, C, R, R), nominally in [-1, 1] (not clamped)."""

    def __init__(self, config: StyleGANConfig):
        super().__init__()
        self.config = config
        self.resolution, self.image_channels, self.w_dim = config.resolution, config.image_channels, config.w_dim
        resolutions = [2 ** i for i in range(2, config.log2_resolution + 1)]
        width = {r: sg2_channels(r, config.channel_base, config.channel_max) for r in resolutions}
        self.const = nn.Parameter(torch.randn(width[4], 4, 4))
        self.register_buffer("resample_filter", lowpass_filter_1d())
        self.layers = nn.ModuleDict()
        self.w_index: dict[str, int] = {}
        conv_count = 0
        for r in resolutions:
            if r > 4:
                self.layers[f"b{r}_conv0"] = ModulatedConvLayer(width[r // 2], width[r], self.w_dim, r, upsample=True)
                self.w_index[f"b{r}_conv0"] = conv_count
                conv_count += 1
            self.layers[f"b{r}_conv1"] = ModulatedConvLayer(width[r], width[r], self.w_dim, r, upsample=False)
            self.w_index[f"b{r}_conv1"] = conv_count
            conv_count += 1
            self.layers[f"b{r}_torgb"] = ToRGBLayer(width[r], self.image_channels, self.w_dim)
            self.w_index[f"b{r}_torgb"] = conv_count  # shared with the next block's conv0
        self.num_ws = conv_count + 1

    @property
    def layout(self) -> StyleLayout:
        return StyleLayout(tuple(self.layers), tuple(layer.in_channels for layer in self.layers.values()))

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
                image = y if image is None else upsample2d(image, self.resample_filter) + y
                if return_features:
                    features.append((name, y))
            else:
                x = layer.forward_from_style(x, style, noise_mode=noise_mode, noise_generator=noise_generator,
                                             noise=noise_inputs.get(name))
                if return_features:
                    features.append((name, x))
        return (image, features) if return_features else image
