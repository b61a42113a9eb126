"""The disentanglement chapter's claims, decided by the one rule of :mod:`anonpaper.experiments.claims`.

Identity and disease are decided by **independent networks trained on the original images** (:class:`Judges`: an
ArcFace attacker and a disease classifier), not by the network's own ``C_id`` / ``C_med``, which the
disentanglement loss (Eq. 1) optimises on the very images they would judge. Every privacy claim is measured against
the **reconstruction** (strength 0: the case passed through the network with its own identity), not against the
raw images: what the decoder fails to reproduce is not privacy the identity swap added. Effects are paired over the
same test images, with patient-bootstrap standard errors.

Instruments (floors in :class:`~anonpaper.experiments.disentanglement.Config`): the attacker (iris: validation
rank-1 among the training identities; chest: validation verification AUC), the adaptive attacker (trained on
originals and reconstructions; the same check on reconstructed validation images), the disease classifier
(validation AUROC) and the **decoder** (its outputs' spread across inputs, and the share of reconstructions nearest
their own input): a decoder that returns one template for every input makes every claim resting on generated
images undecided.

Claims, per cohort ``<c>`` (``iris``, ``cxr``):

- ``<c>-identity-replacement-identity``: after identity replacement the target identity is recognised more often
  than the original (directional).
- ``<c>-medical-replacement-identity``: after medical replacement the original identity is recognised more often
  than the target's (directional).
- ``<c>-medical-replacement-counterfactual``: after medical replacement the disease classifier reads the target's
  disease above the test set's majority rate (directional; the counterfactual explanation).
- ``<c>-anonymisation-hides-identity``: the privacy VAE's anonymisation lowers the original patient's recognition
  below that of the reconstruction (directional).
- ``<c>-anonymisation-keeps-disease``: disease accuracy on anonymised images stays within ``DISEASE_MARGIN`` of
  that on the original images (retention).
- ``<c>-identity-swap-adds-privacy`` / ``-adaptive``: the anonymised explanation (strength 1) is re-identified
  less often than the reconstructed case (strength 0), by the attacker / the adaptive attacker (directional).

Iris: ``iris-privacy-term-lowers-overall`` (the privacy VAE's anonymisations are matched to some training identity
less often than the plain VAE's), ``iris-averaging-more-identities-more-private`` (averaging more identities
lowers that share; first against last), ``iris-plain-gan-lowers-ssim`` and ``iris-final-model-lower-ssim``
(Table 4). Chest: ``cxr-more-data-better-identity`` and ``cxr-more-data-better-disease`` (Table 5: these are
claims about the network's own recognition of original images, so its own classifiers decide them).
"""

from __future__ import annotations

import numpy as np

from anonpaper.experiments.claims import DECISION_Z, Claim, Instrument, combine_seed_claims, decide
from anonpaper.experiments.disentanglement.analysis import (COHORT_LABELS, PAPER_TABLE2, PAPER_TABLE3, PAPER_TABLE4,
                                                            PAPER_TABLE5)
from anonpaper.experiments.disentanglement.pipeline import (ATTACKER_AUC, ATTACKER_RANK1, DECODER_RETRIEVAL,
                                                            DECODER_SPREAD, DISEASE_AUC, Outcome)
from anonpaper.metrics.statistics import difference_se, patient_bootstrap_se, sequence_drop
from anonpaper.runtime import derive_seed

PRIVACY_VAE = "anonymised: VAE with overall privacy"
FLOORS = {ATTACKER_RANK1: "attacker_min_rank1", ATTACKER_AUC: "attacker_min_auc", DISEASE_AUC: "disease_min_auc",
          DECODER_SPREAD: "decoder_min_spread", DECODER_RETRIEVAL: "decoder_min_retrieval"}


# ---------------------------------------------------------------------------------------------------------------
# instruments
# ---------------------------------------------------------------------------------------------------------------
def instrument(outcome: Outcome, cohort: str, measure: str, instrument_name: str | None = None) -> Instrument:
    """The check ``measure`` of ``cohort`` (of the instrument ``instrument_name`` when several share a measure) as
    an :class:`Instrument` with its floor from the config (value NaN, so failing, when the run has no such row)."""
    base = measure.split(",")[0]
    floor = float(getattr(outcome.config, FLOORS[base]))
    frame = outcome.instruments
    rows = frame[(frame["cohort"] == cohort) & (frame["measure"] == measure)] if len(frame) else frame
    if instrument_name is not None and len(rows):
        rows = rows[rows["instrument"] == instrument_name]
    if not len(rows):
        return Instrument(f"{COHORT_LABELS[cohort]} {measure} (not measured in this run)", float("nan"), floor)
    row = rows.iloc[0]
    return Instrument(f"{COHORT_LABELS[cohort]} {row['instrument']}: {measure}", float(row["value"]), floor)


def attacker_instrument(outcome: Outcome, cohort: str, adaptive: bool = False) -> Instrument:
    measure = ATTACKER_AUC if cohort == "cxr" else ATTACKER_RANK1
    return instrument(outcome, cohort, f"{measure}, on reconstructed validation images" if adaptive else measure)


def decoder_instruments(outcome: Outcome, cohort: str) -> list[Instrument]:
    return [instrument(outcome, cohort, DECODER_SPREAD), instrument(outcome, cohort, DECODER_RETRIEVAL)]


def disease_instrument(outcome: Outcome, cohort: str) -> Instrument:
    return instrument(outcome, cohort, DISEASE_AUC)


# ---------------------------------------------------------------------------------------------------------------
# paired effects
# ---------------------------------------------------------------------------------------------------------------
def paired(outcome: Outcome, cohort: str, first: tuple, second: tuple, tag: str) -> dict:
    """``first - second`` per test image (each a ``(per_image key, column)``), over images where both are finite:
    ``mean``, its patient-bootstrap ``se``, ``n``, and both means (``first``, ``second``)."""
    a = outcome.per_image.get(first[0], {}).get(first[1])
    b = outcome.per_image.get(second[0], {}).get(second[1])
    empty = {"mean": float("nan"), "se": float("nan"), "n": 0, "first": float("nan"), "second": float("nan")}
    if a is None or b is None:
        return empty
    a, b = np.asarray(a, float), np.asarray(b, float)
    finite = np.isfinite(a) & np.isfinite(b)
    if not finite.any():
        return empty
    differences, patients = a[finite] - b[finite], np.asarray(outcome.patients[cohort])[finite]
    config = outcome.config
    se = patient_bootstrap_se(differences, differences, patients, lambda values, _: float(np.mean(values)),
                              config.bootstrap, derive_seed(config.seed, "claims", cohort, tag))
    return {"mean": float(differences.mean()), "se": se, "n": int(finite.sum()), "first": float(a[finite].mean()),
            "second": float(b[finite].mean())}


def _power(se: float, paper_effect: float | None = None) -> dict:
    """The smallest effect this run resolves (``DECISION_Z`` SE), in points, beside the paper's effect."""
    entry = {f"resolvable ({DECISION_Z:g} SE, points)": _points(DECISION_Z * se)}
    if paper_effect is not None:
        entry["paper effect (points)"] = round(float(paper_effect), 2)
    return entry


def _points(value: float) -> float | None:
    return round(100 * float(value), 2) if value is not None and np.isfinite(value) else None


def _size(outcome: Outcome, n: int) -> dict:
    return {"n": n, "min_n": outcome.config.min_test_images}


# ---------------------------------------------------------------------------------------------------------------
# claims
# ---------------------------------------------------------------------------------------------------------------
def replacement_claims(outcome: Outcome, cohort: str) -> list[Claim]:
    """Identity after identity and medical replacement, and the medical replacement's counterfactual disease."""
    label = COHORT_LABELS[cohort]
    identity = [attacker_instrument(outcome, cohort), *decoder_instruments(outcome, cohort)]
    claims = []
    for images, first, second, statement, experiment in (
            ("identity replacement", "identity_target", "identity_original",
             "after identity replacement the image is recognised as the target identity more often than as the "
             "original", "Identity Replacement"),
            ("medical replacement", "identity_original", "identity_target",
             "after medical replacement the image is recognised as the original identity more often than as the "
             "target's", "Medical Replacement")):
        effect = paired(outcome, cohort, ((cohort, images), first), ((cohort, images), second), images)
        paper = PAPER_TABLE2[(label, experiment)]
        paper_effect = paper[3] - paper[2] if first == "identity_target" else paper[2] - paper[3]
        claims.append(decide(
            f"{cohort}-{experiment.split()[0].lower()}-replacement-identity", f"{label}: {statement}",
            paper={"original": paper[2], "target": paper[3]},
            ours={"original": _points(effect["second" if first == "identity_target" else "first"]),
                  "target": _points(effect["first" if first == "identity_target" else "second"]),
                  **_power(effect["se"], paper_effect)},
            rule="directional", effect=effect["mean"], se=effect["se"], quantity=f"{first} - {second}",
            instruments=identity, **_size(outcome, effect["n"]),
            note="recognised by the attacker trained on the original images"))
    counterfactual = outcome.per_image.get((cohort, "medical replacement"), {}).get("disease")
    majority = float(outcome.cohort_info[cohort]["majority"])
    patients = np.asarray(outcome.patients.get(cohort, []))
    if counterfactual is not None:
        values = np.asarray(counterfactual, float)
        config = outcome.config
        accuracy = float(values.mean())
        se = patient_bootstrap_se(values, values, patients, lambda truth, _: float(np.mean(truth)), config.bootstrap,
                                  derive_seed(config.seed, "claims", cohort, "counterfactual"))
        n = len(values)
    else:
        accuracy, se, n = float("nan"), float("nan"), 0
    paper = PAPER_TABLE2[(label, "Medical Replacement")]
    claims.append(decide(
        f"{cohort}-medical-replacement-counterfactual",
        f"{label}: after medical replacement (the counterfactual explanation) the disease classifier reads the "
        "target's disease more often than the test set's majority rate",
        paper={"target-disease accuracy": paper[4], "note": "Sec. 5.1: the network generates counterfactual images"},
        ours={"target-disease accuracy": _points(accuracy), "majority rate": _points(majority), **_power(se)},
        rule="directional", effect=accuracy - majority, se=se, quantity="target-disease accuracy - majority rate",
        instruments=[disease_instrument(outcome, cohort), *decoder_instruments(outcome, cohort)],
        **_size(outcome, n), note="read by the disease classifier trained on the original images"))
    return claims


def anonymisation_claims(outcome: Outcome, cohort: str) -> list[Claim]:
    """The privacy VAE's anonymisation hides the identity (against the reconstruction) and keeps the disease
    (against the original images, within ``DISEASE_MARGIN``)."""
    label, config = COHORT_LABELS[cohort], outcome.config
    hides = paired(outcome, cohort, ((cohort, "reconstruction (strength 0)"), "identity_original"),
                   ((cohort, PRIVACY_VAE), "identity_original"), "hides")
    paper2, paper3 = PAPER_TABLE2[(label, "Reconstruction / Baseline")], PAPER_TABLE3[(label, "VAE with overall "
                                                                                              "privacy")]
    claims = [decide(
        f"{cohort}-anonymisation-hides-identity",
        f"{label}: after anonymisation with the privacy VAE the original patient is recognised less often than in "
        "the reconstruction (the same network with the patient's own identity vector)",
        paper={"original images": paper2[2], "anonymised": paper3[0]},
        ours={"reconstruction": _points(hides["first"]), "anonymised": _points(hides["second"]),
              **_power(hides["se"], paper2[2] - paper3[0])},
        rule="directional", effect=hides["mean"], se=hides["se"],
        quantity="recognised original identity: reconstruction - anonymised",
        instruments=[attacker_instrument(outcome, cohort), *decoder_instruments(outcome, cohort)],
        **_size(outcome, hides["n"]),
        note="the control is the reconstruction, not the original image: what the decoder fails to reproduce is "
             "not privacy the identity swap added")]
    keeps = paired(outcome, cohort, ((cohort, PRIVACY_VAE), "disease"), ((cohort, "original images"), "disease"),
                   "keeps")
    claims.append(decide(
        f"{cohort}-anonymisation-keeps-disease",
        f"{label}: disease recognition after anonymisation stays within {100 * config.disease_margin:g} points of "
        "the original images'",
        paper={"original images": paper2[4], "anonymised": paper3[2]},
        ours={"original images": _points(keeps["second"]), "anonymised": _points(keeps["first"]),
              **_power(keeps["se"], paper3[2] - paper2[4])},
        rule="retention", effect=keeps["mean"], se=keeps["se"], margin=config.disease_margin,
        quantity="disease accuracy: anonymised - original images",
        instruments=[disease_instrument(outcome, cohort)], **_size(outcome, keeps["n"]),
        note="read by the disease classifier trained on the original images"))
    return claims


def swap_claims(outcome: Outcome, cohort: str) -> list[Claim]:
    """The anonymised explanation (strength 1) against the reconstructed case (strength 0), for the attacker and
    the adaptive attacker."""
    label = COHORT_LABELS[cohort]
    low, high = min(outcome.config.privacy_levels), max(outcome.config.privacy_levels)
    claims = []
    for column, suffix, who in (("rank1", "", "the attacker trained on the original images"),
                                ("rank1_adaptive", "-adaptive",
                                 "an attacker trained on the original images and the network's reconstructions")):
        effect = paired(outcome, cohort, ((cohort, "explanation", low), column), ((cohort, "explanation", high),
                                                                                  column), column)
        case = outcome.per_image.get((cohort, "explanation", "case"), {}).get(column)
        claims.append(decide(
            f"{cohort}-identity-swap-adds-privacy{suffix}",
            f"{label}: an anonymised case-based explanation (identity replaced) is re-identified by {who} less often "
            "than the same case reconstructed with its own identity (beyond the paper)",
            paper="implied by Tables 2-3 (identity replacement and anonymisation)",
            ours={"original case": _points(np.mean(case)) if case is not None else None,
                  "reconstruction (strength 0)": _points(effect["first"]),
                  "anonymised (strength 1)": _points(effect["second"]), **_power(effect["se"])},
            rule="directional", effect=effect["mean"], se=effect["se"], quantity="rank-1: strength 0 - strength 1",
            instruments=[attacker_instrument(outcome, cohort, adaptive=bool(suffix)),
                         *decoder_instruments(outcome, cohort)],
            **_size(outcome, effect["n"])))
    return claims


def iris_overall_claims(outcome: Outcome) -> list[Claim]:
    """The privacy term against the plain VAE, and averaging more identities, by the share of anonymised images the
    attacker matches to some training identity."""
    instruments = [attacker_instrument(outcome, "iris"), *decoder_instruments(outcome, "iris")]
    term = paired(outcome, "iris", (("iris", "anonymised: VAE (without privacy term)"), "overall"),
                  (("iris", PRIVACY_VAE), "overall"), "privacy-term")
    claims = [decide(
        "iris-privacy-term-lowers-overall",
        "Iris: the VAE's maximum-entropy privacy term makes anonymised images match some training identity less "
        "often than a plain VAE's (overall privacy)",
        paper={"privacy VAE": PAPER_TABLE3[("Iris", "VAE with overall privacy")][1],
               "plain VAE": PAPER_TABLE3[("Iris", "VAE (without privacy term)")][1],
               "note": "the paper's overall: the identity classifier's maximum confidence"},
        ours={"privacy VAE": _points(term["second"]), "plain VAE": _points(term["first"]),
              **_power(term["se"], PAPER_TABLE3[("Iris", "VAE (without privacy term)")][1]
                       - PAPER_TABLE3[("Iris", "VAE with overall privacy")][1])},
        rule="directional", effect=term["mean"], se=term["se"], quantity="overall: plain VAE - privacy VAE",
        instruments=instruments, **_size(outcome, term["n"]),
        note="overall = the share the attacker trained on the original images matches to some training image at "
             "its threshold (not the network's own C_id, whose entropy Eq. 5 maximises)")]
    labels = [f"Averaging {k} identities" for k in outcome.config.averaging] + ["Averaging all identities"]
    frame = outcome.recognition
    rows = [frame[(frame["cohort"] == "iris") & (frame["images"] == f"anonymised: {name}")] for name in labels]
    values = [float(row["overall"].iloc[0]) if len(row) else float("nan") for row in rows]
    errors = [float(row["overall_se"].iloc[0]) if len(row) else float("nan") for row in rows]
    drop, se = sequence_drop(values, errors)
    n = int(rows[0]["n_test"].iloc[0]) if len(rows[0]) else 0
    claims.append(decide(
        "iris-averaging-more-identities-more-private",
        "Iris: averaging more training identities makes anonymised images match some training identity less often",
        paper={name: PAPER_TABLE3[("Iris", name)][1] for name in labels if ("Iris", name) in PAPER_TABLE3},
        ours={**{name: _points(value) for name, value in zip(labels, values)}, **_power(se)},
        rule="directional", effect=drop, se=se, quantity=f"overall: {labels[0]} - {labels[-1]}",
        instruments=instruments, **_size(outcome, n)))
    return claims


def ablation_claims(outcome: Outcome) -> list[Claim]:
    """Table 4: the adversarial term lowers reconstruction SSIM against SSIM and PSNR alone."""
    ablation = outcome.table4.set_index("variant")
    both = ablation.loc["SSIM and PSNR"]
    n = int(outcome.table2.loc[outcome.table2["cohort"] == "iris", "n_test"].iloc[0])
    claims = []
    for variant, claim_id, statement in (
            ("GAN with SSIM and PSNR", "iris-plain-gan-lowers-ssim",
             "Iris: adding a non-augmented adversarial loss lowers reconstruction SSIM compared with SSIM and PSNR "
             "alone"),
            ("Augmented GAN (Final model)", "iris-final-model-lower-ssim",
             "Iris: the final (augmented adversarial) model has a lower reconstruction SSIM than SSIM and PSNR "
             "alone")):
        other = ablation.loc[variant]
        se = difference_se(both["ssim_original_se"], other["ssim_original_se"])
        claims.append(decide(claim_id, statement,
                             paper={"SSIM and PSNR": PAPER_TABLE4["SSIM and PSNR"], variant: PAPER_TABLE4[variant]},
                             ours={"SSIM and PSNR": _points(both["ssim_original"]),
                                   variant: _points(other["ssim_original"]),
                                   **_power(se, PAPER_TABLE4["SSIM and PSNR"] - PAPER_TABLE4[variant])},
                             rule="directional", effect=float(both["ssim_original"] - other["ssim_original"]), se=se,
                             quantity=f"SSIM: SSIM and PSNR - {variant}", **_size(outcome, n)))
    return claims


def size_claims(outcome: Outcome) -> list[Claim]:
    """Table 5: the network trained on more chest images recognises identity, and disease, better (the network's
    own recognition of the original test images: the claim is about the network itself)."""
    small, full = outcome.table5.iloc[0], outcome.table5.iloc[-1]
    n = int(outcome.table2.loc[outcome.table2["cohort"] == "cxr", "n_test"].iloc[0])
    claims = []
    for column, what, position in (("identity_original", "identity", 1), ("disease_accuracy", "disease", 2)):
        se = difference_se(full[f"{column}_se"], small[f"{column}_se"])
        claims.append(decide(
            f"cxr-more-data-better-{what}",
            f"Chest: the network trained on more images recognises {what} better on original test images",
            paper={"3000 images": PAPER_TABLE5[3000][position], "6000 images": PAPER_TABLE5[6000][position]},
            ours={f"{int(small['train_images'])} images": _points(small[column]),
                  f"{int(full['train_images'])} images": _points(full[column]),
                  **_power(se, PAPER_TABLE5[6000][position] - PAPER_TABLE5[3000][position])},
            rule="directional", effect=float(full[column] - small[column]), se=se,
            quantity=f"{what} recognition: more - fewer training images", **_size(outcome, n),
            note="decided by the network's own classifiers on original images: the claim is about the network"))
    return claims


def evaluate_claims(outcome: Outcome) -> list[Claim]:
    """The chapter's claims (see the module docstring): with several judge seeds, decided on each seed's view and
    combined (:func:`anonpaper.experiments.claims.combine_seed_claims`)."""
    if outcome.replicates:
        return combine_seed_claims([replicate_claims(view) for view in outcome.replicates])
    return replicate_claims(outcome)


def replicate_claims(outcome: Outcome) -> list[Claim]:
    """The chapter's claims decided with one set of judges."""
    claims: list[Claim] = []
    for cohort in COHORT_LABELS:
        claims += replacement_claims(outcome, cohort) + anonymisation_claims(outcome, cohort)
    claims += iris_overall_claims(outcome) + ablation_claims(outcome) + size_claims(outcome)
    for cohort in COHORT_LABELS:
        claims += swap_claims(outcome, cohort)
    return claims


def too_small(claims: list[Claim]) -> list[str]:
    """Paper claims whose effect in the paper is smaller than what this run resolves (``DECISION_Z`` SE)."""
    small = []
    for claim in claims:
        ours = claim.ours if isinstance(claim.ours, dict) else {}
        paper_effect = ours.get("paper effect (points)")
        resolvable = ours.get(f"resolvable ({DECISION_Z:g} SE, points)")
        if claim.kind == "paper" and paper_effect is not None and resolvable is not None \
                and abs(paper_effect) < resolvable:
            small.append(f"{claim.id} (paper {abs(paper_effect):.3g} points, resolvable {resolvable:.3g})")
    return small


__all__ = ["evaluate_claims", "too_small"]
