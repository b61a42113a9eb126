"""Retina phantom DR grade distribution: a validated cohort option with dataset presets; the default is unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from anonpaper.data.phantoms.retina import (DR_GRADE_PRESETS, RetinaPhantomConfig, load_phantom_retina,
                                            resolve_dr_grade_probabilities)
from anonpaper.data.registry import load_cohort

pytestmark = pytest.mark.unit

# Patient-level grades and sexes of load_phantom_retina(n_patients=40, seed=0), recorded with the code before the
# grade option gained presets (commit ced7576): the default must keep drawing exactly these.
RECORDED_GRADES = [3, 1, 1, 1, 0, 1, 4, 4, 4, 4, 0, 2, 1, 0, 1, 0, 0, 3, 1, 0, 4, 1, 4, 0, 1, 1, 3, 3, 2, 4, 1, 2, 0,
                   2, 4, 1, 1, 4, 4, 4]
RECORDED_SEXES = "FMFMMMFMMMFMMMMFFMFFMFMFFMFFFMFFMFMFFFFM"


def _patients(table):
    return table.groupby("patient_id").first()


def test_default_cohort_is_unchanged():
    default = load_phantom_retina(n_patients=40, seed=0)
    patients = _patients(default.table)
    assert patients["dr_grade"].tolist() == RECORDED_GRADES
    assert "".join(patients["sex"]) == RECORDED_SEXES
    assert RetinaPhantomConfig().dr_grade_probabilities == (0.4, 0.15, 0.2, 0.1, 0.15)
    by_name = load_phantom_retina(n_patients=40, seed=0, dr_grade_probabilities="phantom-default")
    by_value = load_phantom_retina(n_patients=40, seed=0, dr_grade_probabilities=[0.4, 0.15, 0.2, 0.1, 0.15])
    assert by_name.table.equals(default.table) and by_value.table.equals(default.table)
    assert np.array_equal(by_name.image(3), default.image(3))


def test_presets_follow_the_stated_positive_fractions():
    assert sum(DR_GRADE_PRESETS["brset"][1:]) == pytest.approx(0.042)
    assert sum(DR_GRADE_PRESETS["diabetes-center"][1:]) == pytest.approx(0.21)
    for probabilities in DR_GRADE_PRESETS.values():
        assert len(probabilities) == 5 and sum(probabilities) == pytest.approx(1.0)
        # Diseased grades keep the default's proportions 0.15 : 0.2 : 0.1 : 0.15.
        diseased = np.array(probabilities[1:])
        np.testing.assert_allclose(diseased / diseased.sum(), np.array([0.15, 0.2, 0.1, 0.15]) / 0.6)


@pytest.mark.parametrize("bad,message", [("eyepacs", "expected a preset"), ((0.5, 0.5), "5 non-negative"),
                                         ((0.5, 0.6, -0.1, 0.0, 0.0), "5 non-negative"),
                                         ((0.2, 0.2, 0.2, 0.2, 0.1), "summing to 1"),
                                         ((float("nan"),) * 5, "5 non-negative"), (3, "five probabilities")])
def test_invalid_grade_distributions_are_rejected(bad, message):
    with pytest.raises(ValueError, match=message):
        RetinaPhantomConfig(dr_grade_probabilities=bad)
    with pytest.raises(ValueError, match=message):
        resolve_dr_grade_probabilities(bad)


@pytest.mark.parametrize("option", ["diabetes-center", (0.1, 0.2, 0.3, 0.25, 0.15)])
def test_drawn_grades_match_the_option_within_sampling_error(option):
    cohort = load_cohort("phantom-retina", n_patients=1200, seed=5, image_size=64, images_per_patient=(1, 1),
                         dr_grade_probabilities=option)
    expected = np.array(resolve_dr_grade_probabilities(option))
    counts = np.bincount(_patients(cohort.table)["dr_grade"], minlength=5)
    total = counts.sum()
    # Each frequency within 4 binomial standard errors, and a chi-square goodness-of-fit test that does not reject.
    tolerance = 4 * np.sqrt(expected * (1 - expected) / total)
    assert np.all(np.abs(counts / total - expected) <= tolerance), (counts / total, expected)
    assert scipy.stats.chisquare(counts, expected * total).pvalue > 1e-3
