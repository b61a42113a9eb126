"""The cohort chapter's checks, decided by the one rule (see :mod:`anonpaper.experiments.claims`).

These are phantom checks (``kind="phantom-check"``): each states a design target the phantom was built to meet
(identity recoverable, labels learnable, sex carried mostly by the vessels), with the paper's number beside it
where a paper motivates the target. A target "at least t" is a directional claim on ``score - t``; a design band is
an equivalence claim on the distance from its centre with half its width as the margin. Each score carries its
test-patient bootstrap SE (floored at the score's resolution, :func:`anonpaper.metrics.statistics.resolution_se`,
so a perfect score on a finite test set can still be decided). Checks are undecided when the test set is smaller
than ``Config.min_test_images``. Accuracies and F1 scores are reported in percent (as the papers report them),
AUROCs in [0, 1]. One function per section of the chapter, so each section records its checks where the reader
meets the numbers.
"""

from __future__ import annotations

from anonpaper.experiments.claims import Claim, decide
from anonpaper.experiments.cohorts.checks import LearnabilityResult
from anonpaper.experiments.cohorts.config import Config
from anonpaper.metrics.statistics import difference_se, resolution_se

CHECK = "phantom-check"
# The phantoms' design targets (fixed when the phantoms were built, before any run).
IDENTITY_MATCH_AUROC = 0.95
SEX_BAND = (0.70, 0.90)
VESSEL_SEX_DROP = 0.03
DR_MACRO_F1 = 0.70
CXR_REID_AUROC = 0.95
FINDING_AUROC = 0.8
IRIS_IDENTITY_ACCURACY = 0.95


def _percent(fraction: float) -> float:
    """Accuracies and F1 scores are reported in percent, as in the papers' tables (AUROCs stay in [0, 1])."""
    return round(100 * float(fraction), 2)


def _se(result: LearnabilityResult, score: str) -> float:
    return resolution_se(getattr(result, f"{score}_se"), result.n_test)


def retina_claims(matching: dict, sex_raw: LearnabilityResult, sex_no_vessels: LearnabilityResult,
                  dr: LearnabilityResult, config: Config) -> list[Claim]:
    """Identity matchable, sex learnable in the design band and mostly vascular, DR learnable."""
    pairs = matching["n_same"] + matching["n_different"]
    size = {"n": sex_raw.n_test, "min_n": config.min_test_images, "kind": CHECK}
    band_centre, band_half = (SEX_BAND[0] + SEX_BAND[1]) / 2, (SEX_BAND[1] - SEX_BAND[0]) / 2
    drop = sex_raw.accuracy - sex_no_vessels.accuracy
    return [
        decide("retina-identity-matchable",
               f"Fundus images of the same patient are matchable by keypoints (same vs different patient AUROC >= "
               f"{IDENTITY_MATCH_AUROC})",
               paper=f">= {IDENTITY_MATCH_AUROC} (design target; real fundus photographs of one eye match almost "
                     "perfectly)",
               ours={"SIFT + homography": round(matching["auroc"], 4), "FS_SIFT": round(matching["auroc_fs_sift"], 4)},
               rule="directional", effect=matching["auroc"] - IDENTITY_MATCH_AUROC,
               se=resolution_se(matching["auroc_se"], pairs), quantity=f"verified matcher AUROC - {IDENTITY_MATCH_AUROC}",
               note=f"{pairs} pairs (FS_SIFT, the unverified match count, shown for comparison)", n=pairs,
               min_n=config.min_test_images, kind=CHECK),
        decide("retina-sex-predictable",
               "A CNN trained from scratch predicts sex from the phantom's fundus images with accuracy in the "
               f"phantom's design band {100 * SEX_BAND[0]:.0f}-{100 * SEX_BAND[1]:.0f} %",
               paper=f"design band {100 * SEX_BAND[0]:.0f}-{100 * SEX_BAND[1]:.0f} % (paper 2's ImageNet-pretrained "
                     "attackers reach 75-83 % on real data)",
               ours=_percent(sex_raw.accuracy), rule="equivalence", effect=sex_raw.accuracy - band_centre,
               se=_se(sex_raw, "accuracy"), margin=band_half, quantity="accuracy - band centre",
               note=f"chance {100 * sex_raw.chance:.1f} %", **size),
        decide("retina-sex-mostly-vascular",
               f"Removing the vessels lowers sex-prediction accuracy by more than {100 * VESSEL_SEX_DROP:.0f} points",
               paper="paper 2: vessel-only obfuscation reduces, does not erase, the signal",
               ours={"raw": _percent(sex_raw.accuracy), "vessels removed": _percent(sex_no_vessels.accuracy)},
               rule="directional", effect=drop - VESSEL_SEX_DROP,
               se=difference_se(_se(sex_raw, "accuracy"), _se(sex_no_vessels, "accuracy")),
               quantity=f"accuracy drop with the vessels inpainted - {VESSEL_SEX_DROP}",
               by_design="the phantom puts most of its sex signal in vessel traits", **size),
        decide("retina-sex-beyond-vessels",
               "Without the vessels, sex is still predicted above chance",
               paper="paper 2: vessel-only obfuscation reduces, does not erase, the signal",
               ours={"vessels removed": _percent(sex_no_vessels.accuracy), "chance": _percent(sex_no_vessels.chance)},
               rule="directional", effect=sex_no_vessels.accuracy - sex_no_vessels.chance,
               se=_se(sex_no_vessels, "accuracy"), quantity="accuracy without vessels - majority rate",
               by_design="the phantom puts part of its sex signal outside the vessels", **size),
        decide("retina-dr-learnable", f"A CNN grades healthy / NPDR / PDR with macro-F1 >= {100 * DR_MACRO_F1:.0f} %",
               paper=f">= {100 * DR_MACRO_F1:.0f} % (design target)", ours=_percent(dr.macro_f1),
               rule="directional", effect=dr.macro_f1 - DR_MACRO_F1, se=_se(dr, "macro_f1"),
               quantity=f"macro-F1 - {DR_MACRO_F1}", n=dr.n_test, min_n=config.min_test_images, kind=CHECK),
    ]


def cxr_claims(verification: dict, findings: list[tuple[str, LearnabilityResult]], config: Config) -> list[Claim]:
    """Held-out patients re-identifiable; every finding learnable."""
    worst_name, worst = min(findings, key=lambda item: item[1].auroc)
    return [
        decide("cxr-reidentifiable",
               "Held-out chest X-ray patients are re-identified by a learned embedding (verification AUROC >= "
               f"{CXR_REID_AUROC})",
               paper=f"GMIA: real chest X-rays allow re-identification; design target >= {CXR_REID_AUROC}",
               ours=round(verification["auroc"], 4), rule="directional",
               effect=verification["auroc"] - CXR_REID_AUROC,
               se=resolution_se(verification["auroc_se"], verification["n_pairs"]),
               quantity=f"verification AUROC - {CXR_REID_AUROC}",
               note=f"{verification['n_pairs']} pairs of {verification['n_test_patients']} held-out patients",
               n=verification["n_pairs"], min_n=config.min_test_images, kind=CHECK),
        decide("cxr-findings-learnable", f"Each chest X-ray finding is learnable by a small CNN (AUROC >= "
                                         f"{FINDING_AUROC})",
               paper=f">= {FINDING_AUROC} (design target)", ours={name: round(result.auroc, 4)
                                                                   for name, result in findings},
               rule="directional", effect=worst.auroc - FINDING_AUROC, se=_se(worst, "auroc"),
               quantity=f"lowest finding AUROC ({worst_name}) - {FINDING_AUROC}",
               n=min(result.n_test for _, result in findings), min_n=config.min_test_images, kind=CHECK),
    ]


def iris_claims(identity: LearnabilityResult, disease: LearnabilityResult, config: Config) -> list[Claim]:
    """Known subjects recognisable; disease learnable, and harder than identity."""
    return [
        decide("iris-identity-recognisable",
               f"Known subjects are recognised in new iris images (accuracy >= {100 * IRIS_IDENTITY_ACCURACY:.0f} %)",
               paper=f"paper 5: near-perfect identity recognition on Warsaw iris; design target >= "
                     f"{100 * IRIS_IDENTITY_ACCURACY:.0f} %",
               ours=_percent(identity.accuracy), rule="directional",
               effect=identity.accuracy - IRIS_IDENTITY_ACCURACY, se=_se(identity, "accuracy"),
               quantity=f"accuracy - {IRIS_IDENTITY_ACCURACY}", n=identity.n_test, min_n=config.min_test_images,
               kind=CHECK),
        decide("iris-disease-learnable", "Disease is learnable from iris images (balanced accuracy above 50 %)",
               paper="paper 5: disease is recognised above chance",
               ours=_percent(disease.balanced_accuracy), rule="directional",
               effect=disease.balanced_accuracy - 0.5, se=_se(disease, "balanced_accuracy"),
               quantity="balanced accuracy - 0.5", n=disease.n_test, min_n=config.min_test_images, kind=CHECK),
        decide("iris-disease-harder", "Disease is harder to recognise than identity",
               paper="paper 5: disease accuracy below identity accuracy",
               ours={"identity accuracy": _percent(identity.accuracy),
                     "disease balanced accuracy": _percent(disease.balanced_accuracy)},
               rule="directional", effect=identity.accuracy - disease.balanced_accuracy,
               se=difference_se(_se(identity, "accuracy"), _se(disease, "balanced_accuracy")),
               quantity="identity accuracy - disease balanced accuracy", n=disease.n_test,
               min_n=config.min_test_images, kind=CHECK),
    ]
