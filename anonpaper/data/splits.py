"""Patient-level splits: no patient ever appears in two splits."""

from __future__ import annotations

import numpy as np
import pandas as pd


def patient_split(table: pd.DataFrame, fractions: tuple[float, float, float] = (0.7, 0.1, 0.2),
                  stratify: str | None = None, seed: int = 0, patient_column: str = "patient_id") -> pd.Series:
    """Assign each row to "train"/"val"/"test" by patient, optionally stratified by a per-patient label.

    Patients (not images) are shuffled and cut by ``fractions``; with ``stratify`` the cut is made within each
    stratum of the patient's label (the first row's value for that patient), so class ratios are kept.

    Args:
        table: One row per image with a ``patient_column``.
        fractions: Train/val/test fractions of patients, non-negative, summing to 1.
        stratify: Column to stratify on, or None.
        seed: Seed of the shuffle; same seed, same split.
        patient_column: Column naming the patient.

    Returns:
        A Series of split names aligned with ``table.index``.

    Raises:
        ValueError: If fractions are invalid or a column is missing.

    >>> t = pd.DataFrame({"patient_id": list("aabbccddee"), "y": [0, 0, 1, 1, 0, 0, 1, 1, 0, 0]})
    >>> s = patient_split(t, (0.6, 0.2, 0.2), stratify="y", seed=1)
    >>> bool((t.assign(s=s).groupby("patient_id")["s"].nunique() == 1).all())
    True
    """
    fractions = tuple(float(value) for value in fractions)
    if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1.0) > 1e-6:
        raise ValueError(f"fractions must be three non-negative numbers summing to 1, got {fractions}")
    for column in [patient_column] + ([stratify] if stratify else []):
        if column not in table.columns:
            raise ValueError(f"column {column!r} not in table; columns are {list(table.columns)}")
    patients = table.groupby(patient_column, sort=True).first()
    strata = patients[stratify].astype(str) if stratify else pd.Series("all", index=patients.index)
    rng = np.random.default_rng(seed)
    assignment: dict[object, str] = {}
    for _, members in sorted(strata.groupby(strata).groups.items(), key=lambda kv: str(kv[0])):
        members = np.array(sorted(members, key=str), dtype=object)
        rng.shuffle(members)
        count = len(members)
        n_train = int(round(fractions[0] * count))
        n_val = int(round(fractions[1] * count))
        n_val = min(n_val, count - n_train)
        for position, patient in enumerate(members):
            assignment[patient] = "train" if position < n_train else "val" if position < n_train + n_val else "test"
    return table[patient_column].map(assignment).rename("split")


def assert_no_patient_leakage(table: pd.DataFrame, patient_column: str = "patient_id",
                              split_column: str = "split") -> None:
    """Raise ValueError if any patient appears in more than one split."""
    counts = table.groupby(patient_column)[split_column].nunique()
    leaked = counts[counts > 1]
    if len(leaked):
        raise ValueError(f"{len(leaked)} patient(s) appear in several splits, e.g. {list(leaked.index[:5])}")
