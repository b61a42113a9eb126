"""benchmarks/bench_gmia_batch.py: one row per batch size, each a measured cost per image and step, and clear
refusals of counts under one."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("bench_gmia_batch")


def test_one_measured_row_per_batch_size_with_the_profiles_generator(bench):
    rows = bench.measure("smoke", [4, 2], images=4, steps=1, rounds=1)
    assert [row["batch"] for row in rows] == [2, 4]
    for row in rows:
        assert set(row) == set(bench.FIELDS)
        assert row["profile"] == "smoke" and row["images"] == 4 and row["resolution"] == 32
        assert math.isfinite(row["ms_per_image_step"]) and math.isfinite(row["ms_per_image_step_cpu"])


@pytest.mark.parametrize("arguments, message", [
    (dict(batches=[0]), "--batches must be positive"), (dict(batches=[]), "--batches must be positive"),
    (dict(images=0), "--images must be at least 1"), (dict(steps=0), "--steps must be at least 1"),
    (dict(rounds=0), "--rounds must be at least 1")])
def test_counts_under_one_are_refused(bench, arguments, message):
    request = dict(profile="smoke", batches=[2], images=2, steps=1, rounds=1) | arguments
    with pytest.raises(ValueError, match=message):
        bench.measure(**request)
