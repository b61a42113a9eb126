"""anonpaper.train.augment.DegradationAugment: nnU-Net's blur, low resolution and noise, drawn per image."""

from __future__ import annotations

import pytest
import torch

from anonpaper.train.augment import DegradationAugment

pytestmark = pytest.mark.unit


def _detail(images: torch.Tensor) -> float:
    """Mean squared difference of horizontal neighbours: what a blur or a coarser image loses first."""
    return float(images.diff(dim=-1).pow(2).mean())


def test_degradation_is_seeded_keeps_range_and_masks_and_leaves_its_input_alone():
    images = torch.rand(8, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    masks = torch.rand(8, 32, 32, generator=torch.Generator().manual_seed(2)) > 0.5
    before, masks_before = images.clone(), masks.clone()
    augment = DegradationAugment(strength=4.0)  # probabilities 0.8, 1.0, 0.4: every branch runs
    first, kept = augment(images, torch.Generator().manual_seed(1), masks)
    second = augment(images, torch.Generator().manual_seed(1))
    assert torch.equal(images, before) and torch.equal(masks, masks_before) and kept is masks
    assert torch.equal(first, second) and first.shape == images.shape
    assert float(first.min()) >= 0.0 and float(first.max()) <= 1.0
    assert _detail(first) < 0.5 * _detail(images)  # white noise blurred and coarsened: most detail gone
    other = augment(images, torch.Generator().manual_seed(3))
    assert not torch.equal(first, other)


def test_each_degradation_alone_and_never_when_not_drawn():
    images = torch.rand(6, 1, 32, 32, generator=torch.Generator().manual_seed(0))
    rare = DegradationAugment(strength=1e-6)  # no image is chosen for anything
    assert torch.equal(rare(images, torch.Generator().manual_seed(0)), images)
    blur_only = DegradationAugment(strength=4.0, zoom=(1.0, 1.0))  # zoom 1: the low-resolution step is the identity
    blurred = blur_only(images, torch.Generator().manual_seed(0))
    assert _detail(blurred) < _detail(images)
    constant = torch.full((2, 3, 16, 16), 0.4)
    # A flat image has no spread: noise scaled by the image's own SD leaves it flat, and blur keeps it.
    assert torch.allclose(DegradationAugment(strength=4.0)(constant, torch.Generator().manual_seed(0)), constant)


@pytest.mark.parametrize("kwargs, message", [({"strength": 0.0}, "strength"), ({"strength": 5.0}, "strength"),
                                             ({"sigma": (1.0, 0.5)}, "sigma"), ({"zoom": (0.5, 1.5)}, "zoom")])
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DegradationAugment(**kwargs)
