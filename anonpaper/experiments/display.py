"""Tables for the book: one helper that formats a DataFrame the same way in every chapter.

:func:`show_table` gives every table sensible digits (a fixed number of decimals per column, so numbers line up),
no index column, text that wraps, ``n/a (why)`` instead of NaN, fractions shown as percentages only where the
caller says so (and checked to be fractions), a horizontal scroll bar instead of a cut-off when the table is wider
than the page, and, when asked, a myst-nb glue label (``tbl-<chapter>-<name>``) so the page can place and
reference it.
"""

from __future__ import annotations

import html
import math
import numbers
import re
from typing import Any, Mapping

import numpy as np
import pandas as pd

PERCENT = "%"
_LABEL = re.compile(r"^tbl-[a-z0-9][a-z0-9_-]*$")
# Scoped to the table's wrapper: scroll sideways when too wide, wrap long text, right-align numbers.
_STYLE = (".anonpaper-table{overflow-x:auto;max-width:100%;margin-bottom:1em}"
          ".anonpaper-table table{border-collapse:collapse;font-size:0.9em}"
          ".anonpaper-table th,.anonpaper-table td{padding:0.25em 0.6em;border-bottom:1px solid #ddd;"
          "vertical-align:top;white-space:normal;overflow-wrap:break-word;max-width:28em;text-align:left}"
          ".anonpaper-table td.number{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}"
          ".anonpaper-table caption{caption-side:top;text-align:left;font-weight:600;padding-bottom:0.3em}")


class BookTable:
    """A formatted table: HTML for the book (``_repr_html_``), aligned text for a terminal (``repr``).

    Attributes:
        frame: The formatted cells (strings), with the final column headers.
        numeric: For each column, whether it holds numbers (right-aligned).
        caption: Optional caption shown above the table.
    """

    def __init__(self, frame: pd.DataFrame, numeric: list[bool], caption: str | None = None):
        self.frame = frame
        self.numeric = numeric
        self.caption = caption

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(str(column))}</th>" for column in self.frame.columns)
        rows = []
        for values in self.frame.itertuples(index=False):
            cells = "".join(f'<td class="number">{html.escape(value)}</td>' if numeric
                            else f"<td>{html.escape(value)}</td>" for value, numeric in zip(values, self.numeric))
            rows.append(f"<tr>{cells}</tr>")
        caption = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        return (f'<div class="anonpaper-table"><style>{_STYLE}</style><table>{caption}'
                f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>")

    def __repr__(self) -> str:
        text = self.frame.to_string(index=False)
        return f"{self.caption}\n{text}" if self.caption else text



def _format_number(value: Any, decimals: int | None, percent: bool) -> str:
    """One number: ``decimals=None`` for a column of whole numbers (thousands separated)."""
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if decimals is None:
        return f"{int(round(float(value))):,}"
    number = float(value) * (100.0 if percent else 1.0)
    if number != 0 and abs(number) < 0.5 * 10 ** (-decimals):
        return f"{number:.{max(decimals, 1)}e}"  # would print as 0.000: keep its magnitude
    return f"{number:,.{decimals}f}"


def _format_object(value: Any) -> str:
    """A non-numeric cell as a reader would write it: ``key: value; ...`` for a dict, ``a, b`` for a list."""
    if isinstance(value, dict):
        return "; ".join(f"{key}: {_format_object(item)}" for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_format_object(item) for item in value)
    return str(value)


def _is_missing(value: Any) -> bool:
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    return isinstance(value, (float, np.floating)) and math.isnan(value)


def show_table(frame: pd.DataFrame, digits: int | Mapping[str, int] = 3, units: Mapping[str, str] | None = None,
               label: str | None = None, missing: str | Mapping[str, str] | None = None,
               caption: str | None = None) -> BookTable:
    """Format a table for the book.

    Args:
        frame: The table. A named or non-default index becomes the first column(s); a default RangeIndex is
            dropped (no index column).
        digits: Decimals of float columns (one number, or per column; default 3), the same for every row so
            numbers line up. A ``%`` column shows ``digits - 2`` decimals (at least 0), so 0.8123 and 81.2 %
            carry the same precision. A column of whole numbers (integers, or counts stored as floats because
            of a NaN) shows none unless ``digits`` names it; booleans read yes/no.
        units: Per column: ``"%"`` for a column of fractions in [0, 1] shown as percentages (checked: values
            outside [0, 1] raise), or any other unit, added to the header as ``name (unit)``.
        label: A myst-nb glue name ``tbl-<chapter>-<name>`` (lower case, digits, ``-``, ``_``): the table is glued
            under it (not displayed a second time), so the page can place it with ``{glue:}`` and refer to it.
        missing: Why values are missing: one reason for every column, or per column; NaN/None cells read
            ``n/a (reason)``, or ``n/a`` without one.
        caption: Optional caption above the table.

    Returns:
        A :class:`BookTable`; the last expression of a notebook cell displays it.

    Raises:
        ValueError: An unknown column in ``digits``/``units``/``missing``, a ``%`` column with values outside
            [0, 1] or not numeric, negative digits, or a malformed label.

    Example:
        >>> frame = pd.DataFrame({"method": ["Snow", "VS-Snow"], "accuracy": [0.8123, np.nan],
        ...                       "n": [1200, 1200], "seconds": [12.345, 3.2]})
        >>> print(repr(show_table(frame, units={"accuracy": "%", "seconds": "s"}, missing="not run")))
         method  accuracy (%)     n seconds (s)
           Snow          81.2 1,200      12.345
        VS-Snow n/a (not run) 1,200       3.200
    """
    if not isinstance(frame, pd.DataFrame):
        raise ValueError(f"show_table expects a pandas DataFrame, got {type(frame).__name__}")
    units = dict(units or {})
    per_column_digits = dict(digits) if isinstance(digits, Mapping) else {}
    missing_reasons = dict(missing) if isinstance(missing, Mapping) else {}
    if isinstance(frame.index, pd.RangeIndex) and frame.index.name is None:
        table = frame.reset_index(drop=True)
    else:
        table = frame.reset_index()
    columns = [str(column) for column in table.columns]
    table.columns = columns
    for option, given in (("digits", per_column_digits), ("units", units), ("missing", missing_reasons)):
        unknown = sorted(set(given) - set(columns))
        if unknown:
            raise ValueError(f"show_table {option} names unknown column(s) {unknown}; columns: {columns}")
    default_digits = 3 if isinstance(digits, Mapping) else int(digits)
    if default_digits < 0 or any(int(value) < 0 for value in per_column_digits.values()):
        raise ValueError(f"digits must be >= 0, got {digits!r}")
    if label is not None and not _LABEL.match(label):
        raise ValueError(f"label must look like 'tbl-<chapter>-<name>' (lower case, digits, - and _), got {label!r}")

    formatted: dict[str, list[str]] = {}
    numeric_columns: list[bool] = []
    headers: list[str] = []
    for column in columns:
        values = table[column].tolist()
        present = [value for value in values if not _is_missing(value)]
        numeric = bool(present) and all(isinstance(value, (numbers.Number, np.bool_)) for value in present)
        unit = units.get(column)
        percent = unit == PERCENT
        if percent:
            if not numeric:
                raise ValueError(f"column {column!r} is marked '%' but holds non-numbers, e.g. {present[:1]}")
            outside = [float(value) for value in present if not -1e-9 <= float(value) <= 1 + 1e-9]
            if outside:
                raise ValueError(f"column {column!r} is marked '%', so it must hold fractions in [0, 1]; found "
                                 f"{outside[:3]} (already percentages? divide by 100)")
        decimals: int | None = int(per_column_digits.get(column, default_digits))
        if percent:
            decimals = max(decimals - 2, 0)
        elif numeric and column not in per_column_digits and all(
                isinstance(value, (bool, np.bool_)) or float(value).is_integer() for value in present):
            decimals = None
        reason = missing_reasons.get(column, missing if isinstance(missing, str) else None)
        not_available = f"n/a ({reason})" if reason else "n/a"
        cells = []
        for value in values:
            if _is_missing(value):
                cells.append(not_available)
            elif numeric:
                cells.append(_format_number(value, decimals, percent))
            else:
                cells.append(_format_object(value))
        header = f"{column} ({unit})" if unit else column
        headers.append(header)
        formatted[header] = cells
        numeric_columns.append(numeric)
    result = BookTable(pd.DataFrame(formatted, columns=headers), numeric_columns, caption)
    if label is not None:
        from myst_nb import glue

        glue(label, result, display=False)
    return result
