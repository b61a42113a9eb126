"""Projector: reduces reconstruction error on representable images, names its distance, validates inputs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from anonpaper.models.stylegan import (PYRAMID_DISTANCE_NAME, StyleGenerator, feature_distance, get_config,
                                       laplacian_pyramid_distance, project)


def _generator(name: str) -> StyleGenerator:
    G = StyleGenerator(get_config(name), seed=0)
    with torch.no_grad():
        for layer in G.synthesis_network.layers.values():
            if hasattr(layer, "noise_strength"):
                layer.noise_strength.fill_(0.1)
    return G


def _target(G: StyleGenerator, seed: int = 7) -> torch.Tensor:
    with torch.no_grad():
        ws = G.mapping(G.sample_latents(2, seed=seed))
        return G.synthesis(ws).clamp(-1, 1)


class TinyFeatures(nn.Module):
    """A fixed random two-layer conv net standing in for a cohort-trained U-Net's forward_features."""

    def __init__(self, channels: int):
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = nn.Conv2d(channels, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2, padding=1)

    def forward(self, images):
        first = torch.relu(self.conv1(images))
        return [first, torch.relu(self.conv2(first))]


@pytest.mark.unit
@pytest.mark.parametrize("name,space", [("sg2-tiny", "w+"), ("sg2-tiny", "w"), ("sg3t-tiny", "w+")])
def test_projector_reduces_error_on_generated_images(name, space):
    G = _generator(name)
    before = {k: v.clone() for k, v in G.state_dict().items()}
    target = _target(G)
    target_copy = target.clone()
    result = project(G, target, space=space, num_steps=80, w_avg_samples=500, seed=0)
    assert result.distance_name == PYRAMID_DISTANCE_NAME
    assert result.ws.shape == (2, G.num_ws, G.w_dim) and result.reconstruction.shape == target.shape
    assert torch.all(result.final_distance < 0.5 * result.initial_distance), (result.initial_distance,
                                                                            result.final_distance)
    # The returned codes reproduce the returned reconstruction (noise included for SG2).
    again = G.synthesis_from_styles(result.codes, noise_inputs=result.noise_inputs)
    torch.testing.assert_close(again, result.reconstruction)
    if space == "w":
        assert torch.equal(result.ws[:, 0], result.ws[:, -1])
    assert (result.noise_inputs is not None) == (name == "sg2-tiny")
    # Neither the generator nor the target were modified; requires_grad is restored.
    assert torch.equal(target, target_copy)
    for key, value in G.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert all(p.requires_grad for p in G.parameters())


@pytest.mark.unit
def test_projector_with_feature_extractor_names_it():
    G = _generator("sg3t-tiny")
    target = _target(G, seed=3)
    extractor = TinyFeatures(3)
    result = project(G, target, space="w+", num_steps=60, w_avg_samples=500, feature_extractor=extractor)
    assert result.distance_name == "features:TinyFeatures"
    assert torch.all(result.final_distance < result.initial_distance)
    # Pixel error also falls: the features constrain the image.
    pixel_before = laplacian_pyramid_distance(G.synthesis(G.w_avg.expand(2, G.num_ws, -1)).detach(), target)
    pixel_after = laplacian_pyramid_distance(result.reconstruction, target)
    assert torch.all(pixel_after < pixel_before)


@pytest.mark.unit
def test_distances_are_zero_for_identical_inputs_and_positive_otherwise():
    a = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    b = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    assert torch.all(laplacian_pyramid_distance(a, a) == 0) and torch.all(laplacian_pyramid_distance(a, b) > 0)
    features = TinyFeatures(3)
    assert torch.allclose(feature_distance(features(a), features(a)), torch.zeros(2))
    assert torch.all(feature_distance(features(a), features(b)) > 0)
    # Closed form: a constant offset c has no band-pass content, so the distance is MSE + coarsest residual
    # = 2 c^2. A unit spike at one pixel of a 16 px image: MSE 1/256; at level l (side 16 / 2^l) the spike has
    # height 4^-l and its band (pixel minus 2x2 block mean) keeps 3/4 of its energy; the 1x1 residual is 1/256.
    torch.testing.assert_close(laplacian_pyramid_distance(a + 0.1, a), torch.full((2,), 2 * 0.01))
    spike = a.clone()
    spike[:, :, 5, 5] += 1.0
    expected = 1 / 256 + sum(0.75 * 16.0 ** -level / (16 / 2 ** level) ** 2 for level in range(4)) + (1 / 256) ** 2
    torch.testing.assert_close(laplacian_pyramid_distance(spike, a), torch.full((2,), expected))


@pytest.mark.unit
def test_projector_validates_inputs():
    G = _generator("sg3t-tiny")
    good = _target(G)
    with pytest.raises(ValueError, match=r"in \[-1, 1\]"):
        project(G, good * 3, num_steps=1, w_avg_samples=10)
    with pytest.raises(ValueError, match="target must be a float tensor"):
        project(G, good[:, :1], num_steps=1, w_avg_samples=10)
    with pytest.raises(ValueError, match="space must be"):
        project(G, good, space="z", num_steps=1, w_avg_samples=10)
    with pytest.raises(ValueError, match="no noise inputs"):
        project(G, good, optimize_noise=True, num_steps=1, w_avg_samples=10)
