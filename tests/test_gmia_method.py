"""GMIA latent code optimisation: the identity margin loss (planted cosines), the utility loss, and the batched
optimiser on tiny random networks (sg2-tiny, one channel, 32 px)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from anonpaper.methods.gmia import (LatentOptimizationSettings, anonymize, identity_cosine, identity_loss,
                                    utility_loss)
from anonpaper.models.encoders import LatentEncoder
from anonpaper.models.stylegan import StyleGenerator, get_config, to_signed_range

pytestmark = pytest.mark.unit


def _unit_vector_at(angle: float) -> torch.Tensor:
    return torch.tensor([[np.cos(angle), np.sin(angle), 0.0]], dtype=torch.float64)


@pytest.mark.parametrize("margin", [0.0, -0.5, -0.7])
def test_identity_loss_is_zero_below_the_margin_and_pushes_cosine_down_above_it(margin):
    real = torch.tensor([[2.0, 0.0, 0.0]], dtype=torch.float64)  # scale must not matter
    for angle in np.linspace(0.05, np.pi - 0.05, 23):
        anonymised = (3.0 * _unit_vector_at(angle)).requires_grad_(True)
        cosine = float(np.cos(angle))
        loss = identity_loss(real, anonymised, margin)
        loss.sum().backward()
        loss = loss.detach()
        if cosine <= margin:
            assert float(loss) == 0.0 and torch.count_nonzero(anonymised.grad) == 0
        else:
            assert float(loss) == pytest.approx(cosine - margin, abs=1e-12)
            stepped = anonymised.detach() - 1e-3 * anonymised.grad  # a small gradient-descent step
            assert float(identity_cosine(real, stepped)) < cosine
    # Against a reference cosine (torch's), several rows at once.
    rows = torch.randn(5, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    others = torch.randn(5, 7, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    torch.testing.assert_close(identity_cosine(rows, others), nn.functional.cosine_similarity(rows, others, dim=1))
    with pytest.raises(ValueError, match="margin"):
        identity_loss(rows, others, margin=-1.5)


def test_utility_loss_closed_form():
    real = torch.zeros(2, 3, 2, 2)
    anonymised = torch.ones(2, 3, 2, 2)
    anonymised[1] *= 2
    torch.testing.assert_close(utility_loss(real, anonymised), torch.tensor([1.0, 4.0]))
    with pytest.raises(ValueError, match="one shape"):
        utility_loss(real, anonymised[:, :2])


class _TinyEmbedding(nn.Module):
    """Conv -> BatchNorm -> global pool -> linear: a tiny E_id / E_ut with BatchNorm (eval mode must be used)."""

    def __init__(self, out_features: int, seed: int):
        super().__init__()
        torch.manual_seed(seed)
        self.features = nn.Sequential(nn.Conv2d(1, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                      nn.Conv2d(8, 8, 3, stride=2, padding=1))
        self.head = nn.Linear(8, out_features)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


@pytest.fixture(scope="module")
def networks():
    config = get_config("sg2-tiny", image_channels=1)
    generator = StyleGenerator(config, seed=0)
    encoder = LatentEncoder(config, generator.num_ws, seed=1)
    identity, utility = _TinyEmbedding(6, seed=2), _TinyEmbedding(4, seed=3)
    identity.train()  # anonymize must switch to eval mode and back
    images = torch.rand(3, 1, 32, 32, generator=torch.Generator().manual_seed(4))
    return encoder, generator, identity, utility, images


def _settings(**changes) -> LatentOptimizationSettings:
    return LatentOptimizationSettings(**{"steps": 12, "learning_rate": 0.05, "progress": False, **changes})


def test_anonymize_outputs_batch_invariance_and_untouched_networks(networks):
    encoder, generator, identity, utility, images = networks
    before = {name: value.clone() for name, value in identity.state_dict().items()}
    together = anonymize(encoder, generator, images, identity, utility.forward_features, _settings(batch_size=3))
    assert together.images.shape == images.shape and 0 <= float(together.images.min()) <= float(together.images.max()) <= 1
    assert together.ws.shape == (3, generator.num_ws, generator.w_dim)
    for name in ("identity_loss", "utility_loss", "total_loss", "cosine"):
        assert getattr(together, name).shape == (3, 12)
    torch.testing.assert_close(together.total_loss, together.identity_loss + together.utility_loss)
    torch.testing.assert_close(together.initial_ws, encoder(to_signed_range(images)).detach())
    assert bool((together.ws[:, 0] == together.ws[:, -1]).all())  # W space: one w per image
    # Each image's trajectory does not depend on the others in its batch. Exact where the arithmetic is the same:
    # the same batch size with other companions runs the same kernels, so image 0's trajectory is bit-identical.
    companions = images.clone()
    companions[1:] = torch.rand(2, 1, 32, 32, generator=torch.Generator().manual_seed(5))
    swapped = anonymize(encoder, generator, companions, identity, utility.forward_features, _settings(batch_size=3))
    assert torch.equal(swapped.ws[0], together.ws[0]) and torch.equal(swapped.cosine[0], together.cosine[0])
    # Across batch sizes the CPU kernels differ (oneDNN picks another convolution for a batch of 1 than of 3, and
    # rounds differently, e.g. capped at AVX2), and Adam's normalised steps turn float32 rounding in near-zero
    # gradients into learning-rate-sized moves over 12 steps. So compare what does not go through the optimiser:
    # the starting cosine (one forward pass) to float32 accumulation tolerance, and a one-step trajectory.
    alone = anonymize(encoder, generator, images, identity, utility.forward_features, _settings(batch_size=1))
    torch.testing.assert_close(alone.initial_ws, together.initial_ws, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(alone.cosine[:, 0], together.cosine[:, 0], atol=1e-5, rtol=1e-4)
    one_step_alone = anonymize(encoder, generator, images, identity, utility.forward_features,
                               _settings(batch_size=1, steps=1))
    one_step_together = anonymize(encoder, generator, images, identity, utility.forward_features,
                                  _settings(batch_size=3, steps=1))
    # Adam's first step is lr * g / (|g| + eps): a relative gradient error of float32 rounding (~1e-6) moves it by
    # about lr * 1e-6; 1e-4 leaves room for coordinates whose gradient is near eps (measured: 5e-7 capped at AVX2).
    torch.testing.assert_close(one_step_alone.ws, one_step_together.ws, atol=1e-4, rtol=0)
    # Networks: weights, running statistics, mode and requires_grad as before.
    assert identity.training and all(p.requires_grad for p in identity.parameters())
    assert all(torch.equal(before[name], value) for name, value in identity.state_dict().items())
    assert all(p.requires_grad for p in generator.parameters()) and all(p.grad is None for p in encoder.parameters())
    # Deterministic.
    again = anonymize(encoder, generator, images, identity, utility.forward_features, _settings(batch_size=3))
    assert torch.equal(again.ws, together.ws)


def test_identity_only_optimisation_lowers_cosine_to_the_margin(networks):
    encoder, generator, identity, utility, images = networks
    margin = 0.8  # reachable by these random networks within a few steps
    settings = _settings(utility_weight=0.0, margin=margin, steps=25, learning_rate=0.1)
    result = anonymize(encoder, generator, images, identity, utility.forward_features, settings)
    start = result.cosine[:, 0]
    assert bool((start > margin).all())  # a projection starts close to its source: the loss is active
    # Each image's cosine falls to the margin; from then on its loss is exactly zero, so (Adam with beta1 = 0)
    # its latent, and hence its cosine, no longer moves.
    below = result.cosine <= margin
    assert bool(below[:, -1].all()) and bool((result.final_cosine <= margin).all())
    assert bool((result.identity_loss[below] == 0).all()) and bool((result.identity_loss[~below] > 0).all())
    for row in range(images.shape[0]):
        first = int(below[row].nonzero()[0])
        assert bool((result.cosine[row, first:] == result.cosine[row, first]).all())
        assert bool((result.cosine[row, 1:first + 1] < result.cosine[row, :first]).all())  # descending before
    # Utility-only: the utility loss falls and the identity loss is not optimised.
    utility_only = anonymize(encoder, generator, images, identity, utility.forward_features,
                             _settings(identity_weight=0.0, steps=20))
    assert bool((utility_only.utility_loss[:, -1] < utility_only.utility_loss[:, 0]).all())


def test_anonymize_validation(networks):
    encoder, generator, identity, utility, images = networks
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        anonymize(encoder, generator, images * 2 - 1, identity, utility, _settings())
    with pytest.raises(ValueError, match="float tensor"):
        anonymize(encoder, generator, images[:, :, :16, :16], identity, utility, _settings())
    with pytest.raises(ValueError, match="margin"):
        LatentOptimizationSettings(margin=-2.0)
    with pytest.raises(ValueError, match="steps"):
        LatentOptimizationSettings(steps=0)
    with pytest.raises(ValueError, match="identity_network"):
        anonymize(encoder, generator, images, lambda x: x[:1].flatten(1), utility, _settings())


@pytest.mark.gpu
def test_anonymize_on_cuda_agrees_with_cpu_at_the_start(networks):
    # Only the first step is compared: TF32 convolutions on CUDA perturb gradients slightly, and Adam with beta1 = 0
    # moves every coordinate by about the learning rate whatever its gradient's size, so trajectories may diverge.
    encoder, generator, identity, utility, images = networks
    settings = _settings(steps=2)
    cpu = anonymize(encoder, generator, images, identity, utility.forward_features, settings)
    moved = [module.to("cuda") for module in (encoder, generator, identity, utility)]
    try:
        cuda = anonymize(moved[0], moved[1], images, moved[2], moved[3].forward_features, settings)
    finally:
        for module in moved:
            module.to("cpu")
    assert cuda.images.device.type == "cpu" and cuda.images.shape == cpu.images.shape
    torch.testing.assert_close(cuda.initial_ws, cpu.initial_ws, atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(cuda.cosine[:, 0], cpu.cosine[:, 0], atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(cuda.utility_loss[:, 0], cpu.utility_loss[:, 0], atol=1e-3, rtol=2e-2)
