"""Results records: the machine-readable outcome of one executed notebook.

The notebook collects metrics and claims in a :class:`Results` and calls ``save()``; when the runner executes it,
``$ANONPAPER_RECORD_PATH`` says where, and the runner then completes the record (profile, timing, fingerprint) into
``runs/<profile>/<study>.json``. Run interactively (no runner), ``save()`` writes nothing and says so.

Record schema (``SCHEMA``), keys:
    schema, study, title, profile, status ("ok" | "failed"), parameters (effective), overrides (injected),
    seed, metrics {name: number | null}, claims [Claim], tables {name: [row dicts]}, environment (versions,
    git_sha, package_source_hash, device...), fingerprint, started (ISO time, UTC), seconds, notebook, error.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from anonpaper.experiments.chapter import ChapterConfig
from anonpaper.experiments.claims import Claim
from anonpaper.runtime import module_source_hashes

SCHEMA = "anonpaper.results/1"
RECORD_PATH_VARIABLE = "ANONPAPER_RECORD_PATH"


def _plain(value: Any) -> Any:
    """JSON-ready copy of ``value``: numpy scalars to Python, NaN/inf to None, tuples to lists."""
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 1) == 0:  # torch scalar
        return _plain(value.item())
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot record value of type {type(value).__name__}: {value!r}")


class Results:
    """Collects one notebook's metrics, claims and tables; ``save()`` writes them for the runner.

    Args:
        study: The study name (notebook stem), e.g. ``"00_cohorts"``.
        parameters: The chapter's config (a :class:`~anonpaper.experiments.chapter.ChapterConfig`, recorded by its
            notebook names) or a plain dict of the notebook's parameters (include ``SEED``).

    Example:
        >>> from anonpaper.experiments.claims import decide
        >>> results = Results("demo", parameters={"SEED": 0})
        >>> results.metric("accuracy", np.float64(0.75))
        0.75
        >>> results.add_claims([decide("better", "A beats B", paper=">", ours=0.75, holds=0.75 > 0.5)])
        >>> results.claims[0].verdict
        'holds'
    """

    def __init__(self, study: str, parameters: ChapterConfig | dict[str, Any] | None = None):
        self.study = study
        if isinstance(parameters, ChapterConfig):
            parameters = parameters.parameters()
        self.parameters = _plain(dict(parameters or {}))
        self.metrics: dict[str, Any] = {}
        self.claims: list[Claim] = []
        self.tables: dict[str, list[dict[str, Any]]] = {}

    def metric(self, name: str, value: Any) -> Any:
        """Record a scalar metric (numbers only; NaN is stored as null). Returns the stored value."""
        stored = _plain(value)
        if stored is not None and not isinstance(stored, (int, float)):
            raise ValueError(f"metric {name!r} must be a number, got {type(value).__name__}: {value!r}")
        self.metrics[name] = stored
        return stored

    def metrics_from(self, prefix: str, values: dict[str, Any]) -> None:
        """Record several metrics as ``prefix/name``."""
        for name, value in values.items():
            self.metric(f"{prefix}/{name}", value)

    def add_claims(self, claims) -> None:
        """Record claims computed by the chapter's library code (:func:`anonpaper.experiments.claims.decide`)."""
        for claim in claims:
            if not isinstance(claim, Claim):
                raise TypeError(f"claims must be anonpaper.experiments.claims.Claim objects, got {type(claim).__name__}")
            if any(existing.id == claim.id for existing in self.claims):
                raise ValueError(f"claim {claim.id!r} recorded twice")
            _plain(claim.as_dict())  # fails early on a value a record cannot hold
            self.claims.append(claim)

    def table(self, name: str, frame) -> None:
        """Record a small table (a pandas DataFrame) as a list of row dicts."""
        self.tables[name] = _plain(frame.reset_index(drop=frame.index.name is None).to_dict(orient="records"))

    def claims_frame(self):
        """The claims as a DataFrame (id, kind, statement, paper, ours, verdict, reason), for the chapter."""
        import pandas as pd

        columns = ["id", "kind", "statement", "paper", "ours", "verdict", "reason"]
        return pd.DataFrame([claim.as_dict() for claim in self.claims], columns=columns)

    def to_dict(self) -> dict[str, Any]:
        from anonpaper.runtime import environment_info

        return {
            "schema": SCHEMA,
            "study": self.study,
            "parameters": self.parameters,
            "seed": self.parameters.get("SEED"),
            "metrics": self.metrics,
            "claims": [_plain(claim.as_dict()) for claim in self.claims],
            "tables": self.tables,
            "environment": environment_info(),
        }

    def save(self, path: str | Path | None = None) -> Path | None:
        """Write the record to ``path`` or ``$ANONPAPER_RECORD_PATH``; without either, write nothing."""
        from anonpaper.cache import atomic_write_bytes

        target = path or os.environ.get(RECORD_PATH_VARIABLE)
        if not target:
            print(f"Results for {self.study}: {len(self.metrics)} metrics, {len(self.claims)} claims "
                  f"(not saved: run through `anonpaper run` to record them)")
            return None
        target = Path(target)
        atomic_write_bytes(target, json.dumps(self.to_dict(), indent=2, allow_nan=False).encode())
        return target


def read_record(path: str | Path) -> dict[str, Any]:
    """Read a results record; ValueError names the file when it is not a valid record."""
    path = Path(path)
    try:
        record = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a readable results record ({error})") from None
    if record.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {record.get('schema')!r} is not {SCHEMA!r}")
    return record


def changed_modules(record: dict[str, Any]) -> list[str] | None:
    """The package modules a run used whose source has changed since (or gone), from its record.

    Args:
        record: A results record; its ``environment.package_modules`` holds the hash of every package module the
            run had imported (:func:`anonpaper.runtime.module_source_hashes`).

    Returns:
        Sorted module names (empty when the run's code is unchanged), or None for a record without module
        hashes (older records: the caller compares the whole-package hash instead).
    """
    recorded = (record.get("environment") or {}).get("package_modules")
    if not recorded:
        return None
    current = module_source_hashes(recorded)
    return sorted(name for name, digest in recorded.items() if current.get(name) != digest)


def results_from_older_code(record: dict[str, Any], current_package_hash: str) -> bool:
    """Whether the code behind a record has changed: its modules where the record lists them, else the package."""
    changed = changed_modules(record)
    if changed is None:
        return (record.get("environment") or {}).get("package_source_hash") != current_package_hash
    return bool(changed)
