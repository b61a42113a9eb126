"""Lesion similarity (RROI, AMS), privacy metrics and trade-off summaries."""

import numpy as np
import pytest
import torch

from anonpaper.metrics import (
    attribute_inference_summary,
    attribute_matching_score,
    attribute_matching_score_from_labels,
    distance_to_closest_record,
    inner_pairs,
    inner_risk,
    membership_top_k_precision,
    min_max_normalise,
    outer_risk,
    pareto_front,
    rroi,
    similarity_tradeoff_score,
    singling_out_risk,
)

pytestmark = pytest.mark.unit


# ----------------------------------------------------------------------------- lesion

def test_rroi_closed_form():
    original = torch.full((2, 1, 4, 4), 0.5)
    mask = torch.zeros(2, 1, 4, 4)
    mask[:, :, :2] = 1.0  # top half is the region of interest (8 pixels)
    edited = original.clone()
    edited[0, :, :2] += 0.2   # 8 pixels inside changed by 0.2 -> ||.|| = 0.2 * sqrt(8)
    edited[0, :, 2:3] += 0.1  # 4 pixels outside changed by 0.1 -> ||.|| = 0.1 * 2
    edited[1, :, 2:] -= 0.3   # image 1: only outside changed -> ratio 0
    values = rroi(mask, original, edited, reduction="none")
    np.testing.assert_allclose(values, [0.2 * np.sqrt(8) / 0.2, 0.0], rtol=1e-6)
    assert rroi(mask, original, edited) == pytest.approx(values.mean())
    assert rroi(mask, original, edited) == pytest.approx(rroi(mask, edited, original))
    # identical images: undefined (NaN), skipped by the mean
    assert np.isnan(rroi(mask, original, original))
    mixed = rroi(mask.repeat(2, 1, 1, 1), original.repeat(2, 1, 1, 1), torch.cat([edited, original]), reduction="none")
    assert np.isnan(mixed[2:]).all() and rroi(mask.repeat(2, 1, 1, 1), original.repeat(2, 1, 1, 1),
                                              torch.cat([edited, original])) == pytest.approx(values.mean())


def test_rroi_validation():
    images = torch.rand(2, 3, 8, 8)
    with pytest.raises(ValueError, match="mask: expected a tensor"):
        rroi(torch.ones(2, 2, 8, 8), images, images)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        rroi(torch.full((2, 1, 8, 8), 2.0), images, images)


def test_ams():
    assert attribute_matching_score_from_labels([1, 0, 1], [1, 0, 1]) == 1.0
    classifier = lambda images: images.mean(dim=(1, 2, 3))  # noqa: E731 - bright image = "exudates present"
    original = torch.cat([torch.full((3, 3, 8, 8), 0.8), torch.full((1, 3, 8, 8), 0.2)])
    edited = original.clone()
    edited[0] = 0.1
    assert attribute_matching_score(classifier, original, original, batch_size=3) == 1.0
    assert attribute_matching_score(classifier, original, edited, batch_size=3) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="probabilities"):
        attribute_matching_score(lambda images: images.mean(dim=(1, 2, 3)) * 5, original, edited)
    with pytest.raises(ValueError, match="binary"):
        attribute_matching_score_from_labels([2, 0], [1, 0])


# ----------------------------------------------------------------------------- privacy

def _embeddings(seed=0, patients=8, per_patient=3, noise=0.05):
    rng = np.random.default_rng(seed)
    identities = np.repeat(np.arange(patients), per_patient)
    centres = rng.normal(size=(patients, 32))
    return centres[identities] + noise * rng.normal(size=(identities.size, 32)), identities, rng


def test_inner_and_outer_risk():
    embeddings, identities, rng = _embeddings()
    scores, labels = inner_pairs(embeddings, identities)
    assert scores.shape == (24 * 23 // 2,) and labels.sum() == 8 * 3
    report = inner_risk(embeddings, identities, threshold=0.5)
    assert report["tar"] == 1.0 and report["far"] == 0.0 and report["auc"] == 1.0 and report["eer"] == 0.0
    # Outer risk, GMIA protocol: positives only -> accuracy = TAR, FRR = 1 - TAR, FAR undefined.
    unrelated = rng.normal(size=embeddings.shape)
    kept = outer_risk(embeddings, embeddings, threshold=0.5)
    broken = outer_risk(embeddings, unrelated, threshold=0.5)
    assert kept["tar"] == 1.0 and broken["tar"] == 0.0 and broken["frr"] == 1.0 and np.isnan(broken["far"])
    assert broken["accuracy"] == broken["tar"]
    with_negatives = outer_risk(embeddings, embeddings, threshold=0.5, patient_ids=identities)
    assert with_negatives["far"] == 0.0 and with_negatives["negatives"] == 24 * 24 - 8 * 9
    swapped = outer_risk(unrelated, embeddings, threshold=0.5, patient_ids=identities)
    assert swapped["tar"] == outer_risk(embeddings, unrelated, threshold=0.5, patient_ids=identities)["tar"]


def test_singling_out_closed_form():
    real = np.array([[0.0, 0.0], [10.0, 0.0], [20.0, 0.0], [30.0, 0.0]])
    identical = singling_out_risk(real, real)
    assert identical["hidden_rate"] == 0.0 and identical["local_cloaking"] == 0.0
    # Reversed order: anonymisation i sits at real (3 - i); counts of closer others are 3, 1, 1, 3.
    reversed_ = singling_out_risk(real, real[::-1])
    np.testing.assert_array_equal(reversed_["cloaking_counts"], [3, 1, 1, 3])
    assert reversed_["hidden_rate"] == 1.0 and reversed_["local_cloaking"] == 2.0
    with pytest.raises(ValueError, match="identical shapes"):
        singling_out_risk(real, real[:3])


def test_membership_top_k_precision():
    membership = np.zeros((2, 6), int)
    membership[0, :2] = 1
    membership[1, 3:5] = 1
    perfect = membership + 0.1 * np.arange(6)[None, :] / 10
    result = membership_top_k_precision(perfect, membership, k=2)
    assert result["precision_at_k"] == 1.0 and result["chance"] == pytest.approx(2 / 6)
    inverted = membership_top_k_precision(-perfect, membership, k=2)
    assert inverted["precision_at_k"] == 0.0
    with pytest.raises(ValueError, match="at most"):
        membership_top_k_precision(perfect, membership, k=7)


def test_distance_to_closest_record():
    rng = np.random.default_rng(0)
    training, holdout = rng.normal(size=(50, 4)), rng.normal(size=(50, 4))
    copies = distance_to_closest_record(training[:10], training, holdout)
    assert copies["median_dcr_training"] == 0.0 and copies["share_closer_to_training"] == 1.0
    fresh = distance_to_closest_record(rng.normal(size=(400, 4)), training, holdout)
    assert 0.35 < fresh["share_closer_to_training"] < 0.65


def test_attribute_inference_summary():
    truth = np.array([0, 0, 0, 1])
    constant = attribute_inference_summary(truth, np.zeros(4, int))
    assert constant["chance"] == 0.75 and constant["advantage"] == 0.0
    perfect = attribute_inference_summary(truth, truth)
    assert perfect["advantage"] == 0.25 and perfect["normalised_advantage"] == 1.0


# ----------------------------------------------------------------------------- trade-off

def test_tradeoff_score_on_paper_table_2():
    # Paper 1, Table 2 (StyleSpace, LowRank, ReSeFa, ours): FS_SIFT, FS_SR, RROI, AMS.
    fs_sift = [0.676, 0.073, 0.191, 0.162]
    fs_sr = [0.597, 0.206, 0.274, 0.271]
    rroi_values = [0.441, 0.160, 0.230, 0.472]
    ams = [0.990, 0.776, 0.948, 0.986]
    scores = similarity_tradeoff_score(fs_sift, fs_sr, rroi_values, ams, [0.0, 1.0])
    # eta = 0: only de-identification counts -> LowRank (lowest ID similarity) scores exactly 1.
    assert scores[0].argmax() == 1 and scores[0, 1] == pytest.approx(1.0)
    # eta = 1: only lesion keeping -> "ours" (highest RROI, near-highest AMS) wins; StyleSpace has max AMS.
    expected = (min_max_normalise(rroi_values) + min_max_normalise(ams)) / 2
    np.testing.assert_allclose(scores[1], expected)
    assert scores[1].argmax() == 3
    with pytest.raises(ValueError, match="eta"):
        similarity_tradeoff_score(fs_sift, fs_sr, rroi_values, ams, 1.5)


def test_pareto_front_directions():
    points = np.array([[0.9, 0.5], [0.8, 0.4], [0.5, 0.9], [0.5, 0.9], [0.1, 0.1]])
    assert pareto_front(points, [True, True]).tolist() == [0, 2, 3]
    assert pareto_front(points, [False, False]).tolist() == [4]
    # privacy higher better, error lower better
    assert pareto_front(points, [True, False]).tolist() == [0, 1, 4]
    with pytest.raises(ValueError, match="2 booleans"):
        pareto_front(points, [True])
