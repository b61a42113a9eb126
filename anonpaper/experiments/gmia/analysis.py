"""The chapter's tables: ours beside the paper's (Tables 1-4 of Li, Ayache and Delingette, ISBI 2025).

The text of the paper lost the row labels of Tables 2-4; we read them from the sentences around the tables:
Table 2 (utility) rows are real, co-training and E-training reconstructions, then ``L_ut`` only, ``L_id`` only and
``L_id + L_ut``; Tables 3-4 rows are the co-training reconstruction, ``L_ut`` only, ``L_id`` only and
``L_id + L_ut`` (the text: adding ``L_ut`` raises the inner risk and lowers the outer risk; adding ``L_id`` lowers
the singling-out risk). The paper's margin for these rows is m = -0.7. Table 4 has two LC columns whose headers
were lost; the first is shown.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from anonpaper.experiments.display import format_value
from anonpaper.experiments.gmia.pipeline import (BLUR, CO_RECON, E_RECON, ID_ONLY, INDEPENDENT, PIXELATE, REAL,
                                                 UT_ONLY, Outcome, adaptive_name, main_name)

QUALITY_METRICS = ("PSNR", "SSIM", "IW-SSIM", "LPIPS (domain)")
PAPER_TABLE1 = {CO_RECON: {"PSNR": 24.319, "SSIM": 0.968, "IW-SSIM": 0.602, "LPIPS (domain)": 0.340},
                E_RECON: {"PSNR": 19.477, "SSIM": 0.936, "IW-SSIM": 0.363, "LPIPS (domain)": 0.446}}
PAPER_MARGIN = -0.7
# Table 2: accuracy, AP, AUROC, F1 (macro over the pathology labels, real test set).
PAPER_TABLE2 = {REAL: (0.740, 0.631, 0.774, 0.511), CO_RECON: (0.718, 0.586, 0.737, 0.451),
                E_RECON: (0.654, 0.472, 0.640, 0.307), UT_ONLY: (0.726, 0.600, 0.747, 0.493),
                ID_ONLY: (0.696, 0.559, 0.713, 0.424), main_name(PAPER_MARGIN): (0.713, 0.578, 0.737, 0.531)}
# Table 3: F1, accuracy, TAR, "FAR" (= 1 - TAR in the authors' code).
PAPER_TABLE3 = {("real", REAL): (0.983, 0.983, 0.966, 0.034),
                ("inner", CO_RECON): (0.611, 0.720, 0.441, 0.559), ("inner", UT_ONLY): (0.665, 0.748, 0.500, 0.500),
                ("inner", ID_ONLY): (0.855, 0.873, 0.746, 0.254),
                ("inner", main_name(PAPER_MARGIN)): (0.887, 0.899, 0.798, 0.202),
                ("outer", CO_RECON): (0.139, 0.075, 0.075, 0.925), ("outer", UT_ONLY): (0.136, 0.073, 0.073, 0.927),
                ("outer", ID_ONLY): (0.0, 0.0, 0.0, 1.0), ("outer", main_name(PAPER_MARGIN)): (0.0, 0.0, 0.0, 1.0)}
# Table 4: hidden rate, local cloaking (first LC column; the test set has 1,641 images).
PAPER_TABLE4 = {CO_RECON: (0.936, 41), UT_ONLY: (0.936, 41), ID_ONLY: (1.000, 1546),
                main_name(PAPER_MARGIN): (1.000, 1529)}
PAPER_MIA = {"attacker_training_accuracy": 0.968, "members_detected": 0.0}


def _paper(mapping: dict, key, index: int) -> float:
    return mapping[key][index] if key in mapping else np.nan


def table1(outcome: Outcome) -> pd.DataFrame:
    """Table 1: reconstruction fidelity of the two projection schemes on the test images, ours (with the
    patient-bootstrap SE) beside the paper's. PSNR in dB; LPIPS is the domain LPIPS of the cohort-trained lung
    U-Net (the paper: VGG LPIPS), so only its direction compares."""
    rows = []
    quality = outcome.quality.set_index(["set", "metric"])
    for scheme, label in ((CO_RECON, "Co-training"), (E_RECON, "E-training")):
        row = {"scheme": label}
        for metric in QUALITY_METRICS:
            row[metric] = quality.loc[(scheme, metric), "value"]
            row[f"{metric} SE"] = quality.loc[(scheme, metric), "se"]
            row[f"{metric} paper"] = PAPER_TABLE1[scheme][metric]
        rows.append(row)
    return pd.DataFrame(rows).set_index("scheme")


def quality_table(outcome: Outcome) -> pd.DataFrame:
    """Image quality of every set (reconstructions, anonymisations, baselines) against the real test images."""
    frame = outcome.quality.pivot(index="set", columns="metric", values="value")
    order = [name for name in outcome.quality["set"].unique()]
    return frame.loc[order, list(QUALITY_METRICS)]


def utility_table(outcome: Outcome) -> pd.DataFrame:
    """Table 2: a finding classifier trained on each training set, tested on the real test set (macro over the
    findings), ours beside the paper's (our reading of its unlabelled rows; margin -0.7)."""
    rows = []
    for row in outcome.utility.to_dict(orient="records"):
        name = row["training set"]
        rows.append({"training set": name, "accuracy": row["accuracy"], "AP": row["AP"], "AUROC": row["AUROC"],
                     "AUROC SE": row["AUROC_se"], "F1": row["F1"],
                     "accuracy paper": _paper(PAPER_TABLE2, name, 0), "AP paper": _paper(PAPER_TABLE2, name, 1),
                     "AUROC paper": _paper(PAPER_TABLE2, name, 2), "F1 paper": _paper(PAPER_TABLE2, name, 3)})
    return pd.DataFrame(rows).set_index("training set")


def linkability_table(outcome: Outcome, attacker: str = "fixed") -> pd.DataFrame:
    """Table 3 for one attacker: verification at its threshold. ``TAR``, ``F1``, ``accuracy`` and
    ``FAR as published`` (= 1 - TAR, the authors' column) follow the paper's protocol (outer risk: only the pairs of
    a real image and its own anonymisation); ``true FAR`` and ``AUC`` add the different-patient pairs."""
    frame = outcome.linkability
    rows = []
    for row in frame[frame["attacker"] == attacker].itertuples(index=False):
        key = (row.risk, row.set)
        rows.append({"risk": row.risk, "set": row.set, "F1": row.f1, "accuracy": row.accuracy, "TAR": row.tar,
                     "FAR as published": row.far_as_published, "true FAR": row.far, "AUC": row.auc,
                     "F1 paper": _paper(PAPER_TABLE3, key, 0), "accuracy paper": _paper(PAPER_TABLE3, key, 1),
                     "TAR paper": _paper(PAPER_TABLE3, key, 2), "FAR paper": _paper(PAPER_TABLE3, key, 3)})
    return pd.DataFrame(rows).set_index(["risk", "set"])


def attackers_table(outcome: Outcome) -> pd.DataFrame:
    """Every attacker on the sets it attacks: the fixed attacker (E_id's recipe, another seed), the independent one
    (another architecture) and each adaptive one (retrained on the set's anonymised training images): its outer TAR
    (own anonymisation accepted, with SE), the stranger acceptance, the threshold-free "own closer" share and outer
    AUC (0.5 = unlinkable, with SEs; below 0.5 = pushed to the opposite identity) and its inner TAR and AUC."""
    frame = outcome.linkability
    rows = []
    sets = [outcome.main, BLUR, PIXELATE, UT_ONLY]
    for name in sets:
        for attacker in ("fixed", INDEPENDENT, adaptive_name(name)):
            part = frame[(frame["attacker"] == attacker) & (frame["set"] == name)].set_index("risk")
            if part.empty:
                continue
            rows.append({"set": name, "attacker": "adaptive" if attacker.startswith("adaptive") else attacker,
                         "outer TAR": part.loc["outer", "tar_image"], "outer TAR SE": part.loc["outer", "tar_image_se"],
                         "stranger accepted": part.loc["outer", "stranger_image"],
                         "own closer": part.loc["outer", "own_closer"],
                         "own closer SE": part.loc["outer", "own_closer_se"],
                         "outer AUC": part.loc["outer", "auc"], "outer AUC SE": part.loc["outer", "auc_se"],
                         "inner TAR": part.loc["inner", "tar_image"], "inner AUC": part.loc["inner", "auc"]})
    return pd.DataFrame(rows).set_index(["set", "attacker"])


def instruments_table(outcome: Outcome) -> pd.DataFrame:
    """Every instrument the claims rest on: its measured value, its floor from the config (a ceiling where marked)
    and whether it passed; a claim resting on a failed instrument is undecided."""
    from anonpaper.experiments.gmia.claims import instruments

    rows = [{"instrument": item.name, "value": item.value, "floor": item.floor,
             "kind": "floor" if item.higher_is_better else "ceiling", "passed": item.passed}
            for item in instruments(outcome).values()]
    return pd.DataFrame(rows).set_index("instrument")


def singling_out_table(outcome: Outcome, attacker: str = "fixed") -> pd.DataFrame:
    """Table 4: hidden rate and local cloaking of every set in one attacker's embedding space (the fixed one by
    default), beside the paper's (its test set: 1,641 images, so its LC is on another scale than ours)."""
    frame = outcome.singling_out
    if "attacker" in frame.columns:
        frame = frame[frame["attacker"] == attacker]
    rows = []
    for row in frame.itertuples(index=False):
        rows.append({"set": row.set, "HR": row.hidden_rate, "HR SE": row.hidden_rate_se, "LC": row.local_cloaking,
                     "HR paper": _paper(PAPER_TABLE4, row.set, 0), "LC paper": _paper(PAPER_TABLE4, row.set, 1),
                     "test images": row.n})
    return pd.DataFrame(rows).set_index("set")


def singling_out_attackers_table(outcome: Outcome) -> pd.DataFrame:
    """The hidden rate of ``L_id + L_ut`` and of ``L_ut`` only for every attacker (the singling-out claims)."""
    frame = outcome.singling_out
    rows = []
    for attacker_label, attacker_of in (("fixed", lambda name: "fixed"), (INDEPENDENT, lambda name: INDEPENDENT),
                                        ("adaptive", adaptive_name)):
        row = {"attacker": attacker_label}
        for name in (outcome.main, UT_ONLY):
            part = frame[(frame["attacker"] == attacker_of(name)) & (frame["set"] == name)]
            row[f"HR {name}"] = float(part["hidden_rate"].iloc[0]) if len(part) else np.nan
            row[f"HR {name} SE"] = float(part["hidden_rate_se"].iloc[0]) if len(part) else np.nan
        rows.append(row)
    return pd.DataFrame(rows).set_index("attacker")


def membership_table(outcome: Outcome) -> pd.DataFrame:
    """Membership inference on held-out patients: members detected among each set's training images (the paper: 0
    for anonymised images) with SE, non-members rejected among its test images, their balanced accuracy (0.5 =
    chance) with SE; the real row also gives the attackers' accuracy on their own training images (the paper's
    0.968 is that kind of number)."""
    frame = outcome.membership.set_index("set")
    frame = frame.rename(columns={"members_detected": "members detected", "members_detected_se": "SE",
                                  "non_members_rejected": "non-members rejected",
                                  "balanced_accuracy": "balanced accuracy",
                                  "balanced_accuracy_se": "balanced accuracy SE",
                                  "attacker_training_accuracy": "attacker training accuracy"})
    frame["paper"] = np.nan
    frame.loc[REAL, "paper"] = PAPER_MIA["attacker_training_accuracy"]
    if outcome.main in frame.index and outcome.config.margin == PAPER_MARGIN:
        frame.loc[outcome.main, "paper"] = PAPER_MIA["members_detected"]
    return frame


def margin_table(outcome: Outcome) -> pd.DataFrame:
    """The margin ablation (privacy against utility over m): E_id's final cosine to the original and the share of
    test images whose cosine reached the margin (below the config's floor the margin did not bind); for the fixed
    attacker the share of other patients' anonymisations farther from a real image than its own ("own closer":
    0.5 = unlinkable, 1 = always linked; threshold-free, so it does not saturate at TAR 0), the outer and inner TAR;
    the hidden rate, the utility AUROC and the PSNR, per margin (loosest first)."""
    link = outcome.linkability[outcome.linkability["attacker"] == "fixed"].set_index(["set", "risk"])
    singling = outcome.singling_out
    if "attacker" in singling.columns:
        singling = singling[singling["attacker"] == "fixed"]
    singling = singling.set_index("set")
    utility = outcome.utility.set_index("training set")
    rows = []
    for row in outcome.margins.itertuples(index=False):
        rows.append({"m": row.margin, "E_id cosine": row.final_cosine,
                     "reached m": getattr(row, "reached", np.nan),
                     "own closer": link.loc[(row.set, "outer"), "own_closer"],
                     "own closer SE": link.loc[(row.set, "outer"), "own_closer_se"],
                     "outer TAR": link.loc[(row.set, "outer"), "tar_image"],
                     "inner TAR": link.loc[(row.set, "inner"), "tar_image"],
                     "HR": singling.loc[row.set, "hidden_rate"], "AUROC": utility.loc[row.set, "AUROC"],
                     "AUROC SE": utility.loc[row.set, "AUROC_se"], "PSNR": row.PSNR})
    return pd.DataFrame(rows).set_index("m")


def privacy_utility_points(outcome: Outcome) -> pd.DataFrame:
    """One point per set for the privacy-utility figure: the fixed attacker's outer linkability ("own closer": share
    of other patients' anonymisations farther from a real image than its own, 0.5 = unlinkable; and the outer TAR)
    and the utility AUROC (higher = more useful), with SEs."""
    link = outcome.linkability[(outcome.linkability["attacker"] == "fixed")
                               & (outcome.linkability["risk"] == "outer")].set_index("set")
    utility = outcome.utility.set_index("training set")
    rows = []
    for name in link.index:
        rows.append({"set": name, "own closer": link.loc[name, "own_closer"],
                     "own closer SE": link.loc[name, "own_closer_se"], "outer TAR": link.loc[name, "tar_image"],
                     "AUROC": utility.loc[name, "AUROC"], "AUROC SE": utility.loc[name, "AUROC_se"]})
    return pd.DataFrame(rows).set_index("set")


def training_table(outcome: Outcome) -> pd.DataFrame:
    """Every trained network: loaded from the cache or trained now, and its training seconds."""
    return outcome.training.set_index("network")


def budget_table(outcome: Outcome) -> pd.DataFrame:
    """Wall seconds of each stage of this run."""
    return pd.DataFrame({"stage": list(outcome.stage_seconds), "seconds": list(outcome.stage_seconds.values())}
                        ).set_index("stage")


def not_reproduced(outcome: Outcome, claims) -> list[str]:
    """Markdown lines, computed from the run, naming what did not reproduce: every claim that does not hold or is
    undecided (with the paper's and our numbers), and every Table 1 number of ours on the wrong side of the
    paper's (absolute fidelity: PSNR, SSIM, IW-SSIM below, or LPIPS above, the paper's value; our LPIPS is a domain
    LPIPS, so that comparison is indicative only)."""
    lines = [f"- **{claim.id}** ({claim.verdict}): {claim.statement}. Paper {format_value(claim.paper)}; ours "
             f"{format_value(claim.ours)}." for claim in claims if claim.verdict != "holds"]
    first = table1(outcome)
    for scheme, row in first.iterrows():
        worse = [f"{metric} {row[metric]:.3f} (paper {row[f'{metric} paper']:.3f})" for metric in QUALITY_METRICS
                 if (row[metric] > row[f"{metric} paper"] if metric.startswith("LPIPS") else
                     row[metric] < row[f"{metric} paper"])]
        if worse:
            lines.append(f"- **Table 1, {scheme}**: reconstruction fidelity below the paper's: " + ", ".join(worse) + ".")
    return lines


__all__ = ["not_reproduced", "PAPER_MIA", "PAPER_TABLE1", "PAPER_TABLE2", "PAPER_TABLE3", "PAPER_TABLE4", "PIXELATE",
           "attackers_table", "budget_table", "instruments_table", "linkability_table", "margin_table",
           "membership_table", "privacy_utility_points", "quality_table", "singling_out_attackers_table",
           "singling_out_table", "table1", "training_table", "utility_table"]
