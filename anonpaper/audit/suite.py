"""The audit suite: one fixed set of attackers and utility models for any (original, released) image pair.

:func:`audit_release` takes plain arrays (original images, released images, patient ids, the source image of each
released image where there is one, labels where there are any) and returns an :class:`AuditReport`.

Protocol (every attacker is trained only on patients disjoint from those it attacks):

1. **Split.** The original patients are split with ``settings.seed`` into an *attacker-train* side (share
   ``settings.attacker_share``) and an *attacked* side, stratified by membership and the sensitive attribute
   (:func:`anonpaper.data.splits.patient_split`). Attackers and task models train on the attacker-train side and are
   scored on the attacked side (which is also the utility test set).
2. **The originals' reference.** Every score is computed twice: on the release, and on the *originals' release*
   (each released image replaced by its source; for a synthetic release, the member patients' original images),
   with the same attacker recipe and seeds; the advantage retained compares the two (:mod:`anonpaper.audit.scores`).
3. **Linkage / re-identification.** An ArcFace identity embedding (:func:`anonpaper.train.embedding.train_embedding`)
   is trained on the attacker-train originals. Each attacked released image is a query; the gallery holds the
   attacked patients' original images *except the query's source image* (so a release identical to its source is
   not trivially linked). Scores: **rank-1** (the nearest gallery image shows the query's patient; chance = the
   share of the patient's images in the gallery), **verification AUC** over all (query, gallery image) pairs
   (:func:`anonpaper.metrics.identity.verification_auc`; chance 0.5), and the **own-closer share**: per query, the
   share of (own-patient image, stranger image) pairs in which the own patient's image is the more similar (ties
   half; chance 0.5, two-sided: a release pushed away from its patient leaks too).
4. **Membership.** Members are the patients behind the release; non-members are original patients outside it. When
   every original patient is in a paired release, a seeded share of each side's patients is *withheld*: the
   membership attacker does not see their released images, and they are the non-members. The attacker scores a
   candidate original image by its distance to the closest released image in the identity embedding
   (:func:`anonpaper.metrics.privacy.distance_to_closest_record`), calibrates the threshold that maximises balanced
   accuracy on the attacker-train side, and is scored by its **balanced accuracy** on the attacked side's original
   images (chance 0.5).
5. **Attribute inference.** The sensitive attribute (e.g. sex) by a classifier trained on attacker-train originals
   and applied to the attacked released images (*transfer*), and by an *adaptive* classifier trained on the
   attacker-train released images; **balanced accuracy** (chance 1 / classes present).
6. **Utility.** Per task: a model trained on attacker-train originals applied to the attacked released images
   (*transfer*), and a model trained on the attacker-train released images tested on the attacked patients' real
   images (*trained on release*); **QWK** for an (N,) graded label (chance 0), **macro AUROC** for an (N, K)
   multi-label one (chance 0.5). Where the release is paired: **PSNR** and **SSIM** against the source (chance: the
   same against a stranger's image), and, with source masks, **segmentation Dice** of a segmenter trained on
   attacker-train originals (chance: a stranger's mask).

Every score has a patient-bootstrap SE over the attacked patients; with ``settings.attacker_seeds > 1`` each trained
network is trained that many times and the seed spread enters the SE. An FD is not computed: every network the audit
trains is of a kind some method optimises against (identity embeddings: GMIA, the identity swap; task classifiers:
GMIA's utility loss), so none is a neutral judge.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch

from anonpaper.audit.scores import Score, SeedScore, combine, paired_seed_score
from anonpaper.audit.settings import AuditSettings
from anonpaper.data.splits import patient_split
from anonpaper.metrics.classification import balanced_accuracy, quadratic_weighted_kappa
from anonpaper.metrics.identity import cross_pair_scores, verification_auc
from anonpaper.metrics.privacy import distance_to_closest_record
from anonpaper.metrics.quality import psnr, ssim
from anonpaper.metrics.segmentation import dice_score
from anonpaper.models.classifiers import build_classifier
from anonpaper.models.embedding import EmbeddingNet
from anonpaper.models.unet import UNet
from anonpaper.runtime import content_hash, derive_seed
from anonpaper.train.classifier import predict_proba, train_classifier
from anonpaper.train.embedding import embed, train_embedding
from anonpaper.train.loop import TrainSettings
from anonpaper.train.multilabel import macro_auroc, predict_multilabel, train_multilabel_classifier
from anonpaper.train.segmenter import segment, train_segmenter

# Fewest member and non-member patients on each side for the membership attacker (one of each cannot calibrate).
MIN_MEMBERSHIP_PATIENTS = 2
SEGMENTER_PATCH = 32
SEGMENTER_PATCHES_PER_EPOCH = 256

MEANINGS = {
    "rank1": "Share of released images whose nearest original image (never their own source) shows their patient. "
             "Higher = more re-identifiable.",
    "verification_auc": "How well the identity distance separates same-patient from different-patient "
                        "(released, original) pairs; 0.5 = not at all. Higher = more linkable.",
    "own_closer": "Share of (own patient, stranger) comparisons in which a released image is closer to its own "
                  "patient's other images; 0.5 = unlinkable; a departure on either side leaks.",
    "membership": "Balanced accuracy of telling the release's patients from outsiders by the distance of their "
                  "original images to the closest released image. 0.5 = no membership signal.",
    "attribute_transfer": "Balanced accuracy of an attacker trained on original images, applied to the release. "
                          "Higher = the attribute shows.",
    "attribute_adaptive": "Balanced accuracy of an attacker trained on released images of other patients. "
                          "Higher = the attribute shows.",
    "grade_transfer": "QWK of a model trained on original images, graded on the release (0 = chance). Higher = the "
                      "release keeps what the model reads.",
    "grade_trained_on_release": "QWK on real test patients of a model trained on the release (0 = chance). Higher = "
                                "the release can train a useful model.",
    "findings_transfer": "Macro AUROC of a model trained on original images, on the release (0.5 = chance). Higher = "
                         "the release keeps the findings.",
    "findings_trained_on_release": "Macro AUROC on real test patients of a model trained on the release (0.5 = "
                                   "chance). Higher = the release can train a useful model.",
    "psnr": "PSNR (dB) of each released image against its source; chance = against a stranger's image. Higher = "
            "closer to the source (the originals' value is infinite, so no advantage retained).",
    "ssim": "SSIM of each released image against its source (1 = identical); chance = against a stranger's image.",
    "dice": "Dice of a segmenter trained on original images, applied to the release, against the source's mask; "
            "chance = a stranger's mask.",
}


@dataclass
class AuditReport:
    """What :func:`audit_release` returns.

    Attributes:
        threats: ``{"linkage": {"rank1", "verification_auc", "own_closer"}, "attribute": {"transfer",
            "adaptive"}, "membership": {"balanced_accuracy"}}`` of :class:`~anonpaper.audit.scores.Score`; a
            threat without the data it needs holds scores with a ``reason``.
        utility: ``{task: {"transfer", "trained_on_release"}}`` per task label, ``"image_fidelity": {"psnr",
            "ssim"}`` and ``"segmentation": {"dice"}`` where paired (and masks were given).
        counts: Images and patients of each role (original, released, members, attacker-train, attacked,
            withheld, linkage queries without another image of their patient).
        notes: Plain sentences on what was done beyond the fixed protocol (withheld non-members, skipped scores).
        sensitive_name: Name of the sensitive attribute, or None.
        settings: The :class:`AuditSettings` used.
    """

    threats: dict[str, dict[str, Score]]
    utility: dict[str, dict[str, Score]]
    counts: dict[str, int]
    notes: list[str]
    sensitive_name: str | None
    settings: AuditSettings

    def to_dict(self) -> dict:
        """JSON-ready report: ``{"threats": {...}, "utility": {...}, ...}`` with every score as a dict holding
        ``value``, ``se``, ``chance``, ``original`` and ``advantage_retained`` (None where not defined)."""
        return {
            "threats": {threat: {name: score.to_dict() for name, score in scores.items()}
                        for threat, scores in self.threats.items()},
            "utility": {task: {name: score.to_dict() for name, score in scores.items()}
                        for task, scores in self.utility.items()},
            "sensitive_attribute": self.sensitive_name,
            "counts": dict(self.counts),
            "notes": list(self.notes),
            "settings": dataclasses.asdict(self.settings) | {"device": str(self.settings.device)},
            "advantage_retained": "(score on the release - chance) / (score on the originals - chance): 1 = nothing "
                                  "hidden or lost, 0 = at chance; SE by a paired patient bootstrap",
        }


# ---------------------------------------------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class _View:
    """A set of released images (the release, or the originals' release) with each row's patient, source index
    into the originals (-1: none) and labels."""

    images: torch.Tensor
    patients: np.ndarray
    source: np.ndarray
    sensitive: np.ndarray | None
    tasks: dict[str, np.ndarray] = field(default_factory=dict)


def _image_tensor(images: Any, name: str) -> torch.Tensor:
    if isinstance(images, np.ndarray):
        if not np.issubdtype(images.dtype, np.floating):
            raise ValueError(f"{name}: expected float images in [0, 1], got dtype {images.dtype} (divide uint8 "
                             f"images by 255)")
        tensor = torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32))
    elif isinstance(images, torch.Tensor):
        if not images.is_floating_point():
            raise ValueError(f"{name}: expected float images in [0, 1], got dtype {images.dtype}")
        tensor = images.detach().to("cpu", torch.float32)
    else:
        raise ValueError(f"{name}: expected a float numpy array or torch tensor, got {type(images).__name__}")
    if tensor.ndim != 4 or tensor.shape[0] == 0:
        raise ValueError(f"{name}: expected shape (N, C, H, W) with N >= 1, got {tuple(tensor.shape)}")
    if not torch.isfinite(tensor).all():
        raise ValueError(f"{name}: images contain NaN or infinite values")
    low, high = float(tensor.min()), float(tensor.max())
    if low < -1e-6 or high > 1 + 1e-6:
        raise ValueError(f"{name}: expected values in [0, 1], got [{low:.4g}, {high:.4g}]")
    return tensor.clamp(0, 1)


def _identifiers(values: Any, count: int, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=object)
    if array.shape != (count,):
        raise ValueError(f"{name}: expected shape ({count},), got {array.shape}")
    for index, value in enumerate(array):
        if value is None or (isinstance(value, float) and np.isnan(value)) or str(value).strip() == "":
            raise ValueError(f"{name}: image {index} has no patient id")
    return array.astype(str)


def _class_labels(values: Any, count: int, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.shape != (count,):
        raise ValueError(f"{name}: expected shape ({count},) of integer classes, got {array.shape}")
    if array.dtype == bool:
        array = array.astype(np.int64)
    if not np.issubdtype(array.dtype, np.number) or not np.all(np.isfinite(array)) or \
            not np.all(array == np.round(array)) or array.min() < 0:
        raise ValueError(f"{name}: expected non-negative integer classes (e.g. 0 = F, 1 = M), got "
                         f"{np.unique(array)[:8].tolist()}")
    return array.astype(np.int64)


def _task_labels(values: Any, count: int, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim == 1:
        return _class_labels(array, count, name)
    if array.ndim != 2 or array.shape[0] != count or array.shape[1] < 2:
        raise ValueError(f"{name}: expected ({count},) grades or a ({count}, K >= 2) multi-label 0/1 array, got "
                         f"shape {array.shape} (pass a single finding as an (N,) 0/1 grade)")
    if not np.isin(array, (0, 1)).all():
        raise ValueError(f"{name}: multi-label values must be 0 or 1, got {np.unique(array)[:8].tolist()}")
    return array.astype(np.float32)


def _prepare(original, released, patients, source, released_patients, sensitive, tasks, released_sensitive,
             released_tasks, masks) -> tuple[torch.Tensor, np.ndarray, _View, _View, np.ndarray | None,
                                             np.ndarray | None, dict[str, np.ndarray]]:
    original_images = _image_tensor(original, "original")
    released_images = _image_tensor(released, "released")
    if released_images.shape[1:] != original_images.shape[1:]:
        raise ValueError(f"released images (C, H, W) {tuple(released_images.shape[1:])} differ from the originals' "
                         f"{tuple(original_images.shape[1:])}; bring the release to the originals' size and channels")
    count, released_count = original_images.shape[0], released_images.shape[0]
    patient_ids = _identifiers(patients, count, "patients")
    sensitive_labels = None if sensitive is None else _class_labels(sensitive, count, "sensitive")
    task_labels = {str(name): _task_labels(values, count, f"tasks[{name!r}]") for name, values in (tasks or {}).items()}
    reserved = sorted(set(task_labels) & {"image_fidelity", "segmentation"})
    if reserved:
        raise ValueError(f"tasks: {reserved} name a utility section of the report; rename the task")
    mask_array = None
    if masks is not None:
        mask_array = np.asarray(masks)
        if mask_array.shape != (count,) + tuple(original_images.shape[2:]):
            raise ValueError(f"masks: expected shape {(count,) + tuple(original_images.shape[2:])}, got "
                             f"{mask_array.shape}")
        if not np.isin(mask_array, (0, 1)).all():
            raise ValueError("masks: expected binary masks (bool or 0/1)")
        mask_array = mask_array.astype(bool)
    if source is not None:
        source_index = np.asarray(source)
        if source_index.shape != (released_count,) or not np.issubdtype(source_index.dtype, np.integer):
            raise ValueError(f"source: expected ({released_count},) integer indices into the originals, got "
                             f"{source_index.dtype} {source_index.shape}")
        if source_index.min() < 0 or source_index.max() >= count:
            raise ValueError(f"source: indices must lie in [0, {count}), got [{source_index.min()}, "
                             f"{source_index.max()}]")
        source_index = source_index.astype(np.int64)
        derived = patient_ids[source_index]
        if released_patients is not None:
            given = _identifiers(released_patients, released_count, "released_patients")
            wrong = np.flatnonzero(given != derived)
            if len(wrong):
                raise ValueError(f"released_patients: released image {wrong[0]} names patient {given[wrong[0]]!r} "
                                 f"but its source image belongs to {derived[wrong[0]]!r}")
        for name, given in (("released_sensitive", released_sensitive), ("released_tasks", released_tasks)):
            if given is not None:
                raise ValueError(f"{name}: a paired release takes its labels from its source images; leave it None")
        release = _View(released_images, derived, source_index,
                        None if sensitive_labels is None else sensitive_labels[source_index],
                        {name: values[source_index] for name, values in task_labels.items()})
        reference = _View(original_images[source_index], derived, source_index, release.sensitive, release.tasks)
    else:
        if released_patients is None:
            raise ValueError("released_patients: a release without source pairing (synthetic) needs the patient "
                             "behind each released image")
        if masks is not None:
            raise ValueError("masks: segmentation Dice needs a pixel-aligned paired release (source indices)")
        behind = _identifiers(released_patients, released_count, "released_patients")
        unknown = sorted(set(behind) - set(patient_ids))
        if unknown:
            raise ValueError(f"released_patients: patients {unknown[:5]} have no original image")
        if sensitive_labels is not None and released_sensitive is None:
            raise ValueError("released_sensitive: a synthetic release needs the attribute of each released image")
        missing = sorted(set(task_labels) - set(released_tasks or {}))
        if missing:
            raise ValueError(f"released_tasks: a synthetic release needs the task labels {missing} of each released "
                             "image")
        release = _View(released_images, behind, np.full(released_count, -1, np.int64),
                        None if sensitive_labels is None else
                        _class_labels(released_sensitive, released_count, "released_sensitive"),
                        {name: _task_labels(released_tasks[name], released_count, f"released_tasks[{name!r}]")
                         for name in task_labels})
        rows = np.flatnonzero(np.isin(patient_ids, np.unique(behind)))
        reference = _View(original_images[rows], patient_ids[rows], rows,
                          None if sensitive_labels is None else sensitive_labels[rows],
                          {name: values[rows] for name, values in task_labels.items()})
    return original_images, patient_ids, release, reference, sensitive_labels, mask_array, task_labels


# ---------------------------------------------------------------------------------------------------------------
# trained instruments (memoised: identical training sets train once, within an audit and, with a NetworkMemo,
# across audits)
# ---------------------------------------------------------------------------------------------------------------
class NetworkMemo:
    """Trained audit networks shared by several audits of the same originals.

    Every network an audit trains is a function of its kind, its training images and labels, its seed and the audit
    settings (training is seeded, so the same inputs give the same weights); the memo keys it on those, so audits of
    several releases of one cohort train the networks that learn only from the originals (the reference linkage,
    attribute and task models) once. Results are the same as without the memo. Pass one memo to every
    :func:`audit_release` call that should share it; it lives as long as the caller keeps it.
    """

    def __init__(self) -> None:
        self.networks: dict[str, torch.nn.Module] = {}

    def __len__(self) -> int:
        return len(self.networks)


class _Instruments:
    def __init__(self, settings: AuditSettings, channels: int, memo: NetworkMemo | None = None):
        self.settings, self.channels = settings, channels
        # One audit's own memo when none is shared; the settings enter the key, so a shared memo never mixes them.
        self._memo = (memo if memo is not None else NetworkMemo()).networks
        self._settings_key = content_hash(repr(settings))

    def _train_settings(self, epochs: int, seed: int, *, classifier: bool = False) -> TrainSettings:
        # Only the classifier trainers take a layout (the embedding and segmenter trainers refuse one).
        return TrainSettings(epochs=epochs, batch_size=self.settings.batch_size, lr=self.settings.lr, seed=seed,
                             device=self.settings.device, progress=False,
                             channels_last=(self.settings.channels_last or None) if classifier else None)

    def _memoised(self, kind: str, images: torch.Tensor, labels: np.ndarray, seed: int,
                  build: Callable[[], torch.nn.Module]) -> torch.nn.Module:
        key = content_hash(kind, images.numpy(), np.asarray(labels).astype(str), seed, self._settings_key,
                           self.channels)
        if key not in self._memo:
            # Training reseeds torch's global generator; the caller's stream is left as it was.
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(derive_seed(seed, "init"))
                self._memo[key] = build().eval()  # kept on the training device; inference moves the images
        return self._memo[key]

    def identity(self, images: torch.Tensor, patients: np.ndarray, seed: int) -> torch.nn.Module:
        settings = self.settings

        def build() -> torch.nn.Module:
            network = EmbeddingNet(self.channels, settings.identity_dim, settings.identity_backbone)
            return train_embedding(network, images, patients, self._train_settings(settings.identity_epochs,
                                                                                    seed)).model

        return self._memoised("identity", images, patients, seed, build)

    def classifier(self, images: torch.Tensor, labels: np.ndarray, classes: int, seed: int) -> torch.nn.Module:
        settings = self.settings

        def build() -> torch.nn.Module:
            network = build_classifier(settings.classifier_backbone, self.channels, classes)
            # Selected on its own training data: no attacked patient may inform the attacker.
            training = self._train_settings(settings.classifier_epochs, seed, classifier=True)
            return train_classifier(network, (images, labels), (images, labels),
                                    training.with_defaults(lr_schedule="cosine")).model

        return self._memoised(f"classifier-{classes}", images, labels, seed, build)

    def multilabel(self, images: torch.Tensor, labels: np.ndarray, seed: int) -> torch.nn.Module:
        settings = self.settings

        def build() -> torch.nn.Module:
            network = build_classifier(settings.classifier_backbone, self.channels, labels.shape[1])
            training = self._train_settings(settings.classifier_epochs, seed, classifier=True)
            return train_multilabel_classifier(network, (images, labels), training).model

        return self._memoised("multilabel", images, labels, seed, build)

    def segmenter(self, images: torch.Tensor, masks: np.ndarray, seed: int) -> torch.nn.Module:
        settings = self.settings

        def build() -> torch.nn.Module:
            network = UNet(self.channels, 1, base_width=8, depth=2)
            # Random 32 px patches with a Dice term: whole small images under plain BCE learn "no vessel".
            side = min(SEGMENTER_PATCH, *images.shape[2:]) // network.size_multiple * network.size_multiple
            return train_segmenter(network, images, masks, self._train_settings(settings.segmenter_epochs, seed),
                                   patch_size=side, patches_per_epoch=SEGMENTER_PATCHES_PER_EPOCH,
                                   loss="bce+dice").model

        return self._memoised("segmenter", images, masks, seed, build)


# ---------------------------------------------------------------------------------------------------------------
# attacks and utility, per attacker seed
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class Linkage:
    """Per valid query: rank-1 hit, chance of a hit, own-closer share, and its (query, gallery) pair scores."""

    hits: np.ndarray
    chance: np.ndarray
    own_closer: np.ndarray
    pair_scores: list[np.ndarray]
    pair_labels: list[np.ndarray]
    patients: np.ndarray
    dropped: int


def link_released_images(query: np.ndarray, query_patients: np.ndarray, query_source: np.ndarray,
                         gallery: np.ndarray, gallery_patients: np.ndarray, gallery_index: np.ndarray) -> Linkage:
    """Link every query to a gallery that never holds its own source image.

    Args:
        query: (Q, D) embeddings of released images.
        query_patients: (Q,) their patients.
        query_source: (Q,) index of each query's source among the originals (-1: none).
        gallery: (G, D) embeddings of original images.
        gallery_patients: (G,) their patients.
        gallery_index: (G,) index of each gallery image among the originals.

    Returns:
        :class:`Linkage` over the queries that have at least one other image of their patient and one stranger's
        image in the gallery (``dropped`` counts the rest).
    """
    similarity = cross_pair_scores(query, gallery, kind="cosine")
    hits, chance, closer, scores, labels, patients = [], [], [], [], [], []
    dropped = 0
    for row in range(len(query)):
        allowed = gallery_index != query_source[row]  # the source image itself is never a candidate
        own = allowed & (gallery_patients == query_patients[row])
        stranger = allowed & (gallery_patients != query_patients[row])
        if not own.any() or not stranger.any():
            dropped += 1
            continue
        values = similarity[row]
        candidates = np.flatnonzero(allowed)
        best = candidates[np.argmax(values[candidates])]
        hits.append(float(gallery_patients[best] == query_patients[row]))
        chance.append(own.sum() / allowed.sum())
        own_values, stranger_values = values[own], values[stranger]
        closer.append(float(np.mean((own_values[:, None] > stranger_values[None, :])
                                    + 0.5 * (own_values[:, None] == stranger_values[None, :]))))
        scores.append(values[candidates])
        labels.append(own[candidates].astype(np.int64))
        patients.append(query_patients[row])
    return Linkage(np.asarray(hits), np.asarray(chance), np.asarray(closer), scores, labels,
                    np.asarray(patients, dtype=str), dropped)


def _pooled_auc(linkage: Linkage, rows: np.ndarray) -> float:
    if len(rows) == 0:
        return float("nan")
    labels = np.concatenate([linkage.pair_labels[row] for row in rows])
    if labels.min() == labels.max():
        return float("nan")
    return verification_auc(np.concatenate([linkage.pair_scores[row] for row in rows]), labels, True)


def _balanced_accuracy_or_nan(truth: np.ndarray, prediction: np.ndarray) -> float:
    """Balanced accuracy; NaN when a bootstrap draw holds one class only (its chance would differ)."""
    if len(truth) == 0 or len(np.unique(truth)) < 2:
        return float("nan")
    return balanced_accuracy(truth, prediction)


def _membership_threshold(scores: np.ndarray, members: np.ndarray) -> float:
    """The threshold on ``scores`` (higher = member) maximising balanced accuracy (Youden's J) on shadow data."""
    from sklearn.metrics import roc_curve

    false_positive, true_positive, thresholds = roc_curve(members, scores)
    return float(thresholds[int(np.argmax(true_positive - false_positive))])


def _mean_rows(values: np.ndarray) -> Callable[[np.ndarray], float]:
    return lambda rows: float(np.mean(values[rows])) if len(rows) else float("nan")


class _Audit:
    """One audit's state: inputs, split, instruments, and the per-seed scores it collects."""

    def __init__(self, original: torch.Tensor, patients: np.ndarray, release: _View, reference: _View,
                 sensitive: np.ndarray | None, tasks: dict[str, np.ndarray], masks: np.ndarray | None,
                 settings: AuditSettings, log: Callable[[str], None], memo: NetworkMemo | None = None):
        self.original, self.patients, self.release, self.reference = original, patients, release, reference
        self.sensitive, self.tasks, self.masks, self.settings, self.log = sensitive, tasks, masks, settings, log
        self.paired = bool((release.source >= 0).all())
        self.instruments = _Instruments(settings, original.shape[1], memo)
        self.notes: list[str] = []
        self.members = np.unique(release.patients)
        self._split()

    # -- split ---------------------------------------------------------------------------------------------------
    def _split(self) -> None:
        settings, minimum = self.settings, self.settings.min_patients_per_attacker
        if len(self.members) < 2 * minimum:
            raise ValueError(f"the release covers {len(self.members)} patients; the audit needs at least "
                             f"{2 * minimum} (min_patients_per_attacker = {minimum} on each of the attacker-train "
                             "and attacked sides)")
        table = pd.DataFrame({"patient_id": self.patients,
                              "stratum": np.char.add(np.isin(self.patients, self.members).astype(str),
                                                     "|" if self.sensitive is None else
                                                     np.char.add("|", self.sensitive.astype(str)))})
        side = patient_split(table, (settings.attacker_share, 0.0, 1.0 - settings.attacker_share),
                             stratify="stratum", seed=derive_seed(settings.seed, "attacker-split")).to_numpy()
        self.attacker_patients = np.unique(self.patients[side == "train"])
        self.attacked_patients = np.unique(self.patients[side == "test"])
        for name, group in (("attacker-train", self.attacker_patients), ("attacked", self.attacked_patients)):
            count = int(np.isin(self.members, group).sum())
            if count < minimum:
                raise ValueError(f"the {name} side holds {count} of the release's {len(self.members)} patients, "
                                 f"fewer than min_patients_per_attacker = {minimum}; release more patients or change "
                                 f"attacker_share ({settings.attacker_share})")
        self.withheld = np.array([], dtype=str)
        self.membership_reason = ""
        non_members = np.setdiff1d(np.unique(self.patients), self.members)
        sides = (self.attacker_patients, self.attacked_patients)
        if all(np.isin(non_members, group).sum() >= MIN_MEMBERSHIP_PATIENTS for group in sides):
            return
        if not self.paired:
            self.membership_reason = (f"membership needs at least {MIN_MEMBERSHIP_PATIENTS} original patients outside "
                                      "the release on each side; a synthetic release cannot be thinned")
            return
        rng = np.random.default_rng(derive_seed(settings.seed, "withheld"))
        withheld = []
        for group in sides:
            members = np.intersect1d(group, self.members)
            count = max(MIN_MEMBERSHIP_PATIENTS, int(round(settings.non_member_share * len(members))))
            if len(members) - count < MIN_MEMBERSHIP_PATIENTS:
                self.membership_reason = (f"too few patients to withhold {MIN_MEMBERSHIP_PATIENTS} non-members and "
                                          f"keep {MIN_MEMBERSHIP_PATIENTS} members on each side")
                return
            withheld.extend(rng.choice(members, size=count, replace=False).tolist())
        self.withheld = np.sort(np.asarray(withheld, dtype=str))
        self.notes.append(f"Every original patient is in the release, so the membership attacker does not see the "
                          f"released images of {len(self.withheld)} withheld patients (share "
                          f"{settings.non_member_share} per side), which are its non-members.")

    def _rows(self, view: _View, group: np.ndarray) -> np.ndarray:
        return np.flatnonzero(np.isin(view.patients, group))

    # -- scoring helpers -----------------------------------------------------------------------------------------
    def _seed(self, *parts: Any) -> int:
        return derive_seed(self.settings.seed, *parts)

    def _paired(self, release_metric, original_metric, release_patients, original_patients, chance, tag: str,
                two_sided: bool = False) -> SeedScore:
        return paired_seed_score(release_metric, original_metric, release_patients, original_patients, chance,
                                 resamples=self.settings.bootstrap_resamples, seed=self._seed("bootstrap", tag),
                                 two_sided=two_sided)

    # -- threats -------------------------------------------------------------------------------------------------
    def linkage(self, attacker: int, original_embeddings: np.ndarray) -> dict[str, SeedScore] | str:
        gallery = self._rows_of_originals(self.attacked_patients)
        results = []
        for view in (self.release, self.reference):
            rows = self._rows(view, self.attacked_patients)
            query = embed(self.identity_model, view.images[rows])
            results.append(link_released_images(query, view.patients[rows], view.source[rows],
                                                original_embeddings[gallery], self.patients[gallery], gallery))
        release, reference = results
        self.dropped_queries = release.dropped
        if len(release.hits) == 0 or len(reference.hits) == 0:
            return ("no attacked patient has an original image other than its released image's source (linkage "
                    "needs patients with at least 2 original images)")
        scores = {
            "rank1": self._paired(_mean_rows(release.hits), _mean_rows(reference.hits), release.patients,
                                  reference.patients, lambda rows, _: float(np.mean(release.chance[rows])),
                                  f"rank1-{attacker}"),
            "verification_auc": self._paired(lambda rows: _pooled_auc(release, rows),
                                             lambda rows: _pooled_auc(reference, rows), release.patients,
                                             reference.patients, 0.5, f"auc-{attacker}"),
            "own_closer": self._paired(_mean_rows(release.own_closer), _mean_rows(reference.own_closer),
                                       release.patients, reference.patients, 0.5, f"closer-{attacker}",
                                       two_sided=True),
        }
        return scores

    def _rows_of_originals(self, group: np.ndarray) -> np.ndarray:
        return np.flatnonzero(np.isin(self.patients, group))

    def membership(self, attacker: int, original_embeddings: np.ndarray) -> SeedScore | str:
        if self.membership_reason:
            return self.membership_reason
        members = np.isin(self.patients, np.setdiff1d(self.members, self.withheld)).astype(np.int64)
        shadow = self._rows_of_originals(self.attacker_patients)
        attacked = self._rows_of_originals(self.attacked_patients)
        predictions = []
        for view in (self.release, self.reference):
            visible = np.flatnonzero(~np.isin(view.patients, self.withheld))
            released = embed(self.identity_model, view.images[visible])
            # Higher = member: minus the distance to the closest released image.
            scores = -distance_to_closest_record(original_embeddings, released)["dcr_training"]
            threshold = _membership_threshold(scores[shadow], members[shadow])
            predictions.append((scores[attacked] >= threshold).astype(np.int64))
        truth = members[attacked]
        return self._paired(lambda rows: _balanced_accuracy_or_nan(truth[rows], predictions[0][rows]),
                            lambda rows: _balanced_accuracy_or_nan(truth[rows], predictions[1][rows]),
                            self.patients[attacked], self.patients[attacked], 0.5, f"membership-{attacker}")

    def attribute(self, attacker: int) -> dict[str, SeedScore] | str:
        classes = int(self.sensitive.max()) + 1
        train_rows = self._rows_of_originals(self.attacker_patients)
        if len(np.unique(self.sensitive[train_rows])) < 2:
            return "the attacker-train side's original images hold one attribute class only"
        seed = self._seed("attribute", attacker)
        transfer = self.instruments.classifier(self.original[train_rows], self.sensitive[train_rows], classes, seed)
        predictions, truths, patients = {}, [], []
        for name, view in (("release", self.release), ("reference", self.reference)):
            adaptive_rows = self._rows(view, self.attacker_patients)
            if len(np.unique(view.sensitive[adaptive_rows])) < 2:
                return f"the attacker-train side's {name} images hold one attribute class only"
            adaptive = self.instruments.classifier(view.images[adaptive_rows], view.sensitive[adaptive_rows],
                                                   classes, seed)
            rows = self._rows(view, self.attacked_patients)
            predictions[name] = {"transfer": predict_proba(transfer, view.images[rows]).argmax(axis=1),
                                 "adaptive": predict_proba(adaptive, view.images[rows]).argmax(axis=1)}
            truths.append(view.sensitive[rows])
            patients.append(view.patients[rows])

        def chance(release_rows: np.ndarray, _) -> float:
            present = np.unique(truths[0][release_rows])
            return 1.0 / len(present) if len(present) else float("nan")

        return {kind: self._paired(
            lambda rows, kind=kind: _balanced_accuracy_or_nan(truths[0][rows], predictions["release"][kind][rows]),
            lambda rows, kind=kind: _balanced_accuracy_or_nan(truths[1][rows], predictions["reference"][kind][rows]),
            patients[0], patients[1], chance, f"attribute-{kind}-{attacker}") for kind in ("transfer", "adaptive")}

    def task(self, name: str, attacker: int) -> dict[str, SeedScore] | str:
        labels = self.tasks[name]
        multilabel = labels.ndim == 2
        train_rows = self._rows_of_originals(self.attacker_patients)
        test_rows = self._rows_of_originals(self.attacked_patients)
        seed = self._seed("task", name, attacker)
        classes = 0 if multilabel else int(labels.max()) + 1

        def train(images: torch.Tensor, targets: np.ndarray) -> torch.nn.Module | None:
            if multilabel:
                return self.instruments.multilabel(images, targets, seed)
            if len(np.unique(targets)) < 2:
                return None
            return self.instruments.classifier(images, targets, classes, seed)

        def predict(model: torch.nn.Module, images: torch.Tensor) -> np.ndarray:
            return predict_multilabel(model, images) if multilabel else predict_proba(model, images).argmax(axis=1)

        def metric(truth: np.ndarray, prediction: np.ndarray) -> float:
            if len(truth) == 0:
                return float("nan")
            if multilabel:
                return macro_auroc(truth, prediction)
            return quadratic_weighted_kappa(truth, prediction, num_classes=classes)

        on_originals = train(self.original[train_rows], labels[train_rows])
        if on_originals is None:
            return f"the attacker-train side's original images hold one {name} class only"
        transfer, trained, patients, truths = {}, {}, [], []
        for view_name, view in (("release", self.release), ("reference", self.reference)):
            rows = self._rows(view, self.attacked_patients)
            transfer[view_name] = predict(on_originals, view.images[rows])
            truths.append(view.tasks[name][rows])
            patients.append(view.patients[rows])
            fit_rows = self._rows(view, self.attacker_patients)
            on_view = train(view.images[fit_rows], view.tasks[name][fit_rows])
            if on_view is None:
                return f"the attacker-train side's {view_name} images hold one {name} class only"
            trained[view_name] = predict(on_view, self.original[test_rows])
        chance = 0.5 if multilabel else 0.0
        test_truth, test_patients = labels[test_rows], self.patients[test_rows]
        return {
            "transfer": self._paired(lambda rows: metric(truths[0][rows], transfer["release"][rows]),
                                     lambda rows: metric(truths[1][rows], transfer["reference"][rows]),
                                     patients[0], patients[1], chance, f"task-{name}-transfer-{attacker}"),
            "trained_on_release": self._paired(lambda rows: metric(test_truth[rows], trained["release"][rows]),
                                               lambda rows: metric(test_truth[rows], trained["reference"][rows]),
                                               test_patients, test_patients, chance,
                                               f"task-{name}-trained-{attacker}"),
        }

    def _strangers(self) -> np.ndarray:
        """For each released row, an original image of another patient (seeded): the chance pairing."""
        rng = np.random.default_rng(self._seed("strangers"))
        choices = np.full(len(self.release.patients), -1, dtype=np.int64)
        open_rows = np.arange(len(choices))
        # Redraw the rows that drew their own patient (the audit has at least 4 patients, so this ends fast).
        for _ in range(1000):
            if len(open_rows) == 0:
                break
            drawn = rng.integers(0, len(self.patients), len(open_rows))
            done = self.patients[drawn] != self.release.patients[open_rows]
            choices[open_rows[done]] = drawn[done]
            open_rows = open_rows[~done]
        return choices

    def fidelity(self) -> dict[str, SeedScore]:
        strangers = self._strangers()
        source, patients = self.release.source, self.release.patients
        released, sources = self.release.images, self.original[source]
        others = self.original[np.maximum(strangers, 0)]
        scores = {}
        for name, function, best in (("psnr", psnr, float("inf")), ("ssim", ssim, 1.0)):
            values = function(released, sources, reduction="none").double().numpy()
            chance_values = function(released, others, reduction="none").double().numpy()
            chance_values[strangers < 0] = np.nan
            # PSNR is infinite for an image equal to its source; its bootstrap spread is then undefined (NaN).
            with np.errstate(invalid="ignore"):
                scores[name] = self._paired(
                    _mean_rows(values), lambda rows, best=best: best if len(rows) else float("nan"), patients,
                    patients, lambda rows, _, chance_values=chance_values: float(np.nanmean(chance_values[rows])),
                    f"fidelity-{name}")
        return scores

    def segmentation(self, attacker: int) -> SeedScore:
        train_rows = self._rows_of_originals(self.attacker_patients)
        model = self.instruments.segmenter(self.original[train_rows], self.masks[train_rows],
                                           self._seed("segmenter", attacker))
        rows = self._rows(self.release, self.attacked_patients)
        source = self.release.source[rows]
        strangers = self._strangers()[rows]
        truth = self.masks[source]
        dice = {}
        for name, view in (("release", self.release), ("reference", self.reference)):
            predicted = segment(model, view.images[rows]) > 0.5
            dice[name] = np.array([dice_score(p, t) for p, t in zip(predicted, truth)])
        chance = np.array([dice_score(self.masks[s], t) if s >= 0 else np.nan for s, t in zip(strangers, truth)])
        patients = self.release.patients[rows]
        return self._paired(_mean_rows(dice["release"]), _mean_rows(dice["reference"]), patients, patients,
                            lambda release_rows, _: float(np.nanmean(chance[release_rows])), f"dice-{attacker}")

    # -- the whole suite -----------------------------------------------------------------------------------------
    def run(self, sensitive_name: str | None) -> AuditReport:
        settings = self.settings
        per_seed: dict[tuple[str, str, str], list[SeedScore]] = {}
        reasons: dict[tuple[str, str], str] = {}

        def collect(section: str, group: str, result: dict[str, SeedScore] | SeedScore | str, names) -> None:
            if isinstance(result, str):
                reasons[(section, group)] = result
                return
            items = result.items() if isinstance(result, dict) else [(names[0], result)]
            for name, score in items:
                per_seed.setdefault((section, group, name), []).append(score)

        attacker_rows = self._rows_of_originals(self.attacker_patients)
        self.dropped_queries = 0
        for attacker in range(settings.attacker_seeds):
            self.log(f"audit: attacker seed {attacker + 1}/{settings.attacker_seeds}: identity embedding")
            self.identity_model = self.instruments.identity(self.original[attacker_rows],
                                                            self.patients[attacker_rows],
                                                            self._seed("identity", attacker))
            original_embeddings = embed(self.identity_model, self.original)
            collect("threats", "linkage", self.linkage(attacker, original_embeddings), None)
            collect("threats", "membership", self.membership(attacker, original_embeddings), ["balanced_accuracy"])
            if self.sensitive is not None:
                self.log("audit: attribute attackers")
                collect("threats", "attribute", self.attribute(attacker), None)
            for name in self.tasks:
                self.log(f"audit: task models for {name}")
                collect("utility", name, self.task(name, attacker), None)
            if self.paired and self.masks is not None:
                self.log("audit: segmenter")
                collect("utility", "segmentation", self.segmentation(attacker), ["dice"])
        if self.paired:
            collect("utility", "image_fidelity", self.fidelity(), None)

        def meaning(group: str, name: str) -> tuple[str, str]:
            if group == "linkage":
                return {"rank1": "rank-1", "verification_auc": "verification AUC",
                        "own_closer": "own-closer share"}[name], MEANINGS[name]
            if group == "membership":
                return "balanced accuracy", MEANINGS["membership"]
            if group == "attribute":
                return f"{sensitive_name} balanced accuracy", MEANINGS[f"attribute_{name}"]
            if group == "image_fidelity":
                return name.upper(), MEANINGS[name]
            if group == "segmentation":
                return "Dice", MEANINGS["dice"]
            kind = "findings" if self.tasks[group].ndim == 2 else "grade"
            return ("macro AUROC" if kind == "findings" else "QWK"), MEANINGS[f"{kind}_{name}"]

        expected = {"linkage": ("rank1", "verification_auc", "own_closer"), "membership": ("balanced_accuracy",),
                    "attribute": ("transfer", "adaptive")}
        threats: dict[str, dict[str, Score]] = {"linkage": {}, "attribute": {}, "membership": {}}
        utility: dict[str, dict[str, Score]] = {}
        for (section, group), reason in reasons.items():
            target = (threats if section == "threats" else utility).setdefault(group, {})
            for name in expected.get(group, ("transfer", "trained_on_release")):
                target[name] = Score(*meaning(group, name), reason=reason)
        for (section, group, name), scores in per_seed.items():
            target = (threats if section == "threats" else utility).setdefault(group, {})
            target[name] = combine(scores, *meaning(group, name), two_sided=name == "own_closer")
        if self.sensitive is None:
            for name in expected["attribute"]:
                threats["attribute"][name] = Score(*meaning("attribute", name), reason="no sensitive attribute given")
        if self.dropped_queries:
            self.notes.append(f"{self.dropped_queries} attacked released images were not linkage queries: their "
                              "patient has no other original image in the gallery.")
        if not self.paired:
            self.notes.append("The release is not paired with source images: no PSNR, SSIM or segmentation Dice.")
        counts = {"original_images": int(len(self.patients)), "original_patients": int(len(np.unique(self.patients))),
                  "released_images": int(len(self.release.patients)), "released_patients": int(len(self.members)),
                  "attacker_train_patients": int(len(self.attacker_patients)),
                  "attacked_patients": int(len(self.attacked_patients)),
                  "attacked_released_images": int(len(self._rows(self.release, self.attacked_patients))),
                  "withheld_patients": int(len(self.withheld)),
                  "linkage_queries_without_other_image": int(self.dropped_queries)}
        return AuditReport(threats=threats, utility=utility, counts=counts, notes=self.notes,
                           sensitive_name=sensitive_name if self.sensitive is not None else None, settings=settings)


def audit_release(original: Any, released: Any, patients: Any, *, source: Any = None, released_patients: Any = None,
                  sensitive: Any = None, sensitive_name: str = "sex", tasks: dict[str, Any] | None = None,
                  released_sensitive: Any = None, released_tasks: dict[str, Any] | None = None, masks: Any = None,
                  settings: AuditSettings | None = None, log: Callable[[str], None] | None = None,
                  networks: NetworkMemo | None = None) -> AuditReport:
    """Run the audit suite (module docstring) on one release.

    Args:
        original: (N, C, H, W) float original images in [0, 1] (numpy or torch).
        released: (M, C, H, W) float released images in [0, 1], same (C, H, W).
        patients: (N,) patient id of each original image (no missing ids).
        source: (M,) index into ``original`` of each released image's source; None for a synthetic release.
        released_patients: (M,) patient behind each released image; required without ``source`` (then each must
            have original images), checked against the sources' patients with it.
        sensitive: (N,) sensitive attribute of each original image as classes 0..K-1 (e.g. sex 0 = F, 1 = M);
            None skips attribute inference.
        sensitive_name: Its name in the report.
        tasks: Task labels of the original images by task name: (N,) integer grades (QWK, e.g. DR grade) or
            (N, K >= 2) 0/1 multi-label findings (macro AUROC).
        released_sensitive: (M,) attribute of each released image; only for a synthetic release (a paired one
            inherits its sources').
        released_tasks: Task labels of each released image; only for a synthetic release.
        masks: (N, H, W) binary masks of the originals (e.g. vessels) for segmentation Dice; only for a paired,
            pixel-aligned release.
        settings: :class:`AuditSettings` (default: smoke-sized).
        log: Called with one line per stage; None is silent.
        networks: A :class:`NetworkMemo` shared with other audits of the same originals, so the networks that learn
            only from the originals train once (the report is the same with or without it); None keeps them to this
            audit.

    Returns:
        :class:`AuditReport`.

    Raises:
        ValueError: Bad shapes, dtypes or ranges; missing patient ids; labels that do not fit; a release covering
            fewer than ``2 * settings.min_patients_per_attacker`` patients, or a split leaving a side with fewer
            than ``settings.min_patients_per_attacker`` of them.
    """
    settings = settings or AuditSettings()
    if not isinstance(settings, AuditSettings):
        raise ValueError(f"settings must be an AuditSettings, got {type(settings).__name__}")
    images, patient_ids, release, reference, sensitive_labels, mask_array, task_labels = _prepare(
        original, released, patients, source, released_patients, sensitive, tasks, released_sensitive,
        released_tasks, masks)
    if networks is not None and not isinstance(networks, NetworkMemo):
        raise ValueError(f"networks must be a NetworkMemo, got {type(networks).__name__}")
    audit = _Audit(images, patient_ids, release, reference, sensitive_labels, task_labels, mask_array, settings,
                   log or (lambda line: None), networks)
    return audit.run(sensitive_name)
