"""The Snow / VS-Snow chapter's figures: the trade-off, example images and saliency maps."""

from __future__ import annotations

import numpy as np

from anonpaper.experiments.plotting import label_points
from anonpaper.experiments.snow_vs_snow.analysis import PAPER_P_VALUES, PAPER_TABLES, tradeoff_points
from anonpaper.experiments.snow_vs_snow.pipeline import METHOD_LABELS, METHODS, Outcome

METHOD_STYLE = {"snow": {"color": "tab:blue", "marker": "o"}, "vs_snow": {"color": "tab:orange", "marker": "s"}}


def plot_tradeoff(outcome: Outcome):
    """Privacy-utility trade-off: attacker accuracy (x, lower = more private) vs DR macro-F1 (y, higher = more
    useful), both methods, every p, the original images and the chance line; right panel the paper's numbers.

    Returns:
        The matplotlib Figure (created with pyplot, so a notebook shows it once at the end of the cell).
    """
    import matplotlib.pyplot as plt

    figure, (ours, paper) = plt.subplots(1, 2, figsize=(11, 4.4))
    labelled = []  # (x, y, label, colour): placed once the layout is final, so that no two overlap
    for method in METHODS:
        points = tradeoff_points(outcome.scores, method)
        errors = outcome.scores.set_index(["method", "p", "task"])["se"]
        x_error = [errors[("original" if p == 0 else method, p, "sex")] for p in points["p"]]
        ours.errorbar(100 * points["attacker_accuracy"], 100 * points["dr_f1"], xerr=100 * np.asarray(x_error),
                      yerr=100 * points["dr_f1_se"], label=METHOD_LABELS[method], capsize=2, lw=1.5,
                      **METHOD_STYLE[method])
        for _, row in points.iterrows():
            if row["p"] == 0 and labelled and labelled[0][2] == "original":
                continue  # both curves start at the original images: one label
            labelled.append((100 * row["attacker_accuracy"], 100 * row["dr_f1"],
                             "original" if row["p"] == 0 else f"p={row['p']:g}",
                             "black" if row["p"] == 0 else METHOD_STYLE[method]["color"]))
    ours.axvline(100 * outcome.chance, color="grey", ls="--", lw=1, label=f"chance ({100 * outcome.chance:.0f} %)")
    ours.set(title="Ours (phantom); bars: SE (test patients and training seeds)",
             xlabel="attacker accuracy on sex (%)  <- more private",
             ylabel="DR macro-F1 (%)  (higher = more useful)")
    ours.legend(fontsize=8)
    for (data, line_style) in (("BRSET", "-"), ("Diabetes Center", ":")):
        for method in METHODS:
            table = PAPER_TABLES[method][data]
            paper.plot(table["sex_accuracy"], table["dr_f1"], ls=line_style, label=f"{METHOD_LABELS[method]}, {data}",
                       **METHOD_STYLE[method])
    paper.axvline(50, color="grey", ls="--", lw=1, label="chance (50 %)")
    paper.set(title="Paper (Tables 1-2)", xlabel="attacker accuracy on sex (%)  <- more private",
              ylabel="DR F1 (%)")
    paper.legend(fontsize=7)
    figure.tight_layout()
    xs, ys, labels, colours = zip(*labelled)
    label_points(ours, xs, ys, labels, colours, fontsize=8)
    return figure


def plot_examples(outcome: Outcome):
    """One test image in every version (original, Snow and VS-Snow at each p) and its vessel mask."""
    import matplotlib.pyplot as plt

    p_values = outcome.config.p_values
    columns = 1 + len(p_values)
    figure, axes = plt.subplots(2, columns, figsize=(2.4 * columns, 5.0))
    axes[0, 0].imshow(outcome.examples["Original"])
    axes[0, 0].set_title("original", fontsize=9)
    # Fixed value range: a mask that marks every (or no) pixel must look white (black), not rescaled to grey.
    axes[1, 0].imshow(outcome.examples["vessels"], cmap="gray", vmin=0, vmax=1)
    check = outcome.segmenter.get("check")
    axes[1, 0].set_title(f"vessels ({outcome.segmenter['source']})" + ("\nFAILED CHECK" if check else ""),
                         fontsize=9, color="red" if check else "black")
    for row, method in enumerate(METHODS):
        for column, p in enumerate(p_values, start=1):
            axes[row, column].imshow(outcome.examples[f"{METHOD_LABELS[method]} p={p:g}"])
            axes[row, column].set_title(f"{METHOD_LABELS[method]}, p = {p:g}", fontsize=9)
    for axis in axes.flat:
        axis.axis("off")
    figure.tight_layout()
    return figure


def plot_saliency(outcome: Outcome):
    """Paper Fig. 2: test images with the gradient saliency of the sex attacker and of the DR classifier, and the
    vessel mask outline."""
    import matplotlib.pyplot as plt

    saliency = outcome.saliency
    count = len(saliency["images"])
    figure, axes = plt.subplots(count, 3, figsize=(8, 2.7 * count), squeeze=False)
    for row in range(count):
        axes[row, 0].imshow(saliency["images"][row])
        axes[row, 0].set_title("original", fontsize=9)
        for column, (key, label) in enumerate((("sex_maps", "sex attacker"), ("dr_maps", "DR classifier")), 1):
            axes[row, column].imshow(saliency[key][row], cmap="inferno", vmin=0, vmax=1)
            axes[row, column].contour(saliency["vessels"][row], levels=[0.5], colors="cyan", linewidths=0.4)
            enrichment = saliency[key.replace("maps", "enrichment")][row]
            axes[row, column].set_title(f"{label} (vessel enrichment {enrichment:.2f})", fontsize=8)
    for axis in axes.flat:
        axis.axis("off")
    figure.tight_layout()
    return figure
