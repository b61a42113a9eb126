"""StyleGAN2 residual discriminator with minibatch standard deviation (Karras et al. 2020, config E/F), pure PyTorch.

FromRGB (1x1) at full resolution, then one residual block per resolution down to 8 px (two 3x3 convs, the second
downsampling x2 after a [1, 3, 3, 1] low-pass, plus a 1x1 downsampling skip; the sum is scaled by sqrt(1/2)), then
an epilogue at 4 px: minibatch std, 3x3 conv, fully connected, and a linear output logit. Widths follow
``min(discriminator_channel_base // resolution, discriminator_channel_max)``.

:meth:`ResidualDiscriminator.trunk` exposes the convolutional trunk (no minibatch std, no output layer), which is
what GMIA's encoder is built from.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from anonpaper.models.stylegan.config import StyleGANConfig
from anonpaper.models.stylegan.layers import (EqualizedLinear, downsample2d, leaky_relu_gain, lowpass_filter_1d,
                                              minibatch_std, upfirdn2d)
from anonpaper.models.stylegan.synthesis_sg2 import sg2_channels


def downsampling_conv_padding(filter_taps: int, kernel_size: int, down: int = 2) -> tuple[int, int, int, int]:
    """Padding ``(x_lo, x_hi, y_lo, y_hi)`` of the low-pass before an UNPADDED stride-``down`` ``kernel_size`` conv.

    The reference rule (Karras et al. 2020, official ``conv2d_resample``): the conv's own padding
    ``kernel_size // 2`` plus ``(taps - down + 1) // 2`` below and ``(taps - down) // 2`` above, all applied to the
    filter. For 4 taps, a 3x3 kernel and ``down = 2`` this is 2 on every side; output side = input side / 2, and
    an impulse at input pixel ``p`` lands where the 1x1 skip path (filter padded 1 and 1, then every 2nd sample)
    puts it: both paths sample the input at ``2 i + 0.5``.

    Example:
        >>> downsampling_conv_padding(4, 3)
        (2, 2, 2, 2)
    """
    low = kernel_size // 2 + (filter_taps - down + 1) // 2
    high = kernel_size // 2 + (filter_taps - down) // 2
    return (low, high, low, high)


class EqualizedConv2d(nn.Module):
    """Conv layer with equalised learning rate, optional x2 downsampling (low-pass first) and leaky ReLU."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, bias: bool = True,
                 activation: str = "lrelu", down: bool = False, gain: float = 1.0):
        super().__init__()
        self.kernel_size, self.down, self.activation, self.gain = kernel_size, down, activation, gain
        self.weight = nn.Parameter(torch.randn(out_channels, in_channels, kernel_size, kernel_size))
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        self.weight_gain = 1.0 / math.sqrt(in_channels * kernel_size ** 2)
        self.register_buffer("resample_filter", lowpass_filter_1d())
        self.down_padding = downsampling_conv_padding(self.resample_filter.numel(), kernel_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = (self.weight * self.weight_gain).to(x.dtype)
        bias = None if self.bias is None else self.bias.to(x.dtype)
        if self.down and self.kernel_size == 1:
            x = F.conv2d(downsample2d(x, self.resample_filter), weight, bias)
        elif self.down:
            x = F.conv2d(upfirdn2d(x, self.resample_filter, padding=self.down_padding), weight, bias, stride=2)
        else:
            x = F.conv2d(x, weight, bias, padding=self.kernel_size // 2)
        if self.activation == "lrelu":
            x = leaky_relu_gain(x)
        return x * self.gain if self.gain != 1.0 else x


class DiscriminatorBlock(nn.Module):
    """Residual block: conv3x3 -> conv3x3(down) plus 1x1(down) skip, scaled by sqrt(1/2)."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv0 = EqualizedConv2d(in_channels, in_channels, 3)
        self.conv1 = EqualizedConv2d(in_channels, out_channels, 3, down=True, gain=math.sqrt(0.5))
        self.skip = EqualizedConv2d(in_channels, out_channels, 1, bias=False, activation="linear", down=True,
                                    gain=math.sqrt(0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.skip(x) + self.conv1(self.conv0(x))


class ResidualDiscriminator(nn.Module):
    """Images (N, C, R, R) in [-1, 1] -> realness logits (N,) (higher = judged more real)."""

    def __init__(self, config: StyleGANConfig, seed: int | None = 0):
        super().__init__()
        self.config = config
        self.resolution, self.image_channels = config.resolution, config.image_channels
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            width = {r: sg2_channels(r, config.discriminator_channel_base, config.discriminator_channel_max)
                     for r in [2 ** i for i in range(2, config.log2_resolution + 1)]}
            self.from_rgb = EqualizedConv2d(config.image_channels, width[config.resolution], 1)
            self.blocks = nn.ModuleList(DiscriminatorBlock(width[r], width[r // 2])
                                        for r in [2 ** i for i in range(config.log2_resolution, 2, -1)])
            self.mbstd_group_size, self.mbstd_channels = (config.minibatch_std_group_size,
                                                          config.minibatch_std_channels)
            self.epilogue_conv = EqualizedConv2d(width[4] + self.mbstd_channels, width[4], 3)
            self.epilogue_fc = EqualizedLinear(width[4] * 16, width[4], activation="lrelu")
            self.output = EqualizedLinear(width[4], 1)
        self.trunk_channels = width[4]

    def _check(self, images: torch.Tensor) -> None:
        expected = (self.image_channels, self.resolution, self.resolution)
        if images.ndim != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(f"discriminator expects images (N, {expected[0]}, {expected[1]}, {expected[2]}), "
                             f"got {tuple(images.shape)}")

    def trunk(self, images: torch.Tensor) -> torch.Tensor:
        """Convolutional trunk: (N, C, R, R) -> (N, trunk_channels, 4, 4) features."""
        self._check(images)
        x = self.from_rgb(images)
        for block in self.blocks:
            x = block(x)
        return x

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.trunk(images)
        x = minibatch_std(x, self.mbstd_group_size, self.mbstd_channels)
        x = self.epilogue_conv(x)
        x = self.epilogue_fc(x.flatten(1))
        return self.output(x).squeeze(1)
