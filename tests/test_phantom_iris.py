"""Tests of the iris phantom: determinism, schema and splits, mask geometry and labels, identity consistency."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from anonpaper.data.cohort import validate_table
from anonpaper.data.phantoms.iris import (DISEASE_TYPES, MASK_NAMES, IrisPhantomCohort, IrisPhantomConfig,
                                          build_iris_table, iris_polar_texture, load_phantom_iris)
from anonpaper.data.registry import load_cohort
from anonpaper.experiments.cohorts import iris_statistics, plot_iris_examples

SMALL = dict(n_subjects=6, images_per_eye=3, image_size=64, seed=2)


@pytest.fixture(scope="module")
def cohort() -> IrisPhantomCohort:
    return load_phantom_iris(n_subjects=12, images_per_eye=4, image_size=96, seed=7, disease_fraction=0.5)


@pytest.mark.unit
def test_deterministic_per_seed():
    first, second = load_phantom_iris(**SMALL), load_phantom_iris(**SMALL)
    pd.testing.assert_frame_equal(first.table, second.table)
    for index in (0, 7, len(first) - 1):
        np.testing.assert_array_equal(first.image(index), second.image(index))
        for name in MASK_NAMES:
            np.testing.assert_array_equal(first.mask(index, name), second.mask(index, name))
    other = load_phantom_iris(**{**SMALL, "seed": 3})
    assert not np.array_equal(first.image(0), other.image(0))


@pytest.mark.unit
def test_schema_and_splits():
    cohort = load_cohort("phantom-iris", n_subjects=20, images_per_eye=5, image_size=64, both_eyes=True)
    table = cohort.table
    validate_table(table, "phantom-iris")
    assert cohort.modality == "iris" and cohort.channels == 1 and cohort.mask_names == MASK_NAMES
    for column in ("image_id", "patient_id", "identity", "eye", "split", "split_within_subject", "source",
                   "disease", "disease_type"):
        assert column in table.columns, column
    assert set(table["disease"]) <= {0, 1}
    assert ((table["disease"] == 1) == (table["disease_type"] != "")).all()
    assert set(table["disease_type"]) - {""} <= set(DISEASE_TYPES)
    assert (table.groupby("identity")["disease"].nunique() == 1).all()
    assert (table.groupby("patient_id")["eye"].nunique() == 2).all()  # both_eyes: two identities per subject
    # subject-level split: no subject in two splits
    assert (table.groupby("patient_id")["split"].nunique() == 1).all()
    # image-level split within subjects: every identity is in train and test, and the class ratio is kept
    within = table.groupby("identity")["split_within_subject"].agg(set)
    assert all({"train", "test"} <= splits for splits in within)
    ratios = table.groupby("split_within_subject")["disease"].mean()
    assert ratios.max() - ratios.min() < 1e-9
    image = cohort.image(0)
    assert image.dtype == np.uint8 and image.shape == (64, 64)
    with pytest.raises(ValueError, match="image_size"):
        IrisPhantomConfig(image_size=300)
    with pytest.raises(ValueError, match="disease_types"):
        IrisPhantomConfig(disease_types=("pterygium",))
    with pytest.raises(ValueError, match="unknown phantom-iris option"):
        load_phantom_iris(n_subject=3)


@pytest.mark.unit
def test_disease_imbalance_about_one_to_three():
    table = build_iris_table(IrisPhantomConfig(n_subjects=400, images_per_eye=1, seed=1))
    assert 0.2 <= table["disease"].mean() <= 0.3


@pytest.mark.unit
def test_masks_geometry_and_labels(cohort):
    table = cohort.table
    kinds = set()
    for index in range(len(cohort)):
        row = table.iloc[index]
        masks = cohort.masks(index)
        assert not (masks["iris"] & masks["pupil"]).any()
        assert not (masks["iris"] & masks["occlusion"]).any()
        assert bool(masks["lesion"].any()) == bool(row["disease"]), index
        image = cohort.image(index).astype(float)
        if row["disease_type"] in ("", "synechia"):
            # The annulus (visible + occluded iris) has the closed-form area of an elliptical ring:
            # pi * squash * (R_iris^2 - R_pupil^2), up to discretisation and the small pupil decentration.
            radius = row["iris_radius_px"]
            expected = np.pi * row["foreshortening"] * radius ** 2 * (1 - row["pupil_ratio"] ** 2)
            annulus = (masks["iris"] | masks["occlusion"]).sum()
            if row["disease_type"] == "":
                assert abs(annulus - expected) / expected < 0.06, (index, annulus, expected)
        if masks["pupil"].sum() > 10 and masks["iris"].sum() > 10 and row["disease_type"] != "cataract":
            assert image[masks["pupil"]].mean() + 30 < image[masks["iris"]].mean()
        if row["disease_type"] == "cataract":
            kinds.add("cataract")
            assert not (masks["lesion"] & masks["iris"]).any()  # the clouded lens lies in the pupil
        if row["disease_type"] == "iridectomy":
            kinds.add("iridectomy")
            # the notch (a hole through the iris) is dark where it is not covered by a lid or lashes
            visible = masks["lesion"] & masks["iris"]
            if visible.sum() > 3:
                assert image[visible].mean() + 20 < image[masks["iris"] & ~masks["lesion"]].mean(), index
    assert kinds == {"cataract", "iridectomy"}  # both rendered in the fixture (synechia checked by the ring)


@pytest.mark.unit
def test_cataract_brightens_pupil():
    """Same identity and image parameters, cataract on versus off: only the pupil region gets brighter."""
    healthy = load_phantom_iris(n_subjects=1, images_per_eye=1, image_size=96, seed=0, disease_fraction=0.0)
    row = healthy.table.iloc[0].copy()
    identity = healthy._identity(row)
    from anonpaper.data.phantoms.iris import render_iris

    base, base_masks = render_iris(*identity, row.to_dict(), 96)
    row["disease"], row["disease_type"], row["severity"] = 1, "cataract", 1.0
    sick, sick_masks = render_iris(*identity, row.to_dict(), 96)
    pupil = sick_masks["lesion"] & base_masks["pupil"]
    assert pupil.sum() > 20
    assert sick[pupil].astype(float).mean() > base[pupil].astype(float).mean() + 20
    far = ~(sick_masks["lesion"] | base_masks["pupil"])
    np.testing.assert_array_equal(base_masks["iris"], sick_masks["iris"])
    assert np.abs(sick[far].astype(float) - base[far]).mean() < 2.0  # elsewhere only blur spill-over


@pytest.mark.unit
def test_identity_consistency():
    """Images of one identity share its texture: nearest neighbour on raw pixels finds the same identity."""
    cohort = load_phantom_iris(n_subjects=8, images_per_eye=3, image_size=64, seed=4)
    images = cohort.load_images().reshape(len(cohort), -1).astype(float)
    images = (images - images.mean(1, keepdims=True)) / images.std(1, keepdims=True)
    similarity = images @ images.T / images.shape[1]
    identities = cohort.table["identity"].to_numpy()
    same = identities[:, None] == identities[None, :]
    off_diagonal = ~np.eye(len(cohort), dtype=bool)
    assert similarity[same & off_diagonal].mean() > similarity[~same].mean() + 0.05
    np.fill_diagonal(similarity, -np.inf)
    assert (identities[similarity.argmax(1)] == identities).mean() >= 0.5
    # the identity texture itself is fixed per seed and differs between identities
    np.testing.assert_array_equal(iris_polar_texture(5), iris_polar_texture(5))
    correlation = np.corrcoef(iris_polar_texture(5).ravel(), iris_polar_texture(6).ravel())[0, 1]
    assert abs(correlation) < 0.5


@pytest.mark.unit
def test_cache_statistics_and_plot():
    cohort = load_phantom_iris(**SMALL)
    cohort.image(1)
    cohort.masks(1)
    assert cohort._render_cache.misses == 1 and cohort._render_cache.hits == 1
    stats = iris_statistics(cohort)
    assert stats.loc["images", "all"] == len(cohort) == 18
    assert stats.loc["images", ["split=train", "split=val", "split=test"]].sum() == len(cohort)
    assert stats.loc["images", ["within=train", "within=val", "within=test"]].sum() == len(cohort)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure = plot_iris_examples(cohort, n_identities=2, images_per_identity=2)
    assert len(figure.axes) == 4
    plt.close(figure)
