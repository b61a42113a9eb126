"""U-Net (Ronneberger et al., 2015) with feature taps for the domain LPIPS of paper 1.

Paper 1 (Zhao et al., 2023) measures perceptual distance with the features of a vessel-segmentation U-Net and a
hard-exudate U-Net on 8 layers each: the 4 encoder outputs after downsampling and the 4 decoder outputs after
upsampling. :meth:`UNet.forward_features` returns exactly those tensors (``2 * depth`` of them in general).

Layout for ``depth = 4`` and ``base_width = w`` (spatial size relative to the input in brackets)::

    stem        DoubleConv(in -> w)                         [1]
    down 1..4   MaxPool2 + DoubleConv(w*2^(i-1) -> w*2^i)    [1/2, 1/4, 1/8, 1/16]   <- encoder taps
    up   1..4   Upsample2 + concat skip + DoubleConv         [1/8, 1/4, 1/2, 1]       <- decoder taps
    head        Conv1x1(w -> out)                           [1]

Inputs must have a height and width divisible by ``2 ** depth`` (``UNet.size_multiple``); the segmentation helpers
in :mod:`anonpaper.train.segmenter` pad to that multiple.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class DoubleConv(nn.Sequential):
    """Two (conv3x3 -> BatchNorm -> ReLU) layers, optionally with dropout between them.

    Args:
        in_channels: Input channels.
        out_channels: Output channels.
        dropout: Dropout probability after the first activation (0 disables it).
    """

    def __init__(self, in_channels: int, out_channels: int, dropout: float = 0.0):
        layers: list[nn.Module] = [
            nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
        ]
        if dropout > 0:
            layers.append(nn.Dropout2d(dropout))
        layers += [
            nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
        ]
        super().__init__(*layers)


class _Up(nn.Module):
    """Bilinear x2 upsampling, 1x1 conv to halve the channels, concatenation with the skip, DoubleConv."""

    def __init__(self, in_channels: int, skip_channels: int, out_channels: int, dropout: float):
        super().__init__()
        # Bilinear upsampling + 1x1 conv instead of a transposed conv: no checkerboard artefacts, and the
        # backward pass of F.interpolate is deterministic on CPU.
        self.reduce = nn.Conv2d(in_channels, skip_channels, 1)
        self.block = DoubleConv(2 * skip_channels, out_channels, dropout)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        x = F.interpolate(x, size=skip.shape[-2:], mode="bilinear", align_corners=False)
        return self.block(torch.cat([skip, self.reduce(x)], dim=1))


class UNet(nn.Module):
    """U-Net for binary or multi-class segmentation with encoder/decoder feature taps.

    Args:
        in_channels: Image channels (1 grey, 3 RGB).
        out_channels: Logit channels (1 for a binary mask).
        base_width: Channels of the full-resolution stem; stage ``i`` has ``base_width * 2**i``.
        depth: Number of downsampling (and upsampling) stages; the network has ``2 * depth`` feature taps.
        dropout: Dropout probability inside each DoubleConv (0 disables it).

    Raises:
        ValueError: On non-positive channel counts, width or depth, or dropout outside [0, 1).
    """

    def __init__(self, in_channels: int, out_channels: int, base_width: int = 32, depth: int = 4,
                 dropout: float = 0.0):
        super().__init__()
        for name, value in (("in_channels", in_channels), ("out_channels", out_channels),
                            ("base_width", base_width), ("depth", depth)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"UNet: {name} must be a positive integer, got {value!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"UNet: dropout must be in [0, 1), got {dropout!r}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.base_width, self.depth = base_width, depth
        self.size_multiple = 2**depth
        widths = [base_width * 2**i for i in range(depth + 1)]
        self.stem = DoubleConv(in_channels, widths[0], dropout)
        self.down = nn.ModuleList(
            nn.Sequential(nn.MaxPool2d(2), DoubleConv(widths[i], widths[i + 1], dropout)) for i in range(depth))
        self.up = nn.ModuleList(_Up(widths[i + 1], widths[i], widths[i], dropout) for i in reversed(range(depth)))
        self.head = nn.Conv2d(widths[0], out_channels, 1)

    @property
    def feature_channels(self) -> list[int]:
        """Channel counts of the ``2 * depth`` tensors returned by :meth:`forward_features`."""
        encoder = [self.base_width * 2 ** (i + 1) for i in range(self.depth)]
        return encoder + [self.base_width * 2**i for i in reversed(range(self.depth))]

    def _check_input(self, x: torch.Tensor) -> None:
        if x.ndim != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f"UNet expects input of shape (N, {self.in_channels}, H, W), got {tuple(x.shape)}")
        height, width = x.shape[-2:]
        if height % self.size_multiple or width % self.size_multiple:
            raise ValueError(f"UNet(depth={self.depth}) needs H and W divisible by {self.size_multiple}, "
                             f"got {height}x{width}; pad the input (see anonpaper.train.segmenter.segment)")

    def _run(self, x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        self._check_input(x)
        skips = [self.stem(x)]
        encoder_taps = []
        for stage in self.down:
            skips.append(stage(skips[-1]))
            encoder_taps.append(skips[-1])
        decoder_taps = []
        y = skips[-1]
        for stage, skip in zip(self.up, reversed(skips[:-1])):
            y = stage(y, skip)
            decoder_taps.append(y)
        return encoder_taps + decoder_taps, y

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits.

        Args:
            x: Float tensor (N, in_channels, H, W), H and W divisible by ``2 ** depth``.

        Returns:
            Float tensor (N, out_channels, H, W) of logits (apply sigmoid/softmax for probabilities).
        """
        _, last = self._run(x)
        return self.head(last)

    def forward_features(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The ``2 * depth`` feature taps (the 8 layers of paper 1's domain LPIPS for ``depth = 4``).

        Args:
            x: Float tensor (N, in_channels, H, W), H and W divisible by ``2 ** depth``.

        Returns:
            List of float tensors: first the ``depth`` encoder outputs after each downsampling stage, of shapes
            (N, w*2^i, H/2^i, W/2^i) for i = 1..depth, then the ``depth`` decoder outputs after each
            upsampling stage, of shapes (N, w*2^i, H/2^i, W/2^i) for i = depth-1..0 (w = ``base_width``).
        """
        taps, _ = self._run(x)
        return taps
