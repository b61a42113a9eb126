"""Multi-label image classifiers (GMIA's pathology classifier E_ut and its utility classifiers, paper 3).

GMIA's utility encoder is a multi-label lung-pathology classifier (a DenseNet-121 in the paper) whose penultimate
features enter the utility loss; its utility evaluation trains the same kind of classifier on real, reconstructed
and anonymised training sets and tests each on the real test set. :func:`train_multilabel_classifier` trains one
with a per-label binary cross-entropy (positives weighted by the label's negative / positive ratio, so rare
findings are not ignored), on images normalised by the training set's per-channel statistics, which the returned
:class:`~anonpaper.models.normalization.InputNormalization` wrapper keeps.

Model selection is by the lowest training loss unless a validation set is given (then the best validation macro
AUROC), so classifiers trained on different (e.g. anonymised) training sets can be selected without touching real
held-out images.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from anonpaper.metrics.classification import auroc
from anonpaper.models.normalization import InputNormalization, channel_statistics
from anonpaper.runtime import get_device
from anonpaper.train.loop import TrainResult, TrainSettings, as_image_tensor, batched_forward, fit, labelled_minibatches

MAX_POSITIVE_WEIGHT = 10.0


def _multi_hot(labels: Any, count: int, name: str) -> torch.Tensor:
    array = np.asarray(labels.cpu() if isinstance(labels, torch.Tensor) else labels, dtype=np.float32)
    if array.ndim != 2 or array.shape[0] != count or array.shape[1] < 1:
        raise ValueError(f"{name} must be a (N={count}, K) multi-hot array, got shape {array.shape}")
    if not np.isin(array, (0.0, 1.0)).all():
        raise ValueError(f"{name} must hold only 0 and 1")
    return torch.from_numpy(array)


def macro_auroc(truth: np.ndarray, scores: np.ndarray) -> float:
    """Mean over labels of the binary AUROC, skipping labels with one class only.

    Args:
        truth: (N, K) 0/1 labels.
        scores: (N, K) scores (higher = more likely positive).

    Returns:
        Value in [0, 1] (0.5 = chance; higher is better), NaN when no label has both classes.
    """
    values = [auroc(truth[:, k].astype(np.int64), scores[:, k]) for k in range(truth.shape[1])
              if 0 < truth[:, k].sum() < truth.shape[0]]
    return float(np.mean(values)) if values else float("nan")


def train_multilabel_classifier(model: nn.Module, train: tuple[Any, Any], settings: TrainSettings, *,
                                val: tuple[Any, Any] | None = None,
                                augment: Callable[..., torch.Tensor] | None = None) -> TrainResult:
    """Train a multi-label classifier with per-label weighted binary cross-entropy.

    Args:
        model: Randomly initialised network mapping normalised (N, C, H, W) input to K logits (N, K), e.g.
            :class:`~anonpaper.models.classifiers.SmallCNN` with ``num_classes=K`` (its ``forward_features`` are
            the penultimate features GMIA's utility loss compares).
        train: ``(images, labels)``: uint8 (N, H, W[, C]) or float (N, C, H, W) in [0, 1], and (N, K) 0/1 labels.
        settings: Epochs; batch size (default 32); Adam lr (default 1e-3) and weight decay (default 1e-5); lr
            schedule (default ``"cosine"``: short schedules from scratch otherwise end on a noisy epoch); early
            stopping, seed, device, checkpoint (not used: runs are short), progress, layout (``channels_last``).
        val: Optional ``(images, labels)``; then the best validation macro AUROC selects the epoch.
        augment: ``augment(images, generator) -> images`` on float batches in [0, 1].

    Returns:
        :class:`TrainResult` whose ``model`` is an :class:`InputNormalization` wrapper taking images in [0, 1] and
        returning logits (N, K); its ``forward_features`` returns the wrapped network's penultimate features.
        ``extras`` holds ``pos_weight`` (K,), ``mean`` and ``std``.
    """
    settings.refuse("train_multilabel_classifier", "checkpoint_path")
    settings = settings.with_defaults(batch_size=32, lr=1e-3, weight_decay=1e-5, lr_schedule="cosine")
    images = as_image_tensor(train[0], "train images")
    labels = _multi_hot(train[1], images.shape[0], "train labels")
    if settings.batch_size < 2:
        raise ValueError(f"batch_size must be an integer >= 2, got {settings.batch_size!r}")
    device = get_device(settings.device) if not isinstance(settings.device, torch.device) else settings.device
    positives = labels.sum(dim=0)
    # Weight positives by negatives / positives (capped): a finding in 10 % of images counts as much as its absence.
    pos_weight = ((labels.shape[0] - positives) / positives.clamp(min=1.0)).clamp(1.0, MAX_POSITIVE_WEIGHT)
    mean, std = channel_statistics(images)
    wrapped = InputNormalization(model, mean, std)

    def step(network: nn.Module, batch) -> torch.Tensor:
        batch_images, batch_labels = batch
        return F.binary_cross_entropy_with_logits(network(batch_images).float(), batch_labels,
                                                  pos_weight=pos_weight.to(batch_labels.device))

    evaluate = None
    if val is not None:
        val_images = as_image_tensor(val[0], "val images")
        val_labels = _multi_hot(val[1], val_images.shape[0], "val labels").numpy()

        def evaluate(network: nn.Module) -> dict[str, float]:
            scores = batched_forward(network, val_images, 64, device).float().numpy()
            value = macro_auroc(val_labels, scores)
            return {"val_auroc": value if np.isfinite(value) else 0.0}

    optimizer = torch.optim.Adam(wrapped.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    scheduler = (torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=settings.epochs)
                 if settings.lr_schedule == "cosine" else None)
    count = images.shape[0]
    result = fit(wrapped, batches=labelled_minibatches(images, labels, settings.batch_size, augment), step=step,
                 optimizer=optimizer, epochs=settings.epochs, scheduler=scheduler, evaluate=evaluate,
                 monitor="val_auroc" if val is not None else "train_loss", mode="max" if val is not None else "min",
                 early_stopping_patience=settings.early_stopping_patience, seed=settings.seed, device=device,
                 progress=settings.progress, description="multi-label classifier",
                 batches_per_epoch=count // settings.batch_size + int(count % settings.batch_size >= 2),
                 channels_last=settings.channels_last)
    result.extras.update({"pos_weight": pos_weight, "mean": mean, "std": std})
    return result


@torch.no_grad()
def predict_multilabel(model: nn.Module, images: Any, batch_size: int = 64) -> np.ndarray:
    """Per-label probabilities (sigmoid of the logits), float32 (N, K) in [0, 1], of a trained classifier.

    Args:
        model: A :func:`train_multilabel_classifier` model (takes images in [0, 1]).
        images: uint8 (N, H, W[, C]) or float (N, C, H, W) in [0, 1].
        batch_size: Inference batch size.
    """
    tensor = as_image_tensor(images)
    device = next(model.parameters()).device
    return torch.sigmoid(batched_forward(model, tensor, batch_size, device).float()).numpy().astype(np.float32)
