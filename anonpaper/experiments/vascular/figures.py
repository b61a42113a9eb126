"""Figures of the vascular chapter (paper 1's Figs. 5 and 7-10, and the privacy-utility curve beyond the paper).
Each function returns the matplotlib figure."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from anonpaper.experiments.vascular.analysis import tradeoff_table
from anonpaper.experiments.vascular.pipeline import METHODS, OURS, Outcome

COLOURS = {method: colour for method, colour in zip(METHODS, ("C3", "C1", "C0", "C2", "C4"))}


def _show(axis, image: np.ndarray, label: str = "") -> None:
    image = np.asarray(image)
    if image.ndim == 2:
        axis.imshow(image, cmap="magma")
    elif image.shape[0] == 1:
        axis.imshow(image[0], cmap="gray", vmin=0, vmax=1)
    else:
        axis.imshow(np.transpose(image, (1, 2, 0)).clip(0, 1))
    axis.set_xticks([])
    axis.set_yticks([])
    if label:
        axis.set_title(label, fontsize=7)


def _placeholder(text: str):
    """A small figure that says why there is nothing to draw."""
    figure, axis = plt.subplots(figsize=(4, 1))
    axis.axis("off")
    axis.text(0.5, 0.5, text, ha="center", va="center")
    return figure


def _column_grid(columns: list[tuple[str, np.ndarray]], title: str, size: float = 1.45):
    """Images in columns (label, (rows, C, H, W)), labels on the first row."""
    rows = len(columns[0][1])
    figure, axes = plt.subplots(rows, len(columns), figsize=(size * len(columns), size * rows), squeeze=False)
    for c, (label, images) in enumerate(columns):
        for r in range(rows):
            _show(axes[r, c], images[r], label if r == 0 else "")
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    return figure


def plot_scores(outcome: Outcome, top: int = 10):
    """Contribution scores per style layer (every channel a dot) and the ``top`` best channels (paper Eq. 10)."""
    frame = outcome.channels
    layers = list(dict.fromkeys(frame.sort_values("index")["layer"]))
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.2), gridspec_kw={"width_ratios": [3, 2]})
    rng = np.random.default_rng(0)
    for position, layer in enumerate(layers):
        values = frame.loc[frame["layer"] == layer, "score"].to_numpy()
        left.scatter(position + rng.uniform(-0.25, 0.25, len(values)), values, s=6, alpha=0.6, color="C0")
        left.plot([position - 0.3, position + 0.3], [np.median(values)] * 2, color="k", lw=1)
    left.set_xticks(range(len(layers)), layers, rotation=45, fontsize=7)
    left.set_ylabel("contribution score R_k (mean over T)")
    left.set_title(f"Every S channel by layer (T = {outcome.speed['T']} images; line: median)", fontsize=9)
    best = frame.head(top)
    right.barh(range(len(best)), best["score"], xerr=2 * best["score_se"], color="C3", alpha=0.8)
    right.set_yticks(range(len(best)), [f"{layer}:{channel}" for layer, channel in zip(best["layer"],
                                                                                       best["channel"])],
                     fontsize=7)
    right.invert_yaxis()
    right.set_xlabel("score (bars: 2 SE over images)")
    right.set_title(f"The {len(best)} best channels", fontsize=9)
    figure.tight_layout()
    return figure


def plot_gradient(outcome: Outcome):
    """Generated images, their vessel masks, and the gradient map |dI/ds_k*| of the top channel (paper Fig. 5)."""
    samples = outcome.samples
    count = len(samples["scored"])
    figure, axes = plt.subplots(3, count, figsize=(1.6 * count, 5), squeeze=False)
    top = outcome.channels.iloc[0]
    for column in range(count):
        _show(axes[0, column], samples["scored"][column], "generated" if column == 0 else "")
        _show(axes[1, column], samples["masks"][column], "vessel mask" if column == 0 else "")
        _show(axes[2, column], samples["gradient"][column], f"|dI/ds| {top['layer']}:{top['channel']}"
              if column == 0 else "")
    figure.suptitle("Top channel's gradient map on the T score images", fontsize=9)
    figure.tight_layout()
    return figure


def plot_channel_edits(outcome: Outcome):
    """The best channels, each set to its mean (alpha = 1), on the same generated images (paper Fig. 5 / 9)."""
    samples = outcome.samples
    edits = samples["channel_edits"]
    count = len(samples["scored"])
    figure, axes = plt.subplots(len(edits) + 1, count, figsize=(1.6 * count, 1.6 * (len(edits) + 1)), squeeze=False)
    layout_names = dict(zip(outcome.channels["index"], zip(outcome.channels["layer"], outcome.channels["channel"])))
    for column in range(count):
        _show(axes[0, column], samples["scored"][column], "original" if column == 0 else "")
        for row, (index, images) in enumerate(edits.items(), start=1):
            layer, channel = layout_names[index]
            _show(axes[row, column], images[column], f"{layer}:{channel}, alpha 1" if column == 0 else "")
    figure.suptitle("Editing each of the best channels (rows) toward its mean", fontsize=9)
    figure.tight_layout()
    return figure


def plot_strengths(outcome: Outcome, image_set: str = "generated"):
    """Our top-channel edit at every alpha on a few images of ``image_set`` (paper Fig. 9)."""
    example = outcome.samples["examples"].get(image_set)
    if example is None:
        return _placeholder(f"no {image_set} images in this run")
    alphas = outcome.config.strengths
    columns = [("real image", example["targets"])] if "targets" in example else []
    columns += [("projection" if "targets" in example else "original", example["originals"])]
    columns += [(f"alpha {alpha:g}", example["edits"][(OURS, alpha)]) for alpha in alphas
                if (OURS, alpha) in example["edits"]]
    return _column_grid(columns, f"Top-channel edit (Eq. 11) at increasing strength, {image_set} images")


def plot_methods(outcome: Outcome, image_set: str = "generated"):
    """Every method at the comparison strength on the same images (paper Fig. 5)."""
    example = outcome.samples["examples"].get(image_set)
    alpha = outcome.config.table_alpha
    if example is None:
        return _placeholder(f"no {image_set} images in this run")
    columns = [("reference", example["originals"])]
    columns += [(method, example["edits"][(method, alpha)]) for method in METHODS
                if (method, alpha) in example["edits"]]
    return _column_grid(columns, f"Methods at matched edit strength (alpha {alpha:g}), {image_set} images", 1.5)


def plot_tradeoff(outcome: Outcome, image_set: str = "generated"):
    """The trade-off score of Eq. 14 over eta: ours (solid) and the paper's Table 2 (dashed) (paper Fig. 8)."""
    frame = tradeoff_table(outcome, image_set)
    figure, axis = plt.subplots(figsize=(6, 3.5))
    for method in METHODS:
        if method in frame:
            axis.plot(frame["eta"], frame[method], color=COLOURS[method], label=method)
        if f"{method} paper" in frame:
            axis.plot(frame["eta"], frame[f"{method} paper"], color=COLOURS[method], ls="--", lw=1,
                      label=f"{method} (paper)")
    axis.set_xlabel("eta (weight on lesion similarity)")
    axis.set_ylabel("similarity trade-off score")
    axis.legend(fontsize=7, ncol=2)
    axis.set_title(f"Eq. 14 at alpha {outcome.config.table_alpha:g}, {image_set} images", fontsize=9)
    figure.tight_layout()
    return figure


def plot_metrics_by_strength(outcome: Outcome, image_set: str = "generated"):
    """Our top-channel edit's metrics over alpha, each min-max normalised to [0, 1] (paper Fig. 10)."""
    frame = outcome.sweep
    part = frame[(frame["image_set"] == image_set) & (frame["method"] == OURS)].sort_values("alpha")
    figure, axis = plt.subplots(figsize=(6, 3.5))
    undefined = []
    for metric, label in (("fd", "FD"), ("lpips", "LPIPS"), ("fs_sift", "FS_SIFT"), ("fs_sr", "FS_SR"),
                          ("rroi", "RROI"), ("ams", "AMS"), ("dr_agreement", "DR agreement"),
                          ("rank1", "rank-1 re-id")):
        if metric not in part:
            continue
        values = part[metric].to_numpy(dtype=float)
        if not np.isfinite(values).any():
            undefined.append(label)  # e.g. RROI without vessel pixels: no line rather than a line of zeros
            continue
        span = np.nanmax(values) - np.nanmin(values)
        normalised = (values - np.nanmin(values)) / span if span > 0 else np.zeros_like(values)
        axis.plot(part["alpha"], normalised, marker="o", label=label)
    axis.set_xlabel("alpha")
    axis.set_ylabel("normalised value")
    if undefined:
        axis.text(0.01, 0.01, "undefined in this run: " + ", ".join(undefined), transform=axis.transAxes, fontsize=7,
                  va="bottom")
    axis.legend(fontsize=7, ncol=2)
    axis.set_title(f"Metrics of the top-channel edit over alpha, {image_set} images", fontsize=9)
    figure.tight_layout()
    return figure


def plot_privacy_utility(outcome: Outcome):
    """Privacy against lesion utility for every method over alpha (beyond the paper): the attacker's rank-1
    re-identification (lower = more private) against RROI, AMS and the DR classifier's agreement (the share of
    images whose predicted DR class the edit keeps), generated and real images."""
    sets = [name for name in ("generated", "real") if (outcome.sweep["image_set"] == name).any()]
    measures = (("rroi", "RROI (higher keeps lesions)", "no vessel pixel in the originals"),
                ("ams", "AMS (higher keeps the exudate label)", "no exudate classifier"),
                ("dr_agreement", "DR agreement (higher keeps the DR class)", "no DR classifier: no DR label"))
    figure, axes = plt.subplots(len(sets), len(measures), figsize=(14, 3.4 * len(sets)), squeeze=False)
    for r, image_set in enumerate(sets):
        part = outcome.sweep[outcome.sweep["image_set"] == image_set]
        for c, (metric, label, why) in enumerate(measures):
            axis = axes[r, c]
            if metric not in part or not np.isfinite(part[metric].to_numpy(dtype=float)).any():
                axis.axis("off")
                axis.text(0.5, 0.5, f"{label.split(' (')[0]} undefined on {image_set} images in this run\n({why})",
                          ha="center", va="center", fontsize=8, transform=axis.transAxes)
                continue
            for method in METHODS:
                curve = part[part["method"] == method].sort_values("alpha")
                if curve.empty or "rank1" not in curve:
                    continue
                axis.plot(curve["rank1"], curve[metric], marker="o", ms=3, color=COLOURS[method], label=method)
                for x, y, alpha in zip(curve["rank1"], curve[metric], curve["alpha"]):
                    if np.isfinite(x) and np.isfinite(y):
                        axis.annotate(f"{alpha:g}", (x, y), fontsize=5, color=COLOURS[method])
            unedited = part[part["method"] == "unedited"]
            if len(unedited):
                axis.axvline(float(unedited["rank1"].iloc[0]), color="grey", ls=":", lw=1,
                             label="unedited" if image_set == "generated" else "projection, unedited")
            axis.set_xlabel("attacker rank-1 re-identification (lower = more private)")
            axis.set_ylabel(label)
            axis.set_title(f"{image_set} images (numbers: alpha)", fontsize=9)
            axis.legend(fontsize=6)
    figure.tight_layout()
    return figure


def plot_ablation(outcome: Outcome):
    """Samples of the Table 3 generators (paper Fig. 7)."""
    samples = outcome.ablation_samples
    if not samples:
        return _placeholder("ablation not run")
    columns = min(len(images) for images in samples.values())
    figure, axes = plt.subplots(len(samples), columns, figsize=(1.2 * columns, 1.3 * len(samples)), squeeze=False)
    for r, (variant, images) in enumerate(samples.items()):
        for c in range(columns):
            _show(axes[r, c], images[c])
        axes[r, 0].set_ylabel(variant, fontsize=7)
    figure.suptitle("Generators of the loss ablation (Table 3)", fontsize=9)
    figure.tight_layout()
    return figure
