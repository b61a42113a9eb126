"""How numbers, tables and claims read in the book: one formatter for every chapter and for the book's own pages.

- :func:`format_number` / :func:`format_value`: any value as a reader would write it (four significant digits,
  thousands separated, no scientific notation between 1e-4 and 1e7, ``yes``/``no``, ``n/a``, a dict as
  ``key: value; ...``), never a Python repr such as ``np.float64(0.92)`` or ``{'a': 1}``.
- :func:`show_table`: a DataFrame with a fixed number of decimals per column (so numbers line up), counts as
  integers, a value and its standard error in one cell (``0.812 ± 0.031``), no index column, text that wraps,
  ``n/a (why)`` instead of NaN, fractions shown as percentages only where the caller says so (and checked to be
  fractions), and, when asked, a myst-nb glue label (``tbl-<chapter>-<name>``) so the page can place and reference
  it. A table too wide for the book's text column is transposed when it has few rows, else folded into a
  ``<details>`` element with a one-line summary, like a table too long to read in passing.
- :func:`claims_markdown`: the list of a chapter's claims with the paper's number beside ours.
"""

from __future__ import annotations

import html
import math
import numbers
import re
from html.parser import HTMLParser
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

PERCENT = "%"
PLUS_MINUS = " ± "
_LABEL = re.compile(r"^tbl-[a-z0-9][a-z0-9_-]*$")
# The book's text column holds about this many characters of table text at 1280 px (0.9 em cells, with the wide
# layout of book/_static/anonpaper.css); a table whose narrowest layout needs more is transposed or folded.
TEXT_COLUMN_CHARS = 84
CELL_PADDING_CHARS = 2
# A table with more rows than this is folded (its summary says how many): a reader scrolls past it otherwise.
LONG_TABLE_ROWS = 30
# A too-wide table with at most this many rows is shown transposed (its rows become columns) when that fits.
TRANSPOSE_MAX_ROWS = 6
# Where a line of text may break: after spaces, hyphens and slashes (what the browser does for table text).
_BREAKS = re.compile(r"(?<=[-/])|\s+")
# Scoped to the table's wrapper: scroll sideways if still too wide, wrap long text, right-align numbers.
_STYLE = (".anonpaper-table{overflow-x:auto;max-width:100%;margin-bottom:1em}"
          ".anonpaper-table table{border-collapse:collapse;font-size:0.9em}"
          ".anonpaper-table th,.anonpaper-table td{padding:0.25em 0.6em;border-bottom:1px solid #ddd;"
          "vertical-align:top;white-space:normal;overflow-wrap:break-word;max-width:28em;text-align:left}"
          ".anonpaper-table td.number{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}"
          ".anonpaper-table caption{caption-side:top;text-align:left;font-weight:600;padding-bottom:0.3em}"
          ".anonpaper-table summary{cursor:pointer;color:#555;margin-bottom:0.4em}")
# Version of the markup, so the book build knows which executed outputs predate this layout (see from_html).
LAYOUT_VERSION = "2"


def format_number(value: Any, significant: int = 4) -> str:
    """One number as the book writes it outside tables.

    Whole numbers print without decimals (thousands separated); others with ``significant`` significant digits in
    fixed notation, trailing zeros dropped; scientific notation only below 1e-4 or from 1e7 on.

    Example:
        >>> [format_number(v) for v in (963.0, 0.92524, 75.12, -0.0134, 12345.67, 2e-6, float("nan"))]
        ['963', '0.9252', '75.12', '-0.0134', '12,346', '2e-06', 'n/a']
    """
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    number = float(value)
    if math.isnan(number):
        return "n/a"
    if math.isinf(number):
        return "∞" if number > 0 else "-∞"
    if number == 0:
        return "0"
    magnitude = abs(number)
    if magnitude >= 1e7 or magnitude < 1e-4:
        mantissa, exponent = f"{number:.{max(significant - 1, 0)}e}".split("e")
        return (mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa) + "e" + exponent
    if number.is_integer():
        return f"{int(number):,}"
    decimals = max(significant - 1 - math.floor(math.log10(magnitude)), 0)
    text = f"{number:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def format_value(value: Any) -> str:
    """Any value as text for the page: numbers by :func:`format_number`, ``n/a`` for None/NaN, a dict as
    ``key: value; key: value`` (a nested dict as ``name value, name value``), a list as ``a, b``.

    Example:
        >>> format_value({"StyleSpace": {"identity_similarity": np.float64(0.92524), "n": np.int64(32)},
        ...               "p": [0.1, 0.3], "ok": True, "note": None})
        'StyleSpace: identity_similarity 0.9252, n 32; p: 0.1, 0.3; ok: yes; note: n/a'
    """
    return _format(value, depth=0)


def _format(value: Any, depth: int, in_list: bool = False) -> str:
    """``depth``: 0 for the value itself; a list or dict inside a list, or deeper than one level, is
    parenthesised so its items stay together."""
    if value is None or value is pd.NA or value is pd.NaT:
        return "n/a"
    if isinstance(value, (bool, np.bool_, numbers.Number)) and not isinstance(value, complex):
        return format_number(value)
    if isinstance(value, np.ndarray):
        value = value.tolist()
    grouped = in_list or depth > 1
    if isinstance(value, Mapping):
        if depth == 0:
            return "; ".join(f"{key}: {_format(item, 1)}" for key, item in value.items())
        inner = ", ".join(f"{key} {_format(item, depth + 1)}" for key, item in value.items())
        return f"({inner})" if grouped else inner
    if isinstance(value, (list, tuple, set)):
        inner = ", ".join(_format(item, depth + 1, in_list=True) for item in value)
        return f"({inner})" if grouped else inner
    return str(value)


def _min_chars(text: str, numeric: bool) -> int:
    """The narrowest a cell can be, in characters: a number never breaks; text breaks at spaces and hyphens."""
    if numeric:
        return len(text)
    return max((len(piece) for piece in _BREAKS.split(text) if piece), default=0)


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

    def min_width_chars(self, transposed: bool = False) -> int:
        """The narrowest layout's width in characters (every column at its longest unbreakable piece)."""
        header = [str(column) for column in self.frame.columns]
        rows = [list(values) for values in self.frame.itertuples(index=False)]
        if transposed:
            columns = [[header[0]] + header[1:]] + [[row[0]] + row[1:] for row in rows]
            flags = [[False] + self.numeric[1:]] + [[False] + self.numeric[1:] for _ in rows]
        else:
            columns = [[name] + [row[index] for row in rows] for index, name in enumerate(header)]
            flags = [[False] + [self.numeric[index]] * len(rows) for index in range(len(header))]
        return sum(max(_min_chars(text, numeric) for text, numeric in zip(cells, numbers)) + CELL_PADDING_CHARS
                   for cells, numbers in zip(columns, flags))

    def layout(self) -> str:
        """``"plain"``, ``"transposed"`` (too wide, few rows, and its rows fit as columns) or ``"folded"``."""
        rows, columns = self.frame.shape
        if rows > LONG_TABLE_ROWS:
            return "folded"
        if self.min_width_chars() <= TEXT_COLUMN_CHARS:
            return "plain"
        first_is_label = columns > 1 and not self.numeric[0] and self.frame.iloc[:, 0].is_unique
        if rows <= TRANSPOSE_MAX_ROWS and first_is_label and self.min_width_chars(True) <= TEXT_COLUMN_CHARS:
            return "transposed"
        return "folded"

    def _table_html(self, transposed: bool) -> str:
        header = [str(column) for column in self.frame.columns]
        rows = [list(values) for values in self.frame.itertuples(index=False)]
        if transposed:
            head = [header[0]] + [row[0] for row in rows]
            body = [[(name, False)] + [(row[index], self.numeric[index]) for row in rows]
                    for index, name in enumerate(header) if index > 0]
        else:
            head = header
            body = [list(zip(row, self.numeric)) for row in rows]
        head_html = "".join(f"<th>{html.escape(name)}</th>" for name in head)
        body_html = "".join(
            "<tr>" + "".join(f'<td class="number">{html.escape(text)}</td>' if numeric
                             else f"<td>{html.escape(text)}</td>" for text, numeric in row) + "</tr>"
            for row in body)
        caption = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        return f"<table>{caption}<thead><tr>{head_html}</tr></thead><tbody>{body_html}</tbody></table>"

    def _repr_html_(self) -> str:
        layout = self.layout()
        table = self._table_html(transposed=layout == "transposed")
        if layout == "folded":
            rows, columns = self.frame.shape
            what = html.escape(self.caption) + ": " if self.caption else ""
            table = (f"<details><summary>{what}show the table ({rows} rows × {columns} columns: "
                     f"{html.escape(', '.join(str(column) for column in self.frame.columns[:6]))}"
                     f"{', ...' if columns > 6 else ''})</summary>{table}</details>")
        return (f'<div class="anonpaper-table" data-layout="{LAYOUT_VERSION}-{layout}"><style>{_STYLE}</style>'
                f"{table}</div>")

    def __repr__(self) -> str:
        text = self.frame.to_string(index=False)
        return f"{self.caption}\n{text}" if self.caption else text

    @classmethod
    def from_html(cls, markup: str) -> "BookTable | None":
        """The table of an ``anonpaper-table`` output written by an older version of this module, or None.

        The cells are taken as they were formatted (nothing is recomputed), so the book can lay out an executed
        notebook's tables the current way without rerunning it. Markup of the current version returns None.
        """
        if 'class="anonpaper-table"' not in markup or f'data-layout="{LAYOUT_VERSION}-' in markup:
            return None
        parser = _TableParser()
        parser.feed(markup)
        if not parser.header or any(len(row) != len(parser.header) for row in parser.rows):
            return None
        frame = pd.DataFrame([[text for text, _ in row] for row in parser.rows], columns=parser.header)
        numeric = [bool(parser.rows) and all(row[index][1] for row in parser.rows)
                   for index in range(len(parser.header))]
        return cls(frame, numeric, parser.caption)


class _TableParser(HTMLParser):
    """Header, cells (text, right-aligned?) and caption of the one table in a BookTable's markup."""

    def __init__(self):
        super().__init__()
        self.header: list[str] = []
        self.rows: list[list[tuple[str, bool]]] = []
        self.caption: str | None = None
        self._text: list[str] | None = None
        self._number = False

    def handle_starttag(self, tag, attrs):
        if tag == "tr" and self.header:
            self.rows.append([])
        if tag in ("th", "td", "caption"):
            self._text = []
            self._number = ("class", "number") in attrs

    def handle_endtag(self, tag):
        if self._text is None or tag not in ("th", "td", "caption"):
            return
        text = "".join(self._text)
        if tag == "th":
            self.header.append(text)
        elif tag == "td":
            if not self.rows:
                self.rows.append([])
            self.rows[-1].append((text, self._number))
        else:
            self.caption = text
        self._text = None

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)


def _format_number(value: Any, decimals: int | None, percent: bool) -> str:
    """One table number: ``decimals=None`` for a whole number (thousands separated)."""
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if decimals is None:
        return f"{int(round(float(value))):,}"
    number = float(value) * (100.0 if percent else 1.0)
    if number != 0 and abs(number) < 0.5 * 10 ** (-decimals):
        # Would print as 0.000: two significant digits keep its magnitude, in fixed notation while readable.
        if abs(number) >= 1e-4:
            return f"{number:.{1 - math.floor(math.log10(abs(number)))}f}"
        return f"{number:.1e}"
    return f"{number:,.{decimals}f}"


def _is_missing(value: Any) -> bool:
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    return isinstance(value, (float, np.floating)) and math.isnan(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (numbers.Number, np.bool_)) and not _is_missing(value)


def _is_whole(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_)) or float(value).is_integer()


def _standard_errors(columns: list[str], given: Mapping[str, str]) -> dict[str, str]:
    """Value column -> its standard-error column: the ones given, plus ``X_se`` / ``X SE`` beside ``X`` and a
    column named just ``SE`` right of its value."""
    pairs = dict(given)
    taken = set(pairs.values())
    for index, column in enumerate(columns):
        if column in pairs or column in taken:
            continue
        for candidate in (f"{column}_se", f"{column} SE", f"{column} se", f"{column}_SE"):
            if candidate in columns and candidate not in taken:
                pairs[column] = candidate
                taken.add(candidate)
                break
        else:
            following = columns[index + 1] if index + 1 < len(columns) else None
            if following in ("SE", "se") and following not in taken:
                pairs[column] = following
                taken.add(following)
    return pairs


def _counting_rows(values: dict[str, list], columns: list[str], numeric: dict[str, bool],
                   units: Mapping[str, str]) -> list[bool]:
    """Per row: whether it counts things, in a table whose first column names its rows (a ``count`` row of
    ``describe()``, an ``images`` row of a per-split summary): labelled ``count``, or at least two numbers, all
    whole, one of them beyond 1 (a row of 0.0 and 1.0 is more likely a score than a count)."""
    rows = len(values[columns[0]]) if columns else 0
    if len(columns) < 2 or numeric[columns[0]]:
        return [False] * rows
    flags = []
    for row in range(rows):
        numbers = [values[column][row] for column in columns[1:] if numeric[column]
                   and units.get(column) != PERCENT and not _is_missing(values[column][row])]
        flags.append(str(values[columns[0]][row]).strip().lower() == "count" or (
            len(numbers) >= 2 and all(_is_whole(value) for value in numbers)
            and max(abs(float(value)) for value in numbers) > 1))
    return flags


def show_table(frame: pd.DataFrame, digits: int | Mapping[str, int] = 3, units: Mapping[str, str] | None = None,
               label: str | None = None, missing: str | Mapping[str, str] | None = None,
               caption: str | None = None, se: Mapping[str, str] | None = None) -> BookTable:
    """Format a table for the book.

    Args:
        frame: The table. A named or non-default index becomes the first column(s); a default RangeIndex is
            dropped (no index column).
        digits: Decimals of float columns (one number, or per column; default 3), the same for every row so
            numbers line up. A ``%`` column shows ``digits - 2`` decimals (at least 0), so 0.8123 and 81.2 %
            carry the same precision. A column of whole numbers (integers, or counts stored as floats because
            of a NaN) shows none unless ``digits`` names it, and so does a row of whole numbers in a table whose
            first column labels its rows (a ``count`` row of ``describe()``, an ``images`` row); booleans read
            yes/no. A non-zero value too small for its column's decimals keeps two significant digits.
        units: Per column: ``"%"`` for a column of fractions in [0, 1] shown as percentages (checked: values
            outside [0, 1] raise), or any other unit, added to the header as ``name (unit)``.
        label: A myst-nb glue name ``tbl-<chapter>-<name>`` (lower case, digits, ``-``, ``_``): the table is glued
            under it (not displayed a second time), so the page can place it with ``{glue:}`` and refer to it.
        missing: Why values are missing: one reason for every column, or per column; NaN/None cells read
            ``n/a (reason)``, or ``n/a`` without one.
        caption: Optional caption above the table.
        se: Value column -> its standard-error column, shown together as ``value ± SE`` in the value's column (with
            its decimals and unit). Found without asking: ``X_se``, ``X SE`` or ``X_SE`` beside ``X``, and a
            column named ``SE`` right after its value.

    Returns:
        A :class:`BookTable`; the last expression of a notebook cell displays it.

    Raises:
        ValueError: An unknown column in ``digits``/``units``/``missing``/``se``, a ``%`` column with values
            outside [0, 1] or not numeric, negative digits, or a malformed label.

    Example:
        >>> frame = pd.DataFrame({"method": ["Snow", "VS-Snow"], "accuracy": [0.8123, np.nan],
        ...                       "accuracy_se": [0.031, np.nan], "n": [1200, 1200], "seconds": [12.345, 3.2]})
        >>> print(repr(show_table(frame, units={"accuracy": "%", "seconds": "s"}, missing="not run")))
         method accuracy (%) ± SE     n seconds (s)
           Snow        81.2 ± 3.1 1,200      12.345
        VS-Snow     n/a (not run) 1,200       3.200
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
    given_se = dict(se or {})
    for option, given in (("digits", per_column_digits), ("units", units), ("missing", missing_reasons),
                          ("se", {**given_se, **{value: value for value in given_se.values()}})):
        unknown = sorted(set(given) - set(columns))
        if unknown:
            raise ValueError(f"show_table {option} names unknown column(s) {unknown}; columns: {columns}")
    default_digits = 3 if isinstance(digits, Mapping) else int(digits)
    if default_digits < 0 or any(int(value) < 0 for value in per_column_digits.values()):
        raise ValueError(f"digits must be >= 0, got {digits!r}")
    if label is not None and not _LABEL.match(label):
        raise ValueError(f"label must look like 'tbl-<chapter>-<name>' (lower case, digits, - and _), got {label!r}")

    values = {column: table[column].tolist() for column in columns}
    numeric = {column: bool([v for v in values[column] if not _is_missing(v)]) and
               all(_is_number(v) for v in values[column] if not _is_missing(v)) for column in columns}
    standard_errors = {value: error for value, error in _standard_errors(columns, given_se).items()
                       if numeric[value] and numeric[error]}
    counting_rows = _counting_rows(values, columns, numeric, units)

    formatted: dict[str, list[str]] = {}
    numeric_columns: list[bool] = []
    headers: list[str] = []
    for column in columns:
        if column in standard_errors.values():
            continue
        present = [value for value in values[column] if not _is_missing(value)]
        unit = units.get(column)
        percent = unit == PERCENT
        if percent:
            if not numeric[column]:
                raise ValueError(f"column {column!r} is marked '%' but holds non-numbers, e.g. {present[:1]}")
            checked = present + [v for v in values.get(standard_errors.get(column, ""), []) if not _is_missing(v)]
            outside = [float(value) for value in checked if not -1e-9 <= float(value) <= 1 + 1e-9]
            if outside:
                raise ValueError(f"column {column!r} is marked '%', so it must hold fractions in [0, 1]; found "
                                 f"{outside[:3]} (already percentages? divide by 100)")
        decimals: int | None = int(per_column_digits.get(column, default_digits))
        if percent:
            decimals = max(decimals - 2, 0)
        elif numeric[column] and column not in per_column_digits and all(_is_whole(v) for v in present) and \
                column not in standard_errors:
            decimals = None
        reason = missing_reasons.get(column, missing if isinstance(missing, str) else None)
        not_available = f"n/a ({reason})" if reason else "n/a"
        error_values = values.get(standard_errors.get(column, ""))
        cells = []
        for row, value in enumerate(values[column]):
            if _is_missing(value):
                cells.append(not_available)
            elif numeric[column]:
                whole = counting_rows[row] and column not in per_column_digits and not percent
                text = _format_number(value, None if whole else decimals, percent)
                if error_values is not None and not _is_missing(error_values[row]):
                    text += PLUS_MINUS + _format_number(error_values[row], decimals, percent)
                cells.append(text)
            else:
                cells.append(format_value(value))
        header = f"{column} ({unit})" if unit else column
        if column in standard_errors:
            header += PLUS_MINUS.rstrip() + " SE"
        headers.append(header)
        formatted[header] = cells
        numeric_columns.append(numeric[column])
    result = BookTable(pd.DataFrame(formatted, columns=headers), numeric_columns, caption)
    if label is not None:
        from myst_nb import glue

        glue(label, result, display=False)
    return result


def _field(claim: Any, name: str, default: Any = None) -> Any:
    """A claim's field, from a :class:`~anonpaper.experiments.claims.Claim` or a results record's dict."""
    if isinstance(claim, Mapping):
        return claim.get(name, default)
    return getattr(claim, name, default)


def claim_verdict(claim: Any) -> str:
    """``holds`` / ``does not hold`` / ``undecided`` (records written before the verdict field carry ``holds``)."""
    verdict = _field(claim, "verdict")
    if verdict:
        return str(verdict)
    return {True: "holds", False: "does not hold"}.get(_field(claim, "holds"), "undecided")


def claims_markdown(claims: Iterable[Any], kinds: Iterable[str] | None = None,
                    verdicts: Iterable[str] | None = None) -> str:
    """A markdown list of claims: id, verdict (and *by design* where the phantom settles it), the statement, the
    paper's number beside ours, and the reason, every value through :func:`format_value`.

    Args:
        claims: :class:`~anonpaper.experiments.claims.Claim` objects or record dictionaries.
        kinds: Keep only these kinds (``"paper"``, ``"phantom-check"``); None keeps all.
        verdicts: Keep only these verdicts; None keeps all.

    Example:
        >>> print(claims_markdown([{"id": "x", "statement": "A lowers B", "paper": {"BRSET": 75.1},
        ...                         "ours": np.float64(0.6791), "verdict": "holds", "reason": "beyond 2 SE"}]))
        - **x** holds: A lowers B. Paper: BRSET: 75.1; ours: 0.6791. *beyond 2 SE*
    """
    kinds = None if kinds is None else set(kinds)
    verdicts = None if verdicts is None else set(verdicts)
    lines = []
    for claim in claims:
        verdict = claim_verdict(claim)
        if (kinds is not None and _field(claim, "kind", "paper") not in kinds) or \
                (verdicts is not None and verdict not in verdicts):
            continue
        by_design = _field(claim, "by_design") or ""
        shown = verdict + (" (by design)" if by_design else "")
        reason = _field(claim, "reason") or _field(claim, "note") or ""
        if by_design:
            reason = f"{reason} By design: {by_design}." if reason else f"By design: {by_design}."
        lines.append(f"- **{_field(claim, 'id')}** {shown}: {str(_field(claim, 'statement', '')).rstrip('.')}. "
                     f"Paper: {format_value(_field(claim, 'paper'))}; ours: {format_value(_field(claim, 'ours'))}."
                     + (f" *{reason.strip()}*" if reason.strip() else ""))
    return "\n".join(lines)
