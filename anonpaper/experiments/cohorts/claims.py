"""The cohort chapter's checks, decided from the run's numbers.

These are phantom checks (``kind="phantom-check"``): each states a design target the phantom was built to meet
(identity recoverable, labels learnable, sex carried mostly by the vessels), with the paper's number beside it
where a paper motivates the target. They are undecided when the test set is smaller than
``Config.min_test_images``. Accuracies and F1 scores are in percent (as the papers report them), AUROCs in
[0, 1]. One function per section of the chapter, so each section records its checks where
the reader meets the numbers.
"""

from __future__ import annotations

from anonpaper.experiments.claims import Claim, decide
from anonpaper.experiments.cohorts.checks import LearnabilityResult
from anonpaper.experiments.cohorts.config import Config

CHECK = "phantom-check"


def _percent(fraction: float) -> float:
    """Accuracies and F1 scores are reported in percent, as in the papers' tables (AUROCs stay in [0, 1])."""
    return round(100 * float(fraction), 2)


def retina_claims(matching: dict, sex_raw: LearnabilityResult, sex_no_vessels: LearnabilityResult,
                  dr: LearnabilityResult, config: Config) -> list[Claim]:
    """Identity matchable, sex learnable in the design band and mostly vascular, DR learnable."""
    pairs = matching["n_same"] + matching["n_different"]
    drop = sex_raw.accuracy - sex_no_vessels.accuracy
    return [
        decide("retina-identity-matchable",
               "Fundus images of the same patient are matchable by keypoints (same vs different patient AUROC >= 0.95)",
               paper=">= 0.95 (design target; real fundus photographs of one eye match almost perfectly)",
               ours={"SIFT + homography": round(matching["auroc"], 4), "FS_SIFT": round(matching["auroc_fs_sift"], 4)},
               holds=matching["auroc"] >= 0.95,
               reason=f"verified matcher AUROC {matching['auroc']:.3f} on {pairs} pairs (FS_SIFT, the unverified "
                      "match count, shown for comparison)", n=pairs, min_n=config.min_test_images, kind=CHECK),
        decide("retina-sex-predictable",
               "A CNN trained from scratch predicts sex from the phantom's fundus images with accuracy in the "
               "phantom's design band 70-90 %",
               paper="design band 70-90 % (paper 2's ImageNet-pretrained attackers reach 75-83 % on real data)",
               ours=_percent(sex_raw.accuracy), holds=0.70 <= sex_raw.accuracy <= 0.90,
               reason=f"accuracy {100 * sex_raw.accuracy:.1f} % (chance {100 * sex_raw.chance:.1f} %)", n=sex_raw.n_test,
               min_n=config.min_test_images, kind=CHECK),
        decide("retina-sex-mostly-vascular",
               "Removing the vessels lowers sex-prediction accuracy (by >= 3 points) but leaves it above chance",
               paper="paper 2: vessel-only obfuscation reduces, does not erase, the signal",
               ours={"raw": _percent(sex_raw.accuracy), "vessels removed": _percent(sex_no_vessels.accuracy),
                     "chance": _percent(sex_no_vessels.chance)},
               holds=drop >= 0.03 and sex_no_vessels.accuracy > sex_no_vessels.chance,
               reason=f"accuracy falls {100 * drop:.1f} points with the vessels inpainted", n=sex_raw.n_test,
               min_n=config.min_test_images, kind=CHECK,
               by_design="the phantom puts most of its sex signal in vessel traits"),
        decide("retina-dr-learnable", "A CNN grades healthy / NPDR / PDR with macro-F1 >= 70 %",
               paper=">= 70 % (design target)", ours=_percent(dr.macro_f1), holds=dr.macro_f1 >= 0.7,
               reason=f"macro-F1 {100 * dr.macro_f1:.1f} %", n=dr.n_test, min_n=config.min_test_images, kind=CHECK),
    ]


def cxr_claims(verification: dict, findings: list[tuple[str, LearnabilityResult]], config: Config) -> list[Claim]:
    """Held-out patients re-identifiable; every finding learnable."""
    worst = min(result.auroc for _, result in findings)
    return [
        decide("cxr-reidentifiable",
               "Held-out chest X-ray patients are re-identified by a learned embedding (verification AUROC >= 0.95)",
               paper="GMIA: real chest X-rays allow re-identification; design target >= 0.95",
               ours=round(verification["auroc"], 4), holds=verification["auroc"] >= 0.95,
               reason=f"AUROC {verification['auroc']:.3f} on {verification['n_pairs']} pairs of "
                      f"{verification['n_test_patients']} held-out patients", n=verification["n_pairs"],
               min_n=config.min_test_images, kind=CHECK),
        decide("cxr-findings-learnable", "Each chest X-ray finding is learnable by a small CNN (AUROC >= 0.8)",
               paper=">= 0.8 (design target)", ours={name: round(result.auroc, 4) for name, result in findings},
               holds=bool(worst >= 0.8), reason=f"lowest AUROC {worst:.3f}",
               n=min(result.n_test for _, result in findings), min_n=config.min_test_images, kind=CHECK),
    ]


def iris_claims(identity: LearnabilityResult, disease: LearnabilityResult, config: Config) -> list[Claim]:
    """Known subjects recognisable; disease learnable but harder than identity."""
    return [
        decide("iris-identity-recognisable", "Known subjects are recognised in new iris images (accuracy >= 95 %)",
               paper="paper 5: near-perfect identity recognition on Warsaw iris; design target >= 95 %",
               ours=_percent(identity.accuracy), holds=identity.accuracy >= 0.95,
               reason=f"accuracy {100 * identity.accuracy:.1f} % over {identity.n_test} test images", n=identity.n_test,
               min_n=config.min_test_images, kind=CHECK),
        decide("iris-disease-harder", "Disease is learnable but harder than identity",
               paper="paper 5: disease accuracy below identity accuracy",
               ours={"identity accuracy": _percent(identity.accuracy),
                     "disease balanced accuracy": _percent(disease.balanced_accuracy)},
               holds=0.5 < disease.balanced_accuracy < identity.accuracy,
               reason=f"disease balanced accuracy {100 * disease.balanced_accuracy:.1f} % between chance 50 % and "
                      f"identity accuracy {100 * identity.accuracy:.1f} %", n=disease.n_test, min_n=config.min_test_images,
               kind=CHECK),
    ]
