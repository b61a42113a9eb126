"""Paper 2 ("De-identification and Obfuscation of Gender Attributes From Retinal Scans"): Snow vs VS-Snow.

The pipeline behind ``notebooks/01_snow_vs_snow.ipynb``:

1. Load a fundus cohort into per-split arrays (:func:`load_arrays`): uint8 images, sex (0 = F, 1 = M),
   DR in 3 classes (0 healthy, 1 NPDR, 2 PDR), ground-truth vessel masks where the cohort has them.
2. Train a vessel segmenter on the training split's vessel masks (FR-UNet-style by default; the paper uses a
   modified FR-UNet) and segment every image with FR-UNet's dual threshold (:func:`train_vessel_segmenter`,
   :func:`predict_vessels`). VS-Snow obfuscates the *predicted* vessels, as in the paper.
3. Obfuscate every split with Snow (whole image, dataset channel means) and VS-Snow (vessel pixels, mean of kept
   neighbouring vessel pixels) at each p (:func:`obfuscate`).
4. The attacker (sex, cross-entropy) trains on original images and is tested on original, Snow and VS-Snow test
   images. A DR classifier (class-weighted focal loss, gamma 0.6) trains and tests on each version. Every network
   is cached with :class:`anonpaper.cache.ArtifactCache`, keyed by the cohort's content, the training
   configuration and the seed.
5. Scores with patient-clustered bootstrap standard errors (:func:`patient_bootstrap_se`), the paper's Tables 1-2
   side by side with ours (:func:`paper_vs_ours_table`), the privacy-utility comparison at matched attacker
   accuracy (:func:`matched_privacy_gain`), vessel saliency enrichment (:func:`saliency_vessel_enrichment`) and
   the chapter's claims computed from the numbers (:func:`evaluate_claims`).

Metrics: attacker accuracy (lower = more private; chance is the test set's majority-class rate) and DR macro-F1
(higher = more utility). The paper says only "F1 ... accounting for data imbalance"; we use macro-F1.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch
from torch import nn

from anonpaper.data.cohort import Cohort, dr_grade_to_3class
from anonpaper.methods.snow import channel_mean, snow, vs_snow
from anonpaper.metrics.classification import accuracy, macro_f1
from anonpaper.models.classifiers import build_classifier, gradient_saliency
from anonpaper.cache import ArtifactCache
from anonpaper.runtime import content_hash, get_device
from anonpaper.train.augment import paper2_augmentation
from anonpaper.train.classifier import predict_proba, train_classifier
from anonpaper.train.loop import as_image_tensor
from anonpaper.metrics.segmentation import dice_score
from anonpaper.train.segmenter import dual_threshold, segment, train_segmenter

SPLITS = ("train", "val", "test")
METHODS = ("snow", "vs_snow")
METHOD_LABELS = {"original": "Original", "snow": "Snow", "vs_snow": "VS-Snow"}
TASK_METRIC = {"sex": "accuracy", "dr": "macro_f1"}

# The paper's Table 1 (Snow) and Table 2 (VS-Snow), transcribed from the paper text
# (papers/snow_vs_snow_gender_obfuscation.txt, section 3). Values in percent at p = 0 (original), 0.1, 0.3, 0.5.
# "sex_accuracy": attacker (sex classifier trained on original images) accuracy; "dr_f1": F1 of the DR classifier
# trained and tested on each version. The "Original" column is shared by both tables.
PAPER_P_VALUES = (0.0, 0.1, 0.3, 0.5)
PAPER_TABLES: dict[str, dict[str, dict[str, tuple[float, ...]]]] = {
    "snow": {
        "BRSET": {"sex_accuracy": (75.12, 64.99, 61.35, 52.15), "dr_f1": (82.6, 72.3, 69.6, 64.5)},
        "Diabetes Center": {"sex_accuracy": (83.33, 57.43, 51.00, 42.59), "dr_f1": (79.5, 65.8, 58.4, 55.9)},
    },
    "vs_snow": {
        "BRSET": {"sex_accuracy": (75.12, 67.7, 60.1, 58.1), "dr_f1": (82.6, 78.1, 75.0, 72.0)},
        "Diabetes Center": {"sex_accuracy": (83.33, 50.7, 47.9, 47.5), "dr_f1": (79.5, 75.9, 73.8, 74.6)},
    },
}


@dataclass(frozen=True)
class SnowVsSnowConfig:
    """Everything that determines the experiment's networks and numbers (besides the cohort).

    Attributes:
        p_values: Obfuscation fractions p (probability a value / vessel pixel is replaced; larger = more private).
        backbone: Classifier name for :func:`anonpaper.models.classifiers.build_classifier` (paper: resnet200d).
        epochs: Maximum classifier epochs (paper: 50, early stopping on validation F1).
        batch_size: Classifier mini-batch size.
        lr: Adam learning rate (paper 1e-4).
        weight_decay: Adam weight decay (paper 1e-5).
        focal_gamma: Focal-loss gamma of the DR classifier (paper 0.6).
        early_stopping_patience: Epochs without a better validation F1 before stopping (None: all epochs).
        augment: Use the paper's augmentation (hflip and shift-scale-rotate, each p = 0.25).
        lr_schedule: ``"constant"`` (paper) or ``"cosine"`` (annealing over ``epochs``; steadier short CPU runs
            from scratch, see :func:`anonpaper.train.classifier.train_classifier`).
        segmenter: ``"frunet"`` (FR-UNet-style, paper) or ``"unet"``.
        segmenter_width: Channels of the segmenter's full-resolution level (FR-UNet: 32; widths double per level).
        segmenter_epochs: Segmenter epochs (FR-UNet: 40).
        segmenter_patch: Square training patch side (FR-UNet: 48; must be a multiple of 8).
        segmenter_patches_per_epoch: Random patches per epoch (None: as many as tile the images once).
        segmenter_lr: Segmenter Adam learning rate (FR-UNet: 1e-4; short CPU schedules need more).
        segmenter_loss: ``"bce"`` (FR-UNet) or ``"bce+dice"`` (converges faster on thin vessels).
        vessel_source: ``"segmenter"`` (paper: VS-Snow uses predicted vessels) or ``"ground_truth"`` (the cohort's
            own vessel masks; an upper bound for VS-Snow's targeting).
        snow_mask_mode: ``"per_channel"`` (paper: each RGB channel draws its own pixels) or ``"per_location"``.
        vs_window: VS-Snow neighbourhood window side (odd, pixels).
        bootstrap: Patient-clustered bootstrap resamples for standard errors.
        min_test_images: Below this many test images the claims are reported as undecided (holds = None).
        seed: Seed of everything (networks, obfuscation draws, bootstrap).
    """

    p_values: tuple[float, ...] = (0.1, 0.3, 0.5)
    backbone: str = "resnet200d"
    epochs: int = 50
    batch_size: int = 16
    lr: float = 1e-4
    weight_decay: float = 1e-5
    focal_gamma: float = 0.6
    early_stopping_patience: int | None = 10
    augment: bool = True
    lr_schedule: str = "constant"
    segmenter: str = "frunet"
    segmenter_width: int = 32
    segmenter_epochs: int = 40
    segmenter_patch: int = 48
    segmenter_patches_per_epoch: int | None = None
    segmenter_lr: float = 1e-4
    segmenter_loss: str = "bce"
    vessel_source: str = "segmenter"
    snow_mask_mode: str = "per_channel"
    vs_window: int = 5
    bootstrap: int = 200
    min_test_images: int = 40
    seed: int = 0

    def __post_init__(self):
        p_values = tuple(float(p) for p in self.p_values)
        if not p_values or any(not 0.0 < p <= 1.0 for p in p_values) or len(set(p_values)) != len(p_values):
            raise ValueError(f"p_values must be distinct numbers in (0, 1], got {self.p_values!r}")
        object.__setattr__(self, "p_values", tuple(sorted(p_values)))
        checks = [
            (isinstance(self.epochs, int) and self.epochs >= 1, f"epochs must be an integer >= 1, got {self.epochs!r}"),
            (isinstance(self.batch_size, int) and self.batch_size >= 2,
             f"batch_size must be an integer >= 2, got {self.batch_size!r}"),
            (self.lr_schedule in ("constant", "cosine"),
             f"lr_schedule must be 'constant' or 'cosine', got {self.lr_schedule!r}"),
            (self.segmenter in ("frunet", "unet"), f"segmenter must be 'frunet' or 'unet', got {self.segmenter!r}"),
            (isinstance(self.segmenter_patch, int) and self.segmenter_patch % 8 == 0 and self.segmenter_patch > 0,
             f"segmenter_patch must be a positive multiple of 8, got {self.segmenter_patch!r}"),
            (self.segmenter_loss in ("bce", "bce+dice"),
             f"segmenter_loss must be 'bce' or 'bce+dice', got {self.segmenter_loss!r}"),
            (self.vessel_source in ("segmenter", "ground_truth"),
             f"vessel_source must be 'segmenter' or 'ground_truth', got {self.vessel_source!r}"),
            (self.snow_mask_mode in ("per_channel", "per_location"),
             f"snow_mask_mode must be 'per_channel' or 'per_location', got {self.snow_mask_mode!r}"),
            (isinstance(self.seed, int) and self.seed >= 0, f"seed must be a non-negative integer, got {self.seed!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    def classifier_description(self) -> dict[str, Any]:
        """The fields that determine a classifier (for cache keys)."""
        names = ("backbone", "epochs", "batch_size", "lr", "weight_decay", "focal_gamma", "early_stopping_patience",
                 "augment", "seed")
        description = {name: getattr(self, name) for name in names}
        if self.lr_schedule != "constant":  # only a new option enters the key: cached constant-rate runs stay valid
            description["lr_schedule"] = self.lr_schedule
        return description

    def segmenter_description(self) -> dict[str, Any]:
        names = ("segmenter", "segmenter_width", "segmenter_epochs", "segmenter_patch", "segmenter_patches_per_epoch",
                 "segmenter_lr", "segmenter_loss", "seed")
        return {name: getattr(self, name) for name in names}


# ---------------------------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class CohortArrays:
    """A fundus cohort as per-split arrays.

    Attributes:
        images: split -> uint8 (N, H, W, 3).
        sex: split -> int64 (N,), 0 = "F", 1 = "M".
        dr: split -> int64 (N,), 0 healthy, 1 NPDR, 2 PDR.
        patients: split -> (N,) patient ids (str), for patient-clustered bootstrap.
        vessels: split -> bool (N, H, W) ground-truth vessel masks, or None when the cohort has none.
        fov: split -> bool (N, H, W) field-of-view masks, or None.
        description: JSON-like description of the cohort's content (for cache keys).
    """

    images: dict[str, np.ndarray]
    sex: dict[str, np.ndarray]
    dr: dict[str, np.ndarray]
    patients: dict[str, np.ndarray]
    vessels: dict[str, np.ndarray] | None
    fov: dict[str, np.ndarray] | None
    description: dict[str, Any]


def _resize(array: np.ndarray, size: int, nearest: bool) -> np.ndarray:
    import cv2

    if array.shape[0] == size and array.shape[1] == size:
        return array
    if nearest:
        return cv2.resize(array.astype(np.uint8), (size, size), interpolation=cv2.INTER_NEAREST).astype(bool)
    return cv2.resize(array, (size, size), interpolation=cv2.INTER_AREA)


def load_arrays(cohort: Cohort, image_size: int | None = None, progress: bool = False) -> CohortArrays:
    """Read a fundus cohort's images, labels and masks into per-split arrays.

    Args:
        cohort: A fundus :class:`~anonpaper.data.cohort.Cohort` with columns ``sex`` and ``dr_3class`` (or
            ``dr_grade``); RGB images.
        image_size: Resize every image (area interpolation) and mask (nearest) to this square side; None keeps
            the cohort's size (all images must then share it).
        progress: Show a progress bar.

    Returns:
        :class:`CohortArrays`.

    Raises:
        ValueError: Missing columns, unknown sex values, grayscale images, or an empty split.
    """
    table = cohort.table
    if "sex" not in table.columns:
        raise ValueError(f"cohort {cohort.name!r}: the Snow/VS-Snow experiment needs a 'sex' column")
    if "dr_3class" not in table.columns and "dr_grade" not in table.columns:
        raise ValueError(f"cohort {cohort.name!r}: needs a 'dr_3class' or 'dr_grade' column")
    keep = table["sex"].isin(["F", "M"]).to_numpy().copy()
    dr_column = table["dr_3class"] if "dr_3class" in table.columns else None
    if dr_column is None:
        keep &= table["dr_grade"].notna().to_numpy()
    else:
        keep &= dr_column.notna().to_numpy()
    has_vessels = "vessel" in cohort.mask_names
    has_fov = "fov" in cohort.mask_names
    indices = np.flatnonzero(keep)
    iterator = indices
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(indices, desc=f"loading {cohort.name}", leave=False)
    images, vessels, fovs = [], [], []
    for index in iterator:
        image = cohort.image(int(index))
        if image.ndim != 3 or image.shape[2] != 3:
            raise ValueError(f"cohort {cohort.name!r}: row {index} is not an RGB (H, W, 3) image: {image.shape}")
        masks = cohort.masks(int(index)) if (has_vessels or has_fov) else {}
        if image_size is not None:
            image = _resize(image, image_size, nearest=False)
        images.append(image)
        if has_vessels:
            vessels.append(_resize(masks["vessel"], image_size, True) if image_size else masks["vessel"])
        if has_fov:
            fovs.append(_resize(masks["fov"], image_size, True) if image_size else masks["fov"])
    shapes = {image.shape for image in images}
    if len(shapes) != 1:
        raise ValueError(f"cohort {cohort.name!r}: images differ in size {sorted(shapes)[:3]}; pass image_size")
    all_images = np.stack(images)
    rows = table.iloc[indices].reset_index(drop=True)
    sex = (rows["sex"] == "M").to_numpy().astype(np.int64)
    dr = (rows["dr_3class"].to_numpy() if "dr_3class" in rows.columns
          else dr_grade_to_3class(rows["dr_grade"].to_numpy())).astype(np.int64)
    split = rows["split"].to_numpy()
    arrays = CohortArrays(images={}, sex={}, dr={}, patients={}, vessels={} if has_vessels else None,
                          fov={} if has_fov else None, description={})
    for name in SPLITS:
        selected = split == name
        if not selected.any():
            raise ValueError(f"cohort {cohort.name!r}: split {name!r} has no usable images")
        arrays.images[name] = all_images[selected]
        arrays.sex[name] = sex[selected]
        arrays.dr[name] = dr[selected]
        arrays.patients[name] = rows["patient_id"].astype(str).to_numpy()[selected]
        if has_vessels:
            arrays.vessels[name] = np.stack(vessels)[selected]
        if has_fov:
            arrays.fov[name] = np.stack(fovs)[selected]
    arrays.description = {
        "dataset": cohort.name, "images": int(len(all_images)), "shape": list(all_images.shape[1:]),
        "content": content_hash(all_images, sex, dr, split.astype(str),
                                rows["patient_id"].astype(str).to_numpy().astype(str)),
    }
    return arrays


def split_summary(arrays: CohortArrays) -> pd.DataFrame:
    """Images, patients, female share and DR class counts per split (one row per split)."""
    rows = []
    for name in SPLITS:
        dr_counts = np.bincount(arrays.dr[name], minlength=3)
        rows.append({"split": name, "images": len(arrays.images[name]),
                     "patients": len(np.unique(arrays.patients[name])),
                     "female_share": float(np.mean(arrays.sex[name] == 0)),
                     "healthy": int(dr_counts[0]), "NPDR": int(dr_counts[1]), "PDR": int(dr_counts[2])})
    return pd.DataFrame(rows).set_index("split")


def derived_seed(seed: int, *parts: Any) -> int:
    """A stable 63-bit seed from ``seed`` and a description (method, p, split...)."""
    return int(content_hash({"seed": int(seed), "parts": list(parts)}), 16) % (2**63 - 1)


# ---------------------------------------------------------------------------------------------------------------
# vessel segmentation
# ---------------------------------------------------------------------------------------------------------------
def build_segmenter(config: SnowVsSnowConfig) -> nn.Module:
    """A randomly initialised vessel segmenter (RGB in, one logit out) as ``config`` describes."""
    torch.manual_seed(derived_seed(config.seed, "segmenter-init"))
    width = config.segmenter_width
    if config.segmenter == "frunet":
        from anonpaper.models.frunet import FRUNet

        return FRUNet(3, 1, widths=(width, 2 * width, 4 * width, 8 * width))
    from anonpaper.models.unet import UNet

    return UNet(3, 1, base_width=width, depth=3)


def train_vessel_segmenter(arrays: CohortArrays, config: SnowVsSnowConfig, device: torch.device | None = None,
                           progress: bool = False, cache: ArtifactCache | None = None) -> tuple[nn.Module, dict]:
    """Train (or load from the cache) the vessel segmenter on the training split's ground-truth vessel masks.

    Returns:
        (model taking images in [0, 1], info) with info ``{"cached": bool, "best_epoch": int, "seconds": float,
        "history": DataFrame}``.

    Raises:
        ValueError: When the cohort has no vessel masks.
    """
    if arrays.vessels is None:
        raise ValueError("the cohort has no 'vessel' masks to train a segmenter on (VS-Snow needs one)")
    cache = cache or ArtifactCache("snow-vessel-segmenter")
    description = {"cohort": arrays.description, "training": config.segmenter_description()}
    cached = cache.exists(description)

    def build() -> dict:
        started = time.perf_counter()
        result = train_segmenter(build_segmenter(config), arrays.images["train"], arrays.vessels["train"],
                                 epochs=config.segmenter_epochs,
                                 patch_size=min(config.segmenter_patch, arrays.images["train"].shape[1]),
                                 patches_per_epoch=config.segmenter_patches_per_epoch, batch_size=16,
                                 lr=config.segmenter_lr, loss=config.segmenter_loss,
                                 val=(arrays.images["val"], arrays.vessels["val"]), seed=config.seed, device=device,
                                 progress=progress)
        return {"model": result.model.cpu(), "history": result.history, "best_epoch": result.best_epoch,
                "seconds": time.perf_counter() - started}

    artifact = cache.get_or_create(description, build)
    return artifact["model"], {"cached": cached, "best_epoch": artifact["best_epoch"],
                               "seconds": artifact["seconds"], "history": artifact["history"]}


def predict_vessels(model: nn.Module, images: np.ndarray, device: torch.device | None = None) -> np.ndarray:
    """Vessel masks: bool (N, H, W) from FR-UNet's dual threshold (0.5 seeds, 0.3 grown) of the probabilities."""
    probability = segment(model, images, batch_size=8, device=device)
    return dual_threshold(probability, high=0.5, low=0.3)


# ---------------------------------------------------------------------------------------------------------------
# obfuscation
# ---------------------------------------------------------------------------------------------------------------
def obfuscate(images: np.ndarray, method: str, replace_fraction: float, *, seed: int,
              channel_means: np.ndarray | torch.Tensor | None = None, vessel_masks: np.ndarray | None = None,
              mask_mode: str = "per_channel", window_size: int = 5, chunk: int = 256) -> np.ndarray:
    """Apply Snow or VS-Snow to a stack of images.

    Args:
        images: uint8 (N, H, W, 3). Not modified.
        method: ``"snow"``, ``"vs_snow"`` or ``"original"`` (returns a copy).
        replace_fraction: p in [0, 1] (larger = more private).
        seed: Seed of the random selection (each chunk draws from a seed derived from ``seed`` and its first
            index, so results are reproducible for a fixed ``chunk``).
        channel_means: Snow's dataset per-channel means (3,), 0-255 units.
        vessel_masks: VS-Snow's bool (N, H, W) vessel masks.
        mask_mode: Snow's ``"per_channel"`` (paper) or ``"per_location"``.
        window_size: VS-Snow's neighbourhood window.
        chunk: Images per call (bounds memory).

    Returns:
        uint8 (N, H, W, 3).
    """
    if not isinstance(images, np.ndarray) or images.dtype != np.uint8 or images.ndim != 4 or images.shape[3] != 3:
        raise ValueError(f"images must be uint8 (N, H, W, 3), got {getattr(images, 'dtype', type(images))} "
                         f"{getattr(images, 'shape', '')}")
    if method == "original":
        return images.copy()
    if method not in METHODS:
        raise ValueError(f"method must be 'original', 'snow' or 'vs_snow', got {method!r}")
    if method == "snow" and channel_means is None:
        raise ValueError("Snow needs channel_means (the dataset's per-channel mean)")
    if method == "vs_snow":
        if vessel_masks is None or vessel_masks.shape != images.shape[:3]:
            raise ValueError(f"VS-Snow needs vessel_masks of shape {images.shape[:3]}, got "
                             f"{None if vessel_masks is None else vessel_masks.shape}")
    output = np.empty_like(images)
    for start in range(0, len(images), chunk):
        batch = torch.from_numpy(np.ascontiguousarray(images[start:start + chunk].transpose(0, 3, 1, 2)))
        chunk_seed = derived_seed(seed, "chunk", start)
        if method == "snow":
            result = snow(batch, replace_fraction, channel_means, mask_mode=mask_mode, seed=chunk_seed)
        else:
            masks = torch.from_numpy(np.ascontiguousarray(vessel_masks[start:start + chunk]))
            result = vs_snow(batch, masks, replace_fraction, window_size=window_size, seed=chunk_seed)
        output[start:start + chunk] = result.numpy().transpose(0, 2, 3, 1)
    return output


# ---------------------------------------------------------------------------------------------------------------
# classifiers
# ---------------------------------------------------------------------------------------------------------------
def train_task_classifier(task: str, train: tuple[np.ndarray, np.ndarray], val: tuple[np.ndarray, np.ndarray],
                          config: SnowVsSnowConfig, description: dict[str, Any],
                          device: torch.device | None = None, progress: bool = False,
                          cache: ArtifactCache | None = None) -> tuple[nn.Module, dict]:
    """Train (or load) the sex attacker (``task="sex"``: 2 classes, cross-entropy, unweighted as in the paper) or
    the DR classifier (``task="dr"``: 3 classes, class-weighted focal loss with ``config.focal_gamma``).

    Args:
        task: ``"sex"`` or ``"dr"``.
        train: (uint8 images (N, H, W, 3), int labels (N,)).
        val: The same for validation (model selection on macro-F1).
        config: Experiment configuration.
        description: What the training data is (cohort, method, p), for the cache key.
        device: Training device (None: CUDA when available).
        progress: Show progress bars.
        cache: Cache namespace (default ``ArtifactCache("snow-classifiers")``).

    Returns:
        (model taking images in [0, 1], info with ``cached``, ``best_epoch``, ``seconds``, ``history``).
    """
    if task not in TASK_METRIC:
        raise ValueError(f"task must be 'sex' or 'dr', got {task!r}")
    cache = cache or ArtifactCache("snow-classifiers")
    key = {"task": task, "data": description, "training": config.classifier_description()}
    cached = cache.exists(key)

    def build() -> dict:
        started = time.perf_counter()
        torch.manual_seed(derived_seed(config.seed, "classifier-init", task, description))
        model = build_classifier(config.backbone, 3, 2 if task == "sex" else 3)
        result = train_classifier(model, train, val, epochs=config.epochs, batch_size=config.batch_size,
                                  lr=config.lr, weight_decay=config.weight_decay,
                                  loss="ce" if task == "sex" else "focal", focal_gamma=config.focal_gamma,
                                  class_weights=None if task == "sex" else "balanced",
                                  augment=paper2_augmentation() if config.augment else None,
                                  lr_schedule=config.lr_schedule,
                                  early_stopping_patience=config.early_stopping_patience,
                                  seed=derived_seed(config.seed, "train", task, description), device=device,
                                  progress=progress)
        return {"model": result.model.cpu(), "history": result.history, "best_epoch": result.best_epoch,
                "seconds": time.perf_counter() - started}

    artifact = cache.get_or_create(key, build)
    return artifact["model"], {"cached": cached, "best_epoch": artifact["best_epoch"],
                               "seconds": artifact["seconds"], "history": artifact["history"]}


def patient_bootstrap_se(truth: np.ndarray, prediction: np.ndarray, patients: np.ndarray,
                         metric: Callable[[np.ndarray, np.ndarray], float], resamples: int, seed: int) -> float:
    """Standard error of ``metric(truth, prediction)`` by resampling whole patients with replacement.

    Several images of one patient are correlated; resampling patients keeps that in the error bar.

    Returns:
        The standard deviation of the metric over ``resamples`` bootstrap test sets (NaN if resamples < 2).
    """
    if resamples < 2:
        return float("nan")
    unique, inverse = np.unique(patients, return_inverse=True)
    members = [np.flatnonzero(inverse == index) for index in range(len(unique))]
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(resamples):
        chosen = rng.integers(0, len(unique), len(unique))
        rows = np.concatenate([members[index] for index in chosen])
        values.append(metric(truth[rows], prediction[rows]))
    return float(np.std(values, ddof=1))


def _metric_function(task: str) -> Callable[[np.ndarray, np.ndarray], float]:
    if task == "sex":
        return accuracy

    def dr_f1(truth, prediction):
        # Macro-F1 over the three DR classes, whatever classes a (bootstrap) test set happens to contain.
        from sklearn.metrics import f1_score

        return float(f1_score(truth, prediction, labels=[0, 1, 2], average="macro", zero_division=0))

    return dr_f1


def score(model: nn.Module, images: np.ndarray, labels: np.ndarray, patients: np.ndarray, task: str,
          config: SnowVsSnowConfig, device: torch.device | None = None) -> dict[str, Any]:
    """Evaluate a classifier: ``{"value", "se", "n_test", "predictions"}`` (accuracy for sex, macro-F1 for DR)."""
    probabilities = predict_proba(model, images, batch_size=64, device=device)
    prediction = probabilities.argmax(axis=1)
    metric = _metric_function(task)
    return {"value": metric(labels, prediction), "n_test": int(len(labels)), "predictions": prediction,
            "se": patient_bootstrap_se(labels, prediction, patients, metric, config.bootstrap,
                                       derived_seed(config.seed, "bootstrap", task))}


# ---------------------------------------------------------------------------------------------------------------
# the whole experiment
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class SnowVsSnowOutcome:
    """What :func:`run_experiment` returns.

    Attributes:
        scores: One row per (method, p, task): ``method`` ("original", "snow", "vs_snow"), ``p`` (0 for original),
            ``task`` ("sex", "dr"), ``metric`` ("accuracy", "macro_f1"), ``value`` (fraction in [0, 1]), ``se``
            (patient-bootstrap standard error), ``n_test``.
        chance: Majority-class rate of sex in the test set (the accuracy of always guessing the larger sex).
        segmenter: ``{"source", "test_dice", "vessel_fraction", "cached", "seconds"}`` (dice NaN without ground truth).
        attacker: The sex classifier (trained on original images).
        dr_models: ``(method, p) -> DR classifier`` (``("original", 0.0)`` included).
        training: One row per trained network: name, cached, best_epoch, seconds.
        examples: Label -> uint8 (H, W, 3) image: one test image in every version, plus ``"vessels"`` (bool).
        saliency: ``{"images", "sex_maps", "dr_maps", "vessels", "sex_enrichment", "dr_enrichment"}`` on test
            images (maps float (K, H, W) in [0, 1]; enrichments per image).
        channel_means: Snow's per-channel means (3,), 0-255.
        config: The configuration.
        seconds: Wall-clock seconds of the run.
    """

    scores: pd.DataFrame
    chance: float
    segmenter: dict[str, Any]
    attacker: nn.Module
    dr_models: dict[tuple[str, float], nn.Module]
    training: pd.DataFrame
    examples: dict[str, np.ndarray]
    saliency: dict[str, Any]
    channel_means: np.ndarray
    config: SnowVsSnowConfig
    seconds: float = 0.0
    histories: dict[str, pd.DataFrame] = field(default_factory=dict)


def run_experiment(arrays: CohortArrays, config: SnowVsSnowConfig, device: torch.device | str | None = None,
                   progress: bool = False, log: Callable[[str], None] = print,
                   saliency_images: int = 32) -> SnowVsSnowOutcome:
    """Run paper 2's experiment on ``arrays`` (see the module docstring for the steps).

    Args:
        arrays: The cohort (:func:`load_arrays`).
        config: Experiment configuration.
        device: Training device (None: CUDA when available, else CPU).
        progress: Show training progress bars.
        log: Where one-line progress messages go.
        saliency_images: Test images used for the saliency enrichment statistic (and the first 3 for figures).

    Returns:
        :class:`SnowVsSnowOutcome`.
    """
    started = time.perf_counter()
    device = get_device(device) if not isinstance(device, torch.device) else device
    training_rows: list[dict[str, Any]] = []
    histories: dict[str, pd.DataFrame] = {}

    # Vessel masks for VS-Snow: predicted by the segmenter (paper) or the cohort's ground truth.
    segmenter_info: dict[str, Any] = {"source": config.vessel_source, "test_dice": float("nan")}
    if config.vessel_source == "segmenter":
        segmenter, info = train_vessel_segmenter(arrays, config, device=device, progress=progress)
        training_rows.append({"network": "vessel segmenter", "cached": info["cached"],
                              "best_epoch": info["best_epoch"], "seconds": info["seconds"]})
        histories["vessel segmenter"] = info["history"]
        vessels = {name: predict_vessels(segmenter, arrays.images[name], device=device) for name in SPLITS}
        segmenter_info.update(cached=info["cached"], seconds=info["seconds"])
        if arrays.vessels is not None:
            segmenter_info["test_dice"] = dice_score(vessels["test"], arrays.vessels["test"])
        how = "cached" if info["cached"] else f"trained in {info['seconds']:.0f} s"
        log(f"vessel segmenter: test Dice {segmenter_info['test_dice']:.3f} ({how})")
    else:
        if arrays.vessels is None:
            raise ValueError("vessel_source='ground_truth' needs a cohort with vessel masks")
        vessels = arrays.vessels
    segmenter_info["vessel_fraction"] = float(np.mean(vessels["test"]))

    # Snow's constants: the per-channel mean of all images of the dataset (paper: "of all images in the given
    # dataset").
    means = channel_mean((arrays.images[name] for name in SPLITS), channels_last=True).numpy()

    def version(method: str, p: float, split: str) -> np.ndarray:
        return obfuscate(arrays.images[split], method, p, seed=derived_seed(config.seed, method, p, split),
                         channel_means=means, vessel_masks=vessels[split], mask_mode=config.snow_mask_mode,
                         window_size=config.vs_window)

    rows: list[dict[str, Any]] = []
    test = arrays.images["test"]

    def record(method: str, p: float, task: str, result: dict[str, Any]) -> None:
        rows.append({"method": method, "p": p, "task": task, "metric": TASK_METRIC[task], "value": result["value"],
                     "se": result["se"], "n_test": result["n_test"]})

    # The attacker: trained on original images with sex labels; tested on every version of the test set.
    attacker, info = train_task_classifier(
        "sex", (arrays.images["train"], arrays.sex["train"]), (arrays.images["val"], arrays.sex["val"]), config,
        {"cohort": arrays.description, "method": "original", "p": 0.0}, device=device, progress=progress)
    training_rows.append({"network": "sex attacker (original)", "cached": info["cached"],
                          "best_epoch": info["best_epoch"], "seconds": info["seconds"]})
    histories["sex attacker"] = info["history"]
    record("original", 0.0, "sex", score(attacker, test, arrays.sex["test"], arrays.patients["test"], "sex",
                                         config, device))
    log(f"attacker on original test images: accuracy {rows[-1]['value']:.3f} +- {rows[-1]['se']:.3f}")

    examples: dict[str, np.ndarray] = {"Original": test[0].copy(), "vessels": vessels["test"][0].copy()}
    dr_models: dict[tuple[str, float], nn.Module] = {}
    versions = [("original", 0.0)] + [(method, p) for method in METHODS for p in config.p_values]
    for method, p in versions:
        if method == "original":
            train_images, val_images, test_images = arrays.images["train"], arrays.images["val"], test
        else:
            train_images, val_images, test_images = (version(method, p, split) for split in SPLITS)
            examples[f"{METHOD_LABELS[method]} p={p:g}"] = test_images[0].copy()
            record(method, p, "sex", score(attacker, test_images, arrays.sex["test"], arrays.patients["test"],
                                           "sex", config, device))
        # What the DR model's training images are: only the settings of this version's method enter the key.
        obfuscation = {"snow": {"mask_mode": config.snow_mask_mode, "channel_means": means.tolist()},
                       "vs_snow": {"window": config.vs_window, "vessels": config.vessel_source,
                                   "segmenter": config.segmenter_description()
                                   if config.vessel_source == "segmenter" else None}}.get(method)
        description = {"cohort": arrays.description, "method": method, "p": p, "obfuscation": obfuscation}
        model, info = train_task_classifier("dr", (train_images, arrays.dr["train"]), (val_images, arrays.dr["val"]),
                                            config, description, device=device, progress=progress)
        name = f"DR classifier ({METHOD_LABELS[method]}{'' if method == 'original' else f' p={p:g}'})"
        training_rows.append({"network": name, "cached": info["cached"], "best_epoch": info["best_epoch"],
                              "seconds": info["seconds"]})
        histories[name] = info["history"]
        dr_models[(method, p)] = model
        record(method, p, "dr", score(model, test_images, arrays.dr["test"], arrays.patients["test"], "dr", config,
                                      device))
        sex_row = [row for row in rows if row["method"] == method and row["p"] == p and row["task"] == "sex"][0]
        log(f"{METHOD_LABELS[method]:>8} p={p:g}: attacker accuracy {sex_row['value']:.3f}, "
            f"DR macro-F1 {rows[-1]['value']:.3f}")

    scores = pd.DataFrame(rows)
    counts = np.bincount(arrays.sex["test"], minlength=2)
    chance = float(counts.max() / counts.sum())

    # Saliency (paper Fig. 2): where do the attacker and the DR model look? On original test images.
    count = min(saliency_images, len(test))
    saliency_input = as_image_tensor(test[:count])
    fov = arrays.fov["test"][:count] if arrays.fov is not None else None
    sex_maps = gradient_saliency(attacker.cpu(), saliency_input, target=arrays.sex["test"][:count]).numpy()
    dr_original = dr_models[("original", 0.0)].cpu()
    dr_maps = gradient_saliency(dr_original, saliency_input, target=arrays.dr["test"][:count]).numpy()
    saliency = {"images": test[:3].copy(), "sex_maps": sex_maps[:3], "dr_maps": dr_maps[:3],
                "vessels": vessels["test"][:3].copy(),
                "sex_enrichment": saliency_vessel_enrichment(sex_maps, vessels["test"][:count], fov),
                "dr_enrichment": saliency_vessel_enrichment(dr_maps, vessels["test"][:count], fov)}
    return SnowVsSnowOutcome(scores=scores, chance=chance, segmenter=segmenter_info, attacker=attacker,
                             dr_models=dr_models, training=pd.DataFrame(training_rows), examples=examples,
                             saliency=saliency, channel_means=means, config=config,
                             seconds=time.perf_counter() - started, histories=histories)


# ---------------------------------------------------------------------------------------------------------------
# analysis: saliency, tables, trade-off, claims
# ---------------------------------------------------------------------------------------------------------------
def saliency_vessel_enrichment(maps: np.ndarray, vessels: np.ndarray, fov: np.ndarray | None = None) -> np.ndarray:
    """How concentrated saliency is on vessels: mean saliency on vessel pixels / mean saliency in the field.

    1 means vessels get their area's share of the saliency; above 1, more (higher = the model relies more on
    vessel pixels). Invariant to the scale of each map.

    Args:
        maps: Non-negative saliency (N, H, W).
        vessels: bool (N, H, W) vessel masks.
        fov: Optional bool (N, H, W) field-of-view masks (None: the whole image).

    Returns:
        float64 (N,); NaN for an image without vessel pixels or with an all-zero map.
    """
    maps = np.asarray(maps, dtype=np.float64)
    vessels = np.asarray(vessels).astype(bool)
    if maps.ndim != 3 or vessels.shape != maps.shape:
        raise ValueError(f"maps and vessels must both be (N, H, W) of one shape, got {maps.shape} and {vessels.shape}")
    if np.any(maps < 0):
        raise ValueError("saliency maps must be non-negative")
    region = np.ones_like(vessels) if fov is None else np.asarray(fov).astype(bool)
    if region.shape != maps.shape:
        raise ValueError(f"fov must have shape {maps.shape}, got {region.shape}")
    inside = vessels & region
    result = np.full(len(maps), np.nan)
    for index in range(len(maps)):
        field_mean = maps[index][region[index]].mean() if region[index].any() else 0.0
        if inside[index].any() and field_mean > 0:
            result[index] = maps[index][inside[index]].mean() / field_mean
    return result


def scores_table(scores: pd.DataFrame, p_values: tuple[float, ...]) -> pd.DataFrame:
    """Our results as the paper lays them out: rows (method, task), columns Original and p = ... (percent)."""
    columns = ["Original"] + [f"p = {p:g}" for p in p_values]
    rows = []
    for method in METHODS:
        for task, label in (("sex", "Sex (Acc)"), ("dr", "DR (F1)")):
            values = [_lookup(scores, "original", 0.0, task)] + [_lookup(scores, method, p, task) for p in p_values]
            rows.append({"Method": METHOD_LABELS[method], "Classification": label,
                         **{column: 100 * value for column, value in zip(columns, values)}})
    return pd.DataFrame(rows).set_index(["Method", "Classification"])


def _lookup(scores: pd.DataFrame, method: str, p: float, task: str, column: str = "value") -> float:
    selected = scores[(scores["method"] == method) & np.isclose(scores["p"], p) & (scores["task"] == task)]
    if len(selected) != 1:
        raise ValueError(f"scores hold {len(selected)} rows for method={method!r}, p={p}, task={task!r}")
    return float(selected[column].iloc[0])


def paper_vs_ours_table(scores: pd.DataFrame, method: str, dataset_label: str = "Phantom (ours)") -> pd.DataFrame:
    """The paper's Table 1 (``method="snow"``) or Table 2 (``"vs_snow"``) with our row block added.

    Columns are the union of the paper's and our p values (``Original``, ``p = 0.1``...), in percent; cells a
    source does not have are NaN. Rows: (Data, Classification).
    """
    if method not in METHODS:
        raise ValueError(f"method must be 'snow' or 'vs_snow', got {method!r}")
    ours_p = sorted(float(p) for p in scores.loc[scores["method"] == method, "p"].unique())
    all_p = sorted(set(PAPER_P_VALUES[1:]) | set(ours_p))
    columns = ["Original"] + [f"p = {p:g}" for p in all_p]
    rows = []
    for data, values in PAPER_TABLES[method].items():
        for key, label in (("sex_accuracy", "Sex (Acc)"), ("dr_f1", "DR (F1)")):
            paper = dict(zip(PAPER_P_VALUES, values[key]))
            rows.append({"Data": f"{data} (paper)", "Classification": label,
                         **{column: paper.get(p, np.nan) for column, p in zip(columns, [0.0] + all_p)}})
    for task, label in (("sex", "Sex (Acc)"), ("dr", "DR (F1)")):
        ours = {0.0: _lookup(scores, "original", 0.0, task)}
        ours.update({p: _lookup(scores, method, p, task) for p in ours_p})
        rows.append({"Data": dataset_label, "Classification": label,
                     **{column: 100 * ours[p] if p in ours else np.nan for column, p in zip(columns, [0.0] + all_p)}})
    return pd.DataFrame(rows).set_index(["Data", "Classification"])


def tradeoff_points(scores: pd.DataFrame, method: str) -> pd.DataFrame:
    """(p, attacker accuracy, DR macro-F1) for ``method``, starting with the original images at p = 0."""
    ps = [0.0] + sorted(float(p) for p in scores.loc[scores["method"] == method, "p"].unique())
    return pd.DataFrame({"p": ps,
                         "attacker_accuracy": [_lookup(scores, "original" if p == 0 else method, p, "sex") for p in ps],
                         "dr_f1": [_lookup(scores, "original" if p == 0 else method, p, "dr") for p in ps]})


def _utility_at(points: pd.DataFrame, privacy: np.ndarray) -> np.ndarray:
    """DR F1 of a method's curve at attacker accuracies ``privacy`` (linear interpolation between its points,
    ordered by attacker accuracy; a non-monotone curve is read in that order)."""
    ordered = points.sort_values("attacker_accuracy", kind="stable")
    return np.interp(privacy, ordered["attacker_accuracy"].to_numpy(), ordered["dr_f1"].to_numpy())


def matched_privacy_gain(scores: pd.DataFrame, grid: int = 101) -> dict[str, float]:
    """VS-Snow's DR macro-F1 minus Snow's at equal attacker accuracy, averaged over the accuracies both reach.

    Each method's (attacker accuracy, DR F1) points, including the original images, are joined by straight
    lines; the two curves are compared on ``grid`` accuracies spanning the overlap of their accuracy ranges.
    Positive = VS-Snow keeps more utility at matched privacy.

    Returns:
        ``{"gain", "low", "high"}``: the mean F1 difference (NaN when the overlap is a single point) and the
        overlap's attacker-accuracy range.
    """
    snow_points, vs_points = tradeoff_points(scores, "snow"), tradeoff_points(scores, "vs_snow")
    low = max(snow_points["attacker_accuracy"].min(), vs_points["attacker_accuracy"].min())
    high = min(snow_points["attacker_accuracy"].max(), vs_points["attacker_accuracy"].max())
    if not high > low:
        return {"gain": float("nan"), "low": float(low), "high": float(high)}
    privacy = np.linspace(low, high, grid)
    gain = _utility_at(vs_points, privacy) - _utility_at(snow_points, privacy)
    return {"gain": float(gain.mean()), "low": float(low), "high": float(high)}


def falls_with_p(values: list[float], errors: list[float], z: float = 2.0) -> bool | None:
    """Whether a score sequence (original, then increasing p) falls.

    True: the last value lies more than ``z`` combined standard errors below the first and no step rises by more
    than ``z`` combined standard errors. False: the last value is not below the first, or a step rises by more than
    ``z`` combined standard errors. None (undecided): it drops, but by less than the noise.
    """
    values, errors = np.asarray(values, float), np.asarray(errors, float)
    if len(values) < 2 or len(values) != len(errors):
        raise ValueError(f"need matching values and errors of length >= 2, got {len(values)} and {len(errors)}")
    steps_ok = all(values[i + 1] - values[i] <= z * np.hypot(errors[i], errors[i + 1]) for i in range(len(values) - 1))
    drop = values[0] - values[-1]
    if not steps_ok or drop <= 0:
        return False
    if drop > z * np.hypot(errors[0], errors[-1]):
        return True
    return None


def vessel_share_of_drop(scores: pd.DataFrame, task: str, p: float) -> float:
    """(score drop under VS-Snow) / (score drop under Snow) at ``p``: the part of Snow's damage that obfuscating
    only the vessels already does. Near 1: the task's information sits in the vessels; near 0: elsewhere.
    NaN when Snow causes no drop."""
    original = _lookup(scores, "original", 0.0, task)
    snow_drop = original - _lookup(scores, "snow", p, task)
    vs_drop = original - _lookup(scores, "vs_snow", p, task)
    return float(vs_drop / snow_drop) if snow_drop > 0 else float("nan")


def _finite_mean(values: np.ndarray) -> float:
    """Mean of the finite entries (NaN when there are none), without NumPy's empty-slice warning."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    return float(values.mean()) if len(values) else float("nan")


def evaluate_claims(outcome: SnowVsSnowOutcome) -> list[dict[str, Any]]:
    """The chapter's claims, each decided from our numbers.

    ``holds`` is None ("not decidable") when the test set has fewer than ``config.min_test_images`` images, or
    when the deciding difference lies within its noise (stated in the note). Returns dicts with the fields of
    :class:`anonpaper.runner.record.Claim`.
    """
    scores, config = outcome.scores, outcome.config
    n_test = int(scores["n_test"].iloc[0])
    small = n_test < config.min_test_images
    small_note = (f"test set of {n_test} images < {config.min_test_images}: too small to decide at this profile"
                  if small else "")
    ps = list(config.p_values)
    top = ps[-1]
    claims: list[dict[str, Any]] = []

    def add(id: str, statement: str, paper: Any, ours: Any, holds: bool | None, note: str) -> None:
        claims.append({"id": id, "statement": statement, "paper": paper, "ours": ours,
                       "holds": None if small else holds, "note": small_note or note})

    original_sex = _lookup(scores, "original", 0.0, "sex")
    original_sex_se = _lookup(scores, "original", 0.0, "sex", "se")
    margin = original_sex - outcome.chance
    add("attacker-above-chance", "The attacker recognises sex on original images well above chance",
        {"BRSET": 75.12, "Diabetes Center": 83.33},
        {"accuracy": round(100 * original_sex, 2), "chance": round(100 * outcome.chance, 2),
         "se": round(100 * original_sex_se, 2)},
        bool(margin > 2 * original_sex_se),
        f"accuracy - majority rate = {100 * margin:.1f} points, {margin / max(original_sex_se, 1e-12):.1f} SE")

    for method in METHODS:
        for task, label, paper_key in (("sex", "attacker accuracy", "sex_accuracy"), ("dr", "DR F1", "dr_f1")):
            values = [_lookup(scores, "original", 0.0, task)] + [_lookup(scores, method, p, task) for p in ps]
            errors = [_lookup(scores, "original", 0.0, task, "se")] + [_lookup(scores, method, p, task, "se")
                                                                        for p in ps]
            holds = falls_with_p(values, errors)
            add(f"{method.replace('_', '-')}-{task}-falls",
                f"{label} falls as p rises under {METHOD_LABELS[method]}",
                {data: list(table[paper_key]) for data, table in PAPER_TABLES[method].items()},
                {f"p={p:g}": round(100 * value, 2) for p, value in zip([0.0] + ps, values)}, holds,
                "falls = last value more than 2 combined SE below the original and no rise larger than 2 SE "
                "(undecided when it drops by less); "
                f"drop {100 * (values[0] - values[-1]):.1f} points, 2 combined SE "
                f"{200 * np.hypot(errors[0], errors[-1]):.1f}")

    gain = matched_privacy_gain(scores)
    f1_se = float(scores.loc[scores["task"] == "dr", "se"].mean())
    if np.isnan(gain["gain"]):
        holds, note = None, ("the two methods' attacker accuracies do not overlap beyond the original point, so "
                             "there is no matched privacy level to compare at")
    elif abs(gain["gain"]) < f1_se:
        holds, note = None, (f"mean F1 difference {100 * gain['gain']:.1f} points is within the typical DR F1 SE "
                             f"({100 * f1_se:.1f}): undecided")
    else:
        holds, note = bool(gain["gain"] > 0), (f"mean F1 difference {100 * gain['gain']:.1f} points over attacker "
                                               f"accuracies {100 * gain['low']:.1f}-{100 * gain['high']:.1f} %")
    add("vs-snow-better-tradeoff", "At matched privacy (attacker accuracy), VS-Snow keeps more DR utility than Snow",
        "BRSET p=0.5: Snow 52.15 % / F1 64.5, VS-Snow 58.1 % / F1 72; Diabetes Center: VS-Snow p=0.1 50.7 % / F1 75.9 "
        "vs Snow p=0.3 51.0 % / F1 58.4",
        {"mean_f1_gain": round(100 * gain["gain"], 2) if not np.isnan(gain["gain"]) else "no overlap",
         "attacker_range": [round(100 * gain["low"], 2), round(100 * gain["high"], 2)]}, holds, note)

    sex_share, dr_share = vessel_share_of_drop(scores, "sex", top), vessel_share_of_drop(scores, "dr", top)
    snow_sex_drop = original_sex - _lookup(scores, "snow", top, "sex")
    snow_dr_drop = _lookup(scores, "original", 0.0, "dr") - _lookup(scores, "snow", top, "dr")
    noise = 2 * np.hypot(original_sex_se, _lookup(scores, "snow", top, "sex", "se"))
    noise_dr = 2 * np.hypot(_lookup(scores, "original", 0.0, "dr", "se"), _lookup(scores, "snow", top, "dr", "se"))
    if snow_sex_drop <= noise or snow_dr_drop <= noise_dr:
        holds, note = None, (f"Snow at p={top:g} does not lower both scores beyond noise (sex drop "
                             f"{100 * snow_sex_drop:.1f}, DR drop {100 * snow_dr_drop:.1f} points), so the shares "
                             "are not meaningful")
    else:
        holds, note = bool(sex_share > dr_share), ("share = drop under VS-Snow / drop under Snow at the largest p; "
                                                   "the sex share exceeding the DR share means vessels hold more of "
                                                   "the sex information")
    add("vessels-sex-over-dr", "Vessels carry more sex than DR information (VS-Snow removes most of Snow's damage "
        "to the attacker but little of its damage to DR)",
        "BRSET p=0.5: sex drop 17.0 (VS) vs 23.0 (Snow) points; DR drop 10.6 vs 18.1",
        {"sex_share": round(sex_share, 3) if not np.isnan(sex_share) else "undefined",
         "dr_share": round(dr_share, 3) if not np.isnan(dr_share) else "undefined"}, holds, note)

    sex_enrichment = _finite_mean(outcome.saliency["sex_enrichment"])
    dr_enrichment = _finite_mean(outcome.saliency["dr_enrichment"])
    difference = outcome.saliency["sex_enrichment"] - outcome.saliency["dr_enrichment"]
    difference = difference[np.isfinite(difference)]
    se = float(np.std(difference, ddof=1) / np.sqrt(len(difference))) if len(difference) > 1 else float("nan")
    decided = len(difference) > 1 and abs(difference.mean()) > 2 * se
    add("saliency-vessels", "Saliency of the sex classifier concentrates on vessels more than that of the DR "
        "classifier (paper Fig. 2)", "qualitative (Fig. 2)",
        {"sex_enrichment": round(sex_enrichment, 3) if np.isfinite(sex_enrichment) else "undefined",
         "dr_enrichment": round(dr_enrichment, 3) if np.isfinite(dr_enrichment) else "undefined"},
        bool(difference.mean() > 0) if decided else None,
        "enrichment = mean gradient saliency on vessel pixels / mean in the field of view; paired over test images"
        + ("" if decided else f"; difference {difference.mean() if len(difference) else float('nan'):.2f} within "
                              "2 SE: undecided"))
    return claims


# ---------------------------------------------------------------------------------------------------------------
# figures
# ---------------------------------------------------------------------------------------------------------------
METHOD_STYLE = {"snow": {"color": "tab:blue", "marker": "o"}, "vs_snow": {"color": "tab:orange", "marker": "s"}}


def plot_tradeoff(outcome: SnowVsSnowOutcome):
    """Privacy-utility trade-off: attacker accuracy (x, lower = more private) vs DR macro-F1 (y, higher = more
    useful), both methods, every p, the original images and the chance line; right panel the paper's numbers.

    Returns:
        The matplotlib Figure (created with pyplot, so a notebook shows it once at the end of the cell).
    """
    import matplotlib.pyplot as plt

    figure, (ours, paper) = plt.subplots(1, 2, figsize=(11, 4.4))
    for method in METHODS:
        points = tradeoff_points(outcome.scores, method)
        errors = outcome.scores.set_index(["method", "p", "task"])["se"]
        x_error = [errors[("original" if p == 0 else method, p, "sex")] for p in points["p"]]
        y_error = [errors[("original" if p == 0 else method, p, "dr")] for p in points["p"]]
        ours.errorbar(100 * points["attacker_accuracy"], 100 * points["dr_f1"], xerr=100 * np.asarray(x_error),
                      yerr=100 * np.asarray(y_error), label=METHOD_LABELS[method], capsize=2, lw=1.5,
                      **METHOD_STYLE[method])
        for _, row in points.iterrows():
            ours.annotate("orig." if row["p"] == 0 else f"p={row['p']:g}",
                          (100 * row["attacker_accuracy"], 100 * row["dr_f1"]), textcoords="offset points",
                          xytext=(4, 4), fontsize=8, color=METHOD_STYLE[method]["color"])
    ours.axvline(100 * outcome.chance, color="grey", ls="--", lw=1, label=f"chance ({100 * outcome.chance:.0f} %)")
    ours.set(title="Ours (phantom); bars: patient-bootstrap SE", xlabel="attacker accuracy on sex (%)  <- more private",
             ylabel="DR macro-F1 (%)  (higher = more useful)")
    ours.legend(fontsize=8)
    for (data, line_style) in (("BRSET", "-"), ("Diabetes Center", ":")):
        for method in METHODS:
            table = PAPER_TABLES[method][data]
            paper.plot(table["sex_accuracy"], table["dr_f1"], ls=line_style, label=f"{METHOD_LABELS[method]}, {data}",
                       **METHOD_STYLE[method])
    paper.axvline(50, color="grey", ls="--", lw=1, label="chance (50 %)")
    paper.set(title="Paper (Tables 1-2)", xlabel="attacker accuracy on sex (%)  <- more private",
              ylabel="DR F1 (%)")
    paper.legend(fontsize=7)
    figure.tight_layout()
    return figure


def plot_examples(outcome: SnowVsSnowOutcome):
    """One test image in every version (original, Snow and VS-Snow at each p) and its vessel mask."""
    import matplotlib.pyplot as plt

    p_values = outcome.config.p_values
    columns = 1 + len(p_values)
    figure, axes = plt.subplots(2, columns, figsize=(2.4 * columns, 5.0))
    axes[0, 0].imshow(outcome.examples["Original"])
    axes[0, 0].set_title("original", fontsize=9)
    axes[1, 0].imshow(outcome.examples["vessels"], cmap="gray")
    axes[1, 0].set_title(f"vessels ({outcome.segmenter['source']})", fontsize=9)
    for row, method in enumerate(METHODS):
        for column, p in enumerate(p_values, start=1):
            axes[row, column].imshow(outcome.examples[f"{METHOD_LABELS[method]} p={p:g}"])
            axes[row, column].set_title(f"{METHOD_LABELS[method]}, p = {p:g}", fontsize=9)
    for axis in axes.flat:
        axis.axis("off")
    figure.tight_layout()
    return figure


def plot_saliency(outcome: SnowVsSnowOutcome):
    """Paper Fig. 2: test images with the gradient saliency of the sex attacker and of the DR classifier, and the
    vessel mask outline."""
    import matplotlib.pyplot as plt

    saliency = outcome.saliency
    count = len(saliency["images"])
    figure, axes = plt.subplots(count, 3, figsize=(8, 2.7 * count), squeeze=False)
    for row in range(count):
        axes[row, 0].imshow(saliency["images"][row])
        axes[row, 0].set_title("original", fontsize=9)
        for column, (key, label) in enumerate((("sex_maps", "sex attacker"), ("dr_maps", "DR classifier")), 1):
            axes[row, column].imshow(saliency[key][row], cmap="inferno", vmin=0, vmax=1)
            axes[row, column].contour(saliency["vessels"][row], levels=[0.5], colors="cyan", linewidths=0.4)
            enrichment = saliency[key.replace("maps", "enrichment")][row]
            axes[row, column].set_title(f"{label} (vessel enrichment {enrichment:.2f})", fontsize=8)
    for axis in axes.flat:
        axis.axis("off")
    figure.tight_layout()
    return figure
