"""Checkpoints for resumable training: one atomic file holding every state needed to continue identically.

A training loop saves ``{"step": ..., "model": ..., "optimizer": ..., "rng": capture_rng_state(), ...}`` every
so often with :func:`save_checkpoint`; after an interruption :func:`load_checkpoint` returns it and
:func:`anonpaper.runtime.restore_rng_state` puts the random generators back, so the resumed run continues as if
never stopped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from anonpaper.cache import atomic_torch_save


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> Path:
    """Atomically write ``state`` (tensors, state dicts, numbers) to ``path``; returns the path."""
    path = Path(path)
    atomic_torch_save(state, path)
    return path


def load_checkpoint(path: str | Path, map_location: Any = "cpu") -> dict[str, Any] | None:
    """Load a checkpoint written by :func:`save_checkpoint`; None when ``path`` does not exist.

    Raises:
        ValueError: If the file exists but cannot be read as a checkpoint (names the file).
    """
    path = Path(path)
    if not path.exists():
        return None
    try:
        return torch.load(path, map_location=map_location, weights_only=False)
    except Exception as error:  # torch raises several types for corrupt files
        raise ValueError(f"checkpoint {path} is unreadable ({type(error).__name__}: {error}); delete it to restart")


HISTORY_FORMAT = "anonpaper.history/1"


def pack_history(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Store a training history (one dict per logged step) column by column, losslessly and about half the size.

    A GAN history holds one row per step (37,500 rows at 300 kimg in batches of 8); pickled as dicts it costs
    about 120 bytes a row and would carry a small run's checkpoint past the 16 MiB a file may have when it comes
    back from a device. Packed, a column of floats that all survive float32 (losses and logits computed in
    float32) is a float32 tensor, other floats float64, integers int64, and anything else a plain list; a column
    missing from some rows has a boolean ``present`` mask.

    Args:
        rows: The history, in order; values are numbers (int or float) or any picklable object.

    Returns:
        ``{"format", "rows", "columns"}``; :func:`unpack_history` gives ``rows`` back (same keys, same values and
        Python types, NaN included).
    """
    names: dict[str, None] = {}  # first-appearance order, which pandas also gives the DataFrame's columns
    for row in rows:
        names.update(dict.fromkeys(row))
    columns = {}
    for name in names:
        present = [name in row for row in rows]
        values = [row[name] for row in rows if name in row]
        if all(type(value) is int and -2 ** 63 <= value < 2 ** 63 for value in values):
            kind, stored = "int", torch.tensor(values, dtype=torch.int64)
        elif all(type(value) is float for value in values):
            wide = torch.tensor(values, dtype=torch.float64)
            narrow = wide.float()
            exact = bool(((narrow.double() == wide) | (wide.isnan() & narrow.isnan())).all())
            kind, stored = "float", narrow if exact else wide
        else:
            kind, stored = "object", list(values)
        columns[name] = {"kind": kind, "values": stored,
                         "present": None if all(present) else torch.tensor(present, dtype=torch.bool)}
    return {"format": HISTORY_FORMAT, "rows": len(rows), "columns": columns}


def unpack_history(packed: dict[str, Any] | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of a history stored by :func:`pack_history`; a plain list of rows (older checkpoints) as is.

    Raises:
        ValueError: If ``packed`` is neither a list nor a packed history of a known format.
    """
    if isinstance(packed, list):
        return list(packed)
    if not isinstance(packed, dict) or packed.get("format") != HISTORY_FORMAT:
        found = packed.get("format") if isinstance(packed, dict) else type(packed).__name__
        raise ValueError(f"training history has format {found!r}; expected a list of rows or {HISTORY_FORMAT!r}")
    rows: list[dict[str, Any]] = [{} for _ in range(int(packed["rows"]))]
    for name, column in packed["columns"].items():
        values = column["values"]
        values = values.tolist() if isinstance(values, torch.Tensor) else list(values)
        present = column["present"]
        indices = range(len(rows)) if present is None else present.nonzero().flatten().tolist()
        if len(indices) != len(values):
            raise ValueError(f"training history column {name!r} has {len(values)} values for {len(indices)} rows")
        for index, value in zip(indices, values):
            rows[index][name] = value
    return rows
