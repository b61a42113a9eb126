"""The cohort chapter's measurements: is identity matchable, are the attributes learnable, and how much do vessels carry?

These are the measurements that make a phantom cohort worth experimenting on: the anonymization papers need
identity to be recoverable from raw images (otherwise there is nothing to protect) and the medical labels to be
learnable (otherwise there is no utility to keep).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import cv2
import numpy as np
import pandas as pd
import torch

from anonpaper.data.cohort import Cohort
from anonpaper.metrics.classification import accuracy, auroc, balanced_accuracy, macro_f1
from anonpaper.metrics.identity import keypoint_similarity, match_fraction, sift_features, verification_auc
from anonpaper.metrics import images_from_uint8
from anonpaper.metrics.statistics import patient_bootstrap_se
from anonpaper.runtime import get_device
from anonpaper.train.loop import TrainSettings


def identity_pairs(patient_ids: np.ndarray, n_pairs: int, seed: int) -> pd.DataFrame:
    """Draw image pairs, half from the same patient (two different images), half from different patients.

    Args:
        patient_ids: (N,) patient of each image.
        n_pairs: Total pairs wanted; the same-patient half is capped by how many such pairs exist.
        seed: Seed of the draw.

    Returns:
        DataFrame with columns first, second (row positions) and same (bool).

    Raises:
        ValueError: If no patient has two images or fewer than two patients exist.
    """
    patient_ids = np.asarray(patient_ids)
    rng = np.random.default_rng(seed)
    groups = [np.flatnonzero(patient_ids == patient) for patient in np.unique(patient_ids)]
    multi = [group for group in groups if len(group) >= 2]
    if not multi or len(groups) < 2:
        raise ValueError(f"need >= 2 patients and one with >= 2 images; got {len(groups)} patients, "
                         f"{len(multi)} with several images")
    rows = []
    for _ in range(n_pairs // 2):
        group = multi[rng.integers(len(multi))]
        first, second = rng.choice(group, size=2, replace=False)
        rows.append((first, second, True))
    for _ in range(n_pairs - n_pairs // 2):
        one, other = rng.choice(len(groups), size=2, replace=False)
        rows.append((rng.choice(groups[one]), rng.choice(groups[other]), False))
    return pd.DataFrame(rows, columns=["first", "second", "same"]).drop_duplicates(ignore_index=True)


def identity_matching(cohort: Cohort, n_pairs: int, seed: int = 0) -> dict:
    """How well keypoint matching on the raw images tells same-patient pairs from different-patient ones.

    Two matchers score every pair: FS_SIFT (paper 1's identity similarity: ratio-test SIFT matches / keypoints)
    and the same SIFT matches after geometric verification (:func:`sift_homography_similarity`: LMEDS homography
    inliers / keypoints), which is the identity matcher: a same-eye pair is one homography apart, a
    different-eye pair is not.

    Returns:
        dict with ``auroc`` (the verified matcher; 1 = identity perfectly matchable, 0.5 = chance),
        ``auroc_fs_sift``, their standard errors ``auroc_se`` / ``auroc_fs_sift_se`` (:func:`_pair_auroc_se`), ``n_same``, ``n_different``, mean scores of each kind for both matchers, and ``pairs``
        (the DataFrame with ``score`` (verified) and ``fs_sift`` columns).
    """
    pairs = identity_pairs(cohort.table["patient_id"].to_numpy(), n_pairs, seed)
    needed = np.unique(pairs[["first", "second"]].to_numpy())
    images = images_from_uint8(np.stack([cohort.image(int(index)) for index in needed]))
    # Each image appears in several pairs: its SIFT features are computed once and scored both ways.
    features = {index: sift_features(image) for index, image in zip(needed.tolist(), images)}
    first_features = [features[index] for index in pairs["first"]]
    second_features = [features[index] for index in pairs["second"]]
    pairs["score"] = [keypoint_similarity(*one, *other) for one, other in zip(first_features, second_features)]
    pairs["fs_sift"] = [match_fraction(*one, *other) for one, other in zip(first_features, second_features)]
    same = pairs["same"].to_numpy()
    output = {"n_same": int(same.sum()), "n_different": int((~same).sum()), "pairs": pairs}
    first_patients = cohort.table["patient_id"].to_numpy()[pairs["first"].to_numpy()]
    for key, column in (("", "score"), ("_fs_sift", "fs_sift")):
        output[f"auroc{key}"] = verification_auc(pairs[column].to_numpy(), same, higher_means_same=True)
        output[f"auroc{key}_se"] = _pair_auroc_se(pairs[column].to_numpy(), same, first_patients, seed)
        output[f"mean_score_same{key}"] = float(pairs.loc[same, column].mean())
        output[f"mean_score_different{key}"] = float(pairs.loc[~same, column].mean())
    return output


def _pair_auroc_se(scores: np.ndarray, same: np.ndarray, first_patients: np.ndarray, seed: int,
                   resamples: int = 200) -> float:
    """Standard error of a same-vs-different pair AUROC, resampling pairs clustered by their first image's patient
    (pairs that share that patient move together)."""
    positions = np.arange(len(scores))

    def area(truth: np.ndarray, rows: np.ndarray) -> float:
        if truth.all() or not truth.any():
            return float("nan")
        return verification_auc(scores[rows], truth, higher_means_same=True)

    return patient_bootstrap_se(np.asarray(same), positions, np.asarray(first_patients), area, resamples, seed)


def inpaint_vessels(images: np.ndarray, vessel_masks: np.ndarray, dilation: int = 1) -> np.ndarray:
    """Remove the vessels: fill the (dilated) vessel mask from the surrounding retina (OpenCV Telea inpainting).

    Args:
        images: uint8 (N, H, W, 3).
        vessel_masks: bool (N, H, W).
        dilation: Pixels the mask grows by first, so vessel borders go too.

    Returns:
        uint8 (N, H, W, 3), a new array; the inputs are not modified.
    """
    if images.dtype != np.uint8 or images.ndim != 4 or vessel_masks.shape != images.shape[:3]:
        raise ValueError(f"expected uint8 images (N, H, W, 3) and masks (N, H, W); got {images.dtype} "
                         f"{images.shape} and {vessel_masks.shape}")
    kernel = np.ones((2 * dilation + 1, 2 * dilation + 1), np.uint8)
    output = np.empty_like(images)
    for index, (image, mask) in enumerate(zip(images, vessel_masks)):
        grown = cv2.dilate(mask.astype(np.uint8), kernel) if dilation else mask.astype(np.uint8)
        output[index] = cv2.inpaint(image, grown, 3, cv2.INPAINT_TELEA)
    return output


@dataclass
class LearnabilityResult:
    """Test-set performance of a classifier trained from scratch on one label, each score with its test-patient
    bootstrap standard error (``*_se``)."""

    label: str
    accuracy: float
    balanced_accuracy: float
    macro_f1: float
    auroc: float
    chance: float
    n_train: int
    n_test: int
    classes: list
    accuracy_se: float = float("nan")
    balanced_accuracy_se: float = float("nan")
    macro_f1_se: float = float("nan")
    auroc_se: float = float("nan")

    def as_dict(self) -> dict:
        return {key: value for key, value in self.__dict__.items() if key != "classes"}


def learnability(cohort: Cohort, label: str, *, backbone: str, epochs: int, batch_size: int = 32,
                 lr: float = 1e-3, seed: int = 0, split_column: str = "split", loss: str = "ce",
                 lr_schedule: str = "constant", augment: Callable[..., torch.Tensor] | None = None,
                 transform: Callable[[Cohort, np.ndarray], np.ndarray] | None = None,
                 images: np.ndarray | None = None, progress: bool = False,
                 bootstrap: int = 200) -> LearnabilityResult:
    """Train a classifier from scratch on ``label`` (train split, model selection on val) and test it.

    Args:
        cohort: Any cohort; rows with a missing or negative (uncertain) label are dropped.
        label: Table column to predict (strings or integers; classes are the sorted values).
        backbone: Name for :func:`anonpaper.models.classifiers.build_classifier`.
        epochs, batch_size, lr, seed, loss, lr_schedule, augment: Training settings (see
            :func:`anonpaper.train.classifier.train_classifier`).
        split_column: Column with "train"/"val"/"test" (e.g. ``split_within_subject`` for identity of known
            subjects).
        transform: Optional ``(cohort, images) -> images`` applied to every image first (e.g. vessel removal).
        images: Pre-loaded images of the whole cohort (N, H, W[, C]) uint8, to avoid rendering twice.
        bootstrap: Test-patient bootstrap resamples of the standard errors (seeded with ``seed``).

    Returns:
        LearnabilityResult; ``chance`` is the majority-class rate of the test set (accuracy of a constant guess).
    """
    from anonpaper.models.classifiers import build_classifier
    from anonpaper.train.classifier import predict_proba, train_classifier

    table = cohort.table
    values = table[label]
    keep = values.notna().to_numpy()
    if pd.api.types.is_numeric_dtype(values):
        keep = keep & (values.fillna(-1) >= 0).to_numpy()
    classes = sorted(values[keep].unique().tolist())
    if len(classes) < 2:
        raise ValueError(f"label {label!r} has fewer than two classes in cohort {cohort.name!r}: {classes}")
    encoded = values.map({value: position for position, value in enumerate(classes)}).to_numpy()
    if images is None:
        images = cohort.load_images()
    if transform is not None:
        images = transform(cohort, images)
    parts, test_rows = {}, None
    for split in ("train", "val", "test"):
        rows = np.flatnonzero(keep & (table[split_column].to_numpy() == split))
        parts[split] = (images[rows], encoded[rows].astype(np.int64))
        test_rows = rows if split == "test" else test_rows
    if min(len(parts[split][1]) for split in parts) == 0:
        raise ValueError(f"label {label!r}: a split of {split_column!r} is empty "
                         f"({ {split: len(part[1]) for split, part in parts.items()} })")
    channels = 1 if images.ndim == 3 else images.shape[-1]
    model = build_classifier(backbone, in_channels=channels, num_classes=len(classes))
    result = train_classifier(model, parts["train"], parts["val"],
                              TrainSettings(epochs=epochs, batch_size=batch_size, lr=lr, lr_schedule=lr_schedule,
                                            seed=seed, device=get_device(), progress=progress),
                              loss=loss, augment=augment)
    probabilities = predict_proba(result.model, parts["test"][0])
    truth = parts["test"][1]
    predicted = probabilities.argmax(axis=1)
    scores = probabilities[:, 1] if len(classes) == 2 else probabilities
    present = np.unique(truth)
    area = auroc(truth, scores) if len(present) == len(classes) else float("nan")
    patients = table["patient_id"].to_numpy()[test_rows]
    positions = np.arange(len(truth))  # bootstrap rows index the predictions, so AUROC can use the scores too

    def error(metric: Callable[[np.ndarray, np.ndarray], float]) -> float:
        return patient_bootstrap_se(truth, positions, patients, metric, bootstrap, seed)

    def area_of(rows_truth: np.ndarray, rows: np.ndarray) -> float:
        return auroc(rows_truth, scores[rows]) if len(np.unique(rows_truth)) == len(classes) else float("nan")

    return LearnabilityResult(label=label, accuracy=accuracy(truth, predicted),
                              balanced_accuracy=balanced_accuracy(truth, predicted),
                              macro_f1=macro_f1(truth, predicted),
                              auroc=area, chance=float(np.bincount(truth).max() / len(truth)),
                              n_train=len(parts["train"][1]), n_test=len(truth), classes=classes,
                              accuracy_se=error(lambda t, rows: accuracy(t, predicted[rows])),
                              balanced_accuracy_se=error(lambda t, rows: balanced_accuracy(t, predicted[rows])),
                              macro_f1_se=error(lambda t, rows: macro_f1(t, predicted[rows])),
                              auroc_se=error(area_of))


def verification_on_heldout_patients(cohort: Cohort, *, epochs: int, backbone: str = "small_cnn",
                                     embedding_dim: int = 64, batch_size: int = 32,
                                     seed: int = 0, n_pairs: int = 1000, progress: bool = False) -> dict:
    """Train a metric-learning embedding on the training patients; verify pairs of held-out (test) patients.

    Returns:
        dict with ``auroc`` (same vs different held-out patients, cosine similarity; 1 = perfect
        re-identification), its standard error ``auroc_se`` (:func:`_pair_auroc_se`), ``n_train_patients``, ``n_test_patients``, ``n_pairs``.
    """
    from anonpaper.models.embedding import EmbeddingNet
    from anonpaper.train.embedding import embed, train_embedding

    train = cohort.split("train")
    test = cohort.split("test")
    train_images = train.load_images()
    identities = pd.factorize(train.table["patient_id"])[0]
    channels = 1 if train_images.ndim == 3 else train_images.shape[-1]
    model = EmbeddingNet(in_channels=channels, embedding_dim=embedding_dim, backbone=backbone)
    result = train_embedding(model, train_images, identities,
                             TrainSettings(epochs=epochs, batch_size=batch_size, seed=seed, device=get_device(),
                                           progress=progress))
    embeddings = embed(result.model, test.load_images())
    pairs = identity_pairs(test.table["patient_id"].to_numpy(), n_pairs, seed)
    similarity = np.sum(embeddings[pairs["first"]] * embeddings[pairs["second"]], axis=1)
    same = pairs["same"].to_numpy()
    first_patients = test.table["patient_id"].to_numpy()[pairs["first"].to_numpy()]
    return {"auroc": verification_auc(similarity, same, higher_means_same=True),
            "auroc_se": _pair_auroc_se(similarity, same, first_patients, seed),
            "n_train_patients": int(train.table["patient_id"].nunique()),
            "n_test_patients": int(test.table["patient_id"].nunique()), "n_pairs": len(pairs)}
