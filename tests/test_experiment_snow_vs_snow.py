"""The Snow / VS-Snow experiment pipeline (paper 2) on a tiny synthetic fundus cohort, plus its analysis helpers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from anonpaper.cache import ArtifactCache
from anonpaper.data.cohort import Cohort
from anonpaper.data.arrays import SPLITS, load_arrays, split_summary
from anonpaper.experiments.claims import check_record
from anonpaper.experiments import snow_vs_snow as svs
from anonpaper.metrics import accuracy, patient_bootstrap_se, saliency_vessel_enrichment

pytestmark = pytest.mark.unit
SIZE = 32


class TinyFundus(Cohort):
    """32 px fundus stand-ins: an orange disc, two dark vessel lines (darker for men), a red spot for DR."""

    mask_names = ("vessel", "fov")

    def __init__(self, patients: int = 16, seed: int = 0):
        rng = np.random.default_rng(seed)
        rows = []
        for patient in range(patients):
            sex = "F" if patient % 2 == 0 else "M"
            dr = int(rng.integers(0, 3))
            split = "train" if patient < patients * 0.6 else ("val" if patient < patients * 0.8 else "test")
            for image in range(2):
                rows.append({"image_id": f"p{patient}_{image}", "patient_id": f"p{patient}", "split": split,
                             "sex": sex, "dr_3class": dr, "seed": int(rng.integers(0, 2**31))})
        super().__init__("tiny-fundus", pd.DataFrame(rows))

    def _geometry(self, row):
        rng = np.random.default_rng(int(row["seed"]))
        grid = np.mgrid[:SIZE, :SIZE]
        fov = (grid[0] - SIZE / 2) ** 2 + (grid[1] - SIZE / 2) ** 2 <= (0.45 * SIZE) ** 2
        vessel = np.zeros((SIZE, SIZE), bool)
        vessel[int(rng.integers(8, 14)), 4:28] = True
        vessel[4:28, int(rng.integers(18, 24))] = True
        return rng, fov, vessel & fov

    def _read_image(self, row):
        rng, fov, vessel = self._geometry(row)
        image = np.zeros((SIZE, SIZE, 3), np.float64)
        image[fov] = [190, 95, 45]
        image[vessel] = [120, 40, 25] if row["sex"] == "F" else [70, 15, 10]
        if row["dr_3class"] > 0:
            image[22:22 + 2 * int(row["dr_3class"]), 6:10] = [230, 200, 60]
        image += rng.normal(0, 6, image.shape) * fov[..., None]
        return np.clip(image, 0, 255).astype(np.uint8)

    def _read_masks(self, row):
        _, fov, vessel = self._geometry(row)
        return {"vessel": vessel, "fov": fov}


def tiny_config(**overrides) -> svs.Config:
    options = dict(p_values=(0.1, 0.5), backbone="small_cnn", epochs=1, batch_size=8, early_stopping_patience=None,
                   augment=False, segmenter="frunet", segmenter_width=4, segmenter_epochs=1, segmenter_patch=32,
                   segmenter_patches_per_epoch=8, bootstrap=20, min_test_images=4, seed=0)
    options.update(overrides)
    return svs.Config(**options)


@pytest.fixture(scope="module")
def arrays():
    return load_arrays(TinyFundus())


@pytest.fixture(scope="module")
def outcome(arrays):
    torch.set_num_threads(1)
    return svs.run_experiment(arrays, tiny_config(), device="cpu", log=lambda message: None, saliency_images=4)


def test_paper_tables_are_complete_and_share_the_original_column():
    for method in svs.METHODS:
        for data, table in svs.PAPER_TABLES[method].items():
            for key in ("sex_accuracy", "dr_f1"):
                assert len(table[key]) == len(svs.PAPER_P_VALUES)
                assert all(0 < value < 100 for value in table[key])
    for data in svs.PAPER_TABLES["snow"]:
        for key in ("sex_accuracy", "dr_f1"):
            assert svs.PAPER_TABLES["snow"][data][key][0] == svs.PAPER_TABLES["vs_snow"][data][key][0]
    # Spot checks against the paper text (Table 1 BRSET p = .5, Table 2 Diabetes Center p = .1).
    assert svs.PAPER_TABLES["snow"]["BRSET"]["sex_accuracy"][3] == 52.15
    assert svs.PAPER_TABLES["vs_snow"]["Diabetes Center"]["dr_f1"][1] == 75.9


def test_config_validates():
    with pytest.raises(ValueError, match="P_VALUES"):
        tiny_config(p_values=(0.0, 0.3))
    with pytest.raises(ValueError, match="SEGMENTER"):
        tiny_config(segmenter="resnet")
    for seeds in (0, -1, 1.5, "3"):
        with pytest.raises(ValueError, match=f"TRAINING_SEEDS must be an integer >= 1, got {seeds!r}"):
            tiny_config(training_seeds=seeds)
    assert tiny_config(training_seeds=1).training_seeds == 1 and svs.Config().training_seeds == 3
    assert tiny_config(p_values=(0.5, 0.1)).p_values == (0.1, 0.5)
    with pytest.raises(ValueError, match="CHANNELS_LAST must be True or False, got 1"):
        tiny_config(channels_last=1)


def test_the_layout_enters_the_classifier_key_only_when_channels_last():
    # Networks trained in the default layout keep the keys they had before the option existed; channels-last ones,
    # whose floats differ, get keys of their own.
    default_layout = tiny_config(channels_last=False).classifier_description()
    assert "channels_last" not in default_layout
    assert tiny_config().classifier_description() == {**default_layout, "channels_last": True}


def test_the_classifiers_train_in_the_configured_layout(arrays):
    train = (arrays.images["train"][:16], arrays.sex["train"][:16])
    val = (arrays.images["val"][:8], arrays.sex["val"][:8])
    for channels_last in (True, False):
        config = tiny_config(channels_last=channels_last)
        model, _ = svs.train_task_classifier("sex", train, val, config, {"layout-test": channels_last},
                                             device="cpu", cache=ArtifactCache("snow-layout-test"))
        convolution = next(module for module in model.modules() if isinstance(module, torch.nn.Conv2d))
        assert convolution.weight.is_contiguous(memory_format=torch.channels_last) is channels_last


def test_load_arrays_splits_and_labels(arrays):
    cohort = TinyFundus()
    assert sum(len(arrays.images[s]) for s in SPLITS) == len(cohort)
    for split in SPLITS:
        assert arrays.images[split].dtype == np.uint8 and arrays.images[split].shape[1:] == (SIZE, SIZE, 3)
        assert arrays.vessels[split].shape == arrays.images[split].shape[:3]
        assert set(np.unique(arrays.sex[split])) <= {0, 1}
    table = cohort.table[cohort.table["split"] == "test"]
    assert np.array_equal(arrays.sex["test"], (table["sex"] == "M").to_numpy().astype(int))
    summary = split_summary(arrays)
    assert summary.loc["test", "images"] == len(table)
    resized = load_arrays(cohort, image_size=16)
    assert resized.images["train"].shape[1:] == (16, 16, 3) and resized.vessels["train"].dtype == bool


def test_obfuscate_properties(arrays):
    images, vessels = arrays.images["train"], arrays.vessels["train"]
    means = np.array([100.0, 50.0, 20.0])
    assert np.array_equal(svs.obfuscate(images, "snow", 0.0, seed=1, channel_means=means), images)
    snowed = svs.obfuscate(images, "snow", 0.5, seed=1, channel_means=means)
    assert np.array_equal(snowed, svs.obfuscate(images, "snow", 0.5, seed=1, channel_means=means))
    replaced = (snowed != images) | (snowed == means.astype(np.uint8))
    assert 0.4 < replaced.mean() < 0.6
    vs = svs.obfuscate(images, "vs_snow", 0.5, seed=1, vessel_masks=vessels)
    changed = (vs != images).any(axis=3)
    assert changed.any() and not changed[~vessels].any(), "VS-Snow changes vessel pixels only"
    with pytest.raises(ValueError, match="needs masks"):
        svs.obfuscate(images, "vs_snow", 0.5, seed=1)


def test_saliency_enrichment_closed_form():
    maps = np.zeros((2, 8, 8))
    vessels = np.zeros((2, 8, 8), bool)
    vessels[:, 2, :] = True  # 8 of 64 pixels
    maps[0][vessels[0]] = 1.0  # all saliency on vessels: enrichment = 64 / 8
    maps[1] = 0.5  # uniform saliency: enrichment 1
    assert np.allclose(saliency_vessel_enrichment(maps, vessels), [8.0, 1.0])
    fov = np.zeros_like(vessels)
    fov[:, :4, :] = True  # 32 pixels, 8 of them vessels
    assert np.allclose(saliency_vessel_enrichment(maps, vessels, fov), [4.0, 1.0])


def test_saliency_enrichment_of_a_model_that_reads_only_vessels():
    vessels = np.zeros((3, 8, 8), bool)
    vessels[:, :, 3] = True
    weight = torch.from_numpy(vessels[0].astype(np.float32))

    class VesselReader(nn.Module):
        def forward(self, x):
            score = (x * weight).sum(dim=(1, 2, 3))
            return torch.stack([score, -score], dim=1)

    from anonpaper.models.classifiers import gradient_saliency

    maps = gradient_saliency(VesselReader(), torch.rand(3, 3, 8, 8), target=0).numpy()
    assert np.allclose(saliency_vessel_enrichment(maps, vessels), 8.0)


def _seed_scores(points: dict[tuple[str, float], tuple[float, float]], se: float = 0.01, n_test: int = 100,
                 offsets: tuple[float, ...] = (0.0,)) -> pd.DataFrame:
    """One row per version, task and training seed: the planted score plus that seed's offset."""
    rows = []
    for (method, p), (sex, dr) in points.items():
        for seed, offset in enumerate(offsets):
            for task, metric, value in (("sex", "accuracy", sex), ("dr", "macro_f1", dr)):
                rows.append({"method": method, "p": p, "task": task, "metric": metric, "seed": seed,
                             "value": value + offset, "se": se, "n_test": n_test})
    return pd.DataFrame(rows)


def _scores(points: dict[tuple[str, float], tuple[float, float]], se: float = 0.01, n_test: int = 100,
            offsets: tuple[float, ...] = (0.0,)) -> pd.DataFrame:
    return svs.seed_summary(_seed_scores(points, se, n_test, offsets))


EXAMPLE = {("original", 0.0): (0.8, 0.8), ("snow", 0.1): (0.7, 0.6), ("snow", 0.5): (0.6, 0.4),
           ("vs_snow", 0.1): (0.7, 0.7), ("vs_snow", 0.5): (0.6, 0.6)}


def test_matched_privacy_gain_closed_form():
    # Both curves join (0.6, .) to (0.8, 0.8) via 0.7; the F1 difference grows linearly from 0 at 0.8 to 0.2 at
    # 0.6, so its mean over the overlap [0.6, 0.8] is 0.1.
    gain = svs.matched_privacy_gain(_scores(EXAMPLE))
    assert gain["gain"] == pytest.approx(0.1, abs=1e-9)
    assert (gain["low"], gain["high"]) == pytest.approx((0.6, 0.8))
    swapped = {key: value for key, value in EXAMPLE.items()}
    swapped[("snow", 0.1)], swapped[("vs_snow", 0.1)] = EXAMPLE[("vs_snow", 0.1)], EXAMPLE[("snow", 0.1)]
    swapped[("snow", 0.5)], swapped[("vs_snow", 0.5)] = EXAMPLE[("vs_snow", 0.5)], EXAMPLE[("snow", 0.5)]
    assert svs.matched_privacy_gain(_scores(swapped))["gain"] == pytest.approx(-0.1, abs=1e-9)
    no_overlap = dict(EXAMPLE)
    no_overlap[("vs_snow", 0.1)] = (0.8, 0.8)
    no_overlap[("vs_snow", 0.5)] = (0.8, 0.8)
    assert np.isnan(svs.matched_privacy_gain(_scores(no_overlap))["gain"])


def test_vessel_share():
    scores = _scores(EXAMPLE)
    assert svs.vessel_share_of_drop(scores, "sex", 0.5) == pytest.approx(1.0)
    assert svs.vessel_share_of_drop(scores, "dr", 0.5) == pytest.approx(0.5)


def test_tables_side_by_side():
    scores = _scores(EXAMPLE)
    table = svs.paper_vs_ours_table(scores, "snow")
    assert list(table.columns) == ["Original", "p = 0.1", "p = 0.3", "p = 0.5"]
    assert table.loc[("BRSET (paper)", "Sex (Acc)"), "p = 0.5"] == 52.15
    assert table.loc[("Phantom (ours)", "DR (F1)"), "p = 0.5"] == pytest.approx(40.0)
    assert np.isnan(table.loc[("Phantom (ours)", "DR (F1)"), "p = 0.3"])  # not run
    ours = svs.scores_table(scores, (0.1, 0.5))
    assert ours.loc[("VS-Snow", "DR (F1)"), "p = 0.1"] == pytest.approx(70.0)


def test_patient_bootstrap_se():
    truth = np.array([0, 1] * 50)
    assert patient_bootstrap_se(truth, truth, np.arange(100), accuracy, 50, 0) == 0.0
    prediction = np.where(np.arange(100) % 4 == 0, 1 - truth, truth)  # 75 % correct
    se = patient_bootstrap_se(truth, prediction, np.arange(100), accuracy, 400, 0)
    assert se == pytest.approx(np.sqrt(0.75 * 0.25 / 100), rel=0.25)


def test_run_experiment_end_to_end(outcome, arrays):
    scores = outcome.scores
    assert len(scores) == 2 * (1 + 2 * len(outcome.config.p_values))
    assert scores["value"].between(0, 1).all() and (scores["n_test"] == len(arrays.images["test"])).all()
    assert set(outcome.dr_models) == {("original", 0.0), ("snow", 0.1), ("snow", 0.5), ("vs_snow", 0.1),
                                      ("vs_snow", 0.5)}
    assert {"Original", "Snow p=0.5", "VS-Snow p=0.1", "vessels"} <= set(outcome.examples)
    assert 0 <= outcome.segmenter["test_dice"] <= 1
    assert outcome.saliency["sex_maps"].shape == (3, SIZE, SIZE)
    counts = np.bincount(arrays.sex["test"], minlength=2)
    assert outcome.chance == pytest.approx(counts.max() / counts.sum())
    claims = svs.evaluate_claims(outcome)
    assert {claim.id for claim in claims} >= {"attacker-above-chance", "snow-sex-falls", "vs-snow-dr-falls",
                                              "vs-snow-better-tradeoff", "vessels-sex-over-dr"}
    assert all(claim.ours is not None for claim in claims)
    small = svs.evaluate_claims(svs.Outcome(**{**outcome.__dict__, "config": tiny_config(min_test_images=10_000)}))
    assert all(claim.verdict == "undecided" and "too few test images" in claim.reason for claim in small)


def test_networks_come_from_the_cache_the_second_time(outcome, arrays):
    again = svs.run_experiment(arrays, tiny_config(), device="cpu", log=lambda message: None, saliency_images=4)
    assert again.training["cached"].all()
    pd.testing.assert_frame_equal(again.scores, outcome.scores)


def _planted_outcome(outcome, points, se=0.01, n_test=200, dice=0.9, sex_enrichment=None, dr_enrichment=None,
                     offsets=(0.0,)):
    """The module's outcome with planted scores (``offsets``: one per training seed, added to every score), a
    planted vessel segmenter (test Dice ``dice``, vessels on 10 % of the pixels) and optionally saliency."""
    saliency = dict(outcome.saliency)
    if sex_enrichment is not None:
        saliency["sex_enrichment"], saliency["dr_enrichment"] = np.asarray(sex_enrichment), np.asarray(dr_enrichment)
    segmenter = {**outcome.segmenter, "source": "segmenter", "test_dice": dice, "vessel_fraction": 0.1}
    counts = {"scores": _scores(points, se=se, n_test=n_test, offsets=offsets), "chance": 0.5, "saliency": saliency,
              "segmenter": segmenter, "config": tiny_config(min_test_images=40)}
    return svs.Outcome(**{**outcome.__dict__, **counts})


def _verdicts(claims):
    return {claim.id: claim.verdict for claim in claims}


def test_claims_hold_on_planted_data_where_they_must(outcome):
    # Both methods lower both scores far beyond the noise; VS-Snow keeps 0.1 more F1 at matched privacy, removes
    # all of Snow's damage to the attacker but half of its damage to DR, and the sex model looks at vessels more.
    planted = _planted_outcome(outcome, EXAMPLE, sex_enrichment=[3.0, 3.1, 2.9, 3.2], dr_enrichment=[1.0, 1.1, 0.9, 1.0])
    verdicts = _verdicts(svs.evaluate_claims(planted))
    assert verdicts == {"attacker-above-chance": "holds", "snow-sex-falls": "holds", "snow-dr-falls": "holds",
                        "vs-snow-sex-falls": "holds", "vs-snow-dr-falls": "holds",
                        "vs-snow-better-tradeoff": "holds", "vessels-sex-over-dr": "holds",
                        "saliency-vessels": "holds"}


def test_claims_fail_on_planted_data_where_they_must_not_hold(outcome):
    # A working attacker and DR classifier, scores that rise with p beyond their noise, VS-Snow worse at matched
    # privacy, the sex model looking at vessels less than the DR model.
    contrary = {("original", 0.0): (0.7, 0.6), ("snow", 0.1): (0.75, 0.7), ("snow", 0.5): (0.8, 0.8),
                ("vs_snow", 0.1): (0.75, 0.62), ("vs_snow", 0.5): (0.8, 0.65)}
    planted = _planted_outcome(outcome, contrary, sex_enrichment=[1.0, 1.1, 0.9, 1.0], dr_enrichment=[3.0, 3.1, 2.9, 3.2])
    claims = svs.evaluate_claims(planted)
    verdicts = _verdicts(claims)
    assert verdicts["attacker-above-chance"] == "holds"
    assert all(verdicts[f"{method}-{task}-falls"] == "does not hold" for method in ("snow", "vs-snow")
               for task in ("sex", "dr"))
    assert verdicts["vs-snow-better-tradeoff"] == "does not hold"
    assert verdicts["saliency-vessels"] == "does not hold"
    assert verdicts["vessels-sex-over-dr"] == "undecided"  # Snow causes no drop: the shares mean nothing
    assert "Snow's sex drop at p=0.5 in SE" in {claim.id: claim for claim in claims}["vessels-sex-over-dr"].reason
    assert check_record({"claims": [claim.as_dict() for claim in claims]}) == []


def test_an_attacker_at_chance_leaves_the_sex_claims_undecided(outcome):
    at_chance = {("original", 0.0): (0.5, 0.8), ("snow", 0.1): (0.6, 0.7), ("snow", 0.5): (0.7, 0.6),
                 ("vs_snow", 0.1): (0.6, 0.75), ("vs_snow", 0.5): (0.7, 0.7)}
    claims = {claim.id: claim for claim in svs.evaluate_claims(_planted_outcome(outcome, at_chance))}
    assert claims["attacker-above-chance"].verdict == "undecided"  # 0.0 points above chance: within noise
    for claim_id in ("snow-sex-falls", "vs-snow-sex-falls"):
        assert claims[claim_id].verdict == "undecided"
        assert "sex attacker: accuracy - majority rate on original images 0 < floor 0.05" in claims[claim_id].reason
    assert claims["snow-dr-falls"].verdict == "holds"


def test_a_rise_within_noise_is_undecided_not_a_contradiction(outcome):
    # VS-Snow's sex accuracy moves by half a point (0.6 SE of the difference): neither a fall nor a rise.
    flat = {**EXAMPLE, ("vs_snow", 0.1): (0.8, EXAMPLE["vs_snow", 0.1][1]),
            ("vs_snow", 0.5): (0.805, EXAMPLE["vs_snow", 0.5][1])}
    assert _verdicts(svs.evaluate_claims(_planted_outcome(outcome, flat)))["vs-snow-sex-falls"] == "undecided"


def test_a_failed_segmenter_check_makes_the_vessel_claims_undecided(outcome):
    planted = _planted_outcome(outcome, EXAMPLE, dice=0.1,
                               sex_enrichment=[3.0, 3.1, 2.9, 3.2], dr_enrichment=[1.0, 1.1, 0.9, 1.0])
    claims = {claim.id: claim for claim in svs.evaluate_claims(planted)}
    for claim_id in ("vs-snow-sex-falls", "vs-snow-dr-falls", "vs-snow-better-tradeoff", "vessels-sex-over-dr",
                     "saliency-vessels"):
        assert claims[claim_id].verdict == "undecided"
        assert "vessel segmenter test Dice 0.1 < floor 0.5" in claims[claim_id].reason
    assert claims["snow-sex-falls"].verdict == "holds"


def test_segmenter_check_flags_a_low_dice_or_an_everything_mask():
    config = tiny_config()
    assert svs.segmenter_check({"source": "segmenter", "test_dice": 0.8, "vessel_fraction": 0.1}, config) is None
    assert "Dice" in svs.segmenter_check({"source": "segmenter", "test_dice": 0.2, "vessel_fraction": 0.1}, config)
    assert "cover" in svs.segmenter_check({"source": "segmenter", "test_dice": float("nan"), "vessel_fraction": 1.0},
                                          config)
    assert svs.segmenter_check({"source": "ground_truth", "test_dice": 0.0, "vessel_fraction": 1.0}, config) is None


def test_phantom_decides_the_vessel_claims_by_design(outcome):
    claims = {claim.id: claim for claim in svs.evaluate_claims(_planted_outcome(outcome, EXAMPLE))}
    assert claims["vessels-sex-over-dr"].by_design and claims["saliency-vessels"].by_design
    assert not claims["snow-sex-falls"].by_design


def test_seed_summary_combines_the_bootstrap_and_the_seed_spread_by_hand():
    # Original: three seeds 0.60 / 0.70 / 0.80 with bootstrap SEs 0.03 / 0.04 / 0.05; Snow p=0.1: one seed.
    rows = [{"method": "original", "p": 0.0, "task": "dr", "metric": "macro_f1", "seed": seed, "value": value,
             "se": se, "n_test": 50} for seed, (value, se) in enumerate([(0.6, 0.03), (0.7, 0.04), (0.8, 0.05)])]
    rows.append({**rows[0], "method": "snow", "p": 0.1, "value": 0.5, "se": 0.02})
    rows.append({**rows[0], "task": "sex", "metric": "accuracy", "value": 0.9, "se": 0.02})
    summary = svs.seed_summary(pd.DataFrame(rows)).set_index(["method", "p", "task"])
    original = summary.loc[("original", 0.0, "dr")]
    assert original["value"] == pytest.approx(0.7) and original["seeds"] == 3
    assert original["seed_sd"] == pytest.approx(0.1)  # sample SD of 0.6, 0.7, 0.8
    # sqrt(mean(0.03^2, 0.04^2, 0.05^2) + 0.1^2 / 3) = sqrt(0.005 / 3 + 0.01 / 3)
    assert original["se"] == pytest.approx(np.sqrt(0.015 / 3))
    # One seed among seeded versions of its task borrows their spread: sqrt(0.02^2 + 0.1^2).
    once = summary.loc[("snow", 0.1, "dr")]
    assert once["value"] == 0.5 and once["seeds"] == 1
    assert once["seed_sd"] == pytest.approx(0.1) and once["se"] == pytest.approx(np.sqrt(0.02**2 + 0.1**2))
    # A task with one seed everywhere keeps its bootstrap SE and no spread.
    sex = summary.loc[("original", 0.0, "sex")]
    assert (sex["se"], sex["seed_sd"], sex["seeds"]) == (pytest.approx(0.02), 0.0, 1)


def test_falls_with_p_holds_with_agreeing_seeds_and_is_undecided_when_seeds_spread(outcome):
    # The planted drops (0.8 -> 0.6 sex, 0.8 -> 0.4 DR under Snow) are 14-28 bootstrap SE (0.01); three seeds
    # that agree keep both decided. Seeds 0.15 apart (seed SD 0.15, a combined SE of sqrt(0.01^2 + 0.15^2 / 3) =
    # 0.0876 per point, 2 combined SE of a difference 0.248) leave the sex drop of 0.2 undecided; the DR drop of
    # 0.4 still holds.
    agree = _verdicts(svs.evaluate_claims(_planted_outcome(outcome, EXAMPLE, offsets=(-0.001, 0.0, 0.001))))
    assert agree["snow-sex-falls"] == agree["snow-dr-falls"] == "holds"
    spread = _verdicts(svs.evaluate_claims(_planted_outcome(outcome, EXAMPLE, offsets=(-0.15, 0.0, 0.15))))
    assert spread["snow-sex-falls"] == "undecided" and spread["snow-dr-falls"] == "holds"
    assert spread["attacker-above-chance"] == "holds"  # 0.3 above chance > 2 x 0.0876


def test_the_tradeoff_claim_is_decided_at_two_combined_se_of_the_gain(outcome):
    # EXAMPLE's gain is 0.1 F1. With a per-score SE of 0.035 on both axes it lies within 2 SE of the gain (about
    # 0.05), although it exceeds 2 single-score SE (0.07), the rule the claim used before.
    gain = svs.matched_privacy_gain(_scores(EXAMPLE, se=0.035))
    assert 2 * 0.035 < gain["gain"] <= 2 * gain["se"]
    claims = {claim.id: claim for claim in svs.evaluate_claims(_planted_outcome(outcome, EXAMPLE, se=0.035))}
    assert claims["vs-snow-better-tradeoff"].verdict == "undecided"
    assert "within 2 SE" in claims["vs-snow-better-tradeoff"].reason
    assert _verdicts(svs.evaluate_claims(_planted_outcome(outcome, EXAMPLE, se=0.01)))["vs-snow-better-tradeoff"] \
        == "holds"


def test_matched_privacy_gain_se_by_hand():
    # With exact attacker accuracies (SE 0) both curves run through (0.8, 0.7, 0.6) over the overlap [0.6, 0.8]:
    # the gain is (1/4, 1/2, 1/4) . (F1 at p=0.5, p=0.1, original) of VS-Snow minus the same of Snow (the
    # trapezoid rule on the grid, up to 1/400), the original's weights cancel, so SE = sqrt(2 (1/16 + 1/4)) x 0.02.
    scores = _scores(EXAMPLE, se=0.02)
    scores.loc[scores["task"] == "sex", "se"] = 0.0
    gain = svs.matched_privacy_gain(scores)
    assert gain["se"] == pytest.approx(0.02 * np.sqrt(2 * (1 / 16 + 1 / 4)), rel=0.1)  # 1000 draws: about 2 %
    # Noisy attacker accuracies move the curves sideways too: a larger SE.
    assert svs.matched_privacy_gain(_scores(EXAMPLE, se=0.02))["se"] > 1.5 * gain["se"]
    assert svs.matched_privacy_gain(_scores(EXAMPLE, se=0.02)) == svs.matched_privacy_gain(_scores(EXAMPLE, se=0.02))


def test_seeded_versions_train_once_per_seed(outcome, arrays):
    config = tiny_config(training_seeds=2)
    seeded = svs.run_experiment(arrays, config, device="cpu", log=lambda message: None, saliency_images=4)
    assert svs.seeded_versions(config) == [("original", 0.0), ("snow", 0.5), ("vs_snow", 0.5)]
    networks = seeded.training.groupby("network")["seed"].apply(sorted).to_dict()
    assert networks["sex attacker (original)"] == [0, 1]
    assert networks["DR classifier (Original)"] == networks["DR classifier (VS-Snow p=0.5)"] == [0, 1]
    assert networks["DR classifier (Snow p=0.1)"] == [0]
    counts = seeded.seed_scores.groupby(["method", "p", "task"]).size()
    assert counts[("snow", 0.1, "sex")] == 2 and counts[("snow", 0.1, "dr")] == 1
    scores = seeded.scores.set_index(["method", "p", "task"])
    assert scores.loc[("snow", 0.1, "sex"), "seeds"] == 2 and scores.loc[("snow", 0.1, "dr"), "seeds"] == 1
    # Training seed 0 is the single-seed run's network: the same cached classifier, the same scores.
    first = seeded.seed_scores[seeded.seed_scores["seed"] == 0].reset_index(drop=True)
    assert np.allclose(first["value"], outcome.scores["value"])
    assert seeded.training.loc[seeded.training["seed"] == 0, "cached"].all()
