"""Membership inference against k-anonymous synthetic images (the k-SALSA protocol: Jeon et al., ECCV 2022).

The attacker is a pair classifier on the channel concatenation ``[synthetic, candidate real]`` (6 channels for RGB)
that predicts "the candidate was a member of the cluster this synthetic image was made from". It is trained on
clusters whose membership the attacker knows, then scores every (synthetic, candidate) pair of held-out clusters;
:func:`anonpaper.metrics.privacy.membership_top_k_precision` turns the scores into top-k precision (chance about
k / number of candidates).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from anonpaper.models.classifiers import build_classifier
from anonpaper.train.classifier import train_classifier
from anonpaper.runtime import get_device
from anonpaper.train.loop import TrainResult, TrainSettings, as_image_tensor, batched_forward, model_device


def _membership_matrix(membership: Any, shape: tuple[int, int]) -> np.ndarray:
    array = np.asarray(membership.cpu() if isinstance(membership, torch.Tensor) else membership)
    if array.shape != shape:
        raise ValueError(f"membership: expected shape (S, R) = {shape}, got {array.shape}")
    if not np.all((array == 0) | (array == 1)):
        raise ValueError("membership: expected binary values (bool or {0, 1})")
    return array.astype(bool)


def membership_pairs(synthetic: Any, real: Any, membership: Any, *, negatives_per_positive: int = 1,
                     seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Training pairs for the attacker: every (synthetic, member) pair with label 1 and, per positive,
    ``negatives_per_positive`` (synthetic, non-member) pairs with label 0 drawn without replacement per row.

    Args:
        synthetic: uint8 (S, H, W[, C]) or float tensor (S, C, H, W) in [0, 1].
        real: Candidate real images in the same format, (R, ...), same (C, H, W).
        membership: (S, R) binary; 1 where real ``r`` is in synthetic ``s``'s cluster.
        negatives_per_positive: Non-members per member (>= 1; capped by the non-members available).
        seed: Seed of the negative draw.

    Returns:
        ``(pairs float32 (P, 2C, H, W) in [0, 1], labels int64 (P,))``, synthetic channels first.
    """
    synthetic_tensor = as_image_tensor(synthetic, "synthetic")
    real_tensor = as_image_tensor(real, "real")
    if synthetic_tensor.shape[1:] != real_tensor.shape[1:]:
        raise ValueError(f"synthetic (C, H, W) {tuple(synthetic_tensor.shape[1:])} differs from real "
                         f"{tuple(real_tensor.shape[1:])}")
    members = _membership_matrix(membership, (synthetic_tensor.shape[0], real_tensor.shape[0]))
    if not isinstance(negatives_per_positive, int) or negatives_per_positive < 1:
        raise ValueError(f"negatives_per_positive must be a positive integer, got {negatives_per_positive!r}")
    rng = np.random.default_rng(seed)
    rows, columns, labels = [], [], []
    for row in range(members.shape[0]):
        positives = np.flatnonzero(members[row])
        negatives = np.flatnonzero(~members[row])
        chosen = rng.choice(negatives, size=min(len(negatives), negatives_per_positive * len(positives)),
                            replace=False) if len(negatives) else np.zeros(0, dtype=int)
        for column, label in [(c, 1) for c in positives] + [(c, 0) for c in chosen]:
            rows.append(row)
            columns.append(int(column))
            labels.append(label)
    if not rows:
        raise ValueError("membership: no (synthetic, member) pair; every row needs at least one member")
    pairs = torch.cat([synthetic_tensor[rows], real_tensor[columns]], dim=1)
    return pairs, torch.tensor(labels, dtype=torch.int64)


def train_membership_classifier(train: tuple[Any, Any, Any], val: tuple[Any, Any, Any], settings: TrainSettings, *,
                                backbone: str = "small_cnn", negatives_per_positive: int = 1,
                                augment: Callable[..., torch.Tensor] | None = None) -> TrainResult:
    """Train the k-SALSA pair classifier.

    Args:
        train: ``(synthetic (S, ...), real (R, ...), membership (S, R))`` of clusters the attacker knows.
        val: The same for validation clusters (model selection by validation macro-F1 of the pair labels).
        backbone: :func:`anonpaper.models.classifiers.build_classifier` name; the network gets ``2 * C`` input
            channels and 2 outputs (class 1 = member).
        settings: As in :func:`anonpaper.train.classifier.train_classifier` (defaults: batch 32, lr 1e-3).
        augment: As there; it acts on the 2C-channel pairs.
        negatives_per_positive: Non-member pairs per member pair (balanced classes by default).

    Returns:
        :class:`TrainResult`; its ``model`` takes (N, 2C, H, W) pairs in [0, 1] and returns logits (N, 2).
    """
    settings = settings.with_defaults(batch_size=32, lr=1e-3)
    seed = settings.seed
    train_pairs, train_labels = membership_pairs(*train, negatives_per_positive=negatives_per_positive, seed=seed)
    val_pairs, val_labels = membership_pairs(*val, negatives_per_positive=negatives_per_positive, seed=seed + 1)
    model = build_classifier(backbone, in_channels=train_pairs.shape[1], num_classes=2)
    return train_classifier(model, (train_pairs, train_labels), (val_pairs, val_labels), settings, augment=augment)


def membership_attack_scores(model: nn.Module, synthetic: Any, candidates: Any, batch_size: int = 64,
                             device: str | torch.device | None = None) -> np.ndarray:
    """Attacker scores of every (synthetic, candidate) pair.

    Args:
        model: A trained pair classifier (e.g. ``train_membership_classifier(...).model``) taking (N, 2C, H, W)
            pairs in [0, 1] with logit 1 = member.
        synthetic: (S, ...) uint8 (S, H, W[, C]) or float tensor (S, C, H, W) in [0, 1].
        candidates: (R, ...) real candidates, same format and (C, H, W).
        batch_size: Pairs per forward pass.
        device: Device; None keeps the model's.

    Returns:
        float64 (S, R): probability that candidate ``r`` was in synthetic ``s``'s cluster (higher = more likely
        member), ready for :func:`anonpaper.metrics.privacy.membership_top_k_precision`.
    """
    synthetic_tensor = as_image_tensor(synthetic, "synthetic")
    candidate_tensor = as_image_tensor(candidates, "candidates")
    if synthetic_tensor.shape[1:] != candidate_tensor.shape[1:]:
        raise ValueError(f"synthetic (C, H, W) {tuple(synthetic_tensor.shape[1:])} differs from candidates "
                         f"{tuple(candidate_tensor.shape[1:])}")
    target = model_device(model) if device is None else (
        get_device(device) if not isinstance(device, torch.device) else device)
    model.to(target)
    count = candidate_tensor.shape[0]
    scores = np.zeros((synthetic_tensor.shape[0], count), dtype=np.float64)
    for row in range(synthetic_tensor.shape[0]):
        # One synthetic row at a time keeps memory at R pairs, not S * R.
        pairs = torch.cat([synthetic_tensor[row:row + 1].expand(count, -1, -1, -1), candidate_tensor], dim=1)
        logits = batched_forward(model, pairs, batch_size, target)
        scores[row] = F.softmax(logits, dim=1)[:, 1].double().numpy()
    return scores
