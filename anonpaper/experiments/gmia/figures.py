"""The chapter's figures: one function per figure, each returning its matplotlib figure."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from anonpaper.experiments.gmia.analysis import privacy_utility_points
from anonpaper.experiments.plotting import label_points
from anonpaper.experiments.gmia.pipeline import (BLUR, CO_RECON, E_RECON, ID_ONLY, PIXELATE, REAL, UT_ONLY, Outcome,
                                                 main_name)


def plot_examples(outcome: Outcome) -> plt.Figure:
    """Test images of several patients (columns): the original, both reconstructions, the anonymisations (main
    setting and loss ablations) and the matched-PSNR blur (rows)."""
    rows = [REAL, CO_RECON, E_RECON, UT_ONLY, ID_ONLY, outcome.main, BLUR, PIXELATE]
    rows = [name for name in rows if name in outcome.examples]
    columns = len(outcome.example_patients)
    figure, axes = plt.subplots(len(rows), columns, figsize=(1.3 * columns + 1.6, 1.3 * len(rows)), squeeze=False)
    for r, name in enumerate(rows):
        for c in range(columns):
            axis = axes[r, c]
            axis.imshow(outcome.examples[name][c], cmap="gray", vmin=0, vmax=255)
            axis.set_xticks([]), axis.set_yticks([])
            if c == 0:
                axis.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=8)
            if r == 0:
                axis.set_title(outcome.example_patients[c].replace("cxr-", ""), fontsize=7)
    figure.tight_layout()
    return figure


def plot_privacy_utility(outcome: Outcome) -> plt.Figure:
    """Outer linkability (fixed attacker: share of other patients' anonymisations farther from a real image than
    its own; 0.5 = unlinkable, 1 = always linked) against utility (macro AUROC of a classifier trained on the set; higher = more useful), error bars of two
    patient-bootstrap SEs; the margins of the ablation are joined by a line."""
    points = privacy_utility_points(outcome)
    figure, axis = plt.subplots(figsize=(6.5, 4.5))
    margins = [main_name(m) for m in outcome.config.margins if main_name(m) in points.index]  # loosest first
    line = points.loc[margins]
    axis.plot(line["own closer"], line["AUROC"], "-", color="tab:blue", alpha=0.5)
    for name, row in points.iterrows():
        color = "tab:blue" if name in margins else ("tab:gray" if name in (BLUR, PIXELATE) else "tab:orange")
        axis.errorbar(row["own closer"], row["AUROC"], xerr=2 * row["own closer SE"], yerr=2 * row["AUROC SE"],
                      fmt="o", color=color, capsize=2)
    real = outcome.utility.set_index("training set").loc[REAL, "AUROC"]
    axis.axhline(real, color="tab:green", linestyle="--", linewidth=1, label="trained on real images")
    axis.axvline(0.5, color="gray", linestyle=":", linewidth=1)
    axis.set_xlabel("outer linkability: own anonymisation closer than a stranger's (0.5 = unlinkable)")
    axis.set_ylabel("utility: macro AUROC on real test images")
    axis.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    label_points(axis, points["own closer"].tolist(), points["AUROC"].tolist(), [str(name) for name in points.index],
                 fontsize=7)
    return figure


def plot_optimisation(outcome: Outcome) -> plt.Figure:
    """Mean identity cosine (E_id, real vs anonymised) and utility loss over the optimisation steps of every
    setting, on the test images; the dashed lines mark the margins."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, curves in outcome.curves.items():
        steps = np.arange(1, len(curves["cosine"]) + 1)
        left.plot(steps, curves["cosine"], label=name)
        right.plot(steps, curves["utility"], label=name)
    for margin in outcome.config.margins:
        left.axhline(margin, color="gray", linestyle=":", linewidth=0.8)
    left.set_xlabel("Adam step"), left.set_ylabel("cos(E_id(x), E_id(G(w_A)))")
    right.set_xlabel("Adam step"), right.set_ylabel("L_ut (feature MSE)")
    right.set_yscale("symlog", linthresh=1e-4)
    left.legend(fontsize=7)
    figure.tight_layout()
    return figure


def plot_training(outcome: Outcome) -> plt.Figure:
    """Co-training losses (reconstruction MSE, domain LPIPS, adversarial; running mean over 20 steps) and the
    E-training loss per epoch."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    history = outcome.histories.get("co-training (E + S + D)", pd.DataFrame())
    for column, label in (("extra_mse", "MSE"), ("extra_perceptual", "domain LPIPS"), ("loss_g_adv", "adversarial G"),
                          ("loss_d", "D")):
        if column in history:
            values = pd.to_numeric(history[column], errors="coerce").dropna()
            left.plot(values.index, values.rolling(20, min_periods=1).mean(), label=label)
    left.set_xlabel("co-training step"), left.set_ylabel("loss"), left.set_yscale("log")
    left.legend(fontsize=8)
    encoder = outcome.histories.get("E-training (E, frozen generator)", pd.DataFrame())
    if "train_loss" in encoder:
        right.plot(encoder.get("epoch", pd.Series(range(1, len(encoder) + 1))), encoder["train_loss"], "o-")
    right.set_xlabel("E-training epoch"), right.set_ylabel("10 MSE + 10 domain LPIPS")
    figure.tight_layout()
    return figure
