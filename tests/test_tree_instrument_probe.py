"""benchmarks/tree_instrument_probe.py: the degradations it reads the tree statistics under."""

from __future__ import annotations

import math

import pytest
import torch

pytestmark = pytest.mark.unit


def test_degradations_keep_shape_and_range_and_leave_the_real_images_alone(load_benchmark):
    probe = load_benchmark("tree_instrument_probe")
    real = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    before = real.clone()
    sets = probe.degraded(real, seed=0)
    assert torch.equal(real, before) and sets["real"] is real
    assert set(probe.RULE_SETTINGS) <= set(sets) and "16 px and back" in sets
    for name, images in sets.items():
        assert images.shape == real.shape, name
        assert 0.0 <= float(images.min()) and float(images.max()) <= 1.0, name
    assert math.isinf(probe.psnr_db(real, real))
    mild, strong = probe.psnr_db(sets["noise sd 0.005"], real), probe.psnr_db(sets["noise sd 0.04"], real)
    assert mild > strong > 20.0
