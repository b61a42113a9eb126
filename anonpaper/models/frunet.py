"""FR-UNet-style full-resolution segmentation network (Liu et al., 2022), as used by VS-Snow (paper 2).

Facts followed (Liu et al., IEEE J. Biomed. Health Inform. 2022, and their public code): an HRNet-like network that keeps a full-resolution branch all the way
through, 4 resolutions (32/64/128/256 filters in the paper; configurable here for CPU profiles), blocks of
2 x (conv3x3 - BatchNorm - Dropout 0.2 - LeakyReLU 0.1), and an output equal to the mean of 5 full-resolution
heads. The layout below is this package's own design of such a network:

* The network is a grid of nodes (level ``l``, column ``j``); level ``l`` works at 1/2^l of the input size with
  ``widths[l]`` channels. With ``L`` levels there are ``2 (L - 1) + 1`` columns and level ``l`` is active in
  columns ``l .. 2 (L - 1) - l``: the grid widens like an encoder and narrows like a decoder, but the
  full-resolution level 0 runs through every column.
* Node (l, j) sums the node (l, j-1) (same level), the node (l-1, j-1) downsampled by a stride-2 conv and the node
  (l+1, j-1) bilinearly upsampled and projected by a 1x1 conv (multi-resolution fusion), then applies a block.
* The last ``heads`` full-resolution nodes each get a 1x1 conv head; the output is the mean of their logits.

With the default 4 levels there are 7 columns, so 5 heads are the full-resolution nodes of columns 2..6.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn
from torch.nn import functional as F


class FRBlock(nn.Sequential):
    """2 x (conv3x3 -> BatchNorm -> Dropout -> LeakyReLU(0.1)), the FR-UNet block.

    Args:
        in_channels: Input channels.
        out_channels: Output channels.
        dropout: Dropout probability (0.2 in FR-UNet).
    """

    def __init__(self, in_channels: int, out_channels: int, dropout: float = 0.2):
        layers: list[nn.Module] = []
        for channels in (in_channels, out_channels):
            layers += [nn.Conv2d(channels, out_channels, 3, padding=1, bias=False), nn.BatchNorm2d(out_channels)]
            if dropout > 0:
                layers.append(nn.Dropout2d(dropout))
            layers.append(nn.LeakyReLU(0.1, inplace=True))
        super().__init__(*layers)


class FRUNet(nn.Module):
    """Full-resolution U-Net-like network (FR-UNet style) with averaged full-resolution heads.

    Args:
        in_channels: Image channels (1 for the green channel, 3 for RGB as in VS-Snow).
        out_channels: Logit channels (1 for vessel / background).
        widths: Channels per resolution level, highest resolution first; ``len(widths)`` levels.
            FR-UNet uses (32, 64, 128, 256); CPU profiles use e.g. (8, 16, 32, 64).
        dropout: Dropout probability inside every block (0.2 in FR-UNet).
        heads: Number of full-resolution heads averaged for the output (5 in FR-UNet); at most the number of
            columns minus 1, ``2 * (len(widths) - 1)``.

    Raises:
        ValueError: On empty or non-positive widths, non-positive channels, dropout outside [0, 1) or an invalid
            number of heads.
    """

    def __init__(self, in_channels: int, out_channels: int = 1, widths: Sequence[int] = (32, 64, 128, 256),
                 dropout: float = 0.2, heads: int = 5):
        super().__init__()
        widths = tuple(widths)
        if not widths or any(not isinstance(width, int) or width < 1 for width in widths):
            raise ValueError(f"FRUNet: widths must be a non-empty sequence of positive integers, got {widths!r}")
        if not isinstance(in_channels, int) or in_channels < 1 or not isinstance(out_channels, int) \
                or out_channels < 1:
            raise ValueError(f"FRUNet: channel counts must be positive integers, got in={in_channels!r}, "
                             f"out={out_channels!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"FRUNet: dropout must be in [0, 1), got {dropout!r}")
        levels = len(widths)
        columns = 2 * (levels - 1) + 1
        if not isinstance(heads, int) or not 1 <= heads <= max(1, columns - 1):
            raise ValueError(f"FRUNet: heads must be an integer in [1, {max(1, columns - 1)}] for {levels} levels, "
                             f"got {heads!r}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.widths, self.levels, self.columns, self.heads = widths, levels, columns, heads
        self.size_multiple = 2 ** (levels - 1)
        self.stem = FRBlock(in_channels, widths[0], dropout)
        self.blocks = nn.ModuleDict()
        self.downsamplers = nn.ModuleDict()
        self.upsamplers = nn.ModuleDict()
        for column in range(1, columns):
            for level in self._active_levels(column):
                key = f"{level}_{column}"
                self.blocks[key] = FRBlock(widths[level], widths[level], dropout)
                if level - 1 in self._active_levels(column - 1):
                    self.downsamplers[key] = nn.Conv2d(widths[level - 1], widths[level], 3, stride=2, padding=1)
                if level + 1 in self._active_levels(column - 1):
                    self.upsamplers[key] = nn.Conv2d(widths[level + 1], widths[level], 1)
        self.output_heads = nn.ModuleList(nn.Conv2d(widths[0], out_channels, 1) for _ in range(heads))

    def _active_levels(self, column: int) -> list[int]:
        return [level for level in range(self.levels) if level <= column <= self.columns - 1 - level]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits, the mean of the full-resolution heads.

        Args:
            x: Float tensor (N, in_channels, H, W), H and W divisible by ``2 ** (len(widths) - 1)``.

        Returns:
            Float tensor (N, out_channels, H, W) of logits.
        """
        if x.ndim != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f"FRUNet expects input of shape (N, {self.in_channels}, H, W), got {tuple(x.shape)}")
        if x.shape[-2] % self.size_multiple or x.shape[-1] % self.size_multiple:
            raise ValueError(f"FRUNet with {self.levels} levels needs H and W divisible by {self.size_multiple}, "
                             f"got {x.shape[-2]}x{x.shape[-1]}")
        previous = {0: self.stem(x)}
        full_resolution = [previous[0]]
        for column in range(1, self.columns):
            current = {}
            for level in self._active_levels(column):
                key = f"{level}_{column}"
                total = previous.get(level)
                if key in self.downsamplers:
                    down = self.downsamplers[key](previous[level - 1])
                    total = down if total is None else total + down
                if key in self.upsamplers:
                    source = previous[level + 1]
                    size = (source.shape[-2] * 2, source.shape[-1] * 2)
                    up = self.upsamplers[key](F.interpolate(source, size=size, mode="bilinear",
                                                            align_corners=False))
                    total = up if total is None else total + up
                current[level] = self.blocks[key](total)
            previous = current
            full_resolution.append(current[0])
        logits = [head(feature) for head, feature in zip(self.output_heads, full_resolution[-self.heads:])]
        return torch.stack(logits, dim=0).mean(dim=0)
