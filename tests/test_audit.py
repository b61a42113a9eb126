"""The audit suite (anonpaper.audit) on small phantom cohorts: a release identical to the originals retains every
advantage, a release of noise retains none, the linkage gallery never holds a query's source, bad input is refused,
and the report files hold every score.

Sizes: 40 retina patients at 64 px with 2-4 images each, one CPU thread; each audit takes about 10-15 s.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from anonpaper.audit import AuditSettings, NetworkMemo, advantage_retained, audit_release
from anonpaper.audit.report import check_output_folder, write_report
from anonpaper.audit.scores import paired_seed_score
from anonpaper.audit.suite import link_released_images
from anonpaper.data import load_cohort
from anonpaper.metrics.statistics import patient_bootstrap_se
from anonpaper.models.classifiers import build_classifier
from anonpaper.models.normalization import InputNormalization

pytestmark = pytest.mark.unit

PRIVACY = [("linkage", "rank1"), ("linkage", "verification_auc"), ("linkage", "own_closer"),
           ("attribute", "transfer"), ("attribute", "adaptive"), ("membership", "balanced_accuracy")]
UTILITY = [("dr_grade", "transfer"), ("dr_grade", "trained_on_release"), ("image_fidelity", "ssim")]


@pytest.fixture(scope="module")
def retina():
    """40 phantom patients (2-4 images each, 64 px) whose sex shows strongly (the default signal needs hundreds of
    patients to learn): images (N, 3, 64, 64) in [0, 1], patients, sex, DR class, vessel masks."""
    cohort = load_cohort("phantom-retina", n_patients=40, image_size=64, seed=3, images_per_patient=(2, 4),
                         sex_effect=8.0, nonvascular_sex_weight=2.0)
    images = cohort.load_images().transpose(0, 3, 1, 2).astype(np.float32) / 255.0
    table = cohort.table
    return {"images": images, "patients": table["patient_id"].astype(str).to_numpy(),
            "sex": (table["sex"] == "M").to_numpy().astype(np.int64),
            "dr": table["dr_3class"].to_numpy().astype(np.int64), "vessels": cohort.load_masks("vessel")}


@pytest.fixture(scope="module")
def identical_report(retina):
    state = torch.random.get_rng_state()
    report = audit_release(retina["images"], retina["images"].copy(), retina["patients"],
                           source=np.arange(len(retina["images"])), sensitive=retina["sex"],
                           tasks={"dr_grade": retina["dr"]}, masks=retina["vessels"])
    assert torch.equal(torch.random.get_rng_state(), state)  # the caller's random stream is left alone
    return report


def _score(report, section, group, name):
    return getattr(report, section)[group][name]


def test_identical_release_retains_every_advantage(identical_report):
    for group, name in PRIVACY:
        score = _score(identical_report, "threats", group, name)
        # The originals' attack works (the ratio is defined) and the release keeps all of it.
        assert score.original > score.chance + 2 * score.original_se, (group, name, score)
        assert abs(score.advantage_retained - 1.0) <= 2 * score.advantage_retained_se + 1e-9, (group, name, score)
    for group, name in UTILITY:
        score = _score(identical_report, "utility", group, name)
        assert abs(score.advantage_retained - 1.0) <= 2 * score.advantage_retained_se + 1e-9, (group, name, score)
    dice = _score(identical_report, "utility", "segmentation", "dice")
    assert dice.original > dice.chance + 2 * dice.original_se and dice.advantage_retained == pytest.approx(1.0)
    psnr = _score(identical_report, "utility", "image_fidelity", "psnr")
    assert psnr.value == math.inf and math.isnan(psnr.advantage_retained)
    assert identical_report.counts["withheld_patients"] > 0  # every patient released: non-members withheld


def test_identical_release_is_not_linked_through_its_own_source(identical_report):
    # A gallery holding the query's source would link an identical release perfectly (cosine 1 to itself): rank-1
    # and the own-closer share would be 1. Membership, whose attacker may meet the very image, is perfect.
    linkage = identical_report.threats["linkage"]
    assert linkage["rank1"].value < 0.9 and linkage["own_closer"].value < 0.95
    assert linkage["rank1"].value > linkage["rank1"].chance + 2 * linkage["rank1"].se
    assert identical_report.threats["membership"]["balanced_accuracy"].value == 1.0


def test_noise_release_hides_the_patients_and_keeps_no_utility(retina):
    noise = np.random.default_rng(0).random(retina["images"].shape).astype(np.float32)
    report = audit_release(retina["images"], noise, retina["patients"], source=np.arange(len(noise)),
                           sensitive=retina["sex"], tasks={"dr_grade": retina["dr"]})
    for section, pairs in (("threats", PRIVACY), ("utility", UTILITY)):
        for group, name in pairs:
            score = _score(report, section, group, name)
            assert score.original > score.chance + 2 * score.original_se, (group, name, score)
            # About 0: within 2 SE of 0 (or 0.05 where the SE is 0: constant predictions), and an SE small enough
            # (< 0.35) that a release keeping half the advantage would be told apart.
            assert score.advantage_retained_se < 0.35, (group, name, score)
            assert abs(score.advantage_retained) <= max(2 * score.advantage_retained_se, 0.05), (group, name, score)


def test_gallery_never_holds_the_query_source():
    # Patient A: image 0 (the query's source) and image 1; patient B: image 2, closer to the query than image 1.
    gallery = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.8, 0.6, 0.0]])
    gallery_patients, gallery_index = np.array(["A", "A", "B"]), np.arange(3)
    query = gallery[:1].copy()  # the release is identical to its source
    linked = link_released_images(query, np.array(["A"]), np.array([0]), gallery, gallery_patients, gallery_index)
    assert linked.hits.tolist() == [0.0]  # image 2 (a stranger) is nearer than image 1 once the source is out
    assert linked.own_closer.tolist() == [0.0] and linked.chance.tolist() == [0.5]
    assert sorted(linked.pair_labels[0].tolist()) == [0, 1]  # pairs of images 1 and 2 only
    # Without a known source (a synthetic image) every gallery image is a candidate: the copy links perfectly.
    unsourced = link_released_images(query, np.array(["A"]), np.array([-1]), gallery, gallery_patients, gallery_index)
    assert unsourced.hits.tolist() == [1.0]
    # A query whose patient has no other image cannot be scored.
    lonely = link_released_images(query, np.array(["A"]), np.array([0]), gallery[[0, 2]], np.array(["A", "B"]),
                                  np.array([0, 2]))
    assert lonely.dropped == 1 and len(lonely.hits) == 0


def test_paired_bootstrap_shares_its_draws_with_the_package_bootstrap():
    rng = np.random.default_rng(1)
    patients = np.repeat(np.arange(10), 3).astype(str)
    release, original = rng.random(30), rng.random(30) + 1.0
    score = paired_seed_score(lambda rows: float(release[rows].mean()), lambda rows: float(original[rows].mean()),
                              patients, patients, 0.0, resamples=50, seed=7)
    stacked = np.concatenate([release, np.full(30, np.nan)])
    expected = patient_bootstrap_se(stacked, stacked, np.concatenate([patients, patients]),
                                    lambda truth, _: float(np.nanmean(truth)), 50, 7)
    assert score.value_se == pytest.approx(expected)
    assert score.ratio == pytest.approx(release.mean() / original.mean())
    same = paired_seed_score(lambda rows: float(release[rows].mean()), lambda rows: float(release[rows].mean()),
                             patients, patients, 0.0, resamples=50, seed=7)
    assert same.ratio == 1.0 and same.ratio_se == 0.0


def test_advantage_retained():
    assert advantage_retained(0.75, 1.0, 0.5) == 0.5
    assert advantage_retained(0.25, 1.0, 0.5) == -0.5
    assert advantage_retained(0.25, 1.0, 0.5, two_sided=True) == 0.5
    assert math.isnan(advantage_retained(0.7, 0.5, 0.5)) and math.isnan(advantage_retained(0.7, 0.4, 0.5))


def test_synthetic_release_with_outsiders_and_a_multilabel_task(retina):
    images, patients = retina["images"], retina["patients"]
    behind = np.unique(patients)[:28]  # 12 patients stay outside the release: natural non-members
    synthetic = np.stack([images[patients == patient].mean(axis=0) for patient in behind])
    findings = np.stack([retina["dr"] > 0, retina["sex"] == 1], axis=1).astype(np.float32)
    first = np.array([np.flatnonzero(patients == patient)[0] for patient in behind])
    settings = AuditSettings(identity_epochs=5, classifier_epochs=3, bootstrap_resamples=20)
    report = audit_release(images, synthetic, patients, released_patients=behind, sensitive=retina["sex"],
                           released_sensitive=retina["sex"][first], tasks={"dr_and_sex": findings},
                           released_tasks={"dr_and_sex": findings[first]}, settings=settings)
    assert report.counts["withheld_patients"] == 0 and report.counts["released_patients"] == 28
    assert "image_fidelity" not in report.utility
    assert report.utility["dr_and_sex"]["transfer"].metric == "macro AUROC"
    assert report.utility["dr_and_sex"]["transfer"].chance == 0.5
    for group, name in PRIVACY:
        assert math.isfinite(_score(report, "threats", group, name).value), (group, name)


def _tiny(patients=8, per_patient=2, size=16):
    rng = np.random.default_rng(0)
    images = rng.random((patients * per_patient, 1, size, size)).astype(np.float32)
    return images, np.repeat([f"p{i}" for i in range(patients)], per_patient)


@pytest.mark.parametrize("change, message", [
    (lambda a: a.update(released=a["released"][:, :, :8]), "differ from the originals"),
    (lambda a: a.update(released=a["released"] * 2), "expected values in [0, 1]"),
    (lambda a: a.update(original=(a["original"] * 255).astype(np.uint8)), "divide uint8"),
    (lambda a: a["patients"].__setitem__(3, ""), "image 3 has no patient id"),
    (lambda a: a.update(source=a["source"] + 1), "source: indices must lie in"),
    (lambda a: a.update(source=None), "released_patients: a release without source pairing"),
    (lambda a: a.update(sensitive=np.zeros(5, int)), "sensitive: expected shape (16,)"),
    (lambda a: a.update(tasks={"grade": -np.ones(16)}), "non-negative integer classes"),
    (lambda a: a.update(released_patients=np.roll(a["patients"], 2)), "names patient"),
    (lambda a: a.update(masks=np.zeros((16, 8, 8), bool)), "masks: expected shape"),
])
def test_bad_input_is_refused_with_a_clear_error(change, message):
    images, patients = _tiny()
    arguments = {"original": images, "released": images.copy(), "patients": patients.astype(object),
                 "source": np.arange(16)}
    change(arguments)
    with pytest.raises(ValueError) as error:
        audit_release(**arguments)
    assert message in str(error.value)


def test_too_few_patients_is_refused_naming_the_minimum():
    images, patients = _tiny(patients=5)
    with pytest.raises(ValueError, match=r"covers 5 patients; the audit needs at least 8 "
                                         r"\(min_patients_per_attacker = 4"):
        audit_release(images, images, patients, source=np.arange(10))
    with pytest.raises(ValueError, match="attacker_share must be a number in"):
        AuditSettings(attacker_share=1.0)


def test_report_files_hold_every_score(identical_report, tmp_path):
    json_path, html_path = write_report(identical_report, tmp_path / "report", inputs={"original": "a"})
    content = json.loads(json_path.read_text())
    assert set(content["threats"]) == {"linkage", "attribute", "membership"}
    assert {"dr_grade", "image_fidelity", "segmentation"} <= set(content["utility"])
    for section in ("threats", "utility"):
        for scores in content[section].values():
            for entry in scores.values():
                assert {"value", "se", "chance", "original", "advantage_retained"} <= set(entry)
    assert content["utility"]["image_fidelity"]["psnr"]["value"] is None  # infinite PSNR is not JSON
    assert content["threats"]["linkage"]["rank1"]["advantage_retained"] == 1.0
    page = html_path.read_text()
    assert page.count("<svg") >= 9 and "Advantage retained" in page and "Membership inference" in page
    with pytest.raises(FileExistsError, match="not empty"):
        check_output_folder(tmp_path / "report", [tmp_path / "elsewhere"])
    with pytest.raises(ValueError, match="lies inside the audited folder"):
        check_output_folder(tmp_path / "report" / "inner", [tmp_path / "report"], overwrite=True)


def test_a_shared_network_memo_trains_the_originals_networks_once_and_changes_no_score(retina):
    """Two releases of one cohort audited with one NetworkMemo give the reports they give alone, and the second
    audit trains only the networks that learn from its release."""
    images, patients = retina["images"], retina["patients"]
    settings = AuditSettings(identity_epochs=3, classifier_epochs=2, bootstrap_resamples=20)
    blurred = torch.nn.functional.avg_pool2d(torch.from_numpy(images), 3, stride=1, padding=1).numpy()
    darker = images * 0.8
    common = {"source": np.arange(len(images)), "sensitive": retina["sex"], "tasks": {"dr_grade": retina["dr"]},
              "settings": settings}
    alone = [audit_release(images, release, patients, **common).to_dict() for release in (blurred, darker)]
    memo = NetworkMemo()
    shared = [audit_release(images, blurred, patients, networks=memo, **common).to_dict()]
    after_first = len(memo)
    shared.append(audit_release(images, darker, patients, networks=memo, **common).to_dict())
    assert shared == alone
    # The second audit reuses the originals' networks: it adds fewer than the first trained.
    assert 0 < len(memo) - after_first < after_first
    with pytest.raises(ValueError, match="networks must be a NetworkMemo"):
        audit_release(images, darker, patients, networks={}, **common)
    # The attackers and task models trained in channels-last layout (settings.channels_last), the identity
    # embeddings in the default one (their trainer takes no layout).
    layouts = {}
    for network in memo.networks.values():
        convolution = next(module for module in network.modules() if isinstance(module, torch.nn.Conv2d))
        kind = type(network.model if isinstance(network, InputNormalization) else network).__name__
        layouts.setdefault(kind, set()).add(convolution.weight.is_contiguous(memory_format=torch.channels_last))
    classifier = type(build_classifier(settings.classifier_backbone, 3, 2)).__name__
    assert layouts.pop(classifier) == {True} and layouts and all(found == {False} for found in layouts.values())
    with pytest.raises(ValueError, match="channels_last must be True or False, got 'yes'"):
        AuditSettings(channels_last="yes")
