"""Figures of the k-SALSA chapter: clusters with their releases, inversions, and fidelity / utility / privacy
against k for the three methods."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from anonpaper.experiments.k_salsa.pipeline import EXAMPLE_MEMBERS, METHODS, Outcome

COLORS = {"k-same pixel": "C0", "centroid": "C1", "k-SALSA": "C2", "real test": "grey"}


def _show(axis, image: np.ndarray | None, title: str = "") -> None:
    axis.set_xticks([])
    axis.set_yticks([])
    if image is None:
        axis.axis("off")
        return
    axis.imshow(np.transpose(np.asarray(image), (1, 2, 0)).clip(0, 1))
    if title:
        axis.set_title(title, fontsize=7)


def plot_clusters(outcome: Outcome):
    """For each k, a few clusters: up to five members, then the k-same pixel average, the latent centroid and the
    k-SALSA (aligned) image released for that cluster."""
    rows = [(k, index) for k, shown in outcome.examples.items() for index in range(len(shown["members"]))]
    columns = EXAMPLE_MEMBERS + len(METHODS)
    figure, axes = plt.subplots(len(rows), columns, figsize=(1.15 * columns, 1.25 * len(rows)), squeeze=False)
    for r, (k, index) in enumerate(rows):
        shown = outcome.examples[k]
        members = shown["members"][index]
        for c in range(EXAMPLE_MEMBERS):
            _show(axes[r, c], members[c] if c < len(members) else None,
                  f"member {c + 1}" if r == 0 and c < len(members) else "")
        for c, method in enumerate(METHODS):
            _show(axes[r, EXAMPLE_MEMBERS + c], shown[method][index], method if r == 0 else "")
        axes[r, 0].set_ylabel(f"k={k}\n{shown['sizes'][index]} members", fontsize=7)
        if axes[r, 0].axison is False:  # a cluster shown without members keeps its label
            axes[r, 0].axis("on")
    figure.suptitle("Clusters: members (first five), k-same pixel average, latent centroid, k-SALSA", fontsize=9)
    figure.tight_layout()
    return figure


def plot_reconstructions(outcome: Outcome):
    """Private images (top row) and their W+ reconstructions ``G(w)`` by each inversion (one row each)."""
    rows = list(outcome.reconstructions.items())
    columns = len(rows[0][1])
    figure, axes = plt.subplots(len(rows), columns, figsize=(1.2 * columns, 1.3 * len(rows) + 0.3), squeeze=False)
    for r, (name, images) in enumerate(rows):
        for c in range(columns):
            _show(axes[r, c], images[c])
        used = " (used)" if name == outcome.inversion["inversion"] else ""
        axes[r, 0].set_ylabel(name.replace("+", "+\n") + used, fontsize=7)
    figure.suptitle("Private images and their W+ reconstructions", fontsize=9)
    figure.tight_layout()
    return figure


def _series(axis, outcome: Outcome, column: str, methods, error: str | None = None) -> None:
    frame = outcome.results
    for method in methods:
        part = frame[frame["method"] == method].sort_values("k")
        axis.errorbar(part["k"], part[column], yerr=None if error is None else 2 * part[error], marker="o",
                      capsize=2, label=method, color=COLORS[method])
    axis.set_xscale("log")
    ks = sorted(frame["k"].unique())
    axis.set_xticks(ks)
    axis.set_xticklabels([str(k) for k in ks])
    axis.minorticks_off()  # the log axis's minor labels (3 x 10^0 ...) would crowd the k ticks
    axis.set_xlabel("k")


def plot_tradeoffs(outcome: Outcome):
    """Fidelity (FD), utility (QWK on real test images) and privacy (membership and re-identification top-k
    precision, with chance) against k for the three methods; error bars are 2 SE."""
    figure, axes = plt.subplots(1, 4, figsize=(15, 3.4))
    _series(axes[0], outcome, "fd", list(METHODS) + ["real test"], "fd_se")
    axes[0].set_ylabel("FD-vessel-unet (lower = closer to real)")
    axes[0].set_title("fidelity", fontsize=9)
    _series(axes[1], outcome, "qwk", METHODS, "qwk_se")
    axes[1].axhline(outcome.reference["qwk"], ls="--", color="black", lw=1, label="trained on real")
    axes[1].set_ylabel("QWK on real test images")
    axes[1].set_title("utility", fontsize=9)
    for axis, prefix, title in ((axes[2], "membership", "membership inference (pair classifier)"),
                                (axes[3], "reid", "re-identification (SIFT matcher)")):
        _series(axis, outcome, f"{prefix}_precision", METHODS, f"{prefix}_se")
        chance = outcome.results[outcome.results["method"] == "k-SALSA"].sort_values("k")
        axis.plot(chance["k"], chance[f"{prefix}_chance"], ls="--", color="black", lw=1, label="chance")
        axis.set_ylabel("top-k precision (higher = more risk)")
        axis.set_title(title, fontsize=9)
    for axis in axes:
        axis.legend(fontsize=7)
    figure.tight_layout()
    return figure
