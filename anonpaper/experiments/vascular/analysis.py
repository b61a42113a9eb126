"""Tables of the vascular chapter: the paper's numbers (Zhao et al., Biomedical Optics Express 2023, Tables 2 and
3) beside ours, the contribution scores, the sweep over edit strengths and the trade-off score (Eq. 14)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from anonpaper.experiments.claims import instrument_passes
from anonpaper.experiments.vascular.pipeline import DR_CHECK, LOWRANK, METHODS, OURS, RESEFA, STYLESPACE, Outcome
from anonpaper.methods.jacobian_edit import tradeoff_curves

# Paper Table 2 (alpha = 0.5, 1,000 ODIR-5K test images): FID, LPIPS, FS_SIFT, FS_SR, RROI, AMS.
TABLE2_METRICS = ("fd", "lpips", "fs_sift", "fs_sr", "rroi", "ams")
# Our measure in the place of each paper metric: FD on the vessel U-Net's features (not Inception's), and the
# vessel U-Net's feature distance (paper 1's domain "LPIPS" form, not the perceptual LPIPS of the paper's tables).
OUR_KEYS = {"lpips": "unet_distance"}
OUR_NAMES = {"fd": "FD (vessel U-Net)", "lpips": "U-Net feature distance"}
PAPER_TABLE2 = {
    STYLESPACE: (23.604, 0.123, 0.676, 0.597, 0.441, 0.990),
    LOWRANK: (46.486, 0.255, 0.073, 0.206, 0.160, 0.776),
    RESEFA: (37.542, 0.241, 0.191, 0.274, 0.230, 0.948),
    OURS: (26.952, 0.156, 0.162, 0.271, 0.472, 0.986),
}
# Paper Table 3 (generated vs real): FID, LPIPS, MSE, SWD.
TABLE3_METRICS = ("fd", "lpips", "mse", "swd")
PAPER_TABLE3 = {
    "plain": (15.279, 0.557, 0.406, 47.109),
    "+vessel": (12.380, 0.540, 0.363, 43.837),
    "+lesion": (12.171, 0.480, 0.347, 42.014),
    "+both": (9.382, 0.457, 0.283, 39.776),
}
PAPER_NAMES = {"fd": "FID", "lpips": "LPIPS", "fs_sift": "FS_SIFT", "fs_sr": "FS_SR", "rroi": "RROI", "ams": "AMS",
               "mse": "MSE", "swd": "SWD"}
# Beyond the paper (the lesion utility): the DR classifier's agreement and kappa between image and edit.
DR_COLUMNS = {"dr_agreement": "DR agreement", "dr_qwk": "DR QWK"}


def missing_reasons(table: pd.DataFrame) -> dict[str, str]:
    """Why a cell of :func:`table2` or :func:`sweep_table` can be empty, per column (for ``show_table(missing=)``):
    the paper reports no such number; RROI is undefined when the originals have no vessel pixel; a baseline that
    found no direction has no edit."""
    reasons = {}
    for column in table.columns:
        if str(column).endswith("paper"):
            reasons[column] = "not in the paper"
        elif str(column).lower().startswith("rroi"):
            reasons[column] = "no vessel pixel in the originals"
        elif str(column).startswith("rank") or str(column).startswith("rank-1"):
            reasons[column] = "generated images have no second image of their identity to find"
        elif str(column).lower().startswith("dr"):
            reasons[column] = "no DR classifier (no DR label in the data) or no edit"
        else:
            reasons[column] = "no edit"
    return reasons


def generator_table(outcome: Outcome) -> pd.DataFrame:
    """The generator this run edited: config, resolution, S channels, source and kimg."""
    info = dict(outcome.generator)
    info["generators_profile"] = outcome.config.generators_profile
    return pd.DataFrame([{"property": key, "value": str(value)} for key, value in info.items() if value != ""])


def instruments_table(outcome: Outcome) -> pd.DataFrame:
    """Every instrument's held-out check, and the vessel check of generated images (the Jacobian's instrument),
    with ``check``: whether the value passes its floor (a row whose measure says "ceiling" passes at or under it;
    rows without a floor are information)."""
    vessels, config = outcome.vessels, outcome.config
    extra = [{"instrument": "vessel U-Net on generated images", "measure": "vessel-pixel fraction, generated / real",
              "value": vessels["ratio"], "floor": config.min_vessel_ratio},
             {"instrument": "vessel U-Net on generated images",
              "measure": "vessel-pixel fraction, generated / real (ceiling: at most the floor)",
              "value": vessels["ratio"], "floor": 1 / config.min_vessel_ratio},
             {"instrument": "vessel U-Net on generated images", "measure": "vessel-pixel fraction, generated",
              "value": vessels["generated"], "floor": float("nan")},
             {"instrument": "vessel U-Net on real images", "measure": "vessel-pixel fraction, real (resampled like "
                                                                      "the generator's images)",
              "value": vessels["real"], "floor": float("nan")},
             {"instrument": "vessel U-Net on real images", "measure": "vessel-pixel fraction, real (cohort size)",
              "value": vessels["real_native"], "floor": float("nan")},
             {"instrument": "vessel masks of the T score images", "measure": "share of images with no vessel "
                                                                             "pixel (fallback mask; ceiling)",
              "value": vessels["fallback_masks"] / vessels["T"], "floor": config.max_empty_masks}]
    frame = pd.concat([outcome.instruments, pd.DataFrame(extra)], ignore_index=True)

    def check(row) -> str:
        floor = float(row["floor"]) if row["floor"] is not None else np.nan
        if not np.isfinite(floor):
            return ""
        ceiling = "ceiling" in str(row["measure"])
        if instrument_passes(row["value"], floor, not ceiling, row.get("seed_sd", 0.0), row.get("seeds", 1)):
            return "passes"
        if not np.isfinite(float(row["value"])):
            return "not measured"
        return "above its ceiling" if ceiling else "under its floor"

    frame["check"] = [check(row) for row in frame.to_dict("records")]
    return frame


def top_channels_table(outcome: Outcome, count: int | None = None) -> pd.DataFrame:
    """The best channels by contribution score (Eq. 10), with the score's SE over the T images."""
    count = count or outcome.config.grid_channels
    return outcome.channels.head(count)[["rank", "index", "layer", "channel", "score", "score_se"]]


def layer_table(outcome: Outcome, top: int = 10) -> pd.DataFrame:
    """Per style layer: channels, mean / median / max contribution score, and how many of the ``top`` best."""
    frame = outcome.channels
    best = set(frame.head(top)["index"])
    rows = []
    for layer in dict.fromkeys(frame.sort_values("index")["layer"]):
        part = frame[frame["layer"] == layer]
        rows.append({"layer": layer, "channels": len(part), "mean_score": part["score"].mean(),
                     "median_score": part["score"].median(), "max_score": part["score"].max(),
                     f"in_top_{top}": int(part["index"].isin(best).sum())})
    return pd.DataFrame(rows)


def table2(outcome: Outcome, image_set: str = "generated", alpha: float | None = None) -> pd.DataFrame:
    """Paper Table 2 beside ours: per method at ``alpha`` (default the config's ``table_alpha``), each metric as
    ``<metric>`` (ours) and ``<metric> paper``, where the paper's FID and LPIPS stand our FD and U-Net feature
    distance on the vessel U-Net (:data:`OUR_NAMES`); RROI also over the RROI of an even change (1 = the edit is no
    more on the vessels than elsewhere); beside RROI and AMS the DR classifier's agreement and kappa with their SEs
    (no paper number: the paper has no DR classifier); our rank-1 re-identification and matched step."""
    alpha = outcome.config.table_alpha if alpha is None else alpha
    rows = []
    for method in METHODS:
        row = outcome.row(image_set, method, alpha)
        entry = {"method": method}
        for position, metric in enumerate(TABLE2_METRICS):
            entry[OUR_NAMES.get(metric, PAPER_NAMES[metric])] = row.get(OUR_KEYS.get(metric, metric), np.nan)
            paper = PAPER_TABLE2.get(method)
            entry[f"{PAPER_NAMES[metric]} paper"] = paper[position] if paper else np.nan
            if metric == "rroi":
                entry["RROI / even change"] = row.get("rroi_area", np.nan)
        for metric, name in DR_COLUMNS.items():
            entry[name] = row.get(metric, np.nan)
            entry[f"{name} SE"] = row.get(f"{metric}_se", np.nan)
        entry["rank-1 re-id"] = row.get("rank1", np.nan)
        entry["step"] = row.get("step", np.nan)
        entry["note"] = row.get("error", "") or ""
        rows.append(entry)
    return pd.DataFrame(rows)


def sweep_table(outcome: Outcome, image_set: str = "generated") -> pd.DataFrame:
    """Every method at every strength on one image set: the metrics with their standard errors."""
    columns = ["method", "alpha", "step", "change", "fd", "unet_distance", "fs_sift", "fs_sift_se", "fs_sift_missing",
               "fs_sr", "fs_sr_se", "rroi", "rroi_se", "rroi_median", "rroi_unbounded", "rroi_area", "ams",
               "dr_agreement", "dr_agreement_se", "dr_qwk", "dr_qwk_se", "rank1", "rank1_se", "n"]
    frame = outcome.sweep[outcome.sweep["image_set"] == image_set]
    return frame[[column for column in columns if column in frame.columns]].reset_index(drop=True)


TRADEOFF_METRICS = ("fs_sift", "fs_sr", "rroi", "ams")


def tradeoff_table(outcome: Outcome, image_set: str = "generated", alpha: float | None = None) -> pd.DataFrame:
    """The trade-off score of Eq. 14, ``(1 - eta) (1 - IDsim) + eta Lesionsim``, per method (columns) and eta (rows),
    min-max normalised across the methods that have all four metrics at ``alpha``; the paper's Table 2 gives the
    paper's curves (``<method> paper``). A metric with one value for every method drops out of the score
    (:func:`tradeoff_inputs` says which)."""
    alpha = outcome.config.table_alpha if alpha is None else alpha
    etas = np.linspace(0, 1, outcome.config.eta_steps)
    ours = {}
    for method in METHODS:
        row = outcome.row(image_set, method, alpha)
        values = {key: row.get(key, np.nan) for key in TRADEOFF_METRICS}
        if all(np.isfinite(value) for value in values.values()):
            ours[method] = values
    frame = pd.DataFrame({"eta": etas})
    if len(ours) >= 2:
        for method, curve in tradeoff_curves(ours, etas).items():
            frame[method] = curve
    paper = {method: dict(zip(TABLE2_METRICS, values)) for method, values in PAPER_TABLE2.items()}
    for method, curve in tradeoff_curves(paper, etas).items():
        frame[f"{method} paper"] = curve
    return frame


def tradeoff_inputs(outcome: Outcome, image_set: str = "generated", alpha: float | None = None) -> pd.DataFrame:
    """The four metrics Eq. 14 normalises, per method at ``alpha``, with their range across the methods: a metric
    with the same value for every method (e.g. AMS = 1 everywhere when the exudate detector finds nothing) is
    mapped to 0 for all of them by the min-max scaling, so it drops out of the score; ``in score`` says so."""
    alpha = outcome.config.table_alpha if alpha is None else alpha
    rows = []
    values = {method: outcome.row(image_set, method, alpha) for method in METHODS}
    for metric in TRADEOFF_METRICS:
        entry = {"metric": PAPER_NAMES[metric]}
        column = [float(values[method].get(metric, np.nan)) for method in METHODS]
        entry.update({method: value for method, value in zip(METHODS, column)})
        finite = [value for value in column if np.isfinite(value)]
        entry["range"] = max(finite) - min(finite) if len(finite) >= 2 else np.nan
        entry["in score"] = ("yes" if entry["range"] > 0 else
                             "no: the same for every method, so min-max scaling maps it to 0 and it drops out"
                             if np.isfinite(entry["range"]) else "no: undefined")
        rows.append(entry)
    return pd.DataFrame(rows)


def dropped_tradeoff_metrics(outcome: Outcome, image_set: str = "generated") -> list[str]:
    """Names of the Eq. 14 metrics that drop out of this run's trade-off score (constant or undefined)."""
    frame = tradeoff_inputs(outcome, image_set)
    return frame.loc[frame["in score"] != "yes", "metric"].tolist()


def references_table(outcome: Outcome) -> pd.DataFrame:
    """The levels an edit's numbers are read against: FS_SIFT and FS_SR of an unedited image with itself (about 1:
    any edit undercuts it), of two photographs of the same eye (the level an edit must fall under to
    de-identify) and of two different eyes; and RROI of an even change (area-normalised RROI 1)."""
    references = outcome.references
    rows = []
    for metric in ("fs_sift", "fs_sr"):
        unedited = outcome.row("generated", "unedited", 0.0)
        rows.append({"measure": PAPER_NAMES[metric], "reference": "unedited generated image with itself",
                     "value": unedited.get(metric, np.nan), "SE": unedited.get(f"{metric}_se", np.nan),
                     "pairs": unedited.get("n", np.nan)})
        for kind, label in (("same", "two real photographs of the same eye"),
                            ("different", "real photographs of two different eyes")):
            rows.append({"measure": PAPER_NAMES[metric], "reference": label,
                         "value": references.get(f"{metric}_{kind}", np.nan),
                         "SE": references.get(f"{metric}_{kind}_se", np.nan),
                         "pairs": references.get(f"{metric}_{kind}_n", np.nan)})
    rows.append({"measure": "RROI / even change", "reference": "a change spread evenly over the image", "value": 1.0,
                 "SE": np.nan, "pairs": np.nan})
    return pd.DataFrame(rows)


def table3(outcome: Outcome) -> pd.DataFrame:
    """Paper Table 3 beside ours: the loss ablation (empty when it was not run)."""
    if outcome.ablation.empty:
        return pd.DataFrame()
    rows = []
    for row in outcome.ablation.to_dict("records"):
        entry = {"variant": row["variant"], "kimg": row["kimg"]}
        if "start_kimg" in row:  # continued from the edited generator's checkpoint: how far, and which network
            entry["from kimg"], entry["network"] = row["start_kimg"], row["network"]
        if "fd_attacker" in row:
            entry["FD (attacker embedding)"] = row["fd_attacker"]
            entry["FD (attacker embedding) SE"] = row["fd_attacker_se"]
        for position, metric in enumerate(TABLE3_METRICS):
            name = OUR_NAMES.get(metric, PAPER_NAMES[metric])
            key = OUR_KEYS.get(metric, metric)
            entry[name] = row[key]
            if f"{key}_se" in row:
                entry[f"{name} SE"] = row[f"{key}_se"]
            entry[f"{PAPER_NAMES[metric]} paper"] = PAPER_TABLE3[row["variant"]][position]
        rows.append(entry)
    return pd.DataFrame(rows)


def speed_table(outcome: Outcome) -> pd.DataFrame:
    """The JVP contribution scores' speed in this run against plain synthesis of the same images."""
    speed = outcome.speed
    return pd.DataFrame([{"T images": speed["T"], "K channels": speed["K"], "JVP seconds": speed["seconds"],
                          "channel-images / s (JVP)": speed["channel_images_per_s"],
                          "images / s (plain forward)": speed["forward_images_per_s"],
                          "ratio (target >= 0.5)": speed["ratio"]}])


def seconds_table(outcome: Outcome) -> pd.DataFrame:
    """Wall seconds per stage of the run."""
    return pd.DataFrame([{"stage": stage, "seconds": value} for stage, value in outcome.seconds.items()])



def discussion(outcome: Outcome, claims) -> str:
    """The discussion's bullet points (markdown), every number from this run: the vessel instrument, the paper
    claims that did not reproduce or stayed undecided with their reasons, our Table 2 row beside the paper's, what
    the projection alone removes, and Table 3.

    Args:
        outcome: The run.
        claims: Its claims (:func:`~anonpaper.experiments.vascular.evaluate_claims` of ``outcome``).
    """
    alpha = outcome.config.table_alpha
    vessels = outcome.vessels
    lines = [f"- **Vessels in generated images.** The vessel U-Net finds a vessel-pixel fraction of "
             f"{vessels['generated']:.4f} in {vessels['n']} generated images against {vessels['real']:.4f} in as "
             f"many real ones resampled the same way ({vessels['fallback_masks']} of the {vessels['T']} score images "
             "had none). "
             + ("The instrument check failed: the contribution scores are scores of noise, and the claims on them "
                "are undecided, not refuted." if vessels["check"] else "The instrument check passed.")]
    instruments = instruments_table(outcome)
    failed = instruments[instruments["check"].isin(["under its floor", "above its ceiling", "not measured"])]
    if len(failed):
        lines.append("- **Instruments that miss their floor** (every claim resting on one is undecided): " + "; ".join(
            f"{row['instrument']}, {row['measure']}: {row['value']:.3f} ({row['check']} {row['floor']:g})"
            for row in failed.to_dict("records")) + ".")
    for claim in claims:
        if claim.kind == "paper" and claim.verdict != "holds":
            heading = "Not reproduced" if claim.verdict == "does not hold" else "Not confirmed (undecided)"
            lines.append(f"- **{heading}: {claim.id}.** {claim.reason}.")
    from anonpaper.experiments.vascular.claims import too_small

    small = too_small(claims)
    if small:
        lines.append("- **Too small to decide.** In these claims the paper's effect is smaller than the "
                     f"{2:g}-SE band this run resolves, whatever the outcome: " + "; ".join(small) + ".")
    ours = outcome.row("generated", OURS, alpha)
    if ours:
        paper = dict(zip(TABLE2_METRICS, PAPER_TABLE2[OURS]))
        constant = "AMS" in dropped_tradeoff_metrics(outcome)
        lines.append(f"- **Table 2, ours at alpha {alpha:g}** (paper in brackets): " + ", ".join(
            f"{name} {ours.get(OUR_KEYS.get(key, key), float('nan')):.3f} ({paper[key]:g})".replace("nan",
                                                                                                  "undefined")
            for key, name in (("fs_sift", "FS_SIFT"), ("fs_sr", "FS_SR"), ("rroi", "RROI"), ("ams", "AMS"),
                              ("lpips", "U-Net feature distance (paper: LPIPS)")))
            + "; our FD and feature distance are on the vessel U-Net's features and not comparable with the "
              "paper's FID and LPIPS."
            + (" AMS takes one value for every method and strength: it measures nothing here, decides no claim, "
               "and drops out of the Eq. 14 trade-off score." if constant else ""))
        references = outcome.references
        if references:
            lines.append(f"- **What de-identification means here.** Two photographs of the same eye keep FS_SIFT "
                         f"{references.get('fs_sift_same', np.nan):.3f} and FS_SR "
                         f"{references.get('fs_sr_same', np.nan):.3f} (two different eyes "
                         f"{references.get('fs_sift_different', np.nan):.3f} and "
                         f"{references.get('fs_sr_different', np.nan):.3f}); our edit at alpha {alpha:g} keeps "
                         f"{ours.get('fs_sift', np.nan):.3f} and {ours.get('fs_sr', np.nan):.3f} of its original, and "
                         f"its RROI is {ours.get('rroi_area', np.nan):.2f} times that of an even change. An edit "
                         "that leaves its original more similar than a second photograph of the same eye has not "
                         "de-identified it, and the lesion claims are decided only where the compared edits fall "
                         "under that level.")
    lines += _dr_lines(outcome)
    real = outcome.row("real", "unedited", 0.0)
    if real:
        target = outcome.row("real", "real image (not projected)", 0.0)
        lines.append(f"- **Projection and the attacker.** The attacker re-identifies {real['rank1']:.0%} of the "
                     f"unedited W+ projections of real test images against the other images of all test patients, "
                     f"and {target['rank1']:.0%} of the real images themselves: what the edit can add to privacy on "
                     "real images is bounded by what the projection already removes.")
    ablation = table3(outcome)
    if not ablation.empty:
        rows = ablation.to_dict("records")
        lines.append("- **Table 3.** FD on the vessel U-Net's taps by variant: "
                     + ", ".join(f"{row['variant']} {row['FD (vessel U-Net)']:.1f}" for row in rows)
                     + "; on the attacker's embedding: "
                     + ", ".join(f"{row['variant']} {row['FD (attacker embedding)']:.2f}" for row in rows)
                     + f" (paper FID: plain {PAPER_TABLE3['plain'][0]}, +both {PAPER_TABLE3['+both'][0]}).")
    if outcome.generator_config is not None and not outcome.generator_config.is_phantom:
        vessels = ("the DRIVE copy" if outcome.generator_config.vessel_data_root
                   else "the fundus phantom's vessel masks")
        lines.append(f"- **Real data.** The generator, the projector's held-out images, the attacker and the DR "
                     f"classifier used {outcome.generator['data']}; the vessel U-Net learned {vessels}, the "
                     "hard-exudate U-Net and the keypoint detector the phantom: their numbers on real photographs "
                     "carry that domain gap.")
    return "\n".join(lines)


def _dr_lines(outcome: Outcome) -> list[str]:
    """The discussion's DR-utility bullet: the classifier's check and each method's agreement at the Table 2
    strength on generated images."""
    checks = outcome.instruments
    rows = checks[checks["measure"] == DR_CHECK] if "measure" in checks else checks.iloc[:0]
    if rows.empty:
        return []
    check = rows.iloc[0]
    alpha = outcome.config.table_alpha
    agreements = [f"{method} {outcome.row('generated', method, alpha).get('dr_agreement', np.nan):.0%}"
                  for method in METHODS]
    verdict = ("passes its check" if check["value"] >= check["floor"] else "fails its check, so the DR utility "
               "decides nothing")
    return [f"- **DR utility.** The {check['instrument']} reaches QWK {check['value']:.3f} (floor "
            f"{check['floor']:g}) and {verdict}. Generated images whose predicted class the edit at alpha "
            f"{alpha:g} keeps: " + ", ".join(agreements).replace("nan%", "undefined") + "."]


__all__ = ["DR_COLUMNS", "PAPER_TABLE2", "PAPER_TABLE3", "discussion", "dropped_tradeoff_metrics", "generator_table",
           "instruments_table", "layer_table", "missing_reasons", "references_table", "seconds_table", "speed_table",
           "sweep_table", "table2", "table3", "top_channels_table", "tradeoff_inputs", "tradeoff_table"]
