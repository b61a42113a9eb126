"""Results records: the machine-readable outcome of one executed notebook.

The notebook collects metrics and claims in a :class:`Results` and calls ``save()``; when the runner executes it,
``$ANONPAPER_RECORD_PATH`` says where, and the runner then completes the record (profile, timing, fingerprint) into
``runs/<profile>/<study>.json``. Run interactively (no runner), ``save()`` writes nothing and says so.

Record schema (``SCHEMA``), keys:
    schema, study, title, profile, status ("ok" | "failed"), parameters (effective), overrides (injected),
    seed, metrics {name: number | null}, claims [Claim], tables {name: [row dicts]}, environment (versions,
    git_sha, package_source_hash, device, processor, cpu_capability, cpu_caps, torch_threads...; see
    :func:`anonpaper.runtime.environment_info`), fingerprint, started (ISO time, UTC), seconds, notebook, error.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
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
        >>> results.add_claims([decide("better", "A beats B", paper=">", ours=0.75, rule="directional",
        ...                             effect=0.25, se=0.05)])
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


# ---------------------------------------------------------------------------------------------------------------
# comparing two records of one study
# ---------------------------------------------------------------------------------------------------------------
# Metrics that time the run (seconds of a stage, images per second, seconds per kimg): they differ between any two
# runs and say nothing about the results, so a comparison leaves them out.
TIMING_METRIC = re.compile(r"(?:^|[/_])(?:seconds|minutes|hours)(?:$|[/_])|(?:^|[/_])s_per_|_per_s$")
# Below this magnitude a metric is "near 0": its relative difference is taken against this floor instead.
RELATIVE_FLOOR = 1e-3


def is_timing_metric(name: str) -> bool:
    """Whether a metric name times the run (left out of :func:`compare_records`).

    >>> [is_timing_metric(name) for name in ("seconds/co-training", "jvp/seconds", "inversion/seconds_per_image",
    ...                                      "fundus-sg2/train_s_per_kimg", "jvp/channel_images_per_s")]
    [True, True, True, True, True]
    >>> [is_timing_metric(name) for name in ("snow/p=0.1/sex_accuracy_se", "fundus-sg2/kimg", "dice/vessel")]
    [False, False, False]
    """
    return bool(TIMING_METRIC.search(name))


def relative_difference(first: float, second: float, floor: float = RELATIVE_FLOOR) -> float:
    """``|first - second| / max(|first|, |second|, floor)``: 0 for equal values, at most 2; the floor keeps values
    near 0 from turning a tiny absolute change into a large relative one.

    >>> round(relative_difference(0.5, 0.55), 4), relative_difference(0.0, 1e-5), relative_difference(-1.0, 1.0)
    (0.0909, 0.01, 2.0)
    """
    return abs(first - second) / max(abs(first), abs(second), floor)


@dataclass(frozen=True)
class MetricChange:
    """One metric that differs between two records (``first`` / ``second`` None: missing, or null = NaN)."""

    name: str
    first: float | None
    second: float | None
    absolute: float  # |second - first|; inf when one side is not a number
    relative: float  # relative_difference; inf when one side is not a number


@dataclass(frozen=True)
class VerdictChange:
    """A claim whose verdict differs (None: the claim is absent from that record)."""

    claim: str
    first: str | None
    second: str | None


@dataclass(frozen=True)
class RecordDifference:
    """What differs between two records of one study: metrics (numbers, timings left out) and claim verdicts.

    Attributes:
        study: The study both records belong to.
        compared: Metrics both records hold as numbers (or both as null), compared by value.
        metrics: Every metric that differs, largest relative difference first, including those present in one
            record only or null in one of them (with ``absolute`` and ``relative`` inf).
        verdicts: Claims whose verdict changed, appeared or disappeared.
        floor: The absolute floor of the relative differences.
    """

    study: str
    compared: int
    metrics: tuple[MetricChange, ...]
    verdicts: tuple[VerdictChange, ...]
    floor: float = RELATIVE_FLOOR

    @property
    def numeric(self) -> tuple[MetricChange, ...]:
        """The differing metrics that are numbers in both records."""
        return tuple(change for change in self.metrics if math.isfinite(change.absolute))

    @property
    def largest_absolute(self) -> MetricChange | None:
        return max(self.numeric, key=lambda change: change.absolute, default=None)

    @property
    def largest_relative(self) -> MetricChange | None:
        return max(self.numeric, key=lambda change: change.relative, default=None)

    def beyond(self, tolerance: float) -> tuple[MetricChange, ...]:
        """Metrics whose relative difference exceeds ``tolerance`` (missing or null on one side: always)."""
        return tuple(change for change in self.metrics if change.relative > tolerance)

    @property
    def identical(self) -> bool:
        return not self.metrics and not self.verdicts


def _metric_value(value: Any) -> float | None:
    """A record's metric as a float; None for null (NaN is stored as null) and non-numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def compare_records(first: dict[str, Any], second: dict[str, Any], floor: float = RELATIVE_FLOOR) -> RecordDifference:
    """Compare the metrics and claim verdicts of two results records of one study.

    Timing metrics (:func:`is_timing_metric`), the environment, parameters, tables and the run's seconds are left
    out: the comparison asks whether the *results* agree.

    Args:
        first: A results record (``read_record``), e.g. of one processor.
        second: A record of the same study, e.g. of another processor or thread count.
        floor: Absolute floor of the relative differences (:func:`relative_difference`).

    Returns:
        :class:`RecordDifference`.

    Raises:
        ValueError: When the records belong to different studies.

    Example:
        >>> a = {"study": "demo", "metrics": {"dice": 0.914, "auroc": 0.5, "seconds/run": 10.0, "gone": 1.0},
        ...      "claims": [{"id": "c1", "verdict": "holds"}, {"id": "c2", "verdict": "holds"}]}
        >>> b = {"study": "demo", "metrics": {"dice": 0.852, "auroc": 0.5, "seconds/run": 99.0},
        ...      "claims": [{"id": "c1", "verdict": "holds"}, {"id": "c2", "verdict": "undecided"}]}
        >>> difference = compare_records(a, b)
        >>> difference.compared, [change.name for change in difference.metrics]
        (2, ['gone', 'dice'])
        >>> change = difference.largest_relative
        >>> change.name, round(change.absolute, 3), round(change.relative, 4)
        ('dice', 0.062, 0.0678)
        >>> difference.verdicts
        (VerdictChange(claim='c2', first='holds', second='undecided'),)
        >>> [change.name for change in difference.beyond(0.1)]
        ['gone']
    """
    study = first.get("study")
    if study != second.get("study"):
        raise ValueError(f"the records belong to different studies: {study!r} and {second.get('study')!r}")
    metrics_a = {name: value for name, value in (first.get("metrics") or {}).items() if not is_timing_metric(name)}
    metrics_b = {name: value for name, value in (second.get("metrics") or {}).items() if not is_timing_metric(name)}
    changes, compared = [], 0
    for name in sorted(set(metrics_a) | set(metrics_b)):
        value_a = _metric_value(metrics_a.get(name))
        value_b = _metric_value(metrics_b.get(name))
        if name in metrics_a and name in metrics_b and (value_a is None) == (value_b is None):
            compared += 1
            if value_a is None or value_a == value_b:
                continue
            changes.append(MetricChange(name, value_a, value_b, abs(value_b - value_a),
                                        relative_difference(value_a, value_b, floor)))
        else:
            changes.append(MetricChange(name, value_a, value_b, math.inf, math.inf))
    changes.sort(key=lambda change: (-change.relative, change.name))
    verdicts_a = {claim.get("id"): claim.get("verdict") for claim in first.get("claims") or []}
    verdicts_b = {claim.get("id"): claim.get("verdict") for claim in second.get("claims") or []}
    verdicts = tuple(VerdictChange(claim, verdicts_a.get(claim), verdicts_b.get(claim))
                     for claim in sorted(set(verdicts_a) | set(verdicts_b), key=str)
                     if verdicts_a.get(claim) != verdicts_b.get(claim))
    return RecordDifference(str(study), compared, tuple(changes), verdicts, floor)
