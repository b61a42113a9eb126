"""The one decision rule of every claim: symmetric directional verdicts, retention and equivalence margins,
instrument floors, constant metrics, and the record check that recomputes verdicts from recorded fields."""

from __future__ import annotations

import math

import numpy as np
import pytest

from anonpaper.experiments.claims import (DECISION_Z, FAILS, HOLDS, UNDECIDED, Claim, Instrument, check_record,
                                          combine_replicate_tables, combine_seed_claims, decide, varies,
                                          verdict_from_fields)
from anonpaper.metrics.statistics import rule_verdict, sequence_drop

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("effect, expected", [(0.21, True), (0.19, None), (0.0, None), (-0.19, None),
                                              (-0.21, False)])
def test_directional_rule_is_symmetric(effect, expected):
    assert rule_verdict("directional", effect, 0.1, z=2) is expected


def test_a_rise_within_noise_is_undecided_not_a_contradiction():
    # A score that should fall but rises by less than its noise (k-SALSA utility 0.050 +- 0.043 -> 0.183 +- 0.091)
    # neither holds nor contradicts the claim.
    effect, se = sequence_drop([0.050, 0.11, 0.183], [0.043, 0.05, 0.091])
    assert effect < 0 and rule_verdict("directional", effect, se, z=DECISION_Z) is None
    # The same rise beyond its noise contradicts it.
    effect, se = sequence_drop([0.05, 0.6], [0.02, 0.02])
    assert rule_verdict("directional", effect, se, z=DECISION_Z) is False


@pytest.mark.parametrize("effect, se, expected", [(-0.01, 0.01, True),    # worst case -0.03 inside -0.05
                                                  (-0.04, 0.01, None),    # worst case -0.06 outside, best -0.02 in
                                                  (-0.10, 0.02, False),   # best case -0.06 outside
                                                  (0.00, 0.04, None)])    # no loss, but too noisy to retain
def test_retention_needs_the_whole_interval_inside_the_margin(effect, se, expected):
    assert rule_verdict("retention", effect, se, z=2, margin=0.05) is expected


@pytest.mark.parametrize("effect, se, expected", [(0.01, 0.01, True), (-0.01, 0.01, True), (0.04, 0.01, None),
                                                  (-0.165, 0.02, False), (0.2, 0.05, False), (0.0, 0.05, None)])
def test_equivalence_is_on_the_distance_from_chance_both_ways(effect, se, expected):
    # An attacker far *below* chance (AUC 0.335: it links by picking the least similar image) is not "at chance".
    assert rule_verdict("equivalence", effect, se, z=2, margin=0.05) is expected


@pytest.mark.parametrize("se", [0.0, -0.1, float("nan"), float("inf"), None])
def test_no_usable_standard_error_is_undecided(se):
    assert rule_verdict("directional", 5.0, se, z=2) is None


def test_rule_validation():
    with pytest.raises(ValueError, match="rule must be one of"):
        rule_verdict("bigger", 1.0, 0.1, z=2)
    with pytest.raises(ValueError, match="margin"):
        rule_verdict("retention", 1.0, 0.1, z=2)
    with pytest.raises(ValueError, match="margin"):
        rule_verdict("equivalence", 1.0, 0.1, z=2, margin=-0.1)
    with pytest.raises(ValueError, match="z must be"):
        rule_verdict("directional", 1.0, 0.1, z=0)


def test_instrument_floor_makes_the_claim_undecided_and_says_which():
    dead = Instrument("hard-exudate U-Net validation Dice", 0.0, 0.3)
    claim = decide("x", "Ours keeps lesions", paper="RROI 0.44", ours=1.0, rule="directional", effect=0.5, se=0.01,
                   instruments=[dead, Instrument("attacker rank-1", 0.9, 0.5)])
    assert claim.verdict == UNDECIDED
    assert "hard-exudate U-Net validation Dice 0 < floor 0.3" in claim.reason
    assert claim.as_dict()["instruments"][0] == {"name": "hard-exudate U-Net validation Dice", "value": 0.0,
                                                 "floor": 0.3, "higher_is_better": True, "passed": False}
    # A ceiling (lower is better) and a NaN measurement.
    assert Instrument("FID", 10.0, 20.0, higher_is_better=False).passed
    assert not Instrument("FID", 30.0, 20.0, higher_is_better=False).passed
    assert not Instrument("rank-1", float("nan"), 0.5).passed
    with pytest.raises(ValueError, match="floor"):
        Instrument("rank-1", 0.9, float("nan"))


def test_a_constant_metric_cannot_decide():
    constant = varies("AMS", [1.0] * 63)
    assert not constant.passed and constant.value == 0.0
    claim = decide("ams", "Ours keeps lesions better than StyleSpace", paper=">", ours=1.0, rule="directional",
                   effect=0.0, se=0.0, instruments=[constant])
    assert claim.verdict == UNDECIDED and "AMS range across settings" in claim.reason
    assert varies("AMS", [0.9, 1.0, float("nan")]).passed
    assert not varies("AMS", [0.9]).passed  # a single value cannot show that it varies


def test_too_few_test_images_and_unmeasurable_effects_are_undecided():
    claim = decide("x", "A beats B", paper=">", ours=1, rule="directional", effect=1.0, se=0.1, n=10, min_n=40)
    assert claim.verdict == UNDECIDED and claim.reason.startswith("too few test images (10 < 40)")
    claim = decide("x", "A beats B", paper=">", ours=1, rule="directional", effect=float("nan"), se=0.1,
                   quantity="gain", note="the curves do not overlap")
    assert claim.verdict == UNDECIDED and claim.reason == "gain could not be measured; the curves do not overlap"
    assert claim.as_dict()["effect"] is None


@pytest.mark.parametrize("rule, effect, se, margin", [("directional", 0.3, 0.1, None), ("directional", -0.3, 0.1, None),
                                                      ("retention", -0.01, 0.01, 0.05),
                                                      ("retention", -0.2, 0.01, 0.05),
                                                      ("equivalence", 0.01, 0.01, 0.05),
                                                      ("equivalence", 0.3, 0.01, 0.05)])
def test_reason_reflects_the_verdict_and_the_record_checks_out(rule, effect, se, margin):
    claim = decide("c", "statement", paper="p", ours=effect, rule=rule, effect=effect, se=se, margin=margin,
                   quantity="q")
    assert claim.verdict in (HOLDS, FAILS)
    assert claim.reason.startswith(f"q = {effect:+.4g} (SE {se:.2g})")
    record = {"claims": [claim.as_dict()]}
    assert check_record(record) == []
    assert verdict_from_fields(rule, effect, se, DECISION_Z, margin) == claim.verdict


def test_check_record_finds_tampered_and_hand_decided_claims():
    good = decide("good", "s", paper="p", ours=1, rule="directional", effect=0.3, se=0.1).as_dict()
    flipped = {**good, "id": "flipped", "verdict": UNDECIDED}
    by_hand = Claim("by-hand", "s", "p", 1, HOLDS, "looks better").as_dict()  # a record from before the rule
    weak = Instrument("attacker", 0.2, 0.5).as_dict()
    lying_instrument = {**good, "id": "lying", "instruments": [{**weak, "passed": True}]}
    no_floor = {**good, "id": "no-floor", "instruments": [{"name": "segmenter", "value": 0.9, "floor": None,
                                                             "passed": True}]}
    holds_on_failed = {**good, "id": "holds-on-failed", "instruments": [weak]}
    problems = check_record({"claims": [good, flipped, by_hand, lying_instrument, no_floor, holds_on_failed]})
    ids = [problem.split(":")[0] for problem in problems]
    assert ids == ["flipped", "by-hand", "lying", "no-floor", "holds-on-failed"]
    assert "gives 'holds'" in problems[0] and "no decision rule" in problems[1]
    assert "gives 'undecided'" in problems[4]
    assert check_record({"metrics": {}}) == ["record: no list of claims"]


def test_as_dict_is_json_plain():
    import json

    claim = decide("c", "s", paper="p", ours=1, rule="retention", effect=float("nan"), se=math.inf, margin=0.1,
                   instruments=[Instrument("x", float("nan"), 0.1)])
    text = json.dumps(claim.as_dict(), allow_nan=False)
    assert '"effect": null' in text and '"value": null' in text


def test_an_instrument_averaged_over_seeds_must_clear_its_floor_beyond_their_spread():
    steady = Instrument("attacker rank-1", 0.6, 0.5, seed_sd=0.02, seeds=3)
    lucky = Instrument("attacker rank-1", 0.6, 0.5, seed_sd=0.2, seeds=3)  # 0.6 - 2 * 0.2 / sqrt(3) < 0.5
    assert steady.passed and not lucky.passed
    ceiling = Instrument("empty masks", 0.1, 0.2, higher_is_better=False, seed_sd=0.12, seeds=4)  # 0.1 + 0.12 > 0.2
    assert not ceiling.passed
    claim = decide("c", "A beats B", paper=">", ours=1, rule="directional", effect=0.5, se=0.1, instruments=[lucky])
    assert claim.verdict == UNDECIDED and "mean of 3 seeds, SD 0.2" in claim.reason
    # The mean clears its floor; the reason says what fails it, the bound the floor is checked against.
    assert "attacker rank-1 0.6 (mean of 3 seeds, SD 0.2), less 2 SE: 0.3691 < floor 0.5" in claim.reason
    assert ceiling.describe() == "empty masks 0.1 (mean of 4 seeds, SD 0.12), plus 2 SE: 0.22 > floor 0.2"
    assert steady.as_dict()["bound"] == pytest.approx(0.6 - 2 * 0.02 / math.sqrt(3))
    assert "bound" not in Instrument("attacker rank-1", 0.6, 0.5).as_dict()
    record = claim.as_dict()
    assert check_record({"claims": [record]}) == []
    # The record check reads the spread: a record that drops it while keeping `passed` false is caught.
    tampered = {**record, "instruments": [{**record["instruments"][0], "seed_sd": 0.0}]}
    assert check_record({"claims": [tampered]})
    with pytest.raises(ValueError, match="seeds"):
        Instrument("x", 0.5, 0.1, seeds=0)


def test_claims_combined_over_judge_seeds_carry_the_seed_spread():
    def seed(effect, rank1, ours_extra=None):
        return [decide("judged", "A lowers B", paper=">", ours={"drop": effect, "label": "x"}, rule="directional",
                       effect=effect, se=0.02, instruments=[Instrument("attacker rank-1", rank1, 0.5)],
                       note="paired over the same images"),
                decide("unjudged", "A keeps C", paper="=", ours={"ssim": 0.7}, rule="retention", effect=-0.01,
                       se=0.01, margin=0.05, note="the network's own classifier")]

    effects = [0.3, -0.05, 0.03]
    scattered = [seed(effect, rank1) for effect, rank1 in zip(effects, (0.8, 0.7, 0.75))]
    assert [claims[0].verdict for claims in scattered] == [HOLDS, FAILS, UNDECIDED]
    judged, unjudged = combine_seed_claims(scattered)
    assert judged.verdict == UNDECIDED and judged.effect == pytest.approx(np.mean(effects))
    assert judged.se == pytest.approx(math.sqrt(0.02**2 + np.var(effects, ddof=1) / 3))
    assert judged.ours == {"drop": round(np.mean(effects), 4), "label": "x"}
    assert "mean of 3 judge seeds" in judged.reason and "paired over the same images" in judged.reason
    assert judged.instruments[0]["seeds"] == 3 and judged.instruments[0]["value"] == pytest.approx(0.75)
    assert unjudged == scattered[0][1]  # no judge touched it: kept as it is
    consistent = combine_seed_claims([seed(0.3, 0.8), seed(0.28, 0.8), seed(0.32, 0.8)])[0]
    assert consistent.verdict == HOLDS
    assert check_record({"claims": [claim.as_dict() for claim in (judged, unjudged, consistent)]}) == []
    assert combine_seed_claims([seed(0.3, 0.8)]) == seed(0.3, 0.8)
    with pytest.raises(ValueError, match="different claims"):
        combine_seed_claims([seed(0.3, 0.8), seed(0.3, 0.8)[:1]])


def test_replicate_tables_average_values_and_add_the_seed_spread_to_the_se():
    import pandas as pd

    first = pd.DataFrame({"set": ["a", "b"], "rank1": [0.4, 0.2], "rank1_se": [0.03, 0.03], "n": [10, 10]})
    second = first.assign(rank1=[0.6, 0.2])
    both = combine_replicate_tables([first, second], ["set"])
    assert both["rank1"].tolist() == pytest.approx([0.5, 0.2])
    assert both["rank1_se"].tolist() == pytest.approx([math.sqrt(0.03**2 + 0.02 / 2), 0.03])
    assert both["n"].tolist() == [10, 10]
    assert combine_replicate_tables([first], ["set"]).equals(first)
    with pytest.raises(ValueError, match="different rows"):
        combine_replicate_tables([first, first.iloc[::-1]], ["set"])
