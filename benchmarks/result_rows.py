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

    Returns:
        The number of rows written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    new_file = not path.exists()
    rows = list(rows)
    with open(path, "a", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=list(fields), lineterminator="\n")
        if new_file:
            writer.writeheader()
        writer.writerows(rows)
    return len(rows)
