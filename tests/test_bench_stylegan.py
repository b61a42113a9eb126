"""benchmarks/bench_stylegan.py refuses bad requests with readable messages and parses NAME@RESOLUTION configs."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("bench_stylegan")


def test_config_at_another_resolution(bench):
    assert bench.parse_config("sg2-tiny").resolution == 32
    config = bench.parse_config("sg3t-tiny@64")
    assert config.resolution == 64 and config.architecture == "sg3t"


@pytest.mark.parametrize("name, message", [("sg9-huge", "unknown config 'sg9-huge'"),
                                           ("sg2-tiny@63", "power of two"), ("sg2-tiny@8", "power of two"),
                                           ("sg2-tiny@x", "power of two")])
def test_bad_config_names_are_refused(bench, name, message):
    with pytest.raises(bench.BenchmarkError, match=message):
        bench.check_request(torch.device("cpu"), ["fast"], "none", [name], [4])


@pytest.mark.parametrize("implementations, precision, batches, message", [
    (["triton"], "none", [4], "CUDA only"), (["fast"], "fp16", [4], "fp16 layers are not supported on CPU"),
    (["auto"], "none", [4], "unknown implementation"), (["fast"], "none", [0], "positive")])
def test_bad_requests_are_refused(bench, implementations, precision, batches, message):
    with pytest.raises(bench.BenchmarkError, match=message):
        bench.check_request(torch.device("cpu"), implementations, precision, ["sg2-tiny"], batches)
