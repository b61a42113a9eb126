"""Matched-PSNR blur / pixelation baselines (vs scipy and brute force) and GMIA linkability metrics (vs brute-force
pair counts)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import ndimage

from anonpaper.methods.baselines import blur_to_psnr, gaussian_blur, pixelate, pixelate_to_psnr
from anonpaper.metrics.identity import select_threshold
from anonpaper.metrics.privacy import inner_risk, linkability_as_published, outer_risk
from anonpaper.metrics.quality import psnr

pytestmark = pytest.mark.unit


def _images(count: int = 3, channels: int = 1, size: int = 16, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    smooth = torch.nn.functional.avg_pool2d(torch.rand(count, channels, size + 3, size + 3, generator=generator), 4,
                                            stride=1)
    return (smooth + 0.2 * torch.rand(count, channels, size, size, generator=generator)).clamp(0, 1).double()


def test_gaussian_blur_matches_scipy_per_image_sigma():
    images = _images(count=3, channels=2, size=13)
    sigmas = [0.0, 0.7, 2.3]
    blurred = gaussian_blur(images, torch.tensor(sigmas))
    for index, sigma in enumerate(sigmas):
        for channel in range(2):
            plane = images[index, channel].numpy()
            expected = plane if sigma == 0 else ndimage.gaussian_filter(plane, sigma, mode="nearest", truncate=4.0)
            np.testing.assert_allclose(blurred[index, channel].numpy(), expected, atol=1e-12)
    # The same sigma alone or inside a batch gives the same image (kernels do not depend on the other sigmas).
    torch.testing.assert_close(gaussian_blur(images[1:2], 0.7), blurred[1:2])
    with pytest.raises(ValueError, match="sigma"):
        gaussian_blur(images, -1.0)
    with pytest.raises(ValueError, match="one per image"):
        gaussian_blur(images, [1.0, 2.0])


def test_pixelate_matches_brute_force_block_means():
    images = _images(count=2, channels=1, size=10)
    for block in (1, 3, 4, 10):
        result = pixelate(images, block).numpy()
        expected = np.empty_like(images.numpy())
        for top in range(0, 10, block):
            for left in range(0, 10, block):
                window = images.numpy()[:, :, top:top + block, left:left + block]
                expected[:, :, top:top + block, left:left + block] = window.mean(axis=(2, 3), keepdims=True)
        np.testing.assert_allclose(result, expected, atol=1e-12)
    mixed = pixelate(images, torch.tensor([3, 4]))
    torch.testing.assert_close(mixed[0], pixelate(images[:1], 3)[0])
    torch.testing.assert_close(mixed[1], pixelate(images[1:], 4)[0])
    with pytest.raises(ValueError, match="positive integers"):
        pixelate(images, 1.5)


@pytest.mark.parametrize("target", [22.0, 30.0])
def test_blur_bisection_hits_target_psnr(target):
    images = _images(count=4)
    matched = blur_to_psnr(images, target, tolerance=0.01)
    assert matched.per_image and matched.parameter.shape == (4,)
    assert (matched.psnr - target).abs().max() <= 0.01
    # The reported PSNR is the one of the returned images, which are the blur at the reported sigmas.
    torch.testing.assert_close(matched.images, gaussian_blur(images, matched.parameter))
    torch.testing.assert_close(psnr(matched.images, images, reduction="none").double(), matched.psnr)
    # One sigma for the whole set: the MEAN PSNR hits the target.
    shared = blur_to_psnr(images, target, per_image=False, tolerance=0.01)
    assert torch.unique(shared.parameter).numel() == 1 and abs(float(shared.psnr.mean()) - target) <= 0.01


def test_blur_bisection_refuses_unreachable_targets():
    images = _images(count=2)
    images[1] = 0.5  # a constant image: blur never changes it, its PSNR stays infinite
    with pytest.raises(ValueError, match=r"images \[1\]"):
        blur_to_psnr(images, 25.0)
    with pytest.raises(ValueError, match="target_psnr"):
        blur_to_psnr(images[:1], float("nan"))


def test_pixelation_match_is_the_brute_force_closest_block():
    images = _images(count=3, size=12)
    target = 24.0
    matched = pixelate_to_psnr(images, target, max_block_size=6)
    for index in range(3):
        values = [float(psnr(pixelate(images[index:index + 1], b), images[index:index + 1])) for b in range(1, 7)]
        best = int(np.argmin(np.abs(np.array(values) - target))) + 1
        assert matched.parameter[index] == best
        assert matched.psnr[index] == pytest.approx(values[best - 1])
    shared = pixelate_to_psnr(images, target, per_image=False, max_block_size=6)
    assert torch.unique(shared.parameter).numel() == 1


def _embeddings(seed: int = 0, patients: int = 6, per_patient: int = 3, noise: float = 0.6):
    rng = np.random.default_rng(seed)
    identities = np.repeat(np.arange(patients), per_patient)
    centres = rng.normal(size=(patients, 8))
    return centres[identities] + noise * rng.normal(size=(identities.size, 8)), identities, rng


def _brute_force_counts(pairs, threshold):
    """(TP, FP, FN, TN) over explicit (first, second, same) pairs; "same" predicted when d^2 <= threshold."""
    counts = np.zeros(4, int)
    for first, second, same in pairs:
        predicted = float(np.sum((first / np.linalg.norm(first) - second / np.linalg.norm(second)) ** 2)) <= threshold
        counts[[0, 1, 2, 3][(0 if predicted else 2) + (0 if same else 1)]] += 1
    return counts


def _check_report(report, counts):
    tp, fp, fn, tn = counts
    assert report["tar"] == pytest.approx(tp / (tp + fn))
    assert report["frr"] == pytest.approx(fn / (tp + fn))
    assert report["far"] == pytest.approx(fp / (fp + tn)) if fp + tn else np.isnan(report["far"])
    assert report["f1"] == pytest.approx(2 * tp / (2 * tp + fp + fn))
    assert report["accuracy"] == pytest.approx((tp + tn) / counts.sum())


def test_inner_and_outer_linkability_against_brute_force_counts():
    real, identities, rng = _embeddings()
    anonymised = real + 0.8 * rng.normal(size=real.shape)
    count = identities.size
    inner_pairs = [(anonymised[i], anonymised[j], identities[i] == identities[j])
                   for i in range(count) for j in range(i + 1, count)]
    validation_scores = np.array([np.sum((a / np.linalg.norm(a) - b / np.linalg.norm(b)) ** 2)
                                  for a, b, _ in inner_pairs])
    threshold = select_threshold(validation_scores, [same for *_, same in inner_pairs], higher_means_same=False)
    inner_counts = _brute_force_counts(inner_pairs, threshold)
    assert inner_counts[0] > 0 and inner_counts[1] + inner_counts[3] > 0  # both classes present: a real check
    _check_report(inner_risk(anonymised, identities, threshold), inner_counts)

    # Outer risk, GMIA protocol (positives only): accuracy = TAR, F1 = 2 TAR / (1 + TAR), no true FAR.
    outer_counts = _brute_force_counts([(real[i], anonymised[i], True) for i in range(count)], threshold)
    outer = outer_risk(real, anonymised, threshold)
    _check_report(outer, outer_counts)
    published = linkability_as_published(outer)
    assert published["far_as_published"] == pytest.approx(1 - published["tar"]) and np.isnan(published["far"])
    assert published["f1"] == pytest.approx(2 * outer["tar"] / (1 + outer["tar"]))
    # With the negatives (real_i, anonymised_j) of different patients added.
    with_negatives = [(real[i], anonymised[j], True) for i in range(count) for j in [i]] + [
        (real[i], anonymised[j], False) for i in range(count) for j in range(count) if identities[i] != identities[j]]
    _check_report(outer_risk(real, anonymised, threshold, patient_ids=identities),
                  _brute_force_counts(with_negatives, threshold))


def test_published_far_column_is_one_minus_tar():
    inner = inner_risk(*_embeddings()[:2], threshold=1.0)
    published = linkability_as_published(inner)
    assert published["far_as_published"] == pytest.approx(1 - inner["tar"])
    assert published["far"] == inner["far"] and published["far"] != published["far_as_published"]
    with pytest.raises(ValueError, match="lacks"):
        linkability_as_published({"tar": 0.5})
