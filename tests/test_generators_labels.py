"""The generators chapter's cohort label classifiers: their training and held-out sets, their check, the labels
they read off images, the label distance and the label claim; an end-to-end run on tiny phantoms."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from anonpaper.experiments import generators as chapter
from anonpaper.experiments.claims import FAILS, HOLDS, UNDECIDED
from anonpaper.experiments.generators import labels
from anonpaper.metrics.classification import auroc, quadratic_weighted_kappa

pytestmark = pytest.mark.unit


def tiny_config(**changes) -> chapter.Config:
    values = dict(image_size=32, retina_patients=8, cxr_patients=6, eval_images=8, min_eval_images=8,
                  classifier_epochs=1, weights_dir=None)
    values.update(changes)
    return chapter.Config(**values)


# -- training and check sets ----------------------------------------------------------------------------------------

class StubCohort:
    """A cohort table split by ``split`` (no images: the test patches ``load_images``)."""

    name = "stub"
    channels = 3

    def __init__(self, table):
        self.table = table

    def split(self, name):
        return StubCohort(self.table[self.table["split"] == name].reset_index(drop=True))


def _stub(labels_in_test: bool, val: bool = False):
    rows = [{"split": "train", "patient_id": f"p{i // 2}", "label_diabetes": float(i % 2)} for i in range(20)]
    rows += [{"split": "test", "patient_id": f"t{i // 2}", "label_diabetes": float(i % 2) if labels_in_test
              else np.nan} for i in range(6)]
    if val:
        rows += [{"split": "val", "patient_id": f"v{i}", "label_diabetes": float(i % 2)} for i in range(4)]
    return StubCohort(pd.DataFrame(rows))


def test_label_sets_check_on_held_out_labelled_images(monkeypatch):
    def images(kind, config, split):  # image value = row number within its split, to trace rows
        count = len(cohort.split(split).table)
        return np.arange(count, dtype=np.uint8)[:, None, None, None] * np.ones((1, 2, 2, 3), np.uint8)

    monkeypatch.setattr(labels, "load_images", images)
    cohort = _stub(labels_in_test=True)
    assert labels.dr_label_column(cohort.table) == "label_diabetes"
    sets = labels.label_sets(cohort, "fundus-sg3t", ["label_diabetes"], None, seed=0)
    assert sets.source == "test split" and len(sets.check[1]) == 6 and len(sets.train[1]) == 20
    assert sets.val[0] is sets.train[0]  # no validation split: the epoch is selected on the training images

    cohort = _stub(labels_in_test=False)  # ODIR-5K under paper 1's protocol: the testing images have no labels
    sets = labels.label_sets(cohort, "fundus-sg3t", ["label_diabetes"], None, seed=0)
    assert "held out of training" in sets.source
    assert len(sets.check[1]) == 4 and len(sets.train[1]) == 16  # 2 of 10 training patients
    assert not set(sets.check[2]) & set(np.asarray([f"p{i // 2}" for i in range(20)])[sets.train[0][:, 0, 0, 0]])

    cohort = _stub(labels_in_test=False, val=True)
    sets = labels.label_sets(cohort, "fundus-sg3t", ["label_diabetes"], None, seed=0)
    assert sets.source == "validation split" and len(sets.check[1]) == 4 and len(sets.train[1]) == 20
    assert labels.dr_label_column(pd.DataFrame({"dr_grade": [np.nan], "label_diabetes": [np.nan]})) is None




def test_multi_label_sets_keep_one_column_per_finding(monkeypatch):
    rows = [{"split": split, "patient_id": f"{split}{i}", "true_a": i % 2, "true_b": (i // 2) % 2}
            for split in ("train", "test") for i in range(6)]
    cohort = StubCohort(pd.DataFrame(rows))
    monkeypatch.setattr(labels, "load_images", lambda kind, config, split: np.zeros((6, 2, 2), np.uint8))
    sets = labels.label_sets(cohort, "cxr-sg2", ["true_a", "true_b"], None, seed=0)
    assert sets.train[1].shape == (6, 2) and sets.check[1][:, 1].tolist() == [0, 0, 1, 1, 0, 0]
    with pytest.raises(ValueError, match="no training image of 'stub' has labels"):
        labels.label_sets(StubCohort(pd.DataFrame(rows).assign(true_a=np.nan)), "cxr-sg2", ["true_a"], None, 0)


# -- the classifier's check, shares and distance ---------------------------------------------------------------------

class FixedLogits(torch.nn.Module):
    """A 'classifier' whose logits are the image's mean over pixels, per channel (so tests choose the answer)."""

    def forward(self, images):
        return images.mean(dim=(2, 3))


def _classifier(task: str, truth, scores) -> labels.LabelClassifier:
    names = ("g=0", "g=1", "g=2") if task == "grade" else ("a", "b")
    return labels.LabelClassifier(FixedLogits(), task, names, "g" if task == "grade" else "", np.asarray(truth),
                                  np.asarray(scores, dtype=float), np.arange(len(truth)).astype(str), "test split")


def test_grade_check_is_qwk_and_accuracy_of_the_most_probable_class():
    truth = np.array([0, 1, 2, 2, 1, 0])
    scores = np.eye(3)[[0, 1, 2, 1, 1, 2]]
    check = _classifier("grade", truth, scores).check(bootstrap=20, seed=0)
    assert check["value"] == pytest.approx(quadratic_weighted_kappa(truth, scores.argmax(1), 3))
    assert check["accuracy"] == pytest.approx(4 / 6) and check["n"] == 6 and check["value_se"] > 0


def test_findings_check_is_macro_auroc_over_findings_with_both_classes():
    truth = np.array([[0, 1], [1, 1], [0, 1], [1, 1]])  # finding b is always present: no AUROC
    scores = np.array([[0.1, 0.9], [0.8, 0.7], [0.4, 0.6], [0.3, 0.9]])
    check = _classifier("findings", truth, scores).check()
    assert check["value"] == pytest.approx(auroc(truth[:, 0], scores[:, 0])) == pytest.approx(0.75)
    assert check["accuracy"] == pytest.approx(7 / 8) and np.isnan(check["value_se"])


def test_label_shares_read_the_images_and_distances_compare_them():
    grade = _classifier("grade", np.zeros(0), np.zeros((0, 3)))
    images = torch.zeros(4, 3, 2, 2)
    images[:3, 2] = 1.0  # three images of class 2, one tie resolved to class 0
    assert grade.label_shares(images).tolist() == [0.25, 0.0, 0.75]
    assert grade.true_shares(np.array([0, 2, 2, 2])).tolist() == [0.25, 0.0, 0.75]
    assert grade.distance([0.25, 0.0, 0.75], [0.25, 0.75, 0.0]) == 0.75
    findings = _classifier("findings", np.zeros((0, 2)), np.zeros((0, 2)))
    images = torch.zeros(4, 2, 2, 2)
    images[:2, 0] = 5.0  # logit 5: present; logit 0 gives probability 0.5, which counts as present too
    images[:, 1] = -5.0
    assert findings.label_shares(images).tolist() == [1.0, 0.0]
    assert findings.distance([1.0, 0.0], [0.5, 0.5]) == 0.5



def test_reference_rows_measure_how_far_the_real_images_true_labels_lie_from_what_the_generator_learned():
    grade = _classifier("grade", np.zeros(0), np.zeros((0, 3)))
    learned = pd.DataFrame({grade.column: [0, 0, 1, 2]})
    real = pd.DataFrame({grade.column: [0, 2, 2, 2]})
    rows = {row["metric"]: row for row in labels.reference_rows("fundus-sg2", grade, learned, real, "4 images")}
    names = grade.names
    assert [rows[f"labels/{name}/learned"]["value"] for name in names] == [0.5, 0.25, 0.25]
    assert [rows[f"labels/{name}/real_true"]["value"] for name in names] == [0.25, 0.0, 0.75]
    assert rows["labels/distance/reference"]["value"] == 0.5
    assert rows[f"labels/{names[0]}/learned"]["protocol"] == "true labels of the 4 images"
    assert labels.reference_rows("fundus-sg2", grade, learned, learned.iloc[::-1], "")[-1]["value"] == 0.0

# -- the claim ------------------------------------------------------------------------------------------------------

def _outcome(distance: float, check: float, task: str = "grade", jpeg_change: float = 0.02) -> chapter.Outcome:
    config = tiny_config(eval_images=100, min_eval_images=50)
    kind, dataset = ("fundus-sg2", "phantom-retina") if task == "grade" else ("cxr-sg2", "phantom-cxr")
    classifier = _classifier(task, np.zeros(0), np.zeros((0, 3 if task == "grade" else 2)))
    values = {"labels/distance": distance, "labels/distance/se": 0.02, "labels/distance/held_out": 0.05,
              "labels/check": check, "labels/jpeg_change": jpeg_change}
    values.update({f"labels/{name}/{source}": 0.3 for name in classifier.names
                   for source in ("true", "real", "generated")})
    rows = [{"kind": kind, "metric": name, "value": value, "protocol": ""} for name, value in values.items()]
    trained = chapter.TrainedGenerator(kind, None, "trained", 1.0, pd.DataFrame(), 1.0)
    samples = {kind: {"real": np.zeros((100, 3, 32, 32))}}
    mask = "vessel" if task == "grade" else "lungs"
    return chapter.Outcome(config, {kind: trained}, pd.DataFrame(rows), samples,
                           {dataset: {"mask": mask, "val_dice": 0.7, "check": ""}}, 0.0, {dataset: classifier})


def _label_verdict(outcome) -> str:
    (claim,) = [claim for claim in chapter.evaluate_claims(outcome) if claim.id.endswith("-labels")]
    return claim.verdict


def test_label_claim_holds_within_the_tolerance_fails_beyond_and_waits_for_a_trusted_classifier():
    assert _label_verdict(_outcome(0.10, check=0.6)) == HOLDS
    assert _label_verdict(_outcome(0.40, check=0.6)) == FAILS
    assert _label_verdict(_outcome(0.10, check=0.2)) == UNDECIDED  # QWK below CLASSIFIER_MIN_QWK 0.4
    assert _label_verdict(_outcome(0.10, check=0.9, task="findings")) == HOLDS
    assert _label_verdict(_outcome(0.10, check=0.6, task="findings")) == UNDECIDED  # AUROC below 0.7
    # The floor of its own: a classifier that reads JPEG-saved real images as other labels decides nothing.
    assert _label_verdict(_outcome(0.10, check=0.9, jpeg_change=0.08)) == UNDECIDED  # past LABEL_TOLERANCE / 2
    assert _label_verdict(_outcome(0.40, check=0.9, jpeg_change=0.08)) == UNDECIDED
    (claim,) = [claim for claim in chapter.evaluate_claims(_outcome(0.1, check=0.9, jpeg_change=0.08))
                if claim.id.endswith("-labels")]
    assert "JPEG at quality 90" in claim.reason and "0.08" in claim.reason
    assert _label_verdict(_outcome(0.10, check=0.9, jpeg_change=float("nan"))) == UNDECIDED  # not measured
    # the note says how far the real images' true labels lie from what the generator learned, when measured
    (claim,) = [claim for claim in chapter.evaluate_claims(_outcome(0.1, check=0.9)) if claim.id.endswith("-labels")]
    assert "distance_reference_true" not in claim.ours and "true labels lie" not in claim.reason
    referenced = _outcome(0.1, check=0.9)
    referenced.metrics = pd.concat([referenced.metrics, pd.DataFrame([
        {"kind": "fundus-sg2", "metric": "labels/distance/reference", "value": 0.124, "protocol": ""},
        {"kind": "fundus-sg2", "metric": "memorisation/n/train", "value": 7438, "protocol": ""}])])
    (claim,) = [claim for claim in chapter.evaluate_claims(referenced) if claim.id.endswith("-labels")]
    assert claim.ours["distance_reference_true"] == 0.124 and claim.verdict == HOLDS
    assert "true labels lie 0.124 from those of the 7438 images the generator learned" in claim.reason
    no_classifier = _outcome(0.10, check=0.6)
    no_classifier.classifiers.clear()
    assert not [claim for claim in chapter.evaluate_claims(no_classifier) if claim.id.endswith("-labels")]


@pytest.mark.parametrize("changes, message", [
    ({"classifier_epochs": 0}, "CLASSIFIER_EPOCHS must be a positive integer"),
    ({"classifier_backbone": "vgg"}, "CLASSIFIER_BACKBONE must be one of"),
    ({"label_tolerance": 0}, "LABEL_TOLERANCE must lie in"),
    ({"classifier_min_auroc": 2}, "CLASSIFIER_MIN_AUROC must lie in"),
    ({"classifier_augment": -1.0}, "CLASSIFIER_AUGMENT must be a number in \\[0, 4\\]"),
    ({"classifier_augment": True}, "CLASSIFIER_AUGMENT must be a number"),
    ({"label_jpeg_quality": 100}, "LABEL_JPEG_QUALITY must be an integer in \\[1, 95\\]"),
])
def test_config_refuses_bad_classifier_settings(changes, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**changes)


# -- end to end on tiny phantoms ------------------------------------------------------------------------------------

def test_label_classifiers_train_on_the_phantoms_cache_and_read_generated_images():
    config = tiny_config()
    fundus = labels.label_classifier("fundus-sg2", config, backbone="small_cnn", epochs=1)
    assert fundus.task == "grade" and fundus.names[0] == "dr_grade=0" and len(fundus.names) == 5
    assert fundus.check_scores.shape == (len(fundus.check_truth), 5) and fundus.source == "test split"
    again = labels.label_classifier("fundus-sg3t", config, backbone="small_cnn", epochs=1)  # same cohort and size
    np.testing.assert_array_equal(again.check_scores, fundus.check_scores)
    cxr = labels.label_classifier("cxr-sg2", config, backbone="small_cnn", epochs=1)
    assert cxr.task == "findings" and "cardiomegaly" in cxr.names and cxr.check_scores.shape[1] == len(cxr.names)
    images = torch.rand(6, 1, 32, 32)
    rows = labels.label_rows("cxr-sg2", config, cxr, images, images)
    values = {row["metric"]: row["value"] for row in rows}
    assert values["labels/distance"] == 0.0 and 0.0 <= values["labels/distance/held_out"] <= 1.0
    assert values["labels/distance/se"] >= 0.0  # bootstrap draws of two identical sets still differ
    assert 0.0 <= values["labels/jpeg_change"] <= 1.0
    side = config.image_size_of("cxr-sg2")
    assert labels.check_images("cxr-sg2", config, cxr).shape == (len(cxr.check_truth), 1, side, side)
    assert values["labels/cardiomegaly/true"] == pytest.approx(
        chapter.kind_cohort("cxr-sg2", config).split("train").table["true_cardiomegaly"].mean())


def test_labels_table_has_a_row_per_label_and_the_summary_names_the_distances():
    outcome = _outcome(0.25, check=0.6)
    table = chapter.labels_table(outcome)
    assert list(table.columns) == ["true", "real", "generated"] and (table.to_numpy() == 0.3).all()
    assert [label for _, label in table.index] == ["g=0", "g=1", "g=2"]
    assert "label distance 0.250" in chapter.labels_summary(outcome)
    assert "images it learned" not in chapter.labels_summary(outcome)
    # with the reference rows: the learned and real_true columns, and the reference's distance in the summary
    reference = [{"kind": "fundus-sg2", "metric": f"labels/{label}/{source}", "value": 0.2, "protocol": ""}
                 for _, label in table.index for source in ("learned", "real_true")]
    reference.append({"kind": "fundus-sg2", "metric": "labels/distance/reference", "value": 0.124, "protocol": ""})
    outcome.metrics = pd.concat([outcome.metrics, pd.DataFrame(reference)])
    assert list(chapter.labels_table(outcome).columns) == ["learned", "true", "real_true", "real", "generated"]
    assert "the images it learned: 0.124" in chapter.labels_summary(outcome)


def test_degradations_enter_the_classifiers_training_and_cache_key_only_when_asked(monkeypatch):
    seen = []
    from anonpaper.train import classifier as classifier_module

    real_train = classifier_module.train_classifier

    def spy(*args, augment=None, **kwargs):
        seen.append(augment)
        return real_train(*args, augment=augment, **kwargs)

    monkeypatch.setattr(classifier_module, "train_classifier", spy)  # label_classifier imports it when called
    # A seed of their own: no other test has cached these two classifiers, so both are trained here.
    plain = labels.label_classifier("fundus-sg2", tiny_config(classifier_augment=0.0), backbone="small_cnn", epochs=1,
                                    seed=97)
    degraded = labels.label_classifier("fundus-sg2", tiny_config(classifier_augment=1.0), backbone="small_cnn",
                                       epochs=1, seed=97)
    assert seen[0] is None and repr(seen[1]).startswith("DegradationAugment(strength=1")
    assert not np.array_equal(plain.check_scores, degraded.check_scores)  # another cache entry, another network
