"""Classifier training as in paper 2: Adam (lr 1e-4, weight decay 1e-5), cross-entropy or class-weighted focal
loss, model selection on validation macro-F1, early stopping; images normalised by the training set's per-channel
mean and standard deviation, which are stored with the model (:class:`InputNormalization`).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
from sklearn.metrics import f1_score
from torch import nn
from torch.nn import functional as F

from anonpaper.models.classifiers import FocalLoss, balanced_class_weights
from anonpaper.models.normalization import InputNormalization, channel_statistics
from anonpaper.runtime import content_hash, get_device
from anonpaper.train.distributed import default_device
from anonpaper.train.loop import (TrainResult, TrainSettings, as_image_tensor, as_label_tensor, batched_forward, fit,
                                  labelled_minibatches,
                                  model_device)


def _number_of_outputs(model: nn.Module, sample: torch.Tensor) -> int:
    was_training = model.training
    model.eval()
    with torch.no_grad():
        outputs = model(sample.to(model_device(model)))
    model.train(was_training)
    if outputs.ndim != 2:
        raise ValueError(f"classifier must return logits (N, num_classes), got shape {tuple(outputs.shape)}")
    return int(outputs.shape[1])


def train_classifier(model: nn.Module, train: tuple[Any, Any], val: tuple[Any, Any], settings: TrainSettings, *,
                     loss: str = "ce", focal_gamma: float = 0.6, class_weights: str | None | torch.Tensor = "balanced",
                     augment: Callable[..., torch.Tensor] | None = None) -> TrainResult:
    """Train a classifier; keep the epoch with the best validation macro-F1.

    Args:
        model: Randomly initialised classifier (e.g. from :func:`anonpaper.models.classifiers.build_classifier`)
            mapping normalised (N, C, H, W) float input to logits (N, K).
        train: ``(images, labels)``; images uint8 numpy (N, H, W[, C]) or float tensor (N, C, H, W) in [0, 1];
            labels integers (N,) in [0, K).
        val: Validation ``(images, labels)`` in the same format.
        settings: Epochs, batch size (required; a final batch of one image is dropped: BatchNorm cannot train on
            it), Adam lr (default 1e-4) and weight decay (default 1e-5), lr schedule (default ``"constant"``, paper
            2's Adam at a fixed rate; ``"cosine"`` anneals to 0 over the epochs: from scratch on a few hundred
            images a constant 1e-3 leaves the last epochs' weights and BatchNorm statistics jumping between good
            and poor validation scores), early-stopping patience on validation F1, seed, device, checkpoint,
            progress, layout (``channels_last``).
        loss: ``"ce"`` (cross-entropy) or ``"focal"`` (:class:`FocalLoss` with ``focal_gamma``).
        focal_gamma: Focal-loss gamma (paper 2: 0.6 for DR grading).
        class_weights: ``"balanced"`` (scikit-learn's n / (K n_c) from the training labels), None (unweighted) or
            a tensor (K,). Applied to either loss.
        augment: ``augment(images, generator) -> images`` on float (B, C, H, W) batches in [0, 1], e.g.
            :func:`anonpaper.train.augment.paper2_augmentation`.

    Returns:
        :class:`TrainResult` whose ``model`` is an :class:`InputNormalization` wrapper (taking images in [0, 1])
        around ``model`` with the best weights; history columns ``train_loss``, ``val_loss``, ``val_f1`` (macro,
        higher is better), ``val_accuracy``; ``extras`` holds ``class_weights``, ``mean`` and ``std``.
    """
    settings = settings.with_defaults(lr=1e-4, weight_decay=1e-5, lr_schedule="constant")
    epochs, batch_size, lr, weight_decay = settings.epochs, settings.batch_size, settings.lr, settings.weight_decay
    lr_schedule, early_stopping_patience, seed = settings.lr_schedule, settings.early_stopping_patience, settings.seed
    device, checkpoint_path, progress = settings.device, settings.checkpoint_path, settings.progress
    train_images = as_image_tensor(train[0], "train images")
    train_labels = as_label_tensor(train[1], train_images.shape[0], "train labels")
    val_images = as_image_tensor(val[0], "val images")
    val_labels = as_label_tensor(val[1], val_images.shape[0], "val labels")
    if val_images.shape[1:] != train_images.shape[1:]:
        raise ValueError(f"val images {tuple(val_images.shape[1:])} differ from train images "
                         f"{tuple(train_images.shape[1:])} in (C, H, W)")
    if not isinstance(batch_size, int) or batch_size < 2:
        raise ValueError(f"batch_size must be an integer >= 2, got {batch_size!r}")
    if loss not in ("ce", "focal"):
        raise ValueError(f"loss must be 'ce' or 'focal', got {loss!r}")
    if lr_schedule not in ("constant", "cosine"):
        raise ValueError(f"lr_schedule must be 'constant' or 'cosine', got {lr_schedule!r}")
    device = default_device(device)
    num_classes = _number_of_outputs(model, train_images[:2])
    for name, labels in (("train", train_labels), ("val", val_labels)):
        if labels.min() < 0 or labels.max() >= num_classes:
            raise ValueError(f"{name} labels must lie in [0, {num_classes}) for a model with {num_classes} outputs, "
                             f"got [{labels.min().item()}, {labels.max().item()}]")
    if isinstance(class_weights, str):
        if class_weights != "balanced":
            raise ValueError(f"class_weights must be 'balanced', None or a tensor, got {class_weights!r}")
        weights = balanced_class_weights(train_labels, num_classes)
    elif class_weights is None:
        weights = None
    else:
        weights = torch.as_tensor(class_weights, dtype=torch.float32).reshape(-1)
        if weights.numel() != num_classes:
            raise ValueError(f"class_weights has {weights.numel()} entries, the model has {num_classes} outputs")
    criterion = FocalLoss(focal_gamma if loss == "focal" else 0.0, weights)

    mean, std = channel_statistics(train_images)
    wrapped = InputNormalization(model, mean, std)
    count = train_images.shape[0]
    batches = labelled_minibatches(train_images, train_labels, batch_size, augment, device)

    def step(network: nn.Module, batch) -> torch.Tensor:
        images, labels = batch
        return criterion(network(images), labels)

    def evaluate(network: nn.Module) -> dict[str, float]:
        logits = batched_forward(network, val_images, max(batch_size, 32), device)
        predictions = logits.argmax(dim=1).numpy()
        truth = val_labels.numpy()
        return {"val_loss": float(criterion(logits, val_labels)),
                "val_f1": float(f1_score(truth, predictions, average="macro", zero_division=0)),
                "val_accuracy": float(np.mean(predictions == truth))}

    optimizer = torch.optim.Adam(wrapped.parameters(), lr=lr, weight_decay=weight_decay)
    scheduler = (torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
                 if lr_schedule == "cosine" else None)
    # Hashing the data costs a pass over it; only a checkpointed run needs the fingerprint.
    config = None if checkpoint_path is None else {
        "trainer": "classifier", "train": content_hash(train_images.numpy(), train_labels.numpy()),
        "val": content_hash(val_images.numpy(), val_labels.numpy()), "batch_size": batch_size, "lr": lr,
        "weight_decay": weight_decay, "loss": loss, "gamma": focal_gamma,
        "weights": None if weights is None else weights.tolist(), "augment": repr(type(augment).__name__),
        "model": type(model).__name__}
    if config is not None and lr_schedule != "constant":
        config["lr_schedule"] = lr_schedule  # only a new option enters the hash: older checkpoints stay valid
    if config is not None and settings.channels_last:
        config["channels_last"] = True  # other floats: a checkpoint of the default layout is not resumed
    number_of_batches = count // batch_size + int(count % batch_size >= 2)  # batches of one are skipped
    result = fit(wrapped, batches=batches, step=step, optimizer=optimizer, epochs=epochs, scheduler=scheduler,
                 evaluate=evaluate,
                 monitor="val_f1", mode="max", early_stopping_patience=early_stopping_patience, seed=seed,
                 device=device, checkpoint_path=checkpoint_path, config=config, progress=progress,
                 description="classifier", batches_per_epoch=number_of_batches,
                 channels_last=settings.channels_last)
    result.extras.update({"class_weights": weights, "mean": mean, "std": std, "num_classes": num_classes})
    return result


def predict_proba(model: nn.Module, images: Any, batch_size: int = 64,
                  device: str | torch.device | None = None) -> np.ndarray:
    """Class probabilities of a trained classifier.

    Args:
        model: A trained model; a :class:`TrainResult` model normalises internally, so images go in as [0, 1].
        images: uint8 numpy (N, H, W[, C]) or float tensor (N, C, H, W) in [0, 1].
        batch_size: Inference batch size.
        device: Device to run on; None keeps the model's current device.

    Returns:
        float32 array (N, K), rows summing to 1 (softmax of the logits).
    """
    tensor = as_image_tensor(images)
    target = model_device(model) if device is None else (
        get_device(device) if not isinstance(device, torch.device) else device)
    model.to(target)
    logits = batched_forward(model, tensor, batch_size, target)
    return F.softmax(logits, dim=1).numpy().astype(np.float32)
