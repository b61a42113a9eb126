"""Metric edge cases: FS_SIFT stays in [0, 1] when the edit has fewer keypoints; FS_SR protocol presets; RROI
reports finite statistics and counts when an edit leaves the region of disinterest untouched."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from anonpaper.metrics.identity import FS_SR_PROTOCOLS, KeypointProtocol, match_fraction
from anonpaper.metrics.lesion import RROISummary, rroi, rroi_summary

pytestmark = pytest.mark.unit


def _planted(first_count: int, second_count: int, seed: int = 0):
    """``first_count`` original descriptors in tight clusters around ``second_count`` well-separated edit
    descriptors: every original keypoint has one clear nearest neighbour in the edit (passes the ratio test)."""
    rng = np.random.default_rng(seed)
    centres = 10.0 * np.eye(second_count, 8)
    first = centres[np.arange(first_count) % second_count] + rng.normal(0, 0.01, (first_count, 8))
    return (np.zeros((first_count, 2)), first.astype(np.float32),
            np.zeros((second_count, 2)), centres.astype(np.float32))


@pytest.mark.parametrize("first_count,second_count", [(6, 2), (9, 3), (3, 3), (2, 5)])
def test_fs_sift_fraction_counts_original_keypoints_and_stays_in_unit_interval(first_count, second_count):
    score = match_fraction(*_planted(first_count, second_count))
    # Every original keypoint is matched once: matched / keypoints of the original = 1 (min() gave 3 for 6 vs 2).
    assert score == pytest.approx(1.0)


def test_fs_sift_fraction_with_planted_unmatched_keypoints():
    points_first, first, points_second, second = _planted(4, 2)
    # Two extra original keypoints equidistant from both edit descriptors: ambiguous, fail the ratio test.
    ambiguous = np.full((2, 8), 0.0, np.float32)
    ambiguous[:, 0] = ambiguous[:, 1] = 5.0
    score = match_fraction(np.zeros((6, 2)), np.vstack([first, ambiguous]), points_second, second)
    assert score == pytest.approx(4 / 6)
    assert match_fraction(np.zeros((0, 2)), np.zeros((0, 8)), points_second, second) == 0.0


def test_fs_sr_protocol_presets():
    superretina = FS_SR_PROTOCOLS["superretina"]
    assert superretina.ratio == 0.9 and superretina.detection_threshold == 0.01
    assert superretina.fs_sr_options()["threshold"] == 0.01
    assert superretina.fs_sr_options()["top_k"] >= 10 ** 9  # no cap on the keypoint count
    default = FS_SR_PROTOCOLS["anonpaper"].fs_sr_options()
    assert default == {"ratio": 0.75, "top_k": 100}  # the detector's own threshold
    assert isinstance(superretina, KeypointProtocol)


def _edits():
    """Three originals and edits; mask = top row. Image 0 changes only inside (ratio +inf), image 1 has ratio 2,
    image 2 ratio 1, image 3 is untouched (0 / 0)."""
    original = torch.zeros(4, 1, 2, 2)
    mask = torch.zeros(4, 1, 2, 2)
    mask[:, :, 0] = 1.0
    edited = original.clone()
    edited[:3, :, 0] = 0.5
    edited[1, :, 1] = 0.25
    edited[2, :, 1] = 0.5
    return mask, original, edited


def test_rroi_summary_is_finite_and_counts_unbounded_images():
    mask, original, edited = _edits()
    ratios = rroi(mask, original, edited, reduction="none")
    assert math.isinf(ratios[0]) and ratios[1] == pytest.approx(2.0) and ratios[2] == pytest.approx(1.0)
    assert math.isnan(ratios[3])
    assert math.isinf(rroi(mask, original, edited))  # paper 1's mean (Eq. 12) is unbounded here
    summary = rroi_summary(mask, original, edited)
    assert summary == RROISummary(median=pytest.approx(2.0), mean_finite=pytest.approx(1.5), n_images=4,
                                  n_unbounded=1, n_undefined=1)
    assert rroi(mask, original, edited, reduction="median") == pytest.approx(np.median([np.inf, 2.0, 1.0]))
    # Without edge cases the finite mean is paper 1's mean.
    finite = rroi_summary(mask[1:3], original[1:3], edited[1:3])
    assert finite.mean_finite == pytest.approx(rroi(mask[1:3], original[1:3], edited[1:3]))
    assert finite.n_unbounded == finite.n_undefined == 0
    with pytest.raises(ValueError, match="reduction"):
        rroi(mask, original, edited, reduction="max")
