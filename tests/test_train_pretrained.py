"""Tests of the cached cohort-trained networks (anonpaper.train.pretrained)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import anonpaper.train.pretrained as pretrained
from anonpaper.data.phantoms.retina import load_phantom_retina
from anonpaper.train.segmenter import segment


@pytest.fixture
def tiny_cohort():
    return load_phantom_retina(n_patients=6, images_per_patient=(1, 2), image_size=64, seed=3,
                               split_fractions=(0.5, 0.25, 0.25))


def _no_training(*_args, **_kwargs):
    raise AssertionError("trained although the artifact is cached")


def _same_weights(first: torch.nn.Module, second: torch.nn.Module) -> bool:
    one, other = first.state_dict(), second.state_dict()
    return one.keys() == other.keys() and all(torch.equal(one[key], other[key]) for key in one)


@pytest.mark.unit
def test_vessel_segmenter_is_cached(tiny_cohort, tmp_path, monkeypatch):
    monkeypatch.setenv("ANONPAPER_CACHE", str(tmp_path))
    settings = dict(base_width=4, depth=2, epochs=1, patch_size=32, patches_per_epoch=8, batch_size=4, seed=0,
                    progress=False, device="cpu", include_source=False)
    first = pretrained.trained_vessel_segmenter(tiny_cohort, **settings)
    assert not first.from_cache
    assert 0.0 <= first.val_dice <= 1.0
    assert len(first.history) == 1
    monkeypatch.setattr(pretrained, "train_segmenter", _no_training)
    second = pretrained.trained_vessel_segmenter(tiny_cohort, **settings)
    assert second.from_cache and second.cache_key == first.cache_key
    assert _same_weights(first.model, second.model)
    assert second.val_dice == first.val_dice
    images = tiny_cohort.load_images()[:2]
    np.testing.assert_array_equal(segment(first.model, images), segment(second.model, images))
    # Another seed or another cohort is another artifact (and would train: the patched trainer raises).
    with pytest.raises(AssertionError, match="cached"):
        pretrained.trained_vessel_segmenter(tiny_cohort, **{**settings, "seed": 1})
    other = load_phantom_retina(n_patients=6, images_per_patient=(1, 2), image_size=64, seed=4,
                                split_fractions=(0.5, 0.25, 0.25))
    assert pretrained.cohort_description(other) != pretrained.cohort_description(tiny_cohort)
    with pytest.raises(AssertionError, match="cached"):
        pretrained.trained_vessel_segmenter(other, **settings)


@pytest.mark.unit
def test_exudate_segmenter_uses_its_own_mask_and_namespace(tiny_cohort, tmp_path, monkeypatch):
    monkeypatch.setenv("ANONPAPER_CACHE", str(tmp_path))
    seen = {}
    original = pretrained.train_segmenter

    def spy(model, images, masks, settings, **options):
        seen["masks"] = np.asarray(masks).copy()
        return original(model, images, masks, settings, **options)

    monkeypatch.setattr(pretrained, "train_segmenter", spy)
    result = pretrained.trained_exudate_segmenter(tiny_cohort, base_width=4, depth=2, epochs=1, patch_size=32,
                                                  patches_per_epoch=8, batch_size=4, progress=False, device="cpu",
                                                  include_source=False)
    np.testing.assert_array_equal(seen["masks"], tiny_cohort.split("train").load_masks("hard_exudate"))
    assert (tmp_path / "hard_exudate-segmenter" / f"{result.cache_key}.pt").is_file()


@pytest.mark.unit
def test_keypoint_detector_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("ANONPAPER_CACHE", str(tmp_path))
    cohort = load_phantom_retina(n_patients=4, images_per_patient=(1, 2), image_size=96, seed=2,
                                 split_fractions=(0.5, 0.25, 0.25))
    settings = dict(base_width=4, depth=2, descriptor_dim=8, epochs=1, batch_size=2, progress=False, device="cpu",
                    include_source=False)
    first = pretrained.trained_keypoint_detector(cohort, **settings)
    assert not first.from_cache and set(first.val_metrics) == {"precision", "recall", "keypoints_per_image"}
    monkeypatch.setattr(pretrained, "train_keypoint_detector", _no_training)
    second = pretrained.trained_keypoint_detector(cohort, **settings)
    assert second.from_cache and _same_weights(first.model, second.model)


@pytest.mark.unit
def test_missing_mask_or_keypoints_is_rejected(tiny_cohort):
    class NoMasks:
        name, mask_names, channels = "none", (), 3

    with pytest.raises(ValueError, match="no 'vessel' mask"):
        pretrained.trained_vessel_segmenter(NoMasks(), epochs=1)
    with pytest.raises(ValueError, match="keypoints"):
        pretrained.trained_keypoint_detector(NoMasks(), epochs=1)
