"""benchmarks/bench_vascular_metrics.py times the same measures both ways: its sweep gives identical numbers with the
originals measured once and with every record."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.unit


def test_the_benchmarks_two_sweeps_measure_the_same_numbers(load_benchmark):
    bench = load_benchmark("bench_vascular_metrics")
    torch.manual_seed(0)
    judges = [bench.judge(32) for _ in range(2)]
    draw = torch.Generator().manual_seed(1)
    originals = torch.rand(3, 3, 32, 32, generator=draw)
    edits = [(originals + 0.1 * torch.randn(3, 3, 32, 32, generator=draw)).clamp(0, 1) for _ in range(2)]
    real_features = bench.pipeline.fd_features(judges[0], torch.rand(3, 3, 32, 32, generator=draw))
    once = bench.sweep(judges, originals, edits, real_features, once=True)
    each = bench.sweep(judges, originals, edits, real_features, once=False)
    assert len(once) == len(each) == 2 * (1 + len(judges))  # per record: the unjudged row, one row per judge
    np.testing.assert_equal(once, each)
    assert {"fs_sift", "unet_distance", "fd"} <= set(once[0]) and {"fs_sr", "ams", "dr_agreement"} <= set(once[1])
