"""Local-editing baselines of paper 1's comparison (Zhao et al., Biomed. Opt. Express 2023, Table 2), on the same
generator as the method in :mod:`anonpaper.methods.jacobian_edit`.

* StyleSpace (Wu, Lischinski and Shechtman, CVPR 2021): *locally active* S channels. For each channel the
  gradient map of the 32 x 32 average-pooled image, ``|d pool(G(s)) / d s_c|`` summed over colour channels, is
  binarised at its ``(1 - p)`` quantile, ``p`` the area fraction of the (pooled) region mask; the channel's score is
  the fraction of that binarised map inside the region, averaged over images. The edit is ``s_c + t sigma_c``
  (:func:`stylespace_channels`, :func:`stylespace_direction`).
* LowRankGAN (Zhu et al., NeurIPS 2021, "Low-Rank Subspaces in GANs"): Gram matrices ``A = J^T J / #pixels`` of
  the region's and the background's Jacobian with respect to the latent; robust PCA (``A = L + S``, sparsity
  weight 1/60 at D = 512 as in the authors' release) of each; the region's principal directions (the range of ``L_region``)
  projected onto the null space of ``L_background`` (:func:`lowrank_directions`).
* ReSeFa (Zhu et al., ICML 2022, "Region-Based Semantic Factorization in GANs"): generalised eigenvectors of
  ``(A_background + tau I)^-1 A_region``, ``tau = 1e-3 trace(A_background)`` (:func:`resefa_directions`).

LowRankGAN and ReSeFa take the Jacobian with respect to ``w`` (one w shared by the edited layers) in their papers;
:class:`LatentCoordinates` makes the latent a choice: :func:`w_coordinates` (W, optionally a subset of the ws
entries, as their "edit a few layers") or :func:`style_coordinates` (S restricted to some style layers, the space of
paper 1's edit). Gram matrices are averaged over the ``T`` given images, so one set of directions serves all images,
as paper 1's channel choice does (Eq. 10); pass one image for the originals' per-image directions.

Matched edit strength. Paper 1 edits with ``alpha = 0.5`` (Eq. 11) and does not say how the baselines' step sizes
were set. :func:`step_for_image_change` finds, for any direction, the step whose mean absolute image change equals a
target (e.g. the one of paper 1's edit at ``alpha = 0.5``), so that methods are compared at the same edit magnitude.

Robust PCA is solved by the inexact augmented Lagrange multiplier method of Lin, Chen and Ma (arXiv:1009.5055,
2010), :func:`robust_pca`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from anonpaper.methods.jacobian_edit import (ChannelScores, _progress, check_masks, jvp_columns, resolve_channels,
                                             style_channel_jacobians)
from anonpaper.models.stylegan.sspace import StyleCodes

__all__ = ["RobustPCAResult", "robust_pca", "LatentCoordinates", "w_coordinates", "style_coordinates",
           "region_gram_matrices", "LowRankDirections", "lowrank_directions", "resefa_directions",
           "stylespace_channels", "stylespace_direction", "step_for_image_change"]


# --------------------------------------------------------------------------------------------------- robust PCA
@dataclass(frozen=True)
class RobustPCAResult:
    """``matrix = low_rank + sparse`` (up to ``residual``).

    Attributes:
        low_rank: ``(m, n)`` float64 low-rank part ``L``.
        sparse: ``(m, n)`` float64 sparse part ``S``.
        rank: Number of singular values of ``L`` above ``1e-10 * max`` (exact zeros after singular value
            thresholding).
        iterations: ALM iterations run.
        residual: ``||M - L - S||_F / ||M||_F`` at exit.
        converged: Whether ``residual <= tolerance`` was reached within ``max_iterations``.
    """

    low_rank: torch.Tensor
    sparse: torch.Tensor
    rank: int
    iterations: int
    residual: float
    converged: bool


def _soft_threshold(values: torch.Tensor, threshold: float) -> torch.Tensor:
    return values.sign() * (values.abs() - threshold).clamp_min(0.0)


def robust_pca(matrix, sparsity_weight: float | None = None, tolerance: float = 1e-7, max_iterations: int = 1000,
               growth: float = 1.5) -> RobustPCAResult:
    """Principal component pursuit ``min ||L||_* + lambda ||S||_1  s.t.  L + S = M`` by inexact ALM.

    Iteration (Lin, Chen and Ma 2010, Algorithm 5): ``L <- SVT_{1/mu}(M - S + Y/mu)``,
    ``S <- shrink_{lambda/mu}(M - L + Y/mu)``, ``Y <- Y + mu (M - L - S)``, ``mu <- min(growth mu, 1e7 mu_0)``, from
    ``Y_0 = M / max(||M||_2, ||M||_inf / lambda)``, ``mu_0 = 1.25 / ||M||_2``. Computed in float64.

    Args:
        matrix: ``(m, n)`` real matrix (tensor or array).
        sparsity_weight: ``lambda``; default ``1 / sqrt(max(m, n))`` (Candes et al. 2011).
        tolerance: Stop when ``||M - L - S||_F <= tolerance ||M||_F``.
        max_iterations: Iteration cap.
        growth: Factor ``rho > 1`` by which ``mu`` grows each iteration.

    Returns:
        :class:`RobustPCAResult`.

    Raises:
        ValueError: If the matrix is not 2-D finite, or a setting is out of range.

    Example:
        >>> low = torch.outer(torch.arange(1.0, 9.0), torch.linspace(-1, 1, 8))
        >>> sparse = torch.zeros(8, 8); sparse[2, 5] = 10.0
        >>> result = robust_pca(low + sparse)
        >>> result.rank, bool(torch.allclose(result.low_rank, low.double(), atol=1e-4))
        (1, True)
    """
    data = torch.as_tensor(np.asarray(matrix) if not isinstance(matrix, torch.Tensor) else matrix)
    if data.ndim != 2 or data.numel() == 0 or not torch.isfinite(data).all():
        raise ValueError(f"matrix: expected a finite 2-D matrix, observed shape {tuple(data.shape)}")
    data = data.detach().to("cpu", torch.float64)
    weight = 1.0 / np.sqrt(max(data.shape)) if sparsity_weight is None else float(sparsity_weight)
    if not weight > 0 or not tolerance > 0 or not growth > 1:
        raise ValueError(f"expected sparsity_weight > 0, tolerance > 0, growth > 1; observed {weight}, {tolerance}, "
                         f"{growth}")
    if isinstance(max_iterations, bool) or not isinstance(max_iterations, int) or max_iterations < 1:
        raise ValueError(f"max_iterations: expected a positive integer, observed {max_iterations!r}")
    norm_fro = torch.linalg.matrix_norm(data).item()
    if norm_fro == 0:
        zeros = torch.zeros_like(data)
        return RobustPCAResult(zeros, zeros.clone(), 0, 0, 0.0, True)
    spectral = torch.linalg.matrix_norm(data, ord=2).item()
    multiplier = data / max(spectral, data.abs().max().item() / weight)
    mu = 1.25 / spectral
    mu_max = mu * 1e7
    sparse = torch.zeros_like(data)
    low_rank = torch.zeros_like(data)
    residual = float("inf")
    iteration = 0
    while iteration < max_iterations:
        iteration += 1
        u, singular, vh = torch.linalg.svd(data - sparse + multiplier / mu, full_matrices=False)
        shrunk = (singular - 1.0 / mu).clamp_min(0.0)
        keep = int((shrunk > 0).sum())
        low_rank = (u[:, :keep] * shrunk[:keep]) @ vh[:keep]
        sparse = _soft_threshold(data - low_rank + multiplier / mu, weight / mu)
        gap = data - low_rank - sparse
        multiplier = multiplier + mu * gap
        mu = min(mu * growth, mu_max)
        residual = torch.linalg.matrix_norm(gap).item() / norm_fro
        if residual <= tolerance:
            break
    singular = torch.linalg.svdvals(low_rank)
    rank = int((singular > 1e-10 * singular.max()).sum()) if singular.numel() and singular.max() > 0 else 0
    return RobustPCAResult(low_rank, sparse, rank, iteration, residual, residual <= tolerance)


# ------------------------------------------------------------------------------------------ latent coordinates
@dataclass
class LatentCoordinates:
    """A ``D``-dimensional editing space around ``N`` base latents: ``render(point + delta)`` is the edited image.

    Attributes:
        name: ``"w"`` or ``"s"`` (for reports).
        point: ``(N, D)`` base coordinates (detached).
        render: ``(N, D) -> (N, C, H, W)`` differentiable; samples do not interact.
        labels: ``D`` names of the coordinates (e.g. ``"w[17]"`` or ``"L3:5"``).
    """

    name: str
    point: torch.Tensor
    render: Callable[[torch.Tensor], torch.Tensor]
    labels: tuple[str, ...]

    @property
    def dimension(self) -> int:
        return int(self.point.shape[1])

    def edit(self, direction: torch.Tensor, step: float | torch.Tensor) -> torch.Tensor:
        """Images ``render(point + step * direction)`` (no grad); ``step`` scalar or ``(N,)``.

        Raises:
            ValueError: If ``direction`` is not ``(D,)``.
        """
        direction = torch.as_tensor(direction)
        if direction.shape != (self.dimension,):
            raise ValueError(f"direction: expected shape ({self.dimension},), observed {tuple(direction.shape)}")
        step = torch.as_tensor(step, dtype=self.point.dtype, device=self.point.device).reshape(-1, 1)
        with torch.no_grad():
            return self.render(self.point + step * direction.to(self.point.device, self.point.dtype)[None])


def w_coordinates(generator, ws: torch.Tensor, layers: Sequence[int] | None = None) -> LatentCoordinates:
    """W as the editing space: ``delta`` (N, w_dim) is added to the ws entries ``layers`` (default: all).

    The base point is ``w`` of the first edited entry; for ws from :meth:`mapping` (all entries equal) editing all
    entries is W space, editing a subset is the "few layers" of LowRankGAN.

    Args:
        generator: A :class:`~anonpaper.models.stylegan.StyleGenerator`.
        ws: ``(N, num_ws, w_dim)`` latents.
        layers: ws entries that move (indices in ``[0, num_ws)``).

    Raises:
        ValueError: On a wrong ws shape or layer index.
    """
    if not isinstance(ws, torch.Tensor) or ws.ndim != 3 or ws.shape[1:] != (generator.num_ws, generator.w_dim):
        observed = tuple(ws.shape) if isinstance(ws, torch.Tensor) else type(ws).__name__
        raise ValueError(f"ws: expected (N, {generator.num_ws}, {generator.w_dim}), observed {observed}")
    entries = list(range(generator.num_ws)) if layers is None else [int(i) for i in layers]
    if not entries or min(entries) < 0 or max(entries) >= generator.num_ws:
        raise ValueError(f"layers: expected indices in [0, {generator.num_ws}), observed {entries}")
    base = ws.detach()
    selector = torch.zeros(generator.num_ws, 1, dtype=base.dtype, device=base.device)
    selector[entries] = 1.0
    point = base[:, entries[0]].clone()

    def render(coordinates: torch.Tensor) -> torch.Tensor:
        return generator.synthesis(base + (coordinates - point)[:, None, :] * selector)

    return LatentCoordinates("w", point, render, tuple(f"w[{i}]" for i in range(generator.w_dim)))


def style_coordinates(generator, codes: StyleCodes, layers: Sequence[str] | None = None) -> LatentCoordinates:
    """S restricted to some style layers as the editing space (coordinates = those layers' channels).

    Raises:
        ValueError: If a layer is unknown.
    """
    layout = codes.layout
    selected = resolve_channels(layout, layers=layers)
    base = codes.detach()
    names = [name for name in layout.names if layers is None or name in set(layers)]
    sizes = [layout.sizes[layout.names.index(name)] for name in names]

    def render(coordinates: torch.Tensor) -> torch.Tensor:
        # Only the selected layers receive the coordinates, so forward-mode tangents start at the first of them.
        styles = base.styles.copy()
        styles.update(zip(names, torch.split(coordinates, sizes, dim=1)))
        return generator.synthesis_from_styles(StyleCodes(styles, base.input_transform))

    labels = tuple("{}:{}".format(*layout.locate(int(k))) for k in selected)
    return LatentCoordinates("s", base.flatten()[:, selected.to(base.flatten().device)].clone(), render, labels)


def region_gram_matrices(coordinates: LatentCoordinates, masks, chunk_size: int = 4,
                         progress: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Jacobian Gram matrices of the region and of the background, averaged over images.

    For image ``i`` with Jacobian rows ``J_p`` (one per output entry ``p = (c, h, w)``, length ``D``) and mask
    ``m``: ``A_region = sum_p m_p J_p J_p^T / sum_p m_p`` and ``A_background`` likewise with ``1 - m`` (the
    per-pixel normalisation of the LowRankGAN and ReSeFa releases); both are averaged over the ``N`` images.

    Args:
        coordinates: The latent space and base points (:func:`w_coordinates`, :func:`style_coordinates`).
        masks: ``(N, H, W)`` or ``(N, 1, H, W)`` region masks in [0, 1] with region and background pixels.
        chunk_size: Coordinates per vectorised JVP.
        progress: Show a tqdm bar.

    Returns:
        ``(A_region, A_background)``, each ``(D, D)`` float64 symmetric positive semi-definite (on CPU).

    Memory: the whole Jacobian, ``D x N x C x H x W`` float64, is held on the CPU (about 0.8 GB per image for
    ``D = 512`` at 256 px RGB); call it on few images at a time and average the results for large ``N``.

    Raises:
        ValueError: On malformed masks or an empty background.
    """
    point = coordinates.point
    with torch.no_grad():
        size = coordinates.render(point).shape[-2:]
    masks = check_masks(masks, point.shape[0], tuple(size))
    if ((1 - masks).flatten(1).sum(1) == 0).any():
        raise ValueError("masks: expected some background (mask < 1) in every image, observed full masks")
    dimension = coordinates.dimension
    columns = []  # per chunk: (B, N, C*H*W) Jacobian columns
    starts = list(range(0, dimension, chunk_size))
    bar = _progress(len(starts), progress, "region Jacobian")
    for start in starts:
        block = jvp_columns(coordinates.render, point, list(range(start, min(start + chunk_size, dimension))))
        columns.append(block.flatten(2).to("cpu", torch.float64))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    jacobian = torch.cat(columns)  # (D, N, P)
    channels = jacobian.shape[2] // (size[0] * size[1])
    region = masks.flatten(1).repeat(1, channels)  # (N, P), mask broadcast over colour channels
    grams = []
    for weights in (region, 1.0 - region):
        scaled = jacobian * weights.sqrt()[None]
        gram = torch.einsum("anp,bnp->nab", scaled, scaled) / weights.sum(1)[:, None, None]
        gram = gram.mean(0)
        grams.append((gram + gram.T) / 2)
    return grams[0], grams[1]


# ----------------------------------------------------------------------------------------------- LowRankGAN
@dataclass(frozen=True)
class LowRankDirections:
    """LowRankGAN's directions.

    Attributes:
        directions: ``(r, D)`` unit rows: the region's principal directions projected onto the background's null
            space, in decreasing order of the region's low-rank spectrum.
        principal: ``(r, D)`` the region's principal directions before projection (orthonormal rows).
        null_space: ``(D, D - q)`` orthonormal basis of the background's relaxed null space.
        region_rank: ``r``, rank of the region's low-rank part.
        background_rank: Rank of the background's low-rank part.
    """

    directions: torch.Tensor
    principal: torch.Tensor
    null_space: torch.Tensor
    region_rank: int
    background_rank: int


def _check_gram(matrix, name: str) -> torch.Tensor:
    tensor = torch.as_tensor(np.asarray(matrix) if not isinstance(matrix, torch.Tensor) else matrix)
    if tensor.ndim != 2 or tensor.shape[0] != tensor.shape[1] or tensor.shape[0] < 2:
        raise ValueError(f"{name}: expected a square (D, D) matrix with D >= 2, observed {tuple(tensor.shape)}")
    tensor = tensor.detach().to("cpu", torch.float64)
    if not torch.isfinite(tensor).all():
        raise ValueError(f"{name}: expected finite values, observed NaN or infinity")
    return (tensor + tensor.T) / 2


def lowrank_directions(region_gram, background_gram, sparsity_weight: float | None = None, num_relax: int = 0,
                       max_iterations: int = 1000) -> LowRankDirections:
    """LowRankGAN: region principal directions projected onto the background's null space (Zhu et al. 2021).

    ``L_region, L_background`` are the robust-PCA low-rank parts of the Gram matrices; with SVDs
    ``L_region = U_r S_r V_r^T`` (rank ``r``) and ``L_background = U_b S_b V_b^T`` (rank ``q``), the null space is
    spanned by the right singular vectors ``q' = min(max(1, q - num_relax), D - 1)`` onward, and the directions are
    ``P V_r`` normalised, ``P`` the projector onto that null space.

    Args:
        region_gram: ``(D, D)`` ``A_region`` (:func:`region_gram_matrices`).
        background_gram: ``(D, D)`` ``A_background``.
        sparsity_weight: Robust PCA ``lambda``. Default ``sqrt(512) / (60 sqrt(D))``: the authors' 1/60 at their
            ``D = 512`` (StyleGAN's w), carried to other ``D`` with the ``1 / sqrt(D)`` scaling of principal component
            pursuit (at ``D = 32``, 1/60 makes the low-rank part of a tiny generator's Gram matrices vanish).
        num_relax: Number of the background's weakest principal directions counted into its null space.
        max_iterations: Robust PCA iteration cap.

    Returns:
        :class:`LowRankDirections`.

    Raises:
        ValueError: On malformed matrices, or if a projected direction vanishes (region inside the background's
            principal space; increase ``num_relax``).
    """
    region = _check_gram(region_gram, "region_gram")
    background = _check_gram(background_gram, "background_gram")
    if region.shape != background.shape:
        raise ValueError(f"background_gram: expected shape {tuple(region.shape)}, observed {tuple(background.shape)}")
    dimension = region.shape[0]
    if sparsity_weight is None:
        sparsity_weight = float(np.sqrt(512.0) / (60.0 * np.sqrt(dimension)))
    region_fit = robust_pca(region, sparsity_weight, max_iterations=max_iterations)
    background_fit = robust_pca(background, sparsity_weight, max_iterations=max_iterations)
    if region_fit.rank == 0:
        raise ValueError("region_gram: its low-rank part is zero; no principal direction")
    _, _, region_vh = torch.linalg.svd(region_fit.low_rank)
    _, _, background_vh = torch.linalg.svd(background_fit.low_rank)
    principal = region_vh[:region_fit.rank]
    start = min(max(1, background_fit.rank - int(num_relax)), dimension - 1)
    null_space = background_vh[start:].T
    projected = (null_space @ (null_space.T @ principal.T)).T
    norms = projected.norm(dim=1, keepdim=True)
    if (norms < 1e-12).any():
        raise ValueError("a region direction lies in the background's principal space (projection vanishes); "
                         "increase num_relax")
    return LowRankDirections(projected / norms, principal, null_space, region_fit.rank, background_fit.rank)


# --------------------------------------------------------------------------------------------------- ReSeFa
def resefa_directions(region_gram, background_gram, tau_fraction: float = 1e-3) -> tuple[torch.Tensor, torch.Tensor]:
    """ReSeFa: generalised eigenvectors of ``A_region v = lambda (A_background + tau I) v`` (Zhu et al. 2022).

    ``tau = tau_fraction * trace(A_background)`` makes the background term positive definite. Solved by Cholesky
    whitening, ``B = L L^T``, ``eigh(L^-1 A L^-T) = (lambda, y)``, ``v = L^-T y``.

    Args:
        region_gram: ``(D, D)`` ``A_region``.
        background_gram: ``(D, D)`` ``A_background``.
        tau_fraction: Regulariser relative to the background's trace (1e-3 in the authors' release).

    Returns:
        ``(eigenvalues, directions)``: ``(D,)`` float64 in decreasing order and ``(D, D)`` unit-norm rows (row
        ``i`` the direction of eigenvalue ``i``; sign fixed so its largest-magnitude entry is positive).

    Raises:
        ValueError: On malformed matrices, ``tau_fraction <= 0`` or a zero background trace.
    """
    region = _check_gram(region_gram, "region_gram")
    background = _check_gram(background_gram, "background_gram")
    if region.shape != background.shape:
        raise ValueError(f"background_gram: expected shape {tuple(region.shape)}, observed {tuple(background.shape)}")
    if not tau_fraction > 0:
        raise ValueError(f"tau_fraction: expected > 0, observed {tau_fraction!r}")
    trace = float(torch.trace(background))
    if not trace > 0:
        raise ValueError(f"background_gram: expected a positive trace, observed {trace}")
    regularised = background + tau_fraction * trace * torch.eye(region.shape[0], dtype=torch.float64)
    factor = torch.linalg.cholesky(regularised)
    whitened = torch.linalg.solve_triangular(factor, region, upper=False)
    whitened = torch.linalg.solve_triangular(factor, whitened.T, upper=False).T
    eigenvalues, vectors = torch.linalg.eigh((whitened + whitened.T) / 2)
    directions = torch.linalg.solve_triangular(factor.T, vectors, upper=True).T  # rows v_i
    order = torch.argsort(eigenvalues, descending=True)
    eigenvalues, directions = eigenvalues[order], directions[order]
    directions = directions / directions.norm(dim=1, keepdim=True)
    signs = torch.sign(directions.gather(1, directions.abs().argmax(1, keepdim=True)))
    return eigenvalues, directions * signs


# ----------------------------------------------------------------------------------------------- StyleSpace
def stylespace_channels(generator, codes: StyleCodes, masks, layers: Sequence[str] | None = None,
                        channels=None, pooled_size: int = 32, chunk_size: int = 4,
                        image_batch_size: int | None = None, progress: bool = True) -> ChannelScores:
    """StyleSpace's locally active channels for a region (Wu et al. 2021), scored by overlap with the mask.

    Per image and channel: ``g = sum_colour |d avgpool(G(s)) / d s_c|`` at ``pooled_size`` pixels; the region
    ``R = avgpool(mask) >= 0.5`` has area fraction ``p``; ``g`` is binarised at its ``(1 - p)`` quantile
    (``G_c``: its ``round(p * pixels)`` largest entries, ties by position) and the score is
    ``|G_c and R| / |G_c|``, in [0, 1]. Scores are averaged over images.

    Args:
        generator: A :class:`~anonpaper.models.stylegan.StyleGenerator`.
        codes: S codes of the images.
        masks: ``(T, H, W)`` or ``(T, 1, H, W)`` masks in [0, 1] at the generator's resolution.
        layers, channels: Channel selection (see :func:`~anonpaper.methods.jacobian_edit.resolve_channels`).
        pooled_size: Side of the pooled gradient maps (32 in StyleSpace); must divide the resolution.
        chunk_size, image_batch_size, progress: As in :func:`~anonpaper.methods.jacobian_edit.contribution_scores`.

    Returns:
        :class:`~anonpaper.methods.jacobian_edit.ChannelScores` of overlap scores.

    Raises:
        ValueError: On malformed masks, a pooled region that is empty, or a bad ``pooled_size``.
    """
    resolution = generator.resolution
    if isinstance(pooled_size, bool) or not isinstance(pooled_size, int) or pooled_size < 1 \
            or resolution % pooled_size:
        raise ValueError(f"pooled_size: expected a positive divisor of {resolution}, observed {pooled_size!r}")
    masks = check_masks(masks, codes.batch_size, (resolution, resolution))
    factor = resolution // pooled_size
    region = F.avg_pool2d(masks[:, None], factor)[:, 0].flatten(1) >= 0.5  # (T, P)
    counts = region.sum(1)
    if (counts == 0).any():
        raise ValueError(f"masks: the region vanishes at {pooled_size} px for images "
                         f"{torch.nonzero(counts == 0).flatten().tolist()}; use a larger pooled_size")
    layout = codes.layout
    selected = resolve_channels(layout, layers, channels)
    column = {int(index): j for j, index in enumerate(selected)}
    per_image = torch.zeros(codes.batch_size, selected.numel(), dtype=torch.float64)
    for images, flat, maps in style_channel_jacobians(generator, codes, selected, chunk_size, image_batch_size,
                                                      progress, "StyleSpace gradient maps"):
        batch, count = maps.shape[:2]
        pooled = F.avg_pool2d(maps.flatten(0, 1), factor).abs().sum(1).reshape(batch, count, -1)
        pooled = pooled.to("cpu", torch.float64)
        top = int(counts[images].max())
        # Stable descending order: equal gradients (e.g. zero) are taken by position, deterministically.
        order = torch.sort(pooled, dim=2, descending=True, stable=True).indices[..., :top]  # (B, n, top)
        inside = region[images][None].expand(batch, -1, -1).gather(2, order).double()
        rank_ok = torch.arange(top)[None, None, :] < counts[images][None, :, None]
        scores = (inside * rank_ok).sum(2) / counts[images][None].double()
        per_image[images, [column[int(k)] for k in flat]] = scores.t()
    return ChannelScores(selected, per_image.mean(0), per_image, layout)


def stylespace_direction(index: int, std, dimension: int | None = None) -> torch.Tensor:
    """StyleSpace's edit direction for channel ``index``: ``sigma_c e_c`` in flat S (so ``s + t * direction``).

    Args:
        index: Flat S index.
        std: ``(K,)`` channel standard deviations (``style_statistics(G)["std"]``) or that dict.
        dimension: Optional check of ``K``.

    Raises:
        ValueError: On an index outside ``[0, K)`` or a shape mismatch.
    """
    if isinstance(std, dict):
        std = std["std"]
    std = torch.as_tensor(std)
    if std.ndim != 1 or (dimension is not None and std.shape[0] != dimension):
        raise ValueError(f"std: expected shape ({dimension if dimension is not None else 'K'},), observed "
                         f"{tuple(std.shape)}")
    if not 0 <= int(index) < std.shape[0]:
        raise ValueError(f"index: expected in [0, {std.shape[0]}), observed {index}")
    direction = torch.zeros_like(std)
    direction[int(index)] = std[int(index)]
    return direction


# ------------------------------------------------------------------------------------- matched edit strength
def step_for_image_change(coordinates: LatentCoordinates, direction, target_change: float, max_step: float = 1e3,
                          tolerance: float = 1e-3, max_iterations: int = 60) -> float:
    """Step ``t >= 0`` whose edit ``render(point + t direction)`` changes the images by ``target_change`` on average.

    The change is the mean absolute pixel difference to the unedited images over all images, pixels and colour
    channels. Assumes the change grows with ``t`` (true near 0 for a direction the images depend on); the bracket
    is doubled from 1 until it passes the target, then bisected.

    Args:
        coordinates: Latent space and base points.
        direction: ``(D,)`` edit direction.
        target_change: Desired mean absolute change (> 0), e.g. that of paper 1's edit at ``alpha = 0.5``.
        max_step: Largest step tried.
        tolerance: Relative tolerance on the change.
        max_iterations: Bisection cap.

    Returns:
        The step (float).

    Raises:
        ValueError: If ``target_change <= 0`` or the target is not reached at ``max_step``.
    """
    if not target_change > 0:
        raise ValueError(f"target_change: expected > 0, observed {target_change!r}")
    with torch.no_grad():
        original = coordinates.render(coordinates.point)

    def change(step: float) -> float:
        return float((coordinates.edit(direction, step) - original).abs().mean())

    high = 1.0
    while change(high) < target_change:
        high *= 2.0
        if high > max_step:
            raise ValueError(f"target_change {target_change} not reached at step {max_step}")
    low = 0.0
    for _ in range(max_iterations):
        middle = (low + high) / 2
        value = change(middle)
        if abs(value - target_change) <= tolerance * target_change:
            return middle
        low, high = (middle, high) if value < target_change else (low, middle)
    return (low + high) / 2
