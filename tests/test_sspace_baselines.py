"""Baselines of paper 1 (StyleSpace, LowRankGAN, ReSeFa) and robust PCA: defining equations on planted matrices,
Jacobian Gram matrices and StyleSpace overlaps against independent references on a tiny random generator."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import torch
import torch.nn.functional as F

from anonpaper.methods.sspace_baselines import (lowrank_directions, region_gram_matrices, resefa_directions,
                                                robust_pca, step_for_image_change, style_coordinates,
                                                stylespace_channels, stylespace_direction, w_coordinates)
from anonpaper.models.stylegan import StyleGenerator, get_config


def _orthonormal(dimension: int, seed: int) -> np.ndarray:
    return np.linalg.qr(np.random.default_rng(seed).normal(size=(dimension, dimension)))[0]


def _sparse_symmetric(dimension: int, count: int, scale: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    sparse = np.zeros((dimension, dimension))
    rows, cols = rng.integers(0, dimension, count), rng.integers(0, dimension, count)
    values = rng.choice([-1.0, 1.0], count) * rng.uniform(0.5, 1.0, count) * scale
    sparse[rows, cols] = values
    return (sparse + sparse.T) / 2


# ------------------------------------------------------------------------------------------------ robust PCA
def test_robust_pca_recovers_planted_low_rank_and_sparse():
    rng = np.random.default_rng(0)
    size, rank = 60, 3
    low = rng.normal(size=(size, rank)) @ rng.normal(size=(rank, size))
    sparse = np.zeros((size, size))
    support = rng.random((size, size)) < 0.05
    sparse[support] = rng.choice([-1.0, 1.0], support.sum()) * rng.uniform(5, 10, support.sum())
    result = robust_pca(low + sparse)
    assert result.converged and result.residual <= 1e-7
    assert result.rank == rank
    np.testing.assert_allclose(result.low_rank.numpy(), low, atol=1e-4 * np.abs(low).max())
    np.testing.assert_allclose(result.sparse.numpy(), sparse, atol=1e-4 * np.abs(low).max())
    recovered_support = np.abs(result.sparse.numpy()) > 1e-3
    assert (recovered_support == support).mean() > 0.999


def test_robust_pca_keeps_symmetry_and_handles_edge_cases():
    basis = _orthonormal(20, 1)[:, :2]
    gram = basis @ np.diag([4.0, 1.0]) @ basis.T + _sparse_symmetric(20, 6, 0.5, 2)
    result = robust_pca(gram)
    np.testing.assert_allclose(result.low_rank.numpy(), result.low_rank.numpy().T, atol=1e-9)
    zero = robust_pca(np.zeros((4, 5)))
    assert zero.rank == 0 and zero.converged and not zero.low_rank.any()
    with pytest.raises(ValueError, match="2-D"):
        robust_pca(np.ones(5))
    with pytest.raises(ValueError, match="growth"):
        robust_pca(np.eye(3), growth=1.0)
    capped = robust_pca(gram, max_iterations=2)
    assert capped.iterations == 2 and not capped.converged


# -------------------------------------------------------------------------------------------------- ReSeFa
def test_resefa_solves_the_generalised_eigenproblem():
    rng = np.random.default_rng(3)
    dimension = 10
    factor = rng.normal(size=(dimension, 25))
    region = factor @ factor.T / 25
    background_factor = rng.normal(size=(dimension, 4))
    background = background_factor @ background_factor.T  # rank 4: the regulariser is needed
    eigenvalues, directions = resefa_directions(region, background, tau_fraction=1e-3)
    regularised = background + 1e-3 * np.trace(background) * np.eye(dimension)
    reference = scipy.linalg.eigh(region, regularised, eigvals_only=True)[::-1]
    np.testing.assert_allclose(eigenvalues.numpy(), reference, rtol=1e-9)
    for value, vector in zip(eigenvalues.numpy(), directions.numpy()):
        residual = region @ vector - value * regularised @ vector
        assert np.linalg.norm(residual) <= 1e-9 * np.linalg.norm(region) * np.linalg.norm(vector)
        assert np.linalg.norm(vector) == pytest.approx(1.0)
    assert np.all(np.diff(eigenvalues.numpy()) <= 0)


def test_resefa_finds_the_planted_region_only_direction():
    basis = _orthonormal(8, 4)
    target = basis[:, 0]  # moves the region a lot and the background not at all
    region = 3.0 * np.outer(target, target) + 0.1 * basis[:, 1:4] @ basis[:, 1:4].T
    background = basis[:, 1:] @ np.diag(np.linspace(1, 2, 7)) @ basis[:, 1:].T
    _, directions = resefa_directions(region, background)
    assert abs(directions[0].numpy() @ target) > 1 - 1e-9
    with pytest.raises(ValueError, match="tau_fraction"):
        resefa_directions(region, background, tau_fraction=0)
    with pytest.raises(ValueError, match="square"):
        resefa_directions(region[:3], background)


# ---------------------------------------------------------------------------------------------- LowRankGAN
def test_lowrank_directions_are_region_principal_directions_in_the_background_null_space():
    dimension = 40
    basis = _orthonormal(dimension, 5)
    background_space = basis[:, :4]
    background = background_space @ np.diag([5.0, 4.0, 3.0, 1.5]) @ background_space.T
    # Region principal directions: mixtures of background and free directions, distinct strengths.
    region_space = np.linalg.qr(np.stack([basis[:, 0] + basis[:, 6], basis[:, 2] - 2 * basis[:, 9]], 1))[0]
    region = region_space @ np.diag([6.0, 2.5]) @ region_space.T
    noisy_region = region + _sparse_symmetric(dimension, 4, 0.3, 6)
    noisy_background = background + _sparse_symmetric(dimension, 4, 0.3, 7)
    # lambda = 1/sqrt(D) (Candes et al.) is in the exact-recovery regime for these incoherent planted subspaces.
    result = lowrank_directions(noisy_region, noisy_background, sparsity_weight=1 / np.sqrt(dimension))
    assert (result.region_rank, result.background_rank) == (2, 4)
    directions = result.directions.numpy()
    np.testing.assert_allclose(np.linalg.norm(directions, axis=1), 1.0)
    # Null-space orthogonality: no component along the background's principal directions.
    assert np.abs(directions @ background_space).max() < 1e-6
    np.testing.assert_allclose(result.null_space.numpy().T @ result.null_space.numpy(), np.eye(dimension - 4),
                               atol=1e-9)
    # Closed form: (I - B B^T) u / ||.|| for each planted region direction u (up to sign).
    projector = np.eye(dimension) - background_space @ background_space.T
    for direction, planted in zip(directions, region_space.T):
        expected = projector @ planted
        expected /= np.linalg.norm(expected)
        assert abs(direction @ expected) > 1 - 1e-6
    # num_relax moves the weakest background direction into the null space.
    relaxed = lowrank_directions(noisy_region, noisy_background, sparsity_weight=1 / np.sqrt(dimension),
                                 num_relax=1)
    assert relaxed.null_space.shape == (dimension, dimension - 3)


# ------------------------------------------------------------------------------- Jacobians on a generator
def _tiny(count: int = 2):
    generator = StyleGenerator(get_config("sg3t-tiny"), seed=0).eval().double()
    with torch.no_grad():
        ws = generator.mapping(generator.sample_latents(count, seed=5).double())
    masks = torch.zeros(count, 32, 32, dtype=torch.float64)
    masks[:, 8:20, 4:28] = 1.0
    masks[1, 0:4, 0:4] = 0.5
    return generator, ws, generator.styles(ws).detach(), masks


def test_coordinates_render_the_unedited_images():
    generator, ws, codes, _ = _tiny()
    with torch.no_grad():
        image = generator.synthesis(ws)
        w_space = w_coordinates(generator, ws, layers=[2, 3])
        assert torch.equal(w_space.render(w_space.point), image)
        s_space = style_coordinates(generator, codes, ["L1", "torgb"])
        assert s_space.dimension == 32 + 16 and s_space.labels[0] == "L1:0"
        torch.testing.assert_close(s_space.render(s_space.point), image, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="layers"):
        w_coordinates(generator, ws, layers=[99])


def test_region_gram_matrices_match_finite_difference_jacobian():
    generator, ws, codes, masks = _tiny()
    coordinates = style_coordinates(generator, codes, ["torgb"])  # D = 16, tangents only through the last layer
    region, background = region_gram_matrices(coordinates, masks, chunk_size=5)
    step = 1e-6  # small: the filtered leaky ReLUs have kinks
    columns = []
    with torch.no_grad():
        for d in range(coordinates.dimension):
            shift = torch.zeros_like(coordinates.point)
            shift[:, d] = step
            plus, minus = coordinates.render(coordinates.point + shift), coordinates.render(coordinates.point - shift)
            columns.append(((plus - minus) / (2 * step)).flatten(1))
    jacobians = torch.stack(columns, dim=2)  # (N, P, D)
    expected_region = torch.zeros_like(region)
    expected_background = torch.zeros_like(background)
    for n in range(2):
        weights = masks[n].flatten().repeat(3)  # the mask broadcast over RGB
        jacobian = jacobians[n]
        expected_region += (jacobian.T * weights) @ jacobian / weights.sum() / 2
        expected_background += (jacobian.T * (1 - weights)) @ jacobian / (1 - weights).sum() / 2
    torch.testing.assert_close(region, expected_region, rtol=1e-6, atol=1e-9 * expected_region.abs().max().item())
    torch.testing.assert_close(background, expected_background, rtol=1e-6,
                               atol=1e-9 * expected_background.abs().max().item())
    assert torch.linalg.eigvalsh(region).min() > -1e-12
    with pytest.raises(ValueError, match="background"):
        region_gram_matrices(coordinates, torch.ones(2, 32, 32))


def test_stylespace_overlap_matches_a_finite_difference_reference():
    generator, ws, codes, masks = _tiny()
    layout = codes.layout
    chosen = [layout.index("L0", 3), layout.index("L2", 11), layout.index("torgb", 2)]
    result = stylespace_channels(generator, codes, masks, channels=chosen, pooled_size=16, chunk_size=2,
                                 progress=False)
    region = (F.avg_pool2d(masks[:, None], 2)[:, 0] >= 0.5).flatten(1).numpy()
    flat = codes.flatten()
    for j, index in enumerate(result.indices.tolist()):
        shift = torch.zeros_like(flat)
        shift[:, index] = 1e-6
        with torch.no_grad():
            difference = (generator.synthesis_from_styles(codes.with_flat(flat + shift))
                          - generator.synthesis_from_styles(codes.with_flat(flat - shift))) / 2e-6
        pooled = F.avg_pool2d(difference, 2).abs().sum(1).flatten(1).numpy()
        for n in range(2):
            count = int(region[n].sum())
            top = np.argsort(-pooled[n], kind="stable")[:count]
            assert result.per_image[n, j].item() == pytest.approx(region[n][top].mean())
    assert ((result.scores >= 0) & (result.scores <= 1)).all()
    one_at_a_time = stylespace_channels(generator, codes, masks, channels=chosen, pooled_size=16, chunk_size=2,
                                        image_batch_size=1, progress=False)  # the vascular chapter's CPU grouping
    torch.testing.assert_close(one_at_a_time.per_image, result.per_image, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="pooled_size"):
        stylespace_channels(generator, codes, masks, pooled_size=5, progress=False)


def test_stylespace_direction_and_matched_step():
    generator, ws, codes, masks = _tiny()
    std = torch.linspace(0.5, 1.5, codes.layout.total_channels, dtype=torch.float64)
    direction = stylespace_direction(7, {"std": std})
    assert direction.nonzero().flatten().tolist() == [7] and direction[7] == std[7]
    with pytest.raises(ValueError, match="index"):
        stylespace_direction(10_000, std)
    coordinates = style_coordinates(generator, codes)
    target = 0.002
    step = step_for_image_change(coordinates, direction, target, tolerance=1e-3)
    with torch.no_grad():
        change = (coordinates.edit(direction, step) - generator.synthesis(ws)).abs().mean().item()
    assert change == pytest.approx(target, rel=1.5e-3)
    with pytest.raises(ValueError, match="not reached"):
        step_for_image_change(coordinates, torch.zeros_like(direction), target, max_step=8.0)
