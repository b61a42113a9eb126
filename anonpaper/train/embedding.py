"""Identity-embedding training with an ArcFace head (GMIA's patient re-identification network E_id).

Validation measures leave-one-out rank-1 identification on held-out images: for every validation image whose
identity appears at least twice, is its nearest other image (cosine similarity of the unit embeddings) of the same
identity? Higher is better; chance is about 1 / (number of identities).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from anonpaper.metrics.identity import rank1_accuracy
from anonpaper.models.embedding import ArcFaceHead
from anonpaper.models.normalization import InputNormalization, channel_statistics
from anonpaper.runtime import content_hash, get_device
from anonpaper.train.loop import (TrainResult, TrainSettings, as_image_tensor, batched_forward, fit,
                                  labelled_minibatches, model_device)


def train_embedding(model: nn.Module, images: Any, identities: Any, settings: TrainSettings, *, s: float = 64.0,
                    m: float = 0.5, val: tuple[Any, Any] | None = None,
                    augment: Callable[..., torch.Tensor] | None = None) -> TrainResult:
    """Train an embedding network with an ArcFace classification head over the training identities.

    Args:
        model: Embedding network (e.g. :class:`anonpaper.models.embedding.EmbeddingNet`) mapping normalised
            (N, C, H, W) input to unit-length embeddings (N, D).
        images: uint8 numpy (N, H, W[, C]) or float tensor (N, C, H, W) in [0, 1].
        identities: Identity labels (N,) of any hashable numpy dtype (ints or strings); at least 2 identities.
        settings: Epochs; mini-batch size (default 32, >= 2); Adam lr (default 1e-3) and weight decay (default
            5e-4) for the network and the head; early stopping, seed, device, checkpoint, progress (as in
            :func:`anonpaper.train.loop.fit`). No lr schedule.
        s, m: ArcFace scale and angular margin (GMIA: 64, 0.5).
        val: Optional ``(images, identities)``; the best epoch maximises ``val_rank1``, otherwise the lowest
            training loss selects.
        augment: ``augment(images, generator) -> images`` on float batches in [0, 1].

    Returns:
        :class:`TrainResult`; ``model`` is an :class:`InputNormalization` wrapper (images in [0, 1]); ``extras``
        holds ``head`` (the trained :class:`ArcFaceHead`) and ``identity_values`` (label of each head row).
    """
    settings.refuse("train_embedding", "lr_schedule", "channels_last")
    settings = settings.with_defaults(batch_size=32, lr=1e-3, weight_decay=5e-4)
    epochs, batch_size, lr, weight_decay = settings.epochs, settings.batch_size, settings.lr, settings.weight_decay
    early_stopping_patience, seed = settings.early_stopping_patience, settings.seed
    device, checkpoint_path, progress = settings.device, settings.checkpoint_path, settings.progress
    image_tensor = as_image_tensor(images)
    identity_array = np.asarray(identities.cpu() if isinstance(identities, torch.Tensor) else identities)
    if identity_array.shape != (image_tensor.shape[0],):
        raise ValueError(f"identities must have shape ({image_tensor.shape[0]},), got {identity_array.shape}")
    identity_values, labels = np.unique(identity_array, return_inverse=True)
    if identity_values.size < 2:
        raise ValueError(f"need at least 2 identities to train an ArcFace head, got {identity_values.size}")
    label_tensor = torch.from_numpy(labels.astype(np.int64))
    if not isinstance(batch_size, int) or batch_size < 2:
        raise ValueError(f"batch_size must be an integer >= 2, got {batch_size!r}")
    device = get_device(device) if not isinstance(device, torch.device) else device
    mean, std = channel_statistics(image_tensor)
    wrapped = InputNormalization(model, mean, std)
    with torch.no_grad():
        was_training = model.training
        model.eval()
        dimension = wrapped.to(model_device(model))(image_tensor[:2].to(model_device(model))).shape[1]
        model.train(was_training)
    # The head is seeded from the run seed so that the whole run is a function of the seed.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        head = ArcFaceHead(int(dimension), int(identity_values.size), s=s, m=m)
    parts = nn.ModuleDict({"model": wrapped, "head": head})
    count = image_tensor.shape[0]
    batches = labelled_minibatches(image_tensor, label_tensor, batch_size, augment)

    def step(network: nn.ModuleDict, batch) -> torch.Tensor:
        batch_images, batch_labels = batch
        logits = network["head"](network["model"](batch_images).float(), batch_labels)
        return F.cross_entropy(logits, batch_labels)

    evaluate = None
    if val is not None:
        val_images = as_image_tensor(val[0], "val images")
        val_identities = np.asarray(val[1].cpu() if isinstance(val[1], torch.Tensor) else val[1])
        if val_identities.shape != (val_images.shape[0],):
            raise ValueError(f"val identities must have shape ({val_images.shape[0]},), got {val_identities.shape}")

        def evaluate(network: nn.ModuleDict) -> dict[str, float]:
            vectors = batched_forward(network["model"], val_images, max(batch_size, 32), device).numpy()
            return {"val_rank1": rank1_accuracy(vectors, val_identities)}

    optimizer = torch.optim.Adam(parts.parameters(), lr=lr, weight_decay=weight_decay)
    # Hashing the data costs a pass over it; only a checkpointed run needs the fingerprint.
    config = None if checkpoint_path is None else {
        "trainer": "embedding", "data": content_hash(image_tensor.numpy(), labels),
        "val": None if val is None else content_hash(val_images.numpy(), val_identities.astype(str)),
        "batch_size": batch_size, "lr": lr, "weight_decay": weight_decay, "s": s, "m": m,
        "augment": type(augment).__name__, "model": type(model).__name__}
    number_of_batches = count // batch_size + int(count % batch_size >= 2)  # batches of one are skipped
    result = fit(parts, batches=batches, step=step, optimizer=optimizer, epochs=epochs, evaluate=evaluate,
                 monitor="val_rank1" if val is not None else "train_loss", mode="max" if val is not None else "min",
                 early_stopping_patience=early_stopping_patience, seed=seed, device=device,
                 checkpoint_path=checkpoint_path, config=config, progress=progress, description="embedding",
                 batches_per_epoch=number_of_batches)
    result.extras.update({"head": parts["head"], "identity_values": identity_values, "mean": mean, "std": std})
    result.model = parts["model"]
    return result


def embed(model: nn.Module, images: Any, batch_size: int = 64, device: str | torch.device | None = None) -> np.ndarray:
    """Embeddings of ``images``.

    Args:
        model: Trained embedding model (a :class:`TrainResult` model takes images in [0, 1]).
        images: uint8 numpy (N, H, W[, C]) or float tensor (N, C, H, W) in [0, 1].
        batch_size: Inference batch size.
        device: Device; None keeps the model's current device.

    Returns:
        float32 array (N, D); rows have L2 norm 1 for :class:`EmbeddingNet`.
    """
    tensor = as_image_tensor(images)
    target = model_device(model) if device is None else (
        get_device(device) if not isinstance(device, torch.device) else device)
    model.to(target)
    return batched_forward(model, tensor, batch_size, target).numpy().astype(np.float32)
