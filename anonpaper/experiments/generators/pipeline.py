"""Train (or load) the three shared generators, and evaluate them.

Each generator is cached in the artifact cache under a key made of its StyleGAN config, its training recipe, the
description of its cohort (name, size, table hash, phantom config) and the seed. While training, a checkpoint is
written every ``checkpoint_kimg`` to ``$ANONPAPER_CACHE/stylegan-runs/<key>/``; an interrupted run started again
with the same config resumes from it (exactly, on CPU: :func:`anonpaper.train.gan.train_gan`). Shipped weights in
``weights/`` (:mod:`.weights`) are used instead of training when their config matches.

The GAN chapters call :func:`load_generator(kind, config) <load_generator>`, or
:func:`load_shipped_generator(kind, config) <load_shipped_generator>` for shipped weights only (None without them);
``anonpaper generators train KIND`` (:mod:`.job`) trains a generator on a population the papers' size and ships it.

Data. The fundus generators learn ``Config.dataset``: the phantom by default, or a real copy at ``DATA_ROOT``
(:func:`kind_cohort`; :func:`check_data` reads it before any training, so a missing or broken copy stops the run
with the path and the problem named). The vessel U-Net that gives the fundus features learns the phantom's exact
masks, or a DRIVE copy at ``VESSEL_DATA_ROOT`` (:func:`vessel_cohort`); real datasets such as ODIR-5K have none.
"""

from __future__ import annotations

import io
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from anonpaper.cache import ArtifactCache
from anonpaper.data import load_cohort
from anonpaper.data.population import PopulationSpec, load_population
from anonpaper.experiments.generators.config import KINDS, PHANTOM_FUNDUS, Config
from anonpaper.experiments.generators.weights import (WeightsForAnotherConfig, WeightsRefused, export_weights,
                                                      load_weights, weights_paths)
from anonpaper.metrics.distribution import (frechet_distance, kernel_inception_distance, knn_precision_recall,
                                            nearest_neighbours, radial_power_spectrum, swd)
from anonpaper.metrics.identity import vessel_bifurcations
from anonpaper.metrics.quality import domain_lpips, psnr, ssim
from anonpaper.metrics.statistics import two_sample_bootstrap_se
from anonpaper.models.stylegan import ResidualDiscriminator, StyleGANConfig, StyleGenerator, project, to_unit_range
from anonpaper.runtime import cache_dir, derive_seed, get_device
from anonpaper.train.checkpoint import load_checkpoint
from anonpaper.train.gan import GANTrainingConfig, train_gan
from anonpaper.train.pretrained import cohort_description, trained_segmenter
from anonpaper.train.segmenter import segment

CACHE_NAMESPACE = "stylegan-generators"
PROJECT_ROOT = Path(__file__).resolve().parents[3]
FEATURE_MASKS = {"phantom-retina": "vessel", "phantom-cxr": "lungs"}


@dataclass
class TrainedGenerator:
    """A generator ready to sample from.

    Attributes:
        kind: ``"fundus-sg3t"``, ``"fundus-sg2"`` or ``"cxr-sg2"``.
        generator: The EMA generator (eval mode, CPU).
        source: ``"weights"`` (shipped file), ``"cache"`` (trained earlier) or ``"trained"`` (in this call).
        kimg: Thousands of real images it was trained on.
        history: Training history (losses per logged step, seconds); for shipped weights their metric curve (one
            row per evaluation: step, kimg, train_seconds, metrics), empty when they have none.
        seconds: Training seconds (of the run that produced it).
        resumed_from_kimg: kimg of the checkpoint training resumed from (0: a fresh run).
        cache_key: Its key in the artifact cache (shipped weights: the first 16 hex digits of their SHA-256).
        weights_file: The shipped weights file it was loaded from ("" when not shipped).
        provenance: The shipped weights' JSON record (config, kimg, data, commit, metric curve, SHA-256); empty
            when not shipped.
    """

    kind: str
    generator: StyleGenerator
    source: str
    kimg: float
    history: pd.DataFrame
    seconds: float
    resumed_from_kimg: float = 0.0
    cache_key: str = ""
    weights_file: str = ""
    provenance: dict = field(default_factory=dict)

    @property
    def seconds_per_kimg(self) -> float:
        return self.seconds / self.kimg if self.kimg and self.seconds else float("nan")


def kind_cohort(kind: str, config: Config):
    """The cohort generator ``kind`` learns: the phantom, or the real fundus copy at ``config.data_root`` (whose
    errors name DATA_ROOT and the problem, :class:`DataCopyError`)."""
    name = config.dataset_name(kind)
    if name == KINDS[kind][0]:
        return load_cohort(name, **config.cohort_options(kind))
    return _opened(f"DATASET {name!r}", "DATA_ROOT", config.data_root,
                   lambda: load_cohort(name, **config.cohort_options(kind)))


def vessel_cohort(config: Config) -> tuple[Any, str]:
    """``(cohort, mask name)`` the vessel U-Net learns: a DRIVE copy at ``config.vessel_data_root`` (its official
    test images become the validation split that checks the U-Net's Dice), else the fundus phantom's exact masks."""
    if config.vessel_data_root is None:
        return load_cohort(PHANTOM_FUNDUS, **config.phantom_options("fundus-sg2")), "vessel"
    protocol = {"name": "drive-train-val", "kind": "official", "column": "official_split",
                "mapping": {"train": "train", "test": "val"}}
    return load_cohort("drive", root=config.vessel_data_root, image_size=config.cohort_size, protocol=protocol,
                       seed=config.seed), "vessels"


def _opened(what: str, parameter: str, root: str, load):
    """``load()``, with any error of a user's copy re-raised naming the parameter, the folder and the problem."""
    try:
        return load()
    except (OSError, ValueError) as error:  # DataError is a ValueError; a missing folder an OSError
        raise DataCopyError(f"{parameter} {root!r} ({what}) cannot be used: {error}") from error


class DataCopyError(ValueError):
    """A real dataset copy named by a chapter parameter is missing or broken (the message names both)."""


def check_data(config: Config, min_train: int = 8) -> dict[str, int]:
    """Read every real copy the config names (labels, file listing, one image per split) before any training.

    Returns:
        Images per split of the fundus cohort (and ``vessel_train`` / ``vessel_val`` with a DRIVE copy).

    Raises:
        DataCopyError: A copy is missing, unreadable, or too small (fewer than ``min_train`` training images, no
            test image), naming the parameter, the folder and the problem.
    """
    counts: dict[str, int] = {}
    if not config.is_phantom:
        what = f"DATASET {config.dataset!r}"
        cohort = kind_cohort("fundus-sg3t", config)
        for split in ("train", "val", "test"):
            counts[split] = len(cohort.split(split))
        problems = []
        if counts["train"] < min_train:
            problems.append(f"{counts['train']} training images (at least {min_train} needed)")
        if counts["test"] < 1:
            problems.append("no test image (the projector inverts held-out test images)")
        if problems:
            raise DataCopyError(f"DATA_ROOT {config.data_root!r} ({what}, protocol "
                                f"{config.data_protocol or 'default'}): " + "; ".join(problems))
        for split in ("train", "test"):
            _opened(what, "DATA_ROOT", config.data_root, lambda: cohort.split(split).image(0))
    if config.vessel_data_root is not None:
        cohort, mask = _opened("a DRIVE copy", "VESSEL_DATA_ROOT", config.vessel_data_root,
                               lambda: vessel_cohort(config))
        counts["vessel_train"], counts["vessel_val"] = len(cohort.split("train")), len(cohort.split("val"))
        if not counts["vessel_train"] or not counts["vessel_val"]:
            raise DataCopyError(f"VESSEL_DATA_ROOT {config.vessel_data_root!r} (a DRIVE copy): "
                                f"{counts['vessel_train']} training and {counts['vessel_val']} test images with vessel "
                                "annotations; both are needed")
        _opened("a DRIVE copy", "VESSEL_DATA_ROOT", config.vessel_data_root, lambda: cohort.split("train").masks(0))
    return counts


def load_images(kind: str, config: Config, split: str | None = None) -> np.ndarray:
    """The cohort images generator ``kind`` learns, uint8 (N, H, W[, C]), of one split (None: train)."""
    cohort = kind_cohort(kind, config)
    return to_generator_size(cohort.split(split or "train").load_images(), config.image_size_of(kind))


def learned_population(trained: TrainedGenerator) -> PopulationSpec | None:
    """The phantom population generator weights learned, read from their provenance (``anonpaper generators train``
    records it); None when they learned the chapter's cohort (trained here, or weights without a population)."""
    record = (trained.provenance or {}).get("population")
    if not record:
        return None
    return PopulationSpec(record["dataset"], image_size=int(record["image_size"]),
                          n_patients=int(record["n_patients"]), seed=int(record["seed"]))


def learned_images(trained: TrainedGenerator, config: Config, progress: bool = False,
                   cohort_train: np.ndarray | None = None) -> tuple[np.ndarray, pd.DataFrame, str]:
    """The images generator ``trained`` learned, uint8 (N, H, W[, C]) at its side (a population's memory-mapped,
    rendered here or read from the cache), their table (one row per image: labels, phantom parameters) and what
    they are, for protocols.

    Shipped weights learned a phantom population of patients outside the chapter's cohort, so their memorisation is
    measured against that population: a generator that copied it would sit as far from the cohort's images as
    any real image does, and a check against the cohort could not see it. The population renders here with the
    libraries installed; when its key differs from the one the weights record (another OpenCV release draws a few
    pixels one grey level apart), the description says so. ``cohort_train``: the cohort's training images as
    :func:`load_images` returns them, when the caller holds them already (used only for a generator that learned
    the cohort, so they are not read twice).
    """
    kind = trained.kind
    spec = learned_population(trained)
    if spec is None:
        images = load_images(kind, config) if cohort_train is None else cohort_train
        return (images, kind_cohort(kind, config).split("train").table,
                f"{len(images)} training images of the chapter's cohort")
    population = load_population(spec, progress=progress)
    images = to_generator_size(population.images, config.image_size_of(kind))
    recorded = trained.provenance["population"].get("key")
    drawn = "" if recorded in (None, population.key) else f"; the weights record key {recorded}, drawn elsewhere"
    return images, population.table, (f"{len(images)} images of the population the weights learned "
                                      f"({spec.n_patients} phantom patients outside the cohort, seed {spec.seed}, key "
                                      f"{population.key}{drawn})")


def to_generator_size(images: np.ndarray, side: int) -> np.ndarray:
    """uint8 images (N, H, W[, C]) area-resized to ``side`` px (returned as given when they have that side)."""
    if images.shape[1] == side and images.shape[2] == side:
        return images
    import cv2

    size = (side, side)
    return np.stack([cv2.resize(image, size, interpolation=cv2.INTER_AREA) for image in images])


def training_config(kind: str, config: Config, output_dir: str | None = None,
                    progress: bool = True) -> GANTrainingConfig:
    """The trainer's settings for generator ``kind``: its config's official recipe (``TRAINING_RECIPES``; the
    architecture's defaults for CPU configs), with this chapter's batch, augmentation and schedule, and the recipe
    changes of ``GENERATOR_CHANGES``."""
    checkpoint_every = max(1, int(round(config.checkpoint_kimg * 1000 / config.batch_size)))
    chapter = dict(ada_kimg=100.0, mixed_precision=True)
    return GANTrainingConfig.for_stylegan_config(
        getattr(config, KINDS[kind][1]), total_steps=config.total_steps(kind), batch_size=config.batch_size,
        augment=config.augment, seed=derive_seed(config.seed, "generator", kind),
        checkpoint_every=checkpoint_every if output_dir else 0, metrics_every=checkpoint_every,
        output_dir=output_dir, log_every=1, progress=progress, **{**chapter, **config.changes_of(kind)[1]})


def generator_description(kind: str, config: Config) -> dict[str, Any]:
    """What identifies a trained generator (its cache key): architecture, recipe, data and seed."""
    cohort = kind_cohort(kind, config)
    recipe = asdict(training_config(kind, config, output_dir=None, progress=False))
    for name in ("output_dir", "progress", "checkpoint_every", "sample_every", "metrics_every", "log_every"):
        recipe.pop(name)
    return {"kind": kind, "stylegan": config.stylegan_config(kind).to_dict(), "training": recipe,
            "data": cohort_description(cohort), "seed": config.seed}


def _weights_directory(config: Config) -> Path | None:
    if config.weights_dir is None:
        return None
    directory = Path(config.weights_dir)
    if not directory.is_absolute():
        directory = PROJECT_ROOT / directory
    return directory


def load_generator(kind: str, config: Config | None = None, *, train: bool = True,
                   progress: bool = True) -> TrainedGenerator:
    """The shared generator ``kind`` for ``config``: shipped weights when they match, else the artifact cache,
    else trained now (resuming from a checkpoint of an interrupted run) and cached.

    Args:
        kind: ``"fundus-sg3t"``, ``"fundus-sg2"`` or ``"cxr-sg2"``.
        config: The generators chapter's :class:`Config` (default: its ``quick`` defaults).
        train: Train when neither weights nor cache hold it (False: raise ``LookupError``).
        progress: Show training progress (kimg, s/kimg and ETA).

    Raises:
        WeightsRefused: A shipped file for ``kind`` is corrupt, truncated, unreadable or of another kind, unless
            ``config.train_if_weights_refused``. A verified file of another config (another profile's generator)
            is not used: that is printed, and the generator comes from the cache or training.
        LookupError: Nothing cached and ``train=False``.
    """
    config = config or Config()
    if kind not in KINDS:
        raise ValueError(f"unknown generator kind {kind!r}; expected one of {sorted(KINDS)}")
    expected = config.stylegan_config(kind)
    try:
        shipped = load_shipped_generator(kind, config)
    except WeightsForAnotherConfig as error:  # shipped for another profile's config: this one is not shipped
        print(f"shipped weights not used, they hold another config (cached or trained instead): {error}")
        shipped = None
    except WeightsRefused as error:
        if not config.train_if_weights_refused:
            raise
        print(f"refused shipped weights, training instead (TRAIN_IF_WEIGHTS_REFUSED): {error}")
        shipped = None
    if shipped is not None:
        return shipped
    description = generator_description(kind, config)
    cache = ArtifactCache(CACHE_NAMESPACE)
    key = cache.key(description)
    source = "cache"
    if not cache.exists(description):
        if not train:
            raise LookupError(f"generator {kind!r} (cache key {key}) is neither shipped nor cached")
        cache.save(description, _train(kind, config, description, key, progress))
        source = "trained"
    artifact = cache.load(description)
    generator = StyleGenerator(expected, seed=0)
    generator.load_state_dict(artifact["generator_ema"])
    return TrainedGenerator(kind, generator.eval(), source, artifact["kimg"], pd.DataFrame(artifact["history"]),
                            artifact["seconds"], artifact["resumed_from_kimg"], key)


def load_shipped_generator(kind: str, config_or_spec: Config | StyleGANConfig, *,
                           weights_dir: str | Path | None = None,
                           device: str | torch.device = "cpu") -> TrainedGenerator | None:
    """The shipped generator ``kind`` when ``weights/`` holds one that verifies and matches; None without a file.

    What a chapter calls before it trains (``TRAIN_GENERATORS``): the weights' SHA-256 is checked against their
    JSON, and the JSON's kind and StyleGAN config (channels and resolution included) against what is asked for.

    Args:
        kind: A generator kind (:data:`~anonpaper.experiments.generators.config.KINDS`).
        config_or_spec: The generators chapter's :class:`Config` (its StyleGAN config of ``kind``; its
            ``WEIGHTS_DIR``, None meaning never use shipped weights; and its dataset, which the weights must have
            learned), or a :class:`StyleGANConfig` (weights from ``weights_dir``, default the project's ``weights/``).
        weights_dir: Folder of the weights (overrides the config's).
        device: Device of the returned generator.

    Returns:
        A :class:`TrainedGenerator` with ``source == "weights"``, ``weights_file`` (the file, to name on the page)
        and ``provenance`` (its JSON record, metric curve included), or None when there is no weights file for
        ``kind`` (or the config's weights learned another dataset, or its ``GENERATOR_CHANGES`` change ``kind``;
        either is printed).

    Raises:
        WeightsRefused: A corrupt, truncated or mismatched file (hash, kind, config, channels, resolution), naming
            the file and what differs.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown generator kind {kind!r}; expected one of {sorted(KINDS)}")
    if isinstance(config_or_spec, Config):
        expected = config_or_spec.stylegan_config(kind)
        directory = Path(weights_dir) if weights_dir is not None else _weights_directory(config_or_spec)
    elif isinstance(config_or_spec, StyleGANConfig):
        expected = config_or_spec
        directory = Path(weights_dir) if weights_dir is not None else PROJECT_ROOT / "weights"
    else:
        raise TypeError(f"config_or_spec must be the generators chapter's Config or a StyleGANConfig, got "
                        f"{type(config_or_spec).__name__}")
    if directory is None:
        return None
    if isinstance(config_or_spec, Config) and config_or_spec.changes_of(kind) != ({}, {}):
        # A recipe change leaves the architecture, so the file would verify: the weights learned another recipe.
        print(f"shipped weights of {kind} not used: GENERATOR_CHANGES changes its config or recipe "
              f"({config_or_spec.generator_changes[kind]})")
        return None
    shipped = load_weights(directory, kind, expected, device)
    if shipped is None:
        return None
    generator, record = shipped
    if isinstance(config_or_spec, Config):
        learned = (record.get("data") or {}).get("dataset", KINDS[kind][0])
        if learned != config_or_spec.dataset_name(kind):
            print(f"shipped weights of {kind} learned {learned!r}, not {config_or_spec.dataset_name(kind)!r}: "
                  "not used")
            return None
    weights_file, _ = weights_paths(directory, kind)
    curve = pd.DataFrame(record.get("curve") or [])
    return TrainedGenerator(kind, generator, "weights", float(record["kimg"]), curve,
                            float(record.get("training_seconds") or 0.0), cache_key=record["sha256"][:16],
                            weights_file=str(weights_file), provenance=record)


def trainer_checkpoint(trained: TrainedGenerator) -> Path | None:
    """The trainer checkpoint (generator, its EMA, discriminator, optimisers, random streams) whose EMA generator
    ``trained`` is, for training on from it: the run folder kept beside shipped weights (``<kind>.run/``) or the
    artifact cache's run folder of a generator trained here.

    Returns:
        Its ``checkpoint.pt``, or None when there is none, or when its run trained on past ``trained`` (the
        checkpoint's kimg is not the generator's).
    """
    if trained.source == "weights":
        path = Path(trained.weights_file).with_suffix(".run") / "checkpoint.pt"
    else:
        path = cache_dir() / "stylegan-runs" / trained.cache_key / "checkpoint.pt"
    state = load_checkpoint(path)
    if state is None:
        return None
    kimg = int(state["step"]) * int(state["training_config"]["batch_size"]) / 1000
    return path if math.isclose(kimg, trained.kimg, abs_tol=1e-9) else None


def build_networks(kind: str, config: Config) -> tuple[StyleGenerator, ResidualDiscriminator]:
    """The untrained generator (fast ops) and discriminator of ``kind``, seeded from ``config.seed``: where every
    training of that generator starts (the chapter's, and ``anonpaper generators train``)."""
    stylegan = config.stylegan_config(kind)
    generator = StyleGenerator(stylegan, seed=derive_seed(config.seed, "G", kind), implementation="fast")
    discriminator = ResidualDiscriminator(stylegan, seed=derive_seed(config.seed, "D", kind))
    return generator, discriminator


def _train(kind: str, config: Config, description: dict, key: str, progress: bool) -> dict:
    run_dir = cache_dir() / "stylegan-runs" / key
    images = load_images(kind, config)
    if images.ndim == 3:
        images = images[..., None]
    settings = training_config(kind, config, output_dir=str(run_dir), progress=progress)
    generator, discriminator = build_networks(kind, config)
    kimg_per_step = config.batch_size / 1000
    tick = time.perf_counter()
    result = train_gan(generator, discriminator, images, settings, metrics_hook=_progress_hook(config, kind, tick),
                       device=config.device or get_device(), resume=True)
    seconds = float(result.history["seconds"].dropna().iloc[-1]) if "seconds" in result.history else 0.0
    ema = result.generator_ema.to("cpu")
    return {"generator_ema": {k: v.detach().cpu() for k, v in ema.state_dict().items()},
            "kimg": result.step * kimg_per_step, "history": result.history.to_dict(orient="list"),
            "seconds": seconds, "resumed_from_kimg": result.resumed_from_step * kimg_per_step,
            "description": description}


def _progress_hook(config: Config, kind: str, tick: float):
    """A metrics hook that prints kimg, s/kimg and ETA every checkpoint interval (values go to the history)."""
    total = config.kimg(kind)

    def hook(step: int, _generator) -> dict:
        kimg = step * config.batch_size / 1000
        elapsed = time.perf_counter() - tick
        rate = elapsed / max(kimg, 1e-9)
        print(f"{kind}: {kimg:.2f}/{total:g} kimg, {rate:.0f} s/kimg, ETA {rate * max(total - kimg, 0) / 60:.1f} min",
              flush=True)
        return {"kimg": kimg, "s_per_kimg": rate}

    return hook


# ---------------------------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    """The chapter's results.

    Attributes:
        config: The run's :class:`Config`.
        generators: kind -> :class:`TrainedGenerator`.
        metrics: One row per generator and metric: ``kind``, ``metric``, ``value``, ``protocol``.
        samples: kind -> dict of uint8-ready float arrays in [0, 1] (N, C, H, W): ``"generated"``, ``"real"``,
            ``"untrained"``, ``"truncation"`` (rows psi in ``TRUNCATIONS``), ``"projected_target"``,
            ``"projected_w"``, ``"projected_wplus"``, and ``"real_mask"`` / ``"generated_mask"`` (N, 1, S, S) in
            {0, 1}: the U-Net's masks (at ``MASK_THRESHOLD``, the cohort's side S) of the first real and generated
            images, what the mask-fraction and vessel-tree checks read; ``"spectrum_real"`` and
            ``"spectrum_generated"``: mean radially averaged power spectra, float64 (R,) (:func:`spectrum_rows`).
        segmenters: dataset -> {"mask", "val_dice", "check"} of the cohort-trained U-Nets.
        seconds: Wall seconds of :func:`run`.
        classifiers: dataset -> its cohort's
            :class:`~anonpaper.experiments.generators.labels.LabelClassifier` (absent: no label to read).
    """

    config: Config
    generators: dict[str, TrainedGenerator]
    metrics: pd.DataFrame
    samples: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    segmenters: dict[str, dict] = field(default_factory=dict)
    seconds: float = 0.0
    classifiers: dict[str, Any] = field(default_factory=dict)

    def value(self, kind: str, metric: str) -> float:
        rows = self.metrics[(self.metrics["kind"] == kind) & (self.metrics["metric"] == metric)]
        return float(rows["value"].iloc[0]) if len(rows) else float("nan")


TRUNCATIONS = (0.5, 0.7, 1.0)


def _as_float(images: np.ndarray) -> torch.Tensor:
    """uint8 (N, H, W[, C]) -> float (N, C, H, W) in [0, 1]."""
    tensor = torch.from_numpy(np.asarray(images)).float() / 255.0
    return tensor[:, None] if tensor.ndim == 3 else tensor.permute(0, 3, 1, 2)


@torch.no_grad()
def generate(generator: StyleGenerator, count: int, seed: int, truncation_psi: float = 1.0,
             batch_size: int = 50) -> torch.Tensor:
    """``count`` images in [0, 1] (N, C, R, R) from seeded z."""
    return torch.cat(list(generate_batches(generator, count, seed, truncation_psi, batch_size)))


@torch.no_grad()
def generate_batches(generator: StyleGenerator, count: int, seed: int, truncation_psi: float = 1.0,
                     batch_size: int = 50):
    """:func:`generate`'s images, ``batch_size`` at a time (memory stays flat for large ``count``): yields float
    (B, C, R, R) in [0, 1]; image ``i`` comes from row ``i`` of the seeded z whatever the batch size."""
    z = torch.randn(count, generator.z_dim, generator=torch.Generator().manual_seed(seed))
    device = next(generator.parameters()).device
    for start in range(0, count, batch_size):
        images = generator(z[start:start + batch_size].to(device), truncation_psi=truncation_psi, noise_mode="const")
        yield to_unit_range(images).clamp(0, 1).cpu()


def to_cohort_size(images: torch.Tensor, config: Config, kind: str) -> torch.Tensor:
    """Images (N, C, R, R) in [0, 1] of generator ``kind`` bilinearly resized to its cohort's side (where the U-Nets
    were trained)."""
    side = config.cohort_size_of(kind)
    if images.shape[-1] == side:
        return images
    return torch.nn.functional.interpolate(images, size=side, mode="bilinear", align_corners=False).clamp(0, 1)


SKELETON_STATISTICS = {
    "length_per_image": "skeleton pixels per image",
    "pieces_per_image": "8-connected skeleton pieces per image",
    "length_per_piece": "skeleton pixels per piece, pooled over images (0 without a skeleton)",
    "largest_piece": "share of an image's skeleton in its largest piece, mean over images with a skeleton",
    "junctions_per_image": "branch and crossing points per image (metrics.vessel_bifurcations)",
}


def skeleton_statistics(masks: np.ndarray, min_area: int = 0) -> dict[str, float]:
    """What separates a vessel tree from scattered strokes: the skeletons' length, pieces and junctions.

    A fundus image's vessels are a few connected trees rooted at the disc, so their skeleton comes in few long
    pieces with branch points; dark strokes of the same total area give many short pieces and few junctions. The
    vessel-pixel fraction cannot tell the two apart; these numbers can.

    Args:
        masks: (N, H, W) boolean vessel masks.
        min_area: Mask pieces (8-connected) of fewer pixels are dropped first: the specks of a few pixels that
            faint noise or compression adds to a segmentation would otherwise each count as a piece (0: none).

    Returns:
        The :data:`SKELETON_STATISTICS`, each a float: ``length_per_image`` (pixels), ``pieces_per_image``,
        ``length_per_piece`` (pixels; 0 when no mask has a skeleton), ``largest_piece`` (in [0, 1]; NaN when no
        mask has a skeleton) and ``junctions_per_image``.

    Example:
        >>> masks = np.zeros((2, 32, 32), dtype=bool)
        >>> masks[0, 16, 2:30] = True       # one 28-pixel line
        >>> masks[1, 4, 2:8] = masks[1, 20, 2:8] = masks[1, 28, 20:26] = True   # three short strokes
        >>> stats = skeleton_statistics(masks)
        >>> stats["pieces_per_image"], stats["length_per_piece"], stats["junctions_per_image"]
        (2.0, 11.5, 0.0)
        >>> masks[0, 2, 2] = True           # a one-pixel speck: a piece of its own, unless dropped
        >>> skeleton_statistics(masks)["pieces_per_image"], skeleton_statistics(masks, min_area=3)["pieces_per_image"]
        (2.5, 2.0)
    """
    return aggregate_skeletons(skeleton_rows(masks, min_area))


def skeleton_rows(masks: np.ndarray, min_area: int = 0) -> np.ndarray:
    """Per image: skeleton length (pixels), connected pieces, largest piece's share of the length (NaN without a
    skeleton) and junctions; float64 (N, 4). :func:`aggregate_skeletons` turns rows into the statistics, so a
    bootstrap can resample images. ``min_area``: as in :func:`skeleton_statistics`."""
    from scipy import ndimage
    from skimage.morphology import skeletonize

    masks = np.asarray(masks)
    if masks.ndim != 3 or masks.dtype != bool:
        raise ValueError(f"skeleton_statistics expects (N, H, W) boolean masks, got {masks.dtype} {masks.shape}")
    if not isinstance(min_area, (int, np.integer)) or min_area < 0:
        raise ValueError(f"min_area must be an integer >= 0, got {min_area!r}")
    rows = []
    for mask in masks:
        if min_area > 1:
            pieces, _ = ndimage.label(mask, structure=np.ones((3, 3)))
            areas = np.bincount(pieces.ravel())
            mask = (areas >= min_area)[pieces] & mask
        skeleton = skeletonize(mask)
        labels, count = ndimage.label(skeleton, structure=np.ones((3, 3)))
        length = int(skeleton.sum())
        largest = np.bincount(labels.ravel())[1:].max() / length if count else np.nan
        rows.append((length, count, largest, len(vessel_bifurcations(mask))))
    return np.asarray(rows, dtype=np.float64).reshape(-1, 4)


def aggregate_skeletons(rows: np.ndarray) -> dict[str, float]:
    """The :data:`SKELETON_STATISTICS` of per-image rows from :func:`skeleton_rows`."""
    lengths, pieces, largest, junctions = rows.T
    total_pieces = pieces.sum()
    finite = largest[np.isfinite(largest)]
    return {"length_per_image": float(lengths.mean()), "pieces_per_image": float(pieces.mean()),
            "length_per_piece": float(lengths.sum() / total_pieces) if total_pieces else 0.0,
            "largest_piece": float(finite.mean()) if len(finite) else float("nan"),
            "junctions_per_image": float(junctions.mean())}


# The two skeleton statistics the vessel-tree check compares (generated vs real, relative difference).
TREE_STATISTICS = ("length_per_piece", "junctions_per_image")


def jpeg_round_trip(images: torch.Tensor, quality: int) -> torch.Tensor:
    """The images saved as JPEG at ``quality`` and read back (Pillow's libjpeg, 4:2:0 chroma for RGB): the
    degradation that public fundus and chest X-ray collections ship with.

    Args:
        images: (N, C, H, W) float in [0, 1], C = 1 or 3.
        quality: JPEG quality in [1, 95].

    Returns:
        (N, C, H, W) float32 in [0, 1], multiples of 1/255.

    Example:
        >>> flat = torch.full((1, 3, 16, 16), 0.5)
        >>> float((jpeg_round_trip(flat, 90) - flat).abs().max()) < 0.01
        True
    """
    from PIL import Image

    if images.ndim != 4 or images.shape[1] not in (1, 3):
        raise ValueError(f"jpeg_round_trip expects (N, 1 or 3, H, W) images, got {tuple(images.shape)}")
    pixels = (images.detach().cpu().clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
    out = []
    for image in pixels:
        buffer = io.BytesIO()
        Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image).save(buffer, format="JPEG", quality=quality)
        decoded = np.asarray(Image.open(io.BytesIO(buffer.getvalue())), dtype=np.float32) / 255.0
        out.append(decoded.reshape(image.shape))
    return torch.from_numpy(np.stack(out)).permute(0, 3, 1, 2).contiguous()


def relative_difference(generated: float, real: float) -> float:
    """(generated - real) / real; NaN when the real value is not positive."""
    return (generated - real) / real if real > 0 else float("nan")


@torch.no_grad()
def unet_features(model, images: torch.Tensor, batch_size: int = 50) -> np.ndarray:
    """Global-average-pooled encoder taps of a cohort-trained U-Net: one feature vector per image."""
    rows = []
    for i in range(0, len(images), batch_size):
        taps = model.forward_features(images[i:i + batch_size])
        encoder = taps[: len(taps) // 2]
        rows.append(torch.cat([tap.mean(dim=(2, 3)) for tap in encoder], dim=1))
    return torch.cat(rows).double().numpy()


def _segmenter(dataset: str, config: Config, progress: bool):
    """The U-Net of one modality (key: its phantom's name) and its check; the fundus one learns
    :func:`vessel_cohort`."""
    mask = FEATURE_MASKS[dataset]
    kind = "fundus-sg2" if dataset == PHANTOM_FUNDUS else "cxr-sg2"  # any kind of that modality: same size, cohort
    if dataset == PHANTOM_FUNDUS:
        cohort, cohort_mask = vessel_cohort(config)
    else:
        cohort, cohort_mask = load_cohort(dataset, **config.phantom_options(kind)), mask
    patch = min(64, config.image_size_of(kind))
    model = trained_segmenter(cohort, cohort_mask, epochs=config.segmenter_epochs, patch_size=patch,
                              patches_per_epoch=384, seed=config.seed, progress=progress)
    dice = model.val_dice
    check = "" if dice >= config.segmenter_min_dice else (f"{mask} segmenter validation Dice {dice:.3f} < "
                                                          f"{config.segmenter_min_dice}")
    return model.model, {"mask": mask, "val_dice": dice, "check": check, "trained_on": cohort.name}


def evaluation_reals(kind: str, config: Config, train: torch.Tensor | None = None) -> tuple[torch.Tensor, np.ndarray]:
    """The real images generator ``kind`` is compared with: ``EVAL_IMAGES`` of its cohort's training images (a
    seeded draw), float (N, C, R, R) in [0, 1] at the generator's side, and their sorted row indices. ``train``:
    those training images when the caller has them already (every one, as :func:`load_images` gives them)."""
    real_all = _as_float(load_images(kind, config)) if train is None else train
    count = min(config.eval_images, len(real_all))
    pick = np.sort(np.random.default_rng(derive_seed(config.seed, "eval", kind)).choice(len(real_all), count,
                                                                                         replace=False))
    return real_all[pick], pick


# U-Net probability at which a pixel counts as vessel (lung): the mask-fraction and vessel-tree checks and the mask
# figure all read masks at this one threshold.
MASK_THRESHOLD = 0.5


def comparison_rows(kind: str, config: Config, segmenter, mask_name: str, real: torch.Tensor, fake: torch.Tensor,
                    labels=None, *, untrained: torch.Tensor | None = None, native: torch.Tensor | None = None,
                    real_set: str = "real training images") -> list[dict]:
    """Metric rows (``kind``, ``metric``, ``value``, ``protocol``) of generated against real images: the Frechet
    distance, KID and k-NN precision / recall of the U-Net features, SWD, the vessel (lung) fraction of both sets,
    the vessel-tree statistics (fundus) and, with ``labels``, the label rows
    (:func:`~anonpaper.experiments.generators.labels.label_rows`).

    Args:
        kind: Generator kind.
        config: The chapter's config (sizes, seed).
        segmenter: The cohort-trained U-Net (features and masks).
        mask_name: ``"vessel"`` or ``"lungs"``.
        real: (N, C, R, R) real images in [0, 1] at the generator's side.
        fake: (N, C, R, R) generated images in [0, 1].
        labels: The cohort's :class:`~anonpaper.experiments.generators.labels.LabelClassifier`, or None.
        untrained: Images of the untrained generator: adds the ``FD-.../untrained`` row.
        native: The same real images at the cohort's side when it is larger: adds ``<mask>_fraction/real_native``.
        real_set: What the real images are, in words (protocol texts).
    """
    count = len(real)
    extractor = f"FD-{mask_name}-unet"
    side, cohort_side = config.image_size_of(kind), config.cohort_size_of(kind)
    sets = (("real", real), ("generated", fake)) + ((("untrained", untrained),) if untrained is not None else ())
    at_cohort_size = {name: to_cohort_size(images, config, kind) for name, images in sets}
    features = {name: unet_features(segmenter, images) for name, images in at_cohort_size.items()}
    rows = []

    def add(metric: str, value: float, protocol: str) -> None:
        rows.append({"kind": kind, "metric": metric, "value": float(value), "protocol": protocol})

    pooled = f"{len(fake)} generated (psi 1) vs {count} {real_set}; features: pooled encoder taps of the " \
             f"cohort-trained {mask_name} U-Net" + (f" (both sets at {side} px, upsampled to {cohort_side} px)"
                                                   if side < cohort_side else "")
    resamples, seed = config.bootstrap, derive_seed(config.seed, "generators-bootstrap", kind)
    bootstrap = f"SE: {resamples} bootstrap draws of both image sets"
    add(extractor, frechet_distance(features["real"], features["generated"]), pooled)
    add(f"{extractor}/se", two_sample_bootstrap_se(features["real"], features["generated"], frechet_distance,
                                                   resamples, seed), bootstrap)
    if untrained is not None:
        add(f"{extractor}/untrained", frechet_distance(features["real"], features["untrained"]),
            pooled.replace("generated (psi 1)", "untrained-generator"))
        add(f"{extractor}/untrained/se", two_sample_bootstrap_se(features["real"], features["untrained"],
                                                                 frechet_distance, resamples, seed), bootstrap)
    kid, kid_std = kernel_inception_distance(features["real"], features["generated"], subset_size=min(100, count),
                                             subsets=50, seed=config.seed)
    add(f"KID-{mask_name}-unet", kid, pooled + "; cubic-kernel MMD^2, 50 subsets")
    add(f"KID-{mask_name}-unet/std", kid_std, "standard deviation over the KID subsets")
    precision, recall = knn_precision_recall(features["real"], features["generated"], k=3)
    add("precision", precision, pooled + "; k-NN manifold (k=3, Kynkaanniemi et al. 2019)")
    add("recall", recall, pooled + "; k-NN manifold (k=3, Kynkaanniemi et al. 2019)")
    if side >= 16:
        add("SWD", swd(real, fake, seed=config.seed).value, "Laplacian-pyramid 7x7 descriptors, x1e3 (progressive GAN)")
    masks = {name: segment(segmenter, at_cohort_size[name]) >= MASK_THRESHOLD for name in ("real", "generated")}
    per_image = {name: mask.reshape(len(mask), -1).mean(1).astype(np.float64) for name, mask in masks.items()}
    for name, fractions in per_image.items():
        add(f"{mask_name}_fraction/{name}", float(fractions.mean()),
            f"{mask_name} U-Net, threshold {MASK_THRESHOLD:g}, all pixels")
        add(f"{mask_name}_fraction/{name}/se", float(fractions.std(ddof=1) / np.sqrt(len(fractions))),
            "SE of the mean over images")
    add(f"{mask_name}_fraction/relative_difference/se",
        two_sample_bootstrap_se(per_image["real"], per_image["generated"],
                                lambda real_rows, fake_rows: relative_difference(fake_rows.mean(), real_rows.mean()),
                                resamples, seed), bootstrap + "; (generated - real) / real")
    if KINDS[kind][0] == PHANTOM_FUNDUS:  # vessels form trees; lungs do not
        # The tree check's own floor: the same real images saved as JPEG must read as the same trees.
        quality = config.tree_jpeg_quality
        masks["real_jpeg"] = segment(segmenter, to_cohort_size(jpeg_round_trip(real, quality), config, kind)) \
            >= MASK_THRESHOLD
        skeletons = {name: skeleton_rows(mask, config.tree_min_area) for name, mask in masks.items()}
        cleaned = (f"; mask pieces under {config.tree_min_area} px dropped" if config.tree_min_area > 1 else "")
        aggregated = {name: aggregate_skeletons(rows_of_set) for name, rows_of_set in skeletons.items()}
        for name, statistics in aggregated.items():
            for statistic, value in statistics.items():
                add(f"{mask_name}_skeleton/{statistic}/{name}", value,
                    f"{mask_name} U-Net masks (threshold {MASK_THRESHOLD:g}){cleaned} skeletonised; "
                    f"{SKELETON_STATISTICS[statistic]}"
                    + (f"; the real images saved as JPEG at quality {quality}" if name == "real_jpeg" else ""))
        real_statistics, saved = aggregated["real"], aggregated["real_jpeg"]
        changes = [abs(relative_difference(saved[statistic], real_statistics[statistic]))
                   for statistic in TREE_STATISTICS]
        add(f"{mask_name}_skeleton/jpeg_change", max(changes) if all(map(math.isfinite, changes)) else float("nan"),
            f"largest |relative change| of the tree statistics ({', '.join(TREE_STATISTICS)}) of the real images "
            f"when saved as JPEG at quality {quality}")
        for statistic in TREE_STATISTICS:
            def relative(real_rows, fake_rows, statistic=statistic):
                return relative_difference(aggregate_skeletons(fake_rows)[statistic],
                                           aggregate_skeletons(real_rows)[statistic])

            add(f"{mask_name}_skeleton/{statistic}/relative_difference/se",
                two_sample_bootstrap_se(skeletons["real"], skeletons["generated"], relative, resamples, seed),
                bootstrap + "; (generated - real) / real")
    if native is not None:  # what resampling to the generator's size costs the instrument
        add(f"{mask_name}_fraction/real_native", float((segment(segmenter, native) >= MASK_THRESHOLD).mean()),
            f"{mask_name} U-Net on the same real images at the cohort's {cohort_side} px (not resampled)")
    if labels is not None:
        from anonpaper.experiments.generators.labels import label_rows

        rows.extend(label_rows(kind, config, labels, real, fake))
    return rows


# Frequency bands (fractions of the Nyquist frequency) in which the power spectra of generated and real images are
# compared: the coarsest band holds the disc, arcades and lesion clusters; the finest, 1-2 px vessels and specks.
SPECTRUM_BANDS = ((0.05, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0))


def band_power_db(real_spectra: np.ndarray, fake_spectra: np.ndarray, band: tuple[float, float]) -> float:
    """10 log10 of the generated over the real images' mean power in ``band`` (fractions of Nyquist) of their
    :func:`~anonpaper.metrics.distribution.radial_power_spectrum` rows (N, R): negative where the generated images
    carry less energy (-3 dB: half). NaN when the band holds no ring or the real power there is 0.

    Example:
        >>> real = np.ones((2, 9)); fake = np.full((3, 9), 0.5)
        >>> round(band_power_db(real, fake, (0.5, 1.0)), 2)
        -3.01
    """
    rings = np.arange(real_spectra.shape[1]) / (real_spectra.shape[1] - 1)
    inside = (rings > band[0]) & (rings <= band[1])
    real_power, fake_power = real_spectra[:, inside].mean(), fake_spectra[:, inside].mean()
    if not inside.any() or not real_power > 0:
        return float("nan")
    return float(10 * np.log10(fake_power / real_power))


def spectrum_rows(kind: str, config: Config, real: torch.Tensor, fake: torch.Tensor) -> tuple[list[dict], dict]:
    """The power spectra of generated against real images (a diagnostic, no claim): per :data:`SPECTRUM_BANDS`
    band, the generated images' power relative to the real ones' in dB with a bootstrap SE, and the mean spectra
    (``{"real", "generated"}``: float64 (R,)) for the figure. A generator that blurs shows a deficit in the finest
    bands; one that draws too little structure, in the coarse ones."""
    spectra = {"real": radial_power_spectrum(real), "generated": radial_power_spectrum(fake)}
    rows = []
    resamples, seed = config.bootstrap, derive_seed(config.seed, "generators-bootstrap", kind, "spectrum")
    protocol = (f"{len(fake)} generated (psi 1) vs {len(real)} real training images; radially averaged power "
                f"spectrum of the central {spectra['real'].shape[1] * 2 - 2} px square (mean removed, Hann window, "
                f"mean over channels); 10 log10(generated / real) of the mean power in the band")
    for band in SPECTRUM_BANDS:
        name = f"spectrum/{band[0]:g}-{band[1]:g}_nyquist/db"
        rows.append({"kind": kind, "metric": name, "value": band_power_db(spectra["real"], spectra["generated"], band),
                     "protocol": protocol})
        rows.append({"kind": kind, "metric": f"{name}/se", "protocol": f"SE: {resamples} bootstrap draws of both "
                                                                        "image sets",
                     "value": two_sample_bootstrap_se(spectra["real"], spectra["generated"],
                                                      lambda real_rows, fake_rows, band=band:
                                                      band_power_db(real_rows, fake_rows, band), resamples, seed)})
    return rows, {name: values.mean(0) for name, values in spectra.items()}


NEAREST_SHOWN = 8  # generated samples shown beside their nearest training image
MASKS_SHOWN = 8  # real and generated images shown beside the U-Net masks the checks read


MEMORISATION_CHUNK = 500  # training images converted to float at a time (a population holds thousands)


def memorisation_rows(kind: str, config: Config, segmenter, mask_name: str, train: np.ndarray | torch.Tensor,
                      generated: torch.Tensor, held_out: torch.Tensor,
                      train_name: str = "training images") -> tuple[list[dict], np.ndarray]:
    """The memorisation check: the distance of each generated sample to its nearest training image against that of
    held-out real images (never trained on) to theirs, in the U-Net's pooled features.

    A generator that copies its training images puts its samples closer to them than unseen real images are; the
    ratio of the mean distances (generated / held-out) is about 1 or more when it does not. Its SE comes from
    bootstrap draws of both sets.

    Args:
        train: Every image the generator learned (:func:`learned_images`): uint8 (T, H, W[, C]), read a chunk at a
            time, or float (T, C, R, R) in [0, 1], at the generator's side.
        generated: (N, C, R, R) samples; ``held_out``: (H, C, R, R) real images it never learned.
        train_name: What ``train`` is, for the protocol.

    Returns:
        ``(metric rows, nearest training index of each generated sample (N,))``.
    """
    def features_of(images) -> np.ndarray:
        chunks = [images[start:start + MEMORISATION_CHUNK] for start in range(0, len(images), MEMORISATION_CHUNK)]
        return np.concatenate([unet_features(segmenter, to_cohort_size(
            _as_float(chunk) if isinstance(chunk, np.ndarray) else chunk, config, kind)) for chunk in chunks])

    features = {name: features_of(images)
                for name, images in (("train", train), ("generated", generated), ("held_out", held_out))}
    rows = []

    def add(metric: str, value: float, protocol: str) -> None:
        rows.append({"kind": kind, "metric": f"memorisation/{metric}", "value": float(value), "protocol": protocol})

    protocol = (f"Euclidean distance to the nearest of the {train_name} in the pooled encoder taps of the "
                f"{mask_name} U-Net")
    generated_distance, nearest = nearest_neighbours(features["generated"], features["train"])
    add("nn_distance/generated", generated_distance.mean(), f"{len(generated)} generated (psi 1); {protocol}")
    add("n/train", len(train), train_name)
    add("n/held_out", len(held_out), "held-out real test images")
    if len(held_out) >= 2:
        held_distance, _ = nearest_neighbours(features["held_out"], features["train"])
        add("nn_distance/held_out", held_distance.mean(), f"{len(held_out)} held-out real test images; {protocol}")
        add("ratio", generated_distance.mean() / held_distance.mean(), "generated / held-out mean distance")
        add("ratio/se", two_sample_bootstrap_se(held_distance, generated_distance,
                                                lambda held, fake: float(fake.mean() / held.mean()),
                                                config.bootstrap, derive_seed(config.seed, "memorisation", kind)),
            f"{config.bootstrap} bootstrap draws of both sets")
    return rows, nearest


def evaluation_instruments(kind: str, config: Config, progress: bool = True) -> tuple[tuple[Any, dict], Any]:
    """The instruments that read generator ``kind``'s images, trained on its modality's cohort (or cached):
    ``((U-Net, {"mask", "val_dice", "check", "trained_on"}), label classifier or None)``."""
    from anonpaper.experiments.generators.labels import label_classifier

    segmenter = _segmenter(KINDS[kind][0], config, progress)
    classifier = label_classifier(kind, config, backbone=config.classifier_backbone, epochs=config.classifier_epochs,
                                  device=config.device, progress=progress)
    return segmenter, classifier


def evaluate(trained: TrainedGenerator, config: Config, segmenter, mask_name: str,
             labels=None, progress: bool = False) -> tuple[list[dict], dict]:
    """Metric rows and sample arrays of one generator (see :class:`Outcome`); ``labels``, a
    :class:`~anonpaper.experiments.generators.labels.LabelClassifier` of its cohort, adds the label rows. The
    distribution, mask and label checks read the cohort's training images; the memorisation check reads what the
    generator learned (:func:`learned_images`; ``progress``: a bar while a population renders)."""
    kind, generator = trained.kind, trained.generator
    train_images = load_images(kind, config)
    train_all = _as_float(train_images)
    real, pick = evaluation_reals(kind, config, train_all)
    count = len(real)
    seed = derive_seed(config.seed, "samples", kind)
    fake = generate(generator, count, seed)
    untrained = generate(StyleGenerator(config.stylegan_config(kind), seed=derive_seed(config.seed, "G", kind)),
                         count, seed)
    native = None
    if config.image_size_of(kind) < config.cohort_size_of(kind):
        native = _as_float(kind_cohort(kind, config).split("train").load_images())[pick]
    rows = comparison_rows(kind, config, segmenter, mask_name, real, fake, labels, untrained=untrained,
                           native=native)
    spectrum, mean_spectra = spectrum_rows(kind, config, real, fake)
    rows.extend(spectrum)
    test_all = _as_float(load_images(kind, config, "test"))
    learned, learned_table, learned_name = learned_images(trained, config, progress, cohort_train=train_images)
    if labels is not None:
        from anonpaper.experiments.generators.labels import reference_rows

        real_table = kind_cohort(kind, config).split("train").table.iloc[pick]
        rows.extend(reference_rows(kind, labels, learned_table, real_table, learned_name))
    memorisation, nearest = memorisation_rows(kind, config, segmenter, mask_name, learned, fake,
                                              test_all[:config.eval_images], learned_name)
    rows.extend(memorisation)

    def add(metric: str, value: float, protocol: str) -> None:
        rows.append({"kind": kind, "metric": metric, "value": float(value), "protocol": protocol})

    held_out = test_all[: config.projector_images]
    samples = {"generated": fake[:16].numpy(), "real": real[:16].numpy(), "untrained": untrained[:8].numpy(),
               "truncation": np.stack([generate(generator, 6, seed, psi).numpy() for psi in TRUNCATIONS]),
               "projected_target": held_out.numpy(),
               "nearest_generated": fake[:NEAREST_SHOWN].numpy(),
               "nearest_train": _as_float(learned[nearest[:NEAREST_SHOWN]]).numpy(),
               **{f"spectrum_{name}": values for name, values in mean_spectra.items()}}
    for name, images in (("real", real), ("generated", fake)):
        # What the mask-fraction and vessel-tree checks read: the U-Net's masks at its threshold, cohort side.
        shown = to_cohort_size(images[:MASKS_SHOWN], config, kind)
        samples[f"{name}_mask"] = (segment(segmenter, shown) >= MASK_THRESHOLD)[:, None].astype(np.float32)
    if len(held_out):
        for space, label in (("w", "W"), ("w+", "W+")):
            result = project(generator, held_out * 2 - 1, space=space, num_steps=config.projector_steps,
                             w_avg_samples=2000, seed=config.seed)
            reconstruction = to_unit_range(result.reconstruction).clamp(0, 1)
            protocol = (f"{len(held_out)} held-out test images, {config.projector_steps} Adam steps, "
                        f"{result.distance_name} loss")
            per_image_psnr = psnr(reconstruction, held_out, reduction="none").double()
            add(f"projector_{label}/PSNR", psnr(reconstruction, held_out).item(), protocol + "; dB, data range 1")
            add(f"projector_{label}/PSNR/se", float(per_image_psnr.std() / len(per_image_psnr) ** 0.5)
                if len(per_image_psnr) > 1 else float("nan"), "SE of the mean over the held-out images")
            add(f"projector_{label}/SSIM", ssim(reconstruction, held_out).item(), protocol + "; Gaussian 11x11")
            lpips = domain_lpips(to_cohort_size(reconstruction, config, kind), to_cohort_size(held_out, config, kind),
                                 segmenter.forward_features)
            add(f"projector_{label}/LPIPS-{mask_name}-unet", lpips.item(),
                protocol + f"; domain LPIPS (paper 1) on the {mask_name} U-Net's 8 feature taps, in [0, 2], lower is "
                           "closer")
            samples["projected_" + ("wplus" if space == "w+" else "w")] = reconstruction.numpy()
    add("kimg", trained.kimg, f"source: {trained.source}")
    add("train_s_per_kimg", trained.seconds_per_kimg, "wall seconds of training / kimg (NaN: not trained here)")
    return rows, samples


def run(config: Config, kinds: tuple[str, ...] | None = None, progress: bool = True) -> Outcome:
    """Load or train every generator, then evaluate each against its cohort."""
    start = time.perf_counter()
    kinds = tuple(kinds or KINDS)
    check_data(config)  # a missing or broken copy stops here, before any training
    generators = {kind: load_generator(kind, config, progress=progress) for kind in kinds}
    segmenters, classifiers, rows, samples = {}, {}, [], {}
    for kind in kinds:
        dataset = KINDS[kind][0]
        if dataset not in segmenters:
            segmenters[dataset], classifiers[dataset] = evaluation_instruments(kind, config, progress)
        model, info = segmenters[dataset]
        kind_rows, samples[kind] = evaluate(generators[kind], config, model, info["mask"], classifiers[dataset],
                                            progress)
        rows.extend(kind_rows)
    return Outcome(config, generators, pd.DataFrame(rows), samples,
                   {dataset: info for dataset, (_, info) in segmenters.items()}, time.perf_counter() - start,
                   {dataset: classifier for dataset, classifier in classifiers.items() if classifier is not None})


def export_outcome(outcome: Outcome, directory: str | Path | None = None) -> list[Path]:
    """Export every generator of a run into ``directory`` (default: the project's ``weights/``) with its metrics,
    for a later session to load instead of training (run at ``paper`` on a GPU, then commit ``weights/``).

    Example::

        outcome = chapter.run(chapter.Config(**paper_parameters))
        chapter.export_outcome(outcome)
    """
    directory = Path(directory) if directory is not None else PROJECT_ROOT / "weights"
    paths = []
    for kind, trained in outcome.generators.items():
        rows = outcome.metrics[outcome.metrics["kind"] == kind]
        metrics = {row.metric: row.value for row in rows.itertuples()}
        data = {"dataset": outcome.config.dataset_name(kind), **outcome.config.cohort_options(kind)}
        paths.append(export_weights(trained.generator, directory, kind=kind, kimg=trained.kimg,
                                    seed=outcome.config.seed, metrics=metrics, data=data))
    return paths
