"""Cohort-trained networks that stand in for the papers' pretrained ones, cached across notebooks.

Paper 1 needs a vessel-segmentation U-Net and a hard-exudate U-Net (its domain LPIPS and RROI) and SuperRetina
(FS_SR). No such weights are obtainable offline, so these functions train them on a cohort's train split and
cache the result with :class:`anonpaper.cache.ArtifactCache`, keyed by a description of the cohort (name,
length, hash of its table, phantom config), the training settings and the seed (and, by default, the package
source hash, so a code change retrains). A second call with the same arguments loads the cached weights instead
of training.

Quality is reported on the cohort's val split (patients unseen in training): Dice at threshold 0.5 for the
segmenters, keypoint precision/recall within 3 px for the keypoint detector. Model selection uses the training
loss only, so the val numbers are genuinely held out.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from anonpaper.cache import ArtifactCache
from anonpaper.metrics.segmentation import dice_score
from anonpaper.models.keypoints import KeypointNet, detection_precision_recall
from anonpaper.models.normalization import InputNormalization
from anonpaper.models.unet import UNet
from anonpaper.runtime import content_hash
from anonpaper.train.keypoints import cohort_keypoints, cohort_pairs, train_keypoint_detector
from anonpaper.train.loop import TrainSettings
from anonpaper.train.segmenter import segment, train_segmenter


@dataclass
class PretrainedModel:
    """A cohort-trained network and its held-out quality.

    Attributes:
        model: The network in eval mode on the CPU (segmenters: an :class:`InputNormalization`-wrapped
            :class:`UNet` taking images in [0, 1]; keypoints: a :class:`KeypointNet`).
        val_metrics: Held-out quality on the val split (``{"val_dice": ...}`` for segmenters, higher is better;
            ``{"precision": ..., "recall": ..., "keypoints_per_image": ...}`` for the keypoint detector); NaN
            when the val split is empty.
        history: Per-epoch training history.
        cache_key: The artifact's key in its cache namespace.
        from_cache: True when the weights were loaded rather than trained in this call.
    """

    model: nn.Module
    val_metrics: dict[str, float]
    history: pd.DataFrame
    cache_key: str
    from_cache: bool
    description: dict = field(default_factory=dict)

    @property
    def val_dice(self) -> float:
        """Held-out Dice of a segmenter (KeyError for the keypoint detector)."""
        return self.val_metrics["val_dice"]


def _pretrained_model(model, artifact: dict, cache, description, include_source: bool,
                      from_cache: bool) -> "PretrainedModel":
    """Load a cached artifact's weights into ``model`` (eval mode) and wrap it with its metadata."""
    model.load_state_dict(artifact["state_dict"])
    model.eval()
    return PretrainedModel(model=model, val_metrics=dict(artifact["val_metrics"]),
                           history=pd.DataFrame(artifact["history"]),
                           cache_key=cache.key(description, include_source), from_cache=from_cache,
                           description=description)


def cohort_description(cohort: Any) -> dict:
    """What identifies a cohort's data for caching: name, length, a hash of its table and any phantom config."""
    table = cohort.table
    try:
        table_hash = content_hash(table.to_dict(orient="list"))
    except TypeError:  # exotic cell types: fall back to pandas' own row hashing
        table_hash = content_hash(pd.util.hash_pandas_object(table, index=True).to_numpy())
    config = getattr(cohort, "config", None)
    return {"name": cohort.name, "len": len(cohort), "table": table_hash,
            "config": dataclasses.asdict(config) if dataclasses.is_dataclass(config) else None}


def _split_arrays(cohort: Any, split: str, mask_name: str) -> tuple[np.ndarray, np.ndarray] | None:
    part = cohort.split(split)
    if len(part) == 0:
        return None
    return part.load_images(), part.load_masks(mask_name)


def _trained_segmenter(cohort: Any, mask_name: str, *, base_width: int, depth: int, epochs: int, patch_size: int,
                       patches_per_epoch: int | None, batch_size: int, lr: float, seed: int, progress: bool,
                       device: str | torch.device | None, include_source: bool) -> PretrainedModel:
    if mask_name not in getattr(cohort, "mask_names", ()):
        raise ValueError(f"cohort {cohort.name!r} has no {mask_name!r} mask; its masks: "
                         f"{list(getattr(cohort, 'mask_names', ()))}")
    channels = int(cohort.channels)
    settings = {"mask": mask_name, "base_width": base_width, "depth": depth, "epochs": epochs,
                "patch_size": patch_size, "patches_per_epoch": patches_per_epoch, "batch_size": batch_size,
                "lr": lr, "loss": "bce", "seed": seed, "in_channels": channels}
    description = {"cohort": cohort_description(cohort), "training": settings}
    cache = ArtifactCache(f"{mask_name}-segmenter")

    def build() -> dict:
        train = _split_arrays(cohort, "train", mask_name)
        if train is None:
            raise ValueError(f"cohort {cohort.name!r} has an empty train split")
        network = UNet(channels, 1, base_width=base_width, depth=depth)
        result = train_segmenter(network, train[0], train[1],
                                 TrainSettings(epochs=epochs, batch_size=batch_size, lr=lr, seed=seed,
                                               device=device, progress=progress),
                                 patch_size=patch_size, patches_per_epoch=patches_per_epoch, loss="bce")
        val = _split_arrays(cohort, "val", mask_name)
        val_dice = float("nan") if val is None else dice_score(segment(result.model, val[0]) >= 0.5, val[1])
        return {"state_dict": {key: value.cpu() for key, value in result.model.state_dict().items()},
                "mean": result.extras["mean"], "std": result.extras["std"],
                "unet": {"in_channels": channels, "out_channels": 1, "base_width": base_width, "depth": depth},
                "val_metrics": {"val_dice": val_dice}, "history": result.history.to_dict(orient="list")}

    from_cache = cache.exists(description, include_source)
    artifact = cache.get_or_create(description, build, include_source)
    model = InputNormalization(UNet(**artifact["unet"]), artifact["mean"], artifact["std"])
    return _pretrained_model(model, artifact, cache, description, include_source, from_cache)


def trained_vessel_segmenter(cohort: Any, *, base_width: int = 8, depth: int = 4, epochs: int = 30,
                             patch_size: int = 64, patches_per_epoch: int | None = 384, batch_size: int = 16,
                             lr: float = 3e-3, seed: int = 0, progress: bool = True,
                             device: str | torch.device | None = None,
                             include_source: bool = True) -> PretrainedModel:
    """A vessel-segmentation U-Net trained (plain BCE, random patches) on the cohort's train split, cached.

    Args:
        cohort: A cohort with a ``"vessel"`` mask (e.g. the retina phantom).
        base_width, depth: :class:`UNet` size.
        epochs, patch_size, patches_per_epoch, batch_size, lr: :func:`train_segmenter` settings (patch_size a
            multiple of ``2 ** depth``).
        seed: Training seed.
        progress: Show progress bars while training.
        device: Training device (None: CUDA when available).
        include_source: Key the cache on the package source hash too (a code change retrains).

    Returns:
        :class:`PretrainedModel` with ``val_metrics["val_dice"]`` (threshold 0.5, val split, higher is better).
    """
    return _trained_segmenter(cohort, "vessel", base_width=base_width, depth=depth, epochs=epochs,
                              patch_size=patch_size, patches_per_epoch=patches_per_epoch, batch_size=batch_size,
                              lr=lr, seed=seed, progress=progress, device=device, include_source=include_source)


def trained_segmenter(cohort: Any, mask_name: str, *, base_width: int = 8, depth: int = 4, epochs: int = 30,
                      patch_size: int = 64, patches_per_epoch: int | None = 384, batch_size: int = 16,
                      lr: float = 3e-3, seed: int = 0, progress: bool = True,
                      device: str | torch.device | None = None, include_source: bool = True) -> PretrainedModel:
    """A U-Net for any of the cohort's masks (e.g. ``"lungs"`` on the chest X-ray phantom), trained and cached like
    :func:`trained_vessel_segmenter`."""
    return _trained_segmenter(cohort, mask_name, base_width=base_width, depth=depth, epochs=epochs,
                              patch_size=patch_size, patches_per_epoch=patches_per_epoch, batch_size=batch_size,
                              lr=lr, seed=seed, progress=progress, device=device, include_source=include_source)


def trained_exudate_segmenter(cohort: Any, *, base_width: int = 8, depth: int = 4, epochs: int = 30,
                              patch_size: int = 64, patches_per_epoch: int | None = 384, batch_size: int = 16,
                              lr: float = 3e-3, seed: int = 0, progress: bool = True,
                              device: str | torch.device | None = None,
                              include_source: bool = True) -> PretrainedModel:
    """A hard-exudate U-Net, trained and cached like :func:`trained_vessel_segmenter` (mask ``"hard_exudate"``).

    Exudates are rare (absent in low DR grades), so the val Dice is noisy on small cohorts and is 1.0 when neither
    prediction nor truth has a positive pixel.
    """
    return _trained_segmenter(cohort, "hard_exudate", base_width=base_width, depth=depth, epochs=epochs,
                              patch_size=patch_size, patches_per_epoch=patches_per_epoch, batch_size=batch_size,
                              lr=lr, seed=seed, progress=progress, device=device, include_source=include_source)


def trained_keypoint_detector(cohort: Any, *, base_width: int = 16, depth: int = 3, descriptor_dim: int = 32,
                              epochs: int = 10, batch_size: int = 8, lr: float = 3e-3,
                              cross_acquisition: bool = True, acquisition_strength: float = 1.0,
                              dense_anchors: int = 64, seed: int = 0, progress: bool = True,
                              device: str | torch.device | None = None, include_source: bool = True) -> PretrainedModel:
    """A :class:`KeypointNet` trained on the train split's exact keypoints (:meth:`keypoints` of a phantom), cached.

    Args:
        cohort: A cohort with ``keypoints(i)`` (the retina phantom).
        base_width, depth, descriptor_dim: :class:`KeypointNet` size.
        epochs, batch_size, lr, acquisition_strength, dense_anchors:
            :func:`anonpaper.train.keypoints.train_keypoint_detector` settings.
        cross_acquisition: Train the descriptors on two images of one train patient
            (:func:`anonpaper.train.keypoints.cohort_pairs`) where the cohort can give their poses (the retina
            phantom, not a written copy of it); otherwise on synthetic warps of one image. On the retina phantom
            (128 px, 15 epochs) this raised the same- vs different-patient AUROC of FS_SR from about 0.8 to about
            0.95, and with ``dense_anchors`` 64 to about 0.97-1.0 (benchmarks/train_keypoint_detector.py).
        seed, progress, device, include_source: As in :func:`trained_vessel_segmenter`.

    Returns:
        :class:`PretrainedModel` whose ``val_metrics`` hold keypoint precision, recall (within 3 px, default
        detection settings; higher is better) and keypoints per image on the val split.
    """
    if not callable(getattr(cohort, "keypoints", None)):
        raise ValueError(f"cohort {cohort.name!r} has no exact keypoints (keypoints(i)); use a retina phantom")
    channels = int(cohort.channels)
    cross_acquisition = bool(cross_acquisition) and callable(getattr(cohort, "rendered", None))
    settings = {"base_width": base_width, "depth": depth, "descriptor_dim": descriptor_dim, "epochs": epochs,
                "batch_size": batch_size, "lr": lr, "seed": seed, "in_channels": channels,
                "cross_acquisition": cross_acquisition, "acquisition_strength": acquisition_strength,
                "dense_anchors": dense_anchors}
    description = {"cohort": cohort_description(cohort), "training": settings}
    cache = ArtifactCache("keypoint-detector")

    def build() -> dict:
        train = cohort.split("train")
        if len(train) == 0:
            raise ValueError(f"cohort {cohort.name!r} has an empty train split")
        network = KeypointNet(channels, descriptor_dim=descriptor_dim, base_width=base_width, depth=depth)
        pair_options = {}
        if cross_acquisition:
            pairs, transforms = cohort_pairs(train)
            if len(pairs):
                pair_options = {"pairs": pairs, "pair_transforms": transforms}
        result = train_keypoint_detector(network, train.load_images(), cohort_keypoints(train),
                                         TrainSettings(epochs=epochs, batch_size=batch_size, lr=lr, seed=seed,
                                                       device=device, progress=progress),
                                         acquisition_strength=acquisition_strength, dense_anchors=dense_anchors,
                                         **pair_options)
        val = cohort.split("val")
        metrics = ({"precision": float("nan"), "recall": float("nan"), "keypoints_per_image": float("nan")}
                   if len(val) == 0 else
                   detection_precision_recall(result.model, val.load_images(), cohort_keypoints(val)))
        return {"state_dict": {key: value.cpu() for key, value in result.model.state_dict().items()},
                "config": network.config, "val_metrics": metrics, "history": result.history.to_dict(orient="list")}

    from_cache = cache.exists(description, include_source)
    artifact = cache.get_or_create(description, build, include_source)
    model = KeypointNet(**artifact["config"])
    return _pretrained_model(model, artifact, cache, description, include_source, from_cache)
