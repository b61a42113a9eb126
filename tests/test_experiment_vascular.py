"""The vascular chapter (paper 1): config validation, claims on planted outcomes, pipeline pieces on tiny inputs,
the generator lookup across package sources, and the method layer's silent JVPs."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from anonpaper.experiments import vascular as chapter
from anonpaper.experiments.claims import FAILS, HOLDS, UNDECIDED
from anonpaper.experiments.vascular import claims as claims_module
from anonpaper.experiments.vascular import pipeline
from anonpaper.models.stylegan import StyleGenerator, get_config, style_statistics
from anonpaper.models.unet import UNet

pytestmark = pytest.mark.unit


# -- config ---------------------------------------------------------------------------------------------------------

def test_quick_defaults_are_valid_and_strengths_include_the_table_alpha():
    config = chapter.Config()
    assert config.generators_profile == "quick" and config.score_images == 64
    assert config.strengths == (0.2, 0.4, 0.5, 0.6, 0.8, 1.0)
    assert chapter.Config.from_parameters(config.parameters()) == config


@pytest.mark.parametrize("changes, name", [
    ({"generators_profile": "huge"}, "GENERATORS_PROFILE"),
    ({"alphas": (0.8, 0.2)}, "ALPHAS"),
    ({"alphas": (0.0, 0.5)}, "ALPHAS"),
    ({"table_alpha": 0.0}, "TABLE_ALPHA"),
    ({"several_channels": 1}, "SEVERAL_CHANNELS"),
    ({"score_images": 0}, "SCORE_IMAGES"),
    ({"min_vessel_ratio": 0.0}, "MIN_VESSEL_RATIO"),
    ({"ablation_kimg": -1.0}, "ABLATION_KIMG"),
    ({"attacker_backbone": "vgg"}, "ATTACKER_BACKBONE"),
    ({"bootstrap": 1}, "BOOTSTRAP"),
    ({"dr_epochs": 0}, "DR_EPOCHS"),
    ({"dr_min_qwk": 1.5}, "DR_MIN_QWK"),
    ({"dr_backbone": "vgg"}, "DR_BACKBONE"),
    ({"dataset": "odir-5k"}, "DATA_ROOT"),
    ({"data_root": "/somewhere"}, "DATASET"),
])
def test_config_rejects_bad_values_naming_the_parameter(changes, name):
    with pytest.raises(ValueError, match=name):
        chapter.Config(**changes)


# -- claims on planted outcomes -------------------------------------------------------------------------------------

def _row(image_set, method, alpha, fs_sift, fs_sr, rroi, n=60, se=0.01, dr_agreement=0.9):
    return {"image_set": image_set, "method": method, "alpha": alpha, "step": alpha, "change": 0.1, "error": "",
            "n": n, "fd": 10.0, "fd_se": 1.0, "lpips": 0.1, "lpips_se": 0.01, "fs_sift": fs_sift, "fs_sift_se": se,
            "fs_sr": fs_sr, "fs_sr_se": se, "rroi": rroi, "rroi_se": se, "rroi_median": rroi, "rroi_unbounded": 0,
            "ams": 1.0, "ams_se": 0.0, "dr_agreement": dr_agreement, "dr_agreement_se": se, "dr_qwk": 0.8,
            "dr_qwk_se": 0.05, "rank1": 0.5, "rank1_se": 0.05}


def planted_outcome(*, fs_falls=True, ours_keeps=True, both_lower=True, n=60, vessels_ok=True,
                    dice=0.8, ours_keeps_dr=None, dr_qwk=0.9) -> pipeline.Outcome:
    """An outcome whose numbers plant each claim's answer: ours' FS falls (or rises) with alpha, ours' RROI (and,
    independently, ours' DR agreement, by default like RROI) is above (or below) every baseline's at the same
    identity similarity, +both's FD below (or above) plain's; the DR classifier's held-out QWK is ``dr_qwk``."""
    config = chapter.Config(min_test_images=50)
    ours_keeps_dr = ours_keeps if ours_keeps_dr is None else ours_keeps_dr
    rows = []
    for alpha in config.strengths:
        identity = 0.9 - 0.6 * alpha if fs_falls else 0.3 + 0.6 * alpha
        rows.append(_row("generated", pipeline.OURS, alpha, identity, identity, 2.0 if ours_keeps else 0.5, n=n,
                         dr_agreement=0.95 if ours_keeps_dr else 0.6))
        for method in (pipeline.STYLESPACE, pipeline.LOWRANK, pipeline.RESEFA):
            # the baselines' sweeps cover identity similarities 0.1-0.9 at a constant RROI and DR agreement
            rows.append(_row("generated", method, alpha, 0.9 - 0.8 * alpha, 0.9 - 0.8 * alpha,
                             1.0 if ours_keeps else 3.0, n=n, dr_agreement=0.8))
    ablation = pd.DataFrame([{"variant": variant, "kimg": 2.0, "train_seconds": 1.0, "n": n,
                              "fd": {"plain": 50.0, "+vessel": 40.0, "+lesion": 35.0, "+both": 20.0 if both_lower
                                     else 80.0}[variant], "fd_se": 2.0, "lpips": 0.5, "lpips_se": 0.01, "mse": 0.1,
                              "mse_se": 0.01, "swd": 10.0} for variant in chapter.ABLATIONS])
    instruments = pd.DataFrame([{"instrument": "vessel U-Net", "measure": "validation Dice", "value": dice,
                                 "floor": 0.5},
                                {"instrument": "DR classifier (dr_grade, 5 classes; 60 held-out real images: test "
                                               "split)", "measure": pipeline.DR_CHECK, "value": dr_qwk,
                                 "floor": config.dr_min_qwk}])
    ratio = 0.9 if vessels_ok else 0.01
    vessels = {"generated": 0.1 * ratio, "real": 0.1, "real_native": 0.12, "ratio": ratio, "passed": vessels_ok,
               "check": "" if vessels_ok else "the vessel U-Net finds a vessel-pixel fraction of 0.001",
               "fallback_masks": 0, "T": n}
    return pipeline.Outcome(config, None, {}, instruments, vessels, None, pd.DataFrame(), {}, None,
                            pd.DataFrame(rows), ablation, {}, {}, {})


def verdicts(outcome) -> dict[str, str]:
    return {claim.id: claim.verdict for claim in chapter.evaluate_claims(outcome)}


def test_claims_hold_when_the_planted_numbers_agree_with_the_paper():
    assert verdicts(planted_outcome()) == {"vascular-vessels-generated": HOLDS, "vascular-top-channel-lowers-fs": HOLDS,
                                           "vascular-lesions-kept": HOLDS, "vascular-lesions-kept-dr": HOLDS,
                                           "vascular-ablation-fd": HOLDS}


def test_claims_do_not_hold_when_the_planted_numbers_contradict_the_paper():
    found = verdicts(planted_outcome(fs_falls=False, ours_keeps=False, both_lower=False))
    assert found["vascular-top-channel-lowers-fs"] == FAILS
    assert found["vascular-lesions-kept"] == FAILS
    assert found["vascular-lesions-kept-dr"] == FAILS
    assert found["vascular-ablation-fd"] == FAILS


def test_dr_lesion_claim_is_decided_by_the_dr_agreement_not_by_rroi():
    found = verdicts(planted_outcome(ours_keeps=True, ours_keeps_dr=False))
    assert found["vascular-lesions-kept"] == HOLDS and found["vascular-lesions-kept-dr"] == FAILS
    claim = claims_module.lesion_claim(planted_outcome(ours_keeps=False, ours_keeps_dr=True), "dr_agreement")
    assert claim.verdict == HOLDS and "DR agreement ours 0.950, theirs 0.800" in claim.reason
    assert claim.ours[pipeline.LOWRANK]["dr_agreement_ours"] == pytest.approx(0.95)


def test_dr_lesion_claim_is_undecided_when_the_dr_classifier_fails_its_check():
    by_id = {claim.id: claim for claim in chapter.evaluate_claims(planted_outcome(dr_qwk=0.1))}
    dr = by_id["vascular-lesions-kept-dr"]
    assert dr.verdict == UNDECIDED and "DR classifier failed its check" in dr.reason and "0.100 < 0.4" in dr.reason
    assert by_id["vascular-lesions-kept"].verdict == HOLDS  # RROI does not rest on the DR classifier
    outcome = planted_outcome()
    outcome.instruments = outcome.instruments.iloc[:1]  # no DR classifier row at all (no DR label in the data)
    claim = {claim.id: claim for claim in chapter.evaluate_claims(outcome)}["vascular-lesions-kept-dr"]
    assert claim.verdict == UNDECIDED and "no DR classifier" in claim.reason
    outcome = planted_outcome()
    outcome.sweep["dr_agreement_se"] = 1.0  # within noise
    assert verdicts(outcome)["vascular-lesions-kept-dr"] == UNDECIDED


def test_claims_are_undecided_on_small_sets_and_when_the_vessel_instrument_fails():
    small = verdicts(planted_outcome(n=10))
    assert set(small.values()) == {UNDECIDED}
    failed = chapter.evaluate_claims(planted_outcome(vessels_ok=False))
    by_id = {claim.id: claim for claim in failed}
    assert by_id["vascular-vessels-generated"].verdict == FAILS
    for name in ("vascular-top-channel-lowers-fs", "vascular-lesions-kept", "vascular-lesions-kept-dr"):
        assert by_id[name].verdict == UNDECIDED and "vessel masks of generated images failed" in by_id[name].reason
    assert by_id["vascular-ablation-fd"].verdict == HOLDS  # FD does not rest on the masks of generated images
    low_dice = {claim.id: claim for claim in chapter.evaluate_claims(planted_outcome(dice=0.2))}
    assert all(claim.verdict == UNDECIDED and "Dice 0.200" in claim.reason for claim in low_dice.values())


def test_differences_within_noise_leave_claims_undecided():
    outcome = planted_outcome()
    outcome.sweep[["fs_sift_se", "fs_sr_se", "rroi_se"]] = 5.0
    found = verdicts(outcome)
    assert found["vascular-top-channel-lowers-fs"] == UNDECIDED and found["vascular-lesions-kept"] == UNDECIDED


def test_lesion_claim_interpolates_each_baseline_at_our_identity_similarity():
    outcome = planted_outcome()
    value, error, why = claims_module._interpolated(outcome, pipeline.LOWRANK, 0.5)
    assert why == "" and value == pytest.approx(1.0) and error == pytest.approx(0.01)
    _, _, why = claims_module._interpolated(outcome, pipeline.LOWRANK, 0.95)
    assert "spans" in why


def test_ablation_claim_is_undecided_when_not_run():
    outcome = planted_outcome()
    outcome.ablation = pd.DataFrame()
    claim = claims_module.ablation_claim(outcome)
    assert claim.verdict == UNDECIDED and "not run" in claim.reason


# -- pipeline pieces --------------------------------------------------------------------------------------------------

def test_vessel_masks_max_pool_and_count_fallbacks():
    probability = torch.zeros(2, 1, 8, 8)
    probability[0, 0, 0, 1] = 0.9  # one vessel pixel in the first cohort-size image
    probability[1, 0, 5, 5] = 0.3  # no vessel in the second: its most vessel-like pixels are taken
    masks, fallback = pipeline.vessel_masks(probability, 4, fallback_fraction=1 / 16)
    assert masks.shape == (2, 4, 4) and fallback == 1
    assert masks[0].sum() == 1 and masks[0, 0, 0] == 1
    assert masks[1].sum() == 1 and masks[1, 2, 2] == 1


def test_middle_layers_and_rank1_hits():
    assert pipeline.middle_layers(6) == (1, 2, 3) and pipeline.middle_layers(2) == (0,)
    gallery = np.eye(3)
    query = np.array([[1.0, 0.1, 0.0], [0.0, 0.0, 1.0]])
    hits = pipeline.rank1_hits(query, gallery, np.array([0, 1]), np.arange(3))
    assert hits.tolist() == [True, False]
    hidden = pipeline.rank1_hits(query[:1], gallery, np.array([0]), np.array([0, 0, 1]), exclude=np.array([0]))
    assert hidden.tolist() == [True]  # its own image hidden, the second image of identity 0 is the next nearest


def test_bootstrap_fd_is_deterministic_and_positive():
    rng = np.random.default_rng(0)
    first, second = rng.normal(size=(40, 3)), rng.normal(1.0, size=(40, 3))
    value, error = pipeline.bootstrap_fd(first, second, 20, seed=1)
    assert value > 1.0 and error > 0 and (value, error) == pipeline.bootstrap_fd(first, second, 20, seed=1)


@pytest.fixture(scope="module")
def tiny_generator():
    generator = StyleGenerator(get_config("sg3t-tiny"), seed=0).eval()
    for parameter in generator.parameters():
        parameter.requires_grad_(False)
    return generator


def test_scores_table_and_gradient_maps_on_a_tiny_generator(tiny_generator):
    ws, codes = pipeline.sample_codes(tiny_generator, 1, seed=1)
    masks = torch.zeros(1, 32, 32)
    masks[:, 8:24, 8:24] = 1
    scores, speed = pipeline.score_channels(tiny_generator, codes, masks, chunk_size=32)
    table = pipeline.score_table(scores)
    assert len(table) == codes.layout.total_channels == speed["K"] and speed["T"] == 1
    assert table["rank"].tolist() == list(range(1, len(table) + 1))
    assert table["index"].iloc[0] == scores.best_index
    maps = pipeline.gradient_maps(tiny_generator, codes, scores.best_index)
    assert maps.shape == (1, 32, 32) and float(maps.sum()) > 0


def test_edit_methods_match_the_baselines_to_our_image_change(tiny_generator):
    ws, codes = pipeline.sample_codes(tiny_generator, 3, seed=2)
    edit_set = pipeline.EditSet("generated", pipeline.render(tiny_generator, codes), codes, ws)
    statistics = style_statistics(tiny_generator, num_samples=64, seed=0)
    direction = torch.nn.functional.normalize(torch.randn(tiny_generator.w_dim, generator=torch.Generator()
                                                          .manual_seed(0)), dim=0)
    channel_scores = None
    baselines = pipeline.Baselines(5, channel_scores, direction, None, (1, 2), {pipeline.RESEFA: "planted failure"})
    edits = pipeline.edit_methods(tiny_generator, edit_set, [0], [0, 1], statistics, baselines, (0.5, 1.0),
                                  match_images=3)
    ours = edits[(pipeline.OURS, 1.0)]
    assert ours["images"].shape == edit_set.originals.shape and ours["change"] > 0
    for method in (pipeline.STYLESPACE, pipeline.LOWRANK):
        matched = edits[(method, 1.0)]
        assert matched["change"] == pytest.approx(ours["change"], rel=0.05)
    assert edits[(pipeline.RESEFA, 0.5)]["images"] is None and "planted" in edits[(pipeline.RESEFA, 0.5)]["error"]


def test_ablation_loss_is_a_differentiable_weighted_tap_distance():
    network = UNet(3, 1, base_width=4, depth=2)
    instruments = pipeline.Instruments(network, network, None, None, pd.DataFrame(), 16)
    assert pipeline.ablation_loss(instruments, ()) is None
    loss = pipeline.ablation_loss(instruments, ("vessel", "lesion"))
    fake = (torch.rand(2, 3, 8, 8) * 2 - 1).requires_grad_(True)
    context = type("Context", (), {"fake_images": fake, "real_images": torch.rand(2, 3, 8, 8) * 2 - 1})()
    value, logs = loss(context)
    value.backward()
    value = value.detach()
    assert float(value) > 0 and set(logs) == {"lpips_vessel", "lpips_lesion"}
    assert float(value) == pytest.approx(0.6 * float(logs["lpips_vessel"] + logs["lpips_lesion"]))
    assert fake.grad is not None and not any(p.grad is not None for p in network.parameters())


def test_first_jvp_of_a_process_prints_no_warning():
    """torch loads its JVP decompositions with torch.jit.script on the first JVP, which warns (a stderr block on a
    notebook page); jvp_columns silences that one warning."""
    code = ("import torch\nfrom anonpaper.methods.jacobian_edit import jvp_columns\n"
            "jvp_columns(lambda x: torch.tanh(x) * 2, torch.ones(2, 3), [0, 2])\n")
    result = subprocess.run([sys.executable, "-W", "error::FutureWarning", "-c", code], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "deprecated" not in result.stderr


def test_fs_claim_uses_paired_per_image_differences_when_available():
    outcome = planted_outcome()
    config = outcome.config
    low, high = min(config.alphas), max(config.alphas)
    outcome.sweep[["fs_sift_se", "fs_sr_se"]] = 5.0  # unpaired SEs would leave the claim undecided
    rng = np.random.default_rng(0)
    base = rng.uniform(0.5, 0.9, 60)
    outcome.per_image = {("generated", pipeline.OURS, low): {"fs_sift": base, "fs_sr": base},
                         ("generated", pipeline.OURS, high): {"fs_sift": base - 0.05, "fs_sr": base - 0.05}}
    assert claims_module.top_channel_claim(outcome).verdict == HOLDS


def test_lesion_claim_is_undecided_when_the_identity_ranges_do_not_overlap():
    outcome = planted_outcome()
    ours = outcome.sweep["method"] == pipeline.OURS
    outcome.sweep.loc[ours, ["fs_sift", "fs_sr"]] = 0.95  # ours never comes near the baselines' similarities
    claim = claims_module.lesion_claim(outcome)
    assert claim.verdict == UNDECIDED and "not comparable" in claim.reason


def test_ablation_claim_is_undecided_on_a_shorter_schedule_than_the_generators_chapter():
    from anonpaper.experiments.generators import Config as GeneratorsConfig

    outcome = planted_outcome()
    outcome.generator_config = GeneratorsConfig()  # its fundus StyleGAN3-T: 16 kimg; the planted ablation: 2
    claim = claims_module.ablation_claim(outcome)
    assert claim.verdict == UNDECIDED and "schedule too short" in claim.reason


# -- the DR utility -----------------------------------------------------------------------------------------------

class BrightnessGrader(torch.nn.Module):
    """A planted DR classifier: grade = mean brightness in five equal bins."""

    def forward(self, images):
        grade = (images.mean(dim=(1, 2, 3)) * 5).floor().clamp(0, 4).long()
        return torch.nn.functional.one_hot(grade, 5).float() * 10


def test_dr_utility_counts_kept_grades_and_their_kappa():
    levels = torch.tensor([0.1, 0.3, 0.5, 0.7, 0.9, 0.1, 0.3, 0.5])  # grades 0 1 2 3 4 0 1 2
    originals = levels[:, None, None, None].expand(8, 3, 4, 4).clone()
    edited = originals.clone()
    edited[0] += 0.2  # grade 0 -> 1
    edited[4] -= 0.4  # grade 4 -> 2
    instruments = pipeline.Instruments(None, None, None, None, pd.DataFrame(), 4, BrightnessGrader(), 5)
    row, agreement = pipeline.dr_utility(instruments, originals, edited, np.arange(8), bootstrap=50, seed=0)
    assert agreement.tolist() == [0, 1, 1, 1, 0, 1, 1, 1]
    assert row["dr_agreement"] == pytest.approx(0.75)
    assert row["dr_agreement_se"] == pytest.approx(np.std(agreement, ddof=1) / np.sqrt(8))
    from anonpaper.metrics.classification import quadratic_weighted_kappa

    before, after = [0, 1, 2, 3, 4, 0, 1, 2], [1, 1, 2, 3, 2, 0, 1, 2]
    assert row["dr_qwk"] == pytest.approx(quadratic_weighted_kappa(before, after, 5))
    assert 0 < row["dr_qwk"] < 1 and row["dr_qwk_se"] > 0
    same, kept = pipeline.dr_utility(instruments, originals, originals, np.arange(8), bootstrap=50, seed=0)
    assert same["dr_agreement"] == 1.0 and same["dr_qwk"] == 1.0 and kept.all()


# -- the real-data path (a fake ODIR-5K tree) ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def odir(tmp_path_factory):
    from fakes import trees

    return trees.make_odir(tmp_path_factory.mktemp("odir"), n_patients=16, n_test_patients=4)


def test_the_chapter_passes_its_copy_to_the_generator_and_measures_on_it(odir):
    from anonpaper.data import load_cohort
    from anonpaper.experiments.generators import Config as GeneratorsConfig

    config = chapter.Config(dataset="odir-5k", data_root=str(odir), data_protocol="patient_70_10_20", dr_epochs=1,
                            bootstrap=5)
    generator_config = pipeline.generators_config_for(config, GeneratorsConfig(retina_patients=8, image_size=32))
    assert (generator_config.dataset, generator_config.data_root) == ("odir-5k", str(odir))
    assert generator_config.retina_patients == 8  # the rest of the generators chapter's config is kept
    assert pipeline.generators_config_for(chapter.Config(), GeneratorsConfig()) == GeneratorsConfig()
    copy = load_cohort("odir-5k", odir, image_size=64, protocol="patient_70_10_20", seed=0)

    queries, rows, test_images, patients = pipeline.real_queries(generator_config, 3, seed=0)
    assert np.array_equal(patients, copy.split("test").table["patient_id"].to_numpy())
    assert test_images.shape == (len(copy.split("test")), 3, 32, 32)
    assert torch.equal(queries, torch.from_numpy(test_images[rows]))

    model, info = pipeline.train_dr_classifier(config, generator_config)
    assert info["column"] == "label_diabetes" and info["classes"] == 2 and info["n"] > 0
    assert np.isfinite(info["qwk"]) and info["source"] in ("test split", "validation split")
    grades = pipeline.dr_predictions(pipeline.Instruments(None, None, None, None, pd.DataFrame(), 64, model, 2),
                                     torch.from_numpy(test_images))
    assert grades.shape == (len(test_images),) and set(grades.tolist()) <= {0, 1}


def test_a_missing_copy_stops_the_chapter_before_the_generator_loads(tmp_path, monkeypatch):
    from anonpaper.experiments.generators import Config as GeneratorsConfig
    from anonpaper.experiments.generators import DataCopyError

    def no_generator(*args, **kwargs):
        raise AssertionError("the generator was loaded for a missing copy")

    monkeypatch.setattr(pipeline, "load_fundus_generator", no_generator)
    config = chapter.Config(dataset="odir-5k", data_root=str(tmp_path / "missing"))
    with pytest.raises(DataCopyError, match=r"DATA_ROOT '.*missing'.*not a folder"):
        chapter.run(config, GeneratorsConfig())
