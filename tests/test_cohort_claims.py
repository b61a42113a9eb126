"""The cohort chapter's phantom checks under the one decision rule: planted results that meet, miss or sit within
noise of each design target, and records that check out."""

from __future__ import annotations

import numpy as np
import pytest

from anonpaper.experiments import cohorts as chapter
from anonpaper.experiments.claims import check_record

pytestmark = pytest.mark.unit
CONFIG = chapter.Config(min_test_images=100)


def _result(label, accuracy, se=0.02, n_test=200, chance=0.5, auroc=0.9, auroc_se=0.02, macro_f1=None,
            balanced=None):
    return chapter.LearnabilityResult(label=label, accuracy=accuracy, balanced_accuracy=balanced or accuracy,
                                      macro_f1=macro_f1 or accuracy, auroc=auroc, chance=chance, n_train=400,
                                      n_test=n_test, classes=[0, 1], accuracy_se=se, balanced_accuracy_se=se,
                                      macro_f1_se=se, auroc_se=auroc_se)


def _matching(auroc, se):
    return {"auroc": auroc, "auroc_se": se, "auroc_fs_sift": 0.8, "n_same": 200, "n_different": 200}


def _verdicts(claims):
    assert check_record({"claims": [claim.as_dict() for claim in claims]}) == []
    return {claim.id: claim.verdict for claim in claims}


def test_retina_checks_hold_fail_and_stay_undecided_as_planted():
    good = _verdicts(chapter.retina_claims(_matching(1.0, 0.0), _result("sex", 0.8), _result("sex", 0.6),
                                           _result("dr", 0.85), CONFIG))
    assert good == {"retina-identity-matchable": "holds", "retina-sex-predictable": "holds",
                    "retina-sex-mostly-vascular": "holds", "retina-sex-beyond-vessels": "holds",
                    "retina-dr-learnable": "holds"}
    # A perfect AUROC has a bootstrap SE of 0: the resolution floor lets it decide.
    # Sex too easy, no drop without the vessels (0 points against the 3 required, SE 0.7 points), DR unlearnable.
    bad = _verdicts(chapter.retina_claims(_matching(0.7, 0.02), _result("sex", 0.97, se=0.005),
                                          _result("sex", 0.97, se=0.005), _result("dr", 0.4), CONFIG))
    assert bad == {"retina-identity-matchable": "does not hold", "retina-sex-predictable": "does not hold",
                   "retina-sex-mostly-vascular": "does not hold", "retina-sex-beyond-vessels": "holds",
                   "retina-dr-learnable": "does not hold"}
    noisy = _verdicts(chapter.retina_claims(_matching(0.96, 0.02), _result("sex", 0.88, se=0.05),
                                            _result("sex", 0.84, se=0.05), _result("dr", 0.72, se=0.05), CONFIG))
    # Each target within two SE of the measured score: nothing decided but the residual signal.
    assert noisy == {"retina-identity-matchable": "undecided", "retina-sex-predictable": "undecided",
                     "retina-sex-mostly-vascular": "undecided", "retina-sex-beyond-vessels": "holds",
                     "retina-dr-learnable": "undecided"}


def test_too_small_a_test_set_decides_nothing():
    claims = chapter.retina_claims(_matching(1.0, 0.0), _result("sex", 0.8, n_test=50), _result("sex", 0.6, n_test=50),
                                   _result("dr", 0.85, n_test=50), CONFIG)
    assert [claim.id for claim in claims if claim.verdict != "undecided"] == ["retina-identity-matchable"]


def test_cxr_and_iris_checks():
    findings = [("effusion", _result("e", 0.9, auroc=0.95)), ("cardiomegaly", _result("c", 0.9, auroc=0.6))]
    verdicts = _verdicts(chapter.cxr_claims({"auroc": 0.99, "auroc_se": 0.005, "n_pairs": 400, "n_test_patients": 30},
                                            findings, CONFIG))
    assert verdicts == {"cxr-reidentifiable": "holds", "cxr-findings-learnable": "does not hold"}
    # Disease at chance and as easy as identity.
    verdicts = _verdicts(chapter.iris_claims(_result("id", 0.99, se=0.005), _result("d", 0.5, balanced=0.5), CONFIG))
    assert verdicts == {"iris-identity-recognisable": "holds", "iris-disease-learnable": "undecided",
                        "iris-disease-harder": "holds"}


def test_learnability_standard_errors_are_patient_bootstrap(tmp_path):
    from anonpaper.experiments.cohorts.checks import _pair_auroc_se

    rng = np.random.default_rng(0)
    same = np.arange(200) < 100
    scores = same + rng.normal(0, 1.0, 200)
    se = _pair_auroc_se(scores, same, np.arange(200) // 2, seed=0)
    assert 0.01 < se < 0.06  # about sqrt(AUC(1-AUC)/n_per_class) = 0.03 for AUC ~0.76
    assert _pair_auroc_se(np.where(same, 1.0, 0.0), same, np.arange(200) // 2, seed=0) == 0.0
