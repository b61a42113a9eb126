"""Vascular de-identification by S-space channel editing (Zhao et al., "Vascular structure de-identification of
fundus images by latent code manipulation", Biomedical Optics Express 14(10):5466, 2023).

The method has three steps, each a function here:

1. :func:`contribution_scores` (paper Eq. 8-10). For a generated image ``I = G(s)`` and its vessel mask ``M``, the
   gradient map of S channel ``k`` is ``|d(I * M) / d s_k|``; its contribution score ``R_k`` is the mean of the
   ``||M||_0`` largest entries of that map (Eq. 9), and scores are averaged over ``T`` images (Eq. 10). The
   channel with the largest mean score, mapped to ``(layer, channel)``, is the one to edit.
2. :func:`edit_channels` (Eq. 11): ``s[k*] <- (1 - alpha) s[k*] + alpha mu[k*]`` with ``mu`` the channel means of
   S (:func:`~anonpaper.models.stylegan.style_statistics`), ``alpha`` in [0, 1] (0.5 in the paper's Table 2).
3. :func:`tradeoff_curves` (Eq. 14): the similarity trade-off score of compared methods over the lesion weight
   ``eta``, computed by :func:`anonpaper.metrics.tradeoff.similarity_tradeoff_score`.

How the Jacobian is computed. ``K`` backward passes (one per channel, each with an image-sized output) would be
wasteful: a gradient map is one column of the Jacobian, i.e. one Jacobian-vector product with a one-hot tangent.
:func:`jvp_columns` evaluates ``B`` such columns at once with forward-mode AD (``torch.func.jvp``) vectorised by
``torch.func.vmap`` over the tangents: the primal pass runs once per chunk and only the tangents are batched.
Channels are processed layer by layer, and only the scored layer's styles carry tangents, so the layers before it
run as plain (primal) computations. Images of a batch are independent in both generators (no batch statistics at
inference), so one tangent chunk covers all images of an image group at once.

Reading of Eq. 9 for colour images. The paper vectorises ``d(I * M) / d s_k`` and averages its top ``||M||_0``
entries, where ``||M||_0`` counts mask *pixels*. We take the vector over all ``C x H x W`` entries (the mask is
broadcast over colour channels), so for RGB images the top ``||M||_0`` of the ``3 ||M||_0`` masked entries count;
for one-channel images this is exactly the mean of ``|dI/ds_k|`` over the mask pixels (weighted by a soft mask).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np
import torch
from torch.func import jvp, vmap

from anonpaper.metrics.tradeoff import similarity_tradeoff_score
from anonpaper.models.stylegan.sspace import StyleCodes, StyleLayout

__all__ = ["ChannelScores", "jvp_columns", "style_channel_jacobians", "contribution_scores", "edit_channels",
           "tradeoff_curves", "check_masks", "resolve_channels"]


@dataclass(frozen=True)
class ChannelScores:
    """Per-channel scores of a set of S channels, averaged over images.

    Attributes:
        indices: ``(J,)`` int64 flat S indices of the scored channels (ascending).
        scores: ``(J,)`` float64 mean score over images (higher = more related to the region).
        per_image: ``(T, J)`` float64 score of every image.
        layout: The generator's :class:`~anonpaper.models.stylegan.StyleLayout` (index <-> (layer, channel)).
    """

    indices: torch.Tensor
    scores: torch.Tensor
    per_image: torch.Tensor
    layout: StyleLayout

    @property
    def ranking(self) -> torch.Tensor:
        """``(J,)`` flat S indices sorted by decreasing mean score (ties keep ascending index order)."""
        order = torch.sort(self.scores, descending=True, stable=True).indices
        return self.indices[order]

    @property
    def best_index(self) -> int:
        """Flat S index ``k*`` of the top channel (paper Eq. 10)."""
        return int(self.ranking[0])

    def names(self) -> list[tuple[str, int]]:
        """``(layer, channel)`` of every scored channel, in the order of :attr:`indices`."""
        return [self.layout.locate(int(index)) for index in self.indices]

    def top(self, count: int = 10) -> list[dict]:
        """The ``count`` best channels as dicts ``{"index", "layer", "channel", "score"}``, best first.

        Raises:
            ValueError: If ``count`` is not a positive integer.
        """
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"count: expected a positive integer, observed {count!r}")
        position = {int(index): i for i, index in enumerate(self.indices)}
        rows = []
        for index in self.ranking[:count].tolist():
            layer, channel = self.layout.locate(index)
            rows.append({"index": index, "layer": layer, "channel": channel,
                         "score": float(self.scores[position[index]])})
        return rows


def jvp_columns(render: Callable[[torch.Tensor], torch.Tensor], point: torch.Tensor,
                columns: Sequence[int] | torch.Tensor) -> torch.Tensor:
    """Jacobian columns ``d render(point) / d point[:, c]`` for several coordinates ``c``, by batched forward mode.

    ``render`` maps ``(N, D)`` points to ``(N, ...)`` outputs, sample ``n``'s output depending only on
    ``point[n]``; then one tangent that is one-hot at coordinate ``c`` for every sample gives all ``N`` columns
    for ``c`` in one JVP. The ``B`` tangents are vectorised with ``torch.func.vmap``.

    Args:
        render: Differentiable function ``(N, D) -> (N, *out)``; samples must not interact.
        point: ``(N, D)`` floating tensor at which the Jacobian is taken.
        columns: ``B`` coordinates in ``[0, D)``.

    Returns:
        ``(B, N, *out)`` tensor of the point's dtype: entry ``[b, n]`` is ``d render(point)[n] / d point[n, c_b]``.

    Raises:
        ValueError: If ``point`` is not 2-D floating or a column is out of range.
    """
    if not isinstance(point, torch.Tensor) or point.ndim != 2 or not point.is_floating_point():
        observed = tuple(point.shape) if isinstance(point, torch.Tensor) else type(point).__name__
        raise ValueError(f"point: expected a floating tensor (N, D), observed {observed}")
    columns = torch.as_tensor(columns, dtype=torch.long).reshape(-1)
    dimension = point.shape[1]
    if columns.numel() == 0 or int(columns.min()) < 0 or int(columns.max()) >= dimension:
        raise ValueError(f"columns: expected 1+ coordinates in [0, {dimension}), observed {columns.tolist()}")
    tangents = torch.zeros(columns.numel(), *point.shape, dtype=point.dtype, device=point.device)
    tangents[torch.arange(columns.numel()), :, columns.to(point.device)] = 1.0
    point = point.detach()

    def push_forward(tangent: torch.Tensor) -> torch.Tensor:
        return jvp(render, (point,), (tangent,))[1]

    # Grad mode stays on: the generator's layers pick in-place activations when it is off, and an in-place op on
    # a vmapped dual tensor costs torch a per-tangent loop (about 1.4x slower JVPs on sg3t-cpu64). Forward mode
    # records no graph as long as nothing in ``render`` requires grad (style_channel_jacobians freezes the
    # generator). The first JVP of a process makes torch load its JVP decompositions with torch.jit.script, which
    # emits a FutureWarning from inside torch (not actionable; in a notebook it would be a stderr block).
    with torch.enable_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning)
        return vmap(push_forward)(tangents).detach()


def resolve_channels(layout: StyleLayout, layers: Sequence[str] | None = None,
                     channels: Sequence | torch.Tensor | None = None) -> torch.Tensor:
    """Flat S indices selected by layer names or by explicit channels.

    Args:
        layout: The generator's style layout.
        layers: Layer names whose channels are all selected (None with ``channels`` None: every layer).
        channels: Flat indices, or ``(layer, channel)`` pairs; exclusive with ``layers``.

    Returns:
        ``(J,)`` int64 sorted unique flat indices.

    Raises:
        ValueError: If both selectors are given, a layer or channel is unknown, or the selection is empty.
    """
    if layers is not None and channels is not None:
        raise ValueError("select channels by layers or by channels, not both")
    if channels is not None:
        flat = []
        for item in (channels.tolist() if isinstance(channels, torch.Tensor) else list(channels)):
            if isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str):
                flat.append(layout.index(item[0], int(item[1])))
            else:
                if isinstance(item, bool) or not isinstance(item, (int, np.integer)):
                    raise ValueError(f"channels: expected flat ints or (layer, channel) pairs, observed {item!r}")
                layout.locate(int(item))  # validates the range
                flat.append(int(item))
        selected = sorted(set(flat))
    else:
        names = layout.names if layers is None else list(layers)
        selected = []
        for name in names:
            selected.extend(range(layout.layer_slice(name).start, layout.layer_slice(name).stop))
        selected = sorted(set(selected))
    if not selected:
        raise ValueError("channel selection is empty: expected at least one S channel")
    return torch.tensor(selected, dtype=torch.long)


def _progress(total: int, enabled: bool, description: str):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=description, unit="chunk")


def style_channel_jacobians(generator, codes: StyleCodes, channels: torch.Tensor, chunk_size: int = 4,
                            image_batch_size: int | None = None, progress: bool = False,
                            description: str = "S-space Jacobian") -> Iterator[tuple[slice, torch.Tensor,
                                                                                       torch.Tensor]]:
    """Gradient maps ``dG(s)/ds_k`` of S channels, chunk by chunk (the engine of the contribution scores).

    Chunks never straddle layers: within a layer, only that layer's styles carry tangents.

    Args:
        generator: A :class:`~anonpaper.models.stylegan.StyleGenerator` (its dtype must match ``codes``).
        codes: S codes of ``T`` images.
        channels: ``(J,)`` flat S indices (e.g. from :func:`resolve_channels`).
        chunk_size: Channels per vectorised JVP (memory grows linearly with it and with the image group).
        image_batch_size: Images per group (None: all ``T`` at once).
        progress: Show a tqdm bar over chunks.
        description: Label of the progress bar.

    Yields:
        ``(image_slice, chunk_indices, maps)``: the images' slice of the batch, the ``(B,)`` flat indices and
        ``maps`` of shape ``(B, n, C, H, W)`` (same dtype as the codes) with ``maps[b, i] = dI_i / ds_{k_b}``.

    Raises:
        ValueError: If ``chunk_size`` or ``image_batch_size`` is not a positive integer.
    """
    for value, name in ((chunk_size, "chunk_size"), (image_batch_size or 1, "image_batch_size")):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name}: expected a positive integer, observed {value!r}")
    layout = codes.layout
    channels = torch.as_tensor(channels, dtype=torch.long).reshape(-1)
    total = codes.batch_size
    group = total if image_batch_size is None else int(image_batch_size)
    by_layer: dict[str, list[int]] = {}
    for index in channels.tolist():
        layer, local = layout.locate(index)
        by_layer.setdefault(layer, []).append(local)
    plan = [(layer, locals_[start:start + chunk_size]) for layer, locals_ in by_layer.items()
            for start in range(0, len(locals_), chunk_size)]
    bar = _progress(len(plan) * -(-total // group), progress, description)
    frozen = [parameter for parameter in generator.parameters() if parameter.requires_grad]
    for parameter in frozen:  # no autograd graph through the JVPs (see jvp_columns); restored below
        parameter.requires_grad_(False)
    try:
        for start in range(0, total, group):
            images = slice(start, min(start + group, total))
            subset = codes.select(images).detach()
            for layer, local_channels in plan:
                def render(layer_styles: torch.Tensor, layer=layer, subset=subset) -> torch.Tensor:
                    styles = subset.styles.copy()
                    styles[layer] = layer_styles
                    return generator.synthesis_from_styles(StyleCodes(styles, subset.input_transform))

                maps = jvp_columns(render, subset.styles[layer], local_channels)
                flat = torch.tensor([layout.index(layer, c) for c in local_channels], dtype=torch.long)
                yield images, flat, maps
                if bar is not None:
                    bar.update(1)
    finally:
        for parameter in frozen:
            parameter.requires_grad_(True)
        if bar is not None:
            bar.close()


def check_masks(masks, count: int, size: tuple[int, int], name: str = "masks") -> torch.Tensor:
    """Validate region masks: ``(T, H, W)`` or ``(T, 1, H, W)``, finite values in [0, 1]; returns float64 (T, H, W).

    Raises:
        ValueError: On a wrong shape, values outside [0, 1], or an empty mask (``||M||_0 = 0``).
    """
    tensor = torch.as_tensor(np.asarray(masks) if not isinstance(masks, torch.Tensor) else masks)
    if tensor.ndim == 4 and tensor.shape[1] == 1:
        tensor = tensor[:, 0]
    if tensor.ndim != 3 or tensor.shape[0] != count or tuple(tensor.shape[1:]) != tuple(size):
        raise ValueError(f"{name}: expected ({count}, {size[0]}, {size[1]}) or ({count}, 1, {size[0]}, {size[1]}), "
                         f"observed {tuple(torch.as_tensor(masks).shape)}")
    tensor = tensor.detach().to("cpu", torch.float64)
    if not torch.isfinite(tensor).all() or tensor.min() < 0 or tensor.max() > 1:
        raise ValueError(f"{name}: expected finite values in [0, 1], observed range "
                         f"[{tensor.min().item()}, {tensor.max().item()}]")
    empty = (tensor.flatten(1) != 0).sum(1) == 0
    if empty.any():
        raise ValueError(f"{name}: expected every mask to have nonzero pixels, observed empty masks at "
                         f"{torch.nonzero(empty).flatten().tolist()}")
    return tensor


def _top_mask_count_mean(maps: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
    """Eq. 9 for a chunk: ``maps`` (B, n, C, H, W), ``masks`` (n, H, W) -> (B, n) mean of the top ``||M||_0``."""
    masked = (maps.abs() * masks[None, :, None].to(maps.dtype)).flatten(2)  # (B, n, C*H*W)
    counts = (masks.flatten(1) != 0).sum(1).to(maps.device)  # (n,) mask pixels
    if maps.shape[2] == 1:
        # One channel: the masked map has exactly ||M||_0 possibly-nonzero entries, so its top ||M||_0 are all of them.
        return masked.sum(2) / counts[None].to(maps.dtype)
    top = torch.topk(masked, int(counts.max()), dim=2, sorted=True).values.cumsum(dim=2)
    picked = top.gather(2, (counts - 1)[None, :, None].expand(top.shape[0], -1, 1))[..., 0]
    return picked / counts[None].to(maps.dtype)


def contribution_scores(generator, codes: StyleCodes, masks, layers: Sequence[str] | None = None,
                        channels: Sequence | torch.Tensor | None = None, chunk_size: int = 4,
                        image_batch_size: int | None = None, progress: bool = True) -> ChannelScores:
    """Contribution score of every selected S channel to the masked region (paper Eq. 9-10).

    ``R_k(i) = mean of the ||M_i||_0 largest entries of |d(I_i * M_i) / d s_k|`` (see the module docstring for
    colour images), and the returned score is ``mean_i R_k(i)``; :attr:`ChannelScores.best_index` is ``k*``.

    Args:
        generator: A :class:`~anonpaper.models.stylegan.StyleGenerator`, in the dtype of ``codes``.
        codes: S codes of the ``T`` images (generated, or projected real images mapped to S).
        masks: ``(T, H, W)`` or ``(T, 1, H, W)`` region masks in [0, 1] at the generator's resolution (vessel
            masks from a segmenter applied to ``G(codes)``); each must have a nonzero pixel.
        layers: Score only these style layers (default: all).
        channels: Score only these channels (flat indices or ``(layer, channel)`` pairs); exclusive with ``layers``.
        chunk_size: Channels per vectorised JVP; results do not depend on it. Speed does, a little: on one CPU
            core 8 and 16 were within noise of each other for the 64 px StyleGAN3-T
            (``benchmarks/bench_jacobian.py``); a GPU likely wants more.
        image_batch_size: Images per JVP group (None: all at once); results do not depend on it.
        progress: Show a tqdm bar over chunks.

    Returns:
        :class:`ChannelScores` (float64 scores, ``(T, J)`` per image).

    Raises:
        ValueError: On malformed masks or channel selections.

    Example:
        >>> from anonpaper.models.stylegan import StyleGenerator, get_config
        >>> G = StyleGenerator(get_config("sg3t-tiny"), seed=0)
        >>> codes = G.styles(G.mapping(G.sample_latents(2, seed=1))).detach()
        >>> masks = torch.zeros(2, 32, 32); masks[:, 10:20, 5:25] = 1
        >>> result = contribution_scores(G, codes, masks, layers=["torgb"], progress=False)
        >>> tuple(result.per_image.shape), result.top(1)[0]["layer"]
        ((2, 16), 'torgb')
    """
    layout = codes.layout
    resolution = generator.resolution
    masks = check_masks(masks, codes.batch_size, (resolution, resolution))
    selected = resolve_channels(layout, layers, channels)
    column = {int(index): j for j, index in enumerate(selected)}
    per_image = torch.zeros(codes.batch_size, selected.numel(), dtype=torch.float64)
    for images, flat, maps in style_channel_jacobians(generator, codes, selected, chunk_size, image_batch_size,
                                                      progress, "contribution scores"):
        scores = _top_mask_count_mean(maps, masks[images].to(maps.device))  # (B, n)
        per_image[images, [column[int(k)] for k in flat]] = scores.t().to("cpu", torch.float64)
    return ChannelScores(selected, per_image.mean(0), per_image, layout)


def edit_channels(codes: StyleCodes, channels, mean, alpha: float) -> StyleCodes:
    """Move S channels toward their means (paper Eq. 11): ``s[k] <- (1 - alpha) s[k] + alpha mu[k]``.

    Args:
        codes: S codes of ``N`` images (unchanged; a new object is returned).
        channels: One flat index, a ``(layer, channel)`` pair, or a sequence of either.
        mean: ``(K,)`` channel means (``style_statistics(G)["mean"]``), or that whole dict.
        alpha: Edit strength in [0, 1]: 0 is the identity, 1 sets the channels to their means.

    Returns:
        New :class:`StyleCodes` (same input transform); differentiable in ``codes``.

    Raises:
        ValueError: If ``alpha`` is outside [0, 1], ``mean`` is not ``(K,)`` or a channel is unknown.

    Example:
        >>> from anonpaper.models.stylegan import StyleGenerator, get_config
        >>> G = StyleGenerator(get_config("sg3t-tiny"), seed=0)
        >>> codes = G.styles(G.mapping(G.sample_latents(2, seed=1)))
        >>> mean = codes.flatten().mean(0).detach()
        >>> edited = edit_channels(codes, ("L1", 3), mean, alpha=1.0)
        >>> bool((edited["L1"][:, 3] == mean[codes.layout.index("L1", 3)]).all())
        True
    """
    try:
        strength = float(alpha)
    except (TypeError, ValueError):
        raise ValueError(f"alpha: expected a number in [0, 1], observed {alpha!r}") from None
    if not 0.0 <= strength <= 1.0:
        raise ValueError(f"alpha: expected a number in [0, 1], observed {alpha!r}")
    if isinstance(mean, Mapping):
        mean = mean["mean"]
    layout = codes.layout
    mean = torch.as_tensor(mean)
    if mean.shape != (layout.total_channels,):
        raise ValueError(f"mean: expected shape ({layout.total_channels},), observed {tuple(mean.shape)}")
    if isinstance(channels, (int, np.integer)) or (isinstance(channels, tuple) and len(channels) == 2
                                                   and isinstance(channels[0], str)):
        channels = [channels]
    selected = resolve_channels(layout, channels=channels)
    flat = codes.flatten()
    index = selected.to(flat.device)
    target = mean.to(flat.device, flat.dtype)[index]
    # (1 - a) s + a mu is exactly s at a = 0 and exactly mu at a = 1 in floating point (0 * s = 0, 1 * x = x).
    edited = flat.clone()
    edited[:, index] = (1.0 - strength) * flat[:, index] + strength * target
    return codes.with_flat(edited)


def tradeoff_curves(metrics: Mapping[str, Mapping[str, float]], etas) -> dict[str, np.ndarray]:
    """Paper 1's similarity trade-off score (Eq. 14) per method over lesion weights ``eta``.

    The extracted Eq. 14 lost its layout (it reads as ``(1 - eta) / IDsim + eta Lesionsim``, which is infinite
    for the method with the lowest normalised identity similarity); we use the form that rewards low identity
    similarity and high lesion similarity, as the paper's text describes,
    ``score = (1 - eta) (1 - IDsim) + eta Lesionsim``, with ``IDsim`` the mean of min-max normalised FS_SIFT and
    FS_SR and ``Lesionsim`` that of RROI and AMS across the compared methods
    (:func:`anonpaper.metrics.tradeoff.similarity_tradeoff_score`).

    Args:
        metrics: Method name -> ``{"fs_sift", "fs_sr", "rroi", "ams"}`` (at least two methods).
        etas: Scalar or ``(E,)`` lesion weights in [0, 1].

    Returns:
        Method name -> ``(E,)`` float64 scores (higher is better).

    Raises:
        ValueError: On a missing metric or fewer than two methods.
    """
    keys = ("fs_sift", "fs_sr", "rroi", "ams")
    names = list(metrics)
    if len(names) < 2:
        raise ValueError(f"metrics: expected at least 2 methods to normalise across, observed {len(names)}")
    for name in names:
        missing = [key for key in keys if key not in metrics[name]]
        if missing:
            raise ValueError(f"metrics[{name!r}]: expected keys {keys}, missing {missing}")
    columns = [[float(metrics[name][key]) for name in names] for key in keys]
    scores = np.atleast_2d(similarity_tradeoff_score(*columns, eta=np.atleast_1d(etas)))
    return {name: scores[:, i].copy() for i, name in enumerate(names)}
