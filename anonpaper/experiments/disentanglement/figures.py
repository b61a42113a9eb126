"""The disentanglement chapter's figures (one function per figure, each returning the matplotlib figure)."""

from __future__ import annotations

import numpy as np

from anonpaper.experiments.disentanglement.analysis import COHORT_LABELS
from anonpaper.experiments.disentanglement.pipeline import Outcome
from anonpaper.experiments.plotting import label_points

EXAMPLE_ROWS = ("original", "target", "Reconstruction / Baseline", "Medical Replacement", "Identity Replacement",
                "anonymised: VAE with overall privacy", "anonymised: Averaging all identities")


# A row of generated images whose spread (mean absolute difference between its images) is under this share of
# the original row's looks like one template repeated: the grid's title names such rows.
TEMPLATE_SPREAD = 0.2


def _spread(images: np.ndarray) -> float:
    """Mean absolute difference between every pair of images in a row, as a share of the 0-255 range."""
    stack = np.asarray(images, dtype=float)
    if len(stack) < 2:
        return float("nan")
    pairs = [np.abs(stack[i] - stack[j]).mean() for i in range(len(stack)) for j in range(i + 1, len(stack))]
    return float(np.mean(pairs)) / 255.0


def _grid(rows: list[tuple[str, np.ndarray]], columns: int, title: str):
    """Rows of images (label, images); each label gives the row's spread across its images, and the title names
    the rows that look like one template (spread under TEMPLATE_SPREAD of the first row's)."""
    import matplotlib.pyplot as plt

    spreads = [_spread(np.asarray(images)[:columns]) for _, images in rows]
    figure, axes = plt.subplots(len(rows), columns, figsize=(1.6 * columns + 1.8, 1.6 * len(rows) + 0.3),
                                squeeze=False)
    for r, (label, images) in enumerate(rows):
        for c in range(columns):
            axis = axes[r, c]
            if c < len(images):
                axis.imshow(images[c], cmap="gray", vmin=0, vmax=255)
            axis.set_xticks([])
            axis.set_yticks([])
            if c == 0:
                shown = f"{label}\nspread {spreads[r]:.3f}" if np.isfinite(spreads[r]) else label
                axis.set_ylabel(shown, rotation=0, ha="right", va="center", fontsize=8)
    reference = spreads[0] if spreads else float("nan")
    template = [label for (label, _), spread in list(zip(rows, spreads))[1:]
                if np.isfinite(spread) and np.isfinite(reference) and spread < TEMPLATE_SPREAD * reference]
    note = (f"\nnearly one template across the columns (spread under {TEMPLATE_SPREAD:g} of the first row's): "
            + "; ".join(template)) if template else ""
    figure.suptitle(title + note, fontsize=10 if not note else 9)
    figure.tight_layout()
    return figure


def plot_examples(outcome: Outcome, cohort: str):
    """Test images (columns) as original, target, reconstruction, medical and identity replacement and
    anonymised (privacy VAE; average of all identities)."""
    shown = outcome.examples[cohort]
    rows = [(label.replace("anonymised: ", "anon.: "), shown[label]) for label in EXAMPLE_ROWS if label in shown]
    return _grid(rows, min(4, len(shown["original"])), COHORT_LABELS[cohort])


def plot_explanations(outcome: Outcome, cohort: str):
    """Case-based explanations: the query, its nearest training case by the medical vector, and the case with its
    identity replaced at each strength."""
    shown = outcome.explanations[cohort]
    order = ["query", "original case"] + [key for key in shown if key.startswith("strength")]
    return _grid([(key, shown[key]) for key in order], min(3, len(shown["query"])),
                 f"{COHORT_LABELS[cohort]}: explanations")


def plot_privacy_curve(outcome: Outcome):
    """Attacker rank-1 re-identification of the shown explanation (lower = more private) against the share of
    explanations in which the disease classifier reads the query's disease (higher = more useful), per cohort."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(COHORT_LABELS), figsize=(10, 4), squeeze=False)
    labelled = {}  # per axis: (x, y, label), placed once the layout is final so that no two overlap
    for axis, (cohort, label) in zip(axes[0], COHORT_LABELS.items()):
        frame = outcome.privacy[outcome.privacy["cohort"] == cohort]
        for row in frame.itertuples():
            name = "original case" if np.isnan(row.strength) else f"{row.strength:g}"
            marker = "s" if np.isnan(row.strength) else "o"
            axis.errorbar(100 * row.rank1, 100 * row.explanation_disease, xerr=200 * row.rank1_se,
                          yerr=200 * row.explanation_disease_se, fmt=marker, color="C1" if marker == "s" else "C0",
                          capsize=2)
            labelled.setdefault(axis, []).append((100 * row.rank1, 100 * row.explanation_disease,
                                                  name))
        chance = 100 * outcome.privacy_info[cohort]["chance_rank1"]
        axis.axvline(chance, ls="--", color="grey", lw=1, label="attacker chance")
        axis.set_xlabel("attacker rank-1 on the shown explanation (%)")
        axis.set_ylabel("query's disease read in the explanation (%)")
        axis.set_title(label)
        axis.legend(fontsize=7)
    figure.tight_layout()
    for axis, points in labelled.items():
        xs, ys, names = zip(*points)
        label_points(axis, xs, ys, names, fontsize=7)
    return figure


def plot_training(outcome: Outcome):
    """Validation score (mean of reconstruction SSIM, disease and identity accuracy) per epoch of the two main
    networks."""
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 3.5))
    for name, history in outcome.histories.items():
        if name.endswith("disentanglement network") and "val_score" in history:
            for column, style in (("val_ssim", ":"), ("val_disease_accuracy", "--"), ("val_identity_accuracy", "-.")):
                axis.plot(history["epoch"], history[column], style, label=f"{name.split(':')[0]} {column[4:]}")
    axis.set_xlabel("epoch")
    axis.set_ylabel("validation value")
    axis.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    return figure
