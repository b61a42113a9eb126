"""Train a small U-Net vessel segmenter on retina-phantom images (exact masks) and print held-out Dice.

``--mask hard_exudate`` trains the hard-exudate segmenter of paper 1 the same way.

Run on demand (not a test):
    .venv/bin/python benchmarks/train_vessel_segmenter.py [--train 100] [--test 20] [--size 128] [--epochs 30] [--mask vessel]

The held-out images come from patients that are not in the training set. Dice is computed over whole images at
threshold 0.5 (global over all held-out pixels, and the mean of per-image values), and after FR-UNet's
dual-threshold post-processing. One CPU thread (shared machines).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from anonpaper.models.unet import UNet
from anonpaper.train.augment import paper2_augmentation
from anonpaper.metrics.segmentation import dice_score
from anonpaper.train.segmenter import dual_threshold, segment, train_segmenter
from anonpaper.train.loop import TrainSettings


def phantom_images(train: int, test: int, size: int, seed: int, mask: str = "vessel"):
    """Retina-phantom images (uint8 (N, S, S, 3)) and exact masks (bool (N, S, S), default "vessel"), one image
    per patient.

    Returns ``(train_images, train_masks, test_images, test_masks)``; the test patients are not in the training set.
    """
    from anonpaper.data.phantoms.retina import load_phantom_retina

    cohort = load_phantom_retina(n_patients=train + test, images_per_patient=(1, 1), image_size=size, seed=seed)
    if cohort.table["patient_id"].nunique() != len(cohort):
        raise ValueError("expected one image per patient")
    images = np.stack([cohort.image(index) for index in range(len(cohort))])
    masks = np.stack([cohort.mask(index, mask) for index in range(len(cohort))])
    return images[:train], masks[:train], images[train:], masks[train:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=100, help="training images (one patient each)")
    parser.add_argument("--test", type=int, default=20, help="held-out images from other patients")
    parser.add_argument("--size", type=int, default=128, help="image side in pixels")
    parser.add_argument("--width", type=int, default=8, help="U-Net base width")
    parser.add_argument("--patch", type=int, default=64, help="training patch side")
    parser.add_argument("--patches", type=int, default=384, help="random patches per epoch")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mask", default="vessel", help='phantom mask to learn, e.g. "vessel" or "hard_exudate"')
    arguments = parser.parse_args()
    torch.set_num_threads(1)

    started = time.perf_counter()
    train_images, train_masks, test_images, test_masks = phantom_images(arguments.train, arguments.test,
                                                                        arguments.size, seed=arguments.seed,
                                                                        mask=arguments.mask)
    print(f"rendered {arguments.train} + {arguments.test} images at {arguments.size} px in "
          f"{time.perf_counter() - started:.1f} s; {arguments.mask} fraction {train_masks.mean():.4f}")

    torch.manual_seed(arguments.seed)
    model = UNet(3, 1, base_width=arguments.width, depth=4)
    started = time.perf_counter()
    # Validation on the last 10 training patients' images would cost little, but the held-out set is reported
    # separately and never used for selection: here the final epoch is kept (monitor = training loss).
    result = train_segmenter(model, train_images, train_masks,
                             TrainSettings(epochs=arguments.epochs, batch_size=16, lr=arguments.lr,
                                           seed=arguments.seed, device="cpu", progress=False),
                             patch_size=arguments.patch, patches_per_epoch=arguments.patches, loss="bce",
                             augment=paper2_augmentation())
    training_seconds = time.perf_counter() - started
    print(result.history.to_string(index=False))
    probability = segment(result.model, test_images, batch_size=8, device="cpu")
    hard = probability >= 0.5
    dual = dual_threshold(probability, high=0.5, low=0.3)
    per_image = [dice_score(hard[i], test_masks[i]) for i in range(len(test_masks))]
    print(f"training: {training_seconds:.0f} s on 1 CPU thread, best epoch {result.best_epoch}")
    print(f"held-out Dice (threshold 0.5): global {dice_score(hard, test_masks):.4f}, "
          f"mean per image {np.mean(per_image):.4f} (min {np.min(per_image):.4f})")
    print(f"held-out Dice (dual threshold 0.5/0.3): {dice_score(dual, test_masks):.4f}")


if __name__ == "__main__":
    main()
