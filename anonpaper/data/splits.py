"""Splits: patient-level (no patient ever appears in two splits) and the five papers' protocols."""

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


# -- protocols of the papers ---------------------------------------------------------------------------------------
# Each returns a Series aligned with ``table.index`` holding "train" / "val" / "test", or NaN for rows the protocol
# leaves out (loaders drop those rows). All take explicit seeds and never modify ``table``.

def _require_columns(table: pd.DataFrame, columns) -> None:
    missing = [column for column in columns if column and column not in table.columns]
    if missing:
        raise ValueError(f"column(s) {missing} not in table; columns are {list(table.columns)}")


def _check_counts(counts, name: str = "counts") -> tuple[int, int, int]:
    counts = tuple(int(value) for value in counts)
    if len(counts) != 3 or min(counts) < 0:
        raise ValueError(f"{name} must be three non-negative integers (train, val, test), got {counts}")
    return counts


def min_images_per_patient(table: pd.DataFrame, minimum: int, patient_column: str = "patient_id") -> pd.Series:
    """Boolean Series: True for rows whose patient has at least ``minimum`` rows in ``table``.

    Used by paper 3 (GMIA): MIMIC-CXR-JPG patients with >= 20 images.
    """
    _require_columns(table, [patient_column])
    if minimum < 1:
        raise ValueError(f"minimum must be >= 1, got {minimum}")
    counts = table.groupby(patient_column)[patient_column].transform("size")
    return (counts >= minimum).rename("keep")


def official_split(table: pd.DataFrame, column: str = "official_split",
                   mapping: dict[str, str] | None = None, min_images: int | None = None,
                   patient_column: str = "patient_id") -> pd.Series:
    """The dataset's own split (e.g. MIMIC-CXR-JPG's train/validate/test), optionally only patients with many images.

    Args:
        table: Rows with ``column`` holding the dataset's split names.
        column: Column of the official split.
        mapping: Official name -> "train"/"val"/"test" (default maps "validate"/"valid"/"validation" to "val").
        min_images: Keep only patients with at least this many images (counted over the whole table); others NaN.
        patient_column: Patient column.

    Returns:
        Split Series (NaN for dropped rows).

    Raises:
        ValueError: On an official value the mapping does not cover, or if the official split puts one patient in
            two splits (the check is made, not assumed).
    """
    _require_columns(table, [column, patient_column])
    mapping = mapping or {"train": "train", "validate": "val", "valid": "val", "validation": "val", "val": "val",
                          "test": "test"}
    values = table[column].astype(str).str.strip().str.lower()
    unknown = sorted(set(values.unique()) - set(mapping))
    if unknown:
        raise ValueError(f"official split column {column!r} has values {unknown} outside {sorted(mapping)}")
    split = values.map(mapping).rename("split")
    assert_no_patient_leakage(pd.DataFrame({"patient_id": table[patient_column], "split": split}))
    if min_images:
        split = split.where(min_images_per_patient(table, min_images, patient_column))
    return split


def disjoint_patient_counts(table: pd.DataFrame, counts: tuple[int, int, int], seed: int = 0,
                            balance: str | None = None, patient_column: str = "patient_id") -> pd.Series:
    """Pick exactly ``counts`` images for train/val/test from disjoint patients (paper 5, CheXpert 6000/200/300).

    Patients are shuffled; splits are filled smallest first (test, val, train) so the small ones get whole,
    varied patients. A patient joins a split when at least one of their images is taken, and is never considered
    again, so no patient can be in two splits; images of a patient beyond the split's quota are left out.

    Args:
        table: One row per image.
        counts: Images wanted in (train, val, test).
        seed: Shuffle seed.
        balance: Optional binary label column (values 0/1, other values ignored); each split then gets half of
            its images from each class (the paper's "balanced" Pleural Effusion set). Rows with other values are
            never selected.
        patient_column: Patient column.

    Returns:
        Split Series (NaN for unselected rows).

    Raises:
        ValueError: If the table cannot supply the counts.
    """
    counts = _check_counts(counts)
    _require_columns(table, [patient_column, balance])
    if balance:
        label = pd.to_numeric(table[balance], errors="coerce")
        eligible = label.isin([0, 1])
        classes = label.where(eligible)
        quotas = {name: {1.0: count // 2, 0.0: count - count // 2} for name, count in zip(SPLIT_NAMES, counts)}
    else:
        eligible = pd.Series(True, index=table.index)
        classes = pd.Series(0.0, index=table.index)
        quotas = {name: {0.0: count} for name, count in zip(SPLIT_NAMES, counts)}
    rng = np.random.default_rng(seed)
    patients = np.array(sorted(table.loc[eligible, patient_column].unique(), key=str), dtype=object)
    rng.shuffle(patients)
    rows_by_patient = {patient: rows for patient, rows in
                       table.loc[eligible].groupby(patient_column, sort=False).groups.items()}
    split = pd.Series(np.nan, index=table.index, dtype=object, name="split")
    cursor = 0
    for name in ("test", "val", "train"):
        remaining = dict(quotas[name])
        while sum(remaining.values()) > 0 and cursor < len(patients):
            patient = patients[cursor]
            cursor += 1
            rows = list(rows_by_patient[patient])
            rng.shuffle(rows)
            taken = []
            for row in rows:
                cls = float(classes[row])
                if remaining.get(cls, 0) > 0:
                    remaining[cls] -= 1
                    taken.append(row)
            split.loc[taken] = name
        if sum(remaining.values()) > 0:
            raise ValueError(f"not enough eligible images for the {name!r} split: still need {remaining} "
                             f"(per class) after using all {len(patients)} patients; counts asked {counts}")
    return split


def image_counts_keep_ratio(table: pd.DataFrame, counts: tuple[int, int, int], stratify: str,
                            seed: int = 0) -> pd.Series:
    """Image-level split of exact sizes keeping the class ratio in each split (paper 5, iris 1165/270/360).

    This is NOT a patient-level split: the same subject appears in several splits, as paper 5 needs for its
    multi-class identity classifier. Use only where the protocol says so.

    Args:
        table: One row per image.
        counts: Images in (train, val, test); their sum may be below ``len(table)`` (the rest is NaN).
        stratify: Class column; each split gets the table's class proportions (largest-remainder rounding).
        seed: Shuffle seed.

    Returns:
        Split Series (NaN for unselected rows).
    """
    counts = _check_counts(counts)
    _require_columns(table, [stratify])
    if sum(counts) > len(table):
        raise ValueError(f"counts {counts} sum to {sum(counts)} > {len(table)} images in the table")
    strata = table[stratify].astype(str)
    sizes = strata.value_counts().sort_index()
    rng = np.random.default_rng(seed)
    split = pd.Series(np.nan, index=table.index, dtype=object, name="split")
    # Per split, allocate its count over strata proportionally (largest remainder), capped by what is left.
    left = sizes.copy()
    allocation: dict[str, pd.Series] = {}
    for name, count in zip(SPLIT_NAMES, counts):
        exact = sizes / sizes.sum() * count
        base = np.floor(exact).astype(int)
        order = (exact - base).sort_values(ascending=False).index
        for stratum in order[: count - int(base.sum())]:
            base[stratum] += 1
        if (base > left).any():
            raise ValueError(f"stratum sizes {sizes.to_dict()} cannot supply counts {counts} with kept ratios")
        left -= base
        allocation[name] = base
    for stratum in sizes.index:
        rows = np.array(table.index[strata == stratum])
        rng.shuffle(rows)
        start = 0
        for name in SPLIT_NAMES:
            take = int(allocation[name][stratum])
            split.loc[rows[start:start + take]] = name
            start += take
    return split


def identity_counts(table: pd.DataFrame, n_identities: tuple[int, int, int], seed: int = 0,
                    most_images_first: bool = True, patient_column: str = "patient_id") -> pd.Series:
    """Disjoint identities per split, all their images (paper 5, CelebAMask-HQ 600/20/30 celebrities).

    Args:
        table: One row per image.
        n_identities: Identities in (train, val, test).
        seed: Shuffle seed.
        most_images_first: Draw from the identities with the most images (the paper's 8210 images of 600
            celebrities average 13.7 per identity, well above CelebA-HQ's mean, so it must have preferred them).
        patient_column: Identity column.

    Returns:
        Split Series (NaN for identities not drawn).
    """
    n_identities = _check_counts(n_identities, "n_identities")
    _require_columns(table, [patient_column])
    sizes = table.groupby(patient_column).size()
    total = sum(n_identities)
    if total > len(sizes):
        raise ValueError(f"asked for {total} identities, table has {len(sizes)}")
    ids = sorted(sizes.index, key=lambda key: (-sizes[key], str(key))) if most_images_first \
        else sorted(sizes.index, key=str)
    chosen = np.array(ids[:total] if most_images_first else ids, dtype=object)
    rng = np.random.default_rng(seed)
    rng.shuffle(chosen)
    chosen = chosen[:total]
    assignment = {}
    start = 0
    for name, count in zip(SPLIT_NAMES, n_identities):
        for identity in chosen[start:start + count]:
            assignment[identity] = name
        start += count
    return table[patient_column].map(assignment).rename("split")


def pool_split(table: pd.DataFrame, pool_size: int, seed: int = 0, patient_column: str = "patient_id",
               rest: str = "test") -> pd.Series:
    """A private pool of ``pool_size`` images from whole patients ("train"), the rest ``rest`` (k-SALSA on APTOS).

    Patients are shuffled and added while the pool has room; a patient that would overflow it is skipped, so the
    pool holds at most ``pool_size`` images (exactly, when every patient has one image, as in APTOS).
    """
    _require_columns(table, [patient_column])
    if pool_size < 1 or pool_size > len(table):
        raise ValueError(f"pool_size must be in 1..{len(table)}, got {pool_size}")
    if rest not in SPLIT_NAMES:
        raise ValueError(f"rest must be one of {SPLIT_NAMES}, got {rest!r}")
    sizes = table.groupby(patient_column).size()
    patients = np.array(sorted(sizes.index, key=str), dtype=object)
    np.random.default_rng(seed).shuffle(patients)
    pool, room = set(), pool_size
    for patient in patients:
        if sizes[patient] <= room:
            pool.add(patient)
            room -= sizes[patient]
        if room == 0:
            break
    return table[patient_column].map(lambda patient: "train" if patient in pool else rest).rename("split")


def source_counts(table: pd.DataFrame, counts: dict[str, tuple[str, int]], seed: int = 0,
                  source_column: str = "source") -> pd.Series:
    """Draw a fixed number of images from each source into a split (paper 1: 3000 from ODIR train, 500 from test).

    Args:
        counts: source -> (split name, images to draw); images of other sources are NaN.
    """
    _require_columns(table, [source_column])
    rng = np.random.default_rng(seed)
    split = pd.Series(np.nan, index=table.index, dtype=object, name="split")
    for source, (name, count) in sorted(counts.items()):
        if name not in SPLIT_NAMES:
            raise ValueError(f"split name must be one of {SPLIT_NAMES}, got {name!r}")
        rows = np.array(table.index[table[source_column] == source])
        if count > len(rows):
            raise ValueError(f"source {source!r} has {len(rows)} images, protocol asks for {count}")
        rng.shuffle(rows)
        split.loc[rows[:count]] = name
    return split


SPLIT_NAMES = ("train", "val", "test")

PROTOCOL_KINDS = ("patient_fractions", "official", "disjoint_patient_counts", "image_counts_keep_ratio",
                  "identity_counts", "pool", "source_counts")


def apply_protocol(table: pd.DataFrame, protocol: dict, seed: int = 0) -> pd.Series:
    """Dispatch a data-manifest split protocol (a dict with ``kind`` and its parameters) to the functions above.

    Kinds and parameters: ``patient_fractions`` (fractions, stratify), ``official`` (column, min_images),
    ``disjoint_patient_counts`` (counts, balance), ``image_counts_keep_ratio`` (counts, stratify),
    ``identity_counts`` (n_identities), ``pool`` (pool_size), ``source_counts`` (counts: {source: [split, n]}).
    Keys ``description``, ``used_by`` and ``notes`` are documentation and ignored.

    Returns:
        Split Series aligned with ``table.index``; NaN marks rows the protocol leaves out.
    """
    if "kind" not in protocol:
        raise ValueError(f"split protocol lacks 'kind'; has {sorted(protocol)}")
    kind = protocol["kind"]
    params = {key: value for key, value in protocol.items() if key not in ("kind", "description", "used_by", "notes")}
    if kind == "patient_fractions":
        split = patient_split(table, tuple(params.get("fractions", (0.7, 0.1, 0.2))), params.get("stratify"), seed)
        if params.get("min_images"):
            split = split.where(min_images_per_patient(table, int(params["min_images"])))
        return split
    if kind == "official":
        return official_split(table, params.get("column", "official_split"), params.get("mapping"),
                              params.get("min_images"))
    if kind == "disjoint_patient_counts":
        return disjoint_patient_counts(table, tuple(params["counts"]), seed, params.get("balance"))
    if kind == "image_counts_keep_ratio":
        return image_counts_keep_ratio(table, tuple(params["counts"]), params["stratify"], seed)
    if kind == "identity_counts":
        return identity_counts(table, tuple(params["n_identities"]), seed, params.get("most_images_first", True))
    if kind == "pool":
        return pool_split(table, int(params["pool_size"]), seed, rest=params.get("rest", "test"))
    if kind == "source_counts":
        return source_counts(table, {key: (value[0], int(value[1])) for key, value in params["counts"].items()},
                             seed)
    raise ValueError(f"unknown split protocol kind {kind!r}; known: {PROTOCOL_KINDS}")
