"""The GMIA chapter (paper 3): config validation, claims on planted outcomes, and pipeline pieces on tiny inputs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from anonpaper.experiments.claims import check_record
from anonpaper.experiments.gmia import Config, Outcome, evaluate_claims, table1, utility_table, variants
from anonpaper.experiments.gmia.pipeline import (BLUR, CO_RECON, E_RECON, ID_ONLY, INDEPENDENT, PIXELATE, REAL,
                                                 UT_ONLY, DomainLPIPS, GMIAData, balanced_accuracy_or_nan,
                                                 iw_ssim_scales, linkability_rows, main_name, membership_folds,
                                                 membership_rows, outer_auc, singling_out_rows, to_tensor, to_uint8,
                                                 utility_metrics)
from anonpaper.metrics.classification import auroc
from anonpaper.train.loop import TrainSettings
from anonpaper.train.multilabel import macro_auroc, predict_multilabel, train_multilabel_classifier

pytestmark = pytest.mark.unit


# ---------------------------------------------------------------------------------------------------------------
# config
# ---------------------------------------------------------------------------------------------------------------
def test_config_defaults_are_valid_and_bad_values_name_the_parameter():
    config = Config()
    assert config.margin in config.margins and config.generators_profile == "quick"
    assert Config.from_parameters(config.parameters()) == config
    for changes, message in [({"generators_profile": "huge"}, "GENERATORS_PROFILE"),
                             ({"cxr_patients": 3}, "CXR_PATIENTS"), ({"images_per_patient": 1}, "IMAGES_PER_PATIENT"),
                             ({"margin": -0.6}, "MARGIN"), ({"margins": (-0.7, 0.0)}, "MARGINS"),
                             ({"projection_batch_size": 6}, "PROJECTION_BATCH_SIZE"), ({"steps": 0}, "STEPS"),
                             ({"identity_backbone": "vgg"}, "IDENTITY_BACKBONE"),
                             ({"utility_drop_max": 1.5}, "UTILITY_DROP_MAX"),
                             ({"unlinkable_margin": 0.0}, "UNLINKABLE_MARGIN"),
                             ({"identity_min_auc": 1.2}, "IDENTITY_MIN_AUC"),
                             ({"membership_folds": 2}, "MEMBERSHIP_FOLDS"),
                             ({"independent_backbone": "small_cnn"}, "INDEPENDENT_BACKBONE")]:
        with pytest.raises(ValueError, match=message):
            config.replace(**changes)
    assert Config(margins=[0, -0.5, -0.7]).margins == (0.0, -0.5, -0.7)  # notebook lists become float tuples


def test_variants_main_setting_covers_every_split_and_ablations_train_and_test():
    settings = variants(Config())
    names = list(settings)
    assert names[0] == main_name(-0.7) and settings[names[0]]["splits"] == ("train", "val", "test")
    assert {main_name(0.0), main_name(-0.5), ID_ONLY, UT_ONLY} <= set(names)
    assert settings[ID_ONLY]["utility_weight"] == 0 and settings[UT_ONLY]["identity_weight"] == 0
    assert all(settings[name]["splits"] == ("train", "test") for name in names[1:])


# ---------------------------------------------------------------------------------------------------------------
# claims on planted outcomes
# ---------------------------------------------------------------------------------------------------------------
ATTACKED = (main_name(-0.7), BLUR, PIXELATE, UT_ONLY)  # the sets an adaptive attacker is retrained on


def _link_row(attacker, name, risk, value, closer=np.nan, auc=0.7, se=0.02, n=200):
    return {"attacker": attacker, "set": name, "risk": risk, "f1": value, "accuracy": value, "tar": value,
            "far_as_published": 1 - value, "far": 0.05, "auc": auc, "auc_se": se if risk == "outer" else np.nan,
            "tar_image": value, "tar_image_se": se, "stranger_image": 0.05 if risk == "outer" else np.nan,
            "stranger_image_se": 0.01 if risk == "outer" else np.nan, "own_closer": closer,
            "own_closer_se": se if risk == "outer" else np.nan, "n": n}


def _planted(works: bool, n: int = 200, closer: float | None = None) -> Outcome:
    """An outcome whose numbers make every paper claim hold (``works``) or fail (not ``works``). ``closer`` plants
    the main setting's "own closer" share (and outer AUC) for every attacker."""
    config = Config()
    main = main_name(config.margin)
    sets = [CO_RECON, E_RECON, main, main_name(0.0), main_name(-0.5), ID_ONLY, UT_ONLY, BLUR, PIXELATE]
    good = {"PSNR": (24.0, 19.0), "SSIM": (0.9, 0.8), "IW-SSIM": (0.6, 0.4), "LPIPS (domain)": (0.2, 0.4)}
    quality = [{"set": name, "metric": metric, "value": values[0] if name == CO_RECON else values[1], "se": 0.01,
                "n": n} for name in sets for metric, values in good.items()]
    paired = {metric: ((a - b) if works else (b - a), 0.01) for metric, (a, b) in good.items()}
    # Utility: the main setting loses 0.02 (works) or 0.2 (fails) AUROC; stricter margins keep less (works).
    auroc_of = {REAL: 0.80, CO_RECON: 0.78, E_RECON: 0.70, main_name(0.0): 0.80 if works else 0.50,
                main_name(-0.5): 0.79, main: 0.78 if works else 0.60, ID_ONLY: 0.70 if works else 0.75,
                UT_ONLY: 0.79, BLUR: 0.70 if works else 0.75, PIXELATE: 0.70 if works else 0.75}
    utility = pd.DataFrame([{"training set": name, "accuracy": 0.7, "AP": 0.6, "AUROC": value, "F1": 0.5, "n": n,
                             "AUROC_se": 0.005} for name, value in auroc_of.items()])
    # Linkability: "own closer" at 0.5 = unlinkable (works); 0.25 = pushed to the opposite identity (fails).
    main_closer = closer if closer is not None else (0.5 if works else 0.25)
    closer_of = {main_name(0.0): 0.8 if works else 0.5, main_name(-0.5): 0.6, main: main_closer, ID_ONLY: 0.5,
                 UT_ONLY: 0.9, CO_RECON: 0.95, E_RECON: 0.9, BLUR: 0.8 if works else 0.5,
                 PIXELATE: 0.8 if works else 0.5}
    outer_tar = {name: 0.0 if name == main and works else (0.6 if name == main else 0.4) for name in closer_of}
    rows = []
    for attacker in ("fixed", INDEPENDENT):
        rows.append(_link_row(attacker, REAL, "real", 0.9, auc=0.95, n=n))
        for name in closer_of:
            rows.append(_link_row(attacker, name, "inner", 0.8 if works else 0.3, n=n))
            rows.append(_link_row(attacker, name, "outer", outer_tar[name], closer_of[name],
                                  auc=closer_of[name], n=n))
    for name in ATTACKED:
        rows.append(_link_row(f"adaptive ({name})", REAL, "real", 0.9, auc=0.95, n=n))
        rows.append(_link_row(f"adaptive ({name})", name, "inner", 0.8, auc=0.9, n=n))
        rows.append(_link_row(f"adaptive ({name})", name, "outer", outer_tar[name], closer_of[name],
                              auc=closer_of[name], n=n))
    hidden = {name: 0.95 for name in sets}
    hidden[UT_ONLY] = 0.7 if works else 1.0
    hidden[main] = 1.0 if works else 0.7
    singling = [{"attacker": attacker, "set": name, "hidden_rate": value, "hidden_rate_se": 0.02,
                 "local_cloaking": 3.0, "mean_cloaking": 3.0, "n": n}
                for attacker in ("fixed", INDEPENDENT) for name, value in hidden.items()]
    singling += [{"attacker": f"adaptive ({name})", "set": name, "hidden_rate": hidden[name], "hidden_rate_se": 0.02,
                  "local_cloaking": 3.0, "mean_cloaking": 3.0, "n": n} for name in ATTACKED]
    # Membership on held-out patients: the attacker reads real images (0.9); anonymised ones at chance (works) or
    # better than real ones (fails).
    accuracy = {REAL: 0.9, main: 0.5 if works else 0.99}
    membership = pd.DataFrame([{"set": name, "members_detected": 0.5, "members_detected_se": 0.02,
                                "non_members_rejected": 0.5, "balanced_accuracy": accuracy.get(name, 0.6),
                                "balanced_accuracy_se": 0.02, "n": n,
                                "attacker_training_accuracy": 0.97 if name == REAL else np.nan}
                               for name in [REAL] + sets])
    margins = pd.DataFrame([{"margin": m, "set": main_name(m), "final_cosine": m - 0.1, "reached": 1.0, "PSNR": 20.0}
                            for m in config.margins])
    instruments = {"identity_auc": 0.95, "identity_tar": 0.9, "independent_auc": 0.9,
                   **{f"adaptive_auc/{name}": 0.85 for name in ATTACKED}, "utility_auroc": 0.8,
                   "membership_accuracy": 0.9, "projector_psnr": 24.0, "mean_image_psnr": 12.0,
                   "projector_gain_db": 12.0, "projector_auroc": 0.78, "projector_identity_auc": 0.95,
                   "encoder_updates_ratio": 1.0, "lpips_val_dice": 0.9}
    return Outcome(config=config, data=pd.DataFrame({"images": [n * 3, n // 2, n], "patients": [30, 5, 10]},
                                                     index=pd.Index(["train", "val", "test"], name="split")),
                   resolution=32, generator={}, training=pd.DataFrame(), histories={}, quality=pd.DataFrame(quality),
                   quality_paired=paired, utility=utility, linkability=pd.DataFrame(rows),
                   singling_out=pd.DataFrame(singling), membership=membership, margins=margins, curves={},
                   thresholds={}, baselines={}, instruments=instruments, examples={}, example_patients=[])


QUALITY_CLAIMS = tuple(f"gmia-cotraining-beats-etraining-{name}" for name in ("psnr", "ssim", "iw-ssim", "lpips"))
PAPER_CLAIMS = QUALITY_CLAIMS + (
    "gmia-outer-unlinkable", "gmia-outer-unlinkable-adaptive", "gmia-outer-unlinkable-independent",
    "gmia-outer-auc-at-chance", "gmia-inner-above-outer", "gmia-lid-hides", "gmia-lid-hides-adaptive",
    "gmia-lid-hides-independent", "gmia-utility-kept", "gmia-lut-keeps-utility", "gmia-beats-blur-utility",
    "gmia-beats-blur-linkability", "gmia-beats-pixelation-utility", "gmia-beats-pixelation-linkability",
    "gmia-margin-lowers-linkability", "gmia-margin-costs-utility", "gmia-membership-drops",
    "gmia-membership-at-chance")


def _claims(outcome: Outcome) -> dict:
    return {claim.id: claim for claim in evaluate_claims(outcome)}


def test_claims_hold_on_an_outcome_built_to_satisfy_them_and_pass_the_record_check():
    claims = evaluate_claims(_planted(works=True))
    assert tuple(claim.id for claim in claims) == PAPER_CLAIMS
    for claim in claims:
        assert claim.verdict == "holds", (claim.id, claim.reason)
        assert claim.rule and claim.ours["2 SE"] == pytest.approx(2 * claim.se, abs=1e-4)
    assert check_record({"claims": [claim.as_dict() for claim in claims]}) == []


def test_claims_do_not_hold_on_an_outcome_built_to_contradict_them():
    claims = evaluate_claims(_planted(works=False))
    for claim in claims:
        assert claim.verdict == "does not hold", (claim.id, claim.reason)
    assert check_record({"claims": [claim.as_dict() for claim in claims]}) == []


@pytest.mark.parametrize("closer", [0.25, 0.335, 0.75])
def test_an_anonymisation_pushed_past_chance_either_way_is_not_unlinkable(closer):
    # Own closer 0.25 / outer AUC 0.335: the attacker links by picking the LEAST similar anonymisation. Outer TAR 0
    # at the threshold, as the paper reports, but not unlinkable.
    claims = _claims(_planted(works=True, closer=closer))
    for claim_id in ("gmia-outer-unlinkable", "gmia-outer-unlinkable-adaptive", "gmia-outer-unlinkable-independent",
                     "gmia-outer-auc-at-chance"):
        assert claims[claim_id].verdict == "does not hold", (claim_id, claims[claim_id].reason)
    # A distance from chance within the noise band neither holds nor fails.
    near = _claims(_planted(works=True, closer=0.42))["gmia-outer-unlinkable"]
    assert near.verdict == "undecided" and near.effect == pytest.approx(-0.08)


def test_claims_are_undecided_on_a_small_test_set():
    small = evaluate_claims(_planted(works=True, n=20))
    assert all(claim.verdict == "undecided" and "too few test images (20 < 80)" in claim.reason for claim in small)


@pytest.mark.parametrize("instrument, value, undecided, unaffected", [
    ("identity_auc", 0.55, ("gmia-outer-unlinkable", "gmia-outer-auc-at-chance", "gmia-inner-above-outer",
                            "gmia-lid-hides", "gmia-margin-lowers-linkability"), "gmia-outer-unlinkable-independent"),
    ("independent_auc", 0.6, ("gmia-outer-unlinkable-independent", "gmia-lid-hides-independent"),
     "gmia-outer-unlinkable"),
    ("adaptive_auc/L_id + L_ut, m=-0.7", 0.6, ("gmia-outer-unlinkable-adaptive", "gmia-lid-hides-adaptive",
                                               "gmia-beats-blur-linkability"), "gmia-outer-unlinkable"),
    ("utility_auroc", 0.55, ("gmia-utility-kept", "gmia-lut-keeps-utility", "gmia-beats-blur-utility",
                             "gmia-margin-costs-utility"), "gmia-outer-unlinkable"),
    ("projector_gain_db", 2.1, ("gmia-utility-kept", "gmia-beats-pixelation-utility"), "gmia-outer-unlinkable"),
    ("projector_auroc", 0.5, ("gmia-utility-kept",), "gmia-lid-hides"),
    ("projector_identity_auc", 0.6, ("gmia-outer-unlinkable", "gmia-lid-hides-adaptive"), "gmia-utility-kept"),
    ("membership_accuracy", 0.52, ("gmia-membership-drops", "gmia-membership-at-chance"), "gmia-utility-kept"),
    ("encoder_updates_ratio", 1 / 6, QUALITY_CLAIMS, "gmia-utility-kept"),
])
def test_an_instrument_under_its_floor_leaves_its_claims_undecided(instrument, value, undecided, unaffected):
    outcome = _planted(works=True)
    outcome.instruments[instrument] = value
    claims = _claims(outcome)
    for claim_id in undecided:
        assert claims[claim_id].verdict == "undecided", claim_id
        assert "instrument under its floor" in claims[claim_id].reason
    assert claims[unaffected].verdict == "holds", unaffected


def test_margin_claims_are_undecided_when_the_stricter_margins_did_not_bind():
    # The quick run: final cosine -0.381 at m = -0.5 and -0.393 at m = -0.7, so no image reached either margin and
    # both settings ran the same (hinge-free) optimisation; a difference to m = 0 says nothing about the margin.
    outcome = _planted(works=True)
    outcome.margins["reached"] = [1.0, 0.0, 0.0]
    claims = _claims(outcome)
    for claim_id in ("gmia-margin-lowers-linkability", "gmia-margin-costs-utility"):
        assert claims[claim_id].verdict == "undecided"
        assert "reached m = -0.5 0 < floor 0.5" in claims[claim_id].reason
    assert claims["gmia-utility-kept"].verdict == "holds"


def test_a_baseline_off_the_target_psnr_leaves_the_equal_psnr_claims_undecided():
    outcome = _planted(works=True)
    outcome.quality.loc[(outcome.quality["set"] == BLUR) & (outcome.quality["metric"] == "PSNR"), "value"] = 22.0
    claims = _claims(outcome)
    assert claims["gmia-beats-blur-utility"].verdict == "undecided"
    assert claims["gmia-beats-blur-linkability"].verdict == "undecided"
    assert claims["gmia-beats-pixelation-utility"].verdict == "holds"


def test_noise_rule_makes_a_close_comparison_undecided():
    outcome = _planted(works=True)
    outcome.utility.loc[outcome.utility["training set"] == ID_ONLY, "AUROC"] = 0.775  # 0.005 below the main setting
    claim = _claims(outcome)["gmia-lut-keeps-utility"]
    assert claim.verdict == "undecided" and "within 2 SE" in claim.reason


def test_utility_retention_needs_the_whole_interval_inside_the_margin():
    outcome = _planted(works=True)
    outcome.utility.loc[outcome.utility["training set"] == outcome.main, "AUROC"] = 0.76  # loss 0.04, 2 SE 0.014
    claim = _claims(outcome)["gmia-utility-kept"]
    assert claim.verdict == "undecided" and claim.rule == "retention" and claim.margin == 0.05


def test_tables_put_the_papers_numbers_beside_ours():
    outcome = _planted(works=True)
    first = table1(outcome)
    assert first.loc["Co-training", "PSNR paper"] == 24.319 and first.loc["E-training", "LPIPS (domain) paper"] == 0.446
    assert first.loc["Co-training", "PSNR"] == 24.0
    utility = utility_table(outcome)
    assert utility.loc[REAL, "AUROC paper"] == 0.774 and utility.loc[main_name(-0.7), "F1 paper"] == 0.531
    assert np.isnan(utility.loc[BLUR, "AUROC paper"])
    from anonpaper.experiments.gmia import (attackers_table, instruments_table, margin_table, membership_table,
                                            singling_out_attackers_table, singling_out_table)

    margins = margin_table(outcome)  # one hidden rate per margin, the fixed attacker's, among several attackers'
    assert margins["HR"].tolist() == [0.95, 0.95, 1.0] and margins["reached m"].tolist() == [1.0, 1.0, 1.0]
    assert len(singling_out_table(outcome)) == 9 and singling_out_table(outcome, INDEPENDENT).index[0] == CO_RECON
    assert singling_out_attackers_table(outcome).loc["adaptive", f"HR {UT_ONLY}"] == 0.7
    attackers = attackers_table(outcome)
    assert set(attackers.index.get_level_values("attacker")) == {"fixed", INDEPENDENT, "adaptive"}
    assert len(attackers) == 12 and attackers.loc[(BLUR, "adaptive"), "own closer"] == 0.8
    table = instruments_table(outcome)
    assert table["passed"].all() and (table["kind"] == "ceiling").sum() == 2
    assert membership_table(outcome).loc[REAL, "paper"] == 0.968


# ---------------------------------------------------------------------------------------------------------------
# pipeline pieces
# ---------------------------------------------------------------------------------------------------------------
def test_iw_ssim_scales_fit_the_window():
    assert [iw_ssim_scales(size) for size in (16, 32, 64, 128, 256)] == [1, 2, 3, 4, 5]


def test_uint8_round_trip():
    images = np.random.default_rng(0).integers(0, 256, (3, 8, 8), dtype=np.uint8)
    assert to_tensor(images).shape == (3, 1, 8, 8)
    assert np.array_equal(to_uint8(to_tensor(images)), images)


def test_utility_metrics_against_brute_force():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, (40, 3))
    labels[:, 2] = 0  # a finding absent from the test set is skipped
    scores = np.clip(labels * 0.3 + rng.random((40, 3)) * 0.7, 0, 1)
    metrics = utility_metrics(labels, scores)
    predicted = scores >= 0.5
    expected_accuracy = np.mean([(predicted[:, k] == labels[:, k]).mean() for k in range(2)])
    assert metrics["accuracy"] == pytest.approx(expected_accuracy)
    assert metrics["AUROC"] == pytest.approx(np.mean([auroc(labels[:, k], scores[:, k]) for k in range(2)]))
    assert macro_auroc(labels, scores) == pytest.approx(metrics["AUROC"])
    f1 = []
    for k in range(2):
        tp = np.sum(predicted[:, k] & (labels[:, k] == 1))
        f1.append(2 * tp / (2 * tp + np.sum(predicted[:, k] & (labels[:, k] == 0)) + np.sum(~predicted[:, k] & (labels[:, k] == 1))))
    assert metrics["F1"] == pytest.approx(np.mean(f1))


class _PatientEmbedding(torch.nn.Module):
    """A fake attacker: the unit vector of each image's mean intensity pattern (4 quadrant means)."""

    def __init__(self):
        super().__init__()
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, images):
        quadrants = torch.nn.functional.adaptive_avg_pool2d(images, 2).flatten(1) - 0.5
        return torch.nn.functional.normalize(quadrants, dim=1)


def _tiny_data(patients: int = 4, per_patient: int = 3) -> GMIAData:
    rng = np.random.default_rng(0)
    codes = np.repeat(np.arange(patients), per_patient)
    pattern = rng.integers(0, 256, (patients, 2, 2))
    images = np.kron(pattern[codes], np.ones((4, 4))) + rng.integers(-5, 6, (len(codes), 8, 8))
    images = np.clip(images, 0, 255).astype(np.uint8)
    split = {name: images for name in ("train", "val", "test")}
    return GMIAData(split, {name: np.zeros((len(codes), 1), np.int64) for name in split},
                    {name: codes for name in split}, {name: codes.astype(str) for name in split}, ("x",), 8, None, {})


def test_linkability_and_singling_out_on_an_identity_copy_and_a_shuffle():
    data = _tiny_data()
    config = Config(bootstrap=10)
    shuffled = {name: data.images["test"][::-1].copy() for name in ("train", "val", "test")}
    sets = {REAL: data.images, "copy": dict(data.images), "shuffled": shuffled}
    rows, per_image = linkability_rows(_PatientEmbedding(), 0.05, data, sets, config, "fake")
    frame = pd.DataFrame(rows).set_index(["set", "risk"])
    # A copy is linked to its original every time (outer TAR 1, the authors' "FAR" column 0) ...
    assert frame.loc[("copy", "outer"), "tar"] == 1.0 and frame.loc[("copy", "outer"), "far_as_published"] == 0.0
    assert frame.loc[("copy", "outer"), "tar_image"] == 1.0
    # ... a reversed set (other patients' images) never is, and strangers are accepted instead.
    assert frame.loc[("shuffled", "outer"), "tar_image"] == 0.0 and frame.loc[("shuffled", "outer"), "stranger_image"] > 0
    assert frame.loc[("copy", "outer"), "own_closer"] == 1.0 and frame.loc[("shuffled", "outer"), "own_closer"] < 0.5
    assert frame.loc[("real", "real"), "tar"] == 1.0 and np.array_equal(per_image["copy/outer"]["tar"], np.ones(12))
    singling = pd.DataFrame(singling_out_rows(_PatientEmbedding(), data, sets, config)).set_index("set")
    assert singling.loc["shuffled", "hidden_rate"] > 0


def test_domain_lpips_upsamples_and_is_zero_for_identical_images():
    torch.manual_seed(0)

    class Taps(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(1, 3, 3, padding=1)

        def forward_features(self, x):
            assert x.shape[-1] == 16  # upsampled to the U-Net's size
            return [torch.relu(self.conv(x)) + 0.1]

    distance = DomainLPIPS(Taps(), 16)
    images = torch.rand(2, 1, 8, 8)
    assert torch.allclose(distance(images, images), torch.zeros(2), atol=1e-6)
    assert (distance(images, images.flip(-1)) > 0).all()


def test_multilabel_classifier_learns_a_planted_finding_and_exposes_features():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, (48, 2))
    images = rng.integers(0, 60, (48, 8, 8)).astype(np.uint8)
    images[labels[:, 0] == 1, :4] += 150  # finding 0: a bright top half; finding 1: invisible
    torch.manual_seed(0)
    from anonpaper.models.classifiers import SmallCNN

    result = train_multilabel_classifier(SmallCNN(1, 2, width=4), (images, labels),
                                         TrainSettings(epochs=8, batch_size=16, lr=1e-2, progress=False))
    probabilities = predict_multilabel(result.model, images)
    assert probabilities.shape == (48, 2) and auroc(labels[:, 0], probabilities[:, 0]) > 0.9
    assert result.model.forward_features(to_tensor(images[:3])).shape == (3, 16)
    with pytest.raises(ValueError, match="multi-hot"):
        train_multilabel_classifier(SmallCNN(1, 2), (images, labels[:, 0]), TrainSettings(epochs=1, progress=False))


def test_not_reproduced_lists_failed_claims_and_table1_shortfalls():
    from anonpaper.experiments.gmia import not_reproduced

    good = _planted(works=True)
    lines = not_reproduced(good, evaluate_claims(good))
    # Every claim holds; the planted co-training PSNR (24.0) and SSIM (0.9) are below the paper's 24.319 and 0.968.
    assert len(lines) == 2 and lines[0].startswith("- **Table 1, Co-training**") and "PSNR 24.000" in lines[0]
    bad = _planted(works=False)
    named = "\n".join(not_reproduced(bad, evaluate_claims(bad)))
    assert all(f"**{name}** (does not hold)" in named for name in PAPER_CLAIMS)


def test_outer_auc_equals_the_verification_auc_of_outer_risk_and_falls_below_half_when_pushed_apart():
    from anonpaper.metrics.identity import cross_pair_scores
    from anonpaper.metrics.privacy import outer_risk

    rng = np.random.default_rng(3)
    patients = np.repeat(np.arange(6), 3)
    real = rng.normal(size=(18, 8))
    close = real + 0.3 * rng.normal(size=(18, 8))
    for anonymised in (close, -real):  # a noisy copy (linked) and the opposite identity (anti-linked)
        scores = cross_pair_scores(real, anonymised)
        value = outer_auc(scores, np.arange(18), patients)
        assert value == pytest.approx(outer_risk(real, anonymised, 1.0, patient_ids=patients)["auc"])
    assert outer_auc(cross_pair_scores(real, close), np.arange(18), patients) > 0.9
    assert outer_auc(cross_pair_scores(real, -real), np.arange(18), patients) < 0.1


def test_membership_folds_split_patients_and_keep_every_patient_in_one_fold():
    data = _tiny_data(patients=12, per_patient=2)
    codes = np.repeat(np.arange(12), 2)
    data.patients.update(train=codes[:12], val=codes[12:16], test=codes[16:])
    data.images.update(train=data.images["train"][:12], val=data.images["val"][12:16], test=data.images["test"][16:])
    folds = membership_folds(data, 3, seed=0)
    for split in ("train", "val", "test"):
        assert folds[split].shape == data.patients[split].shape and set(folds[split]) <= {0, 1, 2}
        for patient in np.unique(data.patients[split]):
            assert len(set(folds[split][data.patients[split] == patient])) == 1
    assert set(folds["train"]) == set(folds["test"]) == {0, 1, 2}  # test patients dealt first: each fold has one
    data.patients["val"] = data.patients["test"][:4]  # 2 non-member patients only: no held-out attack possible
    data.patients["test"] = data.patients["test"][:4]
    with pytest.raises(ValueError, match="CXR_PATIENTS"):
        membership_folds(data, 3, seed=0)


def test_balanced_accuracy_is_chance_for_a_constant_guess_and_nan_without_both_classes():
    truth = np.array([1, 1, 1, 0])
    assert balanced_accuracy_or_nan(truth, np.ones(4)) == 0.5
    assert balanced_accuracy_or_nan(truth, truth) == 1.0
    assert np.isnan(balanced_accuracy_or_nan(np.ones(3), np.ones(3)))


class _Brightness(torch.nn.Module):
    """A fake membership attacker: 'member' when the image is bright."""

    def __init__(self):
        super().__init__()
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, images):
        bright = images.mean(dim=(1, 2, 3)) - 0.5
        return torch.stack([-bright, bright], dim=1) * 50


def test_membership_rows_score_each_fold_with_its_own_attacker_and_read_chance_where_there_is_no_signal():
    rng = np.random.default_rng(0)
    train_patients, test_patients = np.repeat(np.arange(6), 2), np.repeat(np.arange(6, 10), 2)
    bright = rng.integers(200, 255, (12, 8, 8)).astype(np.uint8)
    dark = rng.integers(0, 50, (8, 8, 8)).astype(np.uint8)
    data = GMIAData({"train": bright, "val": dark[:2], "test": dark}, {}, {"train": train_patients, "val":
                    test_patients[:2], "test": test_patients}, {}, ("x",), 8, None, {})
    folds = {"train": train_patients % 3, "val": np.zeros(2, int), "test": test_patients % 3}
    same = np.concatenate([bright[:6], dark[:6]])[rng.permutation(12)]
    sets = {REAL: data.images, "no signal": {"train": same, "test": same[:8]}}
    rows = {row["set"]: row for row in membership_rows([_Brightness()] * 3, folds, data, sets, Config(bootstrap=20),
                                                       training_accuracy=0.97)}
    assert rows[REAL]["balanced_accuracy"] == 1.0 and rows[REAL]["attacker_training_accuracy"] == 0.97
    assert rows["no signal"]["balanced_accuracy"] == pytest.approx(0.5, abs=0.1)
    assert np.isfinite(rows["no signal"]["balanced_accuracy_se"]) and rows["no signal"]["balanced_accuracy_se"] > 0
    assert np.isnan(rows["no signal"]["attacker_training_accuracy"])


def test_judge_seeds_that_disagree_leave_a_claim_undecided_and_the_2_se_follows_the_combined_se():
    """Three membership judges: the first reads the anonymised images at chance (the claim that membership drops
    holds on it alone), the others read them as well as the real ones. Combined, the effect is within its seed
    spread; claims on no judge (reconstruction quality) are unchanged."""
    from dataclasses import replace

    views = []
    for accuracy in (0.5, 0.9, 0.88):
        view = _planted(works=True)
        membership = view.membership.copy()
        membership.loc[membership["set"] == view.main, "balanced_accuracy"] = accuracy
        views.append(replace(view, membership=membership))
    alone, combined = _claims(views[0]), _claims(replace(views[0], replicates=views))
    assert alone["gmia-membership-drops"].verdict == "holds"
    drops = combined["gmia-membership-drops"]
    assert drops.verdict == "undecided" and "mean of 3 judge seeds" in drops.reason
    assert drops.ours["2 SE"] == pytest.approx(2 * drops.se, abs=1e-4)
    assert drops.ours["balanced accuracy anonymised"] == pytest.approx(np.mean([0.5, 0.9, 0.88]), abs=1e-4)
    for name in QUALITY_CLAIMS:
        assert combined[name] == alone[name]
    assert check_record({"claims": [claim.as_dict() for claim in combined.values()]}) == []
