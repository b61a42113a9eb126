"""S-space (StyleSpace, Wu et al. 2021) as a first-class API: named per-layer styles, flattening, indexing, stats.

S is the set of outputs of every synthesis layer's affine (style) transform. A :class:`StyleCodes` holds them by
layer name, in synthesis order, each of shape (N, C_layer). Flattening concatenates them into one (N, K) vector;
:class:`StyleLayout` converts between a flat channel index ``k`` and ``(layer_name, channel)``.

StyleGAN3's first w drives the Fourier input's rotation/translation, which is not a style; it is carried along as
``StyleCodes.input_transform`` (N, 4) so that ``synthesis_from_styles(styles(ws)) == synthesis(ws)`` exactly, and
is excluded from the K channels (paper 1 counts 6,175 channels for SG3-T at 256 px, 7,424 for SG2).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterable

import torch


@dataclass(frozen=True)
class StyleLayout:
    """Names and sizes of the style layers, in synthesis order.

    Attributes:
        names: Layer names, e.g. ``("b4_conv1", "b4_torgb", "b8_conv0", ...)`` or ``("L0", ..., "torgb")``.
        sizes: Channels per layer.
    """

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    offsets: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        if len(self.names) != len(self.sizes) or len(set(self.names)) != len(self.names):
            raise ValueError(f"layout needs unique names, one size each; got {self.names}, {self.sizes}")
        offsets, total = [], 0
        for size in self.sizes:
            offsets.append(total)
            total += size
        object.__setattr__(self, "offsets", tuple(offsets))

    @property
    def total_channels(self) -> int:
        """K, the length of the flattened style vector."""
        return sum(self.sizes)

    def index(self, layer: str, channel: int) -> int:
        """Flat index of ``channel`` of ``layer``.

        Raises:
            ValueError: If the layer is unknown or the channel out of range.
        """
        if layer not in self.names:
            raise ValueError(f"unknown style layer {layer!r}; expected one of {self.names}")
        position = self.names.index(layer)
        if not 0 <= channel < self.sizes[position]:
            raise ValueError(f"channel {channel} out of range [0, {self.sizes[position]}) for layer {layer!r}")
        return self.offsets[position] + int(channel)

    def locate(self, index: int) -> tuple[str, int]:
        """(layer name, channel) of flat index ``index``.

        Raises:
            ValueError: If ``index`` is outside [0, K).
        """
        index = int(index)
        if not 0 <= index < self.total_channels:
            raise ValueError(f"style index {index} out of range [0, {self.total_channels})")
        for name, offset, size in zip(self.names, self.offsets, self.sizes):
            if index < offset + size:
                return name, index - offset
        raise AssertionError("unreachable")

    def layer_slice(self, layer: str) -> slice:
        """Slice of the flat vector occupied by ``layer``."""
        start = self.index(layer, 0)
        return slice(start, start + self.sizes[self.names.index(layer)])


@dataclass
class StyleCodes:
    """Per-layer styles of a batch of images.

    Attributes:
        styles: Ordered mapping layer name -> (N, C_layer) float tensor (the affine outputs, before any gain).
        input_transform: StyleGAN3 only: (N, 4) rotation/translation parameters of the Fourier input; None for SG2.
    """

    styles: "OrderedDict[str, torch.Tensor]"
    input_transform: torch.Tensor | None = None

    @property
    def layout(self) -> StyleLayout:
        return StyleLayout(tuple(self.styles), tuple(int(v.shape[1]) for v in self.styles.values()))

    @property
    def batch_size(self) -> int:
        return int(next(iter(self.styles.values())).shape[0])

    def __getitem__(self, layer: str) -> torch.Tensor:
        return self.styles[layer]

    def flatten(self) -> torch.Tensor:
        """All style channels as one (N, K) tensor, layers in synthesis order (differentiable)."""
        return torch.cat(list(self.styles.values()), dim=1)

    def with_flat(self, flat: torch.Tensor) -> "StyleCodes":
        """New codes whose styles come from a flat (N, K) tensor; the input transform is kept (differentiable).

        Raises:
            ValueError: If ``flat`` is not (N, K) for this layout.
        """
        layout = self.layout
        if flat.ndim != 2 or flat.shape[1] != layout.total_channels:
            raise ValueError(f"flat styles must be (N, {layout.total_channels}), got {tuple(flat.shape)}")
        pieces = torch.split(flat, list(layout.sizes), dim=1)
        transform = self.input_transform
        if transform is not None and transform.shape[0] != flat.shape[0]:
            if transform.shape[0] != 1:
                raise ValueError(f"input_transform batch {transform.shape[0]} does not match flat batch "
                                 f"{flat.shape[0]}")
            transform = transform.expand(flat.shape[0], -1)
        return StyleCodes(OrderedDict(zip(layout.names, pieces)), transform)

    def map(self, function) -> "StyleCodes":
        """Apply ``function`` to every tensor (styles and input transform), e.g. ``lambda t: t.detach()``."""
        transform = None if self.input_transform is None else function(self.input_transform)
        return StyleCodes(OrderedDict((k, function(v)) for k, v in self.styles.items()), transform)

    def clone(self) -> "StyleCodes":
        return self.map(torch.clone)

    def detach(self) -> "StyleCodes":
        return self.map(torch.Tensor.detach)

    def to(self, *args, **kwargs) -> "StyleCodes":
        return self.map(lambda t: t.to(*args, **kwargs))

    def select(self, indices) -> "StyleCodes":
        """Codes of a subset of the batch (``indices``: int list, slice or bool mask)."""
        return self.map(lambda t: t[indices])

    def with_channel(self, layer: str, channel: int, value: torch.Tensor | float) -> "StyleCodes":
        """A copy with one channel of one layer set to ``value`` (scalar or (N,)); the original is unchanged."""
        self.layout.index(layer, channel)  # validates
        codes = self.clone()
        codes.styles[layer][:, channel] = value
        return codes


def concatenate_codes(codes: Iterable[StyleCodes]) -> StyleCodes:
    """Concatenate several :class:`StyleCodes` along the batch."""
    codes = list(codes)
    if not codes:
        raise ValueError("concatenate_codes needs at least one StyleCodes")
    names = list(codes[0].styles)
    styles = OrderedDict((name, torch.cat([c.styles[name] for c in codes])) for name in names)
    transform = None
    if codes[0].input_transform is not None:
        transform = torch.cat([c.input_transform for c in codes])
    return StyleCodes(styles, transform)


@torch.no_grad()
def style_statistics(generator, num_samples: int = 1000, batch_size: int = 64, seed: int = 0,
                     truncation_psi: float = 1.0) -> dict:
    """Mean and standard deviation of every style channel over generated samples.

    Paper 1's edit (Eq. 11) interpolates a channel toward its mean; StyleSpace's edit adds multiples of its std.
    Statistics are accumulated in float64.

    Args:
        generator: A :class:`~anonpaper.models.stylegan.generator.StyleGenerator`.
        num_samples: Number of z samples (the data distribution of the generator).
        batch_size: Samples per forward pass.
        seed: Seed of the z sampler (a private ``torch.Generator``; global RNG untouched).
        truncation_psi: Truncation used when mapping.

    Returns:
        Dict with ``mean`` and ``std`` (float32 (K,) tensors on the generator's device), ``mean_codes`` and
        ``std_codes`` (:class:`StyleCodes` with batch 1; for StyleGAN3 their input transform is the first sample's,
        since it is not a style), the ``layout`` and ``num_samples``.
    """
    if num_samples < 2:
        raise ValueError(f"style_statistics needs num_samples >= 2, got {num_samples}")
    device = next(generator.parameters()).device
    rng = torch.Generator().manual_seed(seed)
    sum_x = sum_x2 = None
    count = 0
    template = None
    while count < num_samples:
        n = min(batch_size, num_samples - count)
        z = torch.randn(n, generator.z_dim, generator=rng).to(device)
        codes = generator.styles(generator.mapping(z, truncation_psi=truncation_psi))
        flat = codes.flatten().double()
        if sum_x is None:
            sum_x, sum_x2, template = flat.sum(0), flat.square().sum(0), codes.select(slice(0, 1))
        else:
            sum_x, sum_x2 = sum_x + flat.sum(0), sum_x2 + flat.square().sum(0)
        count += n
    mean = sum_x / count
    variance = (sum_x2 / count - mean.square()).clamp_min(0.0) * count / (count - 1)
    mean, std = mean.float(), variance.sqrt().float()
    return {"mean": mean, "std": std, "mean_codes": template.with_flat(mean[None]),
            "std_codes": template.with_flat(std[None]), "layout": template.layout, "num_samples": count}


def codes_statistics(codes: StyleCodes) -> dict:
    """Per-channel mean and standard deviation (float64 accumulation) of a batch of codes, e.g. the S codes of
    projected real images ("over the data"); same keys as :func:`style_statistics`.

    Raises:
        ValueError: If the batch has fewer than two codes.
    """
    if codes.batch_size < 2:
        raise ValueError(f"codes_statistics needs at least 2 codes, got {codes.batch_size}")
    flat = codes.flatten().detach().double()
    mean, std = flat.mean(dim=0).float(), flat.std(dim=0).float()
    template = codes.detach().select(slice(0, 1))
    return {"mean": mean, "std": std, "mean_codes": template.with_flat(mean[None]),
            "std_codes": template.with_flat(std[None]), "layout": codes.layout, "num_samples": codes.batch_size}
