"""benchmarks/label_instrument_probe.py: its share arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.unit


def test_grade_shares_and_total_variation(load_benchmark):
    probe = load_benchmark("label_instrument_probe")
    shares = probe.grade_shares(np.array([0, 0, 3, 4]))
    assert shares.tolist() == [0.5, 0.0, 0.0, 0.25, 0.25]
    assert probe.total_variation(shares, shares) == 0.0
    assert probe.total_variation(shares, np.array([0.0, 0.0, 0.0, 0.0, 1.0])) == pytest.approx(0.75)
