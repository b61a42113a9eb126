"""Identity similarity: FS_SIFT, keypoint similarity FS_SR (+ a classical bifurcation detector), verification
metrics (TAR, FAR, FRR, F1, accuracy, ROC AUC, EER) and re-identification rank-k accuracy.

Direction: FS_SIFT and FS_SR measure how much identity survives between an original and its edit, in ``[0, 1]``;
1 for identical images; LOWER means better de-identification (paper 1, Table 2). Verification and re-identification
numbers describe an attacker: higher means a stronger attack (more privacy risk).

Keypoints use OpenCV's convention: ``(K, 2)`` float arrays of ``(x, y) = (column, row)`` pixel coordinates.

Denominators. Paper 1 (Zhao et al., Biomedical Optics Express 2023) defines both scores as matched keypoints over
keypoints, for FS_SR "based on the total number of keypoints detected in the original image". Both use that
denominator here: matching runs from the original's keypoints to the edit's, each original keypoint matches at
most once, so the score is in ``[0, 1]`` whatever the edit's keypoint count.

FS_SR protocols (:data:`FS_SR_PROTOCOLS`): ``"anonpaper"`` (ratio 0.75, the learned detector's val-selected
threshold, at most 100 keypoints) is what :func:`anonpaper.models.keypoints.fs_sr` does by default;
``"superretina"`` follows SuperRetina's published matching settings (Liu et al., AAAI 2022: ratio test 0.9,
detection threshold 0.01, no cap on the keypoint count). Callers: the cohort chapter's identity matcher is
:func:`sift_homography_similarity` (SIFT, ratio 0.75); :func:`bifurcation_keypoint_similarity` uses ratio 0.9.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np
import torch
from scipy import ndimage

from ._validation import (
    check_binary,
    check_features,
    check_image_pair,
    check_labels,
    check_positive_int,
    check_probability,
    check_reduction,
    check_vector,
    to_numpy,
)

__all__ = [
    "fs_sift",
    "match_fraction",
    "KeypointProtocol",
    "FS_SR_PROTOCOLS",
    "sift_features",
    "sift_homography_similarity",
    "match_descriptors",
    "keypoint_similarity",
    "vessel_bifurcations",
    "patch_descriptors",
    "bifurcation_keypoint_similarity",
    "pair_scores",
    "cross_pair_scores",
    "verification_metrics",
    "select_threshold",
    "verification_auc",
    "equal_error_rate",
    "reidentification_accuracy",
]


def _to_uint8_plane(image: torch.Tensor) -> np.ndarray:
    """(C, H, W) in [0, 1] -> uint8 (H, W): the green channel of RGB (vessels contrast best there), else channel 0."""
    plane = image[1] if image.shape[0] >= 3 else image[0]
    return np.round(plane.detach().cpu().double().numpy() * 255.0).clip(0, 255).astype(np.uint8)


def match_descriptors(descriptors_first, descriptors_second, ratio: float = 0.75) -> np.ndarray:
    """Nearest-neighbour matches (L2) that pass Lowe's ratio test.

    A descriptor of the first set is matched to its nearest neighbour in the second when that distance is below
    ``ratio`` times the distance to the second-nearest (strict inequality, so exact duplicates in the second set
    are ambiguous and rejected). With fewer than 2 descriptors in the second set nothing passes.

    Args:
        descriptors_first: ``(K1, D)``.
        descriptors_second: ``(K2, D)``.
        ratio: In ``(0, 1]``.

    Returns:
        ``(M, 2)`` int64 array of ``(index_first, index_second)``.
    """
    ratio = check_probability(ratio, "ratio")
    first = to_numpy(descriptors_first, "descriptors_first")
    second = to_numpy(descriptors_second, "descriptors_second")
    for name, array in (("descriptors_first", first), ("descriptors_second", second)):
        if array.ndim != 2:
            raise ValueError(f"{name}: expected shape (K, D), observed {array.shape}")
    if first.shape[1] != second.shape[1]:
        raise ValueError(f"descriptors: expected the same dimension D, observed {first.shape[1]} and {second.shape[1]}")
    if first.shape[0] == 0 or second.shape[0] < 2:
        return np.zeros((0, 2), dtype=np.int64)
    matcher = cv2.BFMatcher(cv2.NORM_L2)
    knn = matcher.knnMatch(np.ascontiguousarray(first, np.float32), np.ascontiguousarray(second, np.float32), k=2)
    pairs = [(m[0].queryIdx, m[0].trainIdx) for m in knn if len(m) == 2 and m[0].distance < ratio * m[1].distance]
    return np.asarray(pairs, dtype=np.int64).reshape(-1, 2)


def sift_features(image: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """OpenCV SIFT keypoints and descriptors of one image (green channel of RGB, else channel 0, as uint8).

    Args:
        image: ``(C, H, W)`` float in ``[0, 1]``.

    Returns:
        ``(keypoints (K, 2) float32 (x, y), descriptors (K, 128) float32)``; ``K = 0`` gives empty arrays.
    """
    keypoints, descriptors = cv2.SIFT_create().detectAndCompute(_to_uint8_plane(image), None)
    if descriptors is None or not keypoints:
        return np.zeros((0, 2), np.float32), np.zeros((0, 128), np.float32)
    return np.array([point.pt for point in keypoints], dtype=np.float32), descriptors.astype(np.float32)


def fs_sift(first: torch.Tensor, second: torch.Tensor, ratio: float = 0.75, reduction: str = "mean",
            first_features: Sequence[tuple[np.ndarray, np.ndarray]] | None = None):
    """SIFT feature similarity FS_SIFT (paper 1): good matches / keypoints of the first (original) image.

    OpenCV SIFT on the green channel (channel 0 for grey) quantised to uint8, brute-force kNN (k = 2) from the first
    image's descriptors to the second's, ratio test 0.75. A pair whose original (first image) has no keypoint has no
    score: the fraction is 0 / 0, and a 0 would read as perfect de-identification, so it is NaN (the mean skips it;
    callers count such pairs). An original with keypoints whose edit has none scores 0: none of its keypoints is
    found. (Earlier versions took the denominator as ``min(#keypoints first, #keypoints second)``, which exceeds 1 when
    the edit has fewer keypoints than the original matches.)

    Args:
        first: ``(N, C, H, W)`` float in ``[0, 1]`` (originals).
        second: Same shape (edited images).
        ratio: Lowe ratio.
        reduction: ``"mean"`` (float) or ``"none"`` (``(N,)`` numpy array).
        first_features: :func:`sift_features` of each first image, when the caller has them (a sweep that compares
            many edits with the same originals computes them once); None computes them.

    Returns:
        Values in ``[0, 1]``, NaN for a pair whose original has no keypoint; 1 (or very near: duplicate SIFT
        keypoints fail the ratio test) for identical images; lower = more different = better de-identification. The
        mean is over the pairs with a score (NaN when none has). Not symmetric: matches and denominator count the
        first image's keypoints.

    Example:
        >>> blank = torch.zeros(1, 1, 32, 32)
        >>> fs_sift(blank, torch.rand(1, 1, 32, 32), reduction="none").tolist()  # nothing to match: no score
        [nan]
    """
    first, second = check_image_pair(first, second, names=("first", "second"))
    reduction = check_reduction(reduction)
    if first_features is not None and len(first_features) != first.shape[0]:
        raise ValueError(f"first_features: expected one entry per first image ({first.shape[0]}), got "
                         f"{len(first_features)}")
    scores = np.zeros(first.shape[0])
    for index in range(first.shape[0]):
        keypoints, descriptors = sift_features(first[index]) if first_features is None else first_features[index]
        scores[index] = (match_fraction(keypoints, descriptors, *sift_features(second[index]), ratio=ratio)
                         if len(keypoints) else np.nan)
    if reduction == "none":
        return scores
    return float(np.nanmean(scores)) if np.isfinite(scores).any() else float("nan")


def match_fraction(keypoints_first, descriptors_first, keypoints_second, descriptors_second,
                   ratio: float = 0.75) -> float:
    """FS_SIFT's score of one pair from precomputed features (e.g. :func:`sift_features`): ratio-test matches
    first -> second / #keypoints first (each first keypoint matches at most once); 0 when either set is empty.

    The feature-level twin of :func:`keypoint_similarity` (which adds geometric verification), so that a caller
    scoring many pairs of the same images computes each image's features once.

    Args:
        keypoints_first: ``(K1, 2)``.
        descriptors_first: ``(K1, D)``.
        keypoints_second: ``(K2, 2)``.
        descriptors_second: ``(K2, D)``.
        ratio: Lowe ratio.

    Returns:
        Value in ``[0, 1]``; higher = more similar. Not symmetric.

    Example:
        >>> planted = np.eye(4, dtype=np.float32)
        >>> match_fraction(np.zeros((4, 2)), planted, np.zeros((2, 2)), planted[:2])
        0.5
    """
    if len(keypoints_first) == 0 or len(keypoints_second) == 0:
        return 0.0
    good = match_descriptors(descriptors_first, descriptors_second, ratio)
    return len(good) / len(keypoints_first)


@dataclass(frozen=True)
class KeypointProtocol:
    """Detection and matching settings of FS_SR.

    Attributes:
        name: Short name, for tables.
        ratio: Lowe ratio of the descriptor matching, in ``(0, 1]``.
        detection_threshold: Minimum detection probability; None = the detector's own default.
        max_keypoints: Most probable keypoints kept per image; None = no cap.
        source: Where the settings come from.
    """

    name: str
    ratio: float
    detection_threshold: float | None
    max_keypoints: int | None
    source: str

    def fs_sr_options(self) -> dict:
        """Keyword arguments for :func:`anonpaper.models.keypoints.fs_sr` (``top_k``, ``threshold``, ``ratio``).

        Example:
            >>> FS_SR_PROTOCOLS["superretina"].fs_sr_options()["ratio"]
            0.9
        """
        options = {"ratio": self.ratio, "top_k": self.max_keypoints if self.max_keypoints is not None
                   else sys.maxsize}
        if self.detection_threshold is not None:
            options["threshold"] = self.detection_threshold
        return options


FS_SR_PROTOCOLS: dict[str, KeypointProtocol] = {
    "anonpaper": KeypointProtocol(
        "anonpaper", ratio=0.75, detection_threshold=None, max_keypoints=100,
        source="this package's default: Lowe's SIFT ratio, the phantom-trained detector's validation-selected "
               "threshold, the 100 most probable keypoints"),
    "superretina": KeypointProtocol(
        "superretina", ratio=0.9, detection_threshold=0.01, max_keypoints=None,
        source="SuperRetina (Liu et al., AAAI 2022) matching settings: kNN ratio 0.9, keypoint threshold 0.01 "
               "after non-maximum suppression, every keypoint kept (its NMS window, defined at its own input "
               "resolution, is not carried over)"),
}


def sift_homography_similarity(first: torch.Tensor, second: torch.Tensor, ratio: float = 0.75,
                               reduction: str = "mean"):
    """SIFT matches that survive geometric verification: the FS_SR protocol (:func:`keypoint_similarity`: ratio
    test, LMEDS homography, inliers / keypoints of the first image) on SIFT keypoints.

    FS_SIFT counts every ratio-test match, so two different retinas with similar vessel textures still score; a
    same-eye pair is also consistent with ONE homography, which different eyes are not. This is the identity
    matcher of the cohort chapter (same vs different patient, pose and acquisition varying).

    Args:
        first: ``(N, C, H, W)`` float in ``[0, 1]``.
        second: Same shape.
        ratio: Lowe ratio.
        reduction: ``"mean"`` (float) or ``"none"`` (``(N,)`` numpy array).

    Returns:
        Values in ``[0, 1]``; near 1 for identical images, near 0 for unrelated ones; higher = more identity shared.
        Not symmetric (the denominator counts the first image's keypoints).

    Example:
        >>> texture = torch.rand(1, 1, 96, 96, generator=torch.Generator().manual_seed(0))
        >>> smooth = torch.nn.functional.avg_pool2d(texture, 5, stride=1, padding=2)
        >>> float(sift_homography_similarity(smooth, smooth)) > 0.9
        True
    """
    first, second = check_image_pair(first, second, names=("first", "second"))
    reduction = check_reduction(reduction)
    scores = np.zeros(first.shape[0])
    for index in range(first.shape[0]):
        scores[index] = keypoint_similarity(*sift_features(first[index]), *sift_features(second[index]), ratio=ratio)
    return float(scores.mean()) if reduction == "mean" else scores


def _check_keypoints(keypoints, descriptors, name: str) -> tuple[np.ndarray, np.ndarray]:
    points = to_numpy(keypoints, f"{name} keypoints")
    features = to_numpy(descriptors, f"{name} descriptors")
    if points.ndim != 2 or points.shape[1] != 2:
        raise ValueError(f"{name} keypoints: expected shape (K, 2) of (x, y), observed {points.shape}")
    if features.ndim != 2 or features.shape[0] != points.shape[0]:
        raise ValueError(
            f"{name} descriptors: expected shape (K={points.shape[0]}, D), observed {features.shape}"
        )
    if not (np.isfinite(points).all() and np.isfinite(features).all()):
        raise ValueError(f"{name}: expected finite keypoints and descriptors, observed NaN or infinity")
    return points.astype(np.float32), features.astype(np.float32)


def keypoint_similarity(
    keypoints_original, descriptors_original, keypoints_edited, descriptors_edited, ratio: float = 0.75
) -> float:
    """FS_SR-style keypoint similarity: homography inliers / keypoints in the original.

    Descriptors are matched original -> edited with the ratio test; a homography is fitted to the matched keypoint
    positions with ``cv2.findHomography(..., cv2.LMEDS)``; the score is the number of inlier matches divided by the
    number of keypoints in the original (paper 1: "matched keypoints / keypoints in the original"). Registration
    needs 4 matches; with fewer (or a failed fit) the score is 0.

    Args:
        keypoints_original: ``(K1, 2)`` ``(x, y)`` positions.
        descriptors_original: ``(K1, D)``.
        keypoints_edited: ``(K2, 2)``.
        descriptors_edited: ``(K2, D)``.
        ratio: Lowe ratio.

    Returns:
        Value in ``[0, 1]``; 1 for identical keypoint sets with distinct descriptors; lower = better
        de-identification. NOT symmetric: the denominator counts the first (original) set's keypoints.
    """
    points_first, features_first = _check_keypoints(keypoints_original, descriptors_original, "original")
    points_second, features_second = _check_keypoints(keypoints_edited, descriptors_edited, "edited")
    if features_first.shape[1] != features_second.shape[1]:
        raise ValueError(
            f"descriptors: expected the same dimension, observed {features_first.shape[1]} and "
            f"{features_second.shape[1]}"
        )
    if points_first.shape[0] == 0:
        return 0.0
    matches = match_descriptors(features_first, features_second, ratio)
    if len(matches) < 4:
        return 0.0
    source = points_first[matches[:, 0]].reshape(-1, 1, 2)
    target = points_second[matches[:, 1]].reshape(-1, 1, 2)
    homography, inlier_mask = cv2.findHomography(source, target, cv2.LMEDS)
    if homography is None or inlier_mask is None:
        return 0.0
    return float(inlier_mask.ravel().astype(bool).sum()) / points_first.shape[0]


def vessel_bifurcations(mask, merge_radius: int = 3) -> np.ndarray:
    """Classical keypoint detector: bifurcations and crossings of a vessel mask's skeleton.

    Skeletonise the binary mask (scikit-image), count each skeleton pixel's 8-neighbours on the skeleton, keep
    pixels with >= 3 (junctions), merge junction pixels closer than ``merge_radius`` (a crossing skeletonises into
    two nearby 3-neighbour pixels or a small cluster), and return each cluster's centroid.

    Args:
        mask: ``(H, W)`` array or tensor, binary or probability (thresholded at 0.5).
        merge_radius: Junction pixels within this Chebyshev distance are one keypoint.

    Returns:
        ``(K, 2)`` float32 ``(x, y)`` keypoints, sorted by row then column (deterministic order).
    """
    from skimage.morphology import skeletonize

    array = to_numpy(mask, "mask")
    if array.ndim != 2:
        raise ValueError(f"mask: expected shape (H, W), observed {array.shape}")
    if array.dtype.kind not in "biuf" or not np.isfinite(array.astype(np.float64)).all():
        raise ValueError(f"mask: expected finite numeric or boolean values, observed dtype {array.dtype}")
    merge_radius = check_positive_int(merge_radius, "merge_radius", minimum=0)
    skeleton = skeletonize(array.astype(np.float64) > 0.5)
    neighbours = ndimage.convolve(skeleton.astype(np.int32), np.ones((3, 3), np.int32), mode="constant") - 1
    junctions = skeleton & (neighbours >= 3)
    if not junctions.any():
        return np.zeros((0, 2), dtype=np.float32)
    grown = ndimage.binary_dilation(junctions, structure=np.ones((3, 3)), iterations=merge_radius) \
        if merge_radius > 0 else junctions
    labels, count = ndimage.label(grown, structure=np.ones((3, 3)))
    centroids = ndimage.center_of_mass(junctions, labels * junctions, index=np.arange(1, count + 1))
    points = np.asarray([(column, row) for row, column in centroids], dtype=np.float32)
    order = np.lexsort((points[:, 0], points[:, 1]))
    return points[order]


def patch_descriptors(image, keypoints, radius: int = 8) -> np.ndarray:
    """Local-patch descriptors: the ``(2r+1)^2`` grey patch around each keypoint, zero-mean and unit-norm.

    Simple and not rotation-invariant (enough for the small poses of the phantom cohorts; the learned detector is
    the rotation-robust one). Borders are reflect-padded.

    Args:
        image: ``(H, W)`` float in ``[0, 1]`` (array or tensor).
        keypoints: ``(K, 2)`` ``(x, y)``.
        radius: Patch half-size.

    Returns:
        ``(K, (2 * radius + 1) ** 2)`` float32, unit norm (a flat patch gives the zero vector).
    """
    plane = to_numpy(image, "image").astype(np.float64)
    if plane.ndim != 2:
        raise ValueError(f"image: expected shape (H, W), observed {plane.shape}")
    points = to_numpy(keypoints, "keypoints")
    if points.ndim != 2 or points.shape[1] != 2:
        raise ValueError(f"keypoints: expected shape (K, 2), observed {points.shape}")
    radius = check_positive_int(radius, "radius")
    padded = np.pad(plane, radius, mode="reflect")
    descriptors = np.zeros((points.shape[0], (2 * radius + 1) ** 2), dtype=np.float32)
    for index, (x, y) in enumerate(np.round(points).astype(int)):
        row = int(np.clip(y, 0, plane.shape[0] - 1)) + radius
        column = int(np.clip(x, 0, plane.shape[1] - 1)) + radius
        patch = padded[row - radius : row + radius + 1, column - radius : column + radius + 1].ravel()
        patch = patch - patch.mean()
        descriptors[index] = patch / (np.linalg.norm(patch) + 1e-8)
    return descriptors


def bifurcation_keypoint_similarity(
    image_original, mask_original, image_edited, mask_edited, ratio: float = 0.9, radius: int = 8
) -> float:
    """Classical FS_SR baseline: :func:`vessel_bifurcations` + :func:`patch_descriptors` + :func:`keypoint_similarity`.

    Args:
        image_original: ``(H, W)`` grey (or green channel) float in ``[0, 1]``.
        mask_original: ``(H, W)`` vessel mask of the original.
        image_edited: ``(H, W)``.
        mask_edited: ``(H, W)`` vessel mask of the edit (e.g. from the same segmenter).
        ratio: Lowe ratio (patch descriptors are less distinctive than SIFT; 0.9 by default).
        radius: Patch half-size.

    Returns:
        Value in ``[0, 1]``; 1 for identical inputs with distinct patches; lower = better de-identification.
        Not symmetric (denominator: original's keypoints).
    """
    points_first = vessel_bifurcations(mask_original)
    points_second = vessel_bifurcations(mask_edited)
    return keypoint_similarity(
        points_first,
        patch_descriptors(image_original, points_first, radius),
        points_second,
        patch_descriptors(image_edited, points_second, radius),
        ratio=ratio,
    )


# ---------------------------------------------------------------------------------------------------------------
# Verification and re-identification.


def _unit_rows(features: np.ndarray) -> np.ndarray:
    return features / np.maximum(np.linalg.norm(features, axis=1, keepdims=True), 1e-12)


def cross_pair_scores(embeddings_first, embeddings_second, kind: str = "squared_distance") -> np.ndarray:
    """All-against-all pair scores ``(N1, N2)`` through one Gram matrix (no ``N1 * N2 * D`` intermediate).

    Same definitions as :func:`pair_scores`: squared distance of unit vectors ``= 2 - 2 cos`` (clipped to
    ``[0, 4]``) or cosine.
    """
    first = _unit_rows(check_features(embeddings_first, "embeddings_first"))
    second = _unit_rows(check_features(embeddings_second, "embeddings_second"))
    if first.shape[1] != second.shape[1]:
        raise ValueError(f"embeddings: expected the same dimension, observed {first.shape[1]} and {second.shape[1]}")
    cosine = np.clip(first @ second.T, -1.0, 1.0)
    if kind == "cosine":
        return cosine
    if kind == "squared_distance":
        return np.clip(2.0 - 2.0 * cosine, 0.0, 4.0)
    raise ValueError(f"kind: expected 'squared_distance' or 'cosine', observed {kind!r}")


def pair_scores(embeddings_first, embeddings_second, kind: str = "squared_distance") -> np.ndarray:
    """Row-wise pair scores between two embedding sets of L2-normalised vectors.

    Args:
        embeddings_first: ``(N, D)``.
        embeddings_second: ``(N, D)``.
        kind: ``"squared_distance"`` (GMIA: squared Euclidean distance of L2-normalised embeddings, in ``[0, 4]``,
            lower = more likely the same person) or ``"cosine"`` (in ``[-1, 1]``, higher = same).

    Returns:
        ``(N,)`` float64.
    """
    first = check_features(embeddings_first, "embeddings_first")
    second = check_features(embeddings_second, "embeddings_second")
    if first.shape != second.shape:
        raise ValueError(f"embeddings: expected identical shapes, observed {first.shape} and {second.shape}")
    first = first / np.maximum(np.linalg.norm(first, axis=1, keepdims=True), 1e-12)
    second = second / np.maximum(np.linalg.norm(second, axis=1, keepdims=True), 1e-12)
    cosine = np.sum(first * second, axis=1)
    if kind == "cosine":
        return cosine
    if kind == "squared_distance":
        return np.sum((first - second) ** 2, axis=1)
    raise ValueError(f"kind: expected 'squared_distance' or 'cosine', observed {kind!r}")


def _check_direction(higher_means_same: bool) -> bool:
    if not isinstance(higher_means_same, (bool, np.bool_)):
        raise ValueError(f"higher_means_same: expected a bool, observed {higher_means_same!r}")
    return bool(higher_means_same)


def verification_metrics(scores, same_identity, threshold: float, higher_means_same: bool) -> dict:
    """Verification rates at a fixed threshold (positive class = "same identity").

    A pair is predicted "same" when ``score >= threshold`` (``higher_means_same=True``, similarities) or
    ``score <= threshold`` (``False``, distances). Reports TRUE rates: TAR = TP / positives, FAR = FP / negatives,
    FRR = FN / positives = 1 - TAR (GMIA's published code labels FRR as "FAR"; we do not). Rates with an empty
    denominator are NaN.

    Args:
        scores: ``(P,)`` pair scores.
        same_identity: ``(P,)`` binary labels, 1 = same person.
        threshold: Decision threshold (choose it on validation pairs with :func:`select_threshold`).
        higher_means_same: Score direction.

    Returns:
        dict with ``tar, far, frr, precision, f1, accuracy, threshold, positives, negatives``. For an attacker
        higher TAR/F1/accuracy and lower FAR/FRR mean more linkability risk.
    """
    values = check_vector(scores, "scores")
    labels = check_binary(same_identity, "same_identity", length=values.shape[0])
    threshold = float(threshold)
    predicted = values >= threshold if _check_direction(higher_means_same) else values <= threshold
    positive = labels == 1
    true_positive = int(np.sum(predicted & positive))
    false_positive = int(np.sum(predicted & ~positive))
    false_negative = int(np.sum(~predicted & positive))
    positives, negatives = int(positive.sum()), int((~positive).sum())

    def ratio(numerator: int, denominator: int) -> float:
        return numerator / denominator if denominator else float("nan")

    tar = ratio(true_positive, positives)
    return {
        "tar": tar,
        "far": ratio(false_positive, negatives),
        "frr": ratio(false_negative, positives),
        "precision": ratio(true_positive, true_positive + false_positive),
        "f1": ratio(2 * true_positive, 2 * true_positive + false_positive + false_negative),
        "accuracy": float(np.mean(predicted == positive)),
        "threshold": threshold,
        "positives": positives,
        "negatives": negatives,
    }


def _operating_points(oriented: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every distinct threshold t on "higher = same" scores (descending), counts of pairs predicted "same"
    (score >= t): returns (thresholds, true positives, false positives). O(P log P)."""
    order = np.argsort(-oriented, kind="mergesort")
    sorted_scores, sorted_labels = oriented[order], labels[order]
    last_of_each = np.r_[np.nonzero(np.diff(sorted_scores))[0], sorted_scores.size - 1]
    true_positives = np.cumsum(sorted_labels)[last_of_each]
    false_positives = (last_of_each + 1) - true_positives
    return sorted_scores[last_of_each], true_positives, false_positives


def select_threshold(scores, same_identity, higher_means_same: bool, criterion: str = "f1") -> float:
    """Threshold maximising F1 (GMIA) or accuracy on validation pairs; candidates are the observed scores.

    Vectorised over all distinct scores (O(P log P)), so it scales to the N(N-1)/2 pairs of a test set. Ties are
    broken towards the strictest threshold (fewest "same" predictions), which is deterministic.

    Returns:
        The chosen threshold (a value of ``scores``), to pass to :func:`verification_metrics` with the same
        ``higher_means_same``.
    """
    values = check_vector(scores, "scores")
    labels = check_binary(same_identity, "same_identity", length=values.shape[0])
    if criterion not in ("f1", "accuracy"):
        raise ValueError(f"criterion: expected 'f1' or 'accuracy', observed {criterion!r}")
    sign = 1.0 if _check_direction(higher_means_same) else -1.0
    thresholds, true_positives, false_positives = _operating_points(sign * values, labels)
    positives, negatives = labels.sum(), labels.size - labels.sum()
    if criterion == "f1":
        objective = 2.0 * true_positives / np.maximum(true_positives + false_positives + positives, 1)
    else:
        objective = (true_positives + negatives - false_positives) / labels.size
    return float(sign * thresholds[int(np.argmax(objective))])  # argmax: first = strictest among ties


def verification_auc(scores, same_identity, higher_means_same: bool) -> float:
    """ROC AUC of the verifier (probability a random same pair scores as "more same" than a random different pair;
    ties count 1/2). 1 = perfect attacker, 0.5 = chance."""
    from .classification import auroc

    values = check_vector(scores, "scores")
    return auroc(same_identity, values if _check_direction(higher_means_same) else -values)


def equal_error_rate(scores, same_identity, higher_means_same: bool) -> float:
    """Equal error rate: the FAR = FRR point of the ROC, linearly interpolated between observed thresholds.

    Returns:
        Value in ``[0, 1]``; 0 for perfectly separated pairs, about 0.5 for a chance verifier; lower = stronger
        attacker.
    """
    values = check_vector(scores, "scores")
    labels = check_binary(same_identity, "same_identity", length=values.shape[0])
    if labels.min() == labels.max():
        raise ValueError("same_identity: expected both same (1) and different (0) pairs, observed one class")
    oriented = values if _check_direction(higher_means_same) else -values
    _, true_positives, false_positives = _operating_points(oriented, labels)
    positives, negatives = labels.sum(), labels.size - labels.sum()
    # Operating points from the strictest threshold (nothing accepted) to the loosest (everything accepted).
    far = np.r_[0.0, false_positives / negatives]
    frr = np.r_[1.0, 1.0 - true_positives / positives]
    difference = far - frr  # from -1 to +1, non-decreasing
    crossing = int(np.argmax(difference >= 0))
    if difference[crossing] == 0 or crossing == 0:
        return float(far[crossing])
    previous = crossing - 1
    weight = -difference[previous] / (difference[crossing] - difference[previous])
    return float(far[previous] + weight * (far[crossing] - far[previous]))


def reidentification_accuracy(
    query_embeddings, query_identities, gallery_embeddings, gallery_identities, rank: int = 1,
    exclude_same_index: bool = False,
) -> float:
    """Rank-k re-identification: fraction of queries whose ``rank`` most cosine-similar gallery items include an
    image of the same identity.

    Args:
        query_embeddings: ``(Q, D)``.
        query_identities: ``(Q,)`` integer identities.
        gallery_embeddings: ``(G, D)``.
        gallery_identities: ``(G,)``.
        rank: ``k`` (1 = rank-1 accuracy).
        exclude_same_index: For query == gallery (leave-one-out): ignore gallery item ``i`` for query ``i``.

    Returns:
        Value in ``[0, 1]``; higher = stronger re-identification attacker (more risk). Chance is about the share of
        same-identity items in the gallery.
    """
    query = check_features(query_embeddings, "query_embeddings")
    gallery = check_features(gallery_embeddings, "gallery_embeddings")
    if query.shape[1] != gallery.shape[1]:
        raise ValueError(f"embeddings: expected the same dimension, observed {query.shape[1]} and {gallery.shape[1]}")
    query_ids = check_labels(query_identities, "query_identities", length=query.shape[0])
    gallery_ids = check_labels(gallery_identities, "gallery_identities", length=gallery.shape[0])
    rank = check_positive_int(rank, "rank")
    query = query / np.maximum(np.linalg.norm(query, axis=1, keepdims=True), 1e-12)
    gallery = gallery / np.maximum(np.linalg.norm(gallery, axis=1, keepdims=True), 1e-12)
    similarity = query @ gallery.T
    if exclude_same_index:
        if query.shape[0] != gallery.shape[0]:
            raise ValueError(
                f"exclude_same_index: expected Q == G, observed {query.shape[0]} and {gallery.shape[0]}"
            )
        np.fill_diagonal(similarity, -np.inf)
    # stable argsort on the negated similarity: ties resolved by gallery order (deterministic)
    top = np.argsort(-similarity, axis=1, kind="stable")[:, :rank]
    hits = (gallery_ids[top] == query_ids[:, None]).any(axis=1)
    return float(hits.mean())


def rank1_accuracy(embeddings: np.ndarray, identities: np.ndarray) -> float:
    """Leave-one-out rank-1 identification accuracy of embeddings (N, D) with identity labels (N,).

    Only images whose identity occurs at least twice are queries; NaN when there is none. Higher is better.
    Computed with :func:`reidentification_accuracy` (leave-one-out over the gallery).
    """
    embeddings = np.asarray(embeddings, dtype=np.float64)
    identities = np.asarray(identities)
    if embeddings.ndim != 2 or identities.shape != (embeddings.shape[0],):
        raise ValueError(f"expected embeddings (N, D) and identities (N,), got {embeddings.shape} and "
                         f"{identities.shape}")
    values, occurrences = np.unique(identities, return_counts=True)
    repeated = np.isin(identities, values[occurrences >= 2])
    if not repeated.any():
        return float("nan")
    codes = np.unique(identities, return_inverse=True)[1]
    # Leave-one-out over all images: an image whose identity occurs once can never hit, so the accuracy over the
    # repeated images is the overall hit count divided by their number.
    overall = reidentification_accuracy(embeddings, codes, embeddings, codes, exclude_same_index=True)
    return float(overall * len(identities) / repeated.sum())
