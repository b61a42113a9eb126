"""Paper-profile readiness: a dry run that times one step of every trainer of a chapter and projects its schedule.

``anonpaper run NAME --profile paper --dry-run`` builds the chapter's config at the profile (``notebooks/params.yaml``
through :mod:`anonpaper.runner.studies`), allocates every network the chapter trains at the profile's sizes on the
chosen device (``ANONPAPER_DEVICE``, else CUDA when available), runs a few optimisation steps of each network's
own trainer (:mod:`anonpaper.train`) on random tensors of the right shapes and batch size, and projects the hours
of the profile's schedule from the fastest step after a warm-up. It never executes the notebook and never reads or
writes the artifact cache or ``runs/``.

What a chapter trains is listed here, per chapter, as :class:`Trainer` entries built from its config: the
network (the chapter's own builders where it has them), the input, the batch, how many times the chapter trains it
and the steps of its schedule (epochs x steps per epoch from the cohort's training-split size, or kimg x 1000 /
batch for the GANs). The list is read from the chapters' pipelines; a config field that is renamed makes
``tests/test_dry_run.py`` fail, so the list cannot silently drift from the configs.

How a step is timed: the trainer runs one epoch (or a few GAN steps) on random data; for the trainers built on
:func:`anonpaper.train.loop.fit` a global optimiser-step hook stamps every optimiser step (after a CUDA
synchronisation), and a step is the time between two stamps of one optimiser, so set-up and the end-of-epoch
evaluation are not counted. The GAN trainers (:func:`~anonpaper.train.gan.train_gan` and GMIA's co-training) log
their own cumulative seconds per step; they run with the lazy regularisers at short intervals so that the main
phases and each regulariser are timed apart, and a projected step is ``main + path_length / interval + R1 /
interval`` at the recipe's intervals. The first step of every run is a warm-up and is not used.

What a projection leaves out, and says so: early stopping (the steps are the schedule's maximum), evaluation,
inversion, latent optimisation, S-space scores and other work that is not a trainer's optimisation step; a network
that a chapter loads from another chapter's cache is counted in both; ADA's augmentation runs at probability 0.
``--max-batch B`` times a larger batch at ``B`` and ``2 B`` images and extrapolates along the straight line through
the two (a fixed cost per step plus a cost per image; a GAN linearly from ``B``), marked ``scaled``: on a CPU a
step's arithmetic grows about linearly with the batch, on a GPU it does not, so GPU projections are timed at the
full batch. ``--skip-kind gan`` lists a kind of trainer without timing it (a paper-size StyleGAN step takes many
minutes on a CPU).

Example (the smoke profile's first chapter on any machine; a CPU projection of the paper profile)::

    anonpaper run 01_snow_vs_snow --profile smoke --dry-run --dry-run-out dry-run.json
    anonpaper run 04_gmia --profile paper --dry-run --max-batch 8 --repeats 2 --skip-kind gan --skip-kind co-training
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch import nn

# The optimiser-step hook lives in torch.optim.optimizer (PyTorch >= 2.0).
from torch.optim.optimizer import register_optimizer_step_post_hook


# ---------------------------------------------------------------------------------------------------------------
# what a chapter trains
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Trainer:
    """One network a chapter trains, at a profile's sizes.

    Attributes:
        name: What the chapter calls it, e.g. ``"sex attacker and DR classifiers (resnet200d)"``.
        batch: Images (or vectors) per optimisation step in the chapter.
        runs: How many times the chapter trains this network (seeds, releases, folds...).
        steps: Optimisation steps of all runs together in the profile's schedule; None when it cannot be derived
            (``note`` says why).
        schedule: How ``steps`` follows from the config, e.g. ``"3 runs x 30 epochs x 82 steps"``.
        build: Builds the network(s), seeded: a module or a tuple of modules (everything the trainer holds).
        train: ``train(networks, batch, steps, device) -> seconds`` runs the chapter's trainer for ``steps``
            optimisation steps of ``batch`` on random tensors and returns the seconds of each step after the
            warm-up (GAN trainers: the projected mean step, see the module docstring).
        kind: The package trainer it runs (``"classifier"``, ``"gan"``, ...).
        batch_multiple: The batch a measurement may use must be a multiple of this (StyleGAN's minibatch-std
            groups: 4).
        note: What the projection assumes or leaves out for this trainer.
    """

    name: str
    batch: int
    runs: int
    steps: int | None
    schedule: str
    build: Callable[[], Any]
    train: Callable[[Any, int, int, torch.device], list[float]]
    kind: str = ""
    batch_multiple: int = 1
    note: str = ""


def epoch_steps(images: int, batch: int) -> int:
    """Optimisation steps of one epoch over ``images`` in batches of ``batch``, as the trainers batch them (a last
    batch of one image is skipped: BatchNorm cannot train on it).

    >>> epoch_steps(100, 32), epoch_steps(97, 32), epoch_steps(31, 32)
    (4, 3, 1)
    """
    return images // batch + int(images % batch >= 2)


def _epochs(epochs: int, images: int, batch: int, runs: int = 1) -> tuple[int, str]:
    """``(steps, schedule text)`` of ``runs`` trainings of ``epochs`` epochs over ``images``."""
    per_epoch = epoch_steps(images, batch)
    text = f"{epochs} epochs x {per_epoch} steps ({images} images / batch {batch})"
    return runs * epochs * per_epoch, (f"{runs} runs x " if runs > 1 else "") + text


def _default(function: Callable, name: str) -> Any:
    """The default of ``function``'s argument ``name`` (the settings a chapter leaves to a helper's defaults)."""
    return inspect.signature(function).parameters[name].default


@dataclass(frozen=True)
class CohortSize:
    """What a schedule needs of a cohort: images per split, patients (all, and of the training split), the table's
    columns."""

    images: dict[str, int]
    patients: int
    train_patients: int
    columns: tuple[str, ...]

    @property
    def train(self) -> int:
        return self.images.get("train", 0)

    @property
    def total(self) -> int:
        return sum(self.images.values())


def cohort_size(dataset: str, split_column: str = "split", **options: Any) -> CohortSize:
    """The sizes of a registered cohort, from its table only (a phantom renders no image for it)."""
    from anonpaper.data.registry import load_cohort

    table = load_cohort(dataset, **options).table
    images = {str(name): int(count) for name, count in table[split_column].value_counts().items()}
    train_patients = int(table.loc[table[split_column] == "train", "patient_id"].nunique())
    return CohortSize(images, int(table["patient_id"].nunique()), train_patients, tuple(table.columns))


def _train_size(dataset: str, split_column: str = "split", **options: Any) -> int:
    """Images of a cohort's training split (see :func:`cohort_size`)."""
    return cohort_size(dataset, split_column, **options).train


def _seeded(seed: int, build: Callable[[], Any]) -> Callable[[], Any]:
    def seeded_build():
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return build()

    return seeded_build


# ---------------------------------------------------------------------------------------------------------------
# random inputs and the step clocks
# ---------------------------------------------------------------------------------------------------------------
def random_images(count: int, channels: int, size: int, seed: int = 0) -> np.ndarray:
    """uint8 random images ``(count, size, size)`` (one channel) or ``(count, size, size, channels)``."""
    shape = (count, size, size) if channels == 1 else (count, size, size, channels)
    return np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8)


@contextlib.contextmanager
def optimizer_step_clock(device: torch.device) -> Iterator[dict[int, list[float]]]:
    """Stamps every optimiser step taken inside the block: ``{id(optimizer): [perf_counter after each step]}``
    (after a CUDA synchronisation, so a stamp marks finished work)."""
    stamps: dict[int, list[float]] = {}

    def stamp(optimizer, args, kwargs) -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        stamps.setdefault(id(optimizer), []).append(time.perf_counter())

    handle = register_optimizer_step_post_hook(stamp)
    try:
        yield stamps
    finally:
        handle.remove()


def step_intervals(stamps: dict[int, list[float]]) -> list[float]:
    """Seconds between consecutive steps of the optimiser that stepped most often (every optimiser of a ``fit``
    trainer steps once per iteration, so any one of them marks iterations).

    >>> step_intervals({1: [0.0, 1.0, 3.0], 2: [0.5]})
    [1.0, 2.0]
    """
    if not stamps:
        return []
    times = max(stamps.values(), key=len)
    return [later - earlier for earlier, later in zip(times, times[1:])]


def _fit_trainer(run: Callable[[Any, int, int, torch.device], Any]) -> Callable[..., list[float]]:
    """A ``Trainer.train`` from ``run(networks, batch, steps, device)``, which calls a ``fit``-based trainer."""

    def train(networks, batch: int, steps: int, device: torch.device) -> list[float]:
        with optimizer_step_clock(device) as stamps:
            run(networks, batch, steps, device)
        return step_intervals(stamps)

    return train


# Lazy regulariser intervals of a timed GAN run: steps 0 (warm-up: both), 1 (main only), 2 (path length), 3 (R1),
# 4 (path length), 5 (main only), so that the main phases and each regulariser are timed apart.
TIMING_PATH_LENGTH_INTERVAL, TIMING_R1_INTERVAL = 2, 3


def gan_step_seconds(step_seconds: list[float], recipe, timed) -> float:
    """The mean step of a GAN recipe from a timed run's step times.

    Args:
        step_seconds: Seconds of steps 0, 1, ... of a run with ``timed``'s intervals (step 0 is a warm-up).
        recipe: The :class:`~anonpaper.train.gan.GANTrainingConfig` of the chapter (its lazy intervals).
        timed: The config the run used (:data:`TIMING_PATH_LENGTH_INTERVAL`, :data:`TIMING_R1_INTERVAL`).

    Returns:
        ``main + path_length_extra / recipe interval + r1_extra / recipe interval`` (extras clipped at 0).

    Example:
        >>> from anonpaper.train.gan import GANTrainingConfig
        >>> timed = GANTrainingConfig(path_length_interval=2, r1_interval=3)
        >>> gan_step_seconds([9.0, 1.0, 1.4, 1.8, 1.4, 1.0], GANTrainingConfig(), timed)  # 1 + 0.4 / 4 + 0.8 / 16
        1.15
    """
    uses_path_length = timed.path_length_weight > 0
    uses_r1 = timed.r1_gamma > 0
    groups: dict[tuple[bool, bool], list[float]] = {}
    for index, seconds in enumerate(step_seconds[1:], start=1):
        key = (uses_path_length and index % timed.path_length_interval == 0,
               uses_r1 and index % timed.r1_interval == 0)
        groups.setdefault(key, []).append(seconds)
    main = min(groups.get((False, False), [math.inf]))
    if not math.isfinite(main):
        raise ValueError(f"no step without a regulariser among {len(step_seconds)} timed steps")
    total = main
    if uses_path_length and (True, False) in groups:
        total += max(0.0, min(groups[(True, False)]) - main) / recipe.path_length_interval
    if uses_r1 and (False, True) in groups:
        total += max(0.0, min(groups[(False, True)]) - main) / recipe.r1_interval
    return round(total, 12)


def _gan_trainer(run: Callable[[Any, Any, torch.device], Any], recipe) -> Callable[..., list[float]]:
    """A ``Trainer.train`` for a GAN trainer: ``run(networks, config, device) -> history`` (with cumulative
    ``seconds`` per step) runs the recipe at the timing intervals; the result is the projected mean step."""

    def train(networks, batch: int, steps: int, device: torch.device) -> list[float]:
        timed = dataclasses.replace(recipe, total_steps=steps, batch_size=batch, batch_gpu=None,
                                    path_length_interval=TIMING_PATH_LENGTH_INTERVAL,
                                    r1_interval=TIMING_R1_INTERVAL, checkpoint_every=0, sample_every=0,
                                    metrics_every=0, log_every=1, output_dir=None, progress=False)
        history = run(networks, timed, device)
        cumulative = history["seconds"].dropna().to_numpy()
        seconds = np.diff(np.concatenate([[0.0], cumulative])).tolist()
        return [gan_step_seconds(seconds, recipe, timed)]

    return train


# ---------------------------------------------------------------------------------------------------------------
# trainers by kind (each runs the package's own trainer)
# ---------------------------------------------------------------------------------------------------------------
def _settings(batch: int, device: torch.device, **changes):
    from anonpaper.train.loop import TrainSettings

    return TrainSettings(epochs=1, batch_size=batch, device=device, progress=False, **changes)


def classifier_trainer(name: str, build: Callable[[], nn.Module], *, channels: int, size: int, classes: int,
                       batch: int, runs: int, steps: int | None, schedule: str, loss: str = "ce",
                       augment: Callable[[], Any] | None = None, note: str = "") -> Trainer:
    """A network trained by :func:`anonpaper.train.classifier.train_classifier` on ``(size, size)`` images."""
    from anonpaper.train.classifier import train_classifier

    def run(network, batch_size, count, device):
        images = random_images(batch_size * count, channels, size)
        labels = np.arange(len(images)) % classes
        train_classifier(network, (images, labels), (images[:2], labels[:2]), _settings(batch_size, device),
                         loss=loss, augment=augment() if augment else None)

    return Trainer(name, batch, runs, steps, schedule, build, _fit_trainer(run), kind="classifier", note=note)


def multilabel_trainer(name: str, build: Callable[[], nn.Module], *, channels: int, size: int, labels: int,
                       batch: int, runs: int, steps: int | None, schedule: str, note: str = "") -> Trainer:
    """A network trained by :func:`anonpaper.train.multilabel.train_multilabel_classifier`."""
    from anonpaper.train.multilabel import train_multilabel_classifier

    def run(network, batch_size, count, device):
        images = random_images(batch_size * count, channels, size)
        targets = (np.arange(len(images))[:, None] + np.arange(labels)) % 2
        train_multilabel_classifier(network, (images, targets), _settings(batch_size, device))

    return Trainer(name, batch, runs, steps, schedule, build, _fit_trainer(run), kind="multilabel", note=note)


def embedding_trainer(name: str, build: Callable[[], nn.Module], *, channels: int, size: int, identities: int,
                      batch: int, runs: int, steps: int | None, schedule: str, note: str = "") -> Trainer:
    """A network trained by :func:`anonpaper.train.embedding.train_embedding` (ArcFace over ``identities``)."""
    from anonpaper.train.embedding import train_embedding

    def run(network, batch_size, count, device):
        images = random_images(batch_size * count, channels, size)
        # As many identities as the chapter's head has, up to one per image (the head is a small share of a step).
        labels = np.arange(len(images)) % max(2, min(identities, len(images)))
        train_embedding(network, images, labels, _settings(batch_size, device))

    return Trainer(name, batch, runs, steps, schedule, build, _fit_trainer(run), kind="embedding", note=note)


def segmenter_trainer(name: str, build: Callable[[], nn.Module], *, channels: int, size: int, patch: int,
                      batch: int, runs: int, steps: int | None, schedule: str, loss: str = "bce",
                      note: str = "") -> Trainer:
    """A segmenter trained by :func:`anonpaper.train.segmenter.train_segmenter` on random ``patch`` patches of
    ``(size, size)`` images."""
    from anonpaper.train.segmenter import train_segmenter

    def run(network, batch_size, count, device):
        images = random_images(2, channels, size)
        masks = random_images(2, 1, size, seed=1) > 200
        train_segmenter(network, images, masks, _settings(batch_size, device), patch_size=patch,
                        patches_per_epoch=batch_size * count, loss=loss)

    return Trainer(name, batch, runs, steps, schedule, build, _fit_trainer(run), kind="segmenter", note=note)


def keypoint_trainer(name: str, build: Callable[[], nn.Module], *, channels: int, size: int, batch: int, runs: int,
                     steps: int | None, schedule: str, dense_anchors: int, acquisition_strength: float,
                     note: str = "") -> Trainer:
    """A :class:`~anonpaper.models.keypoints.KeypointNet` trained by
    :func:`anonpaper.train.keypoints.train_keypoint_detector` (32 random keypoints per image)."""
    from anonpaper.train.keypoints import train_keypoint_detector

    def run(network, batch_size, count, device):
        images = random_images(batch_size * count, channels, size)
        points = np.random.default_rng(2).uniform(size * 0.2, size * 0.8, (len(images), 32, 2))
        train_keypoint_detector(network, images, list(points), _settings(batch_size, device),
                                dense_anchors=dense_anchors, acquisition_strength=acquisition_strength)

    return Trainer(name, batch, runs, steps, schedule, build, _fit_trainer(run), kind="keypoints", note=note)


def gan_trainer(name: str, build: Callable[[], tuple], recipe, *, channels: int, size: int, runs: int,
                steps: int, schedule: str, extra_loss: Callable[[], Any] | None = None, note: str = "") -> Trainer:
    """A StyleGAN trained by :func:`anonpaper.train.gan.train_gan` with ``recipe`` (a ``GANTrainingConfig``)."""
    from anonpaper.train.gan import train_gan

    def run(networks, config, device):
        generator, discriminator = networks
        images = random_images(config.batch_size, channels, size)
        if images.ndim == 3:
            images = images[..., None]
        return train_gan(generator, discriminator, images, config,
                         extra_generator_loss=extra_loss() if extra_loss else None, device=device,
                         resume=False).history

    return Trainer(name, recipe.batch_size, runs, steps, schedule, build, _gan_trainer(run, recipe), kind="gan",
                   batch_multiple=4, note=note)


def co_training_trainer(name: str, build: Callable[[], tuple], settings, perceptual: Callable[[], Any], *,
                        channels: int, size: int, runs: int, steps: int, schedule: str, note: str = "") -> Trainer:
    """GMIA's co-training of encoder, synthesis network and discriminator (:func:`anonpaper.train.gmia.co_train`)."""
    from anonpaper.train.gmia import co_train

    def run(networks, config, device):
        encoder, generator, discriminator = networks
        images = random_images(config.batch_size, channels, size)
        return co_train(encoder, generator, discriminator, images, dataclasses.replace(settings, gan=config),
                        perceptual(), device=device).history

    return Trainer(name, settings.gan.batch_size, runs, steps, schedule, build, _gan_trainer(run, settings.gan),
                   kind="co-training", batch_multiple=4, note=note)


def encoder_trainer(name: str, build: Callable[[], tuple], settings, perceptual: Callable[[], Any], *,
                    channels: int, size: int, runs: int, steps: int, schedule: str, note: str = "") -> Trainer:
    """An encoder trained through a frozen generator (:func:`anonpaper.train.gmia.train_encoder`)."""
    from anonpaper.train.gmia import train_encoder

    def run(networks, batch_size, count, device):
        encoder, generator = networks
        gan = dataclasses.replace(settings.gan, total_steps=count, batch_size=batch_size, progress=False,
                                  output_dir=None)
        train_encoder(encoder, generator, random_images(batch_size, channels, size),
                      dataclasses.replace(settings, gan=gan, encoder_epoch_steps=count), perceptual(), device=device)

    return Trainer(name, settings.gan.batch_size, runs, steps, schedule, build, _fit_trainer(run), kind="encoder",
                   note=note)


def disentangler_trainer(name: str, build: Callable[[], nn.Module], weights, *, size: int, identities: int,
                         batch: int, runs: int, steps: int | None, schedule: str, discriminator_lr: float | None,
                         note: str = "") -> Trainer:
    """The disentanglement network (:func:`anonpaper.train.disentangle.train_disentangler`), one-channel images."""
    from anonpaper.train.disentangle import train_disentangler

    def run(network, batch_size, count, device):
        images = random_images(batch_size * count, 1, size)
        codes = np.arange(len(images))
        split = {"images": images, "disease": codes % 2, "identity": (codes // 2) % max(2, identities)}
        val = {name: values[:4] for name, values in split.items()}
        train_disentangler(network, split, val, _settings(batch_size, device), weights,
                           discriminator_lr=discriminator_lr)

    return Trainer(name, batch, runs, steps, schedule, build, _fit_trainer(run), kind="disentangler", note=note)


def identity_vae_trainer(name: str, build: Callable[[], nn.Module], *, identity_dim: int, batch: int, runs: int,
                         steps: int | None, schedule: str, note: str = "") -> Trainer:
    """The identity VAE (:func:`anonpaper.train.disentangle.train_identity_vae`), timed with the hinge privacy term."""
    from anonpaper.train.disentangle import train_identity_vae

    def run(network, batch_size, count, device):
        vectors = torch.randn(batch_size * count, identity_dim, generator=torch.Generator().manual_seed(0))
        train_identity_vae(network, vectors, _settings(batch_size, device), privacy="hinge",
                           identities=np.arange(len(vectors)) % 4)

    return Trainer(name, batch, runs, steps, schedule, build, _fit_trainer(run), kind="identity-vae", note=note)


# ---------------------------------------------------------------------------------------------------------------
# the chapters
# ---------------------------------------------------------------------------------------------------------------
def _cohorts(config, root) -> list[Trainer]:
    """00_cohorts: the learnability checks (classifiers), the chest X-ray identity embedding."""
    from anonpaper.experiments.cohorts.checks import verification_on_heldout_patients
    from anonpaper.models.classifiers import build_classifier
    from anonpaper.models.embedding import EmbeddingNet
    from anonpaper.train.augment import acquisition_augmentation

    backbone, batch, seed = config.backbone, config.batch_size, config.seed
    retina = _train_size("phantom-retina", n_patients=config.retina_patients, image_size=config.retina_image_size,
                         seed=seed)
    cxr_size = cohort_size("phantom-cxr", n_patients=config.cxr_patients, image_size=config.cxr_image_size, seed=seed)
    cxr = cxr_size.train
    iris_known = _train_size("phantom-iris", "split_within_subject", n_subjects=config.iris_subjects,
                             image_size=config.iris_image_size, seed=seed)
    iris_disease = _train_size("phantom-iris", n_subjects=config.iris_disease_subjects,
                               image_size=config.iris_image_size, seed=seed)
    embedding_dim = _default(verification_on_heldout_patients, "embedding_dim")
    trainers = []
    steps, text = _epochs(config.epochs, retina, batch, runs=3)
    trainers.append(classifier_trainer(
        f"retina classifiers: sex, sex without vessels, DR ({backbone})", _seeded(seed, lambda: build_classifier(
            backbone, 3, 3)), channels=3, size=config.retina_image_size, classes=3, batch=batch, runs=3, steps=steps,
        schedule=text, loss="focal", augment=acquisition_augmentation))
    steps, text = _epochs(config.epochs, cxr, batch)
    trainers.append(embedding_trainer(
        f"chest X-ray identity embedding ({backbone}, ArcFace)", _seeded(seed, lambda: EmbeddingNet(
            1, embedding_dim, backbone)), channels=1, size=config.cxr_image_size,
        identities=cxr_size.train_patients, batch=batch, runs=1, steps=steps, schedule=text))
    findings = len(config.cxr_findings)
    steps, text = _epochs(config.epochs, cxr, batch, runs=findings)
    trainers.append(classifier_trainer(
        f"chest X-ray finding classifiers ({backbone})", _seeded(seed, lambda: build_classifier(backbone, 1, 2)),
        channels=1, size=config.cxr_image_size, classes=2, batch=batch, runs=findings, steps=steps, schedule=text))
    steps, text = _epochs(config.iris_epochs, iris_known, batch)
    trainers.append(classifier_trainer(
        f"iris identity classifier ({backbone}, {config.iris_subjects} classes)", _seeded(
            seed, lambda: build_classifier(backbone, 1, config.iris_subjects)), channels=1,
        size=config.iris_image_size, classes=config.iris_subjects, batch=batch, runs=1, steps=steps, schedule=text))
    steps, text = _epochs(config.epochs, iris_disease, batch)
    trainers.append(classifier_trainer(
        f"iris disease classifier ({backbone})", _seeded(seed, lambda: build_classifier(backbone, 1, 2)),
        channels=1, size=config.iris_image_size, classes=2, batch=batch, runs=1, steps=steps, schedule=text))
    return trainers


def _snow_vs_snow(config, root) -> list[Trainer]:
    """01_snow_vs_snow: the vessel segmenter, the sex attacker and the DR classifiers (one per version and seed)."""
    from anonpaper.experiments.snow_vs_snow.pipeline import METHODS, build_segmenter, seeded_versions
    from anonpaper.models.classifiers import build_classifier
    from anonpaper.train.augment import paper2_augmentation

    if not config.is_phantom:
        raise ValueError(f"the dry run projects the phantom cohort; DATASET is {config.dataset!r}")
    train = _train_size("phantom-retina", n_patients=config.n_patients, image_size=config.image_size,
                        seed=config.seed, sex_effect=config.phantom_sex_effect)
    patch = min(config.segmenter_patch, config.image_size)
    segmenter_batch = 16  # the pipeline's (train_vessel_segmenter)
    patches = config.segmenter_patches_per_epoch or train * max(1, (config.image_size // patch) ** 2)
    segmenter_steps = config.segmenter_epochs * epoch_steps(patches, segmenter_batch)
    versions = 1 + len(METHODS) * len(config.p_values)
    dr_runs = versions + (config.training_seeds - 1) * len(seeded_versions(config))
    runs = config.training_seeds + dr_runs
    steps, text = _epochs(config.epochs, train, config.batch_size, runs=runs)
    return [
        segmenter_trainer(f"vessel segmenter ({config.segmenter}, width {config.segmenter_width})",
                          lambda: build_segmenter(config), channels=3, size=config.image_size, patch=patch,
                          batch=segmenter_batch, runs=1, steps=segmenter_steps,
                          schedule=f"{config.segmenter_epochs} epochs x {epoch_steps(patches, segmenter_batch)} steps "
                                   f"({patches} patches of {patch} px / batch {segmenter_batch})",
                          loss=config.segmenter_loss),
        classifier_trainer(f"sex attacker and DR classifiers ({config.backbone})",
                           _seeded(config.seed, lambda: build_classifier(config.backbone, 3, 3)), channels=3,
                           size=config.image_size, classes=3, batch=config.batch_size, runs=runs, steps=steps,
                           schedule=f"{config.training_seeds} attackers + {dr_runs} DR classifiers; {text}",
                           loss="focal", augment=paper2_augmentation if config.augment else None,
                           note="early stopping may end runs sooner"),
    ]


def _unet(channels: int, defaults: Callable) -> Callable[[], nn.Module]:
    """The U-Net of :func:`anonpaper.train.pretrained.trained_segmenter` at its default size."""
    from anonpaper.models.unet import UNet

    return _seeded(0, lambda: UNet(channels, 1, base_width=_default(defaults, "base_width"),
                                   depth=_default(defaults, "depth")))


def _cohort_unet(name: str, channels: int, size: int, patch: int, patches: int, epochs: int, runs: int = 1,
                 note: str = "") -> Trainer:
    """A cohort U-Net of :func:`anonpaper.train.pretrained.trained_segmenter` (its default width, depth, batch),
    trained on ``patches`` random patches per epoch (every chapter passes the number, so the cohort's size does not
    enter the schedule)."""
    from anonpaper.train.pretrained import trained_segmenter

    batch = _default(trained_segmenter, "batch_size")
    per_epoch = epoch_steps(patches, batch)
    return segmenter_trainer(name, _unet(channels, trained_segmenter), channels=channels, size=size, patch=patch,
                             batch=batch, runs=runs, steps=runs * epochs * per_epoch,
                             schedule=f"{epochs} epochs x {per_epoch} steps ({patches} patches of {patch} px / "
                                      f"batch {batch})", note=note)


def _stylegan_networks(stylegan, seed: int) -> Callable[[], tuple]:
    from anonpaper.models.stylegan import ResidualDiscriminator, StyleGenerator

    return lambda: (StyleGenerator(stylegan, seed=seed, implementation="fast"),
                    ResidualDiscriminator(stylegan, seed=seed + 1))


def _label_classifier(kind: str, generator_config, backbone: str, epochs: int, note: str = "",
                      runs: int = 1) -> Trainer | None:
    """The generators chapter's cohort label classifier of ``kind`` (:func:`label_classifier`'s recipe), trained
    ``runs`` times (judge seeds)."""
    from anonpaper.experiments.generators.config import KINDS
    from anonpaper.experiments.generators.labels import label_columns
    from anonpaper.experiments.generators.pipeline import kind_cohort
    from anonpaper.models.classifiers import build_classifier

    cohort = kind_cohort(kind, generator_config)
    labels = label_columns(kind, cohort)
    if labels is None:
        return None
    task, _, names = labels
    train = int((cohort.table["split"] == "train").sum())
    batch = int(min(32, max(2, train)))  # label_classifier's
    channels, size = KINDS[kind][3], generator_config.image_size_of(kind)
    steps, text = _epochs(epochs, train, batch, runs=runs)
    build = _seeded(0, lambda: build_classifier(backbone, channels, len(names)))
    if task == "grade":
        return classifier_trainer(f"{kind} DR-grade classifier ({backbone})", build, channels=channels, size=size,
                                  classes=len(names), batch=batch, runs=runs, steps=steps, schedule=text, loss="focal",
                                  note=note)
    return multilabel_trainer(f"{kind} finding classifier ({backbone})", build, channels=channels, size=size,
                              labels=len(names), batch=batch, runs=runs, steps=steps, schedule=text, note=note)


def _generators(config, root) -> list[Trainer]:
    """02_generators: the three StyleGANs, the cohort U-Nets and the label classifiers."""
    from anonpaper.experiments.generators.config import KINDS
    from anonpaper.experiments.generators.pipeline import build_networks, training_config

    trainers = []
    for kind in KINDS:
        recipe = training_config(kind, config, output_dir=None, progress=False)
        trainers.append(gan_trainer(
            f"{kind} StyleGAN ({getattr(config, KINDS[kind][1])}, {config.image_size_of(kind)} px)",
            lambda kind=kind: build_networks(kind, config), recipe, channels=KINDS[kind][3],
            size=config.image_size_of(kind), runs=1, steps=config.total_steps(kind),
            schedule=f"{config.kimg(kind):g} kimg x 1000 / batch {config.batch_size}"))
    for name, kind in (("vessel U-Net (features, vessel fraction)", "fundus-sg2"),
                       ("lung U-Net (features)", "cxr-sg2")):
        trainers.append(_cohort_unet(name, KINDS[kind][3], config.cohort_size_of(kind),
                                     min(64, config.image_size_of(kind)), 384, config.segmenter_epochs))
    for kind in ("fundus-sg2", "cxr-sg2"):  # the two fundus generators share one DR classifier
        trainer = _label_classifier(kind, config, config.classifier_backbone, config.classifier_epochs)
        if trainer is not None:
            trainers.append(trainer)
    return trainers


def _generators_config(config, root):
    from anonpaper.runner.studies import study_config

    return study_config("02_generators", config.generators_profile, root)


def _vascular(config, root) -> list[Trainer]:
    """03_vascular_sspace: the instruments (U-Nets, keypoint detector, attacker, DR classifier) and the Table 3
    ablation generators."""
    import pandas as pd

    from anonpaper.experiments.generators.config import KINDS
    from anonpaper.experiments.generators.pipeline import training_config
    from anonpaper.experiments.vascular.pipeline import (ABLATIONS, FUNDUS_IMAGES, Instruments, ablation_loss,
                                                         generators_config_for)
    from anonpaper.models.embedding import EmbeddingNet
    from anonpaper.models.keypoints import KeypointNet
    from anonpaper.train.pretrained import trained_keypoint_detector, trained_segmenter

    generator_config = generators_config_for(config, _generators_config(config, root))
    cohort_side = generator_config.cohort_size
    phantom = generator_config.phantom_options(FUNDUS_IMAGES)
    sizes = cohort_size("phantom-retina", **phantom)
    train = sizes.train
    patch = min(64, generator_config.image_size)
    shared = "may come from the generators chapter's cache"
    judges = config.judge_seeds  # the exudate U-Net, keypoint detector, attacker and DR classifier, once per seed
    trainers = [_cohort_unet("vessel U-Net and exudate U-Nets", 3, cohort_side, patch, 384, config.segmenter_epochs,
                             runs=1 + judges, note=f"the vessel U-Net {shared}; an exudate U-Net per judge seed")]
    keypoint_batch = _default(trained_keypoint_detector, "batch_size")
    steps, text = _epochs(config.keypoint_epochs, train, keypoint_batch, runs=judges)
    trainers.append(keypoint_trainer(
        "keypoint detector (FS_SR)", _seeded(config.seed, lambda: KeypointNet(
            3, descriptor_dim=_default(trained_keypoint_detector, "descriptor_dim"),
            base_width=_default(trained_keypoint_detector, "base_width"),
            depth=_default(trained_keypoint_detector, "depth"))), channels=3, size=cohort_side, batch=keypoint_batch,
        runs=1, steps=steps, schedule=text, dense_anchors=_default(trained_keypoint_detector, "dense_anchors"),
        acquisition_strength=_default(trained_keypoint_detector, "acquisition_strength"),
        note="timed on warps of one image (the chapter pairs two acquisitions)"))
    attacker_batch = 32  # train_embedding's default, which the chapter keeps
    steps, text = _epochs(config.attacker_epochs, train, attacker_batch, runs=judges)
    trainers.append(embedding_trainer(
        f"re-identification attacker ({config.attacker_backbone}, ArcFace)",
        _seeded(config.seed, lambda: EmbeddingNet(3, 64, config.attacker_backbone)), channels=3, size=cohort_side,
        identities=sizes.train_patients, batch=attacker_batch, runs=judges, steps=steps,
        schedule=text))
    dr = _label_classifier(FUNDUS_IMAGES, generator_config, config.dr_backbone, config.dr_epochs, runs=judges)
    if dr is not None:
        trainers.append(dr)
    stylegan = generator_config.stylegan_config(config.generator)
    recipe = training_config(config.generator, generator_config, output_dir=None, progress=False)
    steps_each = max(1, int(round(config.ablation_kimg * 1000 / generator_config.batch_size)))

    def both_lpips():
        instruments = Instruments(vessel=_unet(3, trained_segmenter)(), exudate=_unet(3, trained_segmenter)(),
                                  keypoints=None, attacker=None, checks=pd.DataFrame(), cohort_size=cohort_side)
        return ablation_loss(instruments, ("vessel", "lesion"))

    trainers.append(gan_trainer(
        f"Table 3 ablation generators ({getattr(generator_config, KINDS[config.generator][1])}, "
        f"{generator_config.image_size} px)", _stylegan_networks(stylegan, config.seed), recipe,
        channels=KINDS[config.generator][3], size=generator_config.image_size, runs=len(ABLATIONS),
        steps=len(ABLATIONS) * steps_each, extra_loss=both_lpips,
        schedule=f"{len(ABLATIONS)} variants x {config.ablation_kimg:g} kimg x 1000 / batch "
                 f"{generator_config.batch_size}",
        note="timed with both LPIPS terms (the costliest variant)"))
    return trainers


def _gmia(config, root) -> list[Trainer]:
    """04_gmia: the identity and finding networks, the lung U-Net, co-training, E-training, the attackers."""
    from anonpaper.data.phantoms.cxr import FINDINGS
    from anonpaper.experiments.gmia.pipeline import (DomainLPIPS, adaptive_sets, cohort_seed, variants)
    from anonpaper.models.classifiers import build_classifier
    from anonpaper.models.embedding import EmbeddingNet
    from anonpaper.models.encoders import LatentEncoder
    from anonpaper.models.stylegan import ResidualDiscriminator, StyleGenerator
    from anonpaper.train.gan import GANTrainingConfig
    from anonpaper.train.gmia import ProjectionTrainingSettings
    from anonpaper.train.pretrained import trained_segmenter

    generator_config = _generators_config(config, root)
    stylegan = generator_config.stylegan_config("cxr-sg2")
    resolution = stylegan.resolution
    cohort_side = max(64, resolution)
    sizes = cohort_size("phantom-cxr", n_patients=config.cxr_patients, images_per_patient=config.images_per_patient,
                        image_size=cohort_side, seed=cohort_seed(config))
    train, train_patients = sizes.train, sizes.train_patients
    trainers = [_cohort_unet("lung U-Net (domain LPIPS)", 1, cohort_side, 64, 256, config.lpips_epochs)]
    identity_batch = 32  # train_embedding's default, which the chapter keeps
    adaptive = len(adaptive_sets(config))
    judges = config.judge_seeds  # every judge is trained once per judge seed; E_id and E_ut once
    identities = 1 + judges * (1 + adaptive)
    steps, text = _epochs(config.identity_epochs, train, identity_batch, runs=identities)
    trainers.append(embedding_trainer(
        f"E_id, fixed attacker and {adaptive} adaptive attackers x {judges} judge seeds ({config.identity_backbone}, "
        "ArcFace)",
        _seeded(config.seed, lambda: EmbeddingNet(1, config.identity_dim, config.identity_backbone)), channels=1,
        size=resolution, identities=train_patients, batch=identity_batch, runs=identities, steps=steps,
        schedule=text))
    steps, text = _epochs(config.identity_epochs, train, identity_batch, runs=judges)
    trainers.append(embedding_trainer(
        f"independent attacker ({config.independent_backbone}, ArcFace)",
        _seeded(config.seed, lambda: EmbeddingNet(1, config.identity_dim, config.independent_backbone)), channels=1,
        size=resolution, identities=train_patients, batch=identity_batch, runs=judges, steps=steps, schedule=text))
    sets = 2 + len(variants(config)) + 2  # two reconstructions, the latent-optimisation settings, two baselines
    classifiers = 1 + judges * sets + (judges - 1)  # E_ut, the utility classifiers, the other seeds' real ones
    steps, text = _epochs(config.utility_epochs, train, 32, runs=classifiers)
    trainers.append(multilabel_trainer(
        f"E_ut and {sets} utility classifiers x {judges} judge seeds ({config.utility_backbone})",
        _seeded(config.seed, lambda: build_classifier(config.utility_backbone, 1, len(FINDINGS))), channels=1,
        size=resolution, labels=len(FINDINGS), batch=32, runs=classifiers, steps=steps, schedule=text))
    total = sizes.total
    folds = config.membership_folds
    steps, text = _epochs(config.attacker_epochs, total * (folds - 2) // folds, 32, runs=folds * judges)
    trainers.append(classifier_trainer(
        f"membership attackers ({config.utility_backbone}, one per fold and judge seed)",
        _seeded(config.seed, lambda: build_classifier(config.utility_backbone, 1, 2)), channels=1, size=resolution,
        classes=2, batch=32, runs=folds * judges, steps=steps, schedule=text))

    def lpips():
        return DomainLPIPS(_unet(1, trained_segmenter)(), cohort_side)

    def co_networks():
        generator = StyleGenerator(stylegan, seed=config.seed, implementation="fast")
        return (LatentEncoder(stylegan, generator.num_ws, seed=config.seed), generator,
                ResidualDiscriminator(stylegan, seed=config.seed + 1))

    # GMIA's recipe is the trainer's default without style mixing (the chapter's _gan_settings).
    gan = GANTrainingConfig(total_steps=config.kimg_steps(config.co_training_kimg),
                            batch_size=config.projection_batch_size, style_mixing_probability=0.0, progress=False)
    trainers.append(co_training_trainer(
        f"co-training of E, S and D ({resolution} px)", co_networks, ProjectionTrainingSettings(gan=gan), lpips,
        channels=1, size=resolution, runs=1, steps=gan.total_steps,
        schedule=f"{config.co_training_kimg:g} kimg x 1000 / batch {config.projection_batch_size}"))

    def e_networks():
        generator = StyleGenerator(stylegan, seed=config.seed, implementation="fast")
        return LatentEncoder(stylegan, generator.num_ws, seed=config.seed), generator

    e_steps = config.kimg_steps(config.encoder_kimg)
    e_gan = dataclasses.replace(gan, total_steps=e_steps)
    trainers.append(encoder_trainer(
        f"E-training (E through the frozen generator, {resolution} px)", e_networks,
        ProjectionTrainingSettings(gan=e_gan), lpips, channels=1, size=resolution, runs=1, steps=e_steps,
        schedule=f"{config.encoder_kimg:g} kimg x 1000 / batch {config.projection_batch_size}"))
    return trainers


def _k_salsa(config, root) -> list[Trainer]:
    """05_k_salsa: the W+ encoder, the DR classifiers of every release and seed, the membership attackers."""
    from anonpaper.experiments.k_salsa.pipeline import (ENCODER_BATCH, KIND, METHODS, NUM_GRADES, classifier_size,
                                                        feature_taps)
    from anonpaper.metrics.quality import feature_tap_distance
    from anonpaper.models.classifiers import build_classifier
    from anonpaper.models.encoders import LatentEncoder
    from anonpaper.models.stylegan import StyleGenerator
    from anonpaper.train.gan import GANTrainingConfig
    from anonpaper.train.gmia import ProjectionTrainingSettings
    from anonpaper.train.membership import train_membership_classifier
    from anonpaper.train.pretrained import trained_segmenter

    generator_config = _generators_config(config, root)
    stylegan = generator_config.stylegan_config(KIND)
    resolution, cohort_side = stylegan.resolution, generator_config.cohort_size_of(KIND)
    classifier_side = classifier_size(config, resolution)  # what the release classifiers see
    trainers = []
    if config.encoder_steps:
        def networks():
            generator = StyleGenerator(stylegan, seed=config.seed, implementation="fast")
            return LatentEncoder(stylegan, generator.num_ws, space="w+", seed=config.seed), generator

        def perceptual():
            taps = feature_taps(_unet(3, trained_segmenter)(), cohort_side)
            return lambda first, second: feature_tap_distance(first, second, taps, reduction="none")

        settings = ProjectionTrainingSettings(gan=GANTrainingConfig(
            total_steps=config.encoder_steps, batch_size=ENCODER_BATCH, style_mixing_probability=0.0, progress=False))
        trainers.append(encoder_trainer(f"W+ inversion encoder ({resolution} px)", networks, settings, perceptual,
                                        channels=3, size=resolution, runs=1, steps=config.encoder_steps,
                                        schedule=f"ENCODER_STEPS {config.encoder_steps}"))
    # DR classifiers: the private reals, then every method's release at every k, CLASSIFIER_SEEDS each; a release
    # holds about one image per cluster (PRIVATE_IMAGES / k).
    releases = [config.private_images] + [max(2, config.private_images // k) for k in config.k_values
                                          for _ in METHODS]
    runs = config.classifier_seeds * len(releases)
    steps = sum(config.classifier_seeds * config.classifier_epochs * epoch_steps(n, int(min(32, n)))
                for n in releases)
    trainers.append(classifier_trainer(
        f"DR classifiers ({config.classifier_backbone})",
        _seeded(config.seed, lambda: build_classifier(config.classifier_backbone, 3, NUM_GRADES)), channels=3,
        size=classifier_side, classes=NUM_GRADES, batch=32, runs=runs, steps=steps,
        schedule=f"{config.classifier_seeds} seeds x {len(releases)} training sets (the reals, {len(METHODS)} "
                 f"methods x {len(config.k_values)} k; about PRIVATE_IMAGES / k images each) x "
                 f"{config.classifier_epochs} epochs",
        note="steps of the releases are estimated from PRIVATE_IMAGES / k clusters"))
    # One pair classifier per method and k, shown about ATTACKER_BUDGET pairs (two images stacked as 2C channels);
    # the chapter keeps train_membership_classifier's backbone and its batch (32).
    attackers = len(METHODS) * len(config.k_values)
    per_attacker = epoch_steps(config.attacker_budget, 32)
    backbone = _default(train_membership_classifier, "backbone")
    trainers.append(classifier_trainer(
        f"membership pair classifiers ({backbone}, image pairs)",
        _seeded(config.seed, lambda: build_classifier(backbone, 6, 2)), channels=6, size=classifier_side, classes=2,
        batch=32, runs=attackers, steps=attackers * per_attacker,
        schedule=f"{attackers} attackers x ATTACKER_BUDGET {config.attacker_budget} pairs / batch 32"))
    return trainers


def _disentanglement(config, root) -> list[Trainer]:
    """06_disentanglement: the networks of both cohorts, the Table 4 and 5 variants, the identity VAEs, the disease
    classifiers and the attackers."""
    from anonpaper.experiments.disentanglement.pipeline import ABLATIONS, build_network, loss_weights
    from anonpaper.models.classifiers import build_classifier
    from anonpaper.models.disentangle import IdentityVAE
    from anonpaper.models.embedding import EmbeddingNet

    if config.iris_data_root is not None or config.cxr_data_root is not None:
        raise ValueError("the dry run projects the phantom cohorts; IRIS_DATA_ROOT / CXR_DATA_ROOT are set")
    side = max(64, config.image_size)
    cohorts = {"iris": cohort_size("phantom-iris", "split_within_subject", n_subjects=config.iris_subjects,
                                   images_per_eye=config.iris_images_per_eye, image_size=side, seed=config.seed),
               "cxr": cohort_size("phantom-cxr", n_patients=config.cxr_patients,
                                  images_per_patient=config.cxr_images_per_patient, image_size=side, seed=config.seed,
                                  prevalence={"pleural_effusion": config.cxr_effusion_prevalence})}
    sizes = {key: cohort.train for key, cohort in cohorts.items()}
    identities = {"iris": config.iris_subjects, "cxr": None}
    trainers = []
    for key in ("iris", "cxr"):
        shape = CohortShape(key, identities[key] is None, identities[key] or 0)
        train, batch = sizes[key], config.batch_size
        runs, steps = 1, config.epochs * epoch_steps(train, batch)
        text = f"{config.epochs} epochs x {epoch_steps(train, batch)} steps ({train} images / batch {batch})"
        if key == "iris":  # Table 4: every realism variant at ABLATION_EPOCHS (a fine-tuned one: half of them)
            extra = sum(config.ablation_epochs if pretrained is None else max(1, config.ablation_epochs // 2)
                        for _, _, pretrained in ABLATIONS.values())
            runs, steps = 1 + len(ABLATIONS), steps + extra * epoch_steps(train, batch)
            text += f" + {len(ABLATIONS)} Table 4 variants, {extra} epochs in all"
        else:  # Table 5: a network on SIZE_FRACTION of the training patients
            part = max(2, int(train * config.size_fraction))
            runs, steps = 2, steps + config.epochs * epoch_steps(part, batch)
            text += f" + the Table 5 network on {part} images"
        trainers.append(disentangler_trainer(
            f"{key} disentanglement networks (width {config.width})",
            _seeded(config.seed, lambda shape=shape: build_network(shape, config)), loss_weights(shape, config),
            size=config.image_size, identities=max(2, identities[key] or 2), batch=batch, runs=runs, steps=steps,
            schedule=text, discriminator_lr=config.discriminator_lr))
        dims = config.iris_dims if key == "iris" else config.cxr_dims
        latent = config.vae_latent[1 if key == "cxr" else 0]
        vae_batch = 64  # train_identity_vae's default, which the chapter keeps
        steps, text = _epochs(config.vae_epochs, train, vae_batch, runs=2)
        trainers.append(identity_vae_trainer(
            f"{key} identity VAEs (privacy, plain)", _seeded(config.seed, lambda dims=dims, latent=latent: IdentityVAE(
                dims[1], latent)), identity_dim=dims[1], batch=vae_batch, runs=2, steps=steps, schedule=text))
        disease_batch = 16  # train_disease_classifier's
        judges = config.judge_seeds  # the judges are trained once per judge seed
        steps, text = _epochs(config.disease_epochs, train, disease_batch, runs=judges)
        trainers.append(classifier_trainer(
            f"{key} disease classifier ({config.disease_backbone})",
            _seeded(config.seed, lambda: build_classifier(config.disease_backbone, 1, 2)), channels=1,
            size=config.image_size, classes=2, batch=disease_batch, runs=judges, steps=steps, schedule=text))
        # The attacker on the originals and the adaptive one on the originals and their reconstructions (twice the
        # images).
        attacker_batch = 32  # train_embedding's default
        per_epoch = epoch_steps(train, attacker_batch) + epoch_steps(2 * train, attacker_batch)
        trainers.append(embedding_trainer(
            f"{key} re-identification and adaptive attackers ({config.attacker_backbone}, ArcFace)",
            _seeded(config.seed, lambda: EmbeddingNet(1, 64, config.attacker_backbone)), channels=1,
            size=config.image_size, identities=cohorts[key].train_patients,
            batch=attacker_batch, runs=2 * judges, steps=judges * config.attacker_epochs * per_epoch,
            schedule=f"{judges} judge seeds x {config.attacker_epochs} epochs x "
                     f"({epoch_steps(train, attacker_batch)} + "
                     f"{epoch_steps(2 * train, attacker_batch)}) steps ({train} and {2 * train} images / batch "
                     f"{attacker_batch})"))
    return trainers


def _tradeoffs(config, root) -> list[Trainer]:
    """07_tradeoffs: the networks of every audit (one per method and knob and modality; an audit trains its own)."""
    from anonpaper.experiments.tradeoffs.pipeline import MODALITIES, audit_settings, settings_for
    from anonpaper.models.classifiers import build_classifier
    from anonpaper.models.embedding import EmbeddingNet

    settings = audit_settings(config)
    seeds, batch = settings.attacker_seeds, settings.batch_size
    trainers = []
    for modality in MODALITIES:
        if modality == "fundus":
            sizes = cohort_size("phantom-retina", n_patients=config.fundus_patients, image_size=config.image_size,
                                seed=config.seed, images_per_patient=(2, 3), sex_effect=config.phantom_sex_effect)
            channels, classes = 3, 3  # the DR grade grouped healthy / NPDR / PDR; sex has 2
        else:
            sizes = cohort_size("phantom-cxr", n_patients=config.cxr_patients, image_size=config.image_size,
                                seed=config.seed, images_per_patient=config.cxr_images_per_patient)
            channels, classes = 1, 2
        audits = len(settings_for(config, modality))
        # An audit's networks learn the attacker-train side's patients: ATTACKER_SHARE of the cohort's images. The
        # chapter shares one NetworkMemo per modality, so the networks that learn only from the originals train once
        # per seed for all its audits; each audit trains those that learn from its release.
        images = int(sizes.total * settings.attacker_share)
        steps, text = _epochs(settings.identity_epochs, images, batch, runs=seeds)
        trainers.append(embedding_trainer(
            f"{modality} audit identity embeddings ({settings.identity_backbone}, ArcFace)",
            _seeded(config.seed, lambda channels=channels: EmbeddingNet(channels, settings.identity_dim,
                                                                        settings.identity_backbone)),
            channels=channels, size=config.image_size, identities=max(2, int(sizes.patients * settings.attacker_share)),
            batch=batch, runs=seeds, steps=steps,
            schedule=f"{seeds} attacker seeds (on the originals: one for all {audits} audits); {text}"))
        # Per seed: on the originals, shared by every audit (and serving each audit's reference side), the attribute
        # attacker and the task model; per audit, the adaptive attacker and the task model on its release (chest
        # X-ray: the findings model is multi-label, counted below). Measured: 5 networks for a first fundus audit, 2
        # more for each further one.
        shared, per_audit = (2, 2) if modality == "fundus" else (1, 1)
        runs = seeds * (shared + audits * per_audit)
        steps, text = _epochs(settings.classifier_epochs, images, batch, runs=runs)
        trainers.append(classifier_trainer(
            f"{modality} audit attribute attackers" + (" and task models" if modality == "fundus" else "")
            + f" ({settings.classifier_backbone})",
            _seeded(config.seed, lambda channels=channels, classes=classes: build_classifier(
                settings.classifier_backbone, channels, classes)), channels=channels, size=config.image_size,
            classes=classes, batch=batch, runs=runs, steps=steps,
            schedule=f"{seeds} seeds x ({shared} on the originals + {audits} audits x {per_audit}); {text}",
            note="networks with identical training sets train once: an upper bound"))
        if modality != "fundus":
            # The audit's findings: the cohort's label_ columns but "no finding" (load_modality's).
            findings = len([column for column in sizes.columns if column.startswith("label_")
                            and column != "label_no_finding"])
            runs = seeds * (1 + audits)
            steps, text = _epochs(settings.classifier_epochs, images, batch, runs=runs)
            trainers.append(multilabel_trainer(
                f"{modality} audit finding classifiers ({settings.classifier_backbone})",
                _seeded(config.seed, lambda: build_classifier(settings.classifier_backbone, 1, findings)),
                channels=1, size=config.image_size, labels=findings, batch=batch, runs=runs, steps=steps,
                schedule=f"{seeds} seeds x (1 on the originals + {audits} audits x 1); {text}",
                note="networks with identical training sets train once: an upper bound"))
    return trainers


@dataclass(frozen=True)
class CohortShape:
    """What :func:`~anonpaper.experiments.disentanglement.pipeline.build_network` and ``loss_weights`` read of a
    cohort's arrays: its key (``"iris"`` / ``"cxr"``), whether identity is Siamese, and its identity classes."""

    key: str
    siamese: bool
    num_identities: int


# Study name -> function(config, project root) -> the chapter's trainers.
CHAPTERS: dict[str, Callable[[Any, Any], list[Trainer]]] = {
    "00_cohorts": _cohorts,
    "01_snow_vs_snow": _snow_vs_snow,
    "02_generators": _generators,
    "03_vascular_sspace": _vascular,
    "04_gmia": _gmia,
    "05_k_salsa": _k_salsa,
    "06_disentanglement": _disentanglement,
    "07_tradeoffs": _tradeoffs,
}

# The kinds of trainer (Trainer.kind), one per trainer function above.
KINDS = ("classifier", "multilabel", "embedding", "segmenter", "keypoints", "gan", "co-training", "encoder",
         "disentangler", "identity-vae")

# What no chapter's projection includes (printed under every table).
NOT_TIMED = ("evaluation passes, inversion and projector steps, latent optimisation, S-space contribution scores "
             "and other work outside the trainers' optimisation steps")


def chapter_trainers(study: str, config, root=None) -> list[Trainer]:
    """The trainers of chapter ``study`` at ``config`` (ValueError for a chapter the dry run does not know)."""
    if study not in CHAPTERS:
        raise ValueError(f"the dry run knows no trainers of {study!r}; known chapters: {', '.join(CHAPTERS)}")
    return CHAPTERS[study](config, root)


# ---------------------------------------------------------------------------------------------------------------
# measuring and projecting
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class Projection:
    """One trainer's measurement and projection (a row of the table).

    Attributes:
        chapter, trainer, batch, runs, steps, schedule, note, kind: As in :class:`Trainer`.
        parameters: Parameters of every network the trainer holds (frozen ones included); None if not built.
        measured_batch: The batch the steps ran at (smaller than ``batch`` under ``--max-batch``).
        seconds_per_step: Fastest step after the warm-up at ``batch`` (extrapolated from ``measured_batch``, see
            :func:`measure`); for a GAN the projected mean step with its lazy regularisers.
        hours: ``seconds_per_step * steps / 3600``; None when not projected.
        peak_gib: Peak GPU memory of the measurement (CUDA only).
        problem: Why it was not projected (empty when it was).
    """

    chapter: str
    trainer: str
    batch: int
    runs: int
    steps: int | None
    schedule: str
    note: str = ""
    kind: str = ""
    parameters: int | None = None
    measured_batch: int | None = None
    seconds_per_step: float | None = None
    hours: float | None = None
    peak_gib: float | None = None
    problem: str = ""

    @property
    def scaled(self) -> bool:
        return self.measured_batch is not None and self.measured_batch != self.batch


def _parameter_count(networks: Any) -> int:
    modules = networks if isinstance(networks, tuple) else (networks,)
    seen: set[int] = set()
    total = 0
    for module in modules:
        for parameter in module.parameters():
            if id(parameter) not in seen:
                seen.add(id(parameter))
                total += parameter.numel()
    return total


def seconds_of(step_seconds: list[float]) -> float:
    """The fastest timed step (NaN when none was timed)."""
    return min(step_seconds) if step_seconds else math.nan


def scaled_step_seconds(timed: dict[int, float], batch: int) -> float:
    """A step's seconds at ``batch`` from steps timed at two smaller batches: the straight line through them (a fixed
    cost per step plus a cost per image), its slope at least 0, at least as long as the larger batch's step.

    >>> round(scaled_step_seconds({2: 0.5, 4: 0.7}, 32), 6)  # 0.3 s per step and 0.1 s per image
    3.5
    >>> scaled_step_seconds({2: 0.5, 4: 0.4}, 32)  # timing noise: no cost per image measured
    0.4
    """
    (small, small_seconds), (large, large_seconds) = sorted(timed.items())
    per_image = max(0.0, (large_seconds - small_seconds) / (large - small))
    return large_seconds + per_image * (batch - large)


def measure(trainer: Trainer, device: torch.device, *, chapter: str = "", repeats: int = 3,
            max_batch: int | None = None) -> Projection:
    """Build ``trainer``'s networks on ``device``, time its steps on random tensors and project its schedule.

    Args:
        trainer: A :class:`Trainer`.
        device: Where to allocate and train.
        chapter: The study name, for the row.
        repeats: Timed steps after the warm-up (the fastest counts); GAN trainers time 3 steps per phase mix with
            ``repeats >= 2``, else 1.
        max_batch: Time at most this batch (rounded down to ``trainer.batch_multiple``) and scale: from two
            batches (``max_batch`` and twice it, :func:`scaled_step_seconds`) where twice it is still below the
            trainer's batch, at the trainer's batch where that is twice it, else linearly from one (and always
            linearly for a GAN).

    Returns:
        :class:`Projection`; ``problem`` says what failed (out of memory, a trainer error) instead of raising.
    """
    row = Projection(chapter, trainer.name, trainer.batch, trainer.runs, trainer.steps, trainer.schedule,
                     trainer.note, trainer.kind)
    batch = trainer.batch
    gan = trainer.batch_multiple > 1
    if max_batch is not None and max_batch < batch:
        batch = max(trainer.batch_multiple, max_batch // trainer.batch_multiple * trainer.batch_multiple, 2)
        if not gan and 2 * batch == trainer.batch:
            batch = trainer.batch  # the second batch of the line would be the trainer's own: time that alone
    row.measured_batch = batch
    steps = (6 if repeats >= 2 else 4) if gan else 1 + max(1, repeats)
    networks = None
    try:
        networks = trainer.build()
        row.parameters = _parameter_count(networks)
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        seconds = seconds_of(trainer.train(networks, batch, steps, device))
        if batch < trainer.batch and not gan and 2 * batch <= trainer.batch:
            # A second batch separates a step's fixed cost from its cost per image; a GAN's fixed cost is small
            # beside its synthesis and is scaled from one batch (its steps are the costliest to time).
            larger = seconds_of(trainer.train(networks, 2 * batch, steps, device))
            seconds = scaled_step_seconds({batch: seconds, 2 * batch: larger}, trainer.batch)
        elif batch < trainer.batch:
            seconds = seconds * trainer.batch / batch
        if device.type == "cuda":
            row.peak_gib = torch.cuda.max_memory_allocated(device) / 2**30
        if not math.isfinite(seconds):
            raise RuntimeError("the trainer took no timed step")
        row.seconds_per_step = seconds
    except (torch.cuda.OutOfMemoryError, MemoryError) as error:
        row.problem = f"out of memory at batch {batch} on {device} ({str(error).splitlines()[0][:120]})"
    except Exception as error:  # a dry run reports every trainer; the message names what failed
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        if "out of memory" in message or "can't allocate memory" in message:
            row.problem = f"out of memory at batch {batch} on {device}"
        else:
            row.problem = f"{type(error).__name__}: {message[:200]}"
    finally:
        del networks
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if row.problem:
        return row
    if trainer.steps is None:
        row.problem = f"no schedule: {trainer.note or 'the config gives no number of steps'}"
    else:
        row.hours = row.seconds_per_step * trainer.steps / 3600
    return row


@dataclass
class DryRunReport:
    """A chapter's dry run: its rows, totals and what could not be projected."""

    study: str
    profile: str
    device: str
    threads: int
    commit: str | None
    parameters: dict[str, Any]
    rows: list[Projection] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def total_hours(self) -> float:
        """Projected hours of the rows that were projected."""
        return float(sum(row.hours for row in self.rows if row.hours is not None))

    @property
    def unprojected(self) -> list[Projection]:
        return [row for row in self.rows if row.hours is None]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (what ``--dry-run-out`` writes)."""
        rows = []
        for row in self.rows:
            entry = dataclasses.asdict(row)
            entry["scaled"] = row.scaled
            rows.append(entry)
        return {"study": self.study, "profile": self.profile, "device": self.device, "threads": self.threads,
                "commit": self.commit, "parameters": self.parameters, "rows": rows,
                "total_hours": self.total_hours, "unprojected": [row.trainer for row in self.unprojected],
                "not_timed": NOT_TIMED, "seconds": self.seconds}


def dry_run(registry, study: str, profile: str, *, overrides: dict[str, Any] | None = None,
            device: str | torch.device | None = None, repeats: int = 3, max_batch: int | None = None,
            skip_kinds: tuple[str, ...] = (), log: Callable[[str], None] | None = None) -> DryRunReport:
    """Build chapter ``study``'s config at ``profile``, time every trainer and project the schedule.

    Args:
        registry: The study registry (:func:`anonpaper.runner.studies.load_registry`).
        study: Study name, e.g. ``"04_gmia"``.
        profile: Profile name (``smoke``, ``quick``, ``paper``).
        overrides: ``{NAME: value}`` on top of the profile's parameters (checked like a run's).
        device: Device (default: the chapter's ``DEVICE`` parameter, else ``ANONPAPER_DEVICE``, else CUDA when
            available, else CPU).
        repeats: Timed steps per trainer after the warm-up.
        max_batch: Time larger batches at this size and scale (CPU projections of paper batches).
        skip_kinds: Kinds of trainer (:data:`KINDS`) listed but not timed, e.g. ``("gan", "co-training")`` on a CPU,
            where a paper-size StyleGAN step takes many minutes.
        log: Called with one line per trainer as it is measured.

    Returns:
        :class:`DryRunReport`.

    Raises:
        ValueError: Unknown study or profile, a bad parameter, or a chapter the dry run has no trainers for.
    """
    from anonpaper.runtime import get_device, git_sha

    started = time.perf_counter()
    registry.check_profile(profile)
    entry = registry.study(study)
    values = entry.check_parameters({**entry.parameters(profile), **(overrides or {})})
    config = entry.config_class().from_parameters(values)
    if device is None:
        device = getattr(config, "device", None)
    device = device if isinstance(device, torch.device) else get_device(device)
    unknown = sorted(set(skip_kinds) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown trainer kind(s) {unknown}; kinds: {', '.join(KINDS)}")
    trainers = chapter_trainers(entry.name, config, registry.root)
    report = DryRunReport(entry.name, profile, str(device), torch.get_num_threads(), git_sha(registry.root),
                          config.parameters())
    for trainer in trainers:
        if trainer.kind in skip_kinds:
            row = Projection(entry.name, trainer.name, trainer.batch, trainer.runs, trainer.steps, trainer.schedule,
                             trainer.note, trainer.kind, problem=f"not timed (--skip-kind {trainer.kind})")
        else:
            row = measure(trainer, device, chapter=entry.name, repeats=repeats, max_batch=max_batch)
        report.rows.append(row)
        if log is not None:
            log(format_row(row))
    report.seconds = time.perf_counter() - started
    return report


# ---------------------------------------------------------------------------------------------------------------
# printing
# ---------------------------------------------------------------------------------------------------------------
def _count(value: int | None) -> str:
    if value is None:
        return "-"
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return str(value)


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}"


def format_row(row: Projection) -> str:
    """One line per trainer, as the dry run measures it."""
    if row.problem:
        return f"  {row.trainer}: not projected: {row.problem}"
    scaled = f" (timed at batch {row.measured_batch}, scaled)" if row.scaled else ""
    return (f"  {row.trainer}: {_seconds(row.seconds_per_step)} s/step{scaled} x {row.steps} steps = "
            f"{row.hours:.3g} h")


def format_report(report: DryRunReport) -> str:
    """The table: chapter, trainer, parameters, batch, s/step, steps, projected hours; the total; what was not
    projected and why; what no projection includes."""
    header = ("trainer", "parameters", "batch", "s/step", "steps", "hours")
    lines = [f"{report.study} at profile {report.profile} on {report.device} ({report.threads} CPU threads, "
             f"commit {(report.commit or 'unknown')[:7]})"]
    table = [header]
    for row in report.rows:
        batch = str(row.batch) + (f" ({row.measured_batch}*)" if row.scaled else "")
        table.append((row.trainer, _count(row.parameters), batch, _seconds(row.seconds_per_step),
                      "-" if row.steps is None else str(row.steps),
                      "-" if row.hours is None else f"{row.hours:.3g}"))
    widths = [max(len(line[column]) for line in table) for column in range(len(header))]
    for line in table:
        lines.append("  ".join(cell.ljust(widths[0]) if column == 0 else cell.rjust(widths[column])
                               for column, cell in enumerate(line)))
    lines.append(f"total: {report.total_hours:.3g} h projected for {len(report.rows) - len(report.unprojected)} of "
                 f"{len(report.rows)} trainers")
    if any(row.scaled for row in report.rows):
        lines.append("*: timed at a smaller batch (--max-batch) and extrapolated to the chapter's batch")
    for row in report.rows:
        if row.schedule:
            lines.append(f"  schedule of {row.trainer}: {row.schedule}" + (f"; {row.note}" if row.note else ""))
    if report.unprojected:
        lines.append("not projected:")
        lines += [f"  {row.trainer}: {row.problem}" for row in report.unprojected]
    lines.append(f"not included: {NOT_TIMED}; early stopping may end runs sooner")
    return "\n".join(lines)
