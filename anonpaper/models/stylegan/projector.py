"""Latent optimisation ("projection") of real images into W or W+, StyleGAN2-ADA projector recipe.

Recipe (Karras et al. 2020, the StyleGAN2-ADA code base): start at the mean w (estimated from
``w_avg_samples`` mapped latents), Adam (0.9, 0.999) with learning rate ``initial_lr`` ramped up over the first 5%
of the steps and down by a cosine over the last 25%; Gaussian noise of scale ``w_std * 0.05`` (decaying
quadratically to zero at 75% of the steps) is added to w for exploration. For StyleGAN2 the per-layer noise maps
are optimised too, starting from random, with an autocorrelation penalty (weight 1e5) at every scale and
renormalisation to zero mean / unit variance after every step. StyleGAN3 has no noise inputs.

Distance: with a ``feature_extractor`` (any callable returning a list of (N, C_l, H_l, W_l) feature maps, e.g. a
cohort-trained U-Net's ``forward_features``), an LPIPS-style distance: per layer, unit-normalise features along
channels, squared difference summed over channels, averaged over pixels, summed over layers. Without one, the
fallback is pixel MSE plus a Laplacian-pyramid distance (4 levels). The result names the distance used, so a
reconstruction score is never mistaken for a VGG-LPIPS one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from anonpaper.models.stylegan.sspace import StyleCodes

PYRAMID_DISTANCE_NAME = "pixel-mse+laplacian-pyramid"


@dataclass
class ProjectionResult:
    """Output of :func:`project`.

    Attributes:
        ws: (N, num_ws, w_dim) optimised latents (W: all rows equal; W+: free rows), detached.
        codes: S codes of ``ws`` (detached).
        reconstruction: (N, C, R, R) images synthesised from ``ws`` (and the optimised noise), in [-1, 1] nominal.
        noise_inputs: StyleGAN2: optimised noise maps by layer name, each (N, 1, R_l, R_l); None for StyleGAN3.
        distance_name: ``"features:<name>"`` or ``"pixel-mse+laplacian-pyramid"``.
        initial_distance: (N,) distance of the starting point (mean w, initial noise) to the target.
        final_distance: (N,) distance of the reconstruction to the target (lower is better).
        history: Per-step mean distance (float list).
        space: ``"w"`` or ``"w+"``.
    """

    ws: torch.Tensor
    codes: StyleCodes
    reconstruction: torch.Tensor
    noise_inputs: dict | None
    distance_name: str
    initial_distance: torch.Tensor
    final_distance: torch.Tensor
    history: list = field(default_factory=list)
    space: str = "w+"


def laplacian_pyramid_distance(images: torch.Tensor, target: torch.Tensor, levels: int = 4) -> torch.Tensor:
    """Pixel MSE plus the mean squared difference of Laplacian-pyramid bands; (N,) values (lower = closer).

    Bands are ``level - upsample(avgpool(level))`` for ``levels`` scales plus the coarsest low-pass residual, so
    coarse structure weighs as much as fine detail (plain MSE is dominated by neither but blind to scale).
    """
    distance = (images - target).square().mean(dim=[1, 2, 3])
    a, b = images, target
    for _ in range(levels):
        if a.shape[-1] < 2:
            break
        a_low, b_low = F.avg_pool2d(a, 2), F.avg_pool2d(b, 2)
        band_a = a - F.interpolate(a_low, size=a.shape[-2:], mode="nearest")
        band_b = b - F.interpolate(b_low, size=b.shape[-2:], mode="nearest")
        distance = distance + (band_a - band_b).square().mean(dim=[1, 2, 3])
        a, b = a_low, b_low
    return distance + (a - b).square().mean(dim=[1, 2, 3])


def feature_distance(features: Sequence[torch.Tensor], target_features: Sequence[torch.Tensor]) -> torch.Tensor:
    """LPIPS-style distance between two lists of feature maps (unweighted); (N,) values (lower = closer)."""
    if len(features) != len(target_features) or len(features) == 0:
        raise ValueError(f"feature lists must be non-empty and of equal length, got {len(features)} and "
                         f"{len(target_features)}")
    total = 0.0
    for a, b in zip(features, target_features):
        a = a / (a.square().sum(dim=1, keepdim=True) + 1e-10).sqrt()
        b = b / (b.square().sum(dim=1, keepdim=True) + 1e-10).sqrt()
        total = total + (a - b).square().sum(dim=1).flatten(1).mean(dim=1)
    return total


def _noise_regularization(noise_maps) -> torch.Tensor:
    """Sum over maps and scales (down to 8 px) of squared autocorrelations at one-pixel shifts."""
    loss = 0.0
    for noise in noise_maps:
        while True:
            loss = loss + (noise * torch.roll(noise, shifts=1, dims=3)).mean().square()
            loss = loss + (noise * torch.roll(noise, shifts=1, dims=2)).mean().square()
            if noise.shape[2] <= 8:
                break
            noise = F.avg_pool2d(noise, kernel_size=2)
    return loss


@torch.no_grad()
def estimate_w_statistics(generator, num_samples: int = 10000, seed: int = 0, batch_size: int = 1000):
    """Mean w (w_dim,) and the scalar spread ``sqrt(E||w - w_avg||^2)`` over mapped standard-normal latents."""
    rng = torch.Generator().manual_seed(seed)
    device = generator.w_avg.device
    chunks = []
    remaining = num_samples
    while remaining > 0:
        n = min(batch_size, remaining)
        chunks.append(generator.mapping(torch.randn(n, generator.z_dim, generator=rng).to(device))[:, 0])
        remaining -= n
    w = torch.cat(chunks).double()
    w_mean = w.mean(dim=0)
    w_std = math.sqrt(float((w - w_mean).square().sum()) / w.shape[0])
    return w_mean.float(), w_std


def project(generator, target: torch.Tensor, *, space: str = "w+", num_steps: int = 1000, initial_lr: float = 0.1,
            lr_rampup: float = 0.05, lr_rampdown: float = 0.25, initial_noise_factor: float = 0.05,
            noise_ramp_length: float = 0.75, noise_regularization: float = 1e5, optimize_noise: bool | None = None,
            feature_extractor: Callable | None = None, feature_extractor_name: str | None = None,
            initial_ws: torch.Tensor | None = None, w_avg_samples: int = 10000, seed: int = 0,
            progress: bool = False) -> ProjectionResult:
    """Optimise latents so that the generator reproduces ``target``.

    Args:
        generator: A :class:`~anonpaper.models.stylegan.generator.StyleGenerator` (kept frozen; not modified).
        target: (N, C, R, R) float images in [-1, 1] matching the generator's channels and resolution (not
            modified). Each image is projected independently (losses are summed).
        space: ``"w"`` (one w per image, repeated to every layer) or ``"w+"`` (one w per layer).
        num_steps: Adam steps (1000 in the recipe).
        initial_lr: Peak learning rate (0.1).
        lr_rampup: Fraction of steps of the linear warm-up (0.05).
        lr_rampdown: Fraction of steps of the final cosine decay (0.25).
        initial_noise_factor: Exploration noise on w, relative to the w spread (0.05).
        noise_ramp_length: Fraction of steps after which the exploration noise is zero (0.75).
        noise_regularization: Weight of the noise-map autocorrelation penalty (1e5).
        optimize_noise: Optimise StyleGAN2 noise maps (default: True for StyleGAN2, impossible for StyleGAN3).
        feature_extractor: Callable images -> list of feature maps; it receives images mapped linearly to [0, 1]
            (not clamped, so gradients flow). None selects the pixel/pyramid fallback.
        feature_extractor_name: Name recorded in the result (default: the callable's ``__name__`` or class name).
        initial_ws: Optional (N, num_ws, w_dim) or (N, w_dim) starting point (e.g. an encoder's output); default
            the mean w.
        w_avg_samples: Latents used to estimate the mean w and its spread.
        seed: Seed of every random draw (w statistics, exploration noise, initial noise maps).
        progress: Show a tqdm bar.

    Returns:
        :class:`ProjectionResult`.

    Raises:
        ValueError: On wrong target shape/range/dtype, unknown space, or noise optimisation for StyleGAN3.
    """
    expected = (generator.image_channels, generator.resolution, generator.resolution)
    if not torch.is_tensor(target) or not target.is_floating_point() or target.ndim != 4 \
            or tuple(target.shape[1:]) != expected:
        raise ValueError(f"target must be a float tensor (N, {expected[0]}, {expected[1]}, {expected[2]}), got "
                         f"{getattr(target, 'dtype', type(target))} {tuple(getattr(target, 'shape', ()))}")
    if not torch.isfinite(target).all() or target.min() < -1 - 1e-4 or target.max() > 1 + 1e-4:
        raise ValueError(f"target must be finite and in [-1, 1] (use to_signed_range on [0, 1] data); got range "
                         f"[{float(target.min()):.3f}, {float(target.max()):.3f}]")
    if space not in ("w", "w+"):
        raise ValueError(f"space must be 'w' or 'w+', got {space!r}")
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    if optimize_noise is None:
        optimize_noise = generator.has_noise_inputs
    if optimize_noise and not generator.has_noise_inputs:
        raise ValueError("optimize_noise=True but this generator (StyleGAN3) has no noise inputs")

    device = generator.w_avg.device
    target = target.detach().to(device)
    batch = target.shape[0]
    requires_grad = {name: p.requires_grad for name, p in generator.named_parameters()}
    for p in generator.parameters():
        p.requires_grad_(False)
    try:
        if feature_extractor is None:
            distance_name = PYRAMID_DISTANCE_NAME
            target_features = None
        else:
            name = feature_extractor_name or getattr(feature_extractor, "__name__", type(feature_extractor).__name__)
            distance_name = f"features:{name}"
            with torch.no_grad():
                target_features = [f.detach() for f in feature_extractor((target + 1) * 0.5)]

        def distance(images: torch.Tensor) -> torch.Tensor:
            if target_features is None:
                return laplacian_pyramid_distance(images, target)
            return feature_distance(list(feature_extractor((images + 1) * 0.5)), target_features)

        w_mean, w_std = estimate_w_statistics(generator, w_avg_samples, seed)
        rows = 1 if space == "w" else generator.num_ws
        if initial_ws is None:
            start = w_mean.to(device).expand(batch, rows, -1)
        else:
            start = initial_ws.detach().to(device)
            if start.ndim == 2:
                start = start[:, None]
            if (start.ndim != 3 or start.shape[0] != batch or start.shape[2] != generator.w_dim
                    or start.shape[1] not in (1, generator.num_ws)):
                raise ValueError(f"initial_ws must be (N, w_dim) or (N, num_ws, w_dim) with N={batch}, got "
                                 f"{tuple(initial_ws.shape)}")
            start = start.expand(batch, rows, -1) if start.shape[1] == 1 else start
            if space == "w" and start.shape[1] != 1:
                start = start.mean(dim=1, keepdim=True)
        w_opt = start.clone().contiguous().requires_grad_(True)
        rng = torch.Generator().manual_seed(seed + 1)
        noise_maps: dict[str, torch.Tensor] = {}
        if optimize_noise:
            for name, buffer in generator.synthesis_network.noise_buffers().items():
                noise_maps[name] = torch.randn(batch, 1, *buffer.shape, generator=rng).to(device).requires_grad_(True)
        optimizer = torch.optim.Adam([w_opt] + list(noise_maps.values()), lr=initial_lr, betas=(0.9, 0.999))

        def synthesize(w: torch.Tensor) -> torch.Tensor:
            ws = w.expand(-1, generator.num_ws, -1) if space == "w" else w
            return generator.synthesis(ws, noise_mode="const", noise_inputs=noise_maps or None)

        with torch.no_grad():
            initial_distance = distance(synthesize(w_opt)).detach()
        history = []
        steps = range(num_steps)
        if progress:
            from tqdm.auto import tqdm

            steps = tqdm(steps, desc=f"project ({space})")
        for step in steps:
            t = step / num_steps
            w_noise_scale = w_std * initial_noise_factor * max(0.0, 1.0 - t / noise_ramp_length) ** 2
            lr_ramp = min(1.0, (1.0 - t) / lr_rampdown)
            lr_ramp = 0.5 - 0.5 * math.cos(lr_ramp * math.pi)
            lr_ramp = lr_ramp * min(1.0, t / lr_rampup) if lr_rampup > 0 else lr_ramp
            for group in optimizer.param_groups:
                group["lr"] = initial_lr * lr_ramp
            w_noise = torch.randn(w_opt.shape, generator=rng).to(device) * w_noise_scale
            images = synthesize(w_opt + w_noise)
            per_image = distance(images)
            loss = per_image.sum()
            if noise_maps:
                loss = loss + noise_regularization * _noise_regularization(noise_maps.values())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            history.append(float(per_image.detach().mean()))
            with torch.no_grad():
                for noise in noise_maps.values():
                    noise -= noise.mean(dim=[1, 2, 3], keepdim=True)
                    noise *= noise.square().mean(dim=[1, 2, 3], keepdim=True).rsqrt()
        with torch.no_grad():
            final_w = w_opt.detach()
            ws = final_w.expand(-1, generator.num_ws, -1).clone() if space == "w" else final_w.clone()
            reconstruction = synthesize(final_w)
            final_distance = distance(reconstruction)
            codes = generator.styles(ws).detach()
    finally:
        for name, p in generator.named_parameters():
            p.requires_grad_(requires_grad[name])
    return ProjectionResult(ws=ws, codes=codes, reconstruction=reconstruction.detach(),
                            noise_inputs={k: v.detach() for k, v in noise_maps.items()} or None,
                            distance_name=distance_name, initial_distance=initial_distance,
                            final_distance=final_distance.detach(), history=history, space=space)
