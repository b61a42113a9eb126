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
    wider = bench.parse_config("sg3t-tiny@128:channel_base=4096,sg3_first_cutoff=4")
    assert (wider.resolution, wider.channel_base, wider.sg3_first_cutoff) == (128, 4096, 4)
    assert bench.parse_config("sg2-tiny:channel_max=64").resolution == 32


@pytest.mark.parametrize("name, message", [("sg9-huge", "unknown config 'sg9-huge'"),
                                           ("sg2-tiny@63", "power of two"), ("sg2-tiny@8", "power of two"),
                                           ("sg2-tiny@x", "power of two"),
                                           ("sg2-tiny:channel_max", "takes NAME=VALUE"),
                                           ("sg2-tiny:channel_width=3", "unknown StyleGANConfig fields"),
                                           ("sg2-tiny:channel_max=0", "channel_max must be a positive integer")])
def test_bad_config_names_are_refused(bench, name, message):
    with pytest.raises(bench.BenchmarkError, match=message):
        bench.check_request(torch.device("cpu"), ["fast"], "none", [name], [4])


@pytest.mark.parametrize("implementations, precision, batches, message", [
    (["triton"], "none", [4], "CUDA only"), (["fast"], "fp16", [4], "fp16 layers are not supported on CPU"),
    (["auto"], "none", [4], "unknown implementation"), (["fast"], "none", [0], "positive")])
def test_bad_requests_are_refused(bench, implementations, precision, batches, message):
    with pytest.raises(bench.BenchmarkError, match=message):
        bench.check_request(torch.device("cpu"), implementations, precision, ["sg2-tiny"], batches)
