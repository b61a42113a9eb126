"""The k-SALSA chapter: config validation, claims decided on planted outcomes (holds, does not hold, undecided on
small sets, a failed DR instrument), and the pipeline's pieces on tiny inputs (clusters, releases, fidelity,
attacks)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from anonpaper.experiments import k_salsa as chapter
from anonpaper.experiments.claims import FAILS, HOLDS, UNDECIDED
from anonpaper.experiments.k_salsa import pipeline
from anonpaper.models.stylegan import StyleGenerator, get_config
from anonpaper.models.unet import UNet

pytestmark = pytest.mark.unit
KS = (2, 5, 10, 20)


# ---------------------------------------------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------------------------------------------
def test_defaults_are_valid_and_sequences_become_tuples():
    config = chapter.Config()
    assert config.k_values == KS and config.generators_profile == "quick"
    assert chapter.Config.from_parameters({"K_VALUES": [2, 4]}).k_values == (2, 4)


@pytest.mark.parametrize("changes, message", [
    ({"k_values": (5, 2)}, "K_VALUES"),
    ({"k_values": (1, 2)}, "K_VALUES"),
    ({"k_values": (2,)}, "K_VALUES"),
    ({"generators_profile": "huge"}, "GENERATORS_PROFILE"),
    ({"private_images": 50}, "at least 3 x the largest k"),
    ({"alignment_steps": 0}, "ALIGNMENT_STEPS"),
    ({"style_weight": -1.0}, "STYLE_WEIGHT"),
    ({"classifier_backbone": "vgg"}, "CLASSIFIER_BACKBONE"),
    ({"attacker_test_fraction": 0.95}, "ATTACKER_TEST_FRACTION"),
    ({"inversion": "restyle"}, "INVERSION"),
    ({"inversion": "encoder", "encoder_steps": 0}, "needs an encoder"),
])
def test_invalid_parameters_are_refused_by_name(changes, message):
    with pytest.raises(ValueError, match=message):
        chapter.Config(**changes)


# ---------------------------------------------------------------------------------------------------------------
# Claims on planted outcomes
# ---------------------------------------------------------------------------------------------------------------
def planted(*, fd_gap=1.0, fd_gap_se=0.1, membership=(0.9, 0.7, 0.5, 0.3), pixel_membership=None, chance=0.05,
            qwk=(0.6, 0.5, 0.3, 0.1), centroid_qwk=None, qwk_se=0.02, membership_se=0.02, n_test=100, pool=100,
            reference_qwk=0.7, min_sizes=None, synthetic=None) -> chapter.Outcome:
    """An outcome with the given numbers at k = 2, 5, 10, 20 (no networks)."""
    config = chapter.Config()
    pixel_membership = pixel_membership or tuple(min(1.0, value + 0.2) for value in membership)
    centroid_qwk = centroid_qwk or tuple(value - 0.2 for value in qwk)
    synthetic = synthetic or tuple(246 // k for k in KS)
    rows = []
    for index, k in enumerate(KS):
        for method in chapter.METHODS:
            rows.append({
                "k": k, "method": method, "n_synthetic": synthetic[index], "fd": 5.0 + (fd_gap if method == "centroid"
                                                                                      else 0.0),
                "fd_se": 0.1, "kid": 0.01, "kid_std": 0.001, "accuracy": 0.5, "accuracy_se": 0.02,
                "qwk": {"k-SALSA": qwk, "centroid": centroid_qwk, "k-same pixel": qwk}[method][index], "qwk_se": qwk_se,
                "qwk_seed_sd": 0.0, "n_test": n_test, "predicted_classes": 5,
                "membership_precision": (pixel_membership if method == "k-same pixel" else membership)[index] + chance,
                "membership_se": membership_se, "membership_chance": chance, "pool": pool, "held_out_clusters": 10,
                "reid_precision": chance, "reid_se": 0.01, "reid_chance": chance})
    min_sizes = min_sizes or KS
    clusters = pd.DataFrame([{"k": k, "images": 246, "remainder": 246 % k, "clusters": 246 // k, "min_size": size,
                              "max_size": k + 246 % k, "clusters_above_k": 1, "every_image_once": True}
                             for k, size in zip(KS, min_sizes)])
    return chapter.Outcome(
        config=config, generator={}, segmenter_dice=0.9, inversion={"images": 246, "inversion": "projector"},
        inversions=pd.DataFrame(), clusters=clusters,
        results=pd.DataFrame(rows), fd_differences={k: {"difference": fd_gap, "difference_se": fd_gap_se} for k in KS},
        reference={"accuracy": 0.7, "accuracy_se": 0.02, "qwk": reference_qwk, "qwk_se": 0.03},
        alignment=pd.DataFrame({"k": KS, "loss_at_centroid": 1.0, "loss_after_alignment": 0.5}))


def verdicts(outcome) -> dict[str, str]:
    return {claim.id: claim.verdict for claim in chapter.evaluate_claims(outcome)}


def test_claims_hold_on_an_outcome_built_to_satisfy_them():
    found = verdicts(planted())
    assert found == {"k-salsa-alignment-fidelity": HOLDS, "k-salsa-membership-falls": HOLDS,
                     "k-salsa-membership-below-pixel": HOLDS, "k-salsa-utility-falls": HOLDS,
                     "k-salsa-alignment-utility": HOLDS, "k-salsa-clusters-at-least-k": HOLDS}
    kinds = {claim.id: claim.kind for claim in chapter.evaluate_claims(planted())}
    assert kinds["k-salsa-clusters-at-least-k"] == "phantom-check" and kinds["k-salsa-membership-falls"] == "paper"


def test_claims_do_not_hold_on_an_outcome_built_to_contradict_them():
    found = verdicts(planted(fd_gap=-1.0, membership=(0.1, 0.3, 0.5, 0.7), pixel_membership=(0.0, 0.1, 0.2, 0.3),
                             qwk=(0.1, 0.3, 0.5, 0.6), centroid_qwk=(0.4, 0.6, 0.8, 0.9), min_sizes=(2, 4, 10, 20)))
    assert set(found.values()) == {FAILS}


def test_claims_are_undecided_on_small_test_sets_and_within_noise():
    small = verdicts(planted(n_test=10, pool=10, synthetic=(12, 4, 2, 1)))
    for claim_id in ("k-salsa-alignment-fidelity", "k-salsa-membership-falls", "k-salsa-membership-below-pixel",
                     "k-salsa-utility-falls", "k-salsa-alignment-utility"):
        assert small[claim_id] == UNDECIDED, claim_id
    assert small["k-salsa-clusters-at-least-k"] == HOLDS  # an implementation check needs no test set
    reasons = {claim.id: claim.reason for claim in chapter.evaluate_claims(planted(n_test=10))}
    assert reasons["k-salsa-utility-falls"].startswith("too few test images (10 < 40)")
    noisy = verdicts(planted(fd_gap=0.1, fd_gap_se=0.1))
    assert noisy["k-salsa-alignment-fidelity"] == UNDECIDED


def test_fidelity_counts_only_the_k_with_enough_synthetic_images():
    # k = 20 contradicts the claim, but with 12 < MIN_EVAL_IMAGES images it is not counted.
    outcome = planted(synthetic=(123, 49, 24, 12))
    outcome.fd_differences[20] = {"difference": -5.0, "difference_se": 0.1}
    claim = {claim.id: claim for claim in chapter.evaluate_claims(outcome)}["k-salsa-alignment-fidelity"]
    assert claim.verdict == HOLDS and "not counted: 12 < 20" in claim.reason


def test_a_dr_classifier_that_cannot_grade_real_images_leaves_the_utility_claims_undecided():
    claims = {claim.id: claim for claim in chapter.evaluate_claims(planted(reference_qwk=0.01))}
    for claim_id in ("k-salsa-utility-falls", "k-salsa-alignment-utility"):
        assert claims[claim_id].verdict == UNDECIDED
        assert "DR classifier failed its check" in claims[claim_id].reason
    assert claims["k-salsa-membership-falls"].verdict == HOLDS


def test_tables_have_one_row_per_k_and_method():
    outcome = planted()
    assert len(chapter.privacy_table(outcome)) == len(KS) * len(chapter.METHODS)
    utility = chapter.utility_table(outcome.__class__(**{**outcome.__dict__, "reference": {
        **outcome.reference, "n_test": 100, "predicted_classes": 5, "qwk_seed_sd": 0.0}}))
    assert utility["method"].iloc[0] == "real (private images)" and len(utility) == 1 + len(KS) * 3


# ---------------------------------------------------------------------------------------------------------------
# Pipeline pieces on tiny inputs
# ---------------------------------------------------------------------------------------------------------------
def test_utility_over_seeds_adds_the_seed_spread_to_the_bootstrap_error():
    same = pipeline.over_seeds([{"accuracy": 0.5, "accuracy_se": 0.02, "qwk": 0.3, "qwk_se": 0.05, "n_test": 10,
                                 "predicted_classes": 4}] * 3)
    assert same["qwk"] == pytest.approx(0.3) and same["qwk_se"] == pytest.approx(0.05) and same["seeds"] == 3
    spread = pipeline.over_seeds([{"accuracy": 0.5, "accuracy_se": 0.02, "qwk": value, "qwk_se": 0.05, "n_test": 10,
                                   "predicted_classes": 4} for value in (0.1, 0.3, 0.5)])
    assert spread["qwk_se"] == pytest.approx(np.sqrt(0.05**2 + 0.2**2 / 3))


def test_majority_grade_and_cluster_summary():
    labels = np.array([0, 0, 0, 1, 1, 1, 1])
    assert pipeline.majority_grades(labels, np.array([3, 3, 1, 0, 2, 2, 0])).tolist() == [3, 0]  # tie -> lower
    summary = pipeline.cluster_summary(labels, 3)
    assert summary["min_size"] == 3 and summary["max_size"] == 4 and summary["remainder"] == 1
    assert summary["every_image_once"]


@pytest.mark.parametrize("clusters", [3, 4, 12, 123])
def test_attack_split_is_a_partition_with_every_role_filled(clusters):
    split = pipeline.attack_split(clusters, chapter.Config(), 5)
    assert all(len(part) >= 1 for part in split.values())
    assert sorted(np.concatenate(list(split.values())).tolist()) == list(range(clusters))
    with pytest.raises(ValueError, match="at least 3 clusters"):
        pipeline.attack_split(2, chapter.Config(), 5)


def test_fidelity_pairs_the_bootstrap_of_equal_sets():
    rng = np.random.default_rng(0)
    real = rng.normal(size=(60, 4))
    same = rng.normal(size=(20, 4))
    rows, gap = pipeline.fidelity(real, {"k-same pixel": same + 3, "centroid": same, "k-SALSA": same.copy()},
                                  rng.normal(size=(15, 4)), chapter.Config(bootstrap=20), 2)
    assert gap["difference"] == pytest.approx(0.0, abs=1e-9) and gap["difference_se"] == pytest.approx(0.0, abs=1e-9)
    assert rows["k-same pixel"]["fd"] > rows["centroid"]["fd"] and np.isfinite(rows["real test"]["fd_se"])


def test_identity_matcher_finds_a_member_released_as_is():
    torch.manual_seed(0)
    texture = torch.nn.functional.avg_pool2d(torch.rand(8, 3, 64, 64), 3, stride=1, padding=1)
    labels = np.array([0, 0, 1, 1, 2, 2, 3, 3])
    split = {"train": np.array([0]), "val": np.array([1]), "test": np.array([2, 3])}
    bank = pipeline.sift_bank(texture, 64)
    # Each held-out cluster "releases" its first member unchanged: the matcher ranks that member first.
    released = pipeline.sift_bank(texture[[0, 2, 4, 6]], 64)
    result = pipeline.reidentification(released, bank, labels, split, k=1)
    assert result["reid_precision"] == 1.0 and result["reid_chance"] == pytest.approx(0.5)


@pytest.fixture(scope="module")
def tiny():
    """A 32 px untrained StyleGAN2, a tiny U-Net and 9 private images with grades."""
    generator = StyleGenerator(get_config("sg2-tiny", resolution=32, image_channels=3), seed=0).eval()
    for parameter in generator.parameters():
        parameter.requires_grad_(False)
    network = UNet(3, 1, base_width=4, depth=4).eval()
    images = torch.rand(9, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    data = pipeline.PrivateData(private=images, private_grades=np.array([0, 1, 2, 0, 1, 2, 3, 4, 0]),
                                private_patients=np.array([str(i // 2) for i in range(9)]), test=images[:4],
                                test_grades=np.array([0, 1, 2, 3]), test_patients=np.array(["a", "a", "b", "c"]),
                                cohort_size=32)
    return generator, network, data


def test_inversion_and_the_three_releases_on_a_tiny_generator(tiny):
    generator, network, data = tiny
    inversion = pipeline.invert(generator, data.private, steps=2, seed=0)
    assert inversion.codes.shape == (9, generator.num_ws, generator.w_dim)
    assert inversion.reconstructions.shape == data.private.shape and np.isfinite(inversion.psnr).all()
    config = chapter.Config(alignment_steps=2, private_images=9, k_values=(2, 3))
    release = pipeline.synthesize(generator, inversion, data, pipeline.feature_taps(network, 32), 2, config)
    assert set(release.images) == set(chapter.METHODS)
    assert all(images.shape == (4, 3, 32, 32) for images in release.images.values())  # 9 // 2 clusters
    assert all(float(images.min()) >= 0 and float(images.max()) <= 1 for images in release.images.values())
    assert np.bincount(release.labels).min() >= 2 and len(release.grades) == 4
    members = pipeline.cluster_members(release.labels)[0]
    assert torch.allclose(release.images["k-same pixel"][0], data.private[members].mean(0), atol=1e-6)


def test_encoder_inversion_and_its_refinement_on_a_tiny_generator(tiny):
    generator, network, data = tiny
    config = chapter.Config(encoder_steps=2, private_images=9, k_values=(2, 3))
    encoder, seconds = pipeline.train_inversion_encoder(generator, data.private, pipeline.feature_taps(network, 32),
                                                        config)
    assert seconds > 0 and not any(parameter.requires_grad for parameter in generator.parameters())
    encoded = pipeline.encode(encoder, generator, data.private, seconds)
    assert encoded.codes.shape == (9, generator.num_ws, generator.w_dim) and encoded.train_seconds == seconds
    refined = pipeline.invert(generator, data.private, 2, 0, initial_ws=encoded.codes, train_seconds=seconds)
    row = refined.summary("encoder+projector")
    assert row["images"] == 9 and row["train_seconds"] == seconds and "encoder's codes" in row["method"]


def test_membership_attack_and_utility_run_on_tiny_sets(tiny):
    _, _, data = tiny
    config = chapter.Config(attacker_epochs=1, classifier_epochs=1, bootstrap=5, private_images=9, k_values=(2, 3))
    labels = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2])
    synthetic = pipeline.k_same_pixel_average(data.private, labels)
    split = {"train": np.array([0]), "val": np.array([1]), "test": np.array([2])}
    result = pipeline.membership_attack(synthetic, data, labels, split, 3, config, "test")
    assert 0.0 <= result["membership_precision"] <= 1.0 and result["pool"] == 3
    model = pipeline.train_dr_classifier(synthetic, np.array([0, 1, 2]), config, "test")
    scores = pipeline.utility(model, data, config, "test")
    assert 0.0 <= scores["accuracy"] <= 1.0 and scores["n_test"] == 4
