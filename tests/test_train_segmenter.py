"""Tests of segmenter training, full-image inference, Dice and dual-threshold post-processing."""

import numpy as np
import pytest
import torch
from skimage.filters import apply_hysteresis_threshold

from anonpaper.models.frunet import FRUNet
from anonpaper.models.unet import UNet
from anonpaper.train.augment import FlipShiftScaleRotate
from anonpaper.metrics.segmentation import dice_score
from anonpaper.train.segmenter import _patch_grid, dual_threshold, segment, train_segmenter
from anonpaper.train.loop import TrainSettings

pytestmark = pytest.mark.unit


def test_dual_threshold_matches_skimage_hysteresis_with_4_connectivity():
    rng = np.random.default_rng(0)
    probability = rng.random((3, 40, 40))  # continuous: ties with the thresholds have probability zero
    ours = dual_threshold(probability, high=0.8, low=0.4, connectivity=4)
    for index in range(3):
        reference = apply_hysteresis_threshold(probability[index], 0.4, 0.8)
        assert np.array_equal(ours[index], reference)


def test_dual_threshold_8_connectivity_joins_diagonals():
    probability = np.zeros((5, 5))
    probability[0, 0] = 0.9            # seed
    probability[1, 1] = 0.35           # diagonal neighbour above the low threshold
    probability[2, 2] = 0.4
    probability[4, 0] = 0.45           # isolated weak pixel
    probability[4, 4] = 0.5            # a seed exactly at the high threshold (>= counts)
    expected = np.zeros((5, 5), bool)
    expected[0, 0] = expected[1, 1] = expected[2, 2] = expected[4, 4] = True
    assert np.array_equal(dual_threshold(probability), expected)
    four = dual_threshold(probability, connectivity=4)
    assert four[0, 0] and not four[1, 1] and not four[4, 0]
    # The 8-connected result contains the 4-connected one and the plain >= high mask.
    rng = np.random.default_rng(1)
    field = rng.random((30, 30))
    assert np.all(dual_threshold(field) >= dual_threshold(field, connectivity=4))
    assert np.all(dual_threshold(field) >= (field >= 0.5))


def test_dice_score_closed_form():
    a = np.array([[1, 1, 0], [0, 0, 0]], bool)
    b = np.array([[1, 0, 0], [1, 1, 0]], bool)
    assert dice_score(a, b) == pytest.approx(2 * 1 / (2 + 3))
    assert dice_score(np.zeros(4), np.zeros(4)) == 1.0
    with pytest.raises(ValueError, match="shape"):
        dice_score(np.zeros(3), np.zeros(4))


def test_patch_grid_covers_every_pixel():
    grid = _patch_grid(2, 20, 17, 8, 5)
    covered = np.zeros((2, 20, 17), bool)
    for image, top, left in grid.tolist():
        covered[image, top:top + 8, left:left + 8] = True
    assert covered.all()


def _lines(count, seed, size=32):
    """Bright horizontal/vertical lines on Gaussian noise: uint8 images (N, size, size) and exact masks."""
    rng = np.random.default_rng(seed)
    images, masks = [], []
    for _ in range(count):
        mask = np.zeros((size, size), bool)
        for _ in range(2):
            position = rng.integers(2, size - 2)
            if rng.random() < 0.5:
                mask[position, :] = True
            else:
                mask[:, position] = True
        image = rng.normal(0.3, 0.15, (size, size)) + 0.4 * mask
        images.append((np.clip(image, 0, 1) * 255).astype(np.uint8))
        masks.append(mask)
    return np.stack(images), np.stack(masks)


def test_tiny_unet_learns_lines_on_noise():
    images, masks = _lines(24, 0)
    val_images, val_masks = _lines(8, 1)
    torch.manual_seed(0)
    result = train_segmenter(UNet(1, 1, base_width=4, depth=2), images, masks,
                             TrainSettings(epochs=6, batch_size=16, lr=1e-2, seed=0, device="cpu", progress=False),
                             patch_size=16, loss="bce", val=(val_images, val_masks), augment=FlipShiftScaleRotate())
    probability = segment(result.model, val_images)
    assert probability.shape == (8, 32, 32) and probability.min() >= 0 and probability.max() <= 1
    dice = dice_score(probability >= 0.5, val_masks)
    # Chance level (a random mask with the foreground rate) is about 0.06.
    assert dice >= 0.7
    assert result.best_score == pytest.approx(dice, abs=1e-6)


def test_frunet_trains_with_grid_patches_and_segment_pads():
    images, masks = _lines(4, 2, size=20)
    torch.manual_seed(0)
    model = FRUNet(1, 1, widths=(4, 8), heads=2)
    result = train_segmenter(model, images, masks,
                             TrainSettings(epochs=2, batch_size=8, lr=1e-2, seed=0, device="cpu", progress=False),
                             patch_size=8, stride=6, patches_per_epoch=48)
    assert result.history["train_loss"].iloc[-1] < result.history["train_loss"].iloc[0]
    # 19 px is not a multiple of the 2-level size_multiple 2: segment pads and crops.
    assert segment(result.model, images[:, :19, :19]).shape == (4, 19, 19)


def test_train_segmenter_validates_inputs():
    images, masks = _lines(2, 0, size=16)
    with pytest.raises(ValueError, match="masks must have shape"):
        train_segmenter(UNet(1, 1, 2, depth=2), images, masks[:, :8],
                        TrainSettings(epochs=1, device="cpu", progress=False), patch_size=8)
    with pytest.raises(ValueError, match="multiple of the model's size_multiple 4"):
        train_segmenter(UNet(1, 1, 2, depth=2), images, masks,
                        TrainSettings(epochs=1, device="cpu", progress=False), patch_size=6)


def test_bce_plus_dice_loss_runs_and_decreases():
    images, masks = _lines(8, 3, size=16)
    torch.manual_seed(0)
    result = train_segmenter(UNet(1, 1, base_width=2, depth=2), images, masks,
                             TrainSettings(epochs=3, batch_size=4, lr=1e-2, seed=0, device="cpu", progress=False),
                             patch_size=None, loss="bce+dice")
    assert result.history["train_loss"].iloc[-1] < result.history["train_loss"].iloc[0]


def test_segmenter_training_is_deterministic_and_resumes(tmp_path, monkeypatch):
    from anonpaper.train import segmenter as module

    images, masks = _lines(6, 4, size=16)
    original_fit = module.fit
    stop_after = {"epoch": None}

    def interrupt(epoch, row):
        if epoch == stop_after["epoch"]:
            raise KeyboardInterrupt

    # Simulate an interruption after an epoch through fit's on_epoch_end hook.
    monkeypatch.setattr(module, "fit", lambda *args, **kwargs: original_fit(*args, on_epoch_end=interrupt, **kwargs))

    def run(checkpoint=None):
        torch.manual_seed(0)
        model = UNet(1, 1, base_width=2, depth=2, dropout=0.1)
        result = train_segmenter(model, images, masks,
                                 TrainSettings(epochs=3, batch_size=4, lr=1e-2, seed=3, device="cpu",
                                               checkpoint_path=checkpoint, progress=False),
                                 patch_size=8, augment=FlipShiftScaleRotate(0.5, 0.5))
        return torch.cat([p.reshape(-1) for p in result.model.state_dict().values()])

    first, second = run(), run()
    assert torch.equal(first, second)
    path = tmp_path / "segmenter.pt"
    stop_after["epoch"] = 1
    with pytest.raises(KeyboardInterrupt):
        run(path)
    stop_after["epoch"] = None
    assert torch.equal(run(path), first)
