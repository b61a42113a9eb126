"""show_table: digits, counts, value +- SE, no index column, n/a with reasons, percentages checked, wrapping HTML,
transposed or folded when too wide or long, glue; format_value and claims_markdown: no Python repr on the page."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from anonpaper.experiments.display import (LONG_TABLE_ROWS, BookTable, claims_markdown, format_number, format_value,
                                           show_table)

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
    assert formatted["tiny"] == ["2.0e-06", "0.000"], "a tiny non-zero value is not printed as 0.000"
    seconds = cells(show_table(pd.DataFrame({"seconds": [0.14, 147.2, 0.03]}), digits=0))["seconds"]
    assert seconds == ["0.14", "147", "0.030"], "two significant digits in fixed notation, not 1.4e-01"


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


def test_html_wraps_escapes_and_keeps_a_narrow_table_as_it_is():
    frame = pd.DataFrame({"method": ["<b>Snow</b>", "VS-Snow"], "statement": ["a long statement that wraps " * 4] * 2,
                          "accuracy": [0.5, 0.6]})
    markup = show_table(frame, caption="Scores")._repr_html_()
    assert markup.startswith('<div class="anonpaper-table" data-layout="2-plain">') and "overflow-x:auto" in markup
    assert "white-space:normal" in markup and "<caption>Scores</caption>" in markup and "<details>" not in markup
    assert "&lt;b&gt;Snow" in markup and "<b>Snow" not in markup
    assert markup.count("<th>") == 3


def test_a_wide_table_with_few_rows_is_transposed():
    frame = pd.DataFrame({"method": ["Snow", "VS-Snow"], **{f"metric {index}": [0.1234, 0.5] for index in range(14)}})
    table = show_table(frame)
    assert table.layout() == "transposed"
    markup = table._repr_html_()
    assert "<thead><tr><th>method</th><th>Snow</th><th>VS-Snow</th></tr></thead>" in markup
    assert '<tr><td>metric 0</td><td class="number">0.123</td><td class="number">0.500</td></tr>' in markup
    assert "<details>" not in markup


def test_wide_tables_with_many_rows_and_long_tables_are_folded():
    wide = pd.DataFrame({"method": [f"m{row}" for row in range(10)],
                         **{f"metric {index}": np.linspace(0, 1, 10) for index in range(14)}})
    long = pd.DataFrame({"metric": [f"name {row}" for row in range(LONG_TABLE_ROWS + 1)], "value": 0.5})
    for frame, rows, columns in ((wide, 10, 15), (long, LONG_TABLE_ROWS + 1, 2)):
        table = show_table(frame, caption="Sweep")
        assert table.layout() == "folded"
        markup = table._repr_html_()
        assert f"<details><summary>Sweep: show the table ({rows} rows × {columns} columns: " in markup
        assert markup.index("</summary><table>") < markup.index("</table></details></div>")
    assert show_table(long.head(LONG_TABLE_ROWS)).layout() == "plain"


def test_an_older_table_output_is_laid_out_again_from_its_cells():
    frame = pd.DataFrame({"method": ["Snow", "VS-Snow"], **{f"metric {index}": [0.1234, 0.5] for index in range(14)}})
    table = show_table(frame, caption="Old")
    older = table._repr_html_().replace(' data-layout="2-transposed"', "")
    older = older.replace(older[older.index("<thead>"):older.index("</table>")], table._table_html(False))
    again = BookTable.from_html(older)
    assert again is not None and again.caption == "Old" and again.numeric == table.numeric
    assert again.frame.equals(table.frame) and again.layout() == "transposed"
    assert BookTable.from_html(table._repr_html_()) is None, "the current layout is left alone"
    assert BookTable.from_html("<div>not a table</div>") is None


def test_value_and_standard_error_share_a_cell():
    frame = pd.DataFrame({"method": ["a", "b"], "PSNR": [25.671, 20.5], "PSNR_se": [0.123, np.nan],
                          "accuracy": [0.8123, 0.7], "accuracy_se": [0.031, 0.02], "HR": [1.0, 0.781],
                          "SE": [0.0, 0.041], "FD": [7.6, 8.1], "FD_spread": [0.2, 0.3]})
    table = show_table(frame, digits={"PSNR": 2}, units={"accuracy": "%"}, se={"FD": "FD_spread"})
    assert list(table.frame.columns) == ["method", "PSNR ± SE", "accuracy (%) ± SE", "HR ± SE", "FD ± SE"]
    formatted = cells(table)
    assert formatted["PSNR ± SE"] == ["25.67 ± 0.12", "20.50"], "the SE takes the value's decimals; no SE, no ±"
    assert formatted["accuracy (%) ± SE"] == ["81.2 ± 3.1", "70.0 ± 2.0"], "and its unit"
    assert formatted["HR ± SE"] == ["1.000 ± 0.000", "0.781 ± 0.041"], "a column named SE belongs to its left"
    assert formatted["FD ± SE"] == ["7.600 ± 0.200", "8.100 ± 0.300"]
    with pytest.raises(ValueError, match=r"se names unknown column\(s\) \['nope'\]"):
        show_table(frame, se={"PSNR": "nope"})


def test_counts_read_as_integers_in_tables_whose_rows_are_quantities():
    stats = pd.DataFrame({"all": [963.0, 120.0, 0.477], "train": [757.0, 84.0, 0.523]},
                         index=pd.Index(["images", "patients", "female_fraction"], name="quantity"))
    formatted = cells(show_table(stats))
    assert formatted["all"] == ["963", "120", "0.477"] and formatted["train"] == ["757", "84", "0.523"]
    described = cells(show_table(pd.DataFrame({"x": np.linspace(0.5, 2.0, 32)}).describe().rename_axis("stat")))
    assert described["x"][0] == "32" and described["x"][1] == "1.250"
    scores = cells(show_table(pd.DataFrame({"method": ["a", "b"], "auc": [1.0, 0.9], "f1": [0.0, 0.5]})))
    assert scores["auc"] == ["1.000", "0.900"], "a row of 1.0 and 0.0 is a score, not a count"


def test_format_value_never_writes_a_python_repr():
    value = {"StyleSpace": {"identity_similarity": np.float64(0.92524), "n": np.int64(32)},
             "k=2": [np.float32(0.5), None], "ok": np.bool_(True), "gap": float("nan")}
    text = format_value(value)
    assert text == "StyleSpace: identity_similarity 0.9252, n 32; k=2: 0.5, n/a; ok: yes; gap: n/a"
    assert "np." not in text and "{" not in text and "'" not in text
    assert format_value([[1, 2], [3.25, 4]]) == "(1, 2), (3.25, 4)"
    assert format_value(np.array([0.1, 0.2])) == "0.1, 0.2"
    assert [format_number(value) for value in (1e7, 123456.0, 0.00012346, -3.5e-5)] == [
        "1e+07", "123,456", "0.0001235", "-3.5e-05"]


def test_claims_markdown_puts_the_papers_number_beside_ours():
    from anonpaper.experiments.claims import Claim

    claims = [Claim("a", "Snow lowers accuracy.", paper={"BRSET": [75.12, 52.15]}, ours={"p=0": np.float64(67.92)},
                    verdict="holds", reason="beyond 2 SE", by_design="the phantom puts sex in the vessels"),
              {"id": "b", "statement": "Utility is kept", "paper": "0.774 -> 0.737", "ours": None,
               "verdict": "undecided", "reason": "too few test images (10 < 40)", "kind": "phantom-check"}]
    text = claims_markdown(claims)
    assert text.splitlines() == [
        "- **a** holds (by design): Snow lowers accuracy. Paper: BRSET: 75.12, 52.15; ours: p=0: 67.92. "
        "*beyond 2 SE By design: the phantom puts sex in the vessels.*",
        "- **b** undecided: Utility is kept. Paper: 0.774 -> 0.737; ours: n/a. *too few test images (10 < 40)*"]
    assert claims_markdown(claims, kinds=["paper"]).count("\n") == 0
    assert claims_markdown(claims, verdicts=["does not hold"]) == ""


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
