"""Paper 1's pipeline on a fundus generator of the generators chapter (``Config.generator``): contribution scores,
the Eq. 11 edit on generated and projected real images, the baselines at matched edit strength, the metrics of
Table 2, an identity attacker, and the Table 3 loss ablation (Zhao et al., Biomedical Optics Express 14(10):5466, 2023).

Stages of :func:`run` (each timed in ``Outcome.seconds``):

1. the generator (:func:`load_fundus_generator`) and the cohort-trained instruments (:func:`load_instruments`:
   vessel and hard-exudate U-Nets, the keypoint detector of FS_SR, the re-identification attacker, and the DR
   classifier of the lesion utility, :func:`train_dr_classifier`);
2. contribution scores of every S channel on ``T`` generated images (:func:`score_channels`, Eq. 8-10) with
   their vessel masks (:func:`vessel_masks`) and StyleSpace's channel, stored for the edit outside the chapter
   (:func:`vessel_ranking`);
3. the instrument check: the vessel fraction the segmenter finds in generated images against real ones
   (:func:`vessel_check`);
4. the edits (:func:`edit_methods`): ours with the top channel and with several top channels (Eq. 11), and the
   StyleSpace / LowRankGAN / ReSeFa baselines, each step matched to the mean image change of our top-channel edit at
   the same alpha; at ``TABLE_ALPHA`` also a random and the median-ranked channel at the same image change
   (:func:`edit_controls`), the controls of the top channel;
5. the checks measured on this run's images (AMS's label on the originals, :func:`projector_check` of the W+
   projections) and the identity levels edits are read against (:func:`identity_references`: FS of two
   photographs of the same eye);
6. the metrics of every method and strength on generated and on projected real images (:func:`measure`): FD,
   the U-Net feature distance (where the paper has LPIPS), FS_SIFT, FS_SR, RROI and its area-normalised form, AMS,
   the DR classifier's agreement and quadratic-weighted kappa between each image and its edit, and, on real images
   only, the attacker's rank-1 re-identification against the patients' other images (:func:`attack_gallery`);
7. the Table 3 ablation (:func:`loss_ablation`).

Resolution. The generator may be smaller than the cohort (32 px at ``quick``, whose phantoms are 64 px): every
instrument is trained on the cohort at its own size and applied to images bilinearly upsampled to it, and vessel
masks are brought back to the generator's size by max-pooling (a generator pixel is vessel when any of its cohort
pixels is). The DR classifier is the exception: it learns the real training images at the generator's own
resolution and sees generated and edited images as they are.

Data. ``Config.dataset`` / ``data_root`` (the phantom, or a real copy such as ODIR-5K) are passed to the
generators chapter's config (:func:`generators_config_for`): the generator learns the copy, the held-out images the
projector inverts are its test images, and the attacker and the DR classifier learn its training images. The vessel
and hard-exudate U-Nets and the keypoint detector need pixel masks and exact keypoints that a real dataset such as
ODIR-5K lacks: they learn the fundus phantom (the vessel U-Net a DRIVE copy at ``vessel_data_root`` when given),
which on real photographs is a domain gap.
"""

from __future__ import annotations

import copy
import dataclasses
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from anonpaper.cache import ArtifactCache, file_sha256
from anonpaper.data import load_cohort
from anonpaper.experiments.claims import combine_replicate_tables
from anonpaper.experiments.generators.config import Config as GeneratorsConfig
from anonpaper.experiments.generators.pipeline import TrainedGenerator, load_generator
from anonpaper.experiments.generators.config import PHANTOM_FUNDUS
from anonpaper.experiments.generators.labels import label_classifier
from anonpaper.experiments.generators.pipeline import (check_data, generate, kind_cohort, load_images,
                                                       trainer_checkpoint, training_config, unet_features,
                                                       vessel_cohort)
from anonpaper.methods.jacobian_edit import ChannelScores, contribution_scores, edit_channels, jvp_columns
from anonpaper.methods.sspace_baselines import (LatentCoordinates, lowrank_directions, region_gram_matrices,
                                                resefa_directions, step_for_image_change, stylespace_channels,
                                                stylespace_direction, w_coordinates)
from anonpaper.metrics.classification import auroc, quadratic_weighted_kappa
from anonpaper.metrics.distribution import frechet_distance, swd
from anonpaper.metrics.identity import cross_pair_scores, fs_sift, sift_features
from anonpaper.metrics.lesion import rroi
from anonpaper.metrics.quality import feature_tap_distance
from anonpaper.metrics.statistics import patient_bootstrap_se
from anonpaper.models.keypoints import detect, fs_sr
from anonpaper.models.stylegan import (ResidualDiscriminator, StyleCodes, StyleGenerator, project, style_statistics,
                                       to_unit_range)
from anonpaper.runtime import derive_seed, get_device, replicate_parts, replicate_seed
from anonpaper.train.checkpoint import load_checkpoint
from anonpaper.train.gan import GANTrainingConfig, train_gan
from anonpaper.train.pretrained import (cohort_description, trained_exudate_segmenter, trained_keypoint_detector,
                                        trained_segmenter)
from anonpaper.train.segmenter import segment

# The fundus cohort the generators learn (both fundus kinds learn the same images at the same side); which
# generator is edited is ``Config.generator``.
FUNDUS_IMAGES = "fundus-sg3t"
OURS, OURS_SEVERAL = "ours", "ours (top channels)"
STYLESPACE, LOWRANK, RESEFA = "StyleSpace", "LowRankGAN", "ReSeFa"
METHODS = (OURS, OURS_SEVERAL, STYLESPACE, LOWRANK, RESEFA)
# The controls of the top channel: a random and the median-ranked channel, edited at matched image change.
RANDOM_CHANNEL, MEDIAN_CHANNEL = "random channel", "median-ranked channel"
CONTROLS = (RANDOM_CHANNEL, MEDIAN_CHANNEL)
ABLATIONS = {"plain": (), "+vessel": ("vessel",), "+lesion": ("lesion",), "+both": ("vessel", "lesion")}
LPIPS_WEIGHT, ADVERSARIAL_WEIGHT = 0.6, 0.4  # paper 1: L = 0.6 L_lpips + 0.4 L_adv
EXUDATE_THRESHOLD = 0.5  # an image is labelled "hard exudates present" when any pixel's probability reaches it
# The DR label a cohort carries -> its classes: the ICDR grade 0-4 (phantom, EyePACS, APTOS, BRSET) or ODIR-5K's
# patient-level diabetes flag D (ODIR-5K has no grade).
# The measures of the instruments table (``Outcome.instruments``) that claims rest on, each with its floor in Config.
DR_CHECK = "held-out QWK against the true labels"  # the DR classifier's check row in the instruments table
VESSEL_DICE = "validation Dice"
LESION_DICE = "validation Dice of the exudate masks (1 when no exudate anywhere)"
LESION_SHARE = "minority share of the exudate label on the generated originals"
KEYPOINT_PRECISION = "validation keypoint precision (3 px)"
KEYPOINT_RECALL = "validation keypoint recall (3 px)"
ATTACKER_RANK1 = "validation rank-1 (leave-one-out)"
PROJECTOR_PSNR = "PSNR of the W+ projections to their real targets (dB)"
PROJECTOR_VESSELS = "vessel-pixel fraction of the projections / of their real targets"


# ---------------------------------------------------------------------------------------------------------------
# generator and instruments
# ---------------------------------------------------------------------------------------------------------------
def generators_config_for(config, generator_config: GeneratorsConfig) -> GeneratorsConfig:
    """The generators chapter's config with this chapter's data (DATASET, DATA_ROOT, DATA_PROTOCOL,
    VESSEL_DATA_ROOT), so that the generator learns the copy this chapter measures (unchanged for the phantom)."""
    return generator_config.replace(**config.data_parameters())


def load_fundus_generator(generator_config: GeneratorsConfig, kind: str,
                          progress: bool = False) -> tuple[TrainedGenerator, str]:
    """The generators chapter's fundus generator ``kind`` (``Config.generator``: paper 1's StyleGAN3-T, or the
    StyleGAN2) for ``generator_config``, and a note on where it came from.

    The artifact cache keys the generator on the source of the generators chapter's import closure, so this
    chapter's own edits never make it miss; it trains only when neither shipped weights nor the cache hold it.

    Returns:
        ``(trained generator, note)``; the note says when the generator had to be trained in this run.
    """
    trained = load_generator(kind, generator_config, train=True, progress=progress)
    note = "trained in this run (the generators chapter had not cached it)" if trained.source == "trained" else ""
    return trained, note


@dataclass
class Instruments:
    """The cohort-trained networks that stand in for the paper's pretrained ones (all in eval mode, CPU).

    Attributes:
        vessel: Vessel U-Net (images in [0, 1] at the cohort's size -> logits; ``forward_features``: 8 taps).
        exudate: Hard-exudate U-Net (same interface).
        keypoints: :class:`~anonpaper.models.keypoints.KeypointNet` of FS_SR.
        attacker: Re-identification embedding (images in [0, 1] -> unit vectors).
        checks: One row per instrument: its held-out quality numbers.
        cohort_size: Side at which every instrument works (except the DR classifier).
        dr: DR classifier (images in [0, 1] at the generator's resolution -> logits), None without DR labels.
        dr_classes: Its number of classes (:data:`anonpaper.experiments.generators.labels.DR_LABELS`).
    """

    vessel: torch.nn.Module
    exudate: torch.nn.Module
    keypoints: torch.nn.Module
    attacker: torch.nn.Module
    checks: pd.DataFrame
    cohort_size: int
    dr: torch.nn.Module | None = None
    dr_classes: int = 0


def _resampled(images: np.ndarray, size: int) -> np.ndarray:
    """uint8 (N, H, W, C) area-resized to ``size`` and bilinearly back to the original side (the generator's view
    of the cohort, at the instruments' size)."""
    import cv2

    side = images.shape[1]
    if side == size:
        return images
    return np.stack([cv2.resize(cv2.resize(image, (size, size), interpolation=cv2.INTER_AREA), (side, side),
                                interpolation=cv2.INTER_LINEAR) for image in images])


def train_attacker(cohort, config, resolution: int, progress: bool = False,
                   replicate: int = 0) -> tuple[torch.nn.Module, dict]:
    """The identity attacker: an ArcFace embedding trained on the cohort's training patients, seeing images as the
    generator does (resampled to its ``resolution`` and back), cached. Its held-out rank-1 (val split,
    leave-one-out) is its check. ``replicate`` r > 0 trains the r-th judge replicate with its own seed."""
    from anonpaper.metrics.identity import rank1_accuracy
    from anonpaper.models.embedding import EmbeddingNet
    from anonpaper.train.embedding import embed, train_embedding
    from anonpaper.train.loop import TrainSettings

    description = {"cohort": cohort_description(cohort), "backbone": config.attacker_backbone,
                   "epochs": config.attacker_epochs, "resolution": resolution, "seed": config.seed,
                   **({"replicate": replicate} if replicate else {})}

    def build() -> dict:
        train = cohort.split("train")
        images = _resampled(train.load_images(), resolution)
        torch.manual_seed(derive_seed(config.seed, "attacker-init", *replicate_parts(replicate)))
        result = train_embedding(EmbeddingNet(int(cohort.channels), 64, config.attacker_backbone), images,
                                 train.table["patient_id"].to_numpy(),
                                 TrainSettings(epochs=config.attacker_epochs,
                                               seed=derive_seed(config.seed, "attacker", *replicate_parts(replicate)),
                                               device=config.device or get_device(), progress=progress))
        model = result.model.cpu().eval()
        val = cohort.split("val")
        rank1 = float("nan")
        if len(val):
            rank1 = rank1_accuracy(embed(model, _resampled(val.load_images(), resolution), device="cpu"),
                                   val.table["patient_id"].to_numpy())
        return {"model": model, "val_rank1": rank1}

    artifact = ArtifactCache("vascular-attacker").get_or_create(description, build)
    return artifact["model"].eval(), {"val_rank1": artifact["val_rank1"]}


def train_dr_classifier(config, generator_config: GeneratorsConfig, progress: bool = False,
                        replicate: int = 0) -> tuple[torch.nn.Module | None, dict]:
    """The DR classifier of the lesion utility: the generators chapter's cohort DR classifier
    (:func:`anonpaper.experiments.generators.labels.label_classifier`: from scratch on the real training images of
    the generator's cohort at the generator's resolution, class-weighted focal loss, gamma 0.6, as paper 2's DR
    model; cached), with this chapter's backbone, epochs and seed. Its check: quadratic-weighted kappa (with a
    patient-bootstrap SE) and accuracy on held-out real images. ``replicate`` r > 0: the r-th judge replicate, with
    its own seed (:func:`anonpaper.runtime.replicate_seed`).

    Returns:
        ``(model or None, info)``; info: ``column``, ``classes``, ``qwk``, ``qwk_se``, ``accuracy``, ``n``,
        ``source``; the model is None (and ``source`` says why) when the cohort has no DR label.
    """
    classifier = label_classifier(FUNDUS_IMAGES, generator_config, backbone=config.dr_backbone,
                                  epochs=config.dr_epochs, seed=replicate_seed(config.seed, replicate),
                                  device=config.device, progress=progress)
    if classifier is None:
        cohort = kind_cohort(FUNDUS_IMAGES, generator_config)
        return None, {"column": "", "classes": 0, "qwk": float("nan"), "qwk_se": float("nan"),
                      "accuracy": float("nan"), "n": 0, "source": f"{cohort.name} has no DR label"}
    check = classifier.check(config.bootstrap, derive_seed(config.seed, "dr-check"))
    return classifier.model, {"column": classifier.column, "classes": len(classifier.names), "qwk": check["value"],
                              "qwk_se": check["value_se"], "accuracy": check["accuracy"], "n": check["n"],
                              "source": classifier.source}


def _vessel_segmenter(config, generator_config: GeneratorsConfig, progress: bool) -> tuple[Any, Any, dict]:
    """``(cohort, trained vessel U-Net, training options)``: the vessel U-Net on :func:`vessel_cohort` with the
    generators chapter's settings (so its cache serves both chapters)."""
    vessels, vessel_mask, options = _segmenter_recipe(config, generator_config)
    options["progress"] = progress
    return vessels, trained_segmenter(vessels, vessel_mask, **options), options


def vessel_segmenter(config, generator_config: GeneratorsConfig, progress: bool = False) -> tuple[torch.nn.Module,
                                                                                                   float]:
    """The chapter's vessel U-Net alone (eval mode) and its validation Dice, for edits outside the chapter."""
    _, vessel, _ = _vessel_segmenter(config, generator_config, progress)
    return vessel.model.eval(), float(vessel.val_dice)


def load_instruments(config, generator_config: GeneratorsConfig, progress: bool = False,
                     replicate: int = 0) -> Instruments:
    """Train (or load from the cache) the instruments: the vessel U-Net on :func:`vessel_cohort` with the
    generators chapter's settings (so its cache serves both), the exudate U-Net and the keypoint detector on the
    fundus phantom (they need its exact masks and keypoints), the attacker and the DR classifier on the generator's
    own cohort (the phantom, or the real copy).

    ``replicate`` r > 0 trains the r-th replicate of the judges (the exudate U-Net of AMS, the keypoint detector of
    FS_SR, the attacker and the DR classifier) with their own seeds; the vessel U-Net, which the method's scores
    rest on, is the same in every replicate."""
    cohort = kind_cohort(FUNDUS_IMAGES, generator_config)
    phantom = load_cohort(PHANTOM_FUNDUS, **generator_config.phantom_options(FUNDUS_IMAGES))
    vessels, vessel, options = _vessel_segmenter(config, generator_config, progress)
    exudate = trained_exudate_segmenter(phantom, **{**options, "seed": replicate_seed(options["seed"], replicate)})
    keypoints = trained_keypoint_detector(phantom, epochs=config.keypoint_epochs,
                                          seed=replicate_seed(config.seed, replicate), progress=progress)
    attacker, attacker_check = train_attacker(cohort, config, generator_config.image_size, progress, replicate)
    dr, dr_check = train_dr_classifier(config, generator_config, progress, replicate)
    dr_name = (f"DR classifier ({dr_check['column']}, {dr_check['classes']} classes; {dr_check['n']} held-out real "
               f"images: {dr_check['source']})" if dr is not None else f"DR classifier ({dr_check['source']})")
    rows = [{"instrument": f"vessel U-Net ({vessels.name})", "measure": VESSEL_DICE, "value": vessel.val_dice,
             "floor": config.segmenter_min_dice},
            {"instrument": "hard-exudate U-Net (AMS, the +lesion loss)", "measure": LESION_DICE,
             "value": exudate.val_dice, "floor": config.lesion_min_dice},
            # Reported without a floor: its operating point caps it near 0.2 (see IDENTITY_MIN_AUROC).
            {"instrument": "keypoint detector (FS_SR)", "measure": KEYPOINT_PRECISION,
             "value": keypoints.val_metrics["precision"], "floor": float("nan")},
            {"instrument": "keypoint detector (FS_SR)", "measure": KEYPOINT_RECALL,
             "value": keypoints.val_metrics["recall"], "floor": config.keypoint_min_recall},
            {"instrument": "re-identification attacker", "measure": ATTACKER_RANK1,
             "value": attacker_check["val_rank1"], "floor": config.attacker_min_rank1},
            {"instrument": dr_name, "measure": DR_CHECK, "value": dr_check["qwk"], "floor": config.dr_min_qwk},
            {"instrument": dr_name, "measure": "held-out QWK standard error (patient bootstrap)",
             "value": dr_check["qwk_se"], "floor": float("nan")},
            {"instrument": dr_name, "measure": "held-out accuracy", "value": dr_check["accuracy"],
             "floor": float("nan")}]
    return Instruments(vessel.model.eval(), exudate.model.eval(), keypoints.model.eval(), attacker, pd.DataFrame(rows),
                       generator_config.cohort_size, dr, dr_check["classes"])


# ---------------------------------------------------------------------------------------------------------------
# vessel masks and the instrument check
# ---------------------------------------------------------------------------------------------------------------
@torch.no_grad()
def vessel_probability(instruments: Instruments, images: torch.Tensor) -> torch.Tensor:
    """Vessel probabilities ``(N, 1, S, S)`` at the cohort's side ``S`` of images ``(N, C, R, R)`` in [0, 1]."""
    return segmenter_probability(instruments.vessel, instruments.cohort_size, images)


@torch.no_grad()
def segmenter_probability(network: torch.nn.Module, cohort_size: int, images: torch.Tensor) -> torch.Tensor:
    """Probabilities ``(N, 1, S, S)`` of a U-Net trained at the cohort's side ``S`` on images ``(N, C, R, R)`` in
    [0, 1] (upsampled to ``S`` first)."""
    upsampled = _upsample(images, cohort_size)
    return torch.from_numpy(np.asarray(segment(network, upsampled), dtype=np.float32)).reshape(
        len(images), 1, cohort_size, cohort_size)


def _upsample(images: torch.Tensor, size: int) -> torch.Tensor:
    if images.shape[-1] == size:
        return images
    return F.interpolate(images, size=size, mode="bilinear", align_corners=False).clamp(0, 1)


def vessel_masks(probability: torch.Tensor, resolution: int, fallback_fraction: float) -> tuple[torch.Tensor, int]:
    """Binary vessel masks ``(N, R, R)`` at the generator's side from cohort-size probabilities.

    A generator pixel is vessel when any of its cohort pixels has probability >= 0.5 (max-pooling). An image where
    the segmenter finds no vessel pixel at all would make Eq. 9 undefined (``||M||_0 = 0``); it gets the
    ``fallback_fraction`` most vessel-like pixels instead, and is counted (the chapter reports the count: such masks
    are not vessels, and the instrument check says whether the scores mean anything).

    Args:
        probability: ``(N, 1, S, S)`` in [0, 1], ``S`` a multiple of ``resolution``.
        resolution: The generator's side ``R``.
        fallback_fraction: Share of pixels of a fallback mask, in (0, 1].

    Returns:
        ``(masks float32 (N, R, R) in {0, 1}, number of fallback masks)``.
    """
    factor = probability.shape[-1] // resolution
    pooled = F.max_pool2d(probability, factor) if factor > 1 else probability  # (N, 1, R, R)
    masks = (pooled[:, 0] >= 0.5).float()
    empty = masks.flatten(1).sum(1) == 0
    count = max(1, int(round(fallback_fraction * resolution * resolution)))
    for index in torch.nonzero(empty).flatten().tolist():
        flat = pooled[index, 0].flatten()
        top = torch.topk(flat, count).indices
        mask = torch.zeros_like(flat)
        mask[top] = 1.0
        masks[index] = mask.reshape(resolution, resolution)
    return masks, int(empty.sum())


def vessel_check(instruments: Instruments, generated: torch.Tensor, real: torch.Tensor, real_native: torch.Tensor,
                 config, empty_masks: int, masked_images: int | None = None) -> dict:
    """The instrument check of the Jacobian scores: does the segmenter find vessels in generated images?

    It passes when the vessel U-Net passed its own Dice floor, the vessel-pixel fraction of generated images is
    within a factor ``1 / config.min_vessel_ratio`` of the real images' one, and at most ``config.max_empty_masks``
    of the masked images have no vessel pixel at all (``empty_masks`` of ``masked_images``, by default
    ``len(generated)``; the run counts them among the score images, whose masks the scores use).

    Returns:
        Dict with the vessel-pixel fractions ``generated``, ``real`` (real images resampled to the generator's
        size), ``real_native`` (at the cohort's size), ``ratio`` = generated / real, ``log_ratio_se`` (the standard
        error of ``log(ratio)`` over images, delta method), ``passed`` and ``check`` (empty when passed, else the
        failed check in words).
    """
    per_image = {name: (vessel_probability(instruments, images) >= 0.5).float().flatten(1).mean(1).double().numpy()
                 for name, images in (("generated", generated), ("real", real), ("real_native", real_native))}
    fractions = {name: float(values.mean()) for name, values in per_image.items()}
    ratio = fractions["generated"] / fractions["real"] if fractions["real"] > 0 else float("nan")
    log_ratio_se = float("nan")
    if fractions["generated"] > 0 and fractions["real"] > 0 and min(len(generated), len(real)) > 1:
        # Var(log mean) ~ Var(mean) / mean^2 for each independent set of images
        log_ratio_se = float(np.sqrt(sum(per_image[name].var(ddof=1) / len(per_image[name]) / fractions[name] ** 2
                                         for name in ("generated", "real"))))
    # Two-sided: far fewer vessel pixels than real (no vessels drawn) and far more (the segmenter marks texture or
    # the whole field as vessel) both make the masks something other than vessels.
    low, high = config.min_vessel_ratio, 1.0 / config.min_vessel_ratio
    passed = bool(np.isfinite(ratio) and low <= ratio <= high)
    check = "" if passed else (f"the vessel U-Net finds a vessel-pixel fraction of {fractions['generated']:.4f} in "
                               f"generated images against {fractions['real']:.4f} in real ones (ratio {ratio:.2f}, "
                               f"outside [{low:g}, {high:g}])")
    masked_images = len(generated) if masked_images is None else masked_images
    empty_share = empty_masks / masked_images
    if empty_share > config.max_empty_masks:
        passed = False
        check = "; ".join(part for part in (check, f"{empty_masks} of {masked_images} generated images have no "
                                                   f"vessel pixel (more than {config.max_empty_masks:.0%})") if part)
    dice = float(instruments.checks.loc[instruments.checks["measure"] == VESSEL_DICE, "value"].iloc[0])
    if dice < config.segmenter_min_dice:
        passed = False
        check = "; ".join(part for part in (f"the vessel U-Net's validation Dice is {dice:.3f} < "
                                            f"{config.segmenter_min_dice}", check) if part)
    return {**fractions, "ratio": ratio, "log_ratio_se": log_ratio_se, "empty_share": empty_share, "passed": passed,
            "check": check}


# ---------------------------------------------------------------------------------------------------------------
# contribution scores
# ---------------------------------------------------------------------------------------------------------------
def sample_codes(generator: StyleGenerator, count: int, seed: int) -> tuple[torch.Tensor, StyleCodes]:
    """``count`` latents mapped to ``(ws (N, num_ws, w_dim), S codes)`` from seeded z (truncation 1)."""
    z = torch.randn(count, generator.z_dim, generator=torch.Generator().manual_seed(seed)).to(generator.w_avg.device)
    with torch.no_grad():
        ws = generator.mapping(z)
        return ws, generator.styles(ws).detach()


@torch.no_grad()
def render(generator: StyleGenerator, codes: StyleCodes, batch_size: int = 64) -> torch.Tensor:
    """Images ``(N, C, R, R)`` in [0, 1] of S codes, on the CPU (where every instrument runs)."""
    parts = [generator.synthesis_from_styles(codes.select(slice(i, i + batch_size))).cpu()
             for i in range(0, codes.batch_size, batch_size)]
    return to_unit_range(torch.cat(parts)).clamp(0, 1)


def score_channels(generator: StyleGenerator, codes: StyleCodes, masks: torch.Tensor,
                   chunk_size: int, image_batch_size: int | None = None) -> tuple[ChannelScores, dict]:
    """Contribution scores of every S channel (Eq. 8-10) and the speed of their JVPs against plain forwards.

    Returns:
        ``(scores, speed)``; ``speed`` holds ``seconds``, ``channel_images_per_s`` (JVP columns per wall second),
        ``forward_images_per_s`` (plain synthesis of the same images), their ``ratio`` (the issue's target: >= 0.5),
        ``T`` and ``K``.
    """
    started = time.perf_counter()
    scores = contribution_scores(generator, codes, masks, chunk_size=chunk_size, image_batch_size=image_batch_size,
                                 progress=False)
    seconds = time.perf_counter() - started
    started = time.perf_counter()
    repeats = 3
    for _ in range(repeats):
        render(generator, codes)
    forward = repeats * codes.batch_size / (time.perf_counter() - started)
    columns = codes.batch_size * codes.layout.total_channels / seconds
    return scores, {"T": codes.batch_size, "K": codes.layout.total_channels, "seconds": seconds,
                    "channel_images_per_s": columns, "forward_images_per_s": forward, "ratio": columns / forward}


def score_table(scores: ChannelScores) -> pd.DataFrame:
    """One row per scored channel: flat ``index``, ``layer``, ``channel``, mean ``score``, its standard error over
    images ``score_se`` and ``rank`` (1 = best)."""
    names = scores.names()
    per_image = scores.per_image.numpy()
    se = per_image.std(0, ddof=1) / np.sqrt(len(per_image)) if len(per_image) > 1 else np.full(per_image.shape[1],
                                                                                                np.nan)
    frame = pd.DataFrame({"index": scores.indices.numpy(), "layer": [name[0] for name in names],
                          "channel": [name[1] for name in names], "score": scores.scores.numpy(), "score_se": se})
    frame["rank"] = frame["score"].rank(ascending=False, method="first").astype(int)
    return frame.sort_values("rank").reset_index(drop=True)


@dataclass
class VesselRanking:
    """The vessel edit's channel ranking on one generator: found by the chapter, reused by an edit outside it.

    Attributes:
        ws: ``(T, num_ws, w_dim)`` latents of the ``T`` score images; ``codes``: their S codes.
        masks: ``(T, R, R)`` float32 vessel masks in {0, 1} of the score images (:func:`vessel_masks`).
        fallback_masks: How many of them were empty and got the fallback mask.
        fallback_fraction: The fallback masks' pixel share: the vessel-pixel share the U-Net finds in real training
            images (at least 0.02).
        scores: Every S channel's contribution score (Eq. 8-10, :func:`score_channels`).
        stylespace: StyleSpace's channel scores on the first ``BASELINE_IMAGES`` score images (its baseline).
        speed: The JVP speed of the run that computed the scores (:func:`score_channels`).
        source: ``"computed"`` (in this call) or ``"cache"`` (stored by an earlier run).
    """

    ws: torch.Tensor
    codes: StyleCodes
    masks: torch.Tensor
    fallback_masks: int
    fallback_fraction: float
    scores: ChannelScores
    stylespace: ChannelScores
    speed: dict
    source: str


def _segmenter_recipe(config, generator_config: GeneratorsConfig) -> tuple[Any, str, dict]:
    """``(cohort, mask name, training options)`` of the vessel U-Net (:func:`_vessel_segmenter` trains it)."""
    vessels, vessel_mask = vessel_cohort(generator_config)
    options = {"epochs": config.segmenter_epochs, "patch_size": min(64, generator_config.image_size),
               "patches_per_epoch": 384, "seed": generator_config.seed}
    return vessels, vessel_mask, options


def vessel_ranking(generator: StyleGenerator, trained: TrainedGenerator, segmenter: torch.nn.Module, config,
                   generator_config: GeneratorsConfig, *, reuse: bool) -> VesselRanking:
    """The contribution scores of every S channel on ``T = SCORE_IMAGES`` generated images, their vessel masks and
    StyleSpace's channel, stored in the artifact cache (namespace ``vascular-ranking``).

    The ranking is a property of the generator, the vessel U-Net and the scoring settings, not of the images an
    edit is applied to: the chapter computes it (``reuse=False``: its JVP speed is then this run's) and stores it,
    and :func:`~anonpaper.experiments.vascular.release.vessel_edit_releases` reuses it (``reuse=True``) when the
    key matches: the generator (the shipped weights' hash or its cache key), the vessel U-Net's recipe and cohort,
    the real cohort, ``SCORE_IMAGES``, ``BASELINE_IMAGES``, ``SEED``, ``CHUNK_SIZE`` and ``SCORE_IMAGE_BATCH``.
    An empty mask gets the vessel-pixel share of ``max(T, 8)`` real training images (seeded) as its fallback.

    Args:
        generator: The trained generator (eval mode, no gradients on its parameters), as ``trained.generator``.
        trained: Where it came from (its ``cache_key`` keys the ranking).
        segmenter: The chapter's vessel U-Net (:func:`vessel_segmenter`; ``Instruments.vessel``).
        config: This chapter's config; ``generator_config``: the generators chapter's, with this chapter's data.
        reuse: Load a stored ranking when there is one (else compute and store it).
    """
    ws, codes = sample_codes(generator, config.score_images, derive_seed(config.seed, "score-images"))
    vessels, vessel_mask, options = _segmenter_recipe(config, generator_config)
    resolution = int(generator.resolution)
    description = {"generator": {"kind": trained.kind, "key": trained.cache_key,
                                 "stylegan": generator.config.description},
                   "vessel_unet": {"cohort": cohort_description(vessels), "mask": vessel_mask, **options,
                                   "cohort_size": generator_config.cohort_size},
                   "real": cohort_description(kind_cohort(FUNDUS_IMAGES, generator_config)),
                   "score_images": config.score_images, "baseline_images": config.baseline_images,
                   "seed": config.seed, "chunk_size": config.chunk_size,
                   "score_image_batch": config.score_image_batch}

    def build() -> dict:
        real = _as_float(load_images(FUNDUS_IMAGES, generator_config))
        pick = np.sort(np.random.default_rng(derive_seed(config.seed, "mask-fallback")).choice(
            len(real), min(len(real), max(config.score_images, 8)), replace=False))
        fraction = max(0.02, float((segmenter_probability(segmenter, generator_config.cohort_size, real[pick])
                                    >= 0.5).float().mean()))
        probability = segmenter_probability(segmenter, generator_config.cohort_size, render(generator, codes))
        masks, fallback = vessel_masks(probability, resolution, fraction)
        scores, speed = score_channels(generator, codes, masks, config.chunk_size, config.score_image_batch)
        rows = slice(0, min(config.baseline_images, config.score_images))
        stylespace = find_baselines(generator, ws[rows], codes.select(rows), masks[rows], config.chunk_size,
                                    config.score_image_batch, methods=(STYLESPACE,)).stylespace_scores
        return {"masks": masks.to(torch.uint8), "fallback_masks": fallback, "fallback_fraction": fraction,
                "scores": _score_tensors(scores), "stylespace": _score_tensors(stylespace), "speed": speed}

    cache = ArtifactCache("vascular-ranking")
    if reuse and cache.exists(description):
        artifact, source = cache.load(description), "cache"
    else:
        artifact, source = build(), "computed"
        cache.save(description, artifact)
    layout = generator.style_layout
    return VesselRanking(ws, codes, artifact["masks"].float(), int(artifact["fallback_masks"]),
                         float(artifact["fallback_fraction"]), ChannelScores(**artifact["scores"], layout=layout),
                         ChannelScores(**artifact["stylespace"], layout=layout), dict(artifact["speed"]), source)


def _score_tensors(scores: ChannelScores) -> dict[str, torch.Tensor]:
    """A :class:`ChannelScores` without its layout (the generator's), for the cache."""
    return {"indices": scores.indices, "scores": scores.scores, "per_image": scores.per_image}


def gradient_maps(generator: StyleGenerator, codes: StyleCodes, index: int) -> torch.Tensor:
    """``|dG(s)/ds_k|`` summed over colour, ``(N, R, R)``, of flat channel ``index`` (paper Fig. 5, column 2)."""
    layer, channel = codes.layout.locate(int(index))
    base = codes.detach()

    def draw(layer_styles: torch.Tensor) -> torch.Tensor:
        styles = base.styles.copy()
        styles[layer] = layer_styles
        return generator.synthesis_from_styles(StyleCodes(styles, base.input_transform))

    return jvp_columns(draw, base.styles[layer], [channel])[0].abs().sum(1).cpu()


# ---------------------------------------------------------------------------------------------------------------
# the edits
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class EditSet:
    """Images to edit and every method's edit of them.

    Attributes:
        name: ``"generated"`` or ``"real"``.
        originals: ``(N, C, R, R)`` in [0, 1]: the unedited renderings (for real images: their W+ projection).
        codes: Their S codes.
        ws: Their ws ``(N, num_ws, w_dim)``.
        targets: For real images, the real images ``(N, C, R, R)``; None for generated ones.
        patients: For real images, their patient ids; None otherwise.
    """

    name: str
    originals: torch.Tensor
    codes: StyleCodes
    ws: torch.Tensor
    targets: torch.Tensor | None = None
    patients: np.ndarray | None = None


@dataclass
class Baselines:
    """The baselines' edits, found on generated images (one channel / direction serves every image).

    Attributes:
        stylespace_index: Flat S index of StyleSpace's best locally active channel.
        stylespace_scores: Its channel scores.
        lowrank: LowRankGAN's first direction in W ``(w_dim,)``; None when it failed (``errors`` says why).
        resefa: ReSeFa's first direction in W.
        w_layers: The ws entries LowRankGAN and ReSeFa move ("a few middle layers").
        errors: Method -> why it produced no direction.
    """

    stylespace_index: int
    stylespace_scores: ChannelScores
    lowrank: torch.Tensor | None
    resefa: torch.Tensor | None
    w_layers: tuple[int, ...]
    errors: dict[str, str] = field(default_factory=dict)


def middle_layers(num_ws: int) -> tuple[int, ...]:
    """The ws entries of LowRankGAN's and ReSeFa's edits: the middle half of the synthesis layers (at least one)."""
    start, stop = num_ws // 4, max(num_ws // 4 + 1, (3 * num_ws) // 4)
    return tuple(range(start, stop))


def _gram_matrices(generator: StyleGenerator, ws: torch.Tensor, layers: tuple[int, ...], masks: torch.Tensor,
                   chunk_size: int, group: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """Region and background Gram matrices in W averaged over all images, computed ``group`` images at a time
    (:func:`region_gram_matrices` holds a whole ``D x N x C x H x W`` Jacobian; at 256 px that is about 0.8 GB per
    image), weighted by group size so the result equals the all-at-once average."""
    region = background = None
    for start in range(0, len(ws), group):
        rows = slice(start, min(start + group, len(ws)))
        part_region, part_background = region_gram_matrices(w_coordinates(generator, ws[rows], layers), masks[rows],
                                                            chunk_size=chunk_size)
        weight = (rows.stop - rows.start) / len(ws)
        region = part_region * weight if region is None else region + part_region * weight
        background = part_background * weight if background is None else background + part_background * weight
    return region, background


def find_baselines(generator: StyleGenerator, ws: torch.Tensor, codes: StyleCodes, masks: torch.Tensor,
                   chunk_size: int, image_batch_size: int | None = None,
                   methods: tuple[str, ...] = (STYLESPACE, LOWRANK, RESEFA),
                   stylespace: ChannelScores | None = None) -> Baselines:
    """StyleSpace's channel and LowRankGAN's / ReSeFa's directions for the vessel region of ``T`` generated images.

    Args:
        ws: ``(T, num_ws, w_dim)``; ``codes``: their S codes; ``masks``: ``(T, R, R)`` vessel masks.
        chunk_size, image_batch_size: Channels and images per group of StyleSpace's S-channel JVPs (speed only),
            as for the contribution scores (:func:`score_channels`).
        methods: The baselines wanted. StyleSpace's channel is always found; without LowRankGAN and ReSeFa their
            Jacobian Gram matrices are not computed and ``errors`` says so (the others are the same either way).
        stylespace: StyleSpace's channel scores when already found on these images (:class:`VesselRanking`).
    """
    if stylespace is None:
        stylespace = stylespace_channels(generator, codes, masks, pooled_size=min(32, generator.resolution),
                                         chunk_size=chunk_size, image_batch_size=image_batch_size, progress=False)
    layers = middle_layers(generator.num_ws)
    errors: dict[str, str] = {method: "not requested" for method in (LOWRANK, RESEFA) if method not in methods}
    lowrank = resefa = None
    if len(errors) == 2:
        return Baselines(stylespace.best_index, stylespace, lowrank, resefa, layers, errors)
    try:
        region, background = _gram_matrices(generator, ws, layers, masks, chunk_size)
    except ValueError as error:
        errors[LOWRANK] = errors[RESEFA] = f"no Gram matrices ({error})"
    else:
        if LOWRANK in methods:
            try:
                lowrank = lowrank_directions(region, background).directions[0].float()
            except ValueError as error:
                errors[LOWRANK] = str(error)
        if RESEFA in methods:
            try:
                resefa = resefa_directions(region, background)[1][0].float()
            except ValueError as error:
                errors[RESEFA] = str(error)
    return Baselines(stylespace.best_index, stylespace, lowrank, resefa, layers, errors)


def top_channel_edit(generator, edit_set: EditSet, channels: list[int], mean: torch.Tensor,
                     alpha: float) -> torch.Tensor:
    """Paper 1's edit (Eq. 11) of an edit set: ``channels`` moved toward their ``mean`` by ``alpha``, rendered."""
    return render(generator, edit_channels(edit_set.codes, channels, mean, alpha))


def _s_coordinates(generator, edit_set: EditSet, index: int, std: torch.Tensor,
                   rows: slice) -> tuple[LatentCoordinates, torch.Tensor]:
    """Flat S as the editing space of (a slice of) an edit set, and StyleSpace's direction ``sigma_c e_c`` of the
    flat channel ``index``."""
    codes = edit_set.codes.select(rows).detach()

    def draw(flat: torch.Tensor) -> torch.Tensor:
        return generator.synthesis_from_styles(codes.with_flat(flat))

    coordinates = LatentCoordinates("s", codes.flatten().clone(), draw,
                                    tuple(str(i) for i in range(codes.layout.total_channels)))
    return coordinates, stylespace_direction(index, std)


def _coordinates(generator, edit_set: EditSet, method: str, baselines: Baselines, std: torch.Tensor,
                 rows: slice | None = None) -> tuple[LatentCoordinates, torch.Tensor] | None:
    """The latent space and direction of a baseline for (a slice of) an edit set; None when it has no direction."""
    rows = rows or slice(None)
    if method == STYLESPACE:
        return _s_coordinates(generator, edit_set, baselines.stylespace_index, std, rows)
    direction = baselines.lowrank if method == LOWRANK else baselines.resefa
    if direction is None:
        return None
    return w_coordinates(generator, edit_set.ws[rows], baselines.w_layers), direction


def _matched_edit(edit_set: EditSet, locate: Callable, target_change: float, subset: slice, missing: str) -> dict:
    """An edit along ``locate(rows) -> (coordinates, direction) | None`` whose step is matched on the ``subset``
    images to ``target_change`` (mean absolute change in the generator's [-1, 1] range), then applied to every image.

    Returns:
        ``{"images": (N, C, R, R) in [0, 1] or None, "step", "change" (mean absolute change in [0, 1] units),
        "error" (why there is no edit: ``missing`` when ``locate`` finds no direction)}``.
    """
    found = locate(subset)
    if found is None:
        return {"images": None, "step": float("nan"), "change": float("nan"), "error": missing}
    coordinates, direction = found
    try:
        # 1 % is far below the spread of the metrics across images; tighter costs renders, not accuracy
        step = step_for_image_change(coordinates, direction, target_change, tolerance=1e-2) if target_change > 0 \
            else 0.0
    except ValueError as error:
        return {"images": None, "step": float("nan"), "change": float("nan"), "error": f"step not matched ({error})"}
    full, direction = locate(slice(None))
    images = to_unit_range(full.edit(direction, step)).clamp(0, 1).cpu()
    return {"images": images, "step": step, "error": "", "change": float((images - edit_set.originals).abs().mean())}


def edit_methods(generator: StyleGenerator, edit_set: EditSet, top: list[int], several: list[int],
                 statistics: dict, baselines: Baselines, strengths, match_images: int,
                 methods: tuple[str, ...] = METHODS) -> dict:
    """Every method's edited images at every strength.

    Ours: Eq. 11 with the top channel (and with ``several`` top channels). Baselines: their step found by
    :func:`~anonpaper.methods.sspace_baselines.step_for_image_change` on the first ``match_images`` images so that
    the mean absolute image change equals that of our top-channel edit at the same alpha (in the generator's
    [-1, 1] range), then applied to every image.

    Args:
        methods: The methods edited (of :data:`METHODS`; ours is always edited, since the baselines are matched to
            it). Each method's edits are the same whichever others are asked for.

    Returns:
        ``{(method, alpha): {"images": (N, C, R, R) in [0, 1], "step": float, "change": float, "error": str}}``.
    """
    results: dict = {}
    mean, std = statistics["mean"], statistics["std"]
    subset = slice(0, min(match_images, edit_set.codes.batch_size))
    for alpha in strengths:
        ours = top_channel_edit(generator, edit_set, top, mean, alpha)
        change = float((ours - edit_set.originals).abs().mean())
        results[(OURS, alpha)] = {"images": ours, "step": alpha, "change": change, "error": ""}
        if OURS_SEVERAL in methods:
            several_images = top_channel_edit(generator, edit_set, several, mean, alpha)
            results[(OURS_SEVERAL, alpha)] = {"images": several_images, "step": alpha, "error": "",
                                              "change": float((several_images - edit_set.originals).abs().mean())}
        # The target in the generator's own range ([-1, 1]: twice the [0, 1] change), on the matching subset.
        subset_change = 2 * float((ours[subset] - edit_set.originals[subset]).abs().mean())
        for method in (method for method in (STYLESPACE, LOWRANK, RESEFA) if method in methods):
            results[(method, alpha)] = _matched_edit(
                edit_set, lambda rows, method=method: _coordinates(generator, edit_set, method, baselines, std, rows),
                subset_change, subset, baselines.errors.get(method, "no direction"))
    return results


def control_channels(ranking: list[int], seed: int) -> dict[str, int]:
    """The control channels our top channel is compared with: one drawn at random from all channels but the top
    one (seeded), and the median-ranked one (rank ``K // 2 + 1`` of ``K``).

    Example:
        >>> control_channels([7, 3, 5, 0, 9], seed=0)[MEDIAN_CHANNEL]
        5
    """
    rng = np.random.default_rng(seed)
    return {RANDOM_CHANNEL: int(ranking[1 + int(rng.integers(len(ranking) - 1))]),
            MEDIAN_CHANNEL: int(ranking[len(ranking) // 2])}


def edit_controls(generator: StyleGenerator, edit_set: EditSet, top: list[int], controls: dict[str, int],
                  statistics: dict, alpha: float, match_images: int) -> dict:
    """The control channels' edits at one strength: each channel moved along StyleSpace's direction
    ``sigma_c e_c`` with the step whose mean image change on the first ``match_images`` images equals that of our
    top-channel edit at ``alpha`` (so that the comparison is at matched image change, not at matched alpha).

    Returns:
        ``{(control name, alpha): edit}`` as :func:`edit_methods`.
    """
    subset = slice(0, min(match_images, edit_set.codes.batch_size))
    ours = top_channel_edit(generator, edit_set, top, statistics["mean"], alpha)
    subset_change = 2 * float((ours[subset] - edit_set.originals[subset]).abs().mean())
    return {(name, alpha): _matched_edit(
        edit_set, lambda rows, index=index: _s_coordinates(generator, edit_set, index, statistics["std"], rows),
        subset_change, subset, "no direction") for name, index in controls.items()}


# ---------------------------------------------------------------------------------------------------------------
# metrics
# ---------------------------------------------------------------------------------------------------------------
def _mean_se(values) -> tuple[float, float]:
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if not values.size:
        return float("nan"), float("nan")
    se = float(values.std(ddof=1) / np.sqrt(values.size)) if values.size > 1 else float("nan")
    return float(values.mean()), se


@torch.no_grad()
def exudate_present(instruments: Instruments, images: torch.Tensor) -> np.ndarray:
    """AMS's binary label: 1 when the hard-exudate U-Net gives any pixel probability >= 0.5. ``(N,)`` int."""
    probability = segment(instruments.exudate, _upsample(images, instruments.cohort_size))
    return (np.asarray(probability).reshape(len(images), -1).max(1) >= EXUDATE_THRESHOLD).astype(np.int64)


def dr_predictions(instruments: Instruments, images: torch.Tensor) -> np.ndarray:
    """The DR classifier's predicted class ``(N,)`` of images ``(N, C, R, R)`` in [0, 1] at the generator's side."""
    from anonpaper.train.classifier import predict_proba

    return predict_proba(instruments.dr, images).argmax(1)


def dr_utility(instruments: Instruments, originals: torch.Tensor, edited: torch.Tensor, clusters, bootstrap: int,
               seed: int, before: np.ndarray | None = None) -> tuple[dict, np.ndarray]:
    """How well an edit keeps the DR classifier's prediction: ``dr_agreement`` (share of images whose predicted
    class is unchanged, binomial SE) and ``dr_qwk`` (quadratic-weighted kappa between the predictions on originals
    and edits, SE by resampling ``clusters``: images, or the patients of real images), and the per-image agreement.
    ``before``: the predictions on the originals, when already computed.
    """
    before = dr_predictions(instruments, originals) if before is None else before
    after = dr_predictions(instruments, edited)
    agreement = (before == after).astype(float)
    row: dict[str, float] = {}
    row["dr_agreement"], row["dr_agreement_se"] = _mean_se(agreement)

    def kappa(first: np.ndarray, second: np.ndarray) -> float:
        return quadratic_weighted_kappa(first, second, instruments.dr_classes)

    row["dr_qwk"] = kappa(before, after)
    row["dr_qwk_se"] = patient_bootstrap_se(before, after, np.asarray(clusters), kappa, bootstrap, seed)
    return row, agreement


def embeddings(instruments: Instruments, images: torch.Tensor) -> np.ndarray:
    """The attacker's unit embeddings ``(N, D)`` of images ``(N, C, R, R)`` in [0, 1] (at the cohort's side)."""
    from anonpaper.train.embedding import embed

    return embed(instruments.attacker, _upsample(images, instruments.cohort_size), device="cpu")


def fd_features(instruments: Instruments, images: torch.Tensor) -> np.ndarray:
    """The FD features: pooled encoder taps of the vessel U-Net (the generators chapter's ``FD-vessel-unet``)."""
    return unet_features(instruments.vessel, _upsample(images, instruments.cohort_size))


def bootstrap_fd(first: np.ndarray, second: np.ndarray, resamples: int, seed: int) -> tuple[float, float]:
    """Frechet distance of two feature sets and its bootstrap standard error (both sets resampled)."""
    value = frechet_distance(first, second)
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(resamples):
        a = first[rng.integers(0, len(first), len(first))]
        b = second[rng.integers(0, len(second), len(second))]
        draws.append(frechet_distance(a, b))
    return float(value), float(np.std(draws, ddof=1))


def rank1_hits(query: np.ndarray, gallery: np.ndarray, query_ids: np.ndarray, gallery_ids: np.ndarray,
               exclude: np.ndarray | None = None) -> np.ndarray:
    """Per query: is the attacker's most cosine-similar gallery image of the same identity? ``(Q,)`` bool.

    ``exclude[q]``, when given, is a gallery index hidden from query ``q`` (its own image)."""
    similarity = cross_pair_scores(query, gallery, kind="cosine")
    if exclude is not None:
        similarity[np.arange(len(query)), exclude] = -np.inf
    return gallery_ids[similarity.argmax(1)] == query_ids


@dataclass
class AttackGallery:
    """What the attacker compares edits against: other images of the edited images' patients (and of other
    patients), never the edit's own original.

    Attributes:
        embeddings: ``(G, D)`` gallery embeddings.
        identities: ``(G,)`` gallery identities.
        query_identities: ``(N,)`` identity of each edited image.
        exclude: ``(N,)`` gallery index hidden from each query (the real image its original was projected from)
            or None.
    """

    embeddings: np.ndarray
    identities: np.ndarray
    query_identities: np.ndarray
    exclude: np.ndarray | None = None


def attack_gallery(instruments: Instruments, edit_set: EditSet, test_images: np.ndarray,
                   test_patients: np.ndarray, query_rows: np.ndarray) -> AttackGallery | None:
    """The attacker's gallery of an edit set: for projected real images, every real test image (the query's own
    real image hidden, so the attacker must find the patient through the patient's other images); None for
    generated images, which have no second image of their identity (a gallery of their own originals would make
    rank-1 a test of whether the edit changed the image at all).

    Args:
        test_images: ``(G, C, R, R)`` float array in [0, 1], every real test image.
        test_patients: ``(G,)`` their patient ids.
        query_rows: ``(N,)`` the test-split row of each edited image's real target.
    """
    if edit_set.patients is None:
        return None
    return AttackGallery(embeddings(instruments, torch.from_numpy(test_images)), np.asarray(test_patients),
                         np.asarray(edit_set.patients), np.asarray(query_rows))


def unet_distance(instruments: Instruments, first: torch.Tensor, second: torch.Tensor,
                  taps_first: list[torch.Tensor] | None = None) -> np.ndarray:
    """Paper 1's domain "LPIPS" as we measure it: the cosine distance of the vessel U-Net's 8 taps
    (:func:`~anonpaper.metrics.quality.domain_lpips` of that one network) between image pairs ``(N, C, S, S)`` at
    the cohort's side, ``(N,)``. Not the perceptual LPIPS of the paper's Table 2 (no ImageNet network offline), and
    on the one U-Net that passes its floor (the hard-exudate U-Net's taps are left out: its check decides whether it
    sees lesions). ``taps_first``: the U-Net's taps of ``first``, when already computed."""
    with torch.no_grad():
        return feature_tap_distance(first, second, instruments.vessel.forward_features, reduction="none",
                                    taps_first=taps_first).numpy()


@dataclass
class OriginalMeasures:
    """What the judge-free metrics read from one edit set's originals, measured once: every method and strength of
    a sweep compares its edits with the same originals, and the instruments are deterministic in eval mode, so
    reusing these changes no value.

    Attributes:
        sift: :func:`~anonpaper.metrics.identity.sift_features` of each original at the cohort's side.
        vessel_mask: float ``(N, 1, S, S)`` binary vessel masks of the originals (probability >= 0.5).
        unet_taps: The vessel U-Net's taps of the originals at the cohort's side.
    """

    sift: list[tuple[np.ndarray, np.ndarray]]
    vessel_mask: torch.Tensor
    unet_taps: list[torch.Tensor]


@torch.no_grad()
def original_measures(instruments: Instruments, originals: torch.Tensor) -> OriginalMeasures:
    """:class:`OriginalMeasures` of ``originals`` ``(N, C, R, R)`` in [0, 1]."""
    first = _upsample(originals, instruments.cohort_size)
    return OriginalMeasures(sift=[sift_features(image) for image in first],
                            vessel_mask=(vessel_probability(instruments, originals) >= 0.5).float(),
                            unet_taps=list(instruments.vessel.forward_features(first)))


@dataclass
class JudgedOriginals:
    """What one judge seed's metrics read from one edit set's originals, measured once (see
    :class:`OriginalMeasures`).

    Attributes:
        keypoints: :func:`~anonpaper.models.keypoints.detect` of each original at the cohort's side (FS_SR).
        exudate: ``(N,)`` AMS's exudate labels of the originals.
        dr: ``(N,)`` the DR classifier's predicted classes of the originals; None without a DR classifier.
    """

    keypoints: list[tuple[np.ndarray, np.ndarray]]
    exudate: np.ndarray
    dr: np.ndarray | None


def judged_originals(instruments: Instruments, originals: torch.Tensor) -> JudgedOriginals:
    """:class:`JudgedOriginals` of ``originals`` ``(N, C, R, R)`` in [0, 1] by one judge seed's ``instruments``."""
    first = _upsample(originals, instruments.cohort_size)
    return JudgedOriginals(keypoints=[detect(instruments.keypoints, image) for image in first],
                           exudate=exudate_present(instruments, originals),
                           dr=None if instruments.dr is None else dr_predictions(instruments, originals))


def measure(instruments: Instruments, originals: torch.Tensor, edited: torch.Tensor, real_features: np.ndarray,
            gallery: AttackGallery | None, clusters: np.ndarray, bootstrap: int = 0,
            seed: int = 0) -> tuple[dict, dict[str, np.ndarray]]:
    """Paper 1's Table 2 metrics of one edit of ``N`` images, the DR utility and the attacker's rank-1, each with
    its SE.

    Args:
        originals, edited: ``(N, C, R, R)`` in [0, 1].
        real_features: FD features of the real reference images.
        gallery: The attacker's gallery (:func:`attack_gallery`); None: no rank-1 (NaN).
        clusters: ``(N,)`` bootstrap clusters of the DR kappa (images, or the patients of real images).
        bootstrap, seed: Resamples and seed of the DR kappa's bootstrap SE (below 2: NaN).

    Returns:
        Dict: ``fd`` (edited vs real), ``unet_distance`` (:func:`unet_distance`, edited vs its original),
        ``fs_sift`` (mean over pairs whose original has a SIFT keypoint; ``fs_sift_missing`` counts the others),
        ``fs_sr`` (likewise, ``fs_sr_missing``), ``rroi`` (mean of finite ratios), ``rroi_median``, ``rroi_unbounded``, ``rroi_area`` (RROI over
        the RROI of a change spread evenly over the image, ``sqrt(|M| / |1 - M|)``: 1 = the edit is no more on the
        vessels than anywhere else), ``ams``, ``dr_agreement`` (share of images whose predicted DR class the edit
        keeps), ``dr_qwk`` (quadratic-weighted kappa between the predictions on the originals and on the edits),
        ``rank1`` (each ``*_se``), ``n``; and the per-image ``(N,)`` arrays ``fs_sift``, ``fs_sr``, ``rroi``,
        ``rroi_area``, ``ams``, ``dr_agreement`` and ``rank1`` (for paired comparisons). RROI is undefined (NaN)
        for an image whose vessel mask is empty; the DR columns are absent without a DR classifier.
    """
    row, per_image = measure_unjudged(instruments, originals, edited, real_features)
    judged_row, judged_per_image = measure_judged(instruments, originals, edited, gallery, clusters, bootstrap, seed)
    return {**row, **judged_row}, {**per_image, **judged_per_image}


def measure_unjudged(instruments: Instruments, originals: torch.Tensor, edited: torch.Tensor,
                     real_features: np.ndarray,
                     measured: OriginalMeasures | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    """The metrics of :func:`measure` that rest on no judge network: FD and the U-Net distance (the vessel U-Net
    the method's scores rest on), FS_SIFT and RROI; the same for every judge seed. ``measured``: the originals'
    :func:`original_measures`, when already computed (the same numbers, once per sweep)."""
    size = instruments.cohort_size
    first, second = _upsample(originals, size), _upsample(edited, size)
    measured = original_measures(instruments, originals) if measured is None else measured
    row: dict[str, Any] = {"n": len(originals)}
    # No bootstrap here: no claim rests on the sweep's FD, and 66 settings x BOOTSTRAP matrix square roots would
    # cost minutes at quick (the Table 3 FDs, which a claim compares, carry their bootstrap SE).
    row["fd"] = frechet_distance(real_features, fd_features(instruments, edited))
    row["unet_distance"], row["unet_distance_se"] = _mean_se(unet_distance(instruments, first, second,
                                                                           measured.unet_taps))
    per_image = {"fs_sift": fs_sift(first, second, reduction="none", first_features=measured.sift)}
    row["fs_sift"], row["fs_sift_se"] = _mean_se(per_image["fs_sift"])
    row["fs_sift_missing"] = int(np.isnan(per_image["fs_sift"]).sum())
    mask = measured.vessel_mask
    ratios = rroi(mask, first, second, reduction="none")
    area = mask.flatten(1).sum(1).double().numpy()
    ratios[area == 0] = np.nan  # no region of interest: the ratio means nothing
    per_image["rroi"] = ratios
    row["rroi"], row["rroi_se"] = _mean_se(ratios)
    defined = ratios[~np.isnan(ratios)]
    row["rroi_median"] = float(np.median(defined)) if defined.size else float("nan")
    row["rroi_unbounded"] = int(np.isposinf(ratios).sum())
    with np.errstate(divide="ignore", invalid="ignore"):
        # An even change d everywhere gives ||M d|| / ||(1 - M) d|| = sqrt(|M| / |1 - M|) (L2 norms of Eq. 12).
        per_image["rroi_area"] = ratios / np.sqrt(area / (mask[0].numel() - area))
    row["rroi_area"], row["rroi_area_se"] = _mean_se(per_image["rroi_area"])
    return row, per_image


def measure_judged(instruments: Instruments, originals: torch.Tensor, edited: torch.Tensor,
                   gallery: AttackGallery | None, clusters: np.ndarray, bootstrap: int = 0,
                   seed: int = 0, measured: JudgedOriginals | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    """The metrics of :func:`measure` that judge networks decide, measured once per judge seed: FS_SR (keypoint
    detector), AMS (exudate U-Net), the DR utility (DR classifier) and rank-1 (attacker). ``measured``: the
    originals' :func:`judged_originals` by these instruments, when already computed (the same numbers)."""
    size = instruments.cohort_size
    first, second = _upsample(originals, size), _upsample(edited, size)
    measured = judged_originals(instruments, originals) if measured is None else measured
    row: dict[str, Any] = {}
    per_image = {"fs_sr": fs_sr(instruments.keypoints, first, second, reduction="none",
                                original_keypoints=measured.keypoints)}
    row["fs_sr"], row["fs_sr_se"] = _mean_se(per_image["fs_sr"])
    row["fs_sr_missing"] = int(np.isnan(per_image["fs_sr"]).sum())
    agreement = (measured.exudate == exudate_present(instruments, edited)).astype(float)
    per_image["ams"] = agreement
    row["ams"], row["ams_se"] = _mean_se(agreement)
    if instruments.dr is not None:
        dr_row, per_image["dr_agreement"] = dr_utility(instruments, originals, edited, clusters, bootstrap, seed,
                                                       before=measured.dr)
        row.update(dr_row)
    if gallery is None:
        per_image["rank1"] = np.full(len(originals), np.nan)
    else:
        per_image["rank1"] = rank1_hits(embeddings(instruments, edited), gallery.embeddings,
                                        gallery.query_identities, gallery.identities, gallery.exclude).astype(float)
    row["rank1"], row["rank1_se"] = _mean_se(per_image["rank1"])
    return row, per_image


# ---------------------------------------------------------------------------------------------------------------
# real images
# ---------------------------------------------------------------------------------------------------------------
def _as_float(images: np.ndarray) -> torch.Tensor:
    tensor = torch.from_numpy(np.asarray(images)).float() / 255.0
    return tensor[:, None] if tensor.ndim == 3 else tensor.permute(0, 3, 1, 2)


def real_queries(generator_config: GeneratorsConfig, count: int, seed: int) -> tuple[torch.Tensor, np.ndarray,
                                                                                      np.ndarray, np.ndarray]:
    """Held-out (test split) real images for the projector: ``count`` images of patients with a second test image.

    Returns:
        ``(queries (Q, C, R, R) in [0, 1], their test-split rows (Q,), all test images (G, C, R, R) as a numpy
        float array, patient ids of all test images (G,))``.
    """
    images = _as_float(load_images(FUNDUS_IMAGES, generator_config, "test"))
    patients = kind_cohort(FUNDUS_IMAGES, generator_config).split("test").table["patient_id"].to_numpy()
    values, counts = np.unique(patients, return_counts=True)
    eligible = np.flatnonzero(np.isin(patients, values[counts >= 2]))
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.permutation(eligible)[:count])
    return images[rows], rows, images.numpy(), patients


def project_real(generator: StyleGenerator, targets: torch.Tensor, steps: int, seed: int,
                 batch_size: int = 16) -> tuple[torch.Tensor, StyleCodes, torch.Tensor]:
    """Invert real images into W+ (StyleGAN2-ADA projector recipe, ``batch_size`` images at a time: each its own
    Adam problem, a batch one random stream of exploration noise and noise maps) and map them to S.

    Returns:
        ``(ws (N, num_ws, w_dim) and S codes on the generator's device, reconstructions (N, C, R, R) in [0, 1] on
        the CPU)``.
    """
    from anonpaper.models.stylegan import concatenate_codes

    ws, codes, images = [], [], []
    for start in range(0, len(targets), batch_size):
        result = project(generator, targets[start:start + batch_size] * 2 - 1, space="w+", num_steps=steps,
                         w_avg_samples=2000, seed=seed)
        ws.append(result.ws.detach())
        codes.append(result.codes.detach())
        images.append(to_unit_range(result.reconstruction).clamp(0, 1).cpu())
    return torch.cat(ws), concatenate_codes(codes), torch.cat(images)


def identity_references(instruments: Instruments, images: np.ndarray, patients: np.ndarray, pairs: int,
                        seed: int, metrics: tuple[str, ...] = ("fs_sift", "fs_sr")) -> dict:
    """The identity similarity an edit is read against: FS_SIFT and FS_SR between two photographs of the same eye
    (one pair per patient with two or more images) and between photographs of two different eyes, on real images as
    the generator sees them (``images`` at its side, upsampled to the instruments' like every edit).

    An edit de-identifies on these measures when it leaves its original *less* similar than a second photograph of
    the same eye is (an unedited image compared with itself scores about 1, which any edit undercuts).

    Args:
        images: ``(G, C, R, R)`` float array in [0, 1]; ``patients``: ``(G,)`` their patient ids.
        pairs: At most this many pairs of each kind (same eye, different eyes).
        seed: Seed of the pair draws.
        metrics: Which of ``fs_sift`` and ``fs_sr`` to measure (the same pairs for the same seed).

    Returns:
        ``{"<metric>_<kind>": mean, "<metric>_<kind>_se": SE, "<metric>_<kind>_n": pairs}`` for metric in
        (``fs_sift``, ``fs_sr``) and kind in (``same``, ``different``); NaN with 0 pairs when none can be formed.
        And ``"<metric>_auroc"``: how well the measure tells the same eye from two eyes on these pairs (the AUROC
        of same-eye pairs scoring higher, in [0, 1], 0.5 = chance; NaN without pairs of both kinds), the floor of
        every claim read on it (``IDENTITY_MIN_AUROC``).
    """
    rng = np.random.default_rng(seed)
    patients = np.asarray(patients)
    same = []
    for patient in rng.permutation(np.unique(patients)):
        rows = np.flatnonzero(patients == patient)
        if len(rows) >= 2:
            same.append(rng.choice(rows, 2, replace=False))
    same = np.array(same[:pairs], dtype=np.int64).reshape(-1, 2)
    different = []
    while len(different) < min(pairs, len(same)) and len(np.unique(patients)) > 1:
        first, second = rng.choice(len(patients), 2, replace=False)
        if patients[first] != patients[second]:
            different.append((first, second))
    different = np.array(different, dtype=np.int64).reshape(-1, 2)
    tensor = _upsample(torch.from_numpy(np.asarray(images, dtype=np.float32)), instruments.cohort_size)
    references, scored = {}, {}
    for kind, index in (("same", same), ("different", different)):
        first, second = tensor[index[:, 0]], tensor[index[:, 1]]
        for metric, values in (("fs_sift", lambda: fs_sift(first, second, reduction="none")),
                               ("fs_sr", lambda: fs_sr(instruments.keypoints, first, second, reduction="none"))):
            if metric not in metrics:
                continue
            scores = values() if len(index) else np.array([])
            references[f"{metric}_{kind}"], references[f"{metric}_{kind}_se"] = _mean_se(scores)
            references[f"{metric}_{kind}_n"] = int(np.isfinite(scores).sum())
            scored[metric, kind] = np.asarray(scores, dtype=float)
    for metric in metrics:
        same_scores, different_scores = (scored[metric, kind][np.isfinite(scored[metric, kind])]
                                         for kind in ("same", "different"))
        references[f"{metric}_auroc"] = (
            auroc(np.r_[np.ones(len(same_scores)), np.zeros(len(different_scores))].astype(np.int64),
                  np.r_[same_scores, different_scores]) if len(same_scores) and len(different_scores)
            else float("nan"))
    return references


def projector_check(instruments: Instruments, targets: torch.Tensor, reconstruction: torch.Tensor) -> dict:
    """The projector's own check: PSNR of the W+ projections to their real targets (a blurred disc reaches about
    23 dB on the 64 px phantom, the floor ``PROJECTOR_MIN_PSNR`` is above it), and a domain check: the vessel-pixel
    fraction the vessel U-Net finds in the projections over that of their targets.

    Returns:
        ``{"psnr", "psnr_se", "vessel_ratio", "n"}``.
    """
    from anonpaper.metrics.quality import psnr

    values = psnr(targets, reconstruction, reduction="none").double().numpy()
    fractions = [float((vessel_probability(instruments, images) >= 0.5).float().mean())
                 for images in (reconstruction, targets)]
    result = {"n": len(targets), "vessel_ratio": fractions[0] / fractions[1] if fractions[1] > 0 else float("nan")}
    result["psnr"], result["psnr_se"] = _mean_se(values)
    return result


def lesion_label_share(instruments: Instruments, images: torch.Tensor) -> float:
    """The share of ``images`` in the less frequent class of AMS's hard-exudate label (0 when the label is the same
    for every image: AMS then cannot see an edit change it)."""
    labels = exudate_present(instruments, images)
    return float(min(labels.mean(), 1 - labels.mean())) if len(labels) else float("nan")


# ---------------------------------------------------------------------------------------------------------------
# Table 3: the loss ablation
# ---------------------------------------------------------------------------------------------------------------
def ablation_loss(instruments: Instruments, parts: tuple[str, ...]) -> Callable | None:
    """Paper 1's extra generator loss ``0.6 * sum of LPIPS_part(fake, real)`` over ``parts`` (``"vessel"``,
    ``"lesion"``): cosine distances of the U-Nets' 8 taps between the generated batch and a real batch, at the
    cohort's side (None for the plain StyleGAN3)."""
    if not parts:
        return None
    networks = []
    for part in parts:
        # A frozen copy: the U-Nets are fixed instruments (only G learns) and may move to the training device.
        network = copy.deepcopy(instruments.vessel if part == "vessel" else instruments.exudate).eval()
        for parameter in network.parameters():
            parameter.requires_grad_(False)
        networks.append(network)
    size = instruments.cohort_size

    def loss(context) -> tuple[torch.Tensor, dict]:
        for network in networks:
            network.to(context.fake_images.device)
        fake = F.interpolate((context.fake_images + 1) / 2, size=size, mode="bilinear", align_corners=False)
        real = F.interpolate((context.real_images + 1) / 2, size=size, mode="bilinear", align_corners=False)
        terms = {part: feature_tap_distance(fake.clamp(0, 1), real.clamp(0, 1), network.forward_features)
                 for part, network in zip(parts, networks)}
        return LPIPS_WEIGHT * sum(terms.values()), {f"lpips_{part}": value.detach() for part, value in terms.items()}

    return loss


def train_ablation_generator(variant: str, instruments: Instruments, config, generator_config: GeneratorsConfig,
                             progress: bool = False) -> dict:
    """One generator of Table 3 (``variant`` in :data:`ABLATIONS`), trained ``config.ablation_kimg`` more with
    the generators chapter's recipe and the variant's extra loss, cached.

    The four variants continue the edited generator's own run from its trainer checkpoint (the run folder beside
    shipped weights, or the cache's) on the chapter cohort's training images: the same networks, optimiser states
    and random draws, so they differ only by the extra loss. Their raw generators are compared, since the EMA
    (half-life 2.5 kimg at batch 8) would hold only a fraction of a short continuation. Without a checkpoint they
    are trained from the chapter's initialisation and their EMA generators compared.

    Returns:
        ``{"state_dict", "seconds", "kimg", "start_kimg", "network"}``: kimg in all, of which ``start_kimg`` before
        the variant's loss; ``network`` is ``"raw"`` or ``"EMA"``.
    """
    parts = ABLATIONS[variant]
    steps = max(1, int(round(config.ablation_kimg * 1000 / generator_config.batch_size)))
    trained, _ = load_fundus_generator(generator_config, config.generator, progress)
    checkpoint = trainer_checkpoint(trained)
    settings = training_config(config.generator, generator_config, output_dir=None, progress=progress)
    start_step, start = 0, {"from": "initialisation", "generator_seed": generator_config.seed}
    if checkpoint is not None:
        state = load_checkpoint(checkpoint)
        # The run's own recipe (an older checkpoint may lack a newer field: the chapter's value stands in).
        known = {item.name for item in dataclasses.fields(GANTrainingConfig)} - {"progress"}
        settings = dataclasses.replace(settings, **{name: value for name, value in state["training_config"].items()
                                                    if name in known})
        start_step = int(state["step"])
        start = {"from": "checkpoint", "sha256": file_sha256(checkpoint), "step": start_step}
        del state
    settings = dataclasses.replace(settings, total_steps=start_step + steps, output_dir=None,
                                   adversarial_weight=ADVERSARIAL_WEIGHT if parts else 1.0, checkpoint_every=0,
                                   metrics_every=0, sample_every=0, log_every=max(1, steps // 50))
    recipe = dataclasses.asdict(settings)
    for name in ("output_dir", "progress", "log_every"):
        recipe.pop(name)
    description = {"variant": variant, "parts": list(parts), "lpips_weight": LPIPS_WEIGHT if parts else 0.0,
                   "stylegan": generator_config.stylegan_config(config.generator).to_dict(), "training": recipe,
                   "start": start, "images": cohort_description(kind_cohort(FUNDUS_IMAGES, generator_config)),
                   "instruments": {"segmenter_epochs": config.segmenter_epochs, "seed": generator_config.seed}}

    def build() -> dict:
        stylegan = generator_config.stylegan_config(config.generator)
        images = load_images(FUNDUS_IMAGES, generator_config)
        generator = StyleGenerator(stylegan, seed=derive_seed(generator_config.seed, "G", config.generator),
                                   implementation="fast")
        discriminator = ResidualDiscriminator(stylegan, seed=derive_seed(generator_config.seed, "D", config.generator))
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="ablation-") as run_dir:
            # train_gan resumes from its output folder: a copy, so the run folder itself is never written.
            if checkpoint is not None:
                shutil.copyfile(checkpoint, Path(run_dir) / "checkpoint.pt")
            result = train_gan(generator, discriminator, images,
                               dataclasses.replace(settings, output_dir=run_dir if checkpoint is not None else None),
                               extra_generator_loss=ablation_loss(instruments, parts),
                               device=config.device or get_device(), resume=checkpoint is not None)
        network = (result.generator if checkpoint is not None else result.generator_ema).to("cpu")
        return {"state_dict": {k: v.detach().cpu() for k, v in network.state_dict().items()},
                "seconds": time.perf_counter() - started, "kimg": (start_step + steps) * settings.batch_size / 1000,
                "start_kimg": start_step * settings.batch_size / 1000,
                "network": "raw" if checkpoint is not None else "EMA"}

    return ArtifactCache("vascular-ablation").get_or_create(description, build)


def loss_ablation(instruments: Instruments, config, generator_config: GeneratorsConfig,
                  progress: bool = False) -> tuple[pd.DataFrame, dict]:
    """Table 3: FD on the vessel U-Net's features and FD on the attacker's embeddings (a network the extra loss
    never sees, like the paper's Inception features; both with bootstrap SE), the U-Net feature distance
    (:func:`unet_distance`, each generated image against a random real one, where the paper has LPIPS), MSE
    (likewise, unpaired) and SWD of each ablation generator against real training images.

    Returns:
        ``(table, samples)``: one row per variant; ``samples[variant]`` = 8 images (N, C, R, R) in [0, 1].
    """
    if config.ablation_kimg <= 0:
        return pd.DataFrame(), {}
    real_all = _as_float(load_images(FUNDUS_IMAGES, generator_config))
    count = min(config.ablation_eval_images, len(real_all))
    rng = np.random.default_rng(derive_seed(config.seed, "ablation-real"))
    real = real_all[np.sort(rng.choice(len(real_all), count, replace=False))]
    partner = real[rng.permutation(count)]
    real_features = fd_features(instruments, real)
    real_embeddings = embeddings(instruments, real).astype(np.float64)
    rows, samples = [], {}
    for variant in ABLATIONS:
        artifact = train_ablation_generator(variant, instruments, config, generator_config, progress)
        generator = StyleGenerator(generator_config.stylegan_config(config.generator), seed=0)
        generator.load_state_dict(artifact["state_dict"])
        generator.eval()
        fake = generate(generator, count, derive_seed(config.seed, "ablation-samples"))
        fd, fd_se = bootstrap_fd(real_features, fd_features(instruments, fake), config.bootstrap,
                                 derive_seed(config.seed, "ablation-fd", variant))
        size = instruments.cohort_size
        distance = unet_distance(instruments, _upsample(fake, size), _upsample(partner, size))
        mse = (fake - partner).square().flatten(1).mean(1).numpy()
        fd_attacker, fd_attacker_se = bootstrap_fd(real_embeddings, embeddings(instruments, fake).astype(np.float64),
                                                   config.bootstrap,
                                                   derive_seed(config.seed, "ablation-fd-id", variant))
        row = {"variant": variant, "kimg": artifact["kimg"], "start_kimg": artifact["start_kimg"],
               "network": artifact["network"], "train_seconds": artifact["seconds"], "fd": fd,
               "fd_se": fd_se, "fd_attacker": fd_attacker, "fd_attacker_se": fd_attacker_se}
        row["unet_distance"], row["unet_distance_se"] = _mean_se(distance)
        row["mse"], row["mse_se"] = _mean_se(mse)
        row["swd"] = swd(real, fake, seed=config.seed).value if generator.resolution >= 16 else float("nan")
        row["n"] = count
        rows.append(row)
        samples[variant] = fake[:8].numpy()
    return pd.DataFrame(rows), samples


# ---------------------------------------------------------------------------------------------------------------
# the whole experiment
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    """What :func:`run` returns.

    Attributes:
        config: The run's config; ``generator_config``: the generators chapter's config it used.
        generator: Description of the generator: kind, config, resolution, K, source, kimg, note.
        instruments: One row per instrument check.
        vessels: The vessel instrument check (:func:`vessel_check`) on the ``n`` generated images of the run (the
            ``T`` score images and the evaluation images) plus ``fallback_masks``: images of the ``T`` whose mask is
            the fallback (no vessel found).
        scores: :class:`ChannelScores` of every channel over the ``T`` images; ``channels``: :func:`score_table`.
        speed: The JVP speed (:func:`score_channels`).
        baselines: The baselines' channel / directions.
        sweep: One row per image set, method and strength: the metrics of :func:`measure`, ``step``, ``change``
            (mean absolute change in [0, 1] units), ``error`` (why a method has no edit).
        ablation: Table 3 rows (empty when skipped); ``ablation_samples``: variant -> images.
        samples: Arrays for the figures (see :func:`run`).
        seconds: Wall seconds per stage.
        per_image: ``(image_set, method, alpha)`` -> the per-image arrays of :func:`measure`.
        references: :func:`identity_references` (the same-eye and different-eye FS levels).
        controls: The control channels (:func:`control_channels`): name -> flat S index.
        projector: :func:`projector_check` of the real images (empty without real images).
        replicates: With ``JUDGE_SEEDS > 1``, one outcome per judge seed with that seed's ``instruments``,
            ``sweep``, ``per_image`` and ``references``: the claims are decided on each and combined. The outcome
            itself then holds the sweep and the instrument checks averaged over the seeds (``*_se`` with the seed
            spread, ``*_seed_sd``; checks with ``seed_sd`` and ``seeds``) and the first seed's references. Empty
            with one judge seed.
    """

    config: Any
    generator_config: GeneratorsConfig
    generator: dict
    instruments: pd.DataFrame
    vessels: dict
    scores: ChannelScores
    channels: pd.DataFrame
    speed: dict
    baselines: Baselines
    sweep: pd.DataFrame
    ablation: pd.DataFrame
    ablation_samples: dict
    samples: dict
    seconds: dict
    per_image: dict = field(default_factory=dict)
    references: dict = field(default_factory=dict)
    controls: dict = field(default_factory=dict)
    projector: dict = field(default_factory=dict)
    replicates: list["Outcome"] = field(default_factory=list)

    def row(self, image_set: str, method: str, alpha: float) -> dict:
        """The sweep row of one image set, method and strength (empty dict when absent)."""
        frame = self.sweep
        rows = frame[(frame["image_set"] == image_set) & (frame["method"] == method)
                     & np.isclose(frame["alpha"], alpha)]
        return rows.iloc[0].to_dict() if len(rows) else {}


def run(config, generator_config: GeneratorsConfig, progress: bool = False) -> Outcome:
    """The whole chapter: generator, instruments, scores, edits, metrics, ablation (see the module docstring).

    Args:
        config: This chapter's :class:`~anonpaper.experiments.vascular.Config`.
        generator_config: The generators chapter's config at ``config.generators_profile``
            (``anonpaper.runner.study_config("02_generators", profile)``); this chapter's data parameters replace
            its own (:func:`generators_config_for`).
        progress: Show training progress bars.

    Raises:
        DataCopyError: A real copy named by DATA_ROOT or VESSEL_DATA_ROOT is missing or broken (before any
            training).
    """
    generator_config = generators_config_for(config, generator_config)
    check_data(generator_config)
    seconds: dict[str, float] = {}
    tick = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal tick
        now = time.perf_counter()
        seconds[stage] = now - tick
        tick = now

    trained, note = load_fundus_generator(generator_config, config.generator, progress)
    device = torch.device(config.device) if config.device else get_device()
    generator = trained.generator.to(device).eval()
    for parameter in generator.parameters():
        parameter.requires_grad_(False)
    layout = generator.style_layout
    resolution = generator.resolution
    generator_info = {"kind": config.generator, "config": generator.config.description, "resolution": resolution,
                      "style_channels": layout.total_channels, "style_layers": len(layout.names),
                      "source": trained.source, "kimg": trained.kimg, "note": note,
                      "data": generator_config.dataset_name(config.generator)
                      + ("" if generator_config.is_phantom else f" at {generator_config.data_root}")}
    lap("generator")
    instruments = load_instruments(config, generator_config, progress)
    # The judges (AMS's exudate U-Net, FS_SR's keypoint detector, the attacker, the DR classifier) JUDGE_SEEDS
    # times with different seeds: every judged metric is measured with each, and the claims carry their spread.
    judges = [instruments] + [load_instruments(config, generator_config, progress, replicate)
                              for replicate in range(1, config.judge_seeds)]
    lap("instruments")

    # The contribution scores of every S channel on the T score images (Eq. 8-10), with their vessel masks and
    # StyleSpace's channel: stored, so that the edit applied outside the chapter reuses this run's ranking.
    ranked = vessel_ranking(generator, trained, instruments.vessel, config, generator_config, reuse=False)
    ws_scored, codes_scored, masks_scored = ranked.ws, ranked.codes, ranked.masks
    scores, speed = ranked.scores, ranked.speed
    channels = score_table(scores)
    ranking = scores.ranking.tolist()
    top, several = ranking[:1], ranking[:config.several_channels]
    statistics = style_statistics(generator, num_samples=1000, seed=derive_seed(config.seed, "style-statistics"))
    lap("contribution scores")

    # The instrument check, on every generated image of the run (the T score images and the evaluation images)
    # against as many real training images: the vessel fraction is the generator's, and its claim needs
    # MIN_TEST_IMAGES images whatever T is; the empty masks are counted among the score images, whose masks the
    # scores use.
    ws_eval, codes_eval = sample_codes(generator, config.eval_images, derive_seed(config.seed, "eval-images"))
    scored_images, eval_images = render(generator, codes_scored), render(generator, codes_eval)
    checked_images = torch.cat([scored_images, eval_images])
    native_all = kind_cohort(FUNDUS_IMAGES, generator_config).split("train").load_images()
    pick = np.sort(np.random.default_rng(derive_seed(config.seed, "real-check")).choice(
        len(native_all), min(len(native_all), max(len(checked_images), 8)), replace=False))
    real_resampled = _as_float(load_images(FUNDUS_IMAGES, generator_config))[pick]
    vessels = vessel_check(instruments, checked_images, real_resampled, _as_float(native_all[pick]), config,
                           ranked.fallback_masks, masked_images=len(scored_images))
    vessels["fallback_masks"] = ranked.fallback_masks
    vessels["T"] = config.score_images
    vessels["n"] = len(checked_images)
    lap("instrument check")

    base_rows = slice(0, min(config.baseline_images, config.score_images))
    baselines = find_baselines(generator, ws_scored[base_rows], codes_scored.select(base_rows),
                               masks_scored[base_rows], config.chunk_size, config.score_image_batch,
                               stylespace=ranked.stylespace)
    lap("baselines")

    # Edit sets: fresh generated images, and real held-out images inverted into W+.
    generated = EditSet("generated", eval_images, codes_eval, ws_eval)
    edit_sets = [generated]
    queries, query_rows, test_images, test_patients = real_queries(generator_config, config.real_images,
                                                                   derive_seed(config.seed, "real-queries"))
    projector = {}
    if len(queries):
        ws_real, codes_real, reconstruction = project_real(generator, queries, config.projector_steps,
                                                           derive_seed(config.seed, "projector"),
                                                           batch_size=config.projector_batch)
        edit_sets.append(EditSet("real", reconstruction, codes_real, ws_real, queries, test_patients[query_rows]))
        projector = projector_check(instruments, queries, reconstruction)
    lap("projector")

    # The instruments measured on this run's images: AMS's label on the originals, the projector, the FS levels of
    # two photographs of one eye.
    checks = []
    if projector:
        checks += [{"instrument": f"projector ({config.projector_steps} steps, {projector['n']} real test images)",
                    "measure": PROJECTOR_PSNR, "value": projector["psnr"], "floor": config.projector_min_psnr},
                   {"instrument": f"projector ({config.projector_steps} steps, {projector['n']} real test images)",
                    "measure": PROJECTOR_VESSELS, "value": projector["vessel_ratio"],
                    "floor": config.min_vessel_ratio}]
    judged_checks = [pd.concat([judge.checks, pd.DataFrame(
        [{"instrument": "hard-exudate U-Net (AMS, the +lesion loss)", "measure": LESION_SHARE,
          "value": lesion_label_share(judge, generated.originals), "floor": config.lesion_min_share}] + checks)],
        ignore_index=True) for judge in judges]
    reference_seed = derive_seed(config.seed, "identity-references")
    references = identity_references(instruments, test_images, test_patients, config.reference_pairs, reference_seed)
    judged_references = [references] + [
        {**references, **identity_references(judge, test_images, test_patients, config.reference_pairs,
                                             reference_seed, metrics=("fs_sr",))} for judge in judges[1:]]
    controls = control_channels(ranking, derive_seed(config.seed, "control-channel"))

    real_features = fd_features(instruments, real_resampled)
    rows, per_image = [[] for _ in judges], [{} for _ in judges]  # one sweep per judge seed
    examples = {}
    strengths = config.strengths
    for edit_set in edit_sets:
        edits = edit_methods(generator, edit_set, top, several, statistics, baselines, strengths,
                             config.match_images)
        if edit_set.name == "generated":
            # The top channel's controls, at the comparison strength only (the claims' strength).
            edits.update(edit_controls(generator, edit_set, top, controls, statistics, config.table_alpha,
                                       config.match_images))
        galleries = [attack_gallery(judge, edit_set, test_images, test_patients, query_rows) for judge in judges]
        clusters = edit_set.patients if edit_set.patients is not None else np.arange(len(edit_set.originals))
        # Every method and strength compares its edits with the same originals: measure them once per image set.
        originals_measured = original_measures(instruments, edit_set.originals)
        originals_judged = [judged_originals(judge, edit_set.originals) for judge in judges]

        def record(row: dict, first: torch.Tensor | None, second: torch.Tensor | None, key: tuple | None,
                   *seed_key) -> None:
            """Append ``row`` to every judge seed's sweep, with the metrics of ``second`` against ``first`` (each
            seed's judged metrics its own; the unjudged ones measured once); ``key`` files the per-image arrays."""
            if first is None:
                for sweep_rows in rows:
                    sweep_rows.append(dict(row))
                return
            of_originals = first is edit_set.originals
            unjudged, unjudged_images = measure_unjudged(instruments, first, second, real_features,
                                                         originals_measured if of_originals else None)
            seed = derive_seed(config.seed, "dr-bootstrap", edit_set.name, *seed_key)
            for judge, gallery, sweep_rows, arrays, measured in zip(judges, galleries, rows, per_image,
                                                                    originals_judged):
                judged, judged_images = measure_judged(judge, first, second, gallery, clusters, config.bootstrap,
                                                       seed, measured if of_originals else None)
                sweep_rows.append({**row, **unjudged, **judged})
                if key is not None:
                    arrays[key] = {**unjudged_images, **judged_images}

        # alpha = 0: the unedited images (for real ones, the projection: what the inversion alone leaks)
        record({"image_set": edit_set.name, "method": "unedited", "alpha": 0.0, "step": 0.0, "change": 0.0,
                "error": ""}, edit_set.originals, edit_set.originals, (edit_set.name, "unedited", 0.0), "unedited")
        if edit_set.targets is not None:
            record({"image_set": edit_set.name, "method": "real image (not projected)", "alpha": 0.0, "step": 0.0,
                    "change": 0.0, "error": ""}, edit_set.targets, edit_set.targets, None, "target")
        for (method, alpha), edit in edits.items():
            row = {"image_set": edit_set.name, "method": method, "alpha": alpha, "step": edit["step"],
                   "change": edit["change"], "error": edit["error"]}
            images = edit["images"]
            record(row, None if images is None else edit_set.originals, images, (edit_set.name, method, alpha),
                   method, alpha)
        examples[edit_set.name] = {"originals": edit_set.originals[:4].numpy(),
                                   "edits": {key: value["images"][:4].numpy() for key, value in edits.items()
                                             if value["images"] is not None}}
        if edit_set.targets is not None:
            examples[edit_set.name]["targets"] = edit_set.targets[:4].numpy()
    sweeps = [pd.DataFrame(sweep_rows) for sweep_rows in rows]
    lap("edits and metrics")

    shown = slice(0, 4)
    grid_channels = ranking[:config.grid_channels]
    samples = {
        "scored": scored_images[shown].numpy(),
        "masks": masks_scored[shown].numpy(),
        "gradient": gradient_maps(generator, codes_scored.select(shown), top[0]).numpy(),
        "channel_edits": {index: render(generator, edit_channels(codes_scored.select(shown), [index],
                                                                 statistics["mean"], 1.0)).numpy()
                          for index in grid_channels},
        "examples": examples,
    }
    lap("figures")
    ablation, ablation_samples = loss_ablation(instruments, config, generator_config, progress)
    lap("ablation")
    views = [Outcome(config, generator_config, generator_info, checks_r, vessels, scores, channels, speed, baselines,
                     sweep, ablation, ablation_samples, samples, seconds, arrays, references_r, controls, projector)
             for checks_r, sweep, arrays, references_r in zip(judged_checks, sweeps, per_image, judged_references)]
    if len(views) == 1:
        return views[0]
    # The outcome shown: the sweep and the instrument checks averaged over the judge seeds (SEs with the seed
    # spread); the claims are decided on every seed's own view and combined.
    return dataclasses.replace(
        views[0], sweep=combine_replicate_tables(sweeps, ["image_set", "method", "alpha"]),
        instruments=combine_replicate_tables(judged_checks, ["instrument", "measure"]), replicates=views)
