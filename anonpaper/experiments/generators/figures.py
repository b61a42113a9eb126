"""Figures of the generators chapter: sample grids beside real images, the U-Net masks the checks read, power
spectra, nearest training images, truncation grids, projections, curves."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from anonpaper.experiments.generators.claims import tree_differences
from anonpaper.experiments.generators.config import KINDS
from anonpaper.experiments.generators.curves import Curve, CurveError, record_curve
from anonpaper.experiments.generators.pipeline import (MASK_THRESHOLD, SPECTRUM_BANDS, TRUNCATIONS, Outcome,
                                                       relative_difference)


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


def plot_spectra(outcome: Outcome):
    """Per generator: the mean radially averaged power spectrum of its generated images beside its real images' (log
    scale, against the fraction of the Nyquist frequency), with the bands the spectrum rows compare shaded in turn.
    Curves that part at the right end say the generator blurs (or sharpens); a gap on the left, that it draws too
    little (or too much) coarse structure."""
    kinds = [kind for kind, samples in outcome.samples.items() if "spectrum_real" in samples]
    figure, axes = plt.subplots(1, max(len(kinds), 1), figsize=(3.6 * max(len(kinds), 1), 2.8), squeeze=False)
    for axis, kind in zip(axes[0], kinds):
        samples = outcome.samples[kind]
        frequency = np.arange(len(samples["spectrum_real"])) / (len(samples["spectrum_real"]) - 1)
        for index, (low, high) in enumerate(SPECTRUM_BANDS):
            axis.axvspan(low, high, color="0.93" if index % 2 else "0.98", zorder=0)
        for name, style in (("real", "-"), ("generated", "--")):
            axis.semilogy(frequency[1:], samples[f"spectrum_{name}"][1:], style, label=name)
        axis.set_title(kind, fontsize=9)
        axis.set_xlabel("frequency / Nyquist", fontsize=8)
        axis.set_ylabel("power", fontsize=8)
        axis.tick_params(labelsize=7)
        axis.legend(fontsize=7)
    figure.suptitle("Radially averaged power spectra of generated and real images", fontsize=9)
    figure.tight_layout()
    return figure


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
            axis.axis("off")
            what = (f"shipped weights, {trained.kimg:g} kimg:\ntheir losses are not kept;\nthe evaluation curve "
                    "is in the next figure" if trained.source == "weights" else
                    f"no training history ({trained.source})")
            axis.text(0.5, 0.5, f"{kind}\n{what}", ha="center", va="center", fontsize=8, transform=axis.transAxes)
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


def shipped_curves(outcome: Outcome) -> dict[str, Curve]:
    """kind -> the evaluation curve in the provenance of each shipped generator of ``outcome`` (kinds trained in
    the run, or shipped without a curve, are left out)."""
    curves = {}
    for kind, trained in outcome.generators.items():
        if trained.source != "weights" or not (trained.provenance or {}).get("curve"):
            continue
        try:
            curves[kind] = record_curve(trained.weights_file or kind, trained.provenance)
        except CurveError:  # a provenance of another format: no curve to draw
            continue
    return curves


def plot_curves(outcome: Outcome):
    """The evaluation curve of each shipped generator, from its provenance, against kimg: the U-Net Frechet
    distance (log scale), k-NN precision and recall, and the relative differences from the real images that the
    checks bound (mask fraction; for fundus, skeleton length per piece and junctions per image) with their
    tolerances. The curve's own protocol is named: a run recorded before small mask pieces were dropped counts
    every piece (``TREE_MIN_AREA`` 0), so its tree statistics read lower than the chapter's check."""
    curves = shipped_curves(outcome)
    if not curves:
        figure, axis = plt.subplots(figsize=(5, 1.2))
        axis.axis("off")
        axis.text(0.5, 0.5, "no shipped generator with an evaluation curve in this run", ha="center", va="center",
                  fontsize=9)
        return figure
    config = outcome.config
    figure, axes = plt.subplots(3, len(curves), figsize=(4.2 * len(curves), 7.5), squeeze=False, sharex="col")
    for column, (kind, curve) in enumerate(curves.items()):
        mask, points = curve.mask, curve.points
        kimg = np.array([point["kimg"] for point in points], dtype=float)

        def series(name: str) -> np.ndarray:
            return np.array([curve.value(point, name) for point in points], dtype=float)

        fd = series(f"FD-{mask}-unet")
        axes[0, column].semilogy(kimg, np.where(fd > 0, fd, np.nan), marker=".")
        axes[0, column].set_ylabel(f"FD-{mask}-unet (log)", fontsize=8)
        axes[0, column].set_title(f"{kind} ({curve.source.name})", fontsize=9)
        for name in ("precision", "recall"):
            axes[1, column].plot(kimg, series(name), marker=".", label=f"k-NN {name}")
        axes[1, column].set_ylim(-0.02, 1.02)
        axes[1, column].set_ylabel("against real images", fontsize=8)
        axes[1, column].legend(fontsize=7)
        axis = axes[2, column]
        fraction = [relative_difference(curve.value(point, f"{mask}_fraction/generated"),
                                        curve.value(point, f"{mask}_fraction/real")) for point in points]
        axis.plot(kimg, fraction, marker=".", label=f"{mask} fraction (tolerance {config.mask_tolerance:g})")
        trees = [tree_differences(curve.reader(point), mask) for point in points]
        if any(np.isfinite(effect) for differences in trees for effect, _ in differences.values()):
            for name in trees[0]:
                axis.plot(kimg, [differences[name][0] for differences in trees], marker=".",
                          label=f"{name.replace('_', ' ')} (tolerance {config.tree_tolerance:g})")
            for bound in (-config.tree_tolerance, config.tree_tolerance):
                axis.axhline(bound, color="grey", linestyle="--", linewidth=0.8)
            min_area = curve.settings.get("tree_min_area")
            axis.set_title("tree statistics: every mask piece counted (this run's protocol)" if not min_area else
                           f"tree statistics: mask pieces under {min_area} px dropped", fontsize=8)
        for bound in (-config.mask_tolerance, config.mask_tolerance):
            axis.axhline(bound, color="grey", linestyle=":", linewidth=0.8)
        axis.axhline(0.0, color="black", linewidth=0.6)
        axis.set_ylim(-1.05, 1.5)
        axis.set_ylabel("(generated - real) / real", fontsize=8)
        axis.set_xlabel("thousands of real images shown (kimg)", fontsize=8)
        axis.legend(fontsize=6, loc="best")
    figure.tight_layout()
    return figure
