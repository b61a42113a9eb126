"""benchmarks/label_instrument_probe.py: its degradation augmentation and share arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.unit


def test_degradation_augment_is_seeded_keeps_range_and_leaves_its_input_alone(load_benchmark):
    probe = load_benchmark("label_instrument_probe")
    images = torch.rand(6, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    before = images.clone()
    augment = probe.DegradationAugment(strength=4.0)  # every degradation likely, so each branch runs
    first = augment(images, torch.Generator().manual_seed(1))
    second = augment(images, torch.Generator().manual_seed(1))
    assert torch.equal(images, before)
    assert torch.equal(first, second) and first.shape == images.shape
    assert float(first.min()) >= 0.0 and float(first.max()) <= 1.0
    assert not torch.equal(first, images)  # 6 images at probabilities 0.8 / 1.0 / 0.4: something changed
    # A degraded image loses fine detail: less power in its pixel-to-pixel differences than the original's.
    assert float(first.diff(dim=-1).pow(2).mean()) < float(images.diff(dim=-1).pow(2).mean())
    with pytest.raises(ValueError, match="strength"):
        probe.DegradationAugment(strength=0.0)


def test_grade_shares_and_total_variation(load_benchmark):
    probe = load_benchmark("label_instrument_probe")
    shares = probe.grade_shares(np.array([0, 0, 3, 4]))
    assert shares.tolist() == [0.5, 0.0, 0.0, 0.25, 0.25]
    assert probe.total_variation(shares, shares) == 0.0
    assert probe.total_variation(shares, np.array([0.0, 0.0, 0.0, 0.0, 1.0])) == pytest.approx(0.75)
