"""The Snow / VS-Snow chapter's claims, each decided by the one rule (see :mod:`anonpaper.experiments.claims`).

Every claim is directional at ``DECISION_Z`` standard errors, each score's SE the patient bootstrap combined with
the spread between training seeds (:func:`anonpaper.experiments.snow_vs_snow.pipeline.seed_summary`); a claim is
undecided when the test set is smaller than ``Config.min_test_images`` or an instrument it rests on misses its
floor: the sex attacker (accuracy above the majority rate by ``Config.attacker_min_advantage``), the DR classifier
(macro-F1 ``Config.dr_min_f1``) and, for the claims that rest on VS-Snow's vessel masks, the vessel segmenter
(test Dice ``Config.segmenter_min_dice``, predicted vessels under half of the pixels). Two claims are settled by
how the retina phantom is built when it is the dataset (its sex signal lives mostly in the vessels, its DR signal
in lesions away from them); they are marked ``by_design``.
"""

from __future__ import annotations

import numpy as np

from anonpaper.experiments.claims import DECISION_Z, Claim, Instrument, decide
from anonpaper.experiments.snow_vs_snow.analysis import (PAPER_TABLES, finite_mean, lookup, matched_privacy_gain,
                                                         vessel_share_of_drop)
from anonpaper.experiments.snow_vs_snow.pipeline import METHOD_LABELS, METHODS, Outcome
from anonpaper.metrics.statistics import difference_se, sequence_drop

PHANTOM_DESIGN = ("the retina phantom puts most of its sex signal in vessel traits and its DR signal in lesions "
                  "away from the large vessels, so the phantom decides this by construction")


def instruments(outcome: Outcome) -> dict[str, list[Instrument]]:
    """The instruments the claims rest on, by what they measure: ``"sex"`` (the attacker), ``"dr"`` (the DR
    classifier) and ``"vessels"`` (the vessel segmenter; empty when VS-Snow uses the cohort's true masks)."""
    scores, config = outcome.scores, outcome.config
    advantage = lookup(scores, "original", 0.0, "sex") - outcome.chance
    found = {"sex": [Instrument("sex attacker: accuracy - majority rate on original images", advantage,
                                config.attacker_min_advantage)],
             "dr": [Instrument("DR classifier: macro-F1 on original images", lookup(scores, "original", 0.0, "dr"),
                               config.dr_min_f1)],
             "vessels": []}
    segmenter = outcome.segmenter
    if segmenter.get("source") == "segmenter":
        found["vessels"] = [Instrument("vessel segmenter test Dice", segmenter["test_dice"], config.segmenter_min_dice),
                            Instrument("share of test pixels the segmenter marks as vessel",
                                       segmenter["vessel_fraction"], 0.5, higher_is_better=False)]
    return found


def _share_difference_se(scores, p: float, draws: int = 1000, seed: int = 0) -> float:
    """SE of (sex share - DR share) of Snow's drop that VS-Snow reproduces (:func:`vessel_share_of_drop`), by
    moving every score it uses by a normal error of its SE, independently, ``draws`` times."""
    rng = np.random.default_rng(seed)
    names = [(method, q, task) for task in ("sex", "dr") for method, q in (("original", 0.0), ("snow", p),
                                                                          ("vs_snow", p))]
    values = np.array([lookup(scores, *name) for name in names])
    errors = np.array([lookup(scores, *name, "se") for name in names])
    differences = []
    for _ in range(draws):
        drawn = dict(zip(names, values + errors * rng.standard_normal(len(values))))
        shares = []
        for task in ("sex", "dr"):
            snow_drop = drawn["original", 0.0, task] - drawn["snow", p, task]
            shares.append((drawn["original", 0.0, task] - drawn["vs_snow", p, task]) / snow_drop
                          if snow_drop > 0 else np.nan)
        differences.append(shares[0] - shares[1])
    differences = np.asarray(differences)
    differences = differences[np.isfinite(differences)]
    return float(np.std(differences, ddof=1)) if len(differences) > 1 else float("nan")


def evaluate_claims(outcome: Outcome) -> list[Claim]:
    """The chapter's claims, each decided from our numbers by the one rule."""
    scores, config = outcome.scores, outcome.config
    n_test = int(scores["n_test"].iloc[0])
    size = {"n": n_test, "min_n": config.min_test_images}
    ps = list(config.p_values)
    top = ps[-1]
    by_design = PHANTOM_DESIGN if config.is_phantom else ""
    tools = instruments(outcome)
    claims: list[Claim] = []

    original_sex = lookup(scores, "original", 0.0, "sex")
    original_sex_se = lookup(scores, "original", 0.0, "sex", "se")
    claims.append(decide(
        "attacker-above-chance", "The attacker recognises sex on original images above chance",
        paper={"BRSET": 75.12, "Diabetes Center": 83.33},
        ours={"accuracy": round(100 * original_sex, 2), "chance": round(100 * outcome.chance, 2),
              "se": round(100 * original_sex_se, 2),
              "seed_sd": round(100 * lookup(scores, "original", 0.0, "sex", "seed_sd"), 2),
              "resolvable_points": round(100 * DECISION_Z * original_sex_se, 2)},
        rule="directional", effect=original_sex - outcome.chance, se=original_sex_se,
        quantity="accuracy - majority rate", **size))

    for method in METHODS:
        for task, label, paper_key in (("sex", "attacker accuracy", "sex_accuracy"), ("dr", "DR F1", "dr_f1")):
            values = [lookup(scores, "original", 0.0, task)] + [lookup(scores, method, p, task) for p in ps]
            errors = [lookup(scores, "original", 0.0, task, "se")] + [lookup(scores, method, p, task, "se")
                                                                       for p in ps]
            spreads = [lookup(scores, "original", 0.0, task, "seed_sd"), lookup(scores, method, top, task, "seed_sd")]
            drop, drop_se = sequence_drop(values, errors)
            claims.append(decide(
                f"{method.replace('_', '-')}-{task}-falls", f"{label} falls as p rises under {METHOD_LABELS[method]}",
                paper={data: list(table[paper_key]) for data, table in PAPER_TABLES[method].items()},
                ours={**{f"p={p:g}": round(100 * value, 2) for p, value in zip([0.0] + ps, values)},
                      "resolvable_points": round(100 * DECISION_Z * drop_se, 2)},
                rule="directional", effect=drop, se=drop_se,
                quantity=f"{label} at the original - at p={top:g}",
                instruments=tools[task] + (tools["vessels"] if method == "vs_snow" else []),
                note=f"seed SD {100 * spreads[0]:.1f} points at the original, {100 * spreads[1]:.1f} at p={top:g}",
                **size))

    gain = matched_privacy_gain(scores)
    claims.append(decide(
        "vs-snow-better-tradeoff", "At matched privacy (attacker accuracy), VS-Snow keeps more DR utility than Snow",
        paper="BRSET p=0.5: Snow 52.15 % / F1 64.5, VS-Snow 58.1 % / F1 72; Diabetes Center: VS-Snow p=0.1 50.7 % / "
              "F1 75.9 vs Snow p=0.3 51.0 % / F1 58.4",
        ours={"mean_f1_gain": round(100 * gain["gain"], 2) if not np.isnan(gain["gain"]) else "no overlap",
              "se": round(100 * gain["se"], 2) if not np.isnan(gain["se"]) else "undefined",
              "attacker_range": [round(100 * gain["low"], 2), round(100 * gain["high"], 2)]},
        rule="directional", effect=gain["gain"], se=gain["se"],
        quantity="mean DR F1 gain of VS-Snow over Snow at matched attacker accuracy",
        instruments=tools["sex"] + tools["dr"] + tools["vessels"],
        note=(f"over attacker accuracies {100 * gain['low']:.1f}-{100 * gain['high']:.1f} %"
              if not np.isnan(gain["gain"]) else "the two methods' attacker accuracies do not overlap beyond the "
              "original point, so there is no matched privacy level to compare at"), **size))

    sex_share, dr_share = vessel_share_of_drop(scores, "sex", top), vessel_share_of_drop(scores, "dr", top)
    snow_drops = {task: (lookup(scores, "original", 0.0, task) - lookup(scores, "snow", top, task),
                         difference_se(lookup(scores, "original", 0.0, task, "se"),
                                       lookup(scores, "snow", top, task, "se"))) for task in ("sex", "dr")}
    # The shares are ratios of drops: only meaningful where Snow itself lowers both scores beyond their noise.
    drop_checks = [Instrument(f"Snow's {task} drop at p={top:g} in SE", drop / se if se > 0 else float("nan"),
                              DECISION_Z) for task, (drop, se) in snow_drops.items()]
    claims.append(decide(
        "vessels-sex-over-dr", "Vessels carry more sex than DR information (VS-Snow removes most of Snow's damage "
        "to the attacker but little of its damage to DR)",
        paper="BRSET p=0.5: sex drop 17.0 (VS) vs 23.0 (Snow) points; DR drop 10.6 vs 18.1",
        ours={"sex_share": round(sex_share, 3) if not np.isnan(sex_share) else "undefined",
              "dr_share": round(dr_share, 3) if not np.isnan(dr_share) else "undefined"},
        rule="directional", effect=sex_share - dr_share, se=_share_difference_se(scores, top),
        quantity="share of Snow's sex drop that VS-Snow reproduces - the same share of its DR drop",
        instruments=tools["sex"] + tools["dr"] + tools["vessels"] + drop_checks, by_design=by_design, **size))

    sex_enrichment = finite_mean(outcome.saliency["sex_enrichment"])
    dr_enrichment = finite_mean(outcome.saliency["dr_enrichment"])
    difference = outcome.saliency["sex_enrichment"] - outcome.saliency["dr_enrichment"]
    difference = difference[np.isfinite(difference)]
    se = float(np.std(difference, ddof=1) / np.sqrt(len(difference))) if len(difference) > 1 else float("nan")
    claims.append(decide(
        "saliency-vessels", "Saliency of the sex classifier concentrates on vessels more than that of the DR "
        "classifier (paper Fig. 2)", paper="qualitative (Fig. 2)",
        ours={"sex_enrichment": round(sex_enrichment, 3) if np.isfinite(sex_enrichment) else "undefined",
              "dr_enrichment": round(dr_enrichment, 3) if np.isfinite(dr_enrichment) else "undefined"},
        rule="directional", effect=float(difference.mean()) if len(difference) else float("nan"), se=se,
        quantity="sex - DR vessel enrichment of saliency, paired over test images",
        instruments=tools["sex"] + tools["dr"] + tools["vessels"],
        note="enrichment = mean gradient saliency on vessel pixels / mean in the field of view",
        by_design=by_design, **size))
    return claims
