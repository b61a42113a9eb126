"""Appending benchmark rows to a CSV in benchmarks/results/ (one helper for every benchmark script).

Scripts run as ``python benchmarks/NAME.py`` have this folder on ``sys.path``, so they import it as
``from result_rows import append_rows``.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Iterable, Sequence


def append_rows(path: Path, fields: Sequence[str], rows: Iterable[dict]) -> int:
    """Append ``rows`` (dicts keyed by ``fields``) to the CSV at ``path``, writing the header when the file is new.

    A file written before ``fields`` gained a column is first rewritten with the new header, its rows left empty in
    the new column (a column is only ever added, never dropped or renamed: a header with a column ``fields`` lacks
    is refused).

    Returns:
        The number of rows written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fields = list(fields)
    rows = list(rows)
    if path.exists():
        with open(path, newline="") as stream:
            header = next(csv.reader(stream), [])
        unknown = [name for name in header if name not in fields]
        if unknown:
            raise ValueError(f"{path}: its columns {unknown} are not among this benchmark's {fields}")
        if header and header != fields:
            with open(path, newline="") as stream:
                old_rows = list(csv.DictReader(stream))
            with open(path, "w", newline="") as stream:
                writer = csv.DictWriter(stream, fieldnames=fields, lineterminator="\n")
                writer.writeheader()
                writer.writerows(old_rows)
    new_file = not path.exists() or path.stat().st_size == 0
    with open(path, "a", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=fields, lineterminator="\n")
        if new_file:
            writer.writeheader()
        writer.writerows(rows)
    return len(rows)
