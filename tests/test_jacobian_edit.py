"""Paper 1's contribution scores (JVP Jacobian), channel edit and trade-off curves, on tiny random generators."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from anonpaper.methods.jacobian_edit import (contribution_scores, edit_channels, jvp_columns, resolve_channels,
                                             style_channel_jacobians, tradeoff_curves)
from anonpaper.models.stylegan import StyleCodes, StyleGenerator, get_config, style_statistics


def _generator_and_codes(config: str, count: int, dtype=torch.float64):
    generator = StyleGenerator(get_config(config), seed=0).eval().to(dtype)
    with torch.no_grad():
        codes = generator.styles(generator.mapping(generator.sample_latents(count, seed=3).to(dtype)))
    return generator, codes


def _masks(count: int, size: int, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    masks = (rng.random((count, size, size)) < 0.2).astype(np.float64)
    masks[:, 5, 7] = 1.0  # never empty
    return torch.from_numpy(masks)


def _finite_difference_maps(generator, codes: StyleCodes, index: int, step: float = 1e-6) -> torch.Tensor:
    """Central difference dI/ds_k (T, C, H, W) in float64.

    The step is small because the filtered leaky ReLUs have kinks: a larger step (1e-4, 1e-5) straddles a kink for
    some pixels of these seeds and then differs from the derivative by up to 1e-3 relative.
    """
    flat = codes.flatten()
    shift = torch.zeros_like(flat)
    shift[:, index] = step
    with torch.no_grad():
        plus = generator.synthesis_from_styles(codes.with_flat(flat + shift))
        minus = generator.synthesis_from_styles(codes.with_flat(flat - shift))
    return (plus - minus) / (2 * step)


def _reference_score(maps: torch.Tensor, masks: torch.Tensor) -> np.ndarray:
    """Eq. 9 by sorting in numpy: per image, mean of the ||M||_0 largest entries of |maps * M|."""
    scores = []
    for gradient, mask in zip(maps.numpy(), masks.numpy()):
        values = np.sort(np.abs(gradient * mask[None]).ravel())[::-1]
        count = int((mask != 0).sum())
        scores.append(values[:count].mean())
    return np.array(scores)


@pytest.mark.parametrize("config", ["sg3t-tiny", "sg2-tiny"])
def test_scores_match_finite_differences(config):
    generator, codes = _generator_and_codes(config, 3)
    layout = codes.layout
    masks = _masks(3, generator.resolution)
    masks[1] *= 0.5  # a soft mask: the weights enter the map, ||M||_0 still counts pixels
    chosen = [layout.index(layout.names[0], 1), layout.index(layout.names[1], 0), layout.index(layout.names[2], 5),
              layout.total_channels - 1]
    trainable = [parameter.requires_grad for parameter in generator.parameters()]
    assert any(trainable)
    result = contribution_scores(generator, codes, masks, channels=chosen, chunk_size=2, progress=False)
    # The JVPs run with the generator frozen (no autograd graph) and give its parameters back as they were.
    assert [parameter.requires_grad for parameter in generator.parameters()] == trainable
    assert not result.per_image.requires_grad
    assert result.indices.tolist() == sorted(chosen)
    for j, index in enumerate(result.indices.tolist()):
        reference = _reference_score(_finite_difference_maps(generator, codes, index), masks)
        np.testing.assert_allclose(result.per_image[:, j].numpy(), reference, rtol=1e-6, atol=1e-10)
        assert result.scores[j].item() == pytest.approx(reference.mean(), rel=1e-6)


def test_jvp_columns_match_backward_gradients():
    """Reverse-mode reference: d<v, I>/ds for a random v equals <v, dI/ds_k> for each column k."""
    generator, codes = _generator_and_codes("sg3t-tiny", 2)
    layer = "L2"
    point = codes.styles[layer].clone()

    def render(styles):
        mapping = codes.styles.copy()
        mapping[layer] = styles
        return generator.synthesis_from_styles(StyleCodes(mapping, codes.input_transform))

    columns = [0, 4, 9]
    maps = jvp_columns(render, point, columns)  # (3, 2, C, H, W)
    probe = torch.randn(render(point).shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    variable = point.clone().requires_grad_(True)
    (gradient,) = torch.autograd.grad((render(variable) * probe).sum(), variable)
    for b, column in enumerate(columns):
        projected = (maps[b] * probe).flatten(1).sum(1)
        torch.testing.assert_close(projected, gradient[:, column], rtol=1e-9, atol=1e-12)


def test_rgb_top_count_differs_from_masked_mean():
    """For RGB images Eq. 9 keeps the top ||M||_0 of 3 ||M||_0 masked entries: larger than the plain masked mean."""
    generator, codes = _generator_and_codes("sg3t-tiny", 2)
    masks = _masks(2, generator.resolution, seed=4)
    index = codes.layout.index("L1", 2)
    result = contribution_scores(generator, codes, masks, channels=[index], progress=False)
    maps = _finite_difference_maps(generator, codes, index)
    masked_mean = ((maps.abs() * masks[:, None]).flatten(1).sum(1) / (3 * (masks != 0).flatten(1).sum(1))).numpy()
    assert (result.per_image[:, 0].numpy() > masked_mean * 1.05).all()


def test_chunk_and_image_grouping_do_not_change_scores():
    generator, codes = _generator_and_codes("sg3t-tiny", 4, dtype=torch.float32)
    masks = _masks(4, generator.resolution, seed=2)
    layers = ["L3", "torgb"]  # 32 channels: the two last layers keep the chunk_size=1 reference cheap
    reference = contribution_scores(generator, codes, masks, layers=layers, chunk_size=1, image_batch_size=2,
                                    progress=False)
    for chunk, group in ((5, None), (32, 3), (7, 2)):
        other = contribution_scores(generator, codes, masks, layers=layers, chunk_size=chunk,
                                    image_batch_size=group, progress=False)
        assert torch.equal(other.indices, reference.indices)
        torch.testing.assert_close(other.per_image, reference.per_image, rtol=1e-5, atol=1e-7)
    expected = list(range(codes.layout.layer_slice("L3").start, codes.layout.total_channels))
    assert reference.indices.tolist() == expected


def test_scores_structure_and_ranking():
    generator, codes = _generator_and_codes("sg2-tiny", 2, dtype=torch.float32)
    masks = _masks(2, generator.resolution)
    result = contribution_scores(generator, codes, masks, layers=["b32_conv0", "b32_torgb"], progress=False)
    top = result.top(3)
    assert [row["score"] for row in top] == sorted((row["score"] for row in top), reverse=True)
    assert top[0]["index"] == result.best_index == int(result.indices[result.scores.argmax()])
    assert (top[0]["layer"], top[0]["channel"]) == codes.layout.locate(top[0]["index"])
    assert result.per_image.shape == (2, 32 + 16)
    assert len(result.names()) == 48 and result.names()[0] == ("b32_conv0", 0)
    # Deterministic: the same inputs give bit-identical scores.
    again = contribution_scores(generator, codes, masks, layers=["b32_conv0", "b32_torgb"], progress=False)
    assert torch.equal(again.per_image, result.per_image)


def test_input_validation():
    generator, codes = _generator_and_codes("sg3t-tiny", 2, dtype=torch.float32)
    good = _masks(2, generator.resolution)
    with pytest.raises(ValueError, match="expected \\(2, 32, 32\\)"):
        contribution_scores(generator, codes, good[:, :16], progress=False)
    with pytest.raises(ValueError, match="\\[0, 1\\]"):
        contribution_scores(generator, codes, good * 2, progress=False)
    empty = good.clone()
    empty[1] = 0
    with pytest.raises(ValueError, match="empty masks at \\[1\\]"):
        contribution_scores(generator, codes, empty, progress=False)
    with pytest.raises(ValueError, match="not both"):
        resolve_channels(codes.layout, layers=["L0"], channels=[0])
    with pytest.raises(ValueError, match="unknown style layer"):
        resolve_channels(codes.layout, layers=["nope"])
    with pytest.raises(ValueError, match="chunk_size"):
        next(style_channel_jacobians(generator, codes, torch.tensor([0]), chunk_size=0))


def test_edit_identity_mean_and_interpolation():
    generator, codes = _generator_and_codes("sg3t-tiny", 3, dtype=torch.float32)
    statistics = style_statistics(generator, num_samples=16, batch_size=8, seed=0)
    layout = codes.layout
    channels = [layout.index("L0", 2), ("L3", 7)]
    flat = codes.flatten()
    assert torch.equal(edit_channels(codes, channels, statistics, alpha=0.0).flatten(), flat)
    full = edit_channels(codes, channels, statistics, alpha=1.0).flatten()
    picked = [layout.index("L0", 2), layout.index("L3", 7)]
    assert torch.equal(full[:, picked], statistics["mean"][picked].expand(3, -1))
    others = torch.ones(layout.total_channels, dtype=torch.bool)
    others[picked] = False
    assert torch.equal(full[:, others], flat[:, others])
    half = edit_channels(codes, picked[1], statistics["mean"], alpha=0.25).flatten()
    expected = 0.75 * flat[:, picked[1]] + 0.25 * statistics["mean"][picked[1]]
    torch.testing.assert_close(half[:, picked[1]], expected, rtol=0, atol=1e-6)
    assert torch.equal(codes.flatten(), flat)  # input untouched
    assert torch.equal(edit_channels(codes, picked, statistics, 0.5).input_transform, codes.input_transform)
    with torch.no_grad():  # the edited codes render
        image = generator.synthesis_from_styles(edit_channels(codes, picked, statistics, 0.5))
    assert image.shape == (3, 3, 32, 32) and torch.isfinite(image).all()
    for bad in (-0.1, 1.5, "x"):
        with pytest.raises(ValueError, match="alpha"):
            edit_channels(codes, picked, statistics, bad)
    with pytest.raises(ValueError, match="mean: expected shape"):
        edit_channels(codes, picked, statistics["mean"][:5], 0.5)


def test_tradeoff_curves_follow_the_papers_table_2_narrative():
    """With the paper's Table 2 numbers, the curves show what its Fig. 8 text says."""
    table = {"StyleSpace": dict(fs_sift=0.676, fs_sr=0.597, rroi=0.441, ams=0.990),
             "LowRank": dict(fs_sift=0.073, fs_sr=0.206, rroi=0.160, ams=0.776),
             "ReSeFa": dict(fs_sift=0.191, fs_sr=0.274, rroi=0.230, ams=0.948),
             "ours": dict(fs_sift=0.162, fs_sr=0.271, rroi=0.472, ams=0.986)}
    etas = np.linspace(0, 1, 11)
    curves = tradeoff_curves(table, etas)
    at_zero = {name: curve[0] for name, curve in curves.items()}
    assert max(at_zero, key=at_zero.get) == "LowRank" and min(at_zero, key=at_zero.get) == "StyleSpace"
    assert np.all(np.diff(curves["ours"]) > 0)  # ours improves as eta grows
    assert max(curves, key=lambda name: curves[name][-1]) == "ours"
    span = {name: curve.max() - curve.min() for name, curve in curves.items()}
    assert span["ReSeFa"] < span["StyleSpace"]  # ReSeFa steadier than StyleSpace
    # Closed form at eta = 0.5 for LowRank: IDsim = 0 (lowest FS_SIFT and FS_SR), Lesionsim = 0.
    assert curves["LowRank"][5] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="missing"):
        tradeoff_curves({"a": dict(fs_sift=1), "b": dict(fs_sift=2)}, 0.5)
