"""Splits: patient-level leakage can never happen; each paper's protocol gives its sizes and ratios."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from anonpaper.data.splits import (apply_protocol, assert_no_patient_leakage, disjoint_patient_counts,
                                   identity_counts, image_counts_keep_ratio, min_images_per_patient,
                                   official_split, patient_split, pool_split, source_counts)


def random_table(seed: int, n_patients: int = 60, max_images: int = 6) -> pd.DataFrame:
    """Patients with 1..max_images images each, a binary per-image label and a per-patient class."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, max_images + 1, size=n_patients)
    patients = np.repeat([f"p{i:03d}" for i in range(n_patients)], counts)
    patient_class = np.repeat(rng.integers(0, 3, size=n_patients), counts)
    return pd.DataFrame({"image_id": [f"img{i}" for i in range(len(patients))], "patient_id": patients,
                         "label": rng.integers(0, 2, size=len(patients)), "grade": patient_class})


def leaks(table: pd.DataFrame, split: pd.Series) -> int:
    assigned = table.assign(split=split).dropna(subset=["split"])
    return int((assigned.groupby("patient_id")["split"].nunique() > 1).sum())


@pytest.mark.unit
@pytest.mark.parametrize("seed", range(8))
def test_patient_level_protocols_never_leak(seed):
    table = random_table(seed)
    assert leaks(table, patient_split(table, (0.7, 0.1, 0.2), stratify="grade", seed=seed)) == 0
    assert leaks(table, disjoint_patient_counts(table, (40, 10, 10), seed=seed)) == 0
    assert leaks(table, disjoint_patient_counts(table, (30, 8, 8), seed=seed, balance="label")) == 0
    assert leaks(table, identity_counts(table, (20, 5, 5), seed=seed)) == 0
    assert leaks(table, pool_split(table, 50, seed=seed)) == 0


@pytest.mark.unit
def test_patient_split_fractions_stratification_and_determinism():
    table = random_table(1, n_patients=200)
    split = patient_split(table, (0.7, 0.1, 0.2), stratify="grade", seed=3)
    assert split.equals(patient_split(table, (0.7, 0.1, 0.2), stratify="grade", seed=3))
    assert not split.equals(patient_split(table, (0.7, 0.1, 0.2), stratify="grade", seed=4))
    per_patient = table.assign(split=split).groupby("patient_id").first()
    for grade, group in per_patient.groupby("grade"):
        fractions = group["split"].value_counts(normalize=True)
        assert abs(fractions["train"] - 0.7) < 0.03 and abs(fractions["test"] - 0.2) < 0.03


@pytest.mark.unit
def test_disjoint_patient_counts_exact_and_balanced():
    table = random_table(2, n_patients=150)
    split = disjoint_patient_counts(table, (60, 20, 30), seed=0, balance="label")
    counts = split.value_counts()
    assert (counts["train"], counts["val"], counts["test"]) == (60, 20, 30)
    chosen = table.assign(split=split).dropna(subset=["split"])
    for name, group in chosen.groupby("split"):
        assert group["label"].sum() == len(group) // 2  # balanced: half positive (floor)
    with pytest.raises(ValueError, match="not enough eligible images"):
        disjoint_patient_counts(table, (10_000, 1, 1), seed=0)


@pytest.mark.unit
def test_image_counts_keep_ratio_is_exact_and_keeps_the_class_ratio():
    # Paper 5's iris protocol: 1795 images, 24% glaucoma, 1165/270/360.
    rng = np.random.default_rng(0)
    disease = np.zeros(1795, dtype=int)
    disease[rng.choice(1795, size=431, replace=False)] = 1
    table = pd.DataFrame({"patient_id": rng.integers(0, 115, size=1795).astype(str), "disease": disease})
    split = image_counts_keep_ratio(table, (1165, 270, 360), "disease", seed=0)
    assert split.value_counts().to_dict() == {"train": 1165, "test": 360, "val": 270}
    overall = disease.mean()
    for name in ("train", "val", "test"):
        assert abs(table["disease"][split == name].mean() - overall) < 0.005
    with pytest.raises(ValueError, match="sum to"):
        image_counts_keep_ratio(table, (1800, 1, 1), "disease")


@pytest.mark.unit
def test_official_split_with_min_images_and_leak_detection():
    # Paper 3: MIMIC default split, patients with >= 20 images.
    table = pd.DataFrame({"patient_id": ["a"] * 20 + ["b"] * 19 + ["c"] * 25,
                          "official_split": ["train"] * 20 + ["validate"] * 19 + ["test"] * 25})
    split = official_split(table, min_images=20)
    assert split.isna().sum() == 19 and (split == "train").sum() == 20 and (split == "test").sum() == 25
    assert split[table["patient_id"] == "b"].isna().all()  # 19 images: below the threshold, dropped
    assert min_images_per_patient(table, 20).sum() == 45
    leaky = table.assign(official_split=["train"] * 10 + ["test"] * 10 + ["validate"] * 19 + ["test"] * 25)
    with pytest.raises(ValueError, match="several splits"):
        official_split(leaky)
    with pytest.raises(ValueError, match="outside"):
        official_split(table.assign(official_split="holdout"))


@pytest.mark.unit
def test_identity_pool_and_source_protocols():
    table = random_table(5, n_patients=80)
    split = identity_counts(table, (30, 5, 6), seed=1)
    per_split = table.assign(split=split).groupby("split")["patient_id"].nunique().to_dict()
    assert per_split == {"train": 30, "val": 5, "test": 6}
    # most_images_first draws only among the identities with the most images.
    sizes = table.groupby("patient_id").size()
    drawn = table.loc[split.notna(), "patient_id"].unique()
    assert sizes[drawn].min() >= sizes.sort_values(ascending=False).iloc[40]
    single = pd.DataFrame({"patient_id": [f"i{k}" for k in range(100)]})
    pool = pool_split(single, 30, seed=0)
    assert (pool == "train").sum() == 30 and (pool == "test").sum() == 70
    sources = pd.DataFrame({"source": ["a"] * 10 + ["b"] * 5})
    drawn_sources = source_counts(sources, {"a": ("train", 7), "b": ("test", 5)}, seed=0)
    assert drawn_sources.value_counts().to_dict() == {"train": 7, "test": 5}
    with pytest.raises(ValueError, match="has 5 images"):
        source_counts(sources, {"b": ("test", 6)})


@pytest.mark.unit
def test_apply_protocol_dispatch_and_errors():
    table = random_table(0)
    split = apply_protocol(table, {"kind": "patient_fractions", "fractions": [0.5, 0.25, 0.25], "used_by": "x"}, 0)
    assert set(split.unique()) == {"train", "val", "test"}
    with pytest.raises(ValueError, match="unknown split protocol kind"):
        apply_protocol(table, {"kind": "random_images"})
    with pytest.raises(ValueError, match="lacks 'kind'"):
        apply_protocol(table, {"fractions": [1, 0, 0]})
    assert_no_patient_leakage(table.assign(split=split))
    with pytest.raises(ValueError, match="several splits"):
        assert_no_patient_leakage(pd.DataFrame({"patient_id": ["a", "a"], "split": ["train", "test"]}))
