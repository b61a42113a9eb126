"""The GMIA chapter (paper 3): config validation, claims on planted outcomes, and pipeline pieces on tiny inputs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from anonpaper.experiments.gmia import Config, Outcome, evaluate_claims, table1, utility_table, variants
from anonpaper.experiments.gmia.pipeline import (BLUR, CO_RECON, E_RECON, ID_ONLY, PIXELATE, REAL, UT_ONLY,
                                                 DomainLPIPS, GMIAData, iw_ssim_scales, linkability_rows, main_name,
                                                 singling_out_rows, to_tensor, to_uint8, utility_metrics)
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
                             ({"utility_drop_max": 1.5}, "UTILITY_DROP_MAX")]:
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
def _planted(works: bool, n: int = 200) -> Outcome:
    """An outcome whose numbers make every paper claim hold (``works``) or fail (not ``works``)."""
    config = Config()
    main = main_name(config.margin)
    sets = [CO_RECON, E_RECON, main, main_name(0.0), main_name(-0.5), ID_ONLY, UT_ONLY, BLUR, PIXELATE]
    good = {"PSNR": (24.0, 19.0), "SSIM": (0.9, 0.8), "IW-SSIM": (0.6, 0.4), "LPIPS (domain)": (0.2, 0.4)}
    quality = [{"set": name, "metric": metric, "value": values[0] if name == CO_RECON else values[1], "se": 0.01,
                "n": n} for name in sets for metric, values in good.items()]
    paired = {metric: ((a - b) if works else (b - a), 0.01) for metric, (a, b) in good.items()}
    # Utility: stricter margins keep less; the main setting loses 0.02 (works) or 0.2 (fails) AUROC.
    auroc_of = {REAL: 0.80, CO_RECON: 0.78, E_RECON: 0.70, main_name(0.0): 0.80, main_name(-0.5): 0.79,
                main: 0.78 if works else 0.60, ID_ONLY: 0.70 if works else 0.75, UT_ONLY: 0.79, BLUR: 0.7, PIXELATE: 0.7}
    utility = pd.DataFrame([{"training set": name, "accuracy": 0.7, "AP": 0.6, "AUROC": value, "F1": 0.5, "n": n,
                             "AUROC_se": 0.005} for name, value in auroc_of.items()])
    outer_tar = {main_name(0.0): 0.5, main_name(-0.5): 0.2, main: 0.0 if works else 0.6, ID_ONLY: 0.0, UT_ONLY: 0.4,
                 CO_RECON: 0.5, E_RECON: 0.5, BLUR: 0.5, PIXELATE: 0.5}
    rows = [{"attacker": "fixed", "set": REAL, "risk": "real", "f1": 0.9, "accuracy": 0.9, "tar": 0.9,
             "far_as_published": 0.1, "far": 0.05, "auc": 0.95, "tar_image": 0.9, "tar_image_se": 0.02,
             "stranger_image": np.nan, "stranger_image_se": np.nan, "own_closer": np.nan, "own_closer_se": np.nan,
             "n": n}]
    for name, tar in outer_tar.items():
        for risk, value in (("inner", 0.8 if works else 0.3), ("outer", tar)):
            rows.append({"attacker": "fixed", "set": name, "risk": risk, "f1": value, "accuracy": value, "tar": value,
                         "far_as_published": 1 - value, "far": 0.05, "auc": 0.7, "tar_image": value,
                         "tar_image_se": 0.02, "stranger_image": 0.05 if risk == "outer" else np.nan,
                         "stranger_image_se": 0.01 if risk == "outer" else np.nan,
                         "own_closer": 0.5 + tar / 2 if risk == "outer" else np.nan, "own_closer_se": 0.01, "n": n})
    hidden = {name: 0.95 for name in sets}
    hidden[UT_ONLY] = 0.7 if works else 1.0
    hidden[main] = 1.0 if works else 0.7
    singling = pd.DataFrame([{"set": name, "hidden_rate": value, "hidden_rate_se": 0.02, "local_cloaking": 3.0,
                              "mean_cloaking": 3.0, "n": n} for name, value in hidden.items()])
    detected = {True: (0.95, 0.1), False: (0.8, 0.99)}[works]  # (real, every other set)
    membership = pd.DataFrame([{"set": name, "members_detected": detected[0] if name == REAL else detected[1],
                                "members_detected_se": 0.02, "non_members_rejected": 0.9,
                                "balanced_accuracy": 0.9, "attacker_training_accuracy": np.nan}
                               for name in [REAL] + sets])
    margins = pd.DataFrame([{"margin": m, "set": main_name(m), "final_cosine": m, "PSNR": 20.0} for m in config.margins])
    return Outcome(config=config, data=pd.DataFrame({"images": [n * 3, n // 2, n], "patients": [30, 5, 10]},
                                                     index=pd.Index(["train", "val", "test"], name="split")),
                   resolution=32, generator={}, training=pd.DataFrame(), histories={}, quality=pd.DataFrame(quality),
                   quality_paired=paired, utility=utility, linkability=pd.DataFrame(rows), singling_out=singling,
                   membership=membership, margins=margins, curves={}, thresholds={}, baselines={},
                   instruments={"identity_auc": 0.95, "identity_tar": 0.9, "utility_auroc": 0.8,
                                "lpips_val_dice": 0.9}, examples={}, example_patients=[])


PAPER_CLAIMS = ("gmia-cotraining-beats-etraining", "gmia-outer-unlinkable", "gmia-inner-above-outer", "gmia-lid-hides",
                "gmia-utility-kept", "gmia-lut-keeps-utility", "gmia-membership-drops")


def test_claims_hold_on_an_outcome_built_to_satisfy_them():
    claims = {claim.id: claim for claim in evaluate_claims(_planted(works=True))}
    for name in PAPER_CLAIMS + ("gmia-margin-tradeoff", "gmia-identity-instrument", "gmia-utility-instrument"):
        assert claims[name].verdict == "holds", (name, claims[name].reason)
    assert claims["gmia-identity-instrument"].kind == "phantom-check"


def test_claims_do_not_hold_on_an_outcome_built_to_contradict_them():
    claims = {claim.id: claim for claim in evaluate_claims(_planted(works=False))}
    for name in PAPER_CLAIMS + ("gmia-margin-tradeoff",):
        assert claims[name].verdict == "does not hold", (name, claims[name].reason)


def test_claims_are_undecided_on_a_small_test_set_and_when_an_instrument_fails():
    small = evaluate_claims(_planted(works=True, n=20))
    assert all(claim.verdict == "undecided" and "too few test images (20 < 80)" in claim.reason for claim in small)
    broken = _planted(works=True)
    broken.instruments["identity_auc"] = 0.55
    claims = {claim.id: claim for claim in evaluate_claims(broken)}
    assert claims["gmia-identity-instrument"].verdict == "does not hold"
    assert claims["gmia-outer-unlinkable"].verdict == "undecided"
    assert "fixed verification attacker failed its check" in claims["gmia-outer-unlinkable"].reason
    assert claims["gmia-utility-kept"].verdict == "holds"  # rests on the classifier, which passed


def test_noise_rule_makes_a_close_comparison_undecided():
    outcome = _planted(works=True)
    outcome.utility.loc[outcome.utility["training set"] == ID_ONLY, "AUROC"] = 0.775  # 0.005 below the main setting
    claims = {claim.id: claim for claim in evaluate_claims(outcome)}
    assert claims["gmia-lut-keeps-utility"].verdict == "undecided" and "2 SE" in claims["gmia-lut-keeps-utility"].reason


def test_tables_put_the_papers_numbers_beside_ours():
    outcome = _planted(works=True)
    first = table1(outcome)
    assert first.loc["Co-training", "PSNR paper"] == 24.319 and first.loc["E-training", "LPIPS (domain) paper"] == 0.446
    assert first.loc["Co-training", "PSNR"] == 24.0
    utility = utility_table(outcome)
    assert utility.loc[REAL, "AUROC paper"] == 0.774 and utility.loc[main_name(-0.7), "F1 paper"] == 0.531
    assert np.isnan(utility.loc[BLUR, "AUROC paper"])


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
