"""The GMIA chapter's claims, decided from a run's numbers with :func:`anonpaper.experiments.claims.decide`.

Noise: every comparison uses patient-bootstrap standard errors and decides at ``DECISION_Z`` (2) combined SEs.
Small runs: every claim rests on the test set and is undecided below ``config.min_test_images`` test images.
Instruments: the linkability and singling-out claims rest on the fixed verification attacker, which must separate
same- from different-patient pairs of REAL test images (AUC >= ``IDENTITY_MIN_AUC``); the utility claims rest on
the finding classifier trained on real images (macro AUROC >= ``UTILITY_MIN_AUROC`` on the real test set). When
one fails its check, the claims resting on it are undecided (:func:`instrument_failed`).
"""

from __future__ import annotations

import numpy as np

from anonpaper.experiments.claims import DECISION_Z, Claim, decide, instrument_failed
from anonpaper.experiments.gmia.analysis import PAPER_MIA, PAPER_TABLE1, QUALITY_METRICS
from anonpaper.experiments.gmia.pipeline import CO_RECON, E_RECON, ID_ONLY, REAL, UT_ONLY, Outcome, main_name
from anonpaper.metrics.statistics import beyond_noise, sequence_falls

IDENTITY_MIN_AUC = 0.75
UTILITY_MIN_AUROC = 0.65
HIGHER_IS_BETTER = {"PSNR": True, "SSIM": True, "IW-SSIM": True, "LPIPS (domain)": False}


def _fmt(value: float, se: float | None = None) -> str:
    return f"{value:.3f}" if se is None or not np.isfinite(se) else f"{value:.3f} +- {se:.3f}"


def _compare(difference: float, errors: list[float]) -> bool | None:
    """True / False when ``difference`` is beyond 2 combined SEs above / below 0; None within the noise."""
    if not np.isfinite(difference) or not beyond_noise(difference, errors, DECISION_Z):
        return None
    return difference > 0


def _decided(claim_id: str, statement: str, *, paper, ours, holds: bool | None, reason: str, n: int, min_n: int,
             kind: str = "paper") -> Claim:
    if holds is None and "within" not in reason:
        reason = f"within {DECISION_Z:g} SE: {reason}"
    return decide(claim_id, statement, paper=paper, ours=ours, holds=holds, reason=reason, n=n, min_n=min_n, kind=kind)


def evaluate_claims(outcome: Outcome) -> list[Claim]:
    """The chapter's claims (see the module docstring for the decision rules)."""
    config = outcome.config
    n, min_n = outcome.n_test, config.min_test_images
    main = main_name(config.margin)
    claims: list[Claim] = []

    # Instruments (phantom checks).
    auc = outcome.instruments["identity_auc"]
    identity_ok = bool(np.isfinite(auc) and auc >= IDENTITY_MIN_AUC)
    claims.append(decide("gmia-identity-instrument", "The fixed attacker verifies pairs of real test images (the "
                         "phantom's patients are identifiable)", paper=f"AUC >= {IDENTITY_MIN_AUC}",
                         ours=_fmt(auc), holds=identity_ok, reason=f"verification AUC {auc:.3f}", n=n, min_n=min_n,
                         kind="phantom-check"))
    real_auroc = outcome.instruments["utility_auroc"]
    utility_ok = bool(np.isfinite(real_auroc) and real_auroc >= UTILITY_MIN_AUROC)
    claims.append(decide("gmia-utility-instrument", "A finding classifier trained on real images reads the "
                         "phantom's findings on the real test set", paper=f"macro AUROC >= {UTILITY_MIN_AUROC}",
                         ours=_fmt(real_auroc), holds=utility_ok, reason=f"macro AUROC {real_auroc:.3f}", n=n,
                         min_n=min_n, kind="phantom-check"))

    # Table 1: co-training beats E-training on all four metrics (paired per test image).
    verdicts, parts = [], []
    for metric in QUALITY_METRICS:
        difference, se = outcome.quality_paired[metric]
        sign = 1.0 if HIGHER_IS_BETTER[metric] else -1.0
        verdicts.append(_compare(sign * difference, [se]))
        parts.append(f"{metric} co - E = {difference:+.3f} +- {se:.3f}")
    holds = False if False in verdicts else (True if all(v is True for v in verdicts) else None)
    quality = outcome.quality.set_index(["set", "metric"])["value"]
    ours = "; ".join(f"{m}: {quality[(CO_RECON, m)]:.3f} vs {quality[(E_RECON, m)]:.3f}" for m in QUALITY_METRICS)
    paper = "; ".join(f"{m}: {PAPER_TABLE1[CO_RECON][m]} vs {PAPER_TABLE1[E_RECON][m]}" for m in QUALITY_METRICS)
    claims.append(_decided("gmia-cotraining-beats-etraining", "Co-training reconstructs the test images better "
                           "than E-training on PSNR, SSIM, IW-SSIM and LPIPS", paper=paper, ours=ours, holds=holds,
                           reason="; ".join(parts), n=n, min_n=min_n))

    # Unlinkability at the verification threshold (outer risk of the main setting, fixed attacker).
    link = outcome.linkability[outcome.linkability["attacker"] == "fixed"].set_index(["set", "risk"])
    outer = link.loc[(main, "outer")]
    margin = outer["tar_image"] - outer["stranger_image"]
    se = float(np.hypot(outer["tar_image_se"], outer["stranger_image_se"]))
    holds = True if margin <= 0 else (False if beyond_noise(margin, [se], DECISION_Z) else None)
    claim = _decided("gmia-outer-unlinkable", "At the verification threshold a real test image is linked to its own "
                     "anonymisation no more often than to another patient's (outer risk of L_id + L_ut)",
                     paper="outer TAR 0.000 (Table 3)",
                     ours=f"own {_fmt(outer['tar_image'], outer['tar_image_se'])}, other patients' "
                          f"{_fmt(outer['stranger_image'], outer['stranger_image_se'])}",
                     holds=holds, reason=f"own - other = {margin:+.3f} +- {se:.3f}", n=n, min_n=min_n)
    linkability_claims = [claim]

    # Inner risk above outer risk (anonymised images of one patient stay linked to each other, not to the original).
    inner = link.loc[(main, "inner")]
    difference = inner["tar_image"] - outer["tar_image"]
    linkability_claims.append(_decided(
        "gmia-inner-above-outer", "Anonymised images keep a higher inner risk (two anonymised images of one patient "
        "verified as one) than outer risk (a real image and its own anonymisation)", paper="inner TAR 0.798, outer "
        "TAR 0.000", ours=f"inner {_fmt(inner['tar_image'], inner['tar_image_se'])}, outer "
        f"{_fmt(outer['tar_image'], outer['tar_image_se'])}", holds=_compare(difference, [inner["tar_image_se"],
                                                                                           outer["tar_image_se"]]),
        reason=f"inner - outer = {difference:+.3f}", n=n, min_n=min_n))

    # L_id lowers the singling-out risk (hidden rate with L_id + L_ut vs L_ut only).
    singling = outcome.singling_out.set_index("set")
    difference = singling.loc[main, "hidden_rate"] - singling.loc[UT_ONLY, "hidden_rate"]
    linkability_claims.append(_decided(
        "gmia-lid-hides", "Adding L_id raises the hidden rate (lower singling-out risk) over L_ut alone",
        paper="HR 1.000 vs 0.936 (Table 4)",
        ours=f"{_fmt(singling.loc[main, 'hidden_rate'], singling.loc[main, 'hidden_rate_se'])} vs "
             f"{_fmt(singling.loc[UT_ONLY, 'hidden_rate'], singling.loc[UT_ONLY, 'hidden_rate_se'])}",
        holds=_compare(difference, [singling.loc[main, "hidden_rate_se"], singling.loc[UT_ONLY, "hidden_rate_se"]]),
        reason=f"HR difference {difference:+.3f}", n=n, min_n=min_n))

    # Utility: the AUROC drop from real to anonymised training images stays within UTILITY_DROP_MAX.
    utility = outcome.utility.set_index("training set")
    drop = utility.loc[REAL, "AUROC"] - utility.loc[main, "AUROC"]
    errors = [utility.loc[REAL, "AUROC_se"], utility.loc[main, "AUROC_se"]]
    slack = config.utility_drop_max - drop
    verdict = None if not beyond_noise(slack, errors, DECISION_Z) else bool(slack > 0)
    utility_claims = [_decided(
        "gmia-utility-kept", f"A finding classifier trained on the anonymised images loses at most "
        f"{config.utility_drop_max:.2f} macro AUROC on the real test set against one trained on real images",
        paper="AUROC 0.774 -> 0.737 (Table 2)",
        ours=f"{_fmt(utility.loc[REAL, 'AUROC'], errors[0])} -> {_fmt(utility.loc[main, 'AUROC'], errors[1])}",
        holds=verdict, reason=f"drop {drop:+.3f} against the allowed {config.utility_drop_max:.2f}", n=n,
        min_n=min_n)]
    difference = utility.loc[main, "AUROC"] - utility.loc[ID_ONLY, "AUROC"]
    utility_claims.append(_decided(
        "gmia-lut-keeps-utility", "Adding L_ut gives a more useful anonymised training set than L_id alone",
        paper="AUROC 0.737 vs 0.713 (Table 2)",
        ours=f"{_fmt(utility.loc[main, 'AUROC'])} vs {_fmt(utility.loc[ID_ONLY, 'AUROC'])}",
        holds=_compare(difference, [utility.loc[main, "AUROC_se"], utility.loc[ID_ONLY, "AUROC_se"]]),
        reason=f"AUROC difference {difference:+.3f}", n=n, min_n=min_n))

    # Margin ablation: stricter m lowers linkability AND utility.
    names = [main_name(m) for m in config.margins]
    # Linkability by the threshold-free "own closer" share (outer TAR saturates at 0 once images are unlinkable).
    link_falls = sequence_falls([link.loc[(name, "outer"), "own_closer"] for name in names],
                                [link.loc[(name, "outer"), "own_closer_se"] for name in names], DECISION_Z)
    utility_falls = sequence_falls([utility.loc[name, "AUROC"] for name in names],
                                   [utility.loc[name, "AUROC_se"] for name in names], DECISION_Z)
    holds = False if False in (link_falls, utility_falls) else (True if link_falls and utility_falls else None)
    margin_claim = _decided(
        "gmia-margin-tradeoff", f"A stricter margin (m from {config.margins[0]:g} to {config.margins[-1]:g}) lowers "
        "both the outer linkability (share of other patients' anonymisations farther from a real image than its own) "
        "and the utility", paper="the paper ablates m in {0, -0.5, -0.7} (numbers not in our copy)",
        ours="own closer " + ", ".join(f"{link.loc[(name, 'outer'), 'own_closer']:.3f}" for name in names)
        + "; AUROC " + ", ".join(f"{utility.loc[name, 'AUROC']:.3f}" for name in names),
        holds=holds, reason=f"linkability falls: {link_falls}; utility falls: {utility_falls}", n=n, min_n=min_n)

    # Membership inference collapses on anonymised images.
    membership = outcome.membership.set_index("set")
    real_rate, real_se = membership.loc[REAL, "members_detected"], membership.loc[REAL, "members_detected_se"]
    anon_rate, anon_se = membership.loc[main, "members_detected"], membership.loc[main, "members_detected_se"]
    membership_claim = _decided(
        "gmia-membership-drops", "The membership attacker trained on real images recognises far fewer members among "
        "the anonymised training images than among the real ones", paper=f"accuracy {PAPER_MIA['attacker_training_accuracy']} "
        f"in training, {PAPER_MIA['members_detected']} on anonymised images",
        ours=f"members detected: real {_fmt(real_rate, real_se)}, anonymised {_fmt(anon_rate, anon_se)}",
        holds=_compare(real_rate - anon_rate, [real_se, anon_se]),
        reason=f"difference {real_rate - anon_rate:+.3f}", n=n, min_n=min_n)

    if not identity_ok:
        why = f"verification AUC {auc:.3f} < {IDENTITY_MIN_AUC}"
        linkability_claims = [instrument_failed(c, "fixed verification attacker", why) for c in linkability_claims]
    if not utility_ok:
        why = f"real-image macro AUROC {real_auroc:.3f} < {UTILITY_MIN_AUROC}"
        utility_claims = [instrument_failed(c, "finding classifier", why) for c in utility_claims]
    if not (identity_ok and utility_ok):
        margin_claim = instrument_failed(margin_claim, "attacker or finding classifier",
                                         f"verification AUC {auc:.3f}, real AUROC {real_auroc:.3f}")
    return claims + linkability_claims + utility_claims + [margin_claim, membership_claim]
