"""FID preprocessing: the Inception-v3 extractor receives exactly what torchvision's weights expect."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from anonpaper.metrics.distribution import inception_input, load_inception_extractor

pytestmark = pytest.mark.unit

IMAGENET_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
IMAGENET_STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)


class _RecordingInception(torch.nn.Module):
    """Stands in for torchvision's Inception-v3: accepts any state dict and records what it is fed."""

    def __init__(self, **options):
        super().__init__()
        self.options = options
        self.fc = torch.nn.Identity()
        self.inputs: list[torch.Tensor] = []

    def load_state_dict(self, state, strict=True):
        return None

    def forward(self, images):
        self.inputs.append(images.clone())
        return images.mean(dim=(2, 3))


def _torchvision_reference(images: torch.Tensor) -> torch.Tensor:
    """torchvision's own pipeline for these weights: resize, ImageNet-normalise, then ``transform_input=True``."""
    from torchvision.models.inception import Inception3

    resized = F.interpolate(images, size=(299, 299), mode="bilinear", align_corners=False)
    normalised = (resized - IMAGENET_MEAN) / IMAGENET_STD
    network = Inception3(aux_logits=False, init_weights=False, transform_input=True)
    return network._transform_input(normalised)


def test_inception_input_matches_torchvision_transform_input():
    images = torch.rand(2, 3, 40, 40, generator=torch.Generator().manual_seed(0))
    observed = inception_input(images)
    assert observed.shape == (2, 3, 299, 299)
    torch.testing.assert_close(observed, _torchvision_reference(images), rtol=0, atol=1e-5)
    # [0, 1] maps onto [-1, 1]: black to -1, white to +1.
    assert float(inception_input(torch.zeros(1, 1, 16, 16)).max()) == pytest.approx(-1.0, abs=1e-6)
    assert float(inception_input(torch.ones(1, 1, 16, 16)).min()) == pytest.approx(1.0, abs=1e-6)


def test_loaded_extractor_feeds_the_network_minus_one_to_one_inputs(tmp_path, monkeypatch):
    import torchvision

    built: list[_RecordingInception] = []

    def build(**options):
        built.append(_RecordingInception(**options))
        return built[-1]

    monkeypatch.setattr(torchvision.models, "inception_v3", build)
    torch.save({"Mixed_7c.branch_pool.conv.weight": torch.zeros(1)}, tmp_path / "inception.pth")
    extract = load_inception_extractor(tmp_path / "inception.pth")
    grey = torch.rand(3, 1, 24, 24, generator=torch.Generator().manual_seed(1))
    extract(grey)
    (network,) = built
    assert network.options.get("transform_input") is False  # nothing rescales the input a second time
    (recorded,) = network.inputs
    torch.testing.assert_close(recorded, _torchvision_reference(grey.repeat(1, 3, 1, 1)), rtol=0, atol=1e-5)
