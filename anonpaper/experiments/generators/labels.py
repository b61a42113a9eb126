"""The cohorts' label classifiers, and the labels they read off generated images.

A generator that learned a cohort should draw its diseases about as often as the cohort has them: the DR grades
of the fundus cohort (the phantom's ``dr_grade``, or a real copy's DR label) and the findings of the chest X-ray
phantom. Nobody labels generated images, so a classifier trained from scratch on the cohort's real training
images reads them: a single-label DR classifier (class-weighted focal loss, gamma 0.6, paper 2's DR recipe), or a
multi-label findings classifier (per-finding weighted BCE). Each is cached and checked on held-out real images
(DR: quadratic-weighted kappa; findings: macro AUROC), so a classifier that cannot read real images decides
nothing about generated ones.

The vascular chapter uses the same DR classifier as its lesion-utility instrument (one cache entry serves both when
their settings match).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from anonpaper.cache import ArtifactCache
from anonpaper.data.phantoms.cxr import FINDINGS
from anonpaper.experiments.generators.config import KINDS, PHANTOM_FUNDUS, Config
from anonpaper.experiments.generators.pipeline import jpeg_round_trip, kind_cohort, load_images
from anonpaper.metrics.classification import accuracy, auroc, quadratic_weighted_kappa
from anonpaper.metrics.statistics import patient_bootstrap_se, two_sample_bootstrap_se
from anonpaper.runtime import derive_seed, get_device
from anonpaper.train.pretrained import cohort_description

CACHE_NAMESPACE = "cohort-label-classifiers"
DR_LABELS = {"dr_grade": 5, "label_diabetes": 2}  # DR label columns, in order of preference, and their classes
DR_HELD_OUT = 0.2  # share of training patients that check the DR classifier when no held-out split has labels
FINDING_THRESHOLD = 0.5  # a finding is read as present when its predicted probability reaches this


def dr_label_column(table: pd.DataFrame) -> str | None:
    """The DR label of a cohort table (the first of :data:`DR_LABELS` with a value), None without one.

    Example:
        >>> dr_label_column(pd.DataFrame({"dr_grade": [np.nan], "label_diabetes": [1.0]}))
        'label_diabetes'
    """
    for column in DR_LABELS:
        if column in table.columns and table[column].notna().any():
            return column
    return None


@dataclass
class LabelSets:
    """A label classifier's images: uint8 (N, H, W[, C]) with labels (N,) int64 (DR) or (N, K) 0/1 (findings).

    Attributes:
        train: ``(images, labels)`` it learns.
        val: ``(images, labels)`` that select its epoch: the validation split's, else the training images.
        check: ``(images, labels, patient ids)`` of held-out real images that check it: the test split's, else the
            validation split's, else :data:`DR_HELD_OUT` of the training patients.
        source: Where ``check`` comes from, in words.
    """

    train: tuple[np.ndarray, np.ndarray]
    val: tuple[np.ndarray, np.ndarray]
    check: tuple[np.ndarray, np.ndarray, np.ndarray]
    source: str


def label_sets(cohort, kind: str, columns: list[str], config: Config | None, seed: int) -> LabelSets:
    """The training, selection and check images of generator ``kind``'s ``cohort`` whose ``columns`` are labelled
    (one column: a class index per image; several: 0/1 per column)."""
    parts = {}
    for split in ("train", "val", "test"):
        table = cohort.split(split).table
        keep = table[columns].notna().all(axis=1).to_numpy() if len(table) else np.zeros(0, bool)
        if keep.any():
            values = table[columns].to_numpy()[keep].astype(np.int64)
            parts[split] = (load_images(kind, config, split)[keep], values[:, 0] if len(columns) == 1 else values,
                            table["patient_id"].astype(str).to_numpy()[keep])
    if "train" not in parts:
        raise ValueError(f"no training image of {cohort.name!r} has labels {columns}")
    train = parts["train"]
    if "test" in parts:
        check, source = parts["test"], "test split"
    elif "val" in parts:
        check, source = parts.pop("val"), "validation split"
    else:
        patients = np.unique(train[2])
        held = np.random.default_rng(derive_seed(seed, "dr-held-out")).permutation(patients)[
            : max(1, int(round(DR_HELD_OUT * len(patients))))]
        rows = np.isin(train[2], held)
        if rows.all():
            raise ValueError(f"{cohort.name!r}: too few labelled training patients to hold some out for the check")
        check, train = tuple(part[rows] for part in train), tuple(part[~rows] for part in train)
        source = f"{DR_HELD_OUT:.0%} of the training patients, held out of training"
    val = parts.get("val", train)
    return LabelSets(train[:2], val[:2], check, source)


@dataclass
class LabelClassifier:
    """A cohort's label classifier and its held-out check.

    Attributes:
        model: The network (eval mode, CPU); it takes images in [0, 1] and returns logits (N, K).
        task: ``"grade"`` (single-label, softmax over ``names``) or ``"findings"`` (multi-label, sigmoid per name).
        names: Class names (``"<column>=<value>"``) or finding names, K of them.
        column: The DR label column (``task == "grade"``), else ``""``.
        check_truth: Held-out labels (N,) or (N, K).
        check_scores: The model's probabilities on those images (N, K).
        check_patients: Their patient ids (N,).
        source: Where the check images come from, in words.
    """

    model: torch.nn.Module
    task: str
    names: tuple[str, ...]
    column: str
    check_truth: np.ndarray
    check_scores: np.ndarray
    check_patients: np.ndarray
    source: str

    @property
    def instrument(self) -> str:
        """The classifier, in words."""
        return "DR classifier" if self.task == "grade" else "findings classifier"

    @property
    def distance_name(self) -> str:
        """What :meth:`distance` measures, in words."""
        return "total variation" if self.task == "grade" else "mean absolute prevalence difference"

    @property
    def check_name(self) -> str:
        """What the check measures, in words."""
        return ("held-out QWK against the true labels" if self.task == "grade"
                else "held-out macro AUROC over findings")

    def check(self, bootstrap: int = 0, seed: int = 0) -> dict[str, float]:
        """The held-out check: ``value`` (QWK, or macro AUROC over findings with both classes), ``accuracy`` (grade:
        exact; findings: mean per-finding at :data:`FINDING_THRESHOLD`), ``n`` and, with ``bootstrap`` > 1,
        ``value_se`` by a patient bootstrap (grades only; NaN otherwise)."""
        truth, scores = self.check_truth, self.check_scores
        se = float("nan")
        if self.task == "grade":
            predicted = scores.argmax(1)
            classes = len(self.names)

            def kappa(first: np.ndarray, second: np.ndarray) -> float:
                return quadratic_weighted_kappa(first, second, classes)

            value = kappa(truth, predicted)
            if bootstrap > 1:
                se = patient_bootstrap_se(truth, predicted, self.check_patients, kappa, bootstrap, seed)
            return {"value": value, "value_se": se, "accuracy": accuracy(truth, predicted), "n": int(len(truth))}
        usable = [k for k in range(truth.shape[1]) if 0 < truth[:, k].sum() < len(truth)]
        value = float(np.mean([auroc(truth[:, k], scores[:, k]) for k in usable])) if usable else float("nan")
        hits = (scores >= FINDING_THRESHOLD) == truth.astype(bool)
        return {"value": value, "value_se": se, "accuracy": float(hits.mean()), "n": int(len(truth))}

    def probabilities(self, images, batch_size: int = 64) -> np.ndarray:
        """Probabilities (N, K) of images (uint8 (N, H, W[, C]) or float (N, C, H, W) in [0, 1])."""
        return _probabilities(self.model, self.task, images, batch_size)

    def shares(self, probabilities: np.ndarray) -> np.ndarray:
        """The share of images given each class (grade: argmax; sums to 1) or each finding (probability >=
        :data:`FINDING_THRESHOLD`), shape (K,), from their probabilities (N, K)."""
        if self.task == "grade":
            return np.bincount(probabilities.argmax(1), minlength=len(self.names)) / max(len(probabilities), 1)
        return (probabilities >= FINDING_THRESHOLD).mean(0)

    def label_shares(self, images: torch.Tensor) -> np.ndarray:
        """What the classifier reads off ``images`` (N, C, H, W) in [0, 1]: :meth:`shares` of their
        probabilities."""
        return self.shares(self.probabilities(images))

    def true_shares(self, labels: np.ndarray) -> np.ndarray:
        """The same shares (K,) from true labels (N,) or (N, K)."""
        labels = np.asarray(labels)
        if self.task == "grade":
            return np.bincount(labels.astype(np.int64), minlength=len(self.names)) / max(len(labels), 1)
        return labels.astype(np.float64).mean(0)

    def distance(self, first: np.ndarray, second: np.ndarray) -> float:
        """How far two share vectors lie apart: total variation (half the L1 distance) between grade distributions,
        the mean absolute difference of finding prevalences; both in [0, 1].

        Example:
            >>> classifier = LabelClassifier(None, "grade", ("a", "b"), "g", np.zeros(0), np.zeros((0, 2)),
            ...                              np.zeros(0), "")
            >>> classifier.distance(np.array([0.8, 0.2]), np.array([0.5, 0.5]))
            0.3
        """
        difference = np.abs(np.asarray(first, float) - np.asarray(second, float))
        return round(float(difference.sum() / 2 if self.task == "grade" else difference.mean()), 12)


def _probabilities(model: torch.nn.Module, task: str, images, batch_size: int = 64) -> np.ndarray:
    """float64 probabilities (N, K) of a label classifier on images (uint8 (N, H, W[, C]) or float (N, C, H, W) in
    [0, 1]): softmax over grades, sigmoid per finding."""
    from anonpaper.train.classifier import predict_proba
    from anonpaper.train.loop import as_image_tensor, batched_forward

    if task == "grade":
        return np.asarray(predict_proba(model, images, batch_size=batch_size), dtype=np.float64)
    logits = batched_forward(model, as_image_tensor(images), batch_size, torch.device("cpu"))
    return logits.sigmoid().double().numpy()


def label_columns(kind: str, cohort) -> tuple[str, list[str], tuple[str, ...]] | None:
    """``(task, columns, names)`` of generator ``kind``'s cohort, None when it has no label to read."""
    if KINDS[kind][0] == PHANTOM_FUNDUS:
        column = dr_label_column(cohort.table)
        if column is None:
            return None
        return "grade", [column], tuple(f"{column}={value}" for value in range(DR_LABELS[column]))
    columns = [f"true_{name}" for name in FINDINGS if f"true_{name}" in cohort.table.columns]
    return ("findings", columns, tuple(column.removeprefix("true_") for column in columns)) if columns else None


def label_classifier(kind: str, config: Config, *, backbone: str, epochs: int, seed: int | None = None,
                     device: str | None = None, progress: bool = False) -> LabelClassifier | None:
    """The label classifier of generator ``kind``'s cohort at the generator's resolution, trained from scratch on
    its real training images (or loaded from the cache; the two fundus generators share one).

    Args:
        kind: A generator kind (:data:`~anonpaper.experiments.generators.config.KINDS`).
        config: The generators chapter's config (cohort, resolution, ``classifier_augment``: the strength of the
            :class:`~anonpaper.train.augment.DegradationAugment` it learns with).
        backbone: :func:`anonpaper.models.classifiers.build_classifier` name.
        epochs: Training epochs (cosine schedule; the epoch is selected on the validation split).
        seed: Seed of its initialisation, training and held-out draw (default ``config.seed``).
        device: Training device (None: :func:`anonpaper.runtime.get_device`).
        progress: Show training progress.

    Returns:
        The :class:`LabelClassifier`, or None when the cohort has no label to read.
    """
    from anonpaper.models.classifiers import build_classifier
    from anonpaper.train.classifier import train_classifier
    from anonpaper.train.loop import TrainSettings
    from anonpaper.train.augment import DegradationAugment
    from anonpaper.train.multilabel import train_multilabel_classifier

    cohort = kind_cohort(kind, config)
    labels = label_columns(kind, cohort)
    if labels is None:
        return None
    task, columns, names = labels
    seed = config.seed if seed is None else seed
    description = {"cohort": cohort_description(cohort), "columns": columns, "task": task,
                   "resolution": config.image_size_of(kind), "backbone": backbone, "epochs": epochs, "seed": seed}
    strength = float(config.classifier_augment)
    augment = DegradationAugment(strength) if strength > 0 else None
    if augment is not None:  # only a new option enters the key: classifiers cached without it stay valid
        description["augment"] = repr(augment)

    def build() -> dict:
        sets = label_sets(cohort, kind, columns, config, seed)
        channels = KINDS[kind][3]
        batch = int(min(32, max(2, len(sets.train[1]))))
        if task == "grade":
            torch.manual_seed(derive_seed(seed, "dr-init"))
            model = build_classifier(backbone, channels, len(names))
            settings = TrainSettings(epochs=epochs, batch_size=batch, lr=1e-3, lr_schedule="cosine",
                                     seed=derive_seed(seed, "dr"), device=device or get_device(), progress=progress)
            trained = train_classifier(model, sets.train, sets.val, settings, loss="focal", focal_gamma=0.6,
                                       augment=augment).model
            trained = trained.cpu().eval()
            scores = _probabilities(trained, task, sets.check[0])
        else:
            torch.manual_seed(derive_seed(seed, "findings-init"))
            model = build_classifier(backbone, channels, len(names))
            settings = TrainSettings(epochs=epochs, batch_size=batch, seed=derive_seed(seed, "findings"),
                                     device=device or get_device(), progress=progress)
            trained = train_multilabel_classifier(model, sets.train, settings, val=sets.val,
                                                  augment=augment).model.cpu().eval()
            scores = _probabilities(trained, task, sets.check[0])
        return {"model": trained, "truth": sets.check[1], "scores": np.asarray(scores, dtype=np.float64),
                "patients": sets.check[2], "source": sets.source}

    artifact = ArtifactCache(CACHE_NAMESPACE).get_or_create(description, build)
    return LabelClassifier(artifact["model"].eval(), task, names, columns[0] if task == "grade" else "",
                           np.asarray(artifact["truth"]), np.asarray(artifact["scores"]),
                           np.asarray(artifact["patients"]), artifact["source"])


def training_labels(kind: str, config: Config, classifier: LabelClassifier) -> np.ndarray:
    """The true labels, (N,) or (N, K), of the labelled training images of generator ``kind``'s cohort."""
    return table_labels(kind_cohort(kind, config).split("train").table, classifier)


def table_labels(table: pd.DataFrame, classifier: LabelClassifier) -> np.ndarray:
    """The true labels, (N,) or (N, K), that ``classifier`` reads, of a cohort or population table's labelled rows."""
    columns = [classifier.column] if classifier.task == "grade" else [f"true_{name}" for name in classifier.names]
    values = table[columns].dropna().to_numpy().astype(np.int64)
    return values[:, 0] if classifier.task == "grade" else values


def reference_rows(kind: str, classifier: LabelClassifier, learned: pd.DataFrame, real: pd.DataFrame,
                   learned_name: str) -> list[dict]:
    """How far the real images the label check reads lie, in their true labels, from the images generator ``kind``
    learned: per label the true share in each (``labels/<name>/learned``, ``labels/<name>/real_true``) and their
    distance (``labels/distance/reference``). Labels belong to patients, so a cohort of a few hundred patients draws
    its shares with an error of its own, which a generator that learned a larger population cannot match.

    Args:
        learned: Table of the images the generator learned (a population's or the cohort's training split).
        real: Table rows of the real images the check reads, in any order.
        learned_name: What ``learned`` is, for the protocol.
    """
    shares = {"learned": classifier.true_shares(table_labels(learned, classifier)),
              "real_true": classifier.true_shares(table_labels(real, classifier))}
    sources = {"learned": f"true labels of the {learned_name}",
               "real_true": f"true labels of the {len(real)} real images the label check reads"}
    rows = [{"kind": kind, "metric": f"labels/{name}/{source}", "value": float(values[index]),
             "protocol": sources[source]}
            for source, values in shares.items() for index, name in enumerate(classifier.names)]
    rows.append({"kind": kind, "metric": "labels/distance/reference",
                 "value": classifier.distance(shares["real_true"], shares["learned"]),
                 "protocol": f"{classifier.distance_name} between the true labels of the real images the check reads "
                             "and of the images the generator learned"})
    return rows


def label_rows(kind: str, config: Config, classifier: LabelClassifier, real: torch.Tensor,
               generated: torch.Tensor) -> list[dict]:
    """Metric rows (``kind``, ``metric``, ``value``, ``protocol``) of the labels ``classifier`` reads off ``real``
    and ``generated`` images (N, C, R, R) in [0, 1]: its held-out check (``labels/check``), per label the true
    share in the training images and the shares read off real and generated images (``labels/<name>/<set>``),
    and the distances generated-vs-real (``labels/distance``) and held-out-vs-real (``labels/distance/held_out``:
    how far two samples of real images already lie apart), and the check's floor (``labels/jpeg_change``: how far
    the labels read off the held-out images move when they are saved as JPEG at ``config.label_jpeg_quality``)."""
    check = classifier.check()
    held_out = classifier.shares(classifier.check_scores)
    probabilities = {"real": classifier.probabilities(real), "generated": classifier.probabilities(generated)}
    shares = {"true": classifier.true_shares(training_labels(kind, config, classifier)),
              **{name: classifier.shares(values) for name, values in probabilities.items()}}
    what = classifier.instrument
    how = ("share of images whose most probable class it is" if classifier.task == "grade"
           else f"share of images with probability >= {FINDING_THRESHOLD}")
    rows = [{"kind": kind, "metric": "labels/check", "value": check["value"],
             "protocol": f"{what} ({config.classifier_backbone}, {config.classifier_epochs} epochs, from scratch on "
                         f"the real training images): {classifier.check_name}, {check['n']} images "
                         f"({classifier.source})"}]
    sources = {"true": "true labels of the real training images",
               "real": f"read by the {what} off {len(real)} real training images",
               "generated": f"read by the {what} off {len(generated)} generated images (psi 1)"}
    for index, name in enumerate(classifier.names):
        for source, values in shares.items():
            rows.append({"kind": kind, "metric": f"labels/{name}/{source}", "value": float(values[index]),
                         "protocol": f"{sources[source]}; {how}"})
    metric = classifier.distance_name
    rows.append({"kind": kind, "metric": "labels/distance", "value": classifier.distance(shares["generated"],
                                                                                       shares["real"]),
                 "protocol": f"{metric} between the labels read off generated and real images"})
    rows.append({"kind": kind, "metric": "labels/distance/se",
                 "value": two_sample_bootstrap_se(
                     probabilities["real"], probabilities["generated"],
                     lambda real_rows, fake_rows: classifier.distance(classifier.shares(fake_rows),
                                                                      classifier.shares(real_rows)),
                     config.bootstrap, derive_seed(config.seed, "generators-bootstrap", kind, "labels")),
                 "protocol": f"SE: {config.bootstrap} bootstrap draws of both image sets"})
    rows.append({"kind": kind, "metric": "labels/distance/held_out", "value": classifier.distance(held_out,
                                                                                                shares["real"]),
                 "protocol": f"{metric} between the labels read off the held-out check images and the real training "
                             "images (two real samples: the distance sampling alone gives)"})
    # The label check's own floor: the held-out real images saved as JPEG must read as the same labels.
    quality = config.label_jpeg_quality
    saved = classifier.shares(classifier.probabilities(jpeg_round_trip(check_images(kind, config, classifier),
                                                                       quality)))
    rows.append({"kind": kind, "metric": "labels/jpeg_change", "value": classifier.distance(saved, held_out),
                 "protocol": f"{metric} between the labels the {what} reads off its held-out check images saved as "
                             f"JPEG at quality {quality} and unsaved"})
    return rows


def check_images(kind: str, config: Config, classifier: LabelClassifier) -> torch.Tensor:
    """The held-out real images that check ``classifier`` (:attr:`LabelSets.check`, drawn with ``config.seed``),
    float (N, C, R, R) in [0, 1], in the order of its ``check_scores``."""
    from anonpaper.train.loop import as_image_tensor

    cohort = kind_cohort(kind, config)
    columns = [classifier.column] if classifier.task == "grade" else [f"true_{name}" for name in classifier.names]
    images = label_sets(cohort, kind, columns, config, config.seed).check[0]
    if len(images) != len(classifier.check_scores):
        raise ValueError(f"{kind}: {len(images)} check images, but the classifier was checked on "
                         f"{len(classifier.check_scores)} (another seed or cohort)")
    return as_image_tensor(images)
