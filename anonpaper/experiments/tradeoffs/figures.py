"""Figures of the trade-offs chapter: one privacy-utility plane per modality and threat, and example releases."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from anonpaper.experiments.plotting import label_points
from anonpaper.experiments.tradeoffs.analysis import THREAT_LABELS, pareto_front, points
from anonpaper.experiments.tradeoffs.pipeline import (CONSTANT, KNOB_SYMBOLS, METHOD_LABELS, MODALITIES, NO_CHANGE,
                                                      Outcome)

# Axis range: advantage retained is 0 at chance and 1 at the originals; noisy small runs can fall far outside, and
# such points are drawn on the frame's edge (open markers) so the readable range is kept.
LOW, HIGH = -0.25, 1.35
COLORS = {"blur": "#1f77b4", "pixelate": "#17becf", "gaussian-noise": "#7f7f7f", "snow": "#ff7f0e",
          "vs-snow": "#d62728", "k-same-pixel": "#2ca02c", "k-salsa": "#9467bd", "sspace-vessel-edit": "#8c564b",
          "stylespace": "#e377c2", "gmia": "#bcbd22", "identity-swap": "#393b79"}
MARKERS = {"blur": "o", "pixelate": "s", "gaussian-noise": "v", "snow": "^", "vs-snow": "D", "k-same-pixel": "P",
           "k-salsa": "X", "sspace-vessel-edit": "h", "stylespace": "<", "gmia": ">", "identity-swap": "d"}


def plot_tradeoff(outcome: Outcome, modality: str, threat: str):
    """Utility advantage retained against ``threat``'s privacy advantage retained for every release of
    ``modality``: each method a curve along its knob (SE bars on both axes, knob values beside the points), the two
    ends (no change at (1, 1), the constant image near (0, 0)), the diagonal between them and the Pareto front.

    Returns:
        The matplotlib figure.
    """
    frame = points(outcome, modality)
    x, y = frame[f"{threat}_ar"].to_numpy(float), frame["utility_ar"].to_numpy(float)
    x_se, y_se = frame[f"{threat}_ar_se"].to_numpy(float), frame["utility_ar_se"].to_numpy(float)
    shown_x, shown_y = np.clip(x, LOW, HIGH), np.clip(y, LOW, HIGH)
    clipped = (shown_x != x) | (shown_y != y)
    figure, axis = plt.subplots(figsize=(7.2, 5.6))
    axis.plot([0, 1], [0, 1], ls="--", color="0.6", lw=1, label="diagonal (mix of the two ends)")
    axis.axhline(0, color="0.85", lw=0.8)
    axis.axvline(0, color="0.85", lw=0.8)
    front = pareto_front(x, y)
    order = np.argsort(np.where(front, x, np.inf), kind="stable")[:int(front.sum())]
    if len(order):
        axis.step(shown_x[order], shown_y[order], where="post", color="black", lw=2.2, alpha=0.25,
                  label="Pareto front", zorder=1)
    labels_x, labels_y, labels, colors = [], [], [], []
    for method in dict.fromkeys(frame["method"]):
        rows = np.flatnonzero(frame["method"].to_numpy() == method)
        if method in (NO_CHANGE, CONSTANT):
            marker, color = ("*", "black") if method == NO_CHANGE else ("*", "0.5")
            axis.scatter(shown_x[rows], shown_y[rows], marker=marker, s=180, color=color, zorder=4,
                         label=METHOD_LABELS[method])
            continue
        color, marker = COLORS[method], MARKERS[method]
        axis.plot(shown_x[rows], shown_y[rows], color=color, lw=1.2, alpha=0.8, zorder=2)
        axis.errorbar(shown_x[rows], shown_y[rows], xerr=np.where(clipped[rows], 0, np.nan_to_num(x_se[rows])),
                      yerr=np.where(clipped[rows], 0, np.nan_to_num(y_se[rows])), fmt="none", ecolor=color,
                      alpha=0.45, lw=1, zorder=2)
        filled = rows[~clipped[rows]]
        axis.scatter(shown_x[filled], shown_y[filled], color=color, marker=marker, s=42, zorder=3,
                     label=METHOD_LABELS[method])
        open_rows = rows[clipped[rows]]
        axis.scatter(shown_x[open_rows], shown_y[open_rows], facecolors="none", edgecolors=color, marker=marker,
                     s=42, zorder=3)
        symbol = KNOB_SYMBOLS[frame["knob"].iloc[rows[0]]]
        for row in rows:
            labels_x.append(shown_x[row])
            labels_y.append(shown_y[row])
            labels.append(f"{symbol}={frame['setting'].iloc[row]:g}")
            colors.append(color)
    if not np.isfinite(y).any() or not np.isfinite(x).any():
        missing = "utility" if not np.isfinite(y).any() else threat
        axis.text(0.5, 0.5, f"{missing} advantage retained is undefined in this run:\nits model does not beat chance "
                  "on the originals", transform=axis.transAxes, ha="center", va="center", fontsize=9, color="0.3")
    axis.set_xlim(LOW - 0.03, HIGH + 0.03)
    axis.set_ylim(LOW - 0.03, HIGH + 0.03)
    axis.set_xlabel(f"{THREAT_LABELS[threat]}: advantage retained (lower = more private)")
    axis.set_ylabel(f"utility ({outcome.config.utility_score.replace('_', ' ')}): advantage retained")
    axis.set_title(f"{MODALITIES[modality]}: {threat}")
    axis.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    figure.tight_layout()
    label_points(axis, labels_x, labels_y, labels, colors=colors, fontsize=6)
    return figure


def plot_examples(outcome: Outcome):
    """The first member image of each modality and its release by every method at its middle knob value (and
    the two ends)."""
    rows = list(outcome.modalities)
    columns = max(len(_example_labels(outcome, name)) for name in rows)
    figure, axes = plt.subplots(len(rows), columns, figsize=(1.45 * columns, 1.7 * len(rows)), squeeze=False)
    for row, name in enumerate(rows):
        modality = outcome.modalities[name]
        for column, axis in enumerate(axes[row]):
            axis.axis("off")
            labels = _example_labels(outcome, name)
            if column >= len(labels):
                continue
            image = modality.examples[labels[column]]
            axis.imshow(image[..., 0] if image.shape[2] == 1 else image, cmap="gray", vmin=0, vmax=255)
            axis.set_title(labels[column], fontsize=6.5)
    figure.tight_layout()
    return figure


def _example_labels(outcome: Outcome, modality: str) -> list[str]:
    """no change, then each method at its middle knob value, then the constant image."""
    settings = outcome.modalities[modality].settings
    chosen = [METHOD_LABELS[NO_CHANGE]]
    for method in dict.fromkeys(setting.method for setting in settings):
        if method in (NO_CHANGE, CONSTANT):
            continue
        sweep = [setting for setting in settings if setting.method == method]
        chosen.append(sweep[len(sweep) // 2].label)
    return chosen + [METHOD_LABELS[CONSTANT]]
