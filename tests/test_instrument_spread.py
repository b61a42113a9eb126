"""benchmarks/instrument_spread.py: its summary reads the seed SD per thread count and the change between thread
counts at one seed, and it refuses bad requests."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def spread(load_benchmark):
    return load_benchmark("instrument_spread")


def test_summary_gives_the_seed_sd_and_the_largest_thread_change(spread):
    rows = [{"judge": "attacker", "measure": "rank-1", "seed": seed, "threads": threads, "value": value}
            for (seed, threads), value in {(0, 1): 0.5, (1, 1): 0.7, (0, 2): 0.6, (1, 2): 0.7}.items()]
    (line,) = spread.summary(rows)
    assert line.startswith("attacker (rank-1): 1 thread: mean 0.600, seed SD 0.141")
    assert "2 threads: mean 0.650, seed SD 0.071" in line
    assert line.endswith("largest change between thread counts at one seed 0.100")


@pytest.mark.parametrize("argv", [["--seeds", "0"], ["--threads", "0"]])
def test_bad_requests_exit_with_a_message(spread, argv, capsys):
    with pytest.raises(SystemExit) as raised:
        spread.main(argv)
    assert raised.value.code == 2 and "at least 1" in capsys.readouterr().err
