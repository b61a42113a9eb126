"""Tables and derived statistics of the trade-offs chapter: each release as one point per threat (privacy advantage
retained, utility advantage retained), the Pareto fronts, utility at matched privacy against blur, the ranking and
the lesson table.

Conventions. Every axis is *advantage retained* (:mod:`anonpaper.audit.scores`): 1 = the release keeps what the
originals give the attacker (or the task model), 0 = at chance. A point is better when its privacy value is lower
and its utility value higher. The two ends are exact by construction: *no change* sits at (1, 1) and the constant
image's attribute and utility scores at chance. The *diagonal* from (0, 0) to (1, 1) is what releasing a random
share of the images unchanged and the rest as the constant image would give (each score is then roughly that share
of the way from chance to the originals' value), so a method earns its keep only above it: its **gain** is utility
minus the worst threat's privacy value.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from anonpaper.experiments.tradeoffs.config import Config
from anonpaper.experiments.tradeoffs.pipeline import (CONSTANT, KNOB_SYMBOLS, METHOD_LABELS, MODALITIES, NO_CHANGE,
                                                      PAPER_METHODS, Outcome)

THREATS = ("linkage", "attribute", "membership")
THREAT_LABELS = {"linkage": "linkage (verification AUC)", "attribute": "sex inference (balanced accuracy)",
                 "membership": "membership (balanced accuracy)"}
# The methods whose utility at matched privacy is compared with blur's in the claims.
COMPARED_WITH_BLUR = ("snow", "vs-snow", "k-same-pixel", "k-salsa", "sspace-vessel-edit", "stylespace", "gmia",
                      "identity-swap")
REFERENCE = "blur"
# Where the vessel edits' channel ranking came from (vessel_edit_releases' details["ranking"]).
RANKING_SOURCES = {"cache": "stored by an earlier run, e.g. the vascular chapter", "computed": "found here"}


def headline(config: Config) -> dict[str, tuple[str, str]]:
    """The (group, score) each threat's axis reads; the utility's group is the modality's task (see
    :func:`utility_group`)."""
    return {"linkage": ("linkage", "verification_auc"), "attribute": ("attribute", config.attribute_attacker),
            "membership": ("membership", "balanced_accuracy")}


def utility_group(scores: pd.DataFrame) -> str:
    """The modality's task group in its score rows (the utility section's group other than image fidelity)."""
    groups = sorted(set(scores.loc[scores["section"] == "utility", "group"]) - {"image_fidelity", "segmentation"})
    if len(groups) != 1:
        raise ValueError(f"expected one task in the utility scores, found {groups}")
    return groups[0]


def _pick(scores: pd.DataFrame, group: str, score: str) -> pd.DataFrame:
    rows = scores[(scores["group"] == group) & (scores["score"] == score)]
    return rows.set_index("label")


def points(outcome: Outcome, modality: str) -> pd.DataFrame:
    """One row per release of ``modality``: method, knob, setting, and for each threat and the utility the value,
    chance, originals' value and advantage retained with SEs (``<axis>_ar``, ``<axis>_ar_se``, ...).

    Row order: as audited (the two ends, then each method along its knob).
    """
    config = outcome.config
    scores = outcome.modalities[modality].scores
    base = scores.drop_duplicates("label").set_index("label")[["method", "knob", "setting"]]
    frame = base.copy()
    axes = {**headline(config), "utility": (utility_group(scores), config.utility_score)}
    for axis, (group, score) in axes.items():
        picked = _pick(scores, group, score)
        for column, source in (("value", "value"), ("se", "se"), ("chance", "chance"), ("original", "original"),
                               ("original_se", "original_se"), ("ar", "advantage_retained"),
                               ("ar_se", "advantage_retained_se"), ("n", "n_patients")):
            frame[f"{axis}_{column}"] = picked[source].reindex(frame.index)
    return frame


def instruments(outcome: Outcome, modality: str) -> dict[str, dict[str, Any]]:
    """Each axis's instrument on the originals: its score, chance, the margin between them and the floor.

    Returns:
        ``{axis: {"name", "value" (original - chance), "floor", "passed", "original", "chance", "metric"}}`` for
        the three threats and the utility.
    """
    config = outcome.config
    frame = points(outcome, modality)
    row = frame.loc[METHOD_LABELS[NO_CHANGE]]
    scores = outcome.modalities[modality].scores
    task = utility_group(scores)
    result = {}
    for axis in (*THREATS, "utility"):
        original, chance = float(row[f"{axis}_original"]), float(row[f"{axis}_chance"])
        floor = config.utility_min_advantage if axis == "utility" else config.attacker_min_advantage
        if axis == "utility":
            name = f"{MODALITIES[modality]} {task} task model ({config.utility_score}) on the originals, minus chance"
        else:
            name = f"{MODALITIES[modality]} {THREAT_LABELS[axis]} attack on the originals, minus chance"
        margin = original - chance
        result[axis] = {"name": name, "value": margin, "floor": float(floor),
                        "passed": bool(math.isfinite(margin) and margin >= floor), "original": original,
                        "chance": chance}
    return result


def instruments_table(outcome: Outcome) -> pd.DataFrame:
    """The instruments of both modalities with their floors (one row per modality and axis)."""
    rows = []
    for modality in outcome.modalities:
        for axis, item in instruments(outcome, modality).items():
            rows.append({"modality": MODALITIES[modality], "axis": "utility" if axis == "utility" else
                         THREAT_LABELS[axis], "originals": item["original"], "chance": item["chance"],
                         "margin over chance": item["value"], "floor": item["floor"], "passed": item["passed"]})
    return pd.DataFrame(rows)


def pareto_front(privacy: np.ndarray, utility: np.ndarray) -> np.ndarray:
    """Boolean mask of the points no other point dominates (lower or equal privacy and higher or equal utility,
    one of them strictly); points with a NaN coordinate are never on the front.

    Example:
        >>> pareto_front(np.array([0.0, 0.5, 0.6, 1.0]), np.array([0.0, 0.8, 0.7, 1.0])).tolist()
        [True, True, False, True]
    """
    privacy, utility = np.asarray(privacy, float), np.asarray(utility, float)
    valid = np.isfinite(privacy) & np.isfinite(utility)
    front = valid.copy()
    for index in np.flatnonzero(valid):
        others = valid & (np.arange(len(privacy)) != index)
        dominated = others & (privacy <= privacy[index]) & (utility >= utility[index]) & \
            ((privacy < privacy[index]) | (utility > utility[index]))
        front[index] = not dominated.any()
    return front


def _reference_curve(frame: pd.DataFrame, threat: str, reference: str) -> np.ndarray:
    """(P, 4) the reference method's points with *no change* added, ordered by privacy: privacy advantage retained,
    its SE, utility advantage retained, its SE (missing SEs read 0; points without both values are left out)."""
    reference_rows = frame[(frame["method"] == reference) | (frame["method"] == NO_CHANGE)]
    curve = reference_rows[[f"{threat}_ar", f"{threat}_ar_se", "utility_ar", "utility_ar_se"]].to_numpy(float)
    curve = curve[np.all(np.isfinite(curve[:, [0, 2]]), axis=1)]
    curve = curve[np.argsort(curve[:, 0], kind="stable")]
    curve[:, [1, 3]] = np.nan_to_num(curve[:, [1, 3]])
    return curve


def reference_range(frame: pd.DataFrame, threat: str, reference: str = REFERENCE) -> tuple[float, float]:
    """The privacy values for ``threat`` that :func:`matched_gains` can match: the lowest and highest of the
    reference's curve (*no change* included), or NaNs when the curve has fewer than two points."""
    curve = _reference_curve(frame, threat, reference)
    return (float(curve[0, 0]), float(curve[-1, 0])) if len(curve) >= 2 else (float("nan"), float("nan"))


def matched_gains(frame: pd.DataFrame, method: str, threat: str, reference: str = REFERENCE) -> pd.DataFrame:
    """Utility of ``method`` minus the reference method's at the same privacy value for ``threat``.

    The reference's curve is its points ordered by privacy, with *no change* added at (1, 1) (blur at sigma 0 is no
    change); its utility is interpolated linearly at each of the method's privacy values inside the curve's range
    (points outside are not matched). The SE adds the method's utility SE, the interpolated reference SE
    (``(1 - t)^2 se_a^2 + t^2 se_b^2``) and the method's privacy SE times the curve's slope (the matching error).

    Returns:
        One row per matched point: ``label``, ``privacy``, ``utility``, ``reference_utility``, ``gain``, ``se``.
    """
    curve = _reference_curve(frame, threat, reference)
    rows = []
    if len(curve) < 2:
        return pd.DataFrame(rows, columns=["label", "privacy", "utility", "reference_utility", "gain", "se"])
    for label, row in frame[frame["method"] == method].iterrows():
        privacy, privacy_se = row[f"{threat}_ar"], row[f"{threat}_ar_se"]
        utility, utility_se = row["utility_ar"], row["utility_ar_se"]
        if not all(math.isfinite(value) for value in (privacy, utility, utility_se)):
            continue
        if not curve[0, 0] <= privacy <= curve[-1, 0]:
            continue
        right = int(np.searchsorted(curve[:, 0], privacy, side="left"))
        right = min(max(right, 1), len(curve) - 1)
        left = right - 1
        width = curve[right, 0] - curve[left, 0]
        weight = 0.0 if width <= 0 else (privacy - curve[left, 0]) / width
        slope = 0.0 if width <= 0 else (curve[right, 2] - curve[left, 2]) / width
        reference_utility = (1 - weight) * curve[left, 2] + weight * curve[right, 2]
        variance = (utility_se ** 2 + (1 - weight) ** 2 * curve[left, 3] ** 2 + weight ** 2 * curve[right, 3] ** 2
                    + slope ** 2 * (privacy_se if math.isfinite(privacy_se) else 0.0) ** 2)
        rows.append({"label": label, "privacy": privacy, "utility": utility, "reference_utility": reference_utility,
                     "gain": utility - reference_utility, "se": math.sqrt(variance)})
    return pd.DataFrame(rows, columns=["label", "privacy", "utility", "reference_utility", "gain", "se"])


def _worst_threat(row: pd.Series, usable: list[str]) -> tuple[str, float, float]:
    """The threat with the largest privacy value (the leakiest) among ``usable``, its value and SE."""
    candidates = [(threat, row[f"{threat}_ar"], row[f"{threat}_ar_se"]) for threat in usable
                  if math.isfinite(row[f"{threat}_ar"])]
    if not candidates:
        return "", float("nan"), float("nan")
    return max(candidates, key=lambda item: item[1])


def usable_threats(outcome: Outcome, modality: str) -> list[str]:
    """Threats whose attack beats chance on the originals by its floor (the others have no advantage to retain)."""
    return [threat for threat, item in instruments(outcome, modality).items() if threat != "utility" and item["passed"]]


def ranking_table(outcome: Outcome, modality: str) -> pd.DataFrame:
    """Every release of ``modality`` ranked by its gain over the diagonal (utility minus the worst usable threat's
    privacy value), with each threat's and the utility's advantage retained (SE columns beside) and the threats on
    whose Pareto front it lies."""
    frame = points(outcome, modality)
    usable = usable_threats(outcome, modality)
    fronts = {threat: pareto_front(frame[f"{threat}_ar"].to_numpy(), frame["utility_ar"].to_numpy())
              for threat in THREATS}
    rows = []
    for position, (label, row) in enumerate(frame.iterrows()):
        worst, worst_value, worst_se = _worst_threat(row, usable)
        gain = row["utility_ar"] - worst_value
        gain_se = math.sqrt(np.nansum([row["utility_ar_se"] ** 2, worst_se ** 2])) if math.isfinite(gain) else np.nan
        entry = {"release": label}
        for threat in THREATS:
            entry[threat] = row[f"{threat}_ar"]
            entry[f"{threat}_se"] = row[f"{threat}_ar_se"]
        entry |= {"utility": row["utility_ar"], "utility_se": row["utility_ar_se"], "worst threat": worst,
                  "gain": gain, "gain_se": gain_se,
                  "Pareto front": ", ".join(threat for threat in THREATS if fronts[threat][position]) or "-"}
        rows.append(entry)
    table = pd.DataFrame(rows)
    table = table.sort_values("gain", ascending=False, kind="stable", na_position="last").reset_index(drop=True)
    table.insert(0, "rank", np.arange(1, len(table) + 1))
    return table


def _shown(value: float) -> str:
    return f"{value:.2f}" if math.isfinite(value) else "n/a"


def lesson_table(outcome: Outcome, modality: str) -> pd.DataFrame:
    """Per method: what its knob moves (each threat's and the utility's advantage retained at its weakest and its
    strongest setting), its best gain over the diagonal, and the threats it leaves: those still retained beyond the
    chance margin (advantage retained - 2 SE > ``CHANCE_MARGIN``) at its strongest setting."""
    config = outcome.config
    frame = points(outcome, modality)
    ranking = ranking_table(outcome, modality).set_index("release")
    usable = usable_threats(outcome, modality)
    rows = []
    for method in dict.fromkeys(frame["method"]):
        if method in (NO_CHANGE, CONSTANT):
            continue
        chosen = frame[frame["method"] == method]
        weakest, strongest = chosen.iloc[0], chosen.iloc[-1]
        knob = f"{KNOB_SYMBOLS[chosen['knob'].iloc[0]]} {weakest['setting']:g} → {strongest['setting']:g}"
        entry = {"method": METHOD_LABELS[method], "knob": knob}
        for axis in (*THREATS, "utility"):
            entry[axis] = f"{_shown(weakest[f'{axis}_ar'])} → {_shown(strongest[f'{axis}_ar'])}"
        gains = ranking.loc[chosen.index, ["gain", "gain_se"]]
        best = gains["gain"].idxmax() if gains["gain"].notna().any() else None
        entry["best gain"] = (f"{gains.loc[best, 'gain']:+.2f} ± {gains.loc[best, 'gain_se']:.2f} ({best})"
                              if best is not None else "n/a")
        left = [threat for threat in usable
                if strongest[f"{threat}_ar"] - 2 * np.nan_to_num(strongest[f"{threat}_ar_se"]) > config.chance_margin]
        entry["threats left at its strongest setting"] = ", ".join(left) or "none"
        entry["paper method"] = method in PAPER_METHODS
        rows.append(entry)
    return pd.DataFrame(rows)


def seconds_table(outcome: Outcome) -> pd.DataFrame:
    """Seconds of each release and its audit (cached audits: the loading)."""
    rows = [{"modality": MODALITIES[name], "release": label, "seconds": seconds,
             "cached": label in modality.cached}
            for name, modality in outcome.modalities.items() for label, seconds in modality.seconds.items()]
    return pd.DataFrame(rows)


def _learned_groups(outcome: Outcome) -> list[tuple[list[str], dict[str, Any]]]:
    """``(method names, details)`` of the learned methods' releases; methods built together (the two vessel edits)
    share one details entry and are grouped."""
    groups: list[tuple[list[str], dict[str, Any]]] = []
    for method, details in outcome.gan.items():
        for names, seen in groups:
            if seen is details:
                names.append(method)
                break
        else:
            groups.append(([method], details))
    return groups


def learned_methods_markdown(outcome: Outcome) -> str:
    """One line per learned method (or group built together): its networks and what their inversion keeps."""
    profile = outcome.config.generators_profile
    lines = []
    for methods, details in _learned_groups(outcome):
        names = " and ".join(METHOD_LABELS[method] for method in methods)
        seconds = f"built in {details['seconds']:.0f} s"
        if "inversion_psnr" in details:  # k-SALSA
            text = (f"the generators chapter's `{profile}` fundus StyleGAN2 ({details['resolution']} px, "
                    f"{details['generator_kimg']:g} kimg, {details['generator_source']}); projector PSNR "
                    f"{details['inversion_psnr']:.1f} dB")
        elif "projection_psnr" in details:  # the vessel edits
            changes = ", ".join(f"{label} {value:.4f}" for label, value in details["change"].items())
            text = (f"the generators chapter's `{profile}` fundus StyleGAN2 ({details['resolution']} px, "
                    f"{details['generator_kimg']:g} kimg, {details['generator_source']}), vessel U-Net Dice "
                    f"{details['vessel_unet_dice']:.3f}, top channel {tuple(details['top_channel'])} (ranking "
                    f"{RANKING_SOURCES.get(details.get('ranking', ''), 'found here')}); projector PSNR "
                    f"{details['projection_psnr']:.1f} dB; mean absolute change of the edit ([0, 1] units): "
                    f"{changes}")
        elif "reconstruction_psnr" in details:  # GMIA
            cosines = ", ".join(f"m = {float(margin):g}: {value:.3f}" for margin, value in
                                details["final_cosine"].items())
            text = (f"the GMIA chapter's `{profile}` networks ({details['resolution']} px); reconstruction PSNR "
                    f"{details['reconstruction_psnr']:.1f} dB; mean final identity cosine to the original "
                    f"(E_id) {cosines}")
        else:  # the identity swap
            cosines = ", ".join(f"strength {float(strength):g}: {value:.3f}" for strength, value in
                                details["identity_cosine"].items())
            text = (f"the disentanglement chapter's `{profile}` chest X-ray network and identity VAE "
                    f"({details['image_size']} px); mean cosine of the decoded identity vector to the original "
                    f"{cosines}")
        lines.append(f"- **{names}:** {text}; {seconds}.")
    return "\n".join(lines) if lines else "No learned method ran (`GAN_METHODS` is empty)."


def learned_methods_metrics(outcome: Outcome) -> dict[str, float]:
    """The learned methods' inversion quality and build seconds, as ``gan/<method>/<name>`` metrics."""
    found: dict[str, float] = {}
    for methods, details in _learned_groups(outcome):
        for method in methods:
            for name in ("inversion_psnr", "projection_psnr", "reconstruction_psnr", "seconds"):
                if name in details:
                    found[f"gan/{method}/{name}"] = float(details[name])
    return found


def metrics(outcome: Outcome) -> dict[str, float]:
    """The record's metrics: per modality and release, each axis's advantage retained and SE, and each threat's
    originals' margin over chance (names ``<modality>/<method>[/<knob>=<value>]/<axis>_ar``)."""
    values: dict[str, float] = {}
    for modality in outcome.modalities:
        frame = points(outcome, modality)
        for _, row in frame.iterrows():
            name = row["method"] if not row["knob"] else f"{row['method']}/{row['knob']}={row['setting']:g}"
            for axis in (*THREATS, "utility"):
                values[f"{modality}/{name}/{axis}_ar"] = float(row[f"{axis}_ar"])
                values[f"{modality}/{name}/{axis}_ar_se"] = float(row[f"{axis}_ar_se"])
        for axis, item in instruments(outcome, modality).items():
            values[f"{modality}/instrument/{axis}_margin"] = float(item["value"])
        ranking = ranking_table(outcome, modality)
        values[f"{modality}/releases_above_diagonal"] = int((ranking["gain"] - 2 * ranking["gain_se"] > 0).sum())
    return values
