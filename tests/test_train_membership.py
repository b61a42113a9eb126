"""Tests of the k-SALSA membership-inference attacker (anonpaper.train.membership)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from anonpaper.metrics.privacy import membership_top_k_precision
from anonpaper.train.membership import membership_attack_scores, membership_pairs, train_membership_classifier
from anonpaper.train.loop import TrainSettings


def blob_clusters(clusters: int, k: int, size: int, seed: int):
    """Real images with one bright square each; synthetic image = pixel mean of its k members (k-same), so the
    members' squares stay visible in it at 1/k intensity."""
    rng = np.random.default_rng(seed)
    count = clusters * k
    real = np.zeros((count, size, size, 3), dtype=np.float32) + rng.uniform(0, 0.1, (count, size, size, 3))
    for index in range(count):
        top, left = rng.integers(0, size - 3, 2)
        real[index, top:top + 3, left:left + 3] = 1.0
    membership = np.zeros((clusters, count), dtype=bool)
    for cluster in range(clusters):
        membership[cluster, cluster * k:(cluster + 1) * k] = True
    synthetic = np.stack([real[row].mean(axis=0) for row in membership])
    as_uint8 = lambda array: np.round(array * 255).astype(np.uint8)  # noqa: E731
    return as_uint8(synthetic), as_uint8(real), membership


@pytest.mark.unit
def test_membership_pairs_labels_and_channel_order():
    synthetic, real, membership = blob_clusters(3, 2, 8, seed=0)
    pairs, labels = membership_pairs(synthetic, real, membership, negatives_per_positive=1, seed=0)
    assert pairs.shape == (12, 6, 8, 8) and labels.tolist().count(1) == 6 and labels.tolist().count(0) == 6
    # The first pair of row 0 is its first member: synthetic 0 then real 0, both scaled to [0, 1].
    assert torch.allclose(pairs[0, :3], torch.from_numpy(synthetic[0]).permute(2, 0, 1).float() / 255)
    assert torch.allclose(pairs[0, 3:], torch.from_numpy(real[0]).permute(2, 0, 1).float() / 255)
    with pytest.raises(ValueError, match="membership"):
        membership_pairs(synthetic, real, membership[:, :-1])


@pytest.mark.unit
def test_attack_beats_chance_when_membership_is_visible():
    torch.manual_seed(0)
    k, size = 4, 16
    train = blob_clusters(24, k, size, seed=1)
    val = blob_clusters(4, k, size, seed=2)
    test = blob_clusters(8, k, size, seed=3)
    result = train_membership_classifier(train, val,
                                         TrainSettings(epochs=6, batch_size=32, lr=3e-3, seed=0, device="cpu",
                                                       progress=False),
                                         backbone="small_cnn", negatives_per_positive=1)
    scores = membership_attack_scores(result.model, test[0], test[1])
    assert scores.shape == (8, 32) and np.all((scores >= 0) & (scores <= 1))
    report = membership_top_k_precision(scores, test[2], k=k)
    assert report["chance"] == pytest.approx(k / 32)
    assert report["precision_at_k"] > 3 * report["chance"], report
    # Deterministic for a fixed seed: the scores of the same trained model are reproducible.
    assert np.array_equal(scores, membership_attack_scores(result.model, test[0], test[1]))


@pytest.mark.unit
def test_attack_scores_validate_shapes():
    synthetic, real, _ = blob_clusters(2, 2, 8, seed=0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(6 * 8 * 8, 2))
    with pytest.raises(ValueError, match="differs"):
        membership_attack_scores(model, synthetic, real[:, :4])
