"""benchmarks/result_rows.py appends rows, adds a column a benchmark gained, and refuses a header it cannot keep."""

from __future__ import annotations

import csv

import pytest

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def result_rows(load_benchmark):
    return load_benchmark("result_rows")


def _read(path):
    with open(path, newline="") as stream:
        return list(csv.reader(stream))


def test_rows_append_and_a_new_column_keeps_the_old_rows(result_rows, tmp_path):
    path = tmp_path / "results" / "rows.csv"
    assert result_rows.append_rows(path, ["loop", "rate"], [{"loop": "plain", "rate": "1.5"}]) == 1
    result_rows.append_rows(path, ["loop", "rate"], [{"loop": "package", "rate": "1.2"}])
    assert _read(path) == [["loop", "rate"], ["plain", "1.5"], ["package", "1.2"]]
    result_rows.append_rows(path, ["loop", "layout", "rate"], [{"loop": "plain", "layout": "nhwc", "rate": "2"}])
    assert _read(path) == [["loop", "layout", "rate"], ["plain", "", "1.5"], ["package", "", "1.2"],
                           ["plain", "nhwc", "2"]]


def test_a_header_with_a_column_the_benchmark_lacks_is_refused(result_rows, tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text("loop,rate,retired\nplain,1.5,x\n")
    with pytest.raises(ValueError, match=r"rows.csv: its columns \['retired'\] are not among"):
        result_rows.append_rows(path, ["loop", "rate"], [{"loop": "plain", "rate": "2"}])
    assert path.read_text() == "loop,rate,retired\nplain,1.5,x\n"
