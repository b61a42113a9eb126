"""The k-SALSA pipeline (Jeon et al., ECCV 2022): private fundus images -> W+ codes -> k-anonymous clusters ->
one synthetic image per cluster by three methods -> fidelity, utility and privacy against k.

1. The generators chapter's fundus StyleGAN2 (:func:`anonpaper.experiments.generators.load_generator`) and its
   cohort: ``private_images`` images of the train split are the private set; the test split is the real test set
   of the DR classifiers.
2. Inversion: the StyleGAN2-ADA projector into W+ without noise maps (:func:`invert`; k-SALSA's encoder also
   returns W+ codes only, so ``G(w)`` with constant noise is each image's reconstruction), compared with a W+
   encoder trained on the cohort (:func:`train_inversion_encoder`, :func:`encode`) and with the encoder's codes
   refined by a short projection: PSNR / SSIM and seconds of each; ``config.inversion`` picks the codes used.
3. Per k: same-size clusters on the flattened codes (:func:`anonpaper.methods.ksalsa.same_size_clusters`, the
   remainder joins the nearest clusters); by default the unit is the patient (``config.cluster_unit``: each
   patient's images stay in one cluster, and a cluster holds at least k distinct patients), and three releases of
   one image per cluster (:func:`synthesize`):
   k-same pixel averaging of the members, the latent centroid ``G(mean w)``, and k-SALSA's local style alignment
   from the centroid (content: cosine distance of pooled deep features to the members' reconstructions; style:
   patch Gram matrices of early features of the members' real images; features: the cohort-trained vessel U-Net
   of the generators chapter, in place of the paper's MoCo ResNet-50 and VGG19).
4. Evaluation per (k, method):

   - fidelity (:func:`fidelity`): ``FD-DR-classifier`` (on the penultimate features of the generators chapter's
     cohort DR classifier, which the alignment never sees) and, shown only, ``FD-vessel-unet`` (on the U-Net whose
     taps the alignment optimises) of the synthetic images against the private images, with bootstrap SEs over
     the synthetic images and paired bootstraps of each baseline - k-SALSA difference; a random set of as many real
     test images gives the small-set reference; the same DR classifier checks that the generator keeps the grade
     (:func:`generator_label_check`: its QWK on the members' reconstructions ``G(w)``);
   - utility (:func:`release_utility`): DR classifiers (5 ICDR grades, ``classifier_seeds`` training seeds) trained
     on the synthetic images labelled with their cluster's majority grade, tested on the real test images (accuracy,
     quadratic weighted kappa; SEs from a test-patient bootstrap plus the spread between seeds); the same classifiers
     trained on the private real images are the reference;
     these classifiers and the membership attacker see real and synthetic images alike at
     :func:`classifier_size` (``config.classifier_size``; quick: 64 px of the 128 px releases);
   - privacy (:func:`membership_attack`, :func:`reidentification`): the clusters are split into attacker-train,
     attacker-validation and held-out clusters; a pair classifier on [synthetic, candidate] trained on the known
     clusters (the same number of training pairs at every k, ``config.attacker_budget``) scores every (held-out
     synthetic, held-out candidate) pair, and top-k precision is compared with chance (members / candidates) and
     normalised for it, ``(p - c) / (1 - c)``; the cohort's identity matcher (SIFT + homography inliers) scores the
     same pairs without training.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from anonpaper.data import load_cohort
from anonpaper.experiments.generators.config import Config as GeneratorsConfig
from anonpaper.experiments.generators.pipeline import load_generator
from anonpaper.experiments.generators.pipeline import FEATURE_MASKS, load_images, unet_features
from anonpaper.experiments.k_salsa.config import Config
from anonpaper.experiments.releases import resize_square_images
from anonpaper.methods.ksalsa import (cluster_members, k_salsa_synthesize, k_same_pixel_average,
                                      latent_centroid_images, same_size_clusters)
from anonpaper.metrics.classification import accuracy, quadratic_weighted_kappa
from anonpaper.metrics.distribution import frechet_distance, kernel_inception_distance
from anonpaper.metrics.identity import keypoint_similarity, sift_features
from anonpaper.metrics.privacy import cluster_membership, cluster_membership_top_k_precision
from anonpaper.metrics.quality import feature_tap_distance, psnr, ssim
from anonpaper.metrics.statistics import combine_seeds, patient_bootstrap_se
from anonpaper.models.classifiers import build_classifier
from anonpaper.models.encoders import LatentEncoder
from anonpaper.models.stylegan import project, to_unit_range
from anonpaper.runtime import derive_seed, get_device
from anonpaper.train.classifier import predict_proba, train_classifier
from anonpaper.train.gan import GANTrainingConfig
from anonpaper.train.gmia import ProjectionTrainingSettings, train_encoder
from anonpaper.train.loop import TrainSettings
from anonpaper.train.membership import membership_attack_scores, train_membership_classifier
from anonpaper.train.pretrained import trained_segmenter

KIND = "fundus-sg2"
METHODS = ("k-same pixel", "centroid", "k-SALSA")
NUM_GRADES = 5  # ICDR grades 0-4, the paper's EyePACS / APTOS labels
ENCODE_BATCH = 64  # images encoded or synthesised together (one forward pass each; bounds memory)
VAL_FRACTION = 0.1  # share of the clusters that validate the attacker (at least one)


# ---------------------------------------------------------------------------------------------------------------
# Data and instruments
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class PrivateData:
    """The private set and the real test set, at the generator's resolution.

    Attributes:
        private: float ``(N, 3, R, R)`` in ``[0, 1]``: the images k-SALSA summarises.
        private_grades: int64 ``(N,)`` ICDR grade 0-4.
        private_patients: ``(N,)`` patient ids (str).
        test: float ``(T, 3, R, R)`` in ``[0, 1]``: real test images of other patients.
        test_grades: int64 ``(T,)``.
        test_patients: ``(T,)`` patient ids.
        cohort_size: Side of the cohort images (the U-Net's training size), ``>= R``.
    """

    private: torch.Tensor
    private_grades: np.ndarray
    private_patients: np.ndarray
    test: torch.Tensor
    test_grades: np.ndarray
    test_patients: np.ndarray
    cohort_size: int


def _as_float(images: np.ndarray) -> torch.Tensor:
    """uint8 ``(N, H, W, C)`` -> float ``(N, C, H, W)`` in ``[0, 1]``."""
    return torch.from_numpy(np.asarray(images)).float().div(255.0).permute(0, 3, 1, 2).contiguous()


def load_data(config: Config, generator_config: GeneratorsConfig) -> PrivateData:
    """The private subset of the generator cohort's train split and the whole test split, at the generator's size.

    Raises:
        ValueError: When the train split has fewer than ``config.private_images`` images.
    """
    cohort = load_cohort("phantom-retina", **generator_config.cohort_options(KIND))
    train, test = cohort.split("train"), cohort.split("test")
    if len(train) < config.private_images:
        raise ValueError(f"PRIVATE_IMAGES = {config.private_images} exceeds the {len(train)} train images of the "
                         f"generators chapter's {generator_config.retina_patients}-patient fundus cohort")
    rng = np.random.default_rng(derive_seed(config.seed, "k-salsa-private"))
    rows = np.sort(rng.choice(len(train), config.private_images, replace=False))
    private = _as_float(load_images(KIND, generator_config, "train"))[rows]
    return PrivateData(private=private, private_grades=train.table["dr_grade"].to_numpy()[rows].astype(np.int64),
                       private_patients=train.table["patient_id"].astype(str).to_numpy()[rows],
                       test=_as_float(load_images(KIND, generator_config, "test")),
                       test_grades=test.table["dr_grade"].to_numpy().astype(np.int64),
                       test_patients=test.table["patient_id"].astype(str).to_numpy(),
                       cohort_size=generator_config.cohort_size)


def feature_network(generator_config: GeneratorsConfig, progress: bool = False):
    """The generators chapter's cohort-trained vessel U-Net (same training settings, so the same cache entry) and
    its held-out Dice."""
    cohort = load_cohort("phantom-retina", **generator_config.cohort_options(KIND))
    model = trained_segmenter(cohort, FEATURE_MASKS["phantom-retina"], epochs=generator_config.segmenter_epochs,
                              patch_size=min(64, generator_config.image_size), patches_per_epoch=384,
                              seed=generator_config.seed, progress=progress)
    for parameter in model.model.parameters():
        parameter.requires_grad_(False)
    return model.model.eval(), model.val_dice


def feature_taps(network, cohort_size: int) -> Callable[[torch.Tensor], list[torch.Tensor]]:
    """The alignment's feature extractor: ``[0, 1]`` images -> the U-Net's ``2 * depth`` feature maps, computed at
    the cohort size the U-Net was trained at (bilinear, differentiable)."""

    def taps(images: torch.Tensor) -> list[torch.Tensor]:
        if images.shape[-1] != cohort_size:
            images = F.interpolate(images, size=cohort_size, mode="bilinear", align_corners=False)
        return list(network.forward_features(images))

    return taps


def features(network, images: torch.Tensor, cohort_size: int) -> np.ndarray:
    """Pooled encoder features ``(N, D)`` of ``[0, 1]`` images, as the generators chapter's FD uses."""
    if images.shape[-1] != cohort_size:
        images = F.interpolate(images, size=cohort_size, mode="bilinear", align_corners=False).clamp(0, 1)
    return unet_features(network, images)


DR_FEATURES = "DR classifier"
UNET_FEATURES = "vessel U-Net"


def cohort_dr_classifier(generator_config: GeneratorsConfig, config: Config, progress: bool = False):
    """The generators chapter's DR classifier of the fundus cohort (the same cache entry: its backbone, epochs and
    seed), trained from scratch on the cohort's real training images and selected on its validation split; None
    when the cohort has no DR label. It never enters the alignment, so it can judge the releases."""
    from anonpaper.experiments.generators.labels import label_classifier

    return label_classifier(KIND, generator_config, backbone=generator_config.classifier_backbone,
                            epochs=generator_config.classifier_epochs, device=config.device, progress=progress)


@torch.no_grad()
def classifier_features(model: torch.nn.Module, images: torch.Tensor, batch_size: int = 64) -> np.ndarray:
    """Penultimate features ``(N, D)`` of a classifier (``forward_features``, average-pooled when it returns maps)
    on ``[0, 1]`` images ``(N, C, R, R)``, in float64 (the space of ``FD-DR-classifier``)."""
    model = model.eval().cpu()
    parts = []
    for start in range(0, len(images), batch_size):
        output = model.forward_features(images[start:start + batch_size].float().cpu())
        parts.append((output.mean(dim=(2, 3)) if output.ndim == 4 else output).double().numpy())
    return np.concatenate(parts)


def generator_label_check(classifier, data: PrivateData, inversion: "Inversion", config: Config) -> dict[str, Any]:
    """Whether the generator keeps the DR grade: the cohort DR classifier's QWK against the private images' true
    grades on the images themselves and on their reconstructions ``G(w)`` (the members' images every latent release
    starts from), and its held-out QWK on the real test split (with a patient-bootstrap SE). NaN values when the
    cohort has no DR label. The classifier saw most private images in training, so their QWK is an upper bound."""
    if classifier is None:
        return {"held_out_qwk": np.nan, "held_out_qwk_se": np.nan, "private_qwk": np.nan,
                "reconstruction_qwk": np.nan, "source": "the cohort has no DR label"}
    classes = len(classifier.names)
    check = classifier.check(config.bootstrap, derive_seed(config.seed, "dr-check"))
    grades = {name: classifier.probabilities(images).argmax(1)
              for name, images in (("private", data.private), ("reconstruction", inversion.reconstructions))}
    return {"held_out_qwk": check["value"], "held_out_qwk_se": check["value_se"],
            **{f"{name}_qwk": quadratic_weighted_kappa(data.private_grades, predicted, classes)
               for name, predicted in grades.items()},
            "source": f"the generators chapter's cohort {classifier.instrument}, checked on its {classifier.source}"}


# ---------------------------------------------------------------------------------------------------------------
# Inversion
# ---------------------------------------------------------------------------------------------------------------
INVERSIONS = ("projector", "encoder", "encoder+projector")
ENCODER_BATCH = 16  # images per encoder training step
ENCODER_LR = 1e-3  # Adam; 400 steps at 1e-3 and at 2.5e-3 (GMIA's) gave the same reconstructions on the quick generator
# pSp's weights (MSE 1, LPIPS 0.8); the U-Net's domain LPIPS stands in for LPIPS (no ImageNet weights offline).
ENCODER_MSE_WEIGHT, ENCODER_PERCEPTUAL_WEIGHT = 1.0, 0.8


@dataclass
class Inversion:
    """W+ codes of the private images.

    Attributes:
        codes: float32 ``(N, L, D)`` W+ codes.
        reconstructions: float ``(N, 3, R, R)`` ``G(codes)`` (constant noise) in ``[0, 1]``.
        psnr: Per-image PSNR (dB, data range 1) of the reconstructions, ``(N,)``.
        ssim: Per-image SSIM, ``(N,)``.
        seconds: Wall seconds of inverting the N images (encoder: its forward passes only).
        method: Description of the inversion.
        train_seconds: Wall seconds of training the encoder (0 for the projector alone).
    """

    codes: torch.Tensor
    reconstructions: torch.Tensor
    psnr: np.ndarray
    ssim: np.ndarray
    seconds: float
    method: str
    train_seconds: float = 0.0

    def summary(self, name: str) -> dict[str, Any]:
        """Mean PSNR / SSIM with SEs over images, and the costs, as a table row."""
        count = len(self.psnr)
        return {"inversion": name, "method": self.method, "images": count, "psnr": float(self.psnr.mean()),
                "psnr_se": float(self.psnr.std(ddof=1) / np.sqrt(count)) if count > 1 else float("nan"),
                "ssim": float(self.ssim.mean()),
                "ssim_se": float(self.ssim.std(ddof=1) / np.sqrt(count)) if count > 1 else float("nan"),
                "train_seconds": self.train_seconds, "seconds": self.seconds,
                "seconds_per_image": self.seconds / count}


def _inversion(codes: torch.Tensor, reconstructions: torch.Tensor, images: torch.Tensor, seconds: float,
               method: str, train_seconds: float = 0.0) -> Inversion:
    return Inversion(codes=codes, reconstructions=reconstructions,
                     psnr=psnr(reconstructions, images, reduction="none").numpy(),
                     ssim=ssim(reconstructions, images, reduction="none").numpy(), seconds=seconds, method=method,
                     train_seconds=train_seconds)


def invert(generator, images: torch.Tensor, steps: int, seed: int, initial_ws: torch.Tensor | None = None,
           train_seconds: float = 0.0, batch_size: int = 64) -> Inversion:
    """Project ``[0, 1]`` images into W+ (no noise maps: the code alone must carry the image, as k-SALSA's
    encoder output does), ``batch_size`` at a time, from the mean w or from ``initial_ws`` ``(N, L, D)``.

    Each image is its own Adam problem (the losses are summed), but a batch draws its exploration noise from one
    random stream, so ``batch_size`` (the chapter's ``PROJECTOR_BATCH``) changes the codes as another seed would,
    besides speed and memory."""
    started = time.perf_counter()
    codes, reconstructions = [], []
    for start in range(0, len(images), batch_size):
        initial = None if initial_ws is None else initial_ws[start:start + batch_size]
        result = project(generator, images[start:start + batch_size] * 2 - 1, space="w+", num_steps=steps,
                         optimize_noise=False, w_avg_samples=2000, seed=seed, initial_ws=initial)
        codes.append(result.ws.float().cpu())
        reconstructions.append(to_unit_range(result.reconstruction).cpu().float())
    start_from = "the mean w" if initial_ws is None else "the encoder's codes"
    return _inversion(torch.cat(codes), torch.cat(reconstructions), images, time.perf_counter() - started,
                      f"StyleGAN2-ADA projector from {start_from}, W+, {steps} Adam steps, pixel + "
                      "Laplacian-pyramid distance, no noise maps", train_seconds)


def train_inversion_encoder(generator, images: torch.Tensor, taps, config: Config, device=None):
    """A W+ encoder (GMIA's :class:`~anonpaper.models.encoders.LatentEncoder` with one w per layer) trained to
    reconstruct ``images`` through the frozen generator with pSp's loss weights (pixel MSE 1, perceptual 0.8; the
    perceptual distance is the cohort U-Net's domain LPIPS). k-SALSA's ReStyle/pSp encoder also refines its codes
    over 5 iterations from a 6-channel input; that is not built here, the projector refines instead.

    Returns:
        ``(encoder in eval mode, training seconds)``.
    """
    started = time.perf_counter()
    encoder = LatentEncoder(generator.config, generator.num_ws, space="w+", seed=derive_seed(config.seed, "encoder-init"))
    settings = ProjectionTrainingSettings(
        gan=GANTrainingConfig(total_steps=config.encoder_steps, batch_size=ENCODER_BATCH, generator_lr=ENCODER_LR,
                              style_mixing_probability=0.0, seed=derive_seed(config.seed, "encoder"), progress=False),
        mse_weight=ENCODER_MSE_WEIGHT, perceptual_weight=ENCODER_PERCEPTUAL_WEIGHT,
        encoder_epoch_steps=min(100, config.encoder_steps))

    def perceptual(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
        return feature_tap_distance(first, second, taps, reduction="none")

    result = train_encoder(encoder, generator, images, settings, perceptual, device=device)
    for parameter in generator.parameters():  # train_encoder restores the flags; the pipeline keeps G frozen
        parameter.requires_grad_(False)
    return result.encoder.eval().cpu(), time.perf_counter() - started


@torch.no_grad()
def encode(encoder, generator, images: torch.Tensor, train_seconds: float) -> Inversion:
    """The encoder's W+ codes of ``[0, 1]`` images (one forward pass each) and their reconstructions."""
    started = time.perf_counter()
    codes = torch.cat([encoder(images[start:start + ENCODE_BATCH] * 2 - 1)
                       for start in range(0, len(images), ENCODE_BATCH)]).float()
    seconds = time.perf_counter() - started
    reconstructions = torch.cat([to_unit_range(generator.synthesis(codes[start:start + ENCODE_BATCH],
                                                                   noise_mode="const"))
                                 for start in range(0, len(codes), ENCODE_BATCH)]).float()
    return _inversion(codes, reconstructions, images, seconds,
                      f"W+ encoder, {train_seconds:.0f} s of training (one forward pass per image)", train_seconds)


# ---------------------------------------------------------------------------------------------------------------
# Synthesis
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class Release:
    """The three releases at one k.

    Attributes:
        k: Cluster size.
        labels: int64 ``(N,)`` cluster of every private image.
        images: method -> float ``(C, 3, R, R)`` in ``[0, 1]``, row ``c`` = cluster ``c``.
        grades: int64 ``(C,)`` majority ICDR grade of each cluster (ties: the lower grade).
        alignment_loss: ``(initial, final)`` mean alignment loss over clusters.
        seconds: method -> wall seconds of its synthesis.
    """

    k: int
    labels: np.ndarray
    images: dict[str, torch.Tensor]
    grades: np.ndarray
    alignment_loss: tuple[float, float]
    seconds: dict[str, float]


def majority_grades(labels: np.ndarray, grades: np.ndarray) -> np.ndarray:
    """Majority grade of each cluster (``bincount`` argmax: ties go to the lower grade).

    >>> majority_grades(np.array([0, 0, 0, 1, 1]), np.array([2, 2, 4, 1, 3])).tolist()
    [2, 1]
    """
    return np.array([np.bincount(grades[members], minlength=NUM_GRADES).argmax()
                     for members in cluster_members(labels)], dtype=np.int64)


def synthesize(generator, inversion: Inversion, data: PrivateData, taps, k: int, config: Config,
               progress: bool = False) -> Release:
    """Cluster the codes at ``k`` (clusters of at least k patients, or k images with ``config.cluster_unit``
    ``"image"``) and release one image per cluster by each method of :data:`METHODS`."""
    labels = same_size_clusters(inversion.codes, k,
                                data.private_patients if config.cluster_unit == "patient" else None)
    seconds = {}
    started = time.perf_counter()
    pixel = k_same_pixel_average(data.private, labels).clamp(0, 1)
    seconds["k-same pixel"] = time.perf_counter() - started
    started = time.perf_counter()
    centroid = latent_centroid_images(generator, inversion.codes, labels).cpu()
    seconds["centroid"] = time.perf_counter() - started
    started = time.perf_counter()
    depth = len(taps(data.private[:1])) // 2
    result = k_salsa_synthesize(generator, inversion.codes, taps, labels=labels, member_images=data.private,
                                progress=progress, num_steps=config.alignment_steps,
                                learning_rate=config.alignment_lr, content_weight=config.content_weight,
                                style_weight=config.style_weight, patch_grid=config.patch_grid,
                                content_tap=depth - 1, style_tap=0)
    seconds["k-SALSA"] = time.perf_counter() - started
    return Release(k=k, labels=labels, images={"k-same pixel": pixel, "centroid": centroid,
                                               "k-SALSA": result.aligned_images.cpu()},
                   grades=majority_grades(labels, data.private_grades),
                   alignment_loss=(float(np.mean(result.initial_losses)), float(np.mean(result.final_losses))),
                   seconds=seconds)


def cluster_summary(labels: np.ndarray, k: int, patients: np.ndarray | None = None) -> dict[str, Any]:
    """Sizes of one clustering: the remainder check (every cluster >= k, every image in exactly one cluster) and,
    with ``patients``, the patient check (distinct patients per cluster; patients split across clusters).

    >>> cluster_summary(np.array([0, 0, 1, 1, 1]), 2)["min_size"]
    2
    >>> row = cluster_summary(np.array([0, 0, 1, 1]), 2, np.array(["a", "a", "b", "c"]))
    >>> row["min_patients"], row["patients_split"]
    (1, 0)
    """
    sizes = np.bincount(labels)
    row = {"k": k, "images": int(len(labels)), "remainder": int(len(labels) % k), "clusters": int(len(sizes)),
           "min_size": int(sizes.min()), "max_size": int(sizes.max()),
           "clusters_above_k": int((sizes > k).sum()), "every_image_once": bool(sizes.sum() == len(labels))}
    if patients is not None:
        distinct = [len(np.unique(patients[labels == cluster])) for cluster in range(len(sizes))]
        row.update(patients=int(len(np.unique(patients))), min_patients=int(min(distinct)),
                   patients_split=int(sum(len(np.unique(labels[patients == patient])) > 1
                                          for patient in np.unique(patients))))
    return row


# ---------------------------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------------------------
def _bootstrap_fd(real: np.ndarray, sets: dict[str, np.ndarray], resamples: int, seed: int) -> dict[str, np.ndarray]:
    """FD of every set on bootstrap resamples of its rows; sets of equal size share the resampled rows (paired:
    the methods' row ``c`` is the same cluster), so differences between them have a paired SE."""
    rng = np.random.default_rng(seed)
    values = {name: [] for name in sets}
    for _ in range(resamples):
        rows_by_size: dict[int, np.ndarray] = {}
        for name, rows_features in sets.items():
            count = len(rows_features)
            if count not in rows_by_size:
                rows_by_size[count] = rng.integers(0, count, count)
            # eigh: the same trace as sqrtm on these PSD covariances, about 3x faster (the draws are many).
            values[name].append(frechet_distance(real, rows_features[rows_by_size[count]], method="eigh"))
    return {name: np.asarray(draws) for name, draws in values.items()}


def fidelity(real_features: np.ndarray, synthetic: dict[str, np.ndarray], reference: np.ndarray, config: Config,
             k: int) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """FD / KID of each method's synthetic features against the private images' features.

    Args:
        real_features: ``(N, D)`` features of the private images.
        synthetic: method -> ``(C, D)`` features of its synthetic images.
        reference: ``(C', D)`` features of as many real test images (the small-set reference, ``"real test"``).
        config: The chapter config (bootstrap, seed).
        k: Cluster size (seeds).

    Returns:
        ``(per method incl. "real test": {"fd", "fd_se", "kid", "kid_std"}, per baseline method: {"difference":
        FD(baseline) - FD(k-SALSA), "difference_se": its paired-bootstrap SE})``; SEs are NaN below 2 resamples.
    """
    rows = {}
    sets = {**synthetic, "real test": reference}
    draws = _bootstrap_fd(real_features, sets, config.bootstrap, derive_seed(config.seed, "fd-bootstrap", k)) \
        if config.bootstrap >= 2 else {}
    for name, values in sets.items():
        kid, kid_std = kernel_inception_distance(real_features, values, subset_size=min(100, len(values)),
                                                 subsets=50, seed=derive_seed(config.seed, "kid", k))
        rows[name] = {"fd": frechet_distance(real_features, values),
                      "fd_se": float(np.std(draws[name], ddof=1)) if draws else float("nan"),
                      "kid": kid, "kid_std": kid_std}
    gaps = {}
    for baseline in synthetic:
        if baseline == "k-SALSA":
            continue
        se = float(np.std(draws[baseline] - draws["k-SALSA"], ddof=1)) if draws else float("nan")
        gaps[baseline] = {"difference": rows[baseline]["fd"] - rows["k-SALSA"]["fd"], "difference_se": se}
    return rows, gaps


def classifier_size(config: Config, side: int) -> int:
    """The side at which the classifiers trained on a release (DR utility, the membership attacker) see every image,
    real or synthetic: ``config.classifier_size``, never more than the images' ``side``.

    >>> classifier_size(Config(classifier_size=64), 128), classifier_size(Config(classifier_size=64), 32)
    (64, 32)
    >>> classifier_size(Config(classifier_size=None), 128)
    128
    """
    return side if config.classifier_size is None else min(config.classifier_size, side)


def train_dr_classifier(images: torch.Tensor, grades: np.ndarray, config: Config, tag: str, device=None):
    """A DR-grade classifier trained on ``images`` (synthetic, or the private reals for the reference), selected
    on its own training set: the recipient of a synthetic release has no real images to validate on."""
    torch.manual_seed(derive_seed(config.seed, "dr-init", tag))
    model = build_classifier(config.classifier_backbone, images.shape[1], NUM_GRADES)
    settings = TrainSettings(epochs=config.classifier_epochs, batch_size=int(min(32, max(2, len(images)))), lr=1e-3,
                             lr_schedule="cosine", seed=derive_seed(config.seed, "dr", tag), device=device,
                             progress=False)
    return train_classifier(model, (images, grades), (images, grades), settings).model


def utility(model, data: PrivateData, config: Config, tag: str) -> dict[str, float]:
    """Accuracy and QWK of a DR classifier on the real test images, with patient-bootstrap SEs."""
    prediction = predict_proba(model, data.test).argmax(1)
    truth = data.test_grades

    def kappa(true: np.ndarray, predicted: np.ndarray) -> float:
        return quadratic_weighted_kappa(true, predicted, NUM_GRADES)

    seed = derive_seed(config.seed, "utility-bootstrap", tag)
    return {"accuracy": accuracy(truth, prediction),
            "accuracy_se": patient_bootstrap_se(truth, prediction, data.test_patients, accuracy, config.bootstrap,
                                                seed),
            "qwk": kappa(truth, prediction),
            "qwk_se": patient_bootstrap_se(truth, prediction, data.test_patients, kappa, config.bootstrap, seed),
            "n_test": int(len(truth)), "predicted_classes": int(len(np.unique(prediction)))}


def over_seeds(scores: list[dict[str, float]]) -> dict[str, float]:
    """Utility of one release over classifiers trained with different seeds: the mean of each score, and an SE that
    adds the spread between seeds (training randomness, large for a few dozen training images) to the test-patient
    bootstrap SE (:func:`anonpaper.metrics.statistics.combine_seeds`).

    >>> row = over_seeds([{"accuracy": 0.5, "accuracy_se": 0.03, "qwk": 0.4, "qwk_se": 0.04, "n_test": 9,
    ...                    "predicted_classes": 3},
    ...                   {"accuracy": 0.7, "accuracy_se": 0.03, "qwk": 0.6, "qwk_se": 0.04, "n_test": 9,
    ...                    "predicted_classes": 4}])
    >>> round(row["qwk"], 3), round(row["qwk_se"], 3), round(row["qwk_seed_sd"], 3), row["seeds"]
    (0.5, 0.108, 0.141, 2)
    """
    count = len(scores)
    row: dict[str, float] = {"n_test": scores[0]["n_test"], "seeds": count,
                             "predicted_classes": int(np.median([score["predicted_classes"] for score in scores]))}
    for name in ("accuracy", "qwk"):
        row[name], row[f"{name}_se"], row[f"{name}_seed_sd"] = combine_seeds(
            [score[name] for score in scores], [score[f"{name}_se"] for score in scores])
    return row


def release_utility(images: torch.Tensor, grades: np.ndarray, data: PrivateData, config: Config, tag: str,
                    device=None) -> dict[str, float]:
    """:func:`utility` of ``config.classifier_seeds`` DR classifiers trained on one release, combined by
    :func:`over_seeds`."""
    return over_seeds([utility(train_dr_classifier(images, grades, config, f"{tag}-seed{index}", device), data,
                               config, f"{tag}-seed{index}") for index in range(config.classifier_seeds)])


def attack_split(clusters: int, config: Config, k: int) -> dict[str, np.ndarray]:
    """Cluster ids of the attacker's train, validation and held-out ("test") clusters (seeded; disjoint; each
    non-empty).

    >>> split = attack_split(10, Config(), 5)
    >>> sorted(np.concatenate(list(split.values())).tolist()) == list(range(10))
    True
    """
    if clusters < 3:
        raise ValueError(f"the membership attack needs at least 3 clusters (train, validation, held out), got "
                         f"{clusters}")
    order = np.random.default_rng(derive_seed(config.seed, "attack-split", k)).permutation(clusters)
    held_out = int(np.clip(round(config.attacker_test_fraction * clusters), 1, clusters - 2))
    validation = int(np.clip(round(VAL_FRACTION * clusters), 1, clusters - held_out - 1))
    return {"test": np.sort(order[:held_out]), "val": np.sort(order[held_out:held_out + validation]),
            "train": np.sort(order[held_out + validation:])}


def _pool(labels: np.ndarray, clusters: np.ndarray) -> np.ndarray:
    """Rows of the private images that belong to ``clusters``."""
    return np.flatnonzero(np.isin(labels, clusters))


def _precision_row(result: dict, prefix: str) -> dict[str, float]:
    """Top-k precision with its SE over held-out clusters, chance, and the precision normalised for chance,
    ``(p - c) / (1 - c)`` (0 = chance, 1 = perfect; comparable across k, whose chance differs), with its SE."""
    per_cluster = np.asarray(result["per_cluster"], dtype=np.float64)
    se = float(per_cluster.std(ddof=1) / np.sqrt(len(per_cluster))) if len(per_cluster) > 1 else float("nan")
    chance = result["chance"]
    # A pool of members only (one held-out cluster) has chance 1: every ranking is perfect, nothing is measured.
    room = 1 - chance if chance < 1 else float("nan")
    return {f"{prefix}_precision": result["precision_at_k"], f"{prefix}_se": se, f"{prefix}_chance": chance,
            f"{prefix}_normalised": (result["precision_at_k"] - chance) / room, f"{prefix}_normalised_se": se / room}


def attacker_epochs(labels: np.ndarray, clusters: np.ndarray, budget: int) -> tuple[int, int]:
    """Epochs that show the attacker about ``budget`` training pairs, and its number of pairs: each of the
    ``clusters``' members is a positive pair with its synthetic image, with as many non-member negatives (capped by
    the non-members of the pool), as :func:`anonpaper.train.membership.membership_pairs` builds them.

    >>> attacker_epochs(np.array([0, 0, 1, 1, 2, 2]), np.array([0, 1]), 40)
    (5, 8)
    """
    pool = np.isin(labels, clusters)
    members = np.array([int((labels == cluster).sum()) for cluster in clusters])
    pairs = int(np.sum(members + np.minimum(members, int(pool.sum()) - members)))
    return max(1, int(round(budget / max(pairs, 1)))), pairs


def membership_attack(synthetic: torch.Tensor, data: PrivateData, labels: np.ndarray, split: dict[str, np.ndarray],
                      k: int, config: Config, tag: str, device=None) -> dict[str, float]:
    """Train the pair classifier on the attacker's clusters and score the held-out ones (top-k precision)."""

    def part(name: str) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
        pool = _pool(labels, split[name])
        return synthetic[split[name]], data.private[pool], cluster_membership(labels[pool], split[name])

    torch.manual_seed(derive_seed(config.seed, "attacker-init", tag))
    epochs, pairs = attacker_epochs(labels, split["train"], config.attacker_budget)
    settings = TrainSettings(epochs=epochs, lr_schedule="cosine", seed=derive_seed(config.seed, "attacker", tag),
                             device=device, progress=False)
    model = train_membership_classifier(part("train"), part("val"), settings).model
    return {**score_membership(model, synthetic, data, labels, split, k), "attacker_epochs": epochs,
            "attacker_pairs": pairs}


def score_membership(model, synthetic: torch.Tensor, data: PrivateData, labels: np.ndarray,
                     split: dict[str, np.ndarray], k: int) -> dict[str, float]:
    """A trained pair classifier's top-k precision on the held-out clusters: every held-out synthetic image ranks
    every real image of the held-out clusters (members of other held-out clusters are its non-members)."""
    pool = _pool(labels, split["test"])
    scores = membership_attack_scores(model, synthetic[split["test"]], data.private[pool])
    result = cluster_membership_top_k_precision(scores, labels[pool], split["test"], k=k)
    return {**_precision_row(result, "membership"), "pool": int(len(pool)), "held_out_clusters": len(split["test"])}


def sift_bank(images: torch.Tensor, cohort_size: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """SIFT keypoints and descriptors of every image, at the cohort size (where the matcher was checked)."""
    if images.shape[-1] != cohort_size:
        images = F.interpolate(images, size=cohort_size, mode="bilinear", align_corners=False).clamp(0, 1)
    return [sift_features(image) for image in images]


def reidentification(synthetic_bank: list, private_bank: list, labels: np.ndarray, split: dict[str, np.ndarray],
                     k: int) -> dict[str, float]:
    """The identity matcher as an untrained attacker: SIFT homography inliers of each held-out candidate (first,
    the "original") against each held-out synthetic image, top-k precision against chance."""
    pool = _pool(labels, split["test"])
    scores = np.array([[keypoint_similarity(*private_bank[row], *synthetic_bank[cluster]) for row in pool]
                       for cluster in split["test"]])
    result = cluster_membership_top_k_precision(scores, labels[pool], split["test"], k=k)
    return _precision_row(result, "reid")


# ---------------------------------------------------------------------------------------------------------------
# The whole experiment
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    """What :func:`run` returns.

    Attributes:
        config: The chapter config.
        generator: ``{"kind", "source", "kimg", "resolution", "config", "profile"}`` of the generator used.
        segmenter_dice: Held-out Dice of the feature U-Net.
        inversion: :meth:`Inversion.summary` of the inversion whose codes k-SALSA used (``config.inversion``):
            ``{"inversion", "method", "images", "psnr", "psnr_se", "ssim", "ssim_se", "train_seconds", "seconds",
            "seconds_per_image"}``.
        inversions: One such row per inversion compared (projector; encoder and encoder + projector when
            ``config.encoder_steps > 0``).
        clusters: One row per k (:func:`cluster_summary`).
        results: One row per (k, method) (methods: :data:`METHODS`, plus ``"real test"`` rows with only FD / KID):
            ``n_synthetic``, ``fd``, ``fd_se``, ``kid``, ``kid_std``, ``accuracy``, ``accuracy_se``, ``qwk``,
            ``qwk_se`` (mean over classifier seeds; SE with the seed spread, :func:`over_seeds`), ``n_test``,
            ``membership_precision``, ``membership_se``, ``membership_chance``, ``membership_normalised`` (and its
            ``_se``: ``(p - c) / (1 - c)``), ``pool``, ``held_out_clusters``, ``attacker_epochs``,
            ``attacker_pairs``, the same ``reid_*`` columns, ``seconds``; ``fd_dr``, ``fd_dr_se``, ``kid_dr``,
            ``kid_dr_std`` are FD / KID on the cohort DR classifier's features (``fd``, ``kid``: the vessel
            U-Net's).
        fd_gaps: One row per (k, ``features``, ``baseline``): ``difference`` = FD(baseline) - FD(k-SALSA) (positive
            = k-SALSA closer to the private images) and its paired-bootstrap ``difference_se``; ``features`` is
            :data:`DR_FEATURES` (the cohort DR classifier, which the alignment never sees: the claims' FD) or
            :data:`UNET_FEATURES` (the vessel U-Net whose taps the alignment optimises: shown, never decisive).
        dr_check: The generators chapter's cohort DR classifier (:func:`generator_label_check`): its held-out QWK
            on the real test split, its QWK on the private images and on their reconstructions ``G(w)``.
        reference: The DR classifier trained on the private real images (utility row), the majority rate and
            ``image_size``, the side every classifier trained on a release saw (``config.classifier_size``, at most
            the generator's).
        alignment: One row per k: mean alignment loss at the centroid and after alignment.
        examples: k -> {"members": list of ``(M, 3, R, R)`` arrays, method -> ``(S, 3, R, R)``} for a few clusters.
        reconstructions: ``"private"`` and each inversion's name -> float arrays of a few private images and their
            reconstructions.
        timings: Stage -> wall seconds.
        seconds: Wall seconds of :func:`run`.
    """

    config: Config
    generator: dict[str, Any]
    segmenter_dice: float
    inversion: dict[str, Any]
    inversions: pd.DataFrame
    clusters: pd.DataFrame
    results: pd.DataFrame
    fd_gaps: pd.DataFrame
    dr_check: dict[str, Any]
    reference: dict[str, float]
    alignment: pd.DataFrame
    examples: dict[int, dict[str, Any]] = field(default_factory=dict)
    reconstructions: dict[str, np.ndarray] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0

    def row(self, k: int, method: str) -> dict[str, Any]:
        """The results row of ``(k, method)``."""
        frame = self.results
        return frame[(frame["k"] == k) & (frame["method"] == method)].iloc[0].to_dict()


EXAMPLE_CLUSTERS = 2  # clusters shown per k
EXAMPLE_MEMBERS = 5  # members shown per cluster


def run(config: Config, generator_config: GeneratorsConfig, progress: bool = False,
        log: Callable[[str], None] = print) -> Outcome:
    """Run the chapter (see the module docstring) with the generators chapter's ``generator_config``."""
    started = time.perf_counter()
    device = get_device(config.device)
    timings: dict[str, float] = {}

    def stage(name: str, since: float) -> None:
        timings[name] = time.perf_counter() - since
        log(f"{name}: {timings[name]:.0f} s")

    tick = time.perf_counter()
    trained = load_generator(KIND, generator_config, progress=progress)
    generator = trained.generator.eval()
    for parameter in generator.parameters():
        parameter.requires_grad_(False)
    stage(f"generator ({trained.source})", tick)
    tick = time.perf_counter()
    network, dice = feature_network(generator_config, progress)
    stage("feature U-Net", tick)
    data = load_data(config, generator_config)
    taps = feature_taps(network, data.cohort_size)

    tick = time.perf_counter()
    inversions = {"projector": invert(generator, data.private, config.projector_steps, config.seed,
                                      batch_size=config.projector_batch)}
    stage("inversion: projector", tick)
    if config.encoder_steps:
        tick = time.perf_counter()
        encoder, train_seconds = train_inversion_encoder(
            generator, _as_float(load_images(KIND, generator_config, "train")), taps, config, device)
        inversions["encoder"] = encode(encoder, generator, data.private, train_seconds)
        inversions["encoder+projector"] = invert(generator, data.private, config.encoder_refine_steps, config.seed,
                                                 initial_ws=inversions["encoder"].codes, train_seconds=train_seconds,
                                                 batch_size=config.projector_batch)
        stage("inversion: encoder", tick)
    inversion = inversions[config.inversion]
    count = len(data.private)
    inversion_summary = inversion.summary(config.inversion)

    if config.cluster_unit == "patient" and len(np.unique(data.private_patients)) < 3 * max(config.k_values):
        raise ValueError(f"the {len(np.unique(data.private_patients))} patients of the {count} private images cannot "
                         f"form 3 clusters of {max(config.k_values)} patients (attacker train, validation, held out): "
                         "raise PRIVATE_IMAGES, lower the largest of K_VALUES or set CLUSTER_UNIT 'image'")

    tick = time.perf_counter()
    grader = cohort_dr_classifier(generator_config, config, progress)
    dr_check = generator_label_check(grader, data, inversion, config)
    real_dr = classifier_features(grader.model, data.private) if grader is not None else None
    stage("cohort DR classifier (generator label check)", tick)

    classifier_side = classifier_size(config, data.private.shape[-1])

    def for_classifiers(images: torch.Tensor) -> torch.Tensor:
        return resize_square_images(images, classifier_side)

    judged = replace(data, private=for_classifiers(data.private), test=for_classifiers(data.test))
    tick = time.perf_counter()
    real_features = features(network, data.private, data.cohort_size)
    private_bank = sift_bank(data.private, data.cohort_size)
    reference = release_utility(judged.private, data.private_grades, judged, config, "real", device)
    reference["image_size"] = classifier_side
    reference["majority_rate"] = float(np.bincount(data.test_grades, minlength=NUM_GRADES).max()
                                       / len(data.test_grades))
    stage("reference DR classifier", tick)

    rows, clusters, gaps, alignment, examples = [], [], [], [], {}
    for k in config.k_values:
        tick = time.perf_counter()
        release = synthesize(generator, inversion, data, taps, k, config, progress)
        stage(f"k={k}: synthesis", tick)
        clusters.append({**cluster_summary(release.labels, k, data.private_patients), "unit": config.cluster_unit})
        alignment.append({"k": k, "loss_at_centroid": release.alignment_loss[0],
                          "loss_after_alignment": release.alignment_loss[1]})
        tick = time.perf_counter()
        synthetic_features = {name: features(network, images, data.cohort_size)
                              for name, images in release.images.items()}
        size = len(release.grades)
        picked = np.random.default_rng(derive_seed(config.seed, "reference-set", k)).choice(
            len(data.test), min(size, len(data.test)), replace=False)
        reference_images = data.test[np.sort(picked)]
        fid_rows, unet_gaps = fidelity(real_features, synthetic_features,
                                       features(network, reference_images, data.cohort_size), config, k)
        gaps += [{"k": k, "features": UNET_FEATURES, "baseline": name, **gap} for name, gap in unet_gaps.items()]
        if real_dr is not None:
            dr_rows, dr_gaps = fidelity(real_dr, {name: classifier_features(grader.model, images)
                                                  for name, images in release.images.items()},
                                        classifier_features(grader.model, reference_images), config, k)
            gaps += [{"k": k, "features": DR_FEATURES, "baseline": name, **gap} for name, gap in dr_gaps.items()]
        else:
            dr_rows = {name: {"fd": np.nan, "fd_se": np.nan, "kid": np.nan, "kid_std": np.nan} for name in fid_rows}
        dr_rows = {name: {f"{column}_dr": value for column, value in row.items()} for name, row in dr_rows.items()}
        split = attack_split(size, config, k)
        for method, images in release.images.items():
            tag = f"{method}-{k}"
            classified = for_classifiers(images)
            row = {"k": k, "method": method, "n_synthetic": size, **fid_rows[method], **dr_rows[method],
                   **release_utility(classified, release.grades, judged, config, tag, device),
                   **membership_attack(classified, judged, release.labels, split, k, config, tag, device),
                   **reidentification(sift_bank(images, data.cohort_size), private_bank, release.labels, split, k),
                   "seconds": release.seconds[method]}
            rows.append(row)
        rows.append({"k": k, "method": "real test", "n_synthetic": int(len(picked)), **fid_rows["real test"],
                     **dr_rows["real test"]})
        stage(f"k={k}: evaluation", tick)
        members = cluster_members(release.labels)[:EXAMPLE_CLUSTERS]
        examples[k] = {"members": [data.private[index[:EXAMPLE_MEMBERS]].numpy() for index in members],
                       "sizes": [len(index) for index in members],
                       **{name: images[:EXAMPLE_CLUSTERS].numpy() for name, images in release.images.items()}}
    shown = min(8, count)
    return Outcome(config=config,
                   generator={"kind": KIND, "source": trained.source, "kimg": trained.kimg,
                              "resolution": generator.resolution, "config": generator.config.description,
                              "profile": config.generators_profile},
                   segmenter_dice=dice, inversion=inversion_summary,
                   inversions=pd.DataFrame([item.summary(name) for name, item in inversions.items()]),
                   clusters=pd.DataFrame(clusters),
                   results=pd.DataFrame(rows), fd_gaps=pd.DataFrame(gaps), dr_check=dr_check, reference=reference,
                   alignment=pd.DataFrame(alignment), examples=examples,
                   reconstructions={"private": data.private[:shown].numpy(),
                                    **{name: item.reconstructions[:shown].numpy()
                                       for name, item in inversions.items()}},
                   timings=timings, seconds=time.perf_counter() - started)
