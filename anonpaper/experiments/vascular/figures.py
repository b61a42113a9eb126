"""Figures of the vascular chapter (paper 1's Figs. 5 and 7-10, and the privacy-utility curve beyond the paper).
Each function returns the matplotlib figure."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from anonpaper.experiments.plotting import label_points
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


# A mean absolute pixel change (images in [0, 1]) below this is invisible on the page: about 1/255 of the range.
VISIBLE_CHANGE = 0.005


def _mean_change(images: np.ndarray, reference: np.ndarray) -> float:
    """Mean absolute pixel difference between two stacks of images in [0, 1] (NaN when their shapes differ)."""
    images, reference = np.asarray(images, dtype=float), np.asarray(reference, dtype=float)
    return float(np.abs(images - reference).mean()) if images.shape == reference.shape else float("nan")


def _change_note(changes: list[float]) -> str:
    """What the grid's title says about the size of the edits, measured on the images shown."""
    finite = [change for change in changes if np.isfinite(change)]
    if not finite:
        return ""
    if max(finite) < VISIBLE_CHANGE:
        return (f"\nevery edit changes the mean pixel by less than {VISIBLE_CHANGE} of the range "
                f"(largest {max(finite):.4f}): no visible change")
    return f"\nmean pixel change against the reference: up to {max(finite):.3f} of the range"


def _column_grid(columns: list[tuple[str, np.ndarray]], title: str, size: float = 1.45, reference: int | None = None):
    """Images in columns (label, (rows, C, H, W)), labels on the first row. With ``reference`` (a column index),
    every column right of it gives its mean absolute pixel change against it in its label, and the title says when
    no edit is visible."""
    rows = len(columns[0][1])
    changes = {}
    if reference is not None:
        changes = {c: _mean_change(images, columns[reference][1]) for c, (_, images) in enumerate(columns)
                   if c > reference}
    figure, axes = plt.subplots(rows, len(columns), figsize=(size * len(columns), size * rows + 0.3), squeeze=False)
    for c, (label, images) in enumerate(columns):
        shown = f"{label}\nchange {changes[c]:.4f}" if c in changes and np.isfinite(changes[c]) else label
        for r in range(rows):
            _show(axes[r, c], images[r], shown if r == 0 else "")
    figure.suptitle(title + _change_note(list(changes.values())), fontsize=9)
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
    figure, axes = plt.subplots(len(edits) + 1, count, figsize=(1.6 * count, 1.6 * (len(edits) + 1) + 0.3),
                                squeeze=False)
    layout_names = dict(zip(outcome.channels["index"], zip(outcome.channels["layer"], outcome.channels["channel"])))
    changes = {index: _mean_change(images[:count], samples["scored"][:count]) for index, images in edits.items()}
    for column in range(count):
        _show(axes[0, column], samples["scored"][column], "original" if column == 0 else "")
        for row, (index, images) in enumerate(edits.items(), start=1):
            layer, channel = layout_names[index]
            _show(axes[row, column], images[column], f"{layer}:{channel}, alpha 1, change {changes[index]:.4f}"
                  if column == 0 else "")
    figure.suptitle("Editing each of the best channels (rows) toward its mean"
                    + _change_note(list(changes.values())), fontsize=9)
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
    return _column_grid(columns, f"Top-channel edit (Eq. 11) at increasing strength, {image_set} images",
                        reference=1 if "targets" in example else 0)  # the image the edits start from


def plot_methods(outcome: Outcome, image_set: str = "generated"):
    """Every method at the comparison strength on the same images (paper Fig. 5)."""
    example = outcome.samples["examples"].get(image_set)
    alpha = outcome.config.table_alpha
    if example is None:
        return _placeholder(f"no {image_set} images in this run")
    columns = [("reference", example["originals"])]
    columns += [(method, example["edits"][(method, alpha)]) for method in METHODS
                if (method, alpha) in example["edits"]]
    return _column_grid(columns, f"Methods at matched edit strength (alpha {alpha:g}), {image_set} images", 1.5,
                        reference=0)


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


# The metrics of paper Fig. 10 and ours, each with the direction a reader should know (more private / more kept).
STRENGTH_METRICS = (("fd", "FD (vessel U-Net)", "higher = further from real"),
                    ("unet_distance", "U-Net feature distance", "higher = more changed"),
                    ("fs_sift", "FS_SIFT", "lower = less matchable"),
                    ("fs_sr", "FS_SR", "lower = less matchable"),
                    ("rroi", "RROI", "higher = lesions kept"),
                    ("ams", "AMS", "higher = exudate label kept"),
                    ("dr_agreement", "DR agreement", "higher = DR class kept"),
                    ("rank1", "rank-1 re-identification", "lower = more private"))


def plot_metrics_by_strength(outcome: Outcome, image_set: str = "generated"):
    """Our top-channel edit's metrics over alpha (paper Fig. 10), one panel per metric on its own raw scale, with
    error bars of two standard errors where the sweep has them. No rescaling: a metric that barely moves is drawn
    as barely moving (the paper's Fig. 10 normalises; a min-max rescaling would draw 0.94 -> 0.87 as 1 -> 0)."""
    frame = outcome.sweep
    part = frame[(frame["image_set"] == image_set) & (frame["method"] == OURS)].sort_values("alpha")
    metrics = [entry for entry in STRENGTH_METRICS if entry[0] in part]
    if part.empty or not metrics:
        return _placeholder(f"no sweep of the top-channel edit on {image_set} images in this run")
    columns = 4
    rows = int(np.ceil(len(metrics) / columns))
    figure, axes = plt.subplots(rows, columns, figsize=(3.1 * columns, 2.3 * rows), squeeze=False)
    alphas = part["alpha"].to_numpy(dtype=float)
    for axis, (metric, label, direction) in zip(axes.flat, metrics):
        values = part[metric].to_numpy(dtype=float)
        axis.set_title(f"{label}\n({direction})", fontsize=8)
        axis.set_xlabel("alpha (edit strength)", fontsize=8)
        axis.tick_params(labelsize=7)
        if not np.isfinite(values).any():  # e.g. RROI without vessel pixels: say so rather than draw zeros
            axis.text(0.5, 0.5, "undefined in this run", ha="center", va="center", fontsize=8,
                      transform=axis.transAxes)
            continue
        errors = part[f"{metric}_se"].to_numpy(dtype=float) * 2 if f"{metric}_se" in part else None
        axis.errorbar(alphas, values, yerr=errors, marker="o", markersize=3, capsize=2, color="C0")
        axis.margins(y=0.15)
    for axis in list(axes.flat)[len(metrics):]:
        axis.axis("off")
    figure.suptitle(f"Metrics of the top-channel edit over alpha, {image_set} images (raw values; bars: 2 SE)",
                    fontsize=9)
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
    labelled = {}  # per axis: (x, y, alpha, colour), placed once the layout is final so that no two overlap
    for r, image_set in enumerate(sets):
        part = outcome.sweep[outcome.sweep["image_set"] == image_set]
        for c, (metric, label, why) in enumerate(measures):
            axis = axes[r, c]
            if not np.isfinite(part["rank1"].to_numpy(dtype=float)).any():  # generated: no second image to find
                metric, label, why = "rank1", "rank-1 (the attacker)", "no second image of the identity to find"
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
                ends = curve.dropna(subset=["rank1", metric]).iloc[[0, -1]].drop_duplicates("alpha")
                labelled.setdefault(axis, []).extend(  # each curve's weakest and strongest edit only
                    (x, y, f"{alpha:g}", COLOURS[method]) for x, y, alpha in zip(ends["rank1"], ends[metric],
                                                                                 ends["alpha"]))
            unedited = part[part["method"] == "unedited"]
            if len(unedited):
                axis.axvline(float(unedited["rank1"].iloc[0]), color="grey", ls=":", lw=1,
                             label="unedited" if image_set == "generated" else "projection, unedited")
            axis.set_xlabel("attacker rank-1 re-identification (lower = more private)")
            axis.set_ylabel(label)
            axis.set_title(f"{image_set} images (numbers: alpha at each curve's ends)", fontsize=9)
            axis.legend(fontsize=6)
    figure.tight_layout()
    for axis, points in labelled.items():
        xs, ys, names, colours = zip(*points)
        label_points(axis, xs, ys, names, colours, fontsize=6)
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
