"""Figures of the generators chapter: sample grids beside real images, the U-Net masks the checks read, nearest
training images, truncation grids, projections, curves."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from anonpaper.experiments.generators.config import KINDS
from anonpaper.experiments.generators.pipeline import MASK_THRESHOLD, TRUNCATIONS, Outcome


def _show(axis, image: np.ndarray) -> None:
    image = np.asarray(image)
    if image.shape[0] == 1:
        axis.imshow(image[0], cmap="gray", vmin=0, vmax=1)
    else:
        axis.imshow(np.transpose(image, (1, 2, 0)).clip(0, 1))
    axis.set_xticks([])
    axis.set_yticks([])


def _grid(rows: list[tuple[str, np.ndarray]], columns: int, title: str):
    figure, axes = plt.subplots(len(rows), columns, figsize=(1.2 * columns, 1.3 * len(rows)), squeeze=False)
    for r, (label, images) in enumerate(rows):
        for c in range(columns):
            axis = axes[r, c]
            if c < len(images):
                _show(axis, images[c])
            else:
                axis.axis("off")
            if c == 0:
                axis.set_ylabel(label, fontsize=7)
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    return figure


def plot_samples(outcome: Outcome, columns: int = 8):
    """Per generator: real images of its cohort (phantom or DATASET), generated ones (psi 1) and the untrained
    generator's."""
    rows = []
    for kind, samples in outcome.samples.items():
        rows += [(f"{kind}\nreal ({outcome.config.dataset_name(kind)})", samples["real"]),
                 (f"{kind}\ngenerated", samples["generated"]), (f"{kind}\nuntrained", samples["untrained"])]
    return _grid(rows, columns, "Real images of each generator's cohort, generated images (psi = 1) and an "
                                "untrained generator's")


def plot_nearest(outcome: Outcome):
    """Per generator: generated samples (psi 1) above the training image nearest to each in the U-Net's features
    (the memorisation check's neighbours: a copy would show the same image twice)."""
    rows = []
    for kind, samples in outcome.samples.items():
        rows += [(f"{kind}\ngenerated", samples["nearest_generated"]),
                 (f"{kind}\nnearest training", samples["nearest_train"])]
    return _grid(rows, max(len(rows[0][1]), 1) if rows else 1,
                 "Each generated sample above its nearest training image (U-Net features)")


def plot_masks(outcome: Outcome):
    """Per generator: real images above the U-Net's masks of them (at ``MASK_THRESHOLD``), then generated images above
    theirs: what the vessel (lung) fraction and the vessel-tree checks read. A vessel tree shows as few long
    connected branches; a generator that draws strokes shows as many short pieces."""
    rows = []
    for kind, samples in outcome.samples.items():
        if "generated_mask" not in samples:
            continue
        mask = outcome.segmenters[KINDS[kind][0]]["mask"]
        rows += [(f"{kind}\nreal", samples["real"][:len(samples["real_mask"])]),
                 (f"{kind}\nreal {mask} mask", samples["real_mask"]),
                 (f"{kind}\ngenerated", samples["generated"][:len(samples["generated_mask"])]),
                 (f"{kind}\ngenerated {mask} mask", samples["generated_mask"])]
    return _grid(rows, max(len(rows[0][1]), 1) if rows else 1,
                 f"Real and generated images above the cohort U-Net's masks (threshold {MASK_THRESHOLD:g}) that the "
                 "checks read")


def plot_truncation(outcome: Outcome):
    """Per generator, the same latents at each truncation psi."""
    rows = [(f"{kind}\npsi={psi:g}", samples["truncation"][i]) for kind, samples in outcome.samples.items()
            for i, psi in enumerate(TRUNCATIONS)]
    return _grid(rows, 6, "Truncation: the same latents at psi 0.5, 0.7 and 1")


def plot_projections(outcome: Outcome):
    """Held-out images and their projections in W and W+."""
    rows = []
    for kind, samples in outcome.samples.items():
        if "projected_w" not in samples:
            continue
        rows += [(f"{kind}\ntarget", samples["projected_target"]), (f"{kind}\nW", samples["projected_w"]),
                 (f"{kind}\nW+", samples["projected_wplus"])]
    return _grid(rows, max(len(rows[0][1]), 1) if rows else 1, "Projector: held-out images, W and W+ inversions")


def plot_training(outcome: Outcome):
    """Discriminator and generator losses against kimg (a running mean over 20 steps) per generator."""
    figure, axes = plt.subplots(1, len(outcome.generators), figsize=(4 * len(outcome.generators), 3), squeeze=False)
    for axis, (kind, trained) in zip(axes[0], outcome.generators.items()):
        history = trained.history
        if history.empty or "loss_d" not in history:
            axis.set_title(f"{kind}: no training history ({trained.source})", fontsize=8)
            continue
        losses = history.dropna(subset=["loss_d"])
        kimg = losses["step"] * outcome.config.batch_size / 1000
        for column, label in (("loss_d", "D loss"), ("loss_g_adv", "G loss")):
            axis.plot(kimg, losses[column].rolling(20, min_periods=1).mean(), label=label)
        axis.set_xlabel("thousands of real images shown (kimg)", fontsize=8)
        axis.set_ylabel("non-saturating logistic loss\n(running mean of 20 steps)", fontsize=8)
        axis.set_title(kind, fontsize=9)
        axis.legend(fontsize=7)
    figure.tight_layout()
    return figure
