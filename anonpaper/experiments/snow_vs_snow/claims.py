"""The Snow / VS-Snow chapter's claims, each decided from the run's numbers (see :mod:`anonpaper.experiments.claims`).

Rules: a claim is undecided when the test set is smaller than ``Config.min_test_images``; a difference decides
only beyond ``DECISION_Z`` combined standard errors, each the patient bootstrap combined with the spread between
training seeds (:func:`anonpaper.experiments.snow_vs_snow.pipeline.seed_summary`); the claims that rest on VS-Snow's
vessel masks are undecided when the vessel segmenter failed its own check. Two claims are settled by how the retina
phantom is built when it is the dataset (its sex signal lives mostly in the vessels, its DR signal in lesions
away from them); they are marked ``by_design``.
"""

from __future__ import annotations

import numpy as np

from anonpaper.experiments.claims import DECISION_Z, Claim, decide, instrument_failed
from anonpaper.experiments.snow_vs_snow.analysis import (PAPER_TABLES, finite_mean, lookup, matched_privacy_gain,
                                                         vessel_share_of_drop)
from anonpaper.experiments.snow_vs_snow.pipeline import METHOD_LABELS, METHODS, Outcome
from anonpaper.metrics.statistics import sequence_falls

PHANTOM_DESIGN = ("the retina phantom puts most of its sex signal in vessel traits and its DR signal in lesions "
                  "away from the large vessels, so the phantom decides this by construction")


def evaluate_claims(outcome: Outcome) -> list[Claim]:
    """The chapter's claims, each decided from our numbers."""
    scores, config = outcome.scores, outcome.config
    n_test = int(scores["n_test"].iloc[0])
    size = {"n": n_test, "min_n": config.min_test_images}
    ps = list(config.p_values)
    top = ps[-1]
    by_design = PHANTOM_DESIGN if config.is_phantom else ""
    claims: list[Claim] = []
    vessel_claims: list[str] = []  # ids of claims that rest on VS-Snow's vessel masks

    original_sex = lookup(scores, "original", 0.0, "sex")
    original_sex_se = lookup(scores, "original", 0.0, "sex", "se")
    margin = original_sex - outcome.chance
    claims.append(decide(
        "attacker-above-chance", "The attacker recognises sex on original images well above chance",
        paper={"BRSET": 75.12, "Diabetes Center": 83.33},
        ours={"accuracy": round(100 * original_sex, 2), "chance": round(100 * outcome.chance, 2),
              "se": round(100 * original_sex_se, 2),
              "seed_sd": round(100 * lookup(scores, "original", 0.0, "sex", "seed_sd"), 2)},
        holds=bool(margin > DECISION_Z * original_sex_se),
        reason=f"accuracy - majority rate = {100 * margin:.1f} points, "
               f"{margin / max(original_sex_se, 1e-12):.1f} SE", **size))

    for method in METHODS:
        for task, label, paper_key in (("sex", "attacker accuracy", "sex_accuracy"), ("dr", "DR F1", "dr_f1")):
            values = [lookup(scores, "original", 0.0, task)] + [lookup(scores, method, p, task) for p in ps]
            errors = [lookup(scores, "original", 0.0, task, "se")] + [lookup(scores, method, p, task, "se")
                                                                       for p in ps]
            spreads = [lookup(scores, "original", 0.0, task, "seed_sd"), lookup(scores, method, top, task, "seed_sd")]
            claim_id = f"{method.replace('_', '-')}-{task}-falls"
            claims.append(decide(
                claim_id, f"{label} falls as p rises under {METHOD_LABELS[method]}",
                paper={data: list(table[paper_key]) for data, table in PAPER_TABLES[method].items()},
                ours={f"p={p:g}": round(100 * value, 2) for p, value in zip([0.0] + ps, values)},
                holds=sequence_falls(values, errors, z=DECISION_Z),
                reason=f"falls = last value more than {DECISION_Z:g} combined SE below the original and no rise "
                       f"larger than {DECISION_Z:g} SE (undecided when it drops by less); drop "
                       f"{100 * (values[0] - values[-1]):.1f} points, {DECISION_Z:g} combined SE "
                       f"{100 * DECISION_Z * np.hypot(errors[0], errors[-1]):.1f} (seed SD "
                       f"{100 * spreads[0]:.1f} at the original, {100 * spreads[1]:.1f} at p={top:g})", **size))
            if method == "vs_snow":
                vessel_claims.append(claim_id)

    gain = matched_privacy_gain(scores)
    if np.isnan(gain["gain"]):
        holds, reason = None, ("the two methods' attacker accuracies do not overlap beyond the original point, so "
                               "there is no matched privacy level to compare at")
    elif abs(gain["gain"]) <= DECISION_Z * gain["se"]:
        holds, reason = None, (f"mean F1 difference {100 * gain['gain']:.1f} points is within {DECISION_Z:g} combined "
                               f"SE ({100 * DECISION_Z * gain['se']:.1f})")
    else:
        holds, reason = bool(gain["gain"] > 0), (f"mean F1 difference {100 * gain['gain']:.1f} points over attacker "
                                                 f"accuracies {100 * gain['low']:.1f}-{100 * gain['high']:.1f} %, "
                                                 f"beyond {DECISION_Z:g} combined SE "
                                                 f"({100 * DECISION_Z * gain['se']:.1f})")
    claims.append(decide(
        "vs-snow-better-tradeoff", "At matched privacy (attacker accuracy), VS-Snow keeps more DR utility than Snow",
        paper="BRSET p=0.5: Snow 52.15 % / F1 64.5, VS-Snow 58.1 % / F1 72; Diabetes Center: VS-Snow p=0.1 50.7 % / "
              "F1 75.9 vs Snow p=0.3 51.0 % / F1 58.4",
        ours={"mean_f1_gain": round(100 * gain["gain"], 2) if not np.isnan(gain["gain"]) else "no overlap",
              "se": round(100 * gain["se"], 2) if not np.isnan(gain["se"]) else "undefined",
              "attacker_range": [round(100 * gain["low"], 2), round(100 * gain["high"], 2)]},
        holds=holds, reason=reason, **size))
    vessel_claims.append("vs-snow-better-tradeoff")

    sex_share, dr_share = vessel_share_of_drop(scores, "sex", top), vessel_share_of_drop(scores, "dr", top)
    snow_sex_drop = original_sex - lookup(scores, "snow", top, "sex")
    snow_dr_drop = lookup(scores, "original", 0.0, "dr") - lookup(scores, "snow", top, "dr")
    noise = DECISION_Z * np.hypot(original_sex_se, lookup(scores, "snow", top, "sex", "se"))
    noise_dr = DECISION_Z * np.hypot(lookup(scores, "original", 0.0, "dr", "se"), lookup(scores, "snow", top, "dr", "se"))
    if snow_sex_drop <= noise or snow_dr_drop <= noise_dr:
        holds, reason = None, (f"Snow at p={top:g} does not lower both scores beyond noise (sex drop "
                               f"{100 * snow_sex_drop:.1f}, DR drop {100 * snow_dr_drop:.1f} points), so the shares "
                               "are not meaningful")
    else:
        holds, reason = bool(sex_share > dr_share), ("share = drop under VS-Snow / drop under Snow at the largest p; "
                                                     "the sex share exceeding the DR share means vessels hold more of "
                                                     "the sex information")
    claims.append(decide(
        "vessels-sex-over-dr", "Vessels carry more sex than DR information (VS-Snow removes most of Snow's damage "
        "to the attacker but little of its damage to DR)",
        paper="BRSET p=0.5: sex drop 17.0 (VS) vs 23.0 (Snow) points; DR drop 10.6 vs 18.1",
        ours={"sex_share": round(sex_share, 3) if not np.isnan(sex_share) else "undefined",
              "dr_share": round(dr_share, 3) if not np.isnan(dr_share) else "undefined"},
        holds=holds, reason=reason, by_design=by_design, **size))
    vessel_claims.append("vessels-sex-over-dr")

    sex_enrichment = finite_mean(outcome.saliency["sex_enrichment"])
    dr_enrichment = finite_mean(outcome.saliency["dr_enrichment"])
    difference = outcome.saliency["sex_enrichment"] - outcome.saliency["dr_enrichment"]
    difference = difference[np.isfinite(difference)]
    se = float(np.std(difference, ddof=1) / np.sqrt(len(difference))) if len(difference) > 1 else float("nan")
    decided = len(difference) > 1 and abs(difference.mean()) > DECISION_Z * se
    claims.append(decide(
        "saliency-vessels", "Saliency of the sex classifier concentrates on vessels more than that of the DR "
        "classifier (paper Fig. 2)", paper="qualitative (Fig. 2)",
        ours={"sex_enrichment": round(sex_enrichment, 3) if np.isfinite(sex_enrichment) else "undefined",
              "dr_enrichment": round(dr_enrichment, 3) if np.isfinite(dr_enrichment) else "undefined"},
        holds=bool(difference.mean() > 0) if decided else None,
        reason="enrichment = mean gradient saliency on vessel pixels / mean in the field of view; paired over test "
               "images" + ("" if decided else f"; difference {difference.mean() if len(difference) else float('nan'):.2f}"
                                              f" within {DECISION_Z:g} SE"),
        by_design=by_design, **size))
    vessel_claims.append("saliency-vessels")

    check = outcome.segmenter.get("check")
    if check:
        claims = [instrument_failed(claim, "vessel segmenter", check) if claim.id in vessel_claims else claim
                  for claim in claims]
    return claims
