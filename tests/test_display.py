"""show_table: digits, no index column, n/a with reasons, percentages checked, wrapping/scrolling HTML, glue."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from anonpaper.experiments.display import BookTable, show_table

pytestmark = pytest.mark.unit


def cells(table: BookTable) -> dict[str, list[str]]:
    return {column: table.frame[column].tolist() for column in table.frame.columns}


def test_decimals_per_column_match_python_formatting():
    rng = np.random.default_rng(0)
    values = rng.normal(scale=50.0, size=20)
    table = show_table(pd.DataFrame({"x": values, "y": values}), digits={"y": 1})
    assert cells(table)["x"] == [f"{value:,.3f}" for value in values]
    assert cells(table)["y"] == [f"{value:,.1f}" for value in values]


def test_whole_number_columns_show_no_decimals_unless_asked():
    frame = pd.DataFrame({"n_test": [1200.0, np.nan], "mixed": [1, 2.5], "forced": [3.0, 4.0]})
    formatted = cells(show_table(frame, digits={"forced": 1}))
    assert formatted["n_test"] == ["1,200", "n/a"], "counts stored as float (a NaN) read as counts"
    assert formatted["mixed"] == ["1.000", "2.500"], "one column, one format"
    assert formatted["forced"] == ["3.0", "4.0"]


def test_integers_booleans_lists_and_tiny_numbers():
    frame = pd.DataFrame({"n": [1200, 7], "holds": [True, False], "p": [[0.1, 0.3], [0.5]], "tiny": [2e-6, 0.0]})
    formatted = cells(show_table(frame))
    assert formatted["n"] == ["1,200", "7"] and formatted["holds"] == ["yes", "no"]
    assert formatted["p"] == ["0.1, 0.3", "0.5"]
    assert formatted["tiny"] == ["2.000e-06", "0.000"], "a tiny non-zero value is not printed as 0.000"


def test_index_column_only_when_it_means_something():
    plain = show_table(pd.DataFrame({"a": [1.0, 2.0]}, index=[5, 9]).reset_index(drop=True))
    assert list(plain.frame.columns) == ["a"]
    named = show_table(pd.DataFrame({"a": [1.0]}, index=pd.Index(["Snow"], name="method")))
    assert list(named.frame.columns) == ["method", "a"] and cells(named)["method"] == ["Snow"]
    assert "<th></th>" not in plain._repr_html_()


def test_missing_values_say_why():
    frame = pd.DataFrame({"auc": [0.9, np.nan], "note": [None, "x"], "k": [np.nan, 1.5]})
    formatted = cells(show_table(frame, missing={"auc": "one class in the test set"}))
    assert formatted["auc"] == ["0.900", "n/a (one class in the test set)"]
    assert formatted["note"] == ["n/a", "x"] and formatted["k"] == ["n/a", "1.500"]
    assert "nan" not in repr(show_table(frame, missing="not run")).lower().replace("n/a", "")


def test_percent_columns_hold_fractions():
    frame = pd.DataFrame({"accuracy": [0.8123, 1.0], "seconds": [1.5, 2.0]})
    table = show_table(frame, units={"accuracy": "%", "seconds": "s"})
    assert list(table.frame.columns) == ["accuracy (%)", "seconds (s)"]
    assert cells(table)["accuracy (%)"] == ["81.2", "100.0"], "same precision as 3 decimals of a fraction"
    with pytest.raises(ValueError, match=r"fractions in \[0, 1\].*81.2"):
        show_table(pd.DataFrame({"accuracy": [81.2]}), units={"accuracy": "%"})
    with pytest.raises(ValueError, match="non-numbers"):
        show_table(pd.DataFrame({"accuracy": ["high"]}), units={"accuracy": "%"})


@pytest.mark.parametrize("options, words", [
    ({"digits": {"nope": 2}}, "digits names unknown column(s) ['nope']"),
    ({"units": {"nope": "s"}}, "units names unknown column(s) ['nope']"),
    ({"digits": -1}, "digits must be >= 0"),
    ({"label": "table-1"}, "label must look like 'tbl-<chapter>-<name>'"),
    ({"label": "tbl-Snow"}, "label must look like"),
    ({"label": "tbl-"}, "label must look like"),
])
def test_bad_options_raise(options, words):
    with pytest.raises(ValueError, match=__import__("re").escape(words)):
        show_table(pd.DataFrame({"a": [1.0]}), **options)
    with pytest.raises(ValueError, match="expects a pandas DataFrame"):
        show_table([[1, 2]])


def test_html_scrolls_wraps_and_escapes():
    frame = pd.DataFrame({f"column {index}": ["<b>a long statement that should wrap</b>"] for index in range(30)})
    markup = show_table(frame, caption="Wide")._repr_html_()
    assert markup.startswith('<div class="anonpaper-table">') and "overflow-x:auto" in markup
    assert "white-space:normal" in markup and "<caption>Wide</caption>" in markup
    assert "&lt;b&gt;a long statement" in markup and "<b>a long" not in markup
    assert markup.count("<th>") == 30


def test_numbers_are_right_aligned_text_is_not():
    markup = show_table(pd.DataFrame({"method": ["Snow"], "accuracy": [0.5]}))._repr_html_()
    assert "<td>Snow</td>" in markup and '<td class="number">0.500</td>' in markup


def test_label_glues_the_table_without_displaying_it_twice(monkeypatch):
    import myst_nb

    glued = []
    monkeypatch.setattr(myst_nb, "glue", lambda name, value, display=True: glued.append((name, value, display)))
    table = show_table(pd.DataFrame({"a": [1.0]}), label="tbl-01_snow_vs_snow-attacker")
    assert glued == [("tbl-01_snow_vs_snow-attacker", table, False)]


def test_dicts_and_lists_read_as_text_not_python_reprs():
    frame = pd.DataFrame({"claim": ["a"], "ours": [{"BRSET": [82.6, 78.1], "n": 3}]})
    text = show_table(frame).frame.iloc[0, 1]
    assert text == "BRSET: 82.6, 78.1; n: 3" and "{" not in text
