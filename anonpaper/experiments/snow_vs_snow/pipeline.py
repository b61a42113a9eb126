"""The Snow / VS-Snow pipeline (paper 2): cohort -> vessel segmenter -> obfuscated versions -> classifiers -> scores.

1. Load a fundus cohort into per-split arrays (:func:`load_data`, :func:`anonpaper.data.arrays.load_arrays`): uint8
   images, sex (0 = F, 1 = M), DR in 3 classes (0 healthy, 1 NPDR, 2 PDR), ground-truth vessel masks where the
   cohort has them.
2. Train a vessel segmenter on the training split's vessel masks (FR-UNet-style by default; the paper uses a
   modified FR-UNet) and segment every image with FR-UNet's dual threshold (:func:`train_vessel_segmenter`,
   :func:`predict_vessels`). VS-Snow obfuscates the *predicted* vessels, as in the paper. The segmenter's test
   Dice is checked against ``Config.segmenter_min_dice``; below it the claims that rest on the masks are undecided.
3. Obfuscate every split with Snow (whole image, dataset channel means) and VS-Snow (vessel pixels, mean of kept
   neighbouring vessel pixels) at each p (:func:`obfuscate`, through :func:`anonpaper.methods.get`).
4. The attacker (sex, cross-entropy) trains on original images and is tested on original, Snow and VS-Snow test
   images. A DR classifier (class-weighted focal loss, gamma 0.6) trains and tests on each version. The networks
   the claims compare train once per training seed (``Config.training_seeds``): the attacker, and the DR
   classifiers on the original images and at the largest p of each method (:func:`seeded_versions`). Every
   network is cached with :class:`anonpaper.cache.ArtifactCache`, keyed by the cohort's content, the training
   configuration, the seed and the training seed.
5. Scores with patient-clustered bootstrap standard errors
   (:func:`anonpaper.metrics.statistics.patient_bootstrap_se`), averaged over training seeds with the seed spread
   added to the error (:func:`seed_summary`), and saliency maps for the figures.

Metrics: attacker accuracy (lower = more private; chance is the test set's majority-class rate) and DR macro-F1
(higher = more utility). The paper says only "F1 ... accounting for data imbalance"; we use macro-F1.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch
from torch import nn

from anonpaper import methods
from anonpaper.cache import ArtifactCache
from anonpaper.data import Cohort, load_cohort
from anonpaper.data.arrays import SPLITS, CohortArrays, load_arrays
from anonpaper.experiments.snow_vs_snow.config import Config
from anonpaper.methods.snow import channel_mean
from anonpaper.metrics.classification import accuracy
from anonpaper.metrics.saliency import saliency_vessel_enrichment
from anonpaper.metrics.segmentation import dice_score
from anonpaper.metrics.statistics import combine_seeds, patient_bootstrap_se
from anonpaper.models.classifiers import build_classifier, gradient_saliency
from anonpaper.runtime import derive_seed, get_device
from anonpaper.train.augment import paper2_augmentation
from anonpaper.train.classifier import predict_proba, train_classifier
from anonpaper.train.loop import TrainSettings, as_image_tensor
from anonpaper.train.segmenter import dual_threshold, segment, train_segmenter

METHODS = ("snow", "vs_snow")
METHOD_LABELS = {"original": "Original", "snow": "Snow", "vs_snow": "VS-Snow"}
TASK_METRIC = {"sex": "accuracy", "dr": "macro_f1"}


def load_data(config: Config, progress: bool = False) -> tuple[Cohort, CohortArrays]:
    """The chapter's cohort (the phantom at ``config``'s size, or the real dataset at ``DATA_ROOT``) as arrays."""
    if config.is_phantom:
        cohort = load_cohort(config.dataset, n_patients=config.n_patients, image_size=config.image_size,
                             seed=config.seed, sex_effect=config.phantom_sex_effect)
    else:
        cohort = load_cohort(config.dataset, root=config.data_root)
    return cohort, load_arrays(cohort, image_size=config.image_size, progress=progress)


# ---------------------------------------------------------------------------------------------------------------
# vessel segmentation
# ---------------------------------------------------------------------------------------------------------------
def build_segmenter(config: Config) -> nn.Module:
    """A randomly initialised vessel segmenter (RGB in, one logit out) as ``config`` describes."""
    torch.manual_seed(derive_seed(config.seed, "segmenter-init"))
    width = config.segmenter_width
    if config.segmenter == "frunet":
        from anonpaper.models.frunet import FRUNet

        return FRUNet(3, 1, widths=(width, 2 * width, 4 * width, 8 * width))
    from anonpaper.models.unet import UNet

    return UNet(3, 1, base_width=width, depth=3)


def train_vessel_segmenter(arrays: CohortArrays, config: Config, device: torch.device | None = None,
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
                                 TrainSettings(epochs=config.segmenter_epochs, batch_size=16,
                                               lr=config.segmenter_lr, seed=config.seed, device=device,
                                               progress=progress),
                                 patch_size=min(config.segmenter_patch, arrays.images["train"].shape[1]),
                                 patches_per_epoch=config.segmenter_patches_per_epoch, loss=config.segmenter_loss,
                                 val=(arrays.images["val"], arrays.vessels["val"]))
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
    """Apply Snow or VS-Snow (through :func:`anonpaper.methods.get`) to a stack of images.

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
    if method == "original":
        return images.copy()
    if method not in METHODS:
        raise ValueError(f"method must be 'original', 'snow' or 'vs_snow', got {method!r}")
    if method == "snow":
        if channel_means is None:
            raise ValueError("Snow needs channel_means (the dataset's per-channel mean)")
        anonymizer = methods.get("snow", p=replace_fraction, mask_mode=mask_mode,
                                 channel_mean=np.asarray(channel_means, dtype=np.float64).tolist())
    else:
        anonymizer = methods.get("vs-snow", p=replace_fraction, window_size=window_size)
    output = np.empty_like(images)
    for start in range(0, len(images), chunk):
        masks = None if vessel_masks is None else vessel_masks[start:start + chunk]
        output[start:start + chunk] = anonymizer(images[start:start + chunk], seed=derive_seed(seed, "chunk", start),
                                                 masks=masks)
    return output


# ---------------------------------------------------------------------------------------------------------------
# classifiers
# ---------------------------------------------------------------------------------------------------------------
def train_task_classifier(task: str, train: tuple[np.ndarray, np.ndarray], val: tuple[np.ndarray, np.ndarray],
                          config: Config, description: dict[str, Any],
                          device: torch.device | None = None, progress: bool = False,
                          cache: ArtifactCache | None = None, training_seed: int = 0) -> tuple[nn.Module, dict]:
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
        training_seed: Which of the ``config.training_seeds`` networks (0 = the one of a single-seed run): another
            initialisation and batch order on the same data.

    Returns:
        (model taking images in [0, 1], info with ``cached``, ``best_epoch``, ``seconds``, ``history``).
    """
    if task not in TASK_METRIC:
        raise ValueError(f"task must be 'sex' or 'dr', got {task!r}")
    cache = cache or ArtifactCache("snow-classifiers")
    key = {"task": task, "data": description, "training": config.classifier_description()}
    extra = ("training-seed", training_seed) if training_seed else ()  # seed 0 keeps a single-seed run's seeds
    if training_seed:
        key["training_seed"] = training_seed
    cached = cache.exists(key)

    def build() -> dict:
        started = time.perf_counter()
        torch.manual_seed(derive_seed(config.seed, "classifier-init", task, description, *extra))
        model = build_classifier(config.backbone, 3, 2 if task == "sex" else 3)
        result = train_classifier(model, train, val,
                                  TrainSettings(epochs=config.epochs, batch_size=config.batch_size, lr=config.lr,
                                                weight_decay=config.weight_decay, lr_schedule=config.lr_schedule,
                                                early_stopping_patience=config.early_stopping_patience,
                                                seed=derive_seed(config.seed, "train", task, description, *extra),
                                                device=device, progress=progress,
                                                channels_last=config.channels_last or None),
                                  loss="ce" if task == "sex" else "focal", focal_gamma=config.focal_gamma,
                                  class_weights=None if task == "sex" else "balanced",
                                  augment=paper2_augmentation() if config.augment else None)
        return {"model": result.model.cpu(), "history": result.history, "best_epoch": result.best_epoch,
                "seconds": time.perf_counter() - started}

    artifact = cache.get_or_create(key, build)
    return artifact["model"], {"cached": cached, "best_epoch": artifact["best_epoch"],
                               "seconds": artifact["seconds"], "history": artifact["history"]}


def _metric_function(task: str) -> Callable[[np.ndarray, np.ndarray], float]:
    if task == "sex":
        return accuracy

    def dr_f1(truth, prediction):
        # Macro-F1 over the three DR classes, whatever classes a (bootstrap) test set happens to contain.
        from sklearn.metrics import f1_score

        return float(f1_score(truth, prediction, labels=[0, 1, 2], average="macro", zero_division=0))

    return dr_f1


def score(model: nn.Module, images: np.ndarray, labels: np.ndarray, patients: np.ndarray, task: str,
          config: Config, device: torch.device | None = None) -> dict[str, Any]:
    """Evaluate a classifier: ``{"value", "se", "n_test", "predictions"}`` (accuracy for sex, macro-F1 for DR)."""
    probabilities = predict_proba(model, images, batch_size=64, device=device)
    prediction = probabilities.argmax(axis=1)
    metric = _metric_function(task)
    return {"value": metric(labels, prediction), "n_test": int(len(labels)), "predictions": prediction,
            "se": patient_bootstrap_se(labels, prediction, patients, metric, config.bootstrap,
                                       derive_seed(config.seed, "bootstrap", task))}


def seeded_versions(config: Config) -> list[tuple[str, float]]:
    """The versions whose DR classifiers train once per training seed: those the claims compare, the original
    images and the largest p of each method (the attacker trains on original images and has every seed).

    >>> seeded_versions(Config(p_values=(0.1, 0.5)))
    [('original', 0.0), ('snow', 0.5), ('vs_snow', 0.5)]
    """
    return [("original", 0.0)] + [(method, max(config.p_values)) for method in METHODS]


def seed_summary(seed_scores: pd.DataFrame) -> pd.DataFrame:
    """One score per (method, p, task) from one row per trained network and version.

    ``value`` is the mean over the training seeds, ``se`` combines the seeds' patient-bootstrap SEs with the spread
    between seeds (:func:`anonpaper.metrics.statistics.combine_seeds`), ``seed_sd`` is that spread and ``seeds``
    their number. A version trained once while others of its task have several seeds (a DR classifier at an
    intermediate p) borrows the task's pooled spread: one network lies about one seed SD from the seed mean, so its
    SE is ``sqrt(se_boot^2 + pooled variance)`` and its ``seed_sd`` the pooled SD (pooled variance: the mean seed
    variance of the task's most-seeded versions).

    Args:
        seed_scores: Rows with ``method``, ``p``, ``task``, ``metric``, ``seed``, ``value``, ``se``, ``n_test``.

    Returns:
        Rows ``method``, ``p``, ``task``, ``metric``, ``value``, ``se``, ``n_test``, ``seeds``, ``seed_sd``.

    Example:
        >>> rows = [{"method": "original", "p": 0.0, "task": "dr", "metric": "macro_f1", "seed": seed,
        ...          "value": value, "se": 0.03, "n_test": 50} for seed, value in enumerate([0.6, 0.7, 0.8])]
        >>> rows.append({**rows[0], "method": "snow", "p": 0.1, "value": 0.5})
        >>> summary = seed_summary(pd.DataFrame(rows))
        >>> summary[["value", "seeds", "seed_sd"]].round(3).values.tolist()
        [[0.7, 3.0, 0.1], [0.5, 1.0, 0.1]]
        >>> summary["se"].round(4).tolist()  # sqrt(0.03^2 + 0.1^2 / 3), sqrt(0.03^2 + 0.1^2)
        [0.0651, 0.1044]
    """
    rows = []
    for (method, p, task), group in seed_scores.groupby(["method", "p", "task"], sort=False):
        value, se, spread = combine_seeds(group["value"].to_numpy(), group["se"].to_numpy())
        rows.append({"method": method, "p": p, "task": task, "metric": group["metric"].iloc[0], "value": value,
                     "se": se, "n_test": int(group["n_test"].iloc[0]), "seeds": len(group), "seed_sd": spread})
    scores = pd.DataFrame(rows)
    for task in scores["task"].unique():
        of_task = scores["task"] == task
        most = scores.loc[of_task, "seeds"].max()
        if most < 2:
            continue
        pooled = float(np.mean(scores.loc[of_task & (scores["seeds"] == most), "seed_sd"] ** 2))
        once = of_task & (scores["seeds"] == 1)
        scores.loc[once, "se"] = np.sqrt(scores.loc[once, "se"] ** 2 + pooled)
        scores.loc[once, "seed_sd"] = np.sqrt(pooled)
    return scores


# ---------------------------------------------------------------------------------------------------------------
# the whole experiment
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    """What :func:`run_experiment` returns.

    Attributes:
        scores: One row per (method, p, task): ``method`` ("original", "snow", "vs_snow"), ``p`` (0 for original),
            ``task`` ("sex", "dr"), ``metric`` ("accuracy", "macro_f1"), ``value`` (mean over training seeds,
            fraction in [0, 1]), ``se`` (patient bootstrap and seed spread combined), ``n_test``, ``seeds``,
            ``seed_sd`` (:func:`seed_summary`).
        chance: Majority-class rate of sex in the test set (the accuracy of always guessing the larger sex).
        segmenter: ``{"source", "test_dice", "vessel_fraction", "cached", "seconds", "check"}`` (dice NaN without
            ground truth; ``check`` is None when the masks are trusted, else why they are not).
        attacker: The sex classifier (trained on original images) of training seed 0.
        dr_models: ``(method, p) -> DR classifier`` of training seed 0 (``("original", 0.0)`` included).
        training: One row per trained network: name, seed, cached, best_epoch, seconds.
        examples: Label -> uint8 (H, W, 3) image: one test image in every version, plus ``"vessels"`` (bool).
        saliency: ``{"images", "sex_maps", "dr_maps", "vessels", "sex_enrichment", "dr_enrichment"}`` on test
            images (maps float (K, H, W) in [0, 1]; enrichments per image).
        channel_means: Snow's per-channel means (3,), 0-255.
        config: The configuration.
        seconds: Wall-clock seconds of the run.
        histories: Network name -> its training history.
        seed_scores: One row per (method, p, task, training seed): the scores :attr:`scores` averages.
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
    config: Config
    seconds: float = 0.0
    histories: dict[str, pd.DataFrame] = field(default_factory=dict)
    seed_scores: pd.DataFrame = field(default_factory=pd.DataFrame)


def segmenter_check(segmenter: dict[str, Any], config: Config) -> str | None:
    """None when VS-Snow's vessel masks can be trusted, else why not (Dice below the floor, or masks that mark
    nearly every or no pixel of the test images)."""
    if segmenter["source"] != "segmenter":
        return None
    dice, fraction = segmenter["test_dice"], segmenter["vessel_fraction"]
    if np.isfinite(dice) and dice < config.segmenter_min_dice:
        return f"test Dice {dice:.3f} < {config.segmenter_min_dice:g}"
    if not 0.0 < fraction < 0.5:
        return f"predicted vessels cover {100 * fraction:.1f} % of the test pixels"
    return None


def run_experiment(arrays: CohortArrays, config: Config, device: torch.device | str | None = None,
                   progress: bool = False, log: Callable[[str], None] = print,
                   saliency_images: int = 32) -> Outcome:
    """Run paper 2's experiment on ``arrays`` (see the module docstring for the steps).

    Args:
        arrays: The cohort (:func:`load_arrays`).
        config: Experiment configuration.
        device: Training device (None: ``config.device``; its None: CUDA when available, else CPU).
        progress: Show training progress bars.
        log: Where one-line progress messages go.
        saliency_images: Test images used for the saliency enrichment statistic (and the first 3 for figures).

    Returns:
        :class:`Outcome`.
    """
    started = time.perf_counter()
    device = device if device is not None else config.device
    device = get_device(device) if not isinstance(device, torch.device) else device
    training_rows: list[dict[str, Any]] = []
    histories: dict[str, pd.DataFrame] = {}

    # Vessel masks for VS-Snow: predicted by the segmenter (paper) or the cohort's ground truth.
    segmenter_info: dict[str, Any] = {"source": config.vessel_source, "test_dice": float("nan")}
    if config.vessel_source == "segmenter":
        segmenter, info = train_vessel_segmenter(arrays, config, device=device, progress=progress)
        training_rows.append({"network": "vessel segmenter", "seed": 0, "cached": info["cached"],
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
    segmenter_info["check"] = segmenter_check(segmenter_info, config)
    if segmenter_info["check"]:
        log(f"WARNING: the vessel segmenter failed its check ({segmenter_info['check']}); VS-Snow's masks are not "
            "trusted and the claims that rest on them are undecided")

    # Snow's constants: the per-channel mean of all images of the dataset (paper: "of all images in the given
    # dataset").
    means = channel_mean((arrays.images[name] for name in SPLITS), channels_last=True).numpy()

    def version(method: str, p: float, split: str) -> np.ndarray:
        return obfuscate(arrays.images[split], method, p, seed=derive_seed(config.seed, method, p, split),
                         channel_means=means, vessel_masks=vessels[split], mask_mode=config.snow_mask_mode,
                         window_size=config.vs_window)

    rows: list[dict[str, Any]] = []
    test = arrays.images["test"]
    seeds = range(config.training_seeds)

    def record(method: str, p: float, task: str, seed: int, result: dict[str, Any]) -> None:
        rows.append({"method": method, "p": p, "task": task, "metric": TASK_METRIC[task], "seed": seed,
                     "value": result["value"], "se": result["se"], "n_test": result["n_test"]})

    def trained(network: str, seed: int, info: dict[str, Any]) -> None:
        training_rows.append({"network": network, "seed": seed, "cached": info["cached"],
                              "best_epoch": info["best_epoch"], "seconds": info["seconds"]})
        histories[network + (f" seed {seed}" if seed else "")] = info["history"]

    def mean_of(method: str, p: float, task: str) -> str:
        values = [row["value"] for row in rows if row["method"] == method and row["p"] == p and row["task"] == task]
        return f"{np.mean(values):.3f}" + (f" (mean of {len(values)} seeds)" if len(values) > 1 else "")

    # The attacker: trained on original images with sex labels, once per training seed; every seed is tested on
    # every version of the test set.
    attackers = []
    for seed in seeds:
        attacker, info = train_task_classifier(
            "sex", (arrays.images["train"], arrays.sex["train"]), (arrays.images["val"], arrays.sex["val"]), config,
            {"cohort": arrays.description, "method": "original", "p": 0.0}, device=device, progress=progress,
            training_seed=seed)
        trained("sex attacker (original)", seed, info)
        attackers.append(attacker)

    examples: dict[str, np.ndarray] = {"Original": test[0].copy(), "vessels": vessels["test"][0].copy()}
    dr_models: dict[tuple[str, float], nn.Module] = {}
    versions = [("original", 0.0)] + [(method, p) for method in METHODS for p in config.p_values]
    seeded = seeded_versions(config)
    for method, p in versions:
        if method == "original":
            train_images, val_images, test_images = arrays.images["train"], arrays.images["val"], test
        else:
            train_images, val_images, test_images = (version(method, p, split) for split in SPLITS)
            examples[f"{METHOD_LABELS[method]} p={p:g}"] = test_images[0].copy()
        for seed, attacker in enumerate(attackers):
            record(method, p, "sex", seed, score(attacker, test_images, arrays.sex["test"], arrays.patients["test"],
                                                 "sex", config, device))
        # What the DR model's training images are: only the settings of this version's method enter the key.
        obfuscation = {"snow": {"mask_mode": config.snow_mask_mode, "channel_means": means.tolist()},
                       "vs_snow": {"window": config.vs_window, "vessels": config.vessel_source,
                                   "segmenter": config.segmenter_description()
                                   if config.vessel_source == "segmenter" else None}}.get(method)
        description = {"cohort": arrays.description, "method": method, "p": p, "obfuscation": obfuscation}
        name = f"DR classifier ({METHOD_LABELS[method]}{'' if method == 'original' else f' p={p:g}'})"
        for seed in seeds if (method, p) in seeded else [0]:
            model, info = train_task_classifier("dr", (train_images, arrays.dr["train"]),
                                                (val_images, arrays.dr["val"]), config, description, device=device,
                                                progress=progress, training_seed=seed)
            trained(name, seed, info)
            if seed == 0:
                dr_models[(method, p)] = model
            record(method, p, "dr", seed, score(model, test_images, arrays.dr["test"], arrays.patients["test"],
                                                "dr", config, device))
        log(f"{METHOD_LABELS[method]:>8} p={p:g}: attacker accuracy {mean_of(method, p, 'sex')}, "
            f"DR macro-F1 {mean_of(method, p, 'dr')}")

    seed_scores = pd.DataFrame(rows)
    scores = seed_summary(seed_scores)
    counts = np.bincount(arrays.sex["test"], minlength=2)
    chance = float(counts.max() / counts.sum())

    # Saliency (paper Fig. 2): where do the attacker and the DR model look? On original test images.
    count = min(saliency_images, len(test))
    saliency_input = as_image_tensor(test[:count])
    fov = arrays.fov["test"][:count] if arrays.fov is not None else None
    sex_maps = gradient_saliency(attackers[0].cpu(), saliency_input, target=arrays.sex["test"][:count]).numpy()
    dr_original = dr_models[("original", 0.0)].cpu()
    dr_maps = gradient_saliency(dr_original, saliency_input, target=arrays.dr["test"][:count]).numpy()
    saliency = {"images": test[:3].copy(), "sex_maps": sex_maps[:3], "dr_maps": dr_maps[:3],
                "vessels": vessels["test"][:3].copy(),
                "sex_enrichment": saliency_vessel_enrichment(sex_maps, vessels["test"][:count], fov),
                "dr_enrichment": saliency_vessel_enrichment(dr_maps, vessels["test"][:count], fov)}
    return Outcome(scores=scores, chance=chance, segmenter=segmenter_info, attacker=attackers[0],
                   dr_models=dr_models, training=pd.DataFrame(training_rows), examples=examples,
                   saliency=saliency, channel_means=means, config=config, seconds=time.perf_counter() - started,
                   histories=histories, seed_scores=seed_scores)


