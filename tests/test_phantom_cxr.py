"""Tests of the chest X-ray phantom: determinism, schema, label/mask consistency, identity, longitudinal structure."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from anonpaper.data.cohort import REQUIRED_COLUMNS, validate_table
from anonpaper.data.phantoms.cxr import (FINDING_MASK, FINDINGS, MASK_NAMES, CXRPhantomCohort, CXRPhantomConfig,
                                         build_cxr_table, load_phantom_cxr)
from anonpaper.data.registry import load_cohort
from anonpaper.experiments.cohorts import cxr_statistics, plot_cxr_examples

SMALL = dict(n_patients=8, image_size=64, images_per_patient=3, seed=3)


@pytest.fixture(scope="module")
def cohort() -> CXRPhantomCohort:
    # Higher prevalences so every finding occurs in a small cohort.
    return load_phantom_cxr(n_patients=10, image_size=96, images_per_patient=4, seed=5,
                            prevalence={"pleural_effusion": 0.5, "lung_opacity": 0.5, "atelectasis": 0.5,
                                        "cardiomegaly": 0.4, "support_devices": 0.5})


@pytest.mark.unit
def test_deterministic_per_seed():
    first, second = load_phantom_cxr(**SMALL), load_phantom_cxr(**SMALL)
    pd.testing.assert_frame_equal(first.table, second.table)
    for index in (0, 5, len(first) - 1):
        np.testing.assert_array_equal(first.image(index), second.image(index))
        for name in MASK_NAMES:
            np.testing.assert_array_equal(first.mask(index, name), second.mask(index, name))
    other = load_phantom_cxr(**{**SMALL, "seed": 4})
    assert not np.array_equal(first.image(0), other.image(0))


@pytest.mark.unit
def test_schema_and_registry():
    cohort = load_cohort("phantom-cxr", n_patients=12, image_size=64, seed=0)
    table = cohort.table
    validate_table(table, "phantom-cxr")
    for column in REQUIRED_COLUMNS + ("source", "sex", "age", "view", "study_index", "ctr"):
        assert column in table.columns, column
    assert cohort.modality == "cxr" and cohort.channels == 1 and cohort.mask_names == MASK_NAMES
    for finding in FINDINGS + ("no_finding",):
        values = table[f"label_{finding}"]
        assert values.dtype == np.float64
        assert set(values.unique()) <= {0.0, 1.0}
    assert set(table["view"]) <= {"AP", "PA"} and set(table["sex"]) <= {"F", "M"}
    # patients never cross splits; all three splits used with 12 patients at 70/10/20
    assert (table.groupby("patient_id")["split"].nunique() == 1).all()
    assert set(table["split"]) == {"train", "val", "test"}
    image = cohort.image(0)
    assert image.dtype == np.uint8 and image.shape == (64, 64)
    masks = cohort.masks(0)
    assert set(masks) == set(MASK_NAMES)
    assert all(mask.dtype == bool and mask.shape == (64, 64) for mask in masks.values())


@pytest.mark.unit
def test_invalid_options_raise():
    with pytest.raises(ValueError, match="image_size"):
        CXRPhantomConfig(image_size=32)
    with pytest.raises(ValueError, match="prevalence"):
        CXRPhantomConfig(prevalence={"pneumothorax": 0.1})
    with pytest.raises(ValueError, match="unknown phantom-cxr option"):
        load_phantom_cxr(n_patient=3)


@pytest.mark.unit
def test_labels_match_masks(cohort):
    table = cohort.table
    seen = {finding: set() for finding in FINDINGS}
    for index in range(len(cohort)):
        row = table.iloc[index]
        masks = cohort.masks(index)
        assert not (masks["lungs"] & masks["heart"]).any()
        for name in ("effusion", "opacity", "atelectasis"):
            assert not (masks[name] & ~masks["lungs"]).any(), name  # lesions lie inside the lung fields
        for finding, name in FINDING_MASK.items():
            assert bool(row[f"true_{finding}"]) == bool(masks[name].any()), (index, finding)
            assert row[f"label_{finding}"] == row[f"true_{finding}"]
        # Cardiothoracic ratio measured on the masks: heart width over thorax (lungs + heart) width.
        heart_columns = np.flatnonzero(masks["heart"].any(0))
        thorax_columns = np.flatnonzero((masks["lungs"] | masks["heart"]).any(0))
        measured = (np.ptp(heart_columns) + 1) / (np.ptp(thorax_columns) + 1)
        assert abs(measured - row["ctr"]) < 0.05, (index, measured, row["ctr"])
        assert (measured > 0.5) == bool(row["true_cardiomegaly"]), (index, measured)
        for finding in FINDINGS:
            seen[finding].add(int(row[f"true_{finding}"]))
    assert all(values == {0, 1} for values in seen.values()), seen


@pytest.mark.unit
def test_findings_are_visible(cohort):
    """Effusion, opacity, atelectasis and devices are brighter than the surrounding aerated lung."""
    contrasts = {name: [] for name in ("effusion", "opacity", "atelectasis", "support_devices")}
    for index in range(len(cohort)):
        image = cohort.image(index).astype(float)
        masks = cohort.masks(index)
        clear = masks["lungs"] & ~masks["effusion"] & ~masks["opacity"] & ~masks["atelectasis"] & \
            ~masks["support_devices"]
        for name in contrasts:
            if masks[name].sum() >= 4 and clear.sum() >= 20:
                contrasts[name].append(image[masks[name]].mean() - image[clear].mean())
    for name, values in contrasts.items():
        assert len(values) >= 2, name
        assert np.median(values) > 10, (name, values)  # uint8 grey levels


@pytest.mark.unit
def test_same_patient_images_share_anatomy():
    """Raw (unaligned) pixels: same-patient pairs correlate more than other pairs; nearest neighbour finds them."""
    cohort = load_phantom_cxr(n_patients=8, image_size=64, images_per_patient=3, seed=11, text_markers=False,
                              collimation=False, prevalence={finding: 0.0 for finding in FINDINGS})
    images = cohort.load_images().reshape(len(cohort), -1).astype(float)
    images = (images - images.mean(1, keepdims=True)) / images.std(1, keepdims=True)
    similarity = images @ images.T / images.shape[1]
    patients = cohort.table["patient_id"].to_numpy()
    same = patients[:, None] == patients[None, :]
    off_diagonal = ~np.eye(len(cohort), dtype=bool)
    assert similarity[same & off_diagonal].mean() > similarity[~same].mean() + 0.05
    np.fill_diagonal(similarity, -np.inf)
    rank1 = (patients[similarity.argmax(1)] == patients).mean()
    assert rank1 >= 0.6, rank1
    # Anatomy is a patient property: the (cached) patient layers are identical between that patient's images.
    anatomy_a, layers_a = cohort._patient(cohort.table.iloc[0])
    anatomy_b, layers_b = cohort._patient(cohort.table.iloc[1])
    assert cohort.table["patient_id"].iloc[0] == cohort.table["patient_id"].iloc[1]
    np.testing.assert_array_equal(layers_a.bones, layers_b.bones)
    assert anatomy_a["ctr"] == anatomy_b["ctr"]


@pytest.mark.unit
def test_longitudinal_structure_and_uncertain_labels():
    config = CXRPhantomConfig(n_patients=300, seed=2, uncertain_labels=True, uncertain_fraction=0.5)
    table = build_cxr_table(config)
    counts = table.groupby("patient_id").size()
    assert counts.min() >= 1 and counts.max() >= 20 and counts.max() <= config.max_images
    assert 0.08 <= (counts >= 20).mean() <= 0.25  # frequent_fraction 0.15
    assert (table.groupby("patient_id")["true_cardiomegaly"].nunique() == 1).all()
    assert (table.groupby("patient_id")["sex"].nunique() == 1).all()
    for finding in ("pleural_effusion", "lung_opacity", "atelectasis"):
        labels = table[f"label_{finding}"]
        assert set(labels.unique()) == {-1.0, 0.0, 1.0}
        certain = labels != -1
        assert (labels[certain] == table.loc[certain, f"true_{finding}"]).all()
        # persistence: a finding present in one study is more likely present in the next
        ordered = table.sort_values(["patient_id", "study_index"])
        current = ordered[f"true_{finding}"].to_numpy()[:-1]
        following = ordered[f"true_{finding}"].to_numpy()[1:]
        same_patient = (ordered["patient_id"].to_numpy()[:-1] == ordered["patient_id"].to_numpy()[1:])
        assert following[same_patient & (current == 1)].mean() > following[same_patient & (current == 0)].mean()
    # Uncertainty changes labels only, never the ground truth or the pixels.
    certain_table = build_cxr_table(CXRPhantomConfig(n_patients=300, seed=2))
    pd.testing.assert_series_equal(table["true_atelectasis"], certain_table["true_atelectasis"])


@pytest.mark.unit
def test_sizes_cache_statistics_and_plot():
    for size in (64, 512):
        cohort = load_phantom_cxr(n_patients=1, image_size=size, images_per_patient=1)
        assert cohort.image(0).shape == (size, size)
    cohort = load_phantom_cxr(**SMALL)
    cohort.image(2)
    cohort.masks(2)
    assert cohort._render_cache.misses == 1 and cohort._render_cache.hits == 1
    stats = cxr_statistics(cohort)
    assert stats.loc["images", "all"] == len(cohort)
    assert stats.loc["patients", "all"] == 8
    assert stats.loc["images", ["train", "val", "test"]].sum() == len(cohort)
    import matplotlib

    matplotlib.use("Agg")
    figure = plot_cxr_examples(cohort, n_patients=2, images_per_patient=2)
    assert len(figure.axes) == 4
    import matplotlib.pyplot as plt

    plt.close(figure)
