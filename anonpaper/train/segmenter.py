"""Patch-based binary segmenter training (FR-UNet recipe of paper 2), full-image inference and FR-UNet's
dual-threshold post-processing.

Training follows FR-UNet (Liu et al., IEEE J. Biomed. Health Inform. 2022): patches (48 x 48 with stride 6 in FR-UNet; random patches are the
cheaper alternative), BCE (optionally + soft Dice), Adam lr 1e-4 weight decay 1e-5, cosine schedule.
Patches are gathered from coordinates on the fly, so a dense stride never materialises every patch in memory.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
from scipy import ndimage
from torch import nn
from torch.nn import functional as F

from anonpaper.metrics.segmentation import dice_score
from anonpaper.models.normalization import InputNormalization, channel_statistics
from anonpaper.runtime import content_hash, get_device
from anonpaper.train.loop import TrainResult, TrainSettings, as_image_tensor, autocast_context, fit, model_device


def dual_threshold(probability: Any, high: float = 0.5, low: float = 0.3, connectivity: int = 8) -> np.ndarray:
    """FR-UNet's dual-threshold (hysteresis) post-processing.

    Pixels with ``probability >= high`` are kept; pixels with ``low <= probability < high`` are kept when their
    connected component of ``probability >= low`` contains a kept pixel (8-connected by default).

    Args:
        probability: Float array (H, W) or (N, H, W) in [0, 1]; each image is processed separately.
        high: Seed threshold (0.5 in FR-UNet).
        low: Lower threshold (0.3 in FR-UNet), ``low <= high``.
        connectivity: 8 (FR-UNet) or 4 (scikit-image's ``apply_hysteresis_threshold`` convention).

    Returns:
        Boolean array of the input's shape.
    """
    array = np.asarray(probability.cpu() if isinstance(probability, torch.Tensor) else probability)
    if array.ndim not in (2, 3):
        raise ValueError(f"dual_threshold expects (H, W) or (N, H, W), got shape {array.shape}")
    if not low <= high:
        raise ValueError(f"need low <= high, got low={low}, high={high}")
    if connectivity not in (4, 8):
        raise ValueError(f"connectivity must be 4 or 8, got {connectivity!r}")
    structure = ndimage.generate_binary_structure(2, 2 if connectivity == 8 else 1)
    images = array[None] if array.ndim == 2 else array
    output = np.zeros(images.shape, dtype=bool)
    for index, image in enumerate(images):
        candidate = image >= low
        labels, number = ndimage.label(candidate, structure=structure)
        seeded = np.zeros(number + 1, dtype=bool)
        seeded[np.unique(labels[image >= high])] = True
        seeded[0] = False
        output[index] = seeded[labels]
    return output[0] if array.ndim == 2 else output


def _mask_tensor(masks: Any, count: int, size: tuple[int, int]) -> torch.Tensor:
    array = np.asarray(masks.cpu() if isinstance(masks, torch.Tensor) else masks)
    if array.shape != (count, *size):
        raise ValueError(f"masks must have shape {(count, *size)} to match the images, got {array.shape}")
    if not np.all((array == 0) | (array == 1)):
        raise ValueError("masks must be binary (bool or values in {0, 1})")
    return torch.from_numpy(array.astype(np.float32))


def _patch_grid(count: int, height: int, width: int, patch: int, stride: int) -> torch.Tensor:
    """All (image, top, left) patch positions on a grid with ``stride``, plus the last row/column position."""
    tops = list(range(0, height - patch + 1, stride))
    lefts = list(range(0, width - patch + 1, stride))
    if tops[-1] != height - patch:
        tops.append(height - patch)
    if lefts[-1] != width - patch:
        lefts.append(width - patch)
    image_index, top, left = torch.meshgrid(torch.arange(count), torch.tensor(tops), torch.tensor(lefts),
                                            indexing="ij")
    return torch.stack([image_index.reshape(-1), top.reshape(-1), left.reshape(-1)], dim=1)


def soft_dice_loss(logits: torch.Tensor, target: torch.Tensor, smooth: float = 1.0) -> torch.Tensor:
    """``1 - (2 sum(p t) + smooth) / (sum p + sum t + smooth)`` over the batch, p = sigmoid(logits); lower is better."""
    probability = torch.sigmoid(logits.float())
    intersection = (probability * target).sum()
    return 1.0 - (2.0 * intersection + smooth) / (probability.sum() + target.sum() + smooth)


def train_segmenter(model: nn.Module, images: Any, masks: Any, settings: TrainSettings, *,
                    patch_size: int | None = 48, stride: int | None = None, patches_per_epoch: int | None = None,
                    loss: str = "bce", val: tuple[Any, Any] | None = None,
                    augment: Callable[..., Any] | None = None) -> TrainResult:
    """Train a binary segmenter (one logit channel) on patches.

    Args:
        model: Network mapping normalised (N, C, p, p) input to logits (N, 1, p, p), e.g.
            :class:`anonpaper.models.unet.UNet` or :class:`anonpaper.models.frunet.FRUNet`.
        images: uint8 numpy (N, H, W[, C]) or float tensor (N, C, H, W) in [0, 1].
        masks: Binary masks (N, H, W) (bool or {0, 1}).
        settings: Epochs; patches per batch (default 32, >= 2); Adam lr and weight decay (FR-UNet: 1e-4, 1e-5,
            the defaults); lr schedule (default ``"cosine"`` annealing over the epochs, as FR-UNet; ``"constant"``);
            early-stopping patience, seed, device, checkpoint, progress (as in :func:`anonpaper.train.loop.fit`).
        patch_size: Side of the square training patches (a multiple of the model's ``size_multiple``); None
            trains on whole images.
        stride: Grid stride of the patches (FR-UNet: 6); None draws random patch positions instead.
        patches_per_epoch: Patches per epoch. With ``stride``, a random subset of the grid of that size (None: the
            whole grid); without, the number of random patches (None: as many as tile the images once).
        loss: ``"bce"`` or ``"bce+dice"`` (BCE plus :func:`soft_dice_loss`).
        val: Optional ``(images, masks)`` for full-image validation; the best epoch is the one with the highest
            ``val_dice`` (threshold 0.5). Without it the lowest training loss selects.
        augment: ``augment(images, generator, masks) -> (images, masks)`` on patches, e.g.
            :class:`anonpaper.train.augment.FlipShiftScaleRotate`.

    Returns:
        :class:`TrainResult` with ``model`` an :class:`InputNormalization` wrapper (images in [0, 1]).
    """
    settings.refuse("train_segmenter", "channels_last")
    settings = settings.with_defaults(batch_size=32, lr=1e-4, weight_decay=1e-5, lr_schedule="cosine")
    epochs, batch_size, lr, weight_decay = settings.epochs, settings.batch_size, settings.lr, settings.weight_decay
    scheduler = "cosine" if settings.lr_schedule == "cosine" else None
    early_stopping_patience, seed = settings.early_stopping_patience, settings.seed
    device, checkpoint_path, progress = settings.device, settings.checkpoint_path, settings.progress
    image_tensor = as_image_tensor(images)
    count, _, height, width = image_tensor.shape
    mask_tensor = _mask_tensor(masks, count, (height, width))
    multiple = getattr(model, "size_multiple", 1)
    if patch_size is not None:
        if not isinstance(patch_size, int) or patch_size < 1 or patch_size > min(height, width):
            raise ValueError(f"patch_size must be an integer in [1, {min(height, width)}], got {patch_size!r}")
        if patch_size % multiple:
            raise ValueError(f"patch_size {patch_size} must be a multiple of the model's size_multiple {multiple}")
    elif height % multiple or width % multiple:
        raise ValueError(f"whole-image training needs H, W divisible by {multiple}, got {height}x{width}")
    if stride is not None and (not isinstance(stride, int) or stride < 1 or patch_size is None):
        raise ValueError(f"stride must be a positive integer and needs a patch_size, got stride={stride!r}")
    if loss not in ("bce", "bce+dice"):
        raise ValueError(f"loss must be 'bce' or 'bce+dice', got {loss!r}")
    if scheduler not in ("cosine", None):
        raise ValueError(f"scheduler must be 'cosine' or None, got {scheduler!r}")
    if not isinstance(batch_size, int) or batch_size < 2:
        raise ValueError(f"batch_size must be an integer >= 2, got {batch_size!r}")
    device = get_device(device) if not isinstance(device, torch.device) else device

    mean, std = channel_statistics(image_tensor)
    wrapped = InputNormalization(model, mean, std)
    patch = patch_size or height
    grid = _patch_grid(count, height, width, patch, stride) if stride is not None else None
    if patches_per_epoch is None:
        patches_per_epoch = grid.shape[0] if grid is not None else count * max(1, (height // patch) * (width // patch))
    if not isinstance(patches_per_epoch, int) or patches_per_epoch < 2:
        raise ValueError(f"patches_per_epoch must be an integer >= 2, got {patches_per_epoch!r}")

    def positions(generator: torch.Generator) -> torch.Tensor:
        if patch_size is None:
            return torch.stack([torch.randperm(count, generator=generator), torch.zeros(count, dtype=torch.long),
                                torch.zeros(count, dtype=torch.long)], dim=1)
        if grid is not None:
            return grid[torch.randperm(grid.shape[0], generator=generator)[:patches_per_epoch]]
        index = torch.randint(0, count, (patches_per_epoch,), generator=generator)
        top = torch.randint(0, height - patch + 1, (patches_per_epoch,), generator=generator)
        left = torch.randint(0, width - patch + 1, (patches_per_epoch,), generator=generator)
        return torch.stack([index, top, left], dim=1)

    def batches(epoch: int, generator: torch.Generator):
        chosen = positions(generator)
        for start in range(0, chosen.shape[0], batch_size):
            rows = chosen[start:start + batch_size]
            if rows.shape[0] < 2:
                continue
            batch_images = torch.stack([image_tensor[i, :, t:t + patch, l:l + patch] for i, t, l in rows.tolist()])
            batch_masks = torch.stack([mask_tensor[i, t:t + patch, l:l + patch] for i, t, l in rows.tolist()])
            if augment is not None:
                batch_images, batch_masks = augment(batch_images, generator, batch_masks)
            yield batch_images, batch_masks

    def step(network: nn.Module, batch) -> torch.Tensor:
        batch_images, batch_masks = batch
        logits = network(batch_images)[:, 0]
        value = F.binary_cross_entropy_with_logits(logits.float(), batch_masks)
        if loss == "bce+dice":
            value = value + soft_dice_loss(logits, batch_masks)
        return value

    evaluate = None
    if val is not None:
        val_images = as_image_tensor(val[0], "val images")
        val_masks = _mask_tensor(val[1], val_images.shape[0], tuple(val_images.shape[-2:]))

        def evaluate(network: nn.Module) -> dict[str, float]:
            probability = segment(network, val_images, batch_size=4, device=device)
            return {"val_dice": dice_score(probability >= 0.5, val_masks.numpy())}

    optimizer = torch.optim.Adam(wrapped.parameters(), lr=lr, weight_decay=weight_decay)
    lr_scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs) if scheduler else None
    # Hashing the data costs a pass over it; only a checkpointed run needs the fingerprint.
    config = None if checkpoint_path is None else {
        "trainer": "segmenter", "data": content_hash(image_tensor.numpy(), mask_tensor.numpy()),
        "val": None if val is None else content_hash(val_images.numpy(), val_masks.numpy()),
        "patch": patch_size, "stride": stride, "patches": patches_per_epoch, "batch_size": batch_size,
        "lr": lr, "weight_decay": weight_decay, "loss": loss, "scheduler": scheduler,
        "augment": type(augment).__name__, "model": type(model).__name__}
    per_epoch = patches_per_epoch if patch_size is not None else count
    number_of_batches = per_epoch // batch_size + int(per_epoch % batch_size >= 2)
    result = fit(wrapped, batches=batches, step=step, optimizer=optimizer, epochs=epochs, scheduler=lr_scheduler,
                 evaluate=evaluate, monitor="val_dice" if val is not None else "train_loss",
                 mode="max" if val is not None else "min", early_stopping_patience=early_stopping_patience,
                 seed=seed, device=device, checkpoint_path=checkpoint_path, config=config, progress=progress,
                 description="segmenter",
                 batches_per_epoch=number_of_batches)
    result.extras.update({"mean": mean, "std": std})
    return result


def segment(model: nn.Module, images: Any, batch_size: int = 8,
            device: str | torch.device | None = None) -> np.ndarray:
    """Full-image foreground probabilities of a binary segmenter.

    Images are reflect-padded to the model's ``size_multiple`` and the output cropped back.

    Args:
        model: Trained segmenter (a :class:`TrainResult` model takes images in [0, 1]).
        images: uint8 numpy (N, H, W[, C]) or float tensor (N, C, H, W) in [0, 1].
        batch_size: Inference batch size.
        device: Device; None keeps the model's current device.

    Returns:
        float32 array (N, H, W) in [0, 1] (sigmoid of the first logit channel).
    """
    tensor = as_image_tensor(images)
    target = model_device(model) if device is None else (
        get_device(device) if not isinstance(device, torch.device) else device)
    model.to(target)
    multiple = getattr(model, "size_multiple", 1)
    height, width = tensor.shape[-2:]
    pad_bottom, pad_right = (-height) % multiple, (-width) % multiple
    was_training = model.training
    model.eval()
    outputs = []
    try:
        with torch.no_grad(), autocast_context(target):
            for start in range(0, tensor.shape[0], batch_size):
                batch = tensor[start:start + batch_size].to(target)
                if pad_bottom or pad_right:
                    mode = "reflect" if pad_bottom < height and pad_right < width else "replicate"
                    batch = F.pad(batch, (0, pad_right, 0, pad_bottom), mode=mode)
                logits = model(batch)[:, 0, :height, :width]
                outputs.append(torch.sigmoid(logits.float()).cpu())
    finally:
        model.train(was_training)
    return torch.cat(outputs).numpy().astype(np.float32)
