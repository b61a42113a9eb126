"""Identity similarity, keypoints, verification and re-identification."""

import cv2
import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score, roc_curve

from anonpaper.metrics import (
    bifurcation_keypoint_similarity,
    cross_pair_scores,
    equal_error_rate,
    fs_sift,
    keypoint_similarity,
    match_descriptors,
    pair_scores,
    patch_descriptors,
    reidentification_accuracy,
    select_threshold,
    verification_auc,
    verification_metrics,
    vessel_bifurcations,
)

pytestmark = pytest.mark.unit


def _vessel_tree(seed, size=128):
    """Binary branching tree (2-px lines) with random angles: a toy vessel mask."""
    rng = np.random.default_rng(seed)
    mask = np.zeros((size, size), np.uint8)

    def branch(x, y, angle, length, depth):
        x2, y2 = x + length * np.cos(angle), y + length * np.sin(angle)
        cv2.line(mask, (int(x), int(y)), (int(x2), int(y2)), 1, 2)
        if depth > 0:
            for side in (-1, 1):
                branch(x2, y2, angle + side * rng.uniform(0.4, 0.8), length * rng.uniform(0.6, 0.8), depth - 1)

    branch(size / 2, size - 5, -np.pi / 2 + rng.uniform(-0.2, 0.2), size * 0.3, 4)
    return mask


def _render(mask):
    return cv2.GaussianBlur(mask.astype(np.float32), (5, 5), 1.5) * 0.6 + 0.2


def test_bifurcation_detector_finds_junctions():
    cross = np.zeros((40, 40), np.uint8)
    cross[20, 5:35] = 1
    cross[5:35, 20] = 1
    np.testing.assert_allclose(vessel_bifurcations(cross), [[20.0, 20.0]])
    fork = np.zeros((40, 40), np.uint8)
    cv2.line(fork, (20, 35), (20, 20), 1, 1)
    cv2.line(fork, (20, 20), (8, 5), 1, 1)
    cv2.line(fork, (20, 20), (32, 5), 1, 1)
    np.testing.assert_allclose(vessel_bifurcations(fork), [[20.0, 20.0]], atol=1.0)
    line = np.zeros((40, 40), np.uint8)
    line[20, 5:35] = 1
    assert vessel_bifurcations(line).shape == (0, 2)
    # A binary tree of depth 4 drawn from one root has 1 + 2 + 4 + 8 = 15 forks (some may merge or overlap).
    assert 8 <= len(vessel_bifurcations(_vessel_tree(0))) <= 15
    with pytest.raises(ValueError, match=r"shape \(H, W\)"):
        vessel_bifurcations(np.zeros((2, 8, 8)))


def test_keypoint_similarity_identity_shift_and_asymmetry():
    mask, other = _vessel_tree(0), _vessel_tree(1)
    image, other_image = _render(mask), _render(other)
    assert bifurcation_keypoint_similarity(image, mask, image, mask) == 1.0
    shifted = bifurcation_keypoint_similarity(image, mask, np.roll(image, (3, 5), (0, 1)), np.roll(mask, (3, 5), (0, 1)))
    assert shifted > 0.8
    assert bifurcation_keypoint_similarity(image, mask, other_image, other) < shifted
    # Denominator = keypoints of the FIRST set: a subset of keypoints as "edited" scores |subset| / |all| one way
    # and 1 the other way.
    points = np.array([[10, 10], [50, 12], [30, 40], [70, 70], [15, 60], [60, 30]], np.float32)
    descriptors = np.eye(6, dtype=np.float32)
    assert keypoint_similarity(points, descriptors, points[:4], descriptors[:4]) == pytest.approx(4 / 6)
    assert keypoint_similarity(points[:4], descriptors[:4], points, descriptors) == pytest.approx(1.0)
    assert keypoint_similarity(points[:3], descriptors[:3], points, descriptors) == 0.0  # < 4 matches
    with pytest.raises(ValueError, match=r"\(K=6, D\)"):
        keypoint_similarity(points, descriptors[:5], points, descriptors)


def test_keypoint_similarity_rejects_outliers_via_homography():
    rng = np.random.default_rng(0)
    points = rng.uniform(0, 100, size=(20, 2)).astype(np.float32)
    descriptors = np.eye(20, dtype=np.float32)
    moved = points + np.array([5.0, -3.0], np.float32)
    moved[:5] = rng.uniform(0, 100, size=(5, 2))  # 5 keypoints displaced at random: outliers of the homography
    assert keypoint_similarity(points, descriptors, moved, descriptors) == pytest.approx(15 / 20)


def test_ratio_test_rejects_ambiguous_matches():
    first = np.array([[0.0, 0.0], [1.0, 0.0]], np.float32)
    second = np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0]], np.float32)  # first[0] has two equal candidates
    matches = match_descriptors(first, second, ratio=0.75)
    assert matches.tolist() == [[1, 2]]


def test_patch_descriptors_shape_and_normalisation():
    image = _render(_vessel_tree(0))
    junction = vessel_bifurcations(_vessel_tree(0))[:1]
    descriptors = patch_descriptors(image, np.r_[np.array([[0, 0]], np.float32), junction], radius=4)
    assert descriptors.shape == (2, 81)
    # A flat background patch has no structure: zero descriptor; a vessel junction gets a unit vector.
    np.testing.assert_allclose(np.linalg.norm(descriptors, axis=1), [0.0, 1.0], atol=1e-5)


def test_fs_sift_identical_high_and_different_low():
    rng = np.random.default_rng(0)
    texture = torch.from_numpy(rng.random((1, 3, 96, 96)).astype(np.float32))
    other = torch.from_numpy(rng.random((1, 3, 96, 96)).astype(np.float32))
    assert fs_sift(texture, texture) > 0.95
    assert fs_sift(texture, other) < 0.2
    values = fs_sift(torch.cat([texture, texture]), torch.cat([texture, other]), reduction="none")
    assert values.shape == (2,) and values[0] > values[1]
    with pytest.raises(ValueError, match="identical shapes"):
        fs_sift(texture, other[:, :, :64])


def test_fs_sift_pair_whose_original_has_no_keypoint_is_missing_not_zero():
    """0 / 0 keypoints is no measurement: a 0 would read as perfect de-identification."""
    rng = np.random.default_rng(0)
    texture = torch.from_numpy(rng.random((1, 3, 96, 96)).astype(np.float32))
    blank = torch.full((1, 3, 96, 96), 0.5)
    values = fs_sift(torch.cat([blank, texture, texture]), torch.cat([texture, blank, texture]), reduction="none")
    assert np.isnan(values[0])  # the original has no keypoint
    assert values[1] == 0.0  # the original's keypoints are all lost in the edit: a real 0
    assert fs_sift(torch.cat([blank, texture]), torch.cat([blank, texture])) == pytest.approx(values[2])  # NaN skipped
    assert np.isnan(fs_sift(blank, blank))


def test_fs_sift_with_the_first_images_features_given_scores_the_same():
    from anonpaper.metrics.identity import sift_features

    rng = np.random.default_rng(1)
    first = torch.from_numpy(rng.random((2, 3, 64, 64)).astype(np.float32))
    second = torch.cat([first[:1], torch.from_numpy(rng.random((1, 3, 64, 64)).astype(np.float32))])
    features = [sift_features(image) for image in first]
    np.testing.assert_array_equal(fs_sift(first, second, reduction="none", first_features=features),
                                  fs_sift(first, second, reduction="none"))
    # The given features are used as they are: another image's features score another pair.
    swapped = fs_sift(first, second, reduction="none", first_features=features[::-1])
    assert swapped[0] != fs_sift(first, second, reduction="none")[0]
    with pytest.raises(ValueError, match="one entry per first image"):
        fs_sift(first, second, first_features=features[:1])


def test_sift_homography_similarity_survives_a_shift_but_not_another_image():
    from anonpaper.metrics.identity import sift_homography_similarity

    smooth = lambda seed: torch.nn.functional.avg_pool2d(  # noqa: E731 - blob texture SIFT finds keypoints in
        torch.rand(1, 1, 140, 140, generator=torch.Generator().manual_seed(seed)), 5, stride=1, padding=2)
    texture, other = smooth(0), smooth(1)
    shifted = torch.roll(texture, shifts=(6, -4), dims=(2, 3))[..., 10:138, 10:138]
    texture, other = texture[..., 10:138, 10:138], other[..., 10:138, 10:138]
    scores = sift_homography_similarity(torch.cat([texture, texture, texture]), torch.cat([texture, shifted, other]),
                                        reduction="none")
    assert scores[0] > 0.9
    assert scores[1] > 0.3  # a translation is a homography: most matches are inliers
    assert scores[2] < 0.05  # unrelated textures: no geometrically consistent matches
    # The plain match count is fooled far more by the unrelated texture than the verified one.
    assert fs_sift(texture, other) >= scores[2]
    with pytest.raises(ValueError, match="identical shapes"):
        sift_homography_similarity(texture, other[:, :, :64])


def test_verification_metrics_hand_computed():
    # similarity scores; labels 1 = same person
    scores = np.array([0.9, 0.8, 0.7, 0.4, 0.3, 0.2])
    labels = np.array([1, 1, 0, 1, 0, 0])
    result = verification_metrics(scores, labels, threshold=0.5, higher_means_same=True)
    assert result["tar"] == pytest.approx(2 / 3) and result["frr"] == pytest.approx(1 / 3)
    assert result["far"] == pytest.approx(1 / 3)
    assert result["accuracy"] == pytest.approx(4 / 6) and result["f1"] == pytest.approx(4 / 6)
    # The same as distances with the opposite direction.
    flipped = verification_metrics(1 - scores, labels, threshold=0.5, higher_means_same=False)
    assert flipped["tar"] == result["tar"] and flipped["far"] == result["far"]
    assert np.isnan(verification_metrics(scores, np.ones(6), 0.5, True)["far"])
    with pytest.raises(ValueError, match="binary"):
        verification_metrics(scores, labels + 1, 0.5, True)
    with pytest.raises(ValueError, match="length 6"):
        verification_metrics(scores, labels[:5], 0.5, True)


def test_threshold_auc_eer_against_sklearn():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, 300)
    scores = rng.normal(size=300) + 1.5 * labels
    threshold = select_threshold(scores, labels, higher_means_same=True, criterion="f1")
    best = verification_metrics(scores, labels, threshold, True)["f1"]
    for candidate in np.quantile(scores, np.linspace(0, 1, 41)):
        assert verification_metrics(scores, labels, candidate, True)["f1"] <= best + 1e-12
    assert verification_auc(scores, labels, True) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    assert verification_auc(-scores, labels, False) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    false_positive, true_positive, _ = roc_curve(labels, scores)
    false_negative = 1 - true_positive
    crossing = np.argmin(np.abs(false_positive - false_negative))
    assert abs(equal_error_rate(scores, labels, True) - false_positive[crossing]) < 0.02
    for criterion in ("f1", "accuracy"):
        chosen = select_threshold(-scores, labels, higher_means_same=False, criterion=criterion)
        brute = max(verification_metrics(-scores, labels, t, False)[criterion] for t in np.unique(-scores))
        assert verification_metrics(-scores, labels, chosen, False)[criterion] == pytest.approx(brute)
    separable = np.r_[np.zeros(5), np.ones(5)]
    assert equal_error_rate(separable, separable, True) == 0.0


def test_pair_scores_and_reidentification():
    rng = np.random.default_rng(2)
    identities = np.repeat(np.arange(10), 3)
    centres = rng.normal(size=(10, 16))
    embeddings = centres[identities] + 0.05 * rng.normal(size=(30, 16))
    assert reidentification_accuracy(embeddings, identities, embeddings, identities, exclude_same_index=True) == 1.0
    shuffled = rng.normal(size=(30, 16))
    assert reidentification_accuracy(shuffled, identities, shuffled, identities, exclude_same_index=True) < 0.5
    assert reidentification_accuracy(shuffled, identities, shuffled, identities, rank=29, exclude_same_index=True) == 1.0
    gram = cross_pair_scores(embeddings[:5], embeddings[3:9])
    for row in range(5):
        np.testing.assert_allclose(gram[row], pair_scores(np.repeat(embeddings[row : row + 1], 6, 0), embeddings[3:9]),
                                   atol=1e-12)
    distance = pair_scores(embeddings, embeddings)
    np.testing.assert_allclose(distance, 0.0, atol=1e-12)
    np.testing.assert_allclose(pair_scores(embeddings, -embeddings, kind="cosine"), -1.0)
    with pytest.raises(ValueError, match="kind"):
        pair_scores(embeddings, embeddings, kind="l1")
