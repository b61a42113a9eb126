"""The GMIA pipeline (Li, Ayache and Delingette, ISBI 2025): cohort -> instruments -> projection (co-training and
E-training) -> latent-code optimisation -> image quality, utility, linkability, singling out, membership inference.

1. The cohort (:func:`load_data`): chest X-ray phantom patients with several images each (the paper keeps MIMIC-CXR
   patients with at least 20), drawn with the chapter's own cohort seed so that the generators chapter's frozen
   generator never saw them, area-downsampled to the generator's resolution; labels are the phantom's five
   findings (multi-label), identities its patients; the patient-level 70/10/20 split.
2. Instruments, trained on the real training split and cached: ``E_id`` (the identity embedding GMIA optimises
   against: ArcFace, s=64, m=0.5), a **fixed attacker** (the same recipe with another seed: the verifier of the
   paper's linkability protocol, which the optimisation never saw), an **independent attacker** of another
   architecture (``config.independent_backbone``), ``E_ut`` (the multi-label finding classifier, whose penultimate
   features enter ``L_ut``; it is also the utility classifier trained on real images) and the lung U-Net whose
   feature taps give the **domain LPIPS** (GMIA's VGG LPIPS needs ImageNet weights, which are not offline).
3. Projection: **co-training** trains E, the synthesis network S and D from scratch on the training split
   (adversarial + 10 MSE + 10 domain LPIPS, :func:`anonpaper.train.gmia.co_train`); **E-training** trains E alone
   against the generators chapter's frozen chest X-ray StyleGAN2 (:func:`anonpaper.train.gmia.train_encoder`),
   by default for as many encoder updates as co-training.
4. Anonymisation (:func:`anonymise_all`): :func:`anonpaper.methods.gmia.anonymize` with the co-trained E and S,
   for the main setting (``L_id + L_ut`` at ``config.margin``, every split), the margin ablation and the loss
   ablation (``L_id`` only, ``L_ut`` only; training and test splits). Beyond the paper: Gaussian blur and
   pixelation at the PSNR of the main setting (:mod:`anonpaper.methods.baselines`).
5. Evaluation (:func:`evaluate`): image quality of every set against the real test images; utility (a finding
   classifier trained on each training set, tested on the real test set); linkability as verification at the
   fixed attacker's threshold (F1-optimal on real validation pairs): inner risk (pairs of anonymised images) and
   outer risk (each real image with its own anonymisation; the authors' column named FAR is 1 - TAR, reported as
   such beside the true FAR; the outer AUC and the per-image "own closer" share, with patient-bootstrap SEs, are
   threshold-free); singling out (hidden rate, local cloaking) in each attacker's embedding space, for the fixed,
   the independent and the **adaptive attackers** (retrained on the main setting's, the baselines' and ``L_ut``
   only's training images); and membership inference on held-out patients (:func:`train_membership_attackers`).

Every network and every anonymised set is cached with :class:`anonpaper.cache.ArtifactCache` under its full
description; projection trainings checkpoint to ``$ANONPAPER_CACHE/gmia-runs/<key>/`` and resume.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch

from anonpaper.cache import ArtifactCache
from anonpaper.data import load_cohort
from anonpaper.data.phantoms.cxr import FINDINGS
from anonpaper.experiments.claims import combine_replicate_tables
from anonpaper.experiments.generators.pipeline import load_generator
from anonpaper.experiments.gmia.config import Config
from anonpaper.methods.baselines import blur_to_psnr, gaussian_blur, pixelate, pixelate_to_psnr
from anonpaper.methods.gmia import LatentOptimizationSettings, anonymize
from anonpaper.metrics.classification import average_precision, balanced_accuracy
from anonpaper.metrics.identity import cross_pair_scores, select_threshold, verification_auc
from anonpaper.metrics.privacy import inner_pairs, inner_risk, linkability_as_published, outer_risk, singling_out_risk
from anonpaper.metrics.quality import domain_lpips, iw_ssim, psnr, ssim
from anonpaper.metrics.statistics import patient_bootstrap_se
from anonpaper.models.classifiers import build_classifier
from anonpaper.models.embedding import EmbeddingNet
from anonpaper.models.encoders import LatentEncoder
from anonpaper.models.stylegan import ResidualDiscriminator, StyleGenerator, to_signed_range, to_unit_range
from anonpaper.runtime import cache_dir, content_hash, derive_seed, get_device, replicate_parts
from anonpaper.train.classifier import predict_proba, train_classifier
from anonpaper.train.embedding import embed, train_embedding
from anonpaper.train.gan import GANTrainingConfig
from anonpaper.train.gmia import ProjectionTrainingSettings, co_train, train_encoder
from anonpaper.train.loop import TrainSettings
from anonpaper.train.multilabel import macro_auroc, predict_multilabel, train_multilabel_classifier
from anonpaper.train.pretrained import trained_segmenter

SPLITS = ("train", "val", "test")
REAL = "real"
CO_RECON = "co-training reconstruction"
E_RECON = "E-training reconstruction"
BLUR = "blur (matched PSNR)"
PIXELATE = "pixelation (matched PSNR)"
ID_ONLY = "L_id only"
UT_ONLY = "L_ut only"
INDEPENDENT = "independent"
CACHE = "gmia"


def main_name(margin: float) -> str:
    """Name of the ``L_id + L_ut`` setting at margin ``m``."""
    return f"L_id + L_ut, m={margin:g}"


def adaptive_name(name: str) -> str:
    """The ``attacker`` label of the adaptive attacker retrained on set ``name``."""
    return f"adaptive ({name})"


def adaptive_sets(config: Config) -> tuple[str, ...]:
    """The sets an adaptive attacker is retrained on: the main setting, the two baselines at its PSNR (the
    comparison at equal fidelity) and ``L_ut`` only (the singling-out comparison)."""
    return (main_name(config.margin), BLUR, PIXELATE, UT_ONLY)


# ---------------------------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class GMIAData:
    """The chapter's cohort as per-split arrays at the generator's resolution.

    Attributes:
        images: split -> uint8 (N, R, R) grayscale images.
        labels: split -> int64 (N, K) 0/1 findings (order ``findings``).
        patients: split -> int64 (N,) patient codes (shared by all splits; the metrics want integer labels).
        patient_ids: split -> (N,) the cohort's patient ids (str).
        findings: The K finding names.
        resolution: R, the generator's image side.
        cohort: The cohort object (native size, for the lung U-Net).
        description: JSON-like description of the content (cache keys).
    """

    images: dict[str, np.ndarray]
    labels: dict[str, np.ndarray]
    patients: dict[str, np.ndarray]
    patient_ids: dict[str, np.ndarray]
    findings: tuple[str, ...]
    resolution: int
    cohort: Any
    description: dict[str, Any]

    def tensor(self, split: str) -> torch.Tensor:
        """(N, 1, R, R) float32 images of ``split`` in [0, 1]."""
        return to_tensor(self.images[split])


def to_tensor(images: np.ndarray) -> torch.Tensor:
    """uint8 (N, R, R) -> float32 (N, 1, R, R) in [0, 1]."""
    return torch.from_numpy(np.asarray(images)).float()[:, None] / 255.0


def to_uint8(images: torch.Tensor) -> np.ndarray:
    """float (N, 1, R, R) in [0, 1] -> uint8 (N, R, R) (rounded; what a released image holds)."""
    return (images.detach().float().clamp(0, 1)[:, 0] * 255.0).round().to(torch.uint8).cpu().numpy()


def cohort_seed(config: Config) -> int:
    """The cohort's seed: derived, so its patients differ from the generators chapter's (seed ``config.seed``)."""
    return derive_seed(config.seed, "gmia-cohort") % (2**31 - 1)


def load_data(config: Config, resolution: int) -> GMIAData:
    """The chest X-ray phantom at ``resolution`` px (area-downsampled from its native >= 64 px)."""
    import cv2

    cohort = load_cohort("phantom-cxr", n_patients=config.cxr_patients, images_per_patient=config.images_per_patient,
                         image_size=max(64, resolution), seed=cohort_seed(config))
    images, labels, patients = {}, {}, {}
    for split in SPLITS:
        part = cohort.split(split)
        if len(part) == 0:
            raise ValueError(f"the cohort's {split} split is empty; raise CXR_PATIENTS (now {config.cxr_patients})")
        raw = part.load_images()
        if raw.shape[1] != resolution:
            raw = np.stack([cv2.resize(image, (resolution, resolution), interpolation=cv2.INTER_AREA)
                            for image in raw])
        images[split] = raw
        labels[split] = part.table[[f"true_{name}" for name in FINDINGS]].to_numpy().astype(np.int64)
        patients[split] = part.table["patient_id"].astype(str).to_numpy()
    names = np.unique(np.concatenate([patients[split] for split in SPLITS]))
    codes = {split: np.searchsorted(names, patients[split]).astype(np.int64) for split in SPLITS}
    description = {"dataset": "phantom-cxr", "patients": config.cxr_patients, "per_patient": config.images_per_patient,
                   "seed": cohort_seed(config), "resolution": resolution,
                   "content": content_hash(*[images[s] for s in SPLITS], *[labels[s] for s in SPLITS])}
    return GMIAData(images, labels, codes, patients, FINDINGS, resolution, cohort, description)


def data_summary(data: GMIAData) -> pd.DataFrame:
    """Images, patients and finding prevalences per split."""
    rows = []
    for split in SPLITS:
        row = {"split": split, "images": len(data.images[split]), "patients": len(np.unique(data.patients[split]))}
        row.update({name: float(data.labels[split][:, k].mean()) for k, name in enumerate(data.findings)})
        rows.append(row)
    return pd.DataFrame(rows).set_index("split")


# ---------------------------------------------------------------------------------------------------------------
# instruments
# ---------------------------------------------------------------------------------------------------------------
def _cached(namespace: str, description: dict, build: Callable[[], dict]) -> tuple[dict, bool, str]:
    cache = ArtifactCache(f"{CACHE}-{namespace}")
    cached = cache.exists(description)
    return cache.get_or_create(description, build), cached, cache.key(description)


def train_identity_network(images: np.ndarray, patients: np.ndarray, config: Config, role: str,
                           device: torch.device | None = None, progress: bool = False,
                           backbone: str | None = None) -> tuple[torch.nn.Module, dict]:
    """An ArcFace identity embedding (GMIA's E_id recipe: s=64, m=0.5) trained on ``images`` (uint8 (N, R, R)) and
    their patients; ``role`` ("E_id", "fixed attacker", "independent attacker", "adaptive: <set>") seeds it and
    ``backbone`` (default ``config.identity_backbone``) is its architecture. Returns the network (images in [0, 1]
    -> unit embeddings (N, D)) and ``{"cached", "seconds", "history", "key"}``."""
    backbone = backbone or config.identity_backbone
    description = {"role": role, "data": content_hash(images, patients.astype(str)), "backbone": backbone,
                   "dim": config.identity_dim, "epochs": config.identity_epochs, "seed": config.seed}

    def build() -> dict:
        started = time.perf_counter()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(config.seed, "identity-init", role))
            network = EmbeddingNet(1, config.identity_dim, backbone)
        result = train_embedding(network, images, patients, TrainSettings(
            epochs=config.identity_epochs, seed=derive_seed(config.seed, "identity", role), device=device,
            progress=progress))
        return {"model": result.model.cpu().eval(), "history": result.history, "seconds": time.perf_counter() - started}

    artifact, cached, key = _cached("identity", description, build)
    return artifact["model"].eval(), {"cached": cached, "seconds": artifact["seconds"], "history": artifact["history"],
                                      "key": key}


def train_finding_classifier(images: np.ndarray, labels: np.ndarray, config: Config, tag: str,
                             device: torch.device | None = None, progress: bool = False, replicate: int = 0
                             ) -> tuple[torch.nn.Module, dict]:
    """A multi-label finding classifier trained on ``images`` (uint8 (N, R, R)) with the real labels (N, K): E_ut
    when ``images`` are the real training images, a utility classifier otherwise. Same recipe and seed for every
    training set, so the rows of the utility table differ only in their images; ``replicate`` r > 0 trains the
    r-th judge replicate with its own seed (:func:`anonpaper.runtime.replicate_parts`)."""
    description = {"data": content_hash(images, labels), "backbone": config.utility_backbone,
                   "epochs": config.utility_epochs, "seed": config.seed,
                   **({"replicate": replicate} if replicate else {})}

    def build() -> dict:
        started = time.perf_counter()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(config.seed, "finding-classifier-init", *replicate_parts(replicate)))
            network = build_classifier(config.utility_backbone, 1, labels.shape[1])
        result = train_multilabel_classifier(network, (images, labels), TrainSettings(
            epochs=config.utility_epochs, seed=derive_seed(config.seed, "finding-classifier",
                                                           *replicate_parts(replicate)), device=device,
            progress=progress))
        return {"model": result.model.cpu().eval(), "history": result.history, "seconds": time.perf_counter() - started}

    artifact, cached, key = _cached("findings", description, build)
    return artifact["model"].eval(), {"cached": cached, "seconds": artifact["seconds"], "history": artifact["history"],
                                      "key": key, "tag": tag}


def membership_folds(data: GMIAData, folds: int, seed: int) -> dict[str, np.ndarray]:
    """The fold (0..F-1) of every image of every split, by patient: members (training-split patients) and
    non-members (test-split patients first, then validation-split ones) are each shuffled and dealt round-robin, so
    every fold holds members and, where there are enough test patients, non-members it can be attacked on.

    Raises:
        ValueError: With fewer than 3 member or non-member patients (an attacker needs a training, a selection and
            an attacked fold).
    """
    rng = np.random.default_rng(derive_seed(seed, "membership-folds"))
    members = rng.permutation(np.unique(data.patients["train"]))
    tested = np.unique(data.patients["test"])
    outsiders = np.concatenate([rng.permutation(tested),
                                rng.permutation(np.setdiff1d(np.unique(data.patients["val"]), tested))])
    if len(members) < 3 or len(outsiders) < 3:
        raise ValueError(f"the membership attack needs at least 3 member and 3 non-member patients, got "
                         f"{len(members)} and {len(outsiders)}; raise CXR_PATIENTS")
    fold_of = {int(p): i % folds for i, p in enumerate(members)}
    fold_of.update({int(p): i % folds for i, p in enumerate(outsiders)})
    return {split: np.array([fold_of[int(p)] for p in data.patients[split]], dtype=np.int64) for split in SPLITS}


def balanced_accuracy_or_nan(truth: np.ndarray, predicted: np.ndarray) -> float:
    """Mean of the true-positive and true-negative rates of 0/1 arrays; NaN unless both classes are present
    (a bootstrap draw without one class).

    >>> balanced_accuracy_or_nan(np.array([1, 1, 0, 0]), np.array([1, 0, 0, 0]))
    0.75
    """
    truth = np.asarray(truth, bool)
    if truth.all() or not truth.any():
        return float("nan")
    return balanced_accuracy(truth.astype(np.int64), np.asarray(predicted, bool).astype(np.int64))


def train_membership_attackers(data: GMIAData, config: Config, device: torch.device | None = None,
                               progress: bool = False, replicate: int = 0) -> tuple[list[torch.nn.Module], dict]:
    """The membership-inference attackers (binary classifiers on REAL images, class 1 = member = a training-split
    image, which the co-trained generator and every instrument saw): one per patient fold (:func:`membership_folds`,
    ``F`` folds), trained on the real images of the folds other than the attacked one and the next, and selected
    (best epoch by validation macro-F1) on the next fold's, so none is trained or selected on the images it
    attacks. The authors published no MIA code; the paper's attacker is "trained on the real dataset and evaluated
    on the anonymised dataset" and reports its accuracy on its own training data (0.968), which measures
    memorisation; a held-out attack needs patients the attacker never saw. ``replicate`` as in
    :func:`train_finding_classifier` (the folds stay the same).

    Returns:
        The F attackers (eval, CPU) and ``{"cached", "seconds", "history", "key", "folds", "training_accuracy"}``
        (``folds``: split -> fold per image; ``training_accuracy``: accuracy on their own training images, pooled).
    """
    folds = min(config.membership_folds, max(3, len(np.unique(data.patients["test"]))))
    fold = membership_folds(data, folds, config.seed)
    images = np.concatenate([data.images[split] for split in SPLITS])
    member = np.concatenate([np.full(len(data.images[split]), split == "train") for split in SPLITS]).astype(np.int64)
    folds_all = np.concatenate([fold[split] for split in SPLITS])
    attackers, seconds, cached_all, keys, correct, seen, history = [], 0.0, True, [], 0, 0, None
    for attacked in range(folds):
        select = (attacked + 1) % folds
        train_rows = np.flatnonzero((folds_all != attacked) & (folds_all != select))
        select_rows = np.flatnonzero(folds_all == select)
        description = {"data": content_hash(images[train_rows], member[train_rows], images[select_rows],
                                            member[select_rows]),
                       "backbone": config.utility_backbone, "epochs": config.attacker_epochs, "seed": config.seed,
                       "fold": attacked, "folds": folds, **({"replicate": replicate} if replicate else {})}

        def build(train_rows=train_rows, select_rows=select_rows, attacked=attacked) -> dict:
            started = time.perf_counter()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(derive_seed(config.seed, "membership-init", attacked, *replicate_parts(replicate)))
                network = build_classifier(config.utility_backbone, 1, 2)
            result = train_classifier(network, (images[train_rows], member[train_rows]),
                                      (images[select_rows], member[select_rows]), TrainSettings(
                                          epochs=config.attacker_epochs, batch_size=32, lr=1e-3, lr_schedule="cosine",
                                          seed=derive_seed(config.seed, "membership", attacked,
                                                           *replicate_parts(replicate)), device=device,
                                          progress=progress))
            return {"model": result.model.cpu().eval(), "history": result.history,
                    "seconds": time.perf_counter() - started}

        artifact, cached, key = _cached("membership", description, build)
        model = artifact["model"].eval()
        attackers.append(model)
        seconds += artifact["seconds"]
        cached_all &= cached
        keys.append(key)
        history = artifact["history"] if history is None else history
        predicted = predict_proba(model, images[train_rows])[:, 1] >= 0.5
        correct += int((predicted == member[train_rows].astype(bool)).sum())
        seen += len(train_rows)
    return attackers, {"cached": cached_all, "seconds": seconds, "history": history, "key": keys, "folds": fold,
                       "training_accuracy": correct / max(seen, 1)}


class DomainLPIPS:
    """The domain LPIPS of a cohort-trained U-Net (:func:`anonpaper.metrics.domain_lpips` on its feature taps),
    images upsampled to the U-Net's training size first.

    Calling it on two (N, 1, R, R) batches in [0, 1] returns (N,) distances in [0, 2] (lower = more similar;
    differentiable, so it is also GMIA's perceptual loss).
    """

    def __init__(self, unet: torch.nn.Module, size: int):
        self.unet = unet.eval().requires_grad_(False)  # a fixed instrument: no gradients into its weights
        self.size = size

    def _resize(self, images: torch.Tensor) -> torch.Tensor:
        if images.shape[-1] == self.size:
            return images
        return torch.nn.functional.interpolate(images, size=self.size, mode="bilinear", align_corners=False).clamp(0, 1)

    def __call__(self, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
        self.unet.to(first.device)
        return domain_lpips(self._resize(first), self._resize(second), self.unet.forward_features, reduction="none")


def train_lpips_network(data: GMIAData, config: Config, device: torch.device | None = None,
                        progress: bool = False) -> tuple[DomainLPIPS, dict]:
    """The lung U-Net of the domain LPIPS, trained on the chapter's cohort (native size) and cached."""
    started = time.perf_counter()
    model = trained_segmenter(data.cohort, "lungs", epochs=config.lpips_epochs, patch_size=64,
                              patches_per_epoch=256, seed=config.seed, progress=progress, device=device)
    info = {"cached": model.from_cache, "seconds": time.perf_counter() - started, "history": model.history,
            "key": model.cache_key, "val_dice": model.val_dice}
    return DomainLPIPS(model.model, max(64, data.resolution)), info


# ---------------------------------------------------------------------------------------------------------------
# projection
# ---------------------------------------------------------------------------------------------------------------
def _gan_settings(config: Config, total_steps: int, seed_tag: str, output_dir: str | None,
                  progress: bool) -> GANTrainingConfig:
    # GMIA's recipe is the trainer's default (lr 0.0025, betas (0, 0.99), R1 gamma 1 every 16 steps, path length 2
    # every 4); no style mixing (there is no mapping network in co-training); no augmentation (the paper has none).
    checkpoint = max(1, total_steps // 4)
    return GANTrainingConfig(total_steps=total_steps, batch_size=config.projection_batch_size,
                             style_mixing_probability=0.0, seed=derive_seed(config.seed, seed_tag),
                             checkpoint_every=checkpoint if output_dir else 0, metrics_every=0, log_every=1,
                             output_dir=output_dir, progress=progress)


def co_train_projection(data: GMIAData, config: Config, stylegan_config, lpips: DomainLPIPS, lpips_key: str,
                        device: torch.device | None = None, progress: bool = False
                        ) -> tuple[LatentEncoder, StyleGenerator, dict]:
    """GMIA's co-training of E, S and D from scratch on the training split (cached; resumes from a checkpoint).

    Returns the EMA encoder and generator (eval, CPU) and ``{"cached", "seconds", "history", "key"}``.
    """
    total = config.kimg_steps(config.co_training_kimg)
    description = {"scheme": "co-training", "stylegan": stylegan_config.to_dict(), "data": data.description,
                   "gan": _gan_settings(config, total, "co-training", None, False).__dict__, "lpips": lpips_key}
    cache = ArtifactCache(f"{CACHE}-projection")
    key = cache.key(description)

    def build() -> dict:
        started = time.perf_counter()
        generator = StyleGenerator(stylegan_config, seed=derive_seed(config.seed, "co-training-S"),
                                   implementation="fast")
        encoder = LatentEncoder(stylegan_config, generator.num_ws, seed=derive_seed(config.seed, "co-training-E"))
        discriminator = ResidualDiscriminator(stylegan_config, seed=derive_seed(config.seed, "co-training-D"))
        settings = ProjectionTrainingSettings(gan=_gan_settings(config, total, "co-training",
                                                                str(cache_dir() / "gmia-runs" / key), progress))
        result = co_train(encoder, generator, discriminator, data.tensor("train"), settings, lpips, device=device)
        return {"encoder": {k: v.cpu() for k, v in result.encoder.state_dict().items()},
                "generator": {k: v.cpu() for k, v in result.generator.state_dict().items()},
                "history": result.history, "seconds": time.perf_counter() - started}

    cached = cache.exists(description)
    artifact = cache.get_or_create(description, build)
    generator = StyleGenerator(stylegan_config, seed=0)
    generator.load_state_dict(artifact["generator"])
    encoder = LatentEncoder(stylegan_config, generator.num_ws, seed=0)
    encoder.load_state_dict(artifact["encoder"])
    return encoder.eval(), generator.eval(), {"cached": cached, "seconds": artifact["seconds"],
                                              "history": artifact["history"], "key": key}


def e_train_projection(data: GMIAData, config: Config, generator: StyleGenerator, generator_key: str,
                       lpips: DomainLPIPS, lpips_key: str, device: torch.device | None = None,
                       progress: bool = False) -> tuple[LatentEncoder, dict]:
    """GMIA's E-training baseline: E alone against the frozen generator (10 MSE + 10 domain LPIPS), cached."""
    total = config.kimg_steps(config.encoder_kimg)
    description = {"scheme": "encoder-training", "generator": generator_key, "data": data.description,
                   "gan": _gan_settings(config, total, "e-training", None, False).__dict__, "lpips": lpips_key}
    cache = ArtifactCache(f"{CACHE}-projection")
    key = cache.key(description)

    def build() -> dict:
        started = time.perf_counter()
        encoder = LatentEncoder(generator.config, generator.num_ws, seed=derive_seed(config.seed, "e-training-E"))
        settings = ProjectionTrainingSettings(gan=_gan_settings(config, total, "e-training",
                                                                str(cache_dir() / "gmia-runs" / key), progress),
                                              encoder_epoch_steps=max(1, min(100, total // 4)))
        result = train_encoder(encoder, generator, data.tensor("train"), settings, lpips, device=device)
        generator.cpu()
        return {"encoder": {k: v.cpu() for k, v in result.encoder.state_dict().items()},
                "history": result.history, "seconds": time.perf_counter() - started}

    cached = cache.exists(description)
    artifact = cache.get_or_create(description, build)
    encoder = LatentEncoder(generator.config, generator.num_ws, seed=0)
    encoder.load_state_dict(artifact["encoder"])
    return encoder.eval(), {"cached": cached, "seconds": artifact["seconds"], "history": artifact["history"],
                            "key": key}


@torch.no_grad()
def reconstruct(encoder: torch.nn.Module, generator: StyleGenerator, images: np.ndarray,
                batch_size: int = 64) -> np.ndarray:
    """``G(E(x))`` of uint8 images (N, R, R), as uint8 (N, R, R) (constant synthesis noise)."""
    encoder.eval(), generator.eval()
    parts = []
    for start in range(0, len(images), batch_size):
        real = to_tensor(images[start:start + batch_size])
        parts.append(to_uint8(to_unit_range(generator.synthesis(encoder(to_signed_range(real)), noise_mode="const"))))
    return np.concatenate(parts)


# ---------------------------------------------------------------------------------------------------------------
# anonymisation
# ---------------------------------------------------------------------------------------------------------------
def variants(config: Config) -> dict[str, dict[str, Any]]:
    """The latent-optimisation settings of the chapter: name -> ``{"margin", "identity_weight",
    "utility_weight", "splits"}``. The main setting (``L_id + L_ut`` at ``config.margin``) is first and covers
    every split (the adaptive attacker needs its validation images); the ablations cover train and test."""
    out = {main_name(config.margin): {"margin": config.margin, "identity_weight": 1.0, "utility_weight": 1.0,
                                      "splits": SPLITS}}
    for margin in config.margins:
        if margin != config.margin:
            out[main_name(margin)] = {"margin": margin, "identity_weight": 1.0, "utility_weight": 1.0,
                                      "splits": ("train", "test")}
    out[ID_ONLY] = {"margin": config.margin, "identity_weight": 1.0, "utility_weight": 0.0, "splits": ("train", "test")}
    out[UT_ONLY] = {"margin": config.margin, "identity_weight": 0.0, "utility_weight": 1.0, "splits": ("train", "test")}
    return out


def anonymise_images(encoder: LatentEncoder, generator: StyleGenerator, images: np.ndarray,
                     identity_network: torch.nn.Module, utility_network: torch.nn.Module,
                     settings: LatentOptimizationSettings, description: dict) -> dict[str, Any]:
    """GMIA latent optimisation of uint8 images (N, R, R), cached under ``description`` + the settings + the
    images' hash. Returns ``{"images": uint8 (N, R, R), "reconstructions": uint8, "final_cosine": (N,),
    "curves": {"cosine", "identity", "utility"}: (steps,) means over images, "seconds"}``."""
    full = {**description, "settings": {k: v for k, v in settings.__dict__.items() if k != "progress"},
            "images": content_hash(images)}

    def build() -> dict:
        started = time.perf_counter()
        result = anonymize(encoder, generator, to_tensor(images), identity_network, utility_network.forward_features,
                           settings)
        return {"images": to_uint8(result.images), "reconstructions": to_uint8(result.reconstructions),
                "final_cosine": result.final_cosine.numpy(),
                "curves": {"cosine": result.cosine.mean(0).numpy(), "identity": result.identity_loss.mean(0).numpy(),
                           "utility": result.utility_loss.mean(0).numpy()},
                "seconds": time.perf_counter() - started}

    artifact, cached, _ = _cached("anonymised", full, build)
    return {**artifact, "cached": cached}


def matched_baselines(data: GMIAData, target_psnr: float) -> tuple[dict[str, dict[str, np.ndarray]], dict]:
    """Gaussian blur and pixelation whose mean PSNR on the test images equals ``target_psnr`` (one sigma and one
    block size for the whole cohort, found on the test split), applied to every split.

    Returns ``({BLUR: split -> uint8, PIXELATE: split -> uint8}, {"sigma", "block", "target_psnr", "matched"})``;
    ``matched`` is False where the target is out of the distortion's reach (then the strongest one is used).
    """
    test = data.tensor("test").double()
    side = data.resolution
    info: dict[str, Any] = {"target_psnr": float(target_psnr)}
    try:
        sigma = float(blur_to_psnr(test, target_psnr, per_image=False).parameter[0])
        info["blur_matched"] = True
    except ValueError:  # the target is below what any blur reaches: use the strongest blur
        sigma, info["blur_matched"] = float(side), False
    try:
        block = int(pixelate_to_psnr(test, target_psnr, per_image=False, max_block_size=side // 2).parameter[0])
        info["pixelate_matched"] = True
    except ValueError:
        block, info["pixelate_matched"] = side // 2, False
    info.update(sigma=sigma, block=block)
    sets: dict[str, dict[str, np.ndarray]] = {BLUR: {}, PIXELATE: {}}
    for split in SPLITS:
        images = data.tensor(split).double()
        sets[BLUR][split] = to_uint8(gaussian_blur(images, sigma))
        sets[PIXELATE][split] = to_uint8(pixelate(images, block))
    return sets, info


# ---------------------------------------------------------------------------------------------------------------
# evaluation
# ---------------------------------------------------------------------------------------------------------------
def iw_ssim_scales(resolution: int) -> int:
    """The most IW-SSIM scales (at most 5) whose coarsest level still fits the 11 px window."""
    scales = 1
    while scales < 5 and 10 * 2 ** scales + 1 <= resolution:
        scales += 1
    return scales


def _mean_se(values: np.ndarray, patients: np.ndarray, config: Config, tag: str) -> tuple[float, float]:
    values = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(values)
    if not finite.any():
        return float("nan"), float("nan")
    se = patient_bootstrap_se(values[finite], values[finite], patients[finite],
                              lambda truth, _: float(np.mean(truth)), config.bootstrap,
                              derive_seed(config.seed, "bootstrap", tag))
    return float(values[finite].mean()), se


def quality_values(real: np.ndarray, other: np.ndarray, lpips: DomainLPIPS) -> dict[str, np.ndarray]:
    """Per-image PSNR (dB), SSIM, IW-SSIM and domain LPIPS of ``other`` against ``real`` (uint8 (N, R, R)).

    Higher PSNR / SSIM / IW-SSIM and lower LPIPS = closer to the original. IW-SSIM is NaN for an image pair
    whose information-content matrix is singular (a flat image).
    """
    first, second = to_tensor(real), to_tensor(other)
    scales = iw_ssim_scales(first.shape[-1])
    iw = []
    for index in range(len(first)):
        try:
            iw.append(float(iw_ssim(first[index:index + 1], second[index:index + 1], scales=scales)))
        except ValueError:
            iw.append(float("nan"))
    with torch.no_grad():
        distance = torch.cat([lpips(first[i:i + 64], second[i:i + 64]) for i in range(0, len(first), 64)])
    return {"PSNR": psnr(first, second, reduction="none").double().numpy(),
            "SSIM": ssim(first, second, reduction="none").double().numpy(),
            "IW-SSIM": np.array(iw), "LPIPS (domain)": distance.double().numpy()}


def quality_table(data: GMIAData, sets: dict[str, dict[str, np.ndarray]], lpips: DomainLPIPS, config: Config
                  ) -> tuple[pd.DataFrame, dict[str, dict[str, np.ndarray]]]:
    """Image quality of every set's test images against the real ones: rows (set, metric, value, se, n), and the
    per-image values (set -> metric -> (N,)) for paired comparisons."""
    real, patients = data.images["test"], data.patients["test"]
    rows, values = [], {}
    for name, images in sets.items():
        values[name] = quality_values(real, images["test"], lpips)
        for metric, per_image in values[name].items():
            mean, se = _mean_se(per_image, patients, config, f"quality-{name}-{metric}")
            rows.append({"set": name, "metric": metric, "value": mean, "se": se, "n": len(real)})
    return pd.DataFrame(rows), values


def paired_difference(first: np.ndarray, second: np.ndarray, patients: np.ndarray, config: Config,
                      tag: str) -> tuple[float, float]:
    """Mean of ``first - second`` per image and its patient-bootstrap SE (NaN pairs dropped)."""
    return _mean_se(np.asarray(first, float) - np.asarray(second, float), patients, config, tag)


def utility_metrics(labels: np.ndarray, probabilities: np.ndarray) -> dict[str, float]:
    """Macro averages over findings (those with both classes in ``labels``) of accuracy and F1 at 0.5, average
    precision and AUROC; all in [0, 1], higher is better."""
    predicted = (probabilities >= 0.5).astype(np.int64)
    usable = [k for k in range(labels.shape[1]) if 0 < labels[:, k].sum() < len(labels)]
    if not usable:
        return {"accuracy": float("nan"), "AP": float("nan"), "AUROC": float("nan"), "F1": float("nan")}
    accuracy = float(np.mean([(predicted[:, k] == labels[:, k]).mean() for k in usable]))
    f1 = []
    for k in usable:
        tp = int(((predicted[:, k] == 1) & (labels[:, k] == 1)).sum())
        fp = int(((predicted[:, k] == 1) & (labels[:, k] == 0)).sum())
        fn = int(((predicted[:, k] == 0) & (labels[:, k] == 1)).sum())
        f1.append(2 * tp / max(2 * tp + fp + fn, 1))
    ap = float(np.mean([average_precision(labels[:, k], probabilities[:, k]) for k in usable]))
    return {"accuracy": accuracy, "AP": ap, "AUROC": macro_auroc(labels, probabilities), "F1": float(np.mean(f1))}


def utility_row(classifier: torch.nn.Module, data: GMIAData, config: Config, name: str) -> dict[str, Any]:
    """Utility of a classifier on the REAL test set: macro accuracy, AP, AUROC, F1 and the AUROC's patient-
    bootstrap SE."""
    labels, patients = data.labels["test"], data.patients["test"]
    probabilities = predict_multilabel(classifier, data.images["test"])
    row = {"training set": name, **utility_metrics(labels, probabilities), "n": len(labels)}
    rows = np.arange(len(labels))
    row["AUROC_se"] = patient_bootstrap_se(rows, rows, patients, lambda t, _: macro_auroc(labels[t], probabilities[t]),
                                           config.bootstrap, derive_seed(config.seed, "bootstrap-utility", name))
    return row


def verification_threshold(attacker: torch.nn.Module, images: np.ndarray | None, patients: np.ndarray,
                           fallback: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[float, str]:
    """The attacker's threshold on the squared distance of unit embeddings, F1-optimal on the pairs of
    ``images`` (validation), or of ``fallback`` when there are none (None) or their pairs lack a class. Returns it
    and its source."""
    for source, (pool, ids) in (("validation pairs", (images, patients)), ("training pairs", fallback)):
        if pool is None or len(pool) < 2:
            continue
        scores, same = inner_pairs(embed(attacker, pool), ids)
        if 0 < same.sum() < len(same):
            return select_threshold(scores, same, higher_means_same=False), source
    raise ValueError("no validation or training pairs with both same- and different-patient pairs")


def outer_auc(scores: np.ndarray, images: np.ndarray, patients: np.ndarray) -> float:
    """The outer verification AUC from a (real x anonymised) score matrix (squared distances: lower = same): the
    pairs of an image with its own anonymisation (same ``images`` index, so a bootstrap's repeated draws count too)
    against the pairs of different patients; pairs of one patient's different images are left out, as in
    :func:`anonpaper.metrics.privacy.outer_risk`. 0.5 = chance; below 0.5 = own anonymisations are FARTHER than
    strangers'. NaN without both kinds of pair.

    Args:
        scores: (M, M) scores, row = real image, column = anonymised image.
        images: (M,) image index of each row / column (equal indices = an image and its own anonymisation).
        patients: (M,) patient of each row / column.
    """
    own = images[:, None] == images[None, :]
    stranger = patients[:, None] != patients[None, :]
    if not own.any() or not stranger.any():
        return float("nan")
    values = np.concatenate([scores[own], scores[stranger]])
    labels = np.concatenate([np.ones(int(own.sum()), bool), np.zeros(int(stranger.sum()), bool)])
    return float(verification_auc(values, labels, higher_means_same=False))


def linkability_rows(attacker: torch.nn.Module, threshold: float, data: GMIAData,
                     sets: dict[str, dict[str, np.ndarray]], config: Config, attacker_name: str
                     ) -> tuple[list[dict], dict[str, dict[str, np.ndarray]]]:
    """Linkability rows of every set (and of the real test images) for one attacker.

    Each row: ``attacker``, ``set``, ``risk`` ("real" / "inner" / "outer"), the published columns (F1, accuracy,
    TAR, ``far_as_published`` = 1 - TAR, the authors' "FAR") from the positive-only protocol, the true FAR and AUC
    with the negative pairs added, and per-image means with patient-bootstrap SEs: ``tar_image`` (outer: own
    anonymisation accepted; inner/real: share of the same patient's other images accepted), ``stranger_image``
    (outer: share of other patients' anonymisations accepted), ``own_closer`` (outer, threshold-free: share of
    other patients' anonymisations farther from the real image than its own; 0.5 = unlinkable, 1 = always
    linked). Also returns per-image arrays for the claims.
    """
    real, patients = embed(attacker, data.images["test"]), data.patients["test"]
    same = patients[:, None] == patients[None, :]
    np.fill_diagonal(same, False)
    different = patients[:, None] != patients[None, :]
    rows, per_image = [], {}

    def inner_row(embeddings: np.ndarray, name: str, risk: str) -> None:
        report = inner_risk(embeddings, patients, threshold)
        accepted = cross_pair_scores(embeddings, embeddings) <= threshold
        share = np.array([accepted[i, same[i]].mean() if same[i].any() else np.nan for i in range(len(patients))])
        tar, tar_se = _mean_se(share, patients, config, f"link-{attacker_name}-{name}-{risk}")
        rows.append({"attacker": attacker_name, "set": name, "risk": risk, **linkability_as_published(report),
                     "auc": report["auc"], "auc_se": np.nan, "tar_image": tar, "tar_image_se": tar_se,
                     "stranger_image": np.nan, "stranger_image_se": np.nan, "own_closer": np.nan,
                     "own_closer_se": np.nan, "n": len(patients)})
        per_image[f"{name}/{risk}"] = {"tar": share}

    inner_row(real, REAL, "real")
    for name, images in sets.items():
        if name == REAL:
            continue
        anonymised = embed(attacker, images["test"])
        inner_row(anonymised, name, "inner")
        published = outer_risk(real, anonymised, threshold)
        full = outer_risk(real, anonymised, threshold, patient_ids=patients)
        scores = cross_pair_scores(real, anonymised)
        accepted = scores <= threshold
        own = np.diag(accepted).astype(float)
        stranger = np.array([accepted[i, different[i]].mean() for i in range(len(patients))])
        # Threshold-free: the share of other patients' anonymisations farther from the real image than its own
        # (ties count half); 0.5 = the attacker cannot tell its own anonymisation from a stranger's.
        closer = np.array([np.mean((scores[i, i] < scores[i, different[i]])
                                   + 0.5 * (scores[i, i] == scores[i, different[i]])) for i in range(len(patients))])
        tar, tar_se = _mean_se(own, patients, config, f"outer-{attacker_name}-{name}")
        stranger_mean, stranger_se = _mean_se(stranger, patients, config, f"stranger-{attacker_name}-{name}")
        rank, rank_se = _mean_se(closer, patients, config, f"rank-{attacker_name}-{name}")
        rows_index = np.arange(len(patients))
        auc_se = patient_bootstrap_se(rows_index, rows_index, patients,
                                      lambda drawn, _: outer_auc(scores[np.ix_(drawn, drawn)], drawn, patients[drawn]),
                                      config.bootstrap, derive_seed(config.seed, "bootstrap-auc", attacker_name, name))
        row = {"attacker": attacker_name, "set": name, "risk": "outer", **linkability_as_published(published),
               "auc": full["auc"], "auc_se": auc_se, "tar_image": tar, "tar_image_se": tar_se,
               "stranger_image": stranger_mean,
               "stranger_image_se": stranger_se, "own_closer": rank, "own_closer_se": rank_se, "n": len(patients)}
        row["far"] = full["far"]  # the true FAR needs the negative pairs
        rows.append(row)
        per_image[f"{name}/outer"] = {"tar": own, "stranger": stranger}
    return rows, per_image


def singling_out_rows(attacker: torch.nn.Module, data: GMIAData, sets: dict[str, dict[str, np.ndarray]],
                      config: Config, attacker_name: str = "fixed") -> list[dict]:
    """Hidden rate and local cloaking of every set's test images in the attacker's embedding space, with the hidden
    rate's patient-bootstrap SE (higher = less singling-out risk); ``attacker_name`` labels the rows."""
    real, patients = embed(attacker, data.images["test"]), data.patients["test"]
    rows = []
    for name, images in sets.items():
        if name == REAL:
            continue
        report = singling_out_risk(real, embed(attacker, images["test"]))
        hidden, hidden_se = _mean_se((report["cloaking_counts"] > 0).astype(float), patients, config,
                                     f"singling-{name}" if attacker_name == "fixed" else
                                     f"singling-{attacker_name}-{name}")
        rows.append({"attacker": attacker_name, "set": name, "hidden_rate": report["hidden_rate"],
                     "hidden_rate_se": hidden_se, "local_cloaking": report["local_cloaking"],
                     "mean_cloaking": float(np.mean(report["cloaking_counts"])), "n": len(patients)})
    return rows


def membership_rows(attackers: list[torch.nn.Module], folds: dict[str, np.ndarray], data: GMIAData,
                    sets: dict[str, dict[str, np.ndarray]], config: Config,
                    training_accuracy: float = float("nan")) -> list[dict]:
    """Membership inference on held-out patients: every training-split image of a set (a member's) and every
    test-split image (a non-member's) is scored by the attacker of its patient's fold, which never saw that patient.
    Per set: the share of members called members (``members_detected``; the paper's "accuracy" on the anonymised
    set, all of whose images are members'), the share of non-members called non-members, their balanced accuracy
    (0.5 = chance) with its patient-bootstrap SE, and for the real set the attackers' accuracy on their own training
    images (``attacker_training_accuracy``: the paper's 0.968 measures that)."""
    truth = np.concatenate([np.ones(len(data.images["train"]), bool), np.zeros(len(data.images["test"]), bool)])
    patients = np.concatenate([data.patients["train"], data.patients["test"]])
    fold = np.concatenate([folds["train"], folds["test"]])
    rows = []
    for name, images in sets.items():
        pool = np.concatenate([images["train"], images["test"]])
        predicted = np.zeros(len(pool), bool)
        for index, attacker in enumerate(attackers):
            chosen = np.flatnonzero(fold == index)
            if len(chosen):
                predicted[chosen] = predict_proba(attacker, pool[chosen])[:, 1] >= 0.5
        accuracy = balanced_accuracy_or_nan(truth, predicted)
        se = patient_bootstrap_se(truth, predicted, patients, balanced_accuracy_or_nan, config.bootstrap,
                                  derive_seed(config.seed, "bootstrap-mia", name))
        detected, detected_se = _mean_se(predicted[truth].astype(float), patients[truth], config, f"mia-{name}")
        rows.append({"set": name, "members_detected": detected, "members_detected_se": detected_se,
                     "non_members_rejected": float((~predicted[~truth]).mean()), "balanced_accuracy": accuracy,
                     "balanced_accuracy_se": se, "n": int(len(pool)),
                     "attacker_training_accuracy": training_accuracy if name == REAL else np.nan})
    return rows


# ---------------------------------------------------------------------------------------------------------------
# the whole chapter
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    """What :func:`run` returns (fractions in [0, 1]; ``*_se`` = patient-bootstrap standard errors).

    Attributes:
        config: The run's :class:`Config`.
        data: Cohort summary per split (images, patients, finding prevalences).
        resolution: Image side R of the generator and every set.
        generator: The frozen generator's ``{"config", "kimg", "source", "key"}``.
        training: One row per trained network (network, cached, seconds).
        histories: Network -> training history.
        quality: Rows (set, metric, value, se, n): PSNR (dB), SSIM, IW-SSIM, LPIPS (domain) against the real test
            images.
        quality_paired: ``metric -> (mean, se)`` of co-training minus E-training per test image.
        utility: Rows (training set, accuracy, AP, AUROC, F1, AUROC_se, n) on the real test set.
        linkability: Rows of :func:`linkability_rows` for the fixed, the independent and the adaptive attackers.
        singling_out: Rows of :func:`singling_out_rows` for the same attackers (column ``attacker``).
        membership: Rows of :func:`membership_rows`.
        margins: Rows (margin, set, final identity cosine of E_id, ``reached``: share of test images whose final
            cosine reached the margin, PSNR) of the margin ablation.
        curves: Setting -> mean optimisation curves (cosine, identity, utility loss per step).
        thresholds: Attacker -> ``{"threshold", "source"}``.
        baselines: Matched-PSNR baselines' sigma, block size, target PSNR and whether each matched.
        instruments: Held-out quality of the instruments: verification AUC of the fixed (``identity_auc``) and
            independent attackers on real test pairs, of each adaptive attacker on its set's anonymised test pairs
            (``adaptive_auc/<set>``), E_ut's macro AUROC, the membership attackers' balanced accuracy on held-out
            real images, the projector's PSNR, the cohort-mean image's PSNR and their difference (dB), E_ut's macro
            AUROC and the fixed attacker's outer AUC on the co-training reconstructions, E-training's encoder updates
            relative to co-training's, and the lung U-Net's Dice.
        examples: Set -> uint8 (k, R, R) test images of several patients (same rows in every set).
        example_patients: The patients of the example rows.
        stage_seconds: Stage -> wall seconds of this run.
        seconds: Wall seconds of :func:`run`.
        replicates: With ``JUDGE_SEEDS > 1``, one outcome per judge seed with that seed's ``utility``,
            ``linkability``, ``singling_out``, ``membership``, ``thresholds`` and ``instruments``: the claims are
            decided on each and combined. The outcome itself then holds those tables averaged over the seeds
            (``*_se`` with the seed spread, ``*_seed_sd``), the instruments' means and the first seed's thresholds.
            Empty with one judge seed.
    """

    config: Config
    data: pd.DataFrame
    resolution: int
    generator: dict[str, Any]
    training: pd.DataFrame
    histories: dict[str, pd.DataFrame]
    quality: pd.DataFrame
    quality_paired: dict[str, tuple[float, float]]
    utility: pd.DataFrame
    linkability: pd.DataFrame
    singling_out: pd.DataFrame
    membership: pd.DataFrame
    margins: pd.DataFrame
    curves: dict[str, dict[str, np.ndarray]]
    thresholds: dict[str, dict[str, Any]]
    baselines: dict[str, Any]
    instruments: dict[str, float]
    examples: dict[str, np.ndarray]
    example_patients: list[str]
    stage_seconds: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    replicates: list["Outcome"] = field(default_factory=list)

    @property
    def main(self) -> str:
        """Name of the main anonymisation setting."""
        return main_name(self.config.margin)

    @property
    def n_test(self) -> int:
        return int(self.data.loc["test", "images"])


def _example_rows(patients: np.ndarray, count: int = 6) -> np.ndarray:
    """First image of up to ``count`` different test patients."""
    _, first = np.unique(patients, return_index=True)
    return np.sort(first)[:count]


def run(config: Config, generator_config, progress: bool = False, log: Callable[[str], None] = print) -> Outcome:
    """Run the chapter (see the module docstring).

    Args:
        config: This chapter's :class:`Config`.
        generator_config: The generators chapter's config at ``config.generators_profile``
            (``anonpaper.runner.study_config("02_generators", profile)``): its chest X-ray StyleGAN2 is E-training's
            frozen generator, and its architecture and resolution are co-training's.
        progress: Progress bars (notebooks: False).
        log: Where stage messages go.
    """
    started = time.perf_counter()
    stage_seconds: dict[str, float] = {}
    tick = [time.perf_counter()]

    def stage(name: str) -> None:
        now = time.perf_counter()
        stage_seconds[name] = now - tick[0]
        tick[0] = now
        log(f"{name}: {stage_seconds[name]:.0f} s")

    device = get_device(config.device)
    trained = load_generator("cxr-sg2", generator_config, progress=progress)
    stylegan_config = generator_config.stylegan_config("cxr-sg2")
    frozen = trained.generator.eval()
    data = load_data(config, stylegan_config.resolution)
    stage(f"generator ({trained.source}) and cohort")
    training, histories = [], {}

    def note(name: str, info: dict) -> None:
        training.append({"network": name, "cached": info["cached"], "seconds": info["seconds"]})
        if info.get("history") is not None:
            histories[name] = pd.DataFrame(info["history"])

    lpips, lpips_info = train_lpips_network(data, config, device, progress)
    note("lung U-Net (domain LPIPS)", lpips_info)
    identity, info = train_identity_network(data.images["train"], data.patients["train"], config, "E_id", device,
                                            progress)
    note("E_id (identity embedding)", info)
    keys = {"E_id": info["key"]}
    attacker, info = train_identity_network(data.images["train"], data.patients["train"], config, "fixed attacker",
                                            device, progress)
    note("fixed verification attacker", info)
    utility, info = train_finding_classifier(data.images["train"], data.labels["train"], config, REAL, device,
                                             progress)
    note("E_ut (finding classifier, real images)", info)
    keys["E_ut"] = info["key"]
    stage("instruments")
    co_encoder, co_generator, info = co_train_projection(data, config, stylegan_config, lpips, lpips_info["key"],
                                                         device, progress)
    note("co-training (E + S + D)", info)
    keys["co-training"] = info["key"]
    stage("co-training")
    e_encoder, info = e_train_projection(data, config, frozen, trained.cache_key, lpips, lpips_info["key"], device,
                                         progress)
    note("E-training (E, frozen generator)", info)
    stage("E-training")

    # Every set holds uint8 images per split; the real images are the reference.
    sets: dict[str, dict[str, np.ndarray]] = {REAL: dict(data.images)}
    sets[CO_RECON] = {split: reconstruct(co_encoder, co_generator, data.images[split]) for split in SPLITS}
    sets[E_RECON] = {split: reconstruct(e_encoder, frozen, data.images[split]) for split in SPLITS}
    curves, cosines = {}, {}
    base = {"networks": keys, "data": data.description}
    for name, spec in variants(config).items():
        settings = LatentOptimizationSettings(
            steps=config.steps, learning_rate=config.learning_rate, margin=spec["margin"],
            identity_weight=spec["identity_weight"], utility_weight=spec["utility_weight"],
            batch_size=config.anonymise_batch_size, progress=progress)
        sets[name], cosine = {}, []
        for split in spec["splits"]:
            result = anonymise_images(co_encoder, co_generator, data.images[split], identity, utility, settings,
                                      {**base, "split": split})
            sets[name][split] = result["images"]
            if split == "test":
                curves[name] = result["curves"]
                cosine = result["final_cosine"]
        cosines[name] = cosine
        stage(f"anonymisation: {name}")
    main = main_name(config.margin)
    target = float(psnr(to_tensor(sets[main]["test"]), data.tensor("test")))
    baseline_sets, baselines = matched_baselines(data, target)
    sets.update(baseline_sets)
    stage("baselines")

    quality, per_image = quality_table(data, {k: v for k, v in sets.items() if k != REAL}, lpips, config)
    patients_test = data.patients["test"]
    quality_paired = {metric: paired_difference(per_image[CO_RECON][metric], per_image[E_RECON][metric],
                                                patients_test, config, f"paired-{metric}")
                      for metric in per_image[CO_RECON]}
    stage("image quality")
    quality_psnr = quality[quality["metric"] == "PSNR"].set_index("set")["value"]
    margin_rows = [{"margin": m, "set": main_name(m), "final_cosine": float(np.mean(cosines[main_name(m)])),
                    "reached": float(np.mean(np.asarray(cosines[main_name(m)]) <= m)),
                    "PSNR": float(quality_psnr[main_name(m)])} for m in config.margins]
    mean_image = np.repeat(data.images["train"].astype(np.float64).mean(0, keepdims=True), len(data.images["test"]), 0)
    mean_psnr = float(psnr(torch.from_numpy(mean_image)[:, None] / 255.0, data.tensor("test").double()))
    unjudged = {"projector_psnr": float(quality_psnr[CO_RECON]), "mean_image_psnr": mean_psnr,
                "projector_gain_db": float(quality_psnr[CO_RECON]) - mean_psnr,
                "encoder_updates_ratio": config.kimg_steps(config.encoder_kimg)
                / config.kimg_steps(config.co_training_kimg),
                "lpips_val_dice": float(lpips_info["val_dice"])}

    def judged(replicate: int) -> dict[str, Any]:
        """Utility, linkability, singling out and membership decided by judges trained with replicate seed
        ``replicate`` (0: E_ut and the fixed attacker trained above)."""
        suffix = f" (judge seed {replicate + 1})" if replicate else ""
        real_classifier, fixed = utility, attacker
        if replicate:
            real_classifier, info = train_finding_classifier(data.images["train"], data.labels["train"], config, REAL,
                                                             device, progress, replicate=replicate)
            note(f"finding classifier on real images{suffix}", info)
            fixed, info = train_identity_network(data.images["train"], data.patients["train"], config,
                                                 f"fixed attacker{suffix}", device, progress)
            note(f"fixed verification attacker{suffix}", info)
        utility_rows = [utility_row(real_classifier, data, config, REAL)]
        for name, images in sets.items():
            if name == REAL:
                continue
            classifier, info = train_finding_classifier(images["train"], data.labels["train"], config, name, device,
                                                        progress, replicate=replicate)
            note(f"finding classifier on {name}{suffix}", info)
            utility_rows.append(utility_row(classifier, data, config, name))
        stage(f"utility{suffix}")

        threshold, source = verification_threshold(fixed, data.images["val"], data.patients["val"],
                                                    (data.images["train"], data.patients["train"]))
        thresholds = {"fixed": {"threshold": threshold, "source": source}}
        link_rows, _ = linkability_rows(fixed, threshold, data, sets, config, "fixed")
        singling = singling_out_rows(fixed, data, sets, config)
        # An attacker of another architecture, trained on the real training images: not E_id's sibling.
        independent, info = train_identity_network(data.images["train"], data.patients["train"], config,
                                                   f"independent attacker{suffix}", device, progress,
                                                   backbone=config.independent_backbone)
        note(f"independent attacker ({config.independent_backbone}){suffix}", info)
        value, source = verification_threshold(independent, data.images["val"], data.patients["val"],
                                               (data.images["train"], data.patients["train"]))
        thresholds[INDEPENDENT] = {"threshold": value, "source": source}
        link_rows += linkability_rows(independent, value, data, sets, config, INDEPENDENT)[0]
        singling += singling_out_rows(independent, data, sets, config, INDEPENDENT)
        adaptive_auc = {}
        for name in adaptive_sets(config):
            adaptive, info = train_identity_network(sets[name]["train"], data.patients["train"], config,
                                                    f"adaptive: {name}{suffix}", device, progress)
            note(f"adaptive attacker on {name}{suffix}", info)
            # The ablations have no anonymised validation split: their threshold comes from training pairs.
            value, source = verification_threshold(adaptive, sets[name].get("val"), data.patients["val"],
                                                   (sets[name]["train"], data.patients["train"]))
            thresholds[adaptive_name(name)] = {"threshold": value, "source": source}
            rows, _ = linkability_rows(adaptive, value, data, {REAL: sets[REAL], name: sets[name]}, config,
                                       adaptive_name(name))
            link_rows += rows
            adaptive_auc[name] = float([row for row in rows if row["risk"] == "inner"][0]["auc"])
            singling += singling_out_rows(adaptive, data, {name: sets[name]}, config, adaptive_name(name))
        stage(f"linkability and singling out{suffix}")
        membership_attackers, info = train_membership_attackers(data, config, device, progress, replicate=replicate)
        note(f"membership attackers (one per patient fold){suffix}", info)
        membership = membership_rows(membership_attackers, info["folds"], data, sets, config,
                                     info["training_accuracy"])
        stage(f"membership inference{suffix}")

        def link_value(attacker_name: str, name: str, risk: str, column: str) -> float:
            return float([row for row in link_rows if row["attacker"] == attacker_name and row["set"] == name
                          and row["risk"] == risk][0][column])

        instruments = {"identity_auc": link_value("fixed", REAL, "real", "auc"),
                       "identity_tar": link_value("fixed", REAL, "real", "tar"),
                       "independent_auc": link_value(INDEPENDENT, REAL, "real", "auc"),
                       **{f"adaptive_auc/{name}": value for name, value in adaptive_auc.items()},
                       "utility_auroc": float(utility_rows[0]["AUROC"]),
                       "membership_accuracy": float(membership[0]["balanced_accuracy"]),
                       "projector_auroc": utility_metrics(data.labels["test"], predict_multilabel(
                           real_classifier, sets[CO_RECON]["test"]))["AUROC"],
                       "projector_identity_auc": link_value("fixed", CO_RECON, "outer", "auc"), **unjudged}
        return {"utility": pd.DataFrame(utility_rows), "linkability": pd.DataFrame(link_rows),
                "singling_out": pd.DataFrame(singling), "membership": pd.DataFrame(membership),
                "thresholds": thresholds, "instruments": instruments}

    # Every judge (attackers, utility and membership classifiers) is trained JUDGE_SEEDS times with different seeds
    # and every claim decided with each seed's judges, so that the verdicts carry the judges' training randomness.
    replicates = [judged(replicate) for replicate in range(config.judge_seeds)]
    rows = _example_rows(patients_test)
    examples = {name: images["test"][rows] for name, images in sets.items()}
    views = [Outcome(config=config, data=data_summary(data), resolution=data.resolution,
                     generator={"config": generator_config.cxr_sg2_config, "kimg": trained.kimg,
                                "source": trained.source, "key": trained.cache_key},
                     training=pd.DataFrame(training), histories=histories, quality=quality,
                     quality_paired=quality_paired, margins=pd.DataFrame(margin_rows), curves=curves,
                     baselines=baselines, examples=examples,
                     example_patients=[str(p) for p in data.patient_ids["test"][rows]], stage_seconds=stage_seconds,
                     seconds=time.perf_counter() - started, **replicate) for replicate in replicates]
    if len(views) == 1:
        return views[0]
    # The outcome shown: the judged tables averaged over the seeds (SEs with the seed spread) and the instruments'
    # means; the claims are decided on every seed's own view and combined.
    return replace(views[0], utility=combine_replicate_tables([view.utility for view in views], ["training set"]),
                   linkability=combine_replicate_tables([view.linkability for view in views],
                                                        ["attacker", "set", "risk"]),
                   singling_out=combine_replicate_tables([view.singling_out for view in views], ["attacker", "set"]),
                   membership=combine_replicate_tables([view.membership for view in views], ["set"]),
                   instruments={key: float(np.mean([view.instruments[key] for view in views]))
                                for key in views[0].instruments},
                   replicates=views)
