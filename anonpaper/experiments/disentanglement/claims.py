"""The disentanglement chapter's claims, each decided from the run's numbers (:mod:`anonpaper.experiments.claims`).

Rules: a claim is undecided when its test set is smaller than ``Config.min_test_images``; a difference decides
only beyond ``DECISION_Z`` combined patient-bootstrap standard errors. Two instruments are checked first: the
network's own identity recognition on original test images (multi-class: above chance; Siamese: same-patient pairs
matched more often than other-patient pairs) and its disease recognition (above the majority rate); the claims
that rest on a failed instrument are undecided. The re-identification attacker is checked the same way (rank-1 on
original cases above chance).
"""

from __future__ import annotations

import numpy as np

from anonpaper.experiments.claims import DECISION_Z, Claim, decide, instrument_failed
from anonpaper.experiments.disentanglement.analysis import (COHORT_LABELS, PAPER_TABLE2, PAPER_TABLE3, PAPER_TABLE4,
                                                            PAPER_TABLE5)
from anonpaper.experiments.disentanglement.pipeline import Outcome
from anonpaper.metrics.statistics import sequence_falls


def _difference(a: float, a_se: float, b: float, b_se: float) -> tuple[bool | None, str]:
    """(True if a > b beyond noise, False if a < b beyond noise, None within noise; the numbers)."""
    gap, noise = a - b, DECISION_Z * float(np.hypot(a_se, b_se))
    text = f"difference {100 * gap:.1f} points, {DECISION_Z:g} combined SE {100 * noise:.1f}"
    if not np.isfinite(gap) or not np.isfinite(noise) or abs(gap) <= noise:
        return None, text + " (within noise)"
    return bool(gap > 0), text


def _row(outcome: Outcome, cohort: str, experiment: str) -> dict:
    frame = outcome.table2
    return frame[(frame["cohort"] == cohort) & (frame["experiment"] == experiment)].iloc[0].to_dict()


def _anon(outcome: Outcome, cohort: str, method: str) -> dict:
    frame = outcome.table3
    return frame[(frame["cohort"] == cohort) & (frame["method"] == method)].iloc[0].to_dict()


def identity_check(outcome: Outcome, cohort: str, num_identities: int | None = None) -> str | None:
    """None when the network recognises identity on original test images, else why not."""
    base = _row(outcome, cohort, "Reconstruction / Baseline")
    if cohort == "iris":
        chance = 1.0 / max(num_identities or 1, 1)
        holds, text = _difference(base["identity_original"], base["identity_original_se"], chance, 0.0)
        return None if holds else f"identity accuracy {100 * base['identity_original']:.1f} % vs chance " \
                                  f"{100 * chance:.1f} %: {text}"
    holds, text = _difference(base["identity_original"], base["identity_original_se"], base["identity_target"],
                              base["identity_target_se"])
    return None if holds else (f"same-patient match rate {100 * base['identity_original']:.1f} % vs other-patient "
                               f"{100 * base['identity_target']:.1f} %: {text}")


def disease_check(outcome: Outcome, cohort: str, majority: float) -> str | None:
    """None when the network's disease classifier beats the test set's majority rate on original images."""
    base = _row(outcome, cohort, "Reconstruction / Baseline")
    holds, text = _difference(base["disease_accuracy"], base["disease_accuracy_se"], majority, 0.0)
    return None if holds else (f"disease accuracy {100 * base['disease_accuracy']:.1f} % vs majority rate "
                               f"{100 * majority:.1f} %: {text}")


def evaluate_claims(outcome: Outcome) -> list[Claim]:
    """The chapter's claims, each decided from our numbers."""
    config = outcome.config
    claims: list[Claim] = []
    rests_on_identity: dict[str, list[str]] = {key: [] for key in COHORT_LABELS}
    rests_on_disease: dict[str, list[str]] = {key: [] for key in COHORT_LABELS}

    for cohort, label in COHORT_LABELS.items():
        size = {"n": int(outcome.table2.loc[outcome.table2["cohort"] == cohort, "n_test"].iloc[0]),
                "min_n": config.min_test_images}
        for experiment, first, second, statement in (
                ("Identity Replacement", "identity_target", "identity_original",
                 "After identity replacement the image is recognised as the target identity, not the original"),
                ("Medical Replacement", "identity_original", "identity_target",
                 "After medical replacement the image keeps the original identity")):
            row = _row(outcome, cohort, experiment)
            paper = PAPER_TABLE2[(label, experiment)]
            holds, text = _difference(row[first], row[f"{first}_se"], row[second], row[f"{second}_se"])
            claim_id = f"{cohort}-{experiment.split()[0].lower()}-replacement-identity"
            claims.append(decide(
                claim_id, f"{label}: {statement}",
                paper={"original": paper[2], "target": paper[3]},
                ours={"original": round(100 * row["identity_original"], 2),
                      "target": round(100 * row["identity_target"], 2)},
                holds=holds, reason=f"{first} - {second}: {text}", **size))
            rests_on_identity[cohort].append(claim_id)

        base = _row(outcome, cohort, "Reconstruction / Baseline")
        vae = _anon(outcome, cohort, "VAE with overall privacy")
        holds, text = _difference(base["identity_original"], base["identity_original_se"], vae["original_accuracy"],
                                  vae["original_accuracy_se"])
        claims.append(decide(
            f"{cohort}-anonymisation-hides-identity",
            f"{label}: after anonymisation with the privacy VAE the original patient is recognised far less often "
            "than in the original images",
            paper={"original images": PAPER_TABLE2[(label, "Reconstruction / Baseline")][2],
                   "anonymised": PAPER_TABLE3[(label, "VAE with overall privacy")][0]},
            ours={"original images": round(100 * base["identity_original"], 2),
                  "anonymised": round(100 * vae["original_accuracy"], 2)},
            holds=holds, reason=f"original - anonymised: {text}", **size))
        rests_on_identity[cohort].append(claims[-1].id)

        holds, text = _difference(base["disease_accuracy"], base["disease_accuracy_se"], vae["disease_accuracy"],
                                  vae["disease_accuracy_se"])
        claims.append(decide(
            f"{cohort}-anonymisation-keeps-disease",
            f"{label}: disease recognition after anonymisation stays at the level of the original images",
            paper={"original images": PAPER_TABLE2[(label, "Reconstruction / Baseline")][4],
                   "anonymised": PAPER_TABLE3[(label, "VAE with overall privacy")][2]},
            ours={"original images": round(100 * base["disease_accuracy"], 2),
                  "anonymised": round(100 * vae["disease_accuracy"], 2)},
            holds=holds is not True,
            reason=f"original - anonymised: {text}; fails only on a drop beyond noise", **size))
        rests_on_disease[cohort].append(claims[-1].id)

    iris_size = {"n": int(outcome.table3.loc[outcome.table3["cohort"] == "iris", "n_test"].iloc[0]),
                 "min_n": config.min_test_images}
    privacy, plain = _anon(outcome, "iris", "VAE with overall privacy"), _anon(outcome, "iris",
                                                                               "VAE (without privacy term)")
    holds, text = _difference(plain["overall"], plain["overall_se"], privacy["overall"], privacy["overall_se"])
    claims.append(decide(
        "iris-privacy-term-lowers-confidence",
        "Iris: the VAE's maximum-entropy privacy term lowers the identity classifier's confidence on anonymised "
        "images (overall privacy) compared with a plain VAE",
        paper={"privacy VAE": PAPER_TABLE3[("Iris", "VAE with overall privacy")][1],
               "plain VAE": PAPER_TABLE3[("Iris", "VAE (without privacy term)")][1]},
        ours={"privacy VAE": round(100 * privacy["overall"], 2), "plain VAE": round(100 * plain["overall"], 2)},
        holds=holds, reason=f"plain - privacy: {text}", **iris_size))
    rests_on_identity["iris"].append(claims[-1].id)

    labels = [f"Averaging {k} identities" for k in config.averaging] + ["Averaging all identities"]
    values = [_anon(outcome, "iris", name)["overall"] for name in labels]
    errors = [_anon(outcome, "iris", name)["overall_se"] for name in labels]
    claims.append(decide(
        "iris-averaging-more-identities-more-private",
        "Iris: averaging more training identities lowers the identity classifier's confidence",
        paper={name: PAPER_TABLE3[("Iris", name)][1] for name in labels if ("Iris", name) in PAPER_TABLE3},
        ours={name: round(100 * value, 2) for name, value in zip(labels, values)},
        holds=sequence_falls(values, errors, z=DECISION_Z),
        reason=f"falls = last more than {DECISION_Z:g} combined SE below the first and no step rising beyond noise",
        **iris_size))
    rests_on_identity["iris"].append(claims[-1].id)

    ablation = outcome.table4.set_index("variant")
    both = ablation.loc["SSIM and PSNR"]
    for variant, claim_id, statement in (
            ("GAN with SSIM and PSNR", "iris-plain-gan-lowers-ssim",
             "Iris: adding a non-augmented adversarial loss lowers reconstruction SSIM compared with SSIM and PSNR "
             "alone"),
            ("Augmented GAN (Final model)", "iris-final-model-lower-ssim",
             "Iris: the final (augmented adversarial) model has a lower reconstruction SSIM than SSIM and PSNR "
             "alone")):
        other = ablation.loc[variant]
        holds, text = _difference(both["ssim_original"], both["ssim_original_se"], other["ssim_original"],
                                  other["ssim_original_se"])
        claims.append(decide(claim_id, statement,
                             paper={"SSIM and PSNR": PAPER_TABLE4["SSIM and PSNR"], variant: PAPER_TABLE4[variant]},
                             ours={"SSIM and PSNR": round(100 * both["ssim_original"], 2),
                                   variant: round(100 * other["ssim_original"], 2)},
                             holds=holds, reason=f"SSIM and PSNR - {variant}: {text}", **iris_size))

    cxr_size = {"n": int(outcome.table2.loc[outcome.table2["cohort"] == "cxr", "n_test"].iloc[0]),
                "min_n": config.min_test_images}
    small, full = outcome.table5.iloc[0], outcome.table5.iloc[-1]
    identity_up, identity_text = _difference(full["identity_original"], full["identity_original_se"],
                                             small["identity_original"], small["identity_original_se"])
    disease_up, disease_text = _difference(full["disease_accuracy"], full["disease_accuracy_se"],
                                           small["disease_accuracy"], small["disease_accuracy_se"])
    if identity_up is False or disease_up is False:
        holds = False
    elif identity_up and disease_up:
        holds = True
    else:
        holds = None
    claims.append(decide(
        "cxr-more-data-better-recognition",
        "Chest: the network trained on more images recognises identity and disease better",
        paper={"3000 images": list(PAPER_TABLE5[3000][1:]), "6000 images": list(PAPER_TABLE5[6000][1:])},
        ours={f"{int(small['train_images'])} images": [round(100 * small["identity_original"], 2),
                                                       round(100 * small["disease_accuracy"], 2)],
              f"{int(full['train_images'])} images": [round(100 * full["identity_original"], 2),
                                                      round(100 * full["disease_accuracy"], 2)]},
        holds=holds, reason=f"identity: {identity_text}; disease: {disease_text}", **cxr_size))

    # Beyond the paper: the attacker against anonymised case-based explanations.
    attacker_failed: dict[str, str] = {}
    for cohort, label in COHORT_LABELS.items():
        frame = outcome.privacy[outcome.privacy["cohort"] == cohort]
        case = frame[frame["strength"].isna()].iloc[0]
        full_row = frame[frame["strength"] == frame["strength"].max()].iloc[0]
        chance = outcome.privacy_info[cohort]["chance_rank1"]
        size = {"n": int(case["n_test"]), "min_n": config.min_test_images}
        works, text = _difference(case["rank1"], case["rank1_se"], chance, 0.0)
        claims.append(decide(
            f"{cohort}-attacker-works", f"{label}: the re-identification attacker recognises original training cases "
            "above chance", paper="design target (an attacker that works on original images)",
            ours={"rank1": round(100 * case["rank1"], 2), "chance": round(100 * chance, 2)},
            holds=works, reason=f"rank-1 - chance: {text}", kind="phantom-check", **size))
        if not works:
            attacker_failed[cohort] = f"rank-1 {100 * case['rank1']:.1f} % vs chance {100 * chance:.1f} %"
        plain = frame[frame["strength"] == frame["strength"].min()].iloc[0]
        recognisable, recognisable_text = _difference(plain["rank1"], plain["rank1_se"], chance, 0.0)
        holds, text = _difference(plain["rank1"], plain["rank1_se"], full_row["rank1"], full_row["rank1_se"])
        if not recognisable:
            holds, text = None, (f"the reconstruction with the case's own identity is already re-identified at "
                                 f"chance level ({100 * plain['rank1']:.1f} % vs {100 * chance:.1f} %: "
                                 f"{recognisable_text}), so there is no identity left for the swap to remove")
        claims.append(decide(
            f"{cohort}-identity-swap-adds-privacy",
            f"{label}: replacing the identity vector lowers re-identification beyond what passing the case through "
            "the network (a reconstruction with its own identity) already does (beyond the paper)",
            paper="implied by Tables 2-3 (identity replacement and anonymisation)",
            ours={"reconstruction rank1": round(100 * plain["rank1"], 2),
                  "anonymised rank1": round(100 * full_row["rank1"], 2)},
            holds=holds, reason=f"reconstruction - anonymised rank-1: {text}", **size))
        holds, text = _difference(case["rank1"], case["rank1_se"], full_row["rank1"], full_row["rank1_se"])
        claims.append(decide(
            f"{cohort}-anonymised-explanations-resist-reidentification",
            f"{label}: anonymised case-based explanations are re-identified less often than the original cases "
            "(beyond the paper: an attacker trained on the original identities)",
            paper="implied by Table 3 (the network's own identity classifier)",
            ours={"original case rank1": round(100 * case["rank1"], 2),
                  "anonymised rank1": round(100 * full_row["rank1"], 2)},
            holds=holds, reason=f"original - anonymised rank-1: {text}", **size))

    info = outcome.cohort_info
    num_checks = {cohort: identity_check(outcome, cohort, int(info[cohort]["num_identities"]))
                  for cohort in COHORT_LABELS}
    disease_checks = {cohort: disease_check(outcome, cohort, info[cohort]["majority"]) for cohort in COHORT_LABELS}
    decided = []
    for claim in claims:
        cohort = claim.id.split("-")[0]
        if claim.id in rests_on_identity.get(cohort, []) and num_checks.get(cohort):
            claim = instrument_failed(claim, "identity recognition", num_checks[cohort])
        elif claim.id in rests_on_disease.get(cohort, []) and disease_checks.get(cohort):
            claim = instrument_failed(claim, "disease recognition", disease_checks[cohort])
        elif (claim.id.endswith("resist-reidentification") or claim.id.endswith("swap-adds-privacy")) \
                and cohort in attacker_failed:
            claim = instrument_failed(claim, "re-identification attacker", attacker_failed[cohort])
        decided.append(claim)
    return decided
