"""The Snow / VS-Snow chapter's tables and derived statistics: the paper's Tables 1-2 beside ours, the
privacy-utility trade-off at matched attacker accuracy, and the vessel share of Snow's damage."""

from __future__ import annotations

import numpy as np
import pandas as pd

from anonpaper.experiments.snow_vs_snow.pipeline import METHOD_LABELS, METHODS

# The paper's Table 1 (Snow) and Table 2 (VS-Snow), transcribed from the paper text
# (Sections 3-4 of the paper). Values in percent at p = 0 (original), 0.1, 0.3, 0.5.
# "sex_accuracy": attacker (sex classifier trained on original images) accuracy; "dr_f1": F1 of the DR classifier
# trained and tested on each version. The "Original" column is shared by both tables.
PAPER_P_VALUES = (0.0, 0.1, 0.3, 0.5)
PAPER_TABLES: dict[str, dict[str, dict[str, tuple[float, ...]]]] = {
    "snow": {
        "BRSET": {"sex_accuracy": (75.12, 64.99, 61.35, 52.15), "dr_f1": (82.6, 72.3, 69.6, 64.5)},
        "Diabetes Center": {"sex_accuracy": (83.33, 57.43, 51.00, 42.59), "dr_f1": (79.5, 65.8, 58.4, 55.9)},
    },
    "vs_snow": {
        "BRSET": {"sex_accuracy": (75.12, 67.7, 60.1, 58.1), "dr_f1": (82.6, 78.1, 75.0, 72.0)},
        "Diabetes Center": {"sex_accuracy": (83.33, 50.7, 47.9, 47.5), "dr_f1": (79.5, 75.9, 73.8, 74.6)},
    },
}




def scores_table(scores: pd.DataFrame, p_values: tuple[float, ...]) -> pd.DataFrame:
    """Our results as the paper lays them out: rows (method, task), columns Original and p = ... (percent)."""
    columns = ["Original"] + [f"p = {p:g}" for p in p_values]
    rows = []
    for method in METHODS:
        for task, label in (("sex", "Sex (Acc)"), ("dr", "DR (F1)")):
            values = [lookup(scores, "original", 0.0, task)] + [lookup(scores, method, p, task) for p in p_values]
            rows.append({"Method": METHOD_LABELS[method], "Classification": label,
                         **{column: 100 * value for column, value in zip(columns, values)}})
    return pd.DataFrame(rows).set_index(["Method", "Classification"])


def lookup(scores: pd.DataFrame, method: str, p: float, task: str, column: str = "value") -> float:
    selected = scores[(scores["method"] == method) & np.isclose(scores["p"], p) & (scores["task"] == task)]
    if len(selected) != 1:
        raise ValueError(f"scores hold {len(selected)} rows for method={method!r}, p={p}, task={task!r}")
    return float(selected[column].iloc[0])


def paper_vs_ours_table(scores: pd.DataFrame, method: str, dataset_label: str = "Phantom (ours)") -> pd.DataFrame:
    """The paper's Table 1 (``method="snow"``) or Table 2 (``"vs_snow"``) with our row block added.

    Columns are the union of the paper's and our p values (``Original``, ``p = 0.1``...), in percent; cells a
    source does not have are NaN. Rows: (Data, Classification).
    """
    if method not in METHODS:
        raise ValueError(f"method must be 'snow' or 'vs_snow', got {method!r}")
    ours_p = sorted(float(p) for p in scores.loc[scores["method"] == method, "p"].unique())
    all_p = sorted(set(PAPER_P_VALUES[1:]) | set(ours_p))
    columns = ["Original"] + [f"p = {p:g}" for p in all_p]
    rows = []
    for data, values in PAPER_TABLES[method].items():
        for key, label in (("sex_accuracy", "Sex (Acc)"), ("dr_f1", "DR (F1)")):
            paper = dict(zip(PAPER_P_VALUES, values[key]))
            rows.append({"Data": f"{data} (paper)", "Classification": label,
                         **{column: paper.get(p, np.nan) for column, p in zip(columns, [0.0] + all_p)}})
    for task, label in (("sex", "Sex (Acc)"), ("dr", "DR (F1)")):
        ours = {0.0: lookup(scores, "original", 0.0, task)}
        ours.update({p: lookup(scores, method, p, task) for p in ours_p})
        rows.append({"Data": dataset_label, "Classification": label,
                     **{column: 100 * ours[p] if p in ours else np.nan for column, p in zip(columns, [0.0] + all_p)}})
    return pd.DataFrame(rows).set_index(["Data", "Classification"])


def tradeoff_points(scores: pd.DataFrame, method: str) -> pd.DataFrame:
    """(p, attacker accuracy, DR macro-F1, their SEs) for ``method``, starting with the original images at p = 0."""
    ps = [0.0] + sorted(float(p) for p in scores.loc[scores["method"] == method, "p"].unique())
    versions = [("original" if p == 0 else method, p) for p in ps]
    columns = {"attacker_accuracy": ("sex", "value"), "dr_f1": ("dr", "value"),
               "attacker_accuracy_se": ("sex", "se"), "dr_f1_se": ("dr", "se")}
    return pd.DataFrame({"p": ps, **{name: [lookup(scores, version, p, task, column) for version, p in versions]
                                     for name, (task, column) in columns.items()}})


def _curve_gain(snow: tuple[np.ndarray, np.ndarray], vs: tuple[np.ndarray, np.ndarray],
                grid: int) -> tuple[float, float, float]:
    """(mean F1 difference VS-Snow - Snow over the overlap, low, high) of two (attacker accuracy, DR F1) curves.

    Each curve joins its points, ordered by attacker accuracy, by straight lines (a non-monotone curve is read in
    that order). The difference is NaN when the overlap is a single point."""
    low, high = max(snow[0].min(), vs[0].min()), min(snow[0].max(), vs[0].max())
    if not high > low:
        return float("nan"), float(low), float(high)
    privacy = np.linspace(low, high, grid)

    def utility(curve: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        order = np.argsort(curve[0], kind="stable")
        return np.interp(privacy, curve[0][order], curve[1][order])

    return float(np.mean(utility(vs) - utility(snow))), float(low), float(high)


def matched_privacy_gain(scores: pd.DataFrame, grid: int = 101, draws: int = 1000, seed: int = 0) -> dict[str, float]:
    """VS-Snow's DR macro-F1 minus Snow's at equal attacker accuracy, averaged over the accuracies both reach.

    Each method's (attacker accuracy, DR F1) points, including the original images, are joined by straight
    lines; the two curves are compared on ``grid`` accuracies spanning the overlap of their accuracy ranges.
    Positive = VS-Snow keeps more utility at matched privacy.

    The gain's SE propagates the scores' own SEs (the ``se`` column: patient bootstrap and training seeds) of
    both axes: ``draws`` times every score moves by a normal error of its SE, independently (the original images'
    point, shared by both curves, moves once), and the SE is the standard deviation of the recomputed gains over
    the draws in which the curves still overlap.

    Returns:
        ``{"gain", "se", "low", "high"}``: the mean F1 difference and its SE (both NaN when the overlap is a
        single point) and the overlap's attacker-accuracy range.
    """
    snow, vs = tradeoff_points(scores, "snow"), tradeoff_points(scores, "vs_snow")
    points = pd.concat([snow, vs.iloc[1:]], ignore_index=True)  # original, Snow's p, VS-Snow's p
    curves = (np.arange(len(snow)), np.concatenate([[0], np.arange(len(snow), len(points))]))
    x, y = points["attacker_accuracy"].to_numpy(), points["dr_f1"].to_numpy()
    gain, low, high = _curve_gain(*((x[index], y[index]) for index in curves), grid)
    if np.isnan(gain):
        return {"gain": gain, "se": float("nan"), "low": low, "high": high}
    rng = np.random.default_rng(seed)
    x_se, y_se = points["attacker_accuracy_se"].to_numpy(), points["dr_f1_se"].to_numpy()
    simulated = np.array([_curve_gain(*((x_draw[index], y_draw[index]) for index in curves), grid)[0]
                          for x_draw, y_draw in ((x + x_se * rng.standard_normal(len(x)),
                                                  y + y_se * rng.standard_normal(len(y))) for _ in range(draws))])
    simulated = simulated[~np.isnan(simulated)]
    se = float(np.std(simulated, ddof=1)) if len(simulated) > 1 else float("nan")
    return {"gain": gain, "se": se, "low": low, "high": high}


def vessel_share_of_drop(scores: pd.DataFrame, task: str, p: float) -> float:
    """(score drop under VS-Snow) / (score drop under Snow) at ``p``: the part of Snow's damage that obfuscating
    only the vessels already does. Near 1: the task's information sits in the vessels; near 0: elsewhere.
    NaN when Snow causes no drop."""
    original = lookup(scores, "original", 0.0, task)
    snow_drop = original - lookup(scores, "snow", p, task)
    vs_drop = original - lookup(scores, "vs_snow", p, task)
    return float(vs_drop / snow_drop) if snow_drop > 0 else float("nan")


def finite_mean(values: np.ndarray) -> float:
    """Mean of the finite entries (NaN when there are none), without NumPy's empty-slice warning."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    return float(values.mean()) if len(values) else float("nan")
