"""benchmarks/bench_projector.py: one row per (config, mode, batch), each a measured cost per image and step and a
counted amount of work that grows with the generator's width; clear refusals of bad requests."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.unit


WIDE = "sg2-tiny:channel_base=2048,channel_max=64"  # sg2-tiny with twice the feature maps in every layer


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("bench_projector")


def test_one_measured_row_per_case_with_the_work_counted(bench):
    rows = bench.measure(["sg2-tiny", WIDE], ["noise", "codes"], [2, 1], steps=1, rounds=1, images=10,
                         projector_steps=30)
    assert [(row["config"], row["mode"], row["batch"]) for row in rows] == [
        (config, mode, batch) for config in ("sg2-tiny", WIDE)
        for mode in ("noise", "codes") for batch in (1, 2)]
    for row in rows:
        assert set(row) == set(bench.FIELDS)
        assert row["resolution"] == 32 and row["threads"] >= 1
        assert math.isfinite(row["ms_per_image_step"]) and math.isfinite(row["ms_per_image_step_cpu"])
        assert row["projected_minutes"] == pytest.approx(row["ms_per_image_step"] * 1e-3 * 10 * 30 / 60, abs=0.01)
    work = {(row["config"], row["mode"]): row["gflop_per_image_step"] for row in rows}
    # A forward and backward of the synthesis at 32 px: more than its forward alone, and twice the feature maps
    # cost more than twice the work (a convolution's cost grows with the product of its input and output maps).
    assert 0 < work["sg2-tiny", "codes"] <= work["sg2-tiny", "noise"]
    assert work[WIDE, "codes"] > 2 * work["sg2-tiny", "codes"]


@pytest.mark.parametrize("arguments, message", [
    (dict(batches=[0]), "--batches must be positive"), (dict(batches=[]), "--batches must be positive"),
    (dict(steps=0), "--steps must be at least 1"), (dict(rounds=0), "--rounds must be at least 1"),
    (dict(images=0), "--images must be at least 1"), (dict(projector_steps=0), "--projector-steps must be"),
    (dict(modes=["pixels"]), "--modes must be some of"), (dict(modes=[]), "--modes must be some of")])
def test_bad_counts_and_modes_are_refused(bench, arguments, message):
    request = dict(configs=["sg2-tiny"], modes=["codes"], batches=[1], steps=1, rounds=1, images=1,
                   projector_steps=1) | arguments
    with pytest.raises(ValueError, match=message):
        bench.measure(**request)


def test_noise_maps_of_a_stylegan3_and_unknown_configs_are_refused(bench):
    with pytest.raises(bench.BenchmarkError, match="StyleGAN3 does not have"):
        bench.measure(["sg3t-tiny"], ["noise"], [1], steps=1, rounds=1, images=1, projector_steps=1)
    with pytest.raises(bench.BenchmarkError, match="unknown config 'sg9'"):
        bench.measure(["sg9"], ["codes"], [1], steps=1, rounds=1, images=1, projector_steps=1)
