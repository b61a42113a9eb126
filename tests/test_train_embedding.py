"""Tests of the identity-embedding trainer (ArcFace) on a tiny synthetic re-identification task."""

import copy

import numpy as np
import pytest
import torch

from anonpaper.models.embedding import EmbeddingNet
from anonpaper.models.normalization import InputNormalization
from anonpaper.metrics.identity import rank1_accuracy
from anonpaper.train.embedding import embed, train_embedding
from anonpaper.train.loop import TrainSettings

pytestmark = pytest.mark.unit


def _identities(per_identity, identities, seed):
    """Identity = a fixed coarse 4x4 pattern (upsampled to 16x16) at half contrast under strong uniform noise."""
    coarse = np.random.default_rng(100).random((identities, 4, 4))
    patterns = coarse.repeat(4, axis=1).repeat(4, axis=2)
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(identities), per_identity)
    images = 0.5 + 0.5 * (patterns[labels] - 0.5) + (rng.random((labels.size, 16, 16)) - 0.5)
    return (np.clip(images, 0, 1) * 255).astype(np.uint8), labels


def test_rank1_accuracy_closed_form():
    vectors = np.array([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9], [0.7, 0.7]])
    assert rank1_accuracy(vectors, np.array([0, 0, 1, 1, 2])) == 1.0
    assert rank1_accuracy(vectors, np.array([0, 1, 0, 1, 2])) == 0.0


def test_embedding_learns_identities():
    train, val = _identities(8, 8, 0), _identities(4, 8, 1)
    torch.manual_seed(0)
    model = EmbeddingNet(1, 16, backbone="small_cnn")
    untrained = InputNormalization(copy.deepcopy(model), [0.5], [0.25])
    before = rank1_accuracy(embed(untrained, val[0]), val[1])
    # GMIA's ArcFace defaults (s = 64, m = 0.5).
    result = train_embedding(model, *train,
                             TrainSettings(epochs=8, batch_size=16, lr=3e-3, seed=0, device="cpu", progress=False),
                             val=val)
    vectors = embed(result.model, val[0])
    assert vectors.shape == (32, 16) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    after = rank1_accuracy(vectors, val[1])
    assert after == pytest.approx(result.best_score)
    # Chance is 3 / 31 (8 identities, 4 images each); random features already exploit the coarse pattern a bit.
    assert after >= 0.7 and after >= before + 0.25
    assert result.extras["head"].weight.shape == (8, 16)
