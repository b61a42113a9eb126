"""The trade-offs chapter (anonpaper.experiments.tradeoffs): its config, the Pareto front, utility at matched privacy,
the claims decided by the one rule on planted outcomes (each verdict, and the record check), and one tiny end-to-end
run (both phantoms, every trivial method and Snow, one CPU thread, tens of seconds) whose rerun loads every audit
from the cache."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from anonpaper.experiments import tradeoffs as chapter
from anonpaper.experiments.claims import check_record
from anonpaper.experiments.tradeoffs.pipeline import ModalityOutcome, Outcome, Setting

pytestmark = pytest.mark.unit

AXES = {"linkage": ("threat", "linkage", "verification_auc"), "attribute": ("threat", "attribute", "adaptive"),
        "membership": ("threat", "membership", "balanced_accuracy"),
        "utility": ("utility", "dr_3class", "trained_on_release")}
CHANCE = {"linkage": 0.5, "attribute": 0.5, "membership": 0.5, "utility": 0.0}


def planted(releases: dict[Setting, dict[str, tuple[float, float]]], originals: dict[str, float] | None = None,
            patients: int = 40, config: chapter.Config | None = None) -> Outcome:
    """An outcome whose fundus audits gave the planted advantage retained (value, SE) per axis; the originals'
    scores are ``originals`` (default: well above chance), the values follow from advantage retained."""
    originals = {"linkage": 0.8, "attribute": 0.9, "membership": 0.95, "utility": 0.7, **(originals or {})}
    rows = []
    for setting, axes in releases.items():
        for axis, (section, group, score) in AXES.items():
            ar, ar_se = axes.get(axis, (1.0, 0.0) if setting.method == "no change" else (0.5, 0.05))
            margin = originals[axis] - CHANCE[axis]
            rows.append({"modality": "fundus", "method": setting.method, "knob": setting.knob,
                         "setting": np.nan if setting.value is None else setting.value, "label": setting.label,
                         "section": section, "group": group, "score": score, "metric": score,
                         "value": CHANCE[axis] + ar * margin, "se": max(ar_se * abs(margin), 0.02),
                         "chance": CHANCE[axis], "original": originals[axis], "original_se": 0.02,
                         "advantage_retained": ar if margin > 0 else np.nan,
                         "advantage_retained_se": ar_se if margin > 0 else np.nan, "n_images": 2 * patients,
                         "n_patients": patients, "reason": ""})
    modality = ModalityOutcome(data=None, settings=list(releases), scores=pd.DataFrame(rows), counts={},
                               examples={}, seconds={})
    return Outcome(config=config or chapter.Config(gan_methods=()), modalities={"fundus": modality}, gan={},
                   not_audited={}, seconds=0.0)


ENDS = {Setting("no change"): {}, Setting("constant"): {"linkage": (0.02, 0.05), "attribute": (0.0, 0.0),
                                                         "membership": (-0.03, 0.06), "utility": (0.0, 0.0)}}
BLUR = {Setting("blur", "sigma", 1.0): {"linkage": (0.6, 0.05), "utility": (0.5, 0.05)},
        Setting("blur", "sigma", 2.0): {"linkage": (0.3, 0.05), "utility": (0.2, 0.05)}}


def claim(claims, claim_id):
    found = [item for item in claims if item.id == claim_id]
    assert len(found) == 1, [item.id for item in claims]
    return found[0]


# ---------------------------------------------------------------------------------------------------------------
# config
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("changes, message", [
    ({"blur_sigmas": (2.0, 1.0)}, "BLUR_SIGMAS must be distinct and increasing"),
    ({"pixelate_blocks": (2, 4.5)}, "PIXELATE_BLOCKS values must be whole numbers"),
    ({"snow_p": (0.5, 1.5)}, "SNOW_P values must lie in (0, 1]"),
    ({"k_values": (1, 2)}, "K_VALUES values must be >= 2"),
    ({"gan_methods": ("face-swap",)}, "GAN_METHODS must be a list of distinct names"),
    ({"gan_methods": ("gmia", "gmia")}, "GAN_METHODS must be a list of distinct names"),
    ({"vessel_alphas": (0.5, 1.5)}, "VESSEL_ALPHAS values must lie in (0, 1]"),
    ({"gmia_margins": (-0.7, 0.0)}, "GMIA_MARGINS must be distinct decreasing cosines"),
    ({"gmia_margins": (0.0, -1.5)}, "GMIA_MARGINS must be distinct decreasing cosines"),
    ({"swap_strengths": (0.0, 1.0)}, "SWAP_STRENGTHS values must be > 0"),
    ({"member_share": 1.0}, "MEMBER_SHARE must be a number in (0, 1)"),
    ({"utility_score": "fidelity"}, "UTILITY_SCORE must be one of"),
    ({"chance_margin": 0.0}, "CHANCE_MARGIN must lie in (0, 1)"),
    ({"cxr_images_per_patient": 1}, "CXR_IMAGES_PER_PATIENT must be an integer >= 2"),
])
def test_config_rejects_bad_values_naming_the_parameter(changes, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]")):
        chapter.Config(**changes)


def test_settings_sweep_every_knob_and_keep_each_method_on_its_modality():
    config = chapter.Config(blur_sigmas=(1.0, 2.0), k_values=(2,), ksalsa_k_values=(5,))
    fundus, cxr = chapter.settings_for(config, "fundus"), chapter.settings_for(config, "cxr")
    assert [setting.label for setting in fundus[:4]] == ["no change", "constant image", "blur σ=1", "blur σ=2"]
    fundus_methods, cxr_methods = {setting.method for setting in fundus}, {setting.method for setting in cxr}
    assert fundus_methods - cxr_methods == {"vs-snow", "k-salsa", "sspace-vessel-edit", "stylespace"}
    assert cxr_methods - fundus_methods == {"gmia", "identity-swap"}
    assert Setting("k-salsa", "k", 5.0) in fundus
    # GMIA's margins run loosest first (the curve goes toward more privacy).
    assert [setting.label for setting in cxr if setting.method == "gmia"] == ["GMIA m=0", "GMIA m=-0.7"]
    none = config.replace(gan_methods=())
    assert not set(chapter.NEEDS) & {setting.method for modality in ("fundus", "cxr")
                                     for setting in chapter.settings_for(none, modality)}


def test_run_refuses_learned_methods_without_their_chapters_configs():
    with pytest.raises(ValueError, match=r"need the configs of \['04_gmia'\]"):
        chapter.run(chapter.Config(gan_methods=("gmia",)), generator_config=object())


# ---------------------------------------------------------------------------------------------------------------
# analysis
# ---------------------------------------------------------------------------------------------------------------
def test_pareto_front_keeps_only_undominated_points():
    privacy = np.array([0.0, 0.4, 0.5, 0.5, 1.0, np.nan])
    utility = np.array([0.0, 0.6, 0.5, 0.6, 1.0, 2.0])
    assert chapter.pareto_front(privacy, utility).tolist() == [True, True, False, False, True, False]


def test_matched_gain_interpolates_blur_at_the_methods_privacy():
    outcome = planted({**ENDS, **BLUR,
                       Setting("snow", "p", 0.3): {"linkage": (0.45, 0.05), "utility": (0.6, 0.05)},
                       Setting("snow", "p", 0.5): {"linkage": (0.1, 0.05), "utility": (0.3, 0.05)}})
    frame = chapter.points(outcome, "fundus")
    matched = chapter.matched_gains(frame, "snow", "linkage")
    # Snow p=0.3 sits halfway between blur sigma 1 (0.6, 0.5) and sigma 2 (0.3, 0.2): blur's utility there is 0.35.
    # Snow p=0.5 (privacy 0.1) lies below blur's range (0.3 .. 1, no change included): not matched.
    assert matched["label"].tolist() == ["Snow p=0.3"]
    assert matched["reference_utility"].iloc[0] == pytest.approx(0.35)
    assert matched["gain"].iloc[0] == pytest.approx(0.25)
    slope = (0.5 - 0.2) / (0.6 - 0.3)
    expected = math.sqrt(0.05 ** 2 + 0.25 * 0.05 ** 2 + 0.25 * 0.05 ** 2 + slope ** 2 * 0.05 ** 2)
    assert matched["se"].iloc[0] == pytest.approx(expected)
    # Between blur sigma 1 and no change (1, 1), the curve's top segment.
    outcome = planted({**ENDS, **BLUR, Setting("snow", "p", 0.1): {"linkage": (0.8, 0.05), "utility": (0.9, 0.05)}})
    matched = chapter.matched_gains(chapter.points(outcome, "fundus"), "snow", "linkage")
    assert matched["reference_utility"].iloc[0] == pytest.approx(0.75)


def test_ranking_reads_the_worst_threat_and_instruments_drop_threats_at_chance():
    releases = {**ENDS, Setting("snow", "p", 0.5): {"linkage": (0.2, 0.05), "attribute": (0.7, 0.05),
                                                     "membership": (0.1, 0.05), "utility": (0.9, 0.05)}}
    ranking = chapter.ranking_table(planted(releases), "fundus").set_index("release")
    assert ranking.loc["Snow p=0.5", "worst threat"] == "attribute"
    assert ranking.loc["Snow p=0.5", "gain"] == pytest.approx(0.2)
    assert ranking.loc["no change", "gain"] == pytest.approx(0.0)
    # An attribute attack at chance on the originals has nothing to retain: the worst usable threat is linkage.
    weak = planted(releases, originals={"attribute": 0.51})
    ranking = chapter.ranking_table(weak, "fundus").set_index("release")
    assert ranking.loc["Snow p=0.5", "worst threat"] == "linkage"
    table = chapter.instruments_table(weak)
    assert table.loc[table["axis"].str.startswith("sex"), "passed"].tolist() == [False]


# ---------------------------------------------------------------------------------------------------------------
# claims, planted
# ---------------------------------------------------------------------------------------------------------------
def test_constant_image_claim_holds_fails_and_waits_for_its_instruments():
    claims = chapter.evaluate_claims(planted({**ENDS, **BLUR}))
    assert claim(claims, "fundus-constant-removes-threats").verdict == "holds"
    assert claim(claims, "fundus-originals-leak").verdict == "holds"
    leaky = {**ENDS, Setting("constant"): {"linkage": (0.8, 0.05), "attribute": (0.0, 0.0),
                                           "membership": (0.0, 0.05), "utility": (0.0, 0.0)}}
    verdict = claim(chapter.evaluate_claims(planted({**leaky, **BLUR})), "fundus-constant-removes-threats")
    assert verdict.verdict == "does not hold" and "linkage" in verdict.quantity
    noisy = {**ENDS, Setting("constant"): {"linkage": (0.1, 0.2), "attribute": (0.0, 0.0),
                                           "membership": (0.0, 0.05), "utility": (0.0, 0.0)}}
    assert claim(chapter.evaluate_claims(planted({**noisy, **BLUR})),
                 "fundus-constant-removes-threats").verdict == "undecided"
    weak = chapter.evaluate_claims(planted({**ENDS, **BLUR}, originals={"membership": 0.52}))
    assert claim(weak, "fundus-constant-removes-threats").verdict == "undecided"
    assert "instrument under its floor" in claim(weak, "fundus-constant-removes-threats").reason


def test_originals_leak_fails_when_an_attack_is_below_chance():
    below = chapter.evaluate_claims(planted({**ENDS, **BLUR}, originals={"attribute": 0.3}))
    verdict = claim(below, "fundus-originals-leak")
    assert verdict.verdict == "does not hold" and "sex inference" in verdict.quantity
    few = chapter.evaluate_claims(planted({**ENDS, **BLUR}, patients=10))
    assert claim(few, "fundus-originals-leak").verdict == "undecided"


@pytest.mark.parametrize("utility, expected", [((0.8, 0.05), "holds"), ((0.1, 0.05), "does not hold"),
                                               ((0.4, 0.3), "undecided")])
def test_method_against_blur_at_matched_privacy(utility, expected):
    releases = {**ENDS, **BLUR, Setting("snow", "p", 0.3): {"linkage": (0.45, 0.05), "utility": utility}}
    claims = chapter.evaluate_claims(planted(releases))
    assert claim(claims, "fundus-snow-vs-blur-linkage").verdict == expected
    assert check_record({"claims": [item.as_dict() for item in claims]}) == []


def test_undecided_where_the_method_never_reaches_blurs_privacy_and_constant_metrics_are_refused():
    releases = {**ENDS, **BLUR, Setting("snow", "p", 0.3): {"linkage": (0.05, 0.02), "utility": (0.9, 0.05)}}
    claims = chapter.evaluate_claims(planted(releases))
    unmatched = claim(claims, "fundus-snow-vs-blur-linkage")
    # Blur's curve spans 0.3 (sigma 2) .. 1 (no change); Snow's 0.05 lies below it, so nothing is compared.
    assert unmatched.verdict == "undecided" and unmatched.effect is None  # not measured
    assert "blur's measured range [+0.3, +1]" in unmatched.reason and "Snow p=0.3 +0.05" in unmatched.reason
    assert unmatched.ours["blur range"] == [pytest.approx(0.3), pytest.approx(1.0)]
    assert check_record({"claims": [item.as_dict() for item in claims]}) == []
    # Widening blur's sweep to the method's privacy turns the same release into a decided comparison.
    wider = {**releases, Setting("blur", "sigma", 8.0): {"linkage": (0.0, 0.02), "utility": (0.1, 0.05)}}
    assert claim(chapter.evaluate_claims(planted(wider)), "fundus-snow-vs-blur-linkage").verdict == "holds"
    flat = {setting: {**axes, "utility": (0.5, 0.05)} for setting, axes in
            {**BLUR, Setting("snow", "p", 0.3): {"linkage": (0.45, 0.05)}}.items()}
    flat_ends = {Setting("no change"): {"utility": (0.5, 0.05)}, Setting("constant"): {"utility": (0.5, 0.05)}}
    verdict = claim(chapter.evaluate_claims(planted({**flat_ends, **flat})), "fundus-snow-vs-blur-linkage")
    assert verdict.verdict == "undecided" and "utility advantage retained range" in verdict.reason


# ---------------------------------------------------------------------------------------------------------------
# end to end, tiny
# ---------------------------------------------------------------------------------------------------------------
TINY = chapter.Config(fundus_patients=16, cxr_patients=12, cxr_images_per_patient=2, blur_sigmas=(1.0,),
                      pixelate_blocks=(4,), noise_sigmas=(0.2,), snow_p=(0.5,), k_values=(2,), gan_methods=(),
                      identity_epochs=1, classifier_epochs=1, bootstrap=5)


@pytest.fixture(scope="module")
def tiny_outcome():
    return chapter.run(TINY)


def test_tiny_run_audits_every_release_on_one_split_and_caches_it(tiny_outcome):
    for name, modality in tiny_outcome.modalities.items():
        labels = [setting.label for setting in modality.settings]
        assert set(modality.scores["label"]) == set(labels)
        data = modality.data
        assert len(data.members) == round(TINY.member_share * len(np.unique(data.patients)))
        assert modality.counts["released_patients"] == len(data.members)
        # No change keeps every threat's score; the constant image's attribute attacker sits exactly at chance.
        frame = chapter.points(tiny_outcome, name)
        assert frame.loc["no change", "linkage_value"] == frame.loc["no change", "linkage_original"]
        assert frame.loc["constant image", "attribute_value"] == pytest.approx(0.5)
        assert modality.examples["constant image"].shape == data.images.shape[1:]
        assert len(np.unique(modality.examples["constant image"].reshape(-1, data.images.shape[3]), axis=0)) == 1
    assert "vs-snow" not in set(tiny_outcome.modalities["cxr"].scores["method"])
    claims = chapter.evaluate_claims(tiny_outcome)
    assert check_record({"claims": [item.as_dict() for item in claims]}) == []
    assert all(item.verdict == "undecided" for item in claims)  # 12 patients: too few to decide anything
    metrics = chapter.metrics(tiny_outcome)
    assert metrics["fundus/no change/linkage_ar"] == 1.0 and "cxr/blur/sigma=1/utility_ar" in metrics
    again = chapter.run(TINY)
    assert all(len(modality.cached) == len(modality.settings) for modality in again.modalities.values())
    pd.testing.assert_frame_equal(again.scores(), tiny_outcome.scores())
