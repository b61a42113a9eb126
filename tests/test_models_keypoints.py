"""Tests of the SuperRetina-style keypoint detector/descriptor, its training losses and FS_SR."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from anonpaper.models.keypoints import KeypointNet, detect, detection_precision_recall, fs_sr
from anonpaper.train.keypoints import (
    acquisition_jitter,
    cross_pair_views,
    descriptor_loss,
    focal_heatmap_loss,
    gaussian_heatmaps,
    train_keypoint_detector,
    warp_pair,
)
from anonpaper.train.loop import TrainSettings


class HandMadeDetector(nn.Module):
    """A fixed 'detector' with KeypointNet's interface: channel 0 carries dots (the keypoints), the descriptor at a
    pixel is the unit-normalised 7x7 patch of channel 1's texture, so descriptors follow the image content."""

    in_channels = 3
    size_multiple = 1

    def __init__(self):
        super().__init__()
        self.dummy = nn.Parameter(torch.zeros(1))  # detect() reads the device from a parameter

    def forward(self, x):
        logits = 40.0 * (x[:, :1] - 0.5)
        patches = F.unfold(x[:, 1:2], 7, padding=3).reshape(x.shape[0], 49, *x.shape[-2:])
        patches = patches - patches.mean(dim=1, keepdim=True)
        return logits, F.normalize(patches, dim=1)


def dotted_image(points: np.ndarray, size: int, texture_seed: int) -> np.ndarray:
    """uint8 (size, size, 3): channel 0 has single bright pixels at (x, y) points, channels 1-2 smooth random
    texture (distinct local patches)."""
    rng = np.random.default_rng(texture_seed)
    texture = rng.uniform(0, 1, (size, size))
    image = np.zeros((size, size, 3), dtype=np.uint8)
    image[..., 1] = np.round(texture * 255)
    image[..., 2] = image[..., 1]
    for x, y in points.astype(int):
        image[y, x, 0] = 255
    return image


@pytest.mark.unit
def test_gaussian_heatmaps_closed_form():
    positions = torch.tensor([[[5.2, 7.0], [0.0, 0.0]]])
    valid = torch.tensor([[True, False]])
    heat = gaussian_heatmaps(positions, valid, 16, 12, sigma=1.5)
    assert heat.shape == (1, 1, 16, 12)
    assert heat[0, 0, 7, 5] == 1.0 and heat.max() == 1.0
    assert heat[0, 0, 7, 6].item() == pytest.approx(math.exp(-1 / (2 * 1.5**2)), rel=1e-6)
    assert heat[0, 0, 0, 0].item() < 1e-6  # the invalid keypoint draws nothing


@pytest.mark.unit
def test_warp_pair_moves_keypoints_with_the_image():
    size = 48
    points = torch.tensor([[[10.0, 12.0], [30.0, 20.0], [24.0, 35.0]]])
    image = torch.zeros(1, 3, size, size)
    for x, y in points[0].long().tolist():
        image[0, :, y - 1:y + 2, x - 1:x + 2] = 1.0  # 3x3 squares: bilinear warping keeps a clear maximum
    generator = torch.Generator().manual_seed(3)
    view_a, view_b, positions_b, valid_b = warp_pair(image, points, torch.ones(1, 3, dtype=torch.bool), generator,
                                                     max_rotation_degrees=20, max_scale=0.1, max_shift=0.1,
                                                     photometric=0.0)
    assert torch.equal(view_a, image)
    for (x, y), ok in zip(positions_b[0].tolist(), valid_b[0].tolist()):
        assert ok
        row, column = int(round(y)), int(round(x))
        window = view_b[0, 0, row - 1:row + 2, column - 1:column + 2]
        assert window.max() > 0.6, (x, y)  # the warped square is where the warped keypoint says


@pytest.mark.unit
def test_losses_closed_forms():
    # InfoNCE with all descriptors equal: every candidate ties, loss = log(number of candidates).
    field = F.normalize(torch.ones(1, 4, 8, 8), dim=1)
    positions = torch.tensor([[[1.0, 1.0], [5.0, 2.0], [3.0, 6.0]]])
    valid = torch.ones(1, 3, dtype=torch.bool)
    distractors = torch.rand(1, 5, 2, generator=torch.Generator().manual_seed(0)) * 7
    loss = descriptor_loss(field, field, positions, positions, valid, distractors, temperature=0.1)
    assert loss.item() == pytest.approx(math.log(3 + 5), rel=1e-5)
    # One-hot descriptors per keypoint and a low temperature: the loss vanishes.
    distinct = torch.zeros(1, 4, 8, 8)
    for channel, (x, y) in enumerate(positions[0].long().tolist()):
        distinct[0, channel, y, x] = 1.0
    distinct[0, 3] = 1e-3
    distinct = F.normalize(distinct, dim=1)
    assert descriptor_loss(distinct, distinct, positions, positions, valid, distractors, 0.01).item() < 1e-6
    # Focal loss: a confident, correct prediction costs (almost) nothing; a wrong one a lot.
    target = gaussian_heatmaps(positions, valid, 8, 8, sigma=1.0)
    good = torch.where(target >= 1, torch.tensor(12.0), torch.tensor(-12.0))
    assert focal_heatmap_loss(good, target).item() < 1e-3
    assert focal_heatmap_loss(-good, target).item() > 10


@pytest.mark.unit
def test_detect_nms_threshold_top_k_and_descriptors():
    points = np.array([[10, 10], [11, 10], [30, 12], [20, 25], [40, 40]], dtype=float)
    image = dotted_image(points, 48, texture_seed=0)
    image[10, 11, 0] = 200  # the neighbour of (10, 10) is weaker: NMS keeps (10, 10) only
    model = HandMadeDetector()
    keypoints, descriptors = detect(model, image, top_k=100, nms_radius=2, threshold=0.5, border=4)
    assert {tuple(p) for p in keypoints.astype(int).tolist()} == {(10, 10), (30, 12), (20, 25), (40, 40)}
    assert descriptors.shape == (4, 49)
    np.testing.assert_allclose(np.linalg.norm(descriptors, axis=1), 1.0, atol=1e-5)
    assert len(detect(model, image, top_k=2, nms_radius=2)[0]) == 2
    assert len(detect(model, image, top_k=100, nms_radius=2, border=12)[0]) == 2  # (20, 25) and (30, 12)
    with pytest.raises(ValueError, match="channels"):
        detect(model, image[..., :2])


@pytest.mark.unit
def test_fs_sr_identical_shifted_and_different_images():
    rng = np.random.default_rng(1)
    points = rng.integers(8, 40, (12, 2)).astype(float)
    original = dotted_image(points, 64, texture_seed=5)
    shifted = np.roll(original, (3, 2), axis=(0, 1))  # a translation: a homography explains every match
    different = dotted_image(rng.integers(8, 56, (12, 2)).astype(float), 64, texture_seed=6)
    model = HandMadeDetector()
    scores = fs_sr(model, np.stack([original, original, original]), np.stack([original, shifted, different]),
                   nms_radius=1, reduction="none")
    assert scores[0] == pytest.approx(1.0)
    assert scores[1] > 0.8
    assert scores[2] < 0.3
    # A blank original has no keypoint: no score (NaN, skipped by the mean), never 0 (perfect de-identification).
    blank = np.zeros_like(original)
    scores = fs_sr(model, np.stack([blank, original]), np.stack([original, shifted]), nms_radius=1, reduction="none")
    assert np.isnan(scores[0]) and scores[1] > 0.8
    assert fs_sr(model, np.stack([blank, original]), np.stack([original, shifted]), nms_radius=1) == scores[1]
    assert np.isnan(fs_sr(model, np.stack([blank]), np.stack([original]), nms_radius=1))
    with pytest.raises(ValueError, match="differ in shape"):
        fs_sr(model, np.stack([original]), np.stack([original, shifted]))
    # The originals' keypoints, detected once with the same settings, give the same scores.
    originals, edits = np.stack([original, original, blank]), np.stack([shifted, different, original])
    detected = [detect(model, image, nms_radius=1) for image in originals]
    np.testing.assert_array_equal(fs_sr(model, originals, edits, nms_radius=1, reduction="none",
                                        original_keypoints=detected),
                                  fs_sr(model, originals, edits, nms_radius=1, reduction="none"))
    with pytest.raises(ValueError, match="one entry per original"):
        fs_sr(model, originals, edits, original_keypoints=detected[:2])


@pytest.mark.unit
def test_training_is_deterministic_and_learns_dots():
    rng = np.random.default_rng(0)
    keypoints = [rng.integers(4, 28, (6, 2)).astype(np.float32) for _ in range(8)]
    images = np.stack([dotted_image(points, 32, texture_seed=index) for index, points in enumerate(keypoints)])
    runs = []
    for _ in range(2):
        torch.manual_seed(123)  # the model's initialisation
        model = KeypointNet(3, descriptor_dim=8, base_width=4, depth=2)
        runs.append(train_keypoint_detector(model, images, keypoints,
                                            TrainSettings(epochs=6, batch_size=4, lr=1e-2, seed=7, device="cpu",
                                                          progress=False),
                                            distractors=8))
    first, second = runs
    for key, value in first.model.state_dict().items():
        assert torch.equal(value, second.model.state_dict()[key]), key
    losses = first.history["train_loss"].to_numpy()
    assert np.all(np.isfinite(losses)) and losses[-1] < 0.75 * losses[0]
    quality = detection_precision_recall(first.model, images, keypoints, threshold=0.1)
    assert set(quality) == {"precision", "recall", "keypoints_per_image"}


@pytest.mark.unit
def test_training_validates_inputs():
    model = KeypointNet(3, descriptor_dim=4, base_width=4, depth=2)
    images = np.zeros((2, 30, 32, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match="divisible"):
        train_keypoint_detector(model, images, [np.zeros((0, 2))] * 2, TrainSettings(epochs=1, progress=False))
    images = np.zeros((2, 32, 32, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match="inside"):
        train_keypoint_detector(model, images, [np.array([[40.0, 3.0]]), np.zeros((0, 2))],
                                TrainSettings(epochs=1, progress=False))
    with pytest.raises(ValueError, match="one array per image"):
        train_keypoint_detector(model, images, [np.zeros((0, 2))], TrainSettings(epochs=1, progress=False))


@pytest.mark.unit
def test_acquisition_jitter_is_seeded_bounded_and_off_at_zero():
    images = torch.rand(3, 3, 24, 24, generator=torch.Generator().manual_seed(0))
    first = acquisition_jitter(images, torch.Generator().manual_seed(1), strength=1.0)
    second = acquisition_jitter(images, torch.Generator().manual_seed(1), strength=1.0)
    assert torch.equal(first, second) and first.shape == images.shape
    assert first.min() >= 0 and first.max() <= 1 and not torch.allclose(first, images, atol=1e-3)
    assert torch.equal(acquisition_jitter(images, torch.Generator().manual_seed(1), strength=0.0), images)
    with pytest.raises(ValueError, match="strength"):
        acquisition_jitter(images, torch.Generator(), strength=-1.0)


@pytest.mark.unit
def test_cross_pair_views_carry_keypoints_into_the_partner():
    size = 48
    points = torch.tensor([[[10.0, 12.0], [30.0, 20.0], [24.0, 35.0]]])
    shift = (5, -3)  # the partner shows the same squares moved by (dx, dy) = shift
    image, partner = torch.zeros(1, 3, size, size), torch.zeros(1, 3, size, size)
    for x, y in points[0].long().tolist():
        image[0, :, y - 1:y + 2, x - 1:x + 2] = 1.0
        partner[0, :, y + shift[1] - 1:y + shift[1] + 2, x + shift[0] - 1:x + shift[0] + 2] = 1.0
    transform = torch.tensor([[[1.0, 0.0, shift[0]], [0.0, 1.0, shift[1]]]])
    all_valid = torch.ones(1, 3, dtype=torch.bool)
    view_a, view_b, positions_b, valid_b, own_b, own_valid_b = cross_pair_views(
        image, points, all_valid, partner, points + torch.tensor(shift, dtype=torch.float32), all_valid, transform,
        torch.Generator().manual_seed(3), max_rotation_degrees=20, max_scale=0.1, max_shift=0.1, photometric=0.0)
    assert torch.equal(view_a, image) and bool(valid_b.all()) and bool(own_valid_b.all())
    assert torch.allclose(positions_b, own_b, atol=1e-4)  # the partner's own keypoints are the same anatomy
    for x, y in positions_b[0].tolist():
        row, column = int(round(y)), int(round(x))
        assert view_b[0, 0, row - 1:row + 2, column - 1:column + 2].max() > 0.6, (x, y)
    # A wrong map (identity) points at empty background of the partner, and is flagged invalid there.
    _, view_b, wrong, wrong_valid, _, _ = cross_pair_views(
        image, points, all_valid, partner, points, all_valid, torch.tensor([[[1.0, 0, 0], [0, 1.0, 0]]]),
        torch.Generator().manual_seed(3), max_rotation_degrees=0, max_scale=0, max_shift=0, photometric=0.0)
    assert not bool(wrong_valid.any())


@pytest.mark.unit
def test_pair_training_is_deterministic_and_validates_pairs():
    rng = np.random.default_rng(0)
    keypoints = [rng.integers(6, 26, (6, 2)).astype(np.float32) for _ in range(4)]
    shifted = [points + np.float32([2, 1]) for points in keypoints]
    images = np.stack([dotted_image(points, 32, texture_seed=index) for index, points in enumerate(keypoints)]
                      + [dotted_image(points, 32, texture_seed=index) for index, points in enumerate(shifted)])
    pairs = np.array([(index, index + 4) for index in range(4)] + [(index + 4, index) for index in range(4)])
    transforms = np.array([[[1, 0, 2], [0, 1, 1]]] * 4 + [[[1, 0, -2], [0, 1, -1]]] * 4, dtype=np.float32)
    runs = []
    for _ in range(2):
        torch.manual_seed(5)
        model = KeypointNet(3, descriptor_dim=8, base_width=4, depth=2)
        runs.append(train_keypoint_detector(model, images, keypoints + shifted,
                                            TrainSettings(epochs=3, batch_size=4, lr=1e-2, seed=2, device="cpu",
                                                          progress=False),
                                            distractors=8, acquisition_strength=1.0, dense_anchors=4, pairs=pairs,
                                            pair_transforms=transforms))
    for key, value in runs[0].model.state_dict().items():
        assert torch.equal(value, runs[1].model.state_dict()[key]), key
    assert np.all(np.isfinite(runs[0].history["train_loss"].to_numpy()))
    model = KeypointNet(3, descriptor_dim=4, base_width=4, depth=2)
    with pytest.raises(ValueError, match="pair_transforms"):
        train_keypoint_detector(model, images, keypoints + shifted, TrainSettings(epochs=1, progress=False),
                                pairs=pairs)
    with pytest.raises(ValueError, match="dense_anchors"):
        train_keypoint_detector(model, images, keypoints + shifted, TrainSettings(epochs=1, progress=False),
                                dense_anchors=-1)
    with pytest.raises(ValueError, match="pairs: indices"):
        train_keypoint_detector(model, images, keypoints + shifted, TrainSettings(epochs=1, progress=False),
                                pairs=pairs + 8, pair_transforms=transforms)


@pytest.mark.unit
def test_cohort_pairs_map_keypoints_onto_the_partner_image():
    from anonpaper.data.phantoms.retina import load_phantom_retina
    from anonpaper.train.keypoints import cohort_keypoints, cohort_pairs

    cohort = load_phantom_retina(n_patients=3, images_per_patient=(2, 2), image_size=64, seed=0)
    pairs, transforms = cohort_pairs(cohort)
    patients = cohort.table["patient_id"].to_numpy()
    assert pairs.shape == (6, 2) and transforms.shape == (6, 2, 3)  # 3 patients x 2 ordered pairs
    assert all(patients[first] == patients[second] and first != second for first, second in pairs)
    points = cohort_keypoints(cohort)
    for (first, second), transform in zip(pairs, transforms):
        mapped = points[first] @ transform[:, :2].T + transform[:, 2]
        distances = np.linalg.norm(mapped[:, None] - points[second][None], axis=2).min(axis=1)
        # Most keypoints are visible in both acquisitions and land exactly on the partner's keypoint.
        assert np.mean(distances < 0.01) > 0.7, distances
    subset_pairs, _ = cohort_pairs(cohort, [2, 3])
    assert subset_pairs.tolist() == [[0, 1], [1, 0]]
