"""The generic training loop shared by the classifier, segmenter and embedding trainers.

:func:`fit` runs epochs of ``step`` over the batches that ``batches(epoch, generator)`` yields, evaluates after
every epoch, keeps the best weights by a monitored value, stops early on a plateau, and writes a checkpoint
(:mod:`anonpaper.train.checkpoint`) after every epoch.

Determinism and exact resume: at the start of every epoch the loop derives a seed from ``(seed, epoch)``, builds a
fresh ``torch.Generator`` from it for the data order and augmentation, and reseeds PyTorch's global generator
(used by dropout) from it. An epoch's randomness therefore depends only on the seed and the epoch index, so a run
resumed from the checkpoint after epoch ``e`` reproduces the uninterrupted run bit for bit on CPU. On CUDA the
loop runs the forward pass under ``torch.autocast`` (bfloat16 where supported, else float16 with a GradScaler)
with the model and 4-D inputs in channels-last layout; on CPU it runs in float32 without autocast, in the default
layout.

The hot path waits for nothing: batches go to the GPU from pinned memory without blocking, the loss is summed on
the device (in float64, as Python's float sum did) and read once per epoch (and at most once a second for the
progress bar), so the host queues the next step while the GPU runs this one. A non-finite loss is therefore
reported at the end of its epoch (before that epoch's checkpoint), not at its step.

Several processes (``torchrun``, :mod:`anonpaper.train.distributed`): ``batches`` yields the global batch on
every process (the epoch seed is shared); each process trains on its rows (``rank::world``, as
``DistributedSampler`` assigns them), weights its loss by its share of the batch, and the gradients are summed
over processes before the optimiser step, which is thus the step of the global batch's mean loss. BatchNorm layers
normalise each process's share; their running statistics are averaged over processes at the end of every epoch.
The epoch's values (evaluation, monitor) are rank 0's, broadcast to all; rank 0 writes the checkpoint. A run
resumes from its checkpoint on any number of processes. A loss that is not a mean over samples (e.g. a
class-weighted mean, normalised by the weights of the batch, or a Dice loss over the batch) is reproduced only
approximately by the weighting, and a ``step`` that updates parameters itself (an inner optimiser, as the
disentanglement trainer's discriminator) does so on each process's share without synchronisation.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd
import torch
from torch import nn

from anonpaper.runtime import capture_rng_state, content_hash, restore_rng_state
from anonpaper.train.checkpoint import load_checkpoint, save_checkpoint
from anonpaper.train.distributed import (all_reduce_gradients, all_reduce_sum, average_buffers, batch_length,
                                         broadcast_object, default_device, rank_and_world, select_rows, shard_rows)

CHECKPOINT_FORMAT = "anonpaper.fit/1"


@dataclass(frozen=True)
class TrainSettings:
    """The options every trainer of the package takes (task-specific ones stay keyword arguments of the trainer).

    A field left None takes the trainer's own default (its paper's recipe), which the trainer fills in with
    :meth:`with_defaults`; a trainer refuses a field it has no use for.

    Attributes:
        epochs: Maximum epochs (>= 1).
        batch_size: Mini-batch size.
        lr: Adam learning rate.
        weight_decay: Adam weight decay.
        lr_schedule: ``"constant"`` or ``"cosine"`` (annealing to 0 over ``epochs``).
        early_stopping_patience: Epochs without a better monitored value before stopping (None: all epochs).
        seed: Seed of the run (data order, augmentation, dropout).
        device: Training device; None picks CUDA when available.
        checkpoint_path: Per-epoch checkpoint; a run resumes from it when present.
        progress: Show progress bars.
        channels_last: Train in channels-last layout (model and 4-D inputs); None: on CUDA only, as :func:`fit`.
            On a CPU, oneDNN's channels-last convolutions train a ResNet faster (benchmarks/bench_train_loop.py
            ``--channels-last``) but round differently from the default layout, so a trainer takes it only when
            asked and a cache key that depends on the floats must name it.

    Example:
        >>> settings = TrainSettings(epochs=3, lr=1e-2).with_defaults(lr=1e-4, batch_size=32)
        >>> settings.lr, settings.batch_size
        (0.01, 32)
    """

    epochs: int
    batch_size: int | None = None
    lr: float | None = None
    weight_decay: float | None = None
    lr_schedule: str | None = None
    early_stopping_patience: int | None = None
    seed: int = 0
    device: Any = None
    checkpoint_path: str | Path | None = None
    progress: bool = True
    channels_last: bool | None = None

    def __post_init__(self) -> None:
        if isinstance(self.epochs, bool) or not isinstance(self.epochs, int) or self.epochs < 0:
            raise ValueError(f"epochs must be a non-negative integer, got {self.epochs!r}")
        if self.lr_schedule not in (None, "constant", "cosine"):
            raise ValueError(f"lr_schedule must be 'constant' or 'cosine', got {self.lr_schedule!r}")
        if self.channels_last is not None and not isinstance(self.channels_last, bool):
            raise ValueError(f"channels_last must be True, False or None, got {self.channels_last!r}")

    def with_defaults(self, **defaults: Any) -> "TrainSettings":
        """A copy whose None fields named in ``defaults`` take those values."""
        import dataclasses

        return dataclasses.replace(self, **{name: value for name, value in defaults.items()
                                            if getattr(self, name) is None})

    def refuse(self, trainer: str, *names: str) -> None:
        """ValueError when a field the trainer has no use for is set."""
        used = [name for name in names if getattr(self, name) is not None]
        if used:
            raise ValueError(f"{trainer} does not use {', '.join(used)} (leave it None)")


@dataclass
class TrainResult:
    """What a training run returns.

    Attributes:
        model: The trained model holding the best weights (by ``monitor``), in eval mode, on the training device.
        history: One row per epoch: ``epoch`` (1-based), ``train_loss``, every value returned by the evaluation,
            ``lr`` and ``seconds``.
        best_epoch: 1-based epoch whose weights ``model`` holds.
        best_score: The monitored value at ``best_epoch``.
        monitor: Name of the monitored column and ``mode`` ("max" or "min").
        stopped_early: True when early stopping ended the run before ``epochs``.
        extras: Trainer-specific objects (e.g. the ArcFace head, normalisation statistics).
    """

    model: nn.Module
    history: pd.DataFrame
    best_epoch: int
    best_score: float
    monitor: str
    mode: str
    stopped_early: bool
    extras: dict[str, Any] = field(default_factory=dict)


def epoch_seed(seed: int, epoch: int) -> int:
    """The seed of epoch ``epoch`` (0-based) of a run with seed ``seed`` (a stable 63-bit integer)."""
    return int(content_hash({"seed": int(seed), "epoch": int(epoch)}), 16) % (2**63 - 1)


def move_to_device(batch: Any, device: torch.device, channels_last: bool = False) -> Any:
    """Move every tensor in a (nested) tuple/list/dict batch to ``device``.

    CPU tensors bound for CUDA go through pinned memory without blocking the host. With ``channels_last``, 4-D
    floating-point tensors (images) come out in channels-last layout (same values).
    """
    if isinstance(batch, torch.Tensor):
        if device.type == "cuda" and batch.device.type == "cpu" and not batch.is_pinned():
            batch = batch.pin_memory()
        batch = batch.to(device, non_blocking=True)
        if channels_last and batch.ndim == 4 and batch.is_floating_point():
            batch = batch.contiguous(memory_format=torch.channels_last)
        return batch
    if isinstance(batch, (list, tuple)):
        return type(batch)(move_to_device(item, device, channels_last) for item in batch)
    if isinstance(batch, dict):
        return {key: move_to_device(value, device, channels_last) for key, value in batch.items()}
    return batch


def autocast_context(device: torch.device, enabled: bool = True):
    """``torch.autocast`` on CUDA (bfloat16 if supported, else float16); a no-op context on CPU."""
    if enabled and device.type == "cuda":
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.autocast(device_type="cuda", dtype=dtype)
    return contextlib.nullcontext()


def _state_to_cpu(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {key: value.detach().to("cpu", copy=True) for key, value in state.items()}


def _is_better(score: float, best: float | None, mode: str) -> bool:
    if score is None or (isinstance(score, float) and math.isnan(score)):
        return False
    if best is None:
        return True
    return score > best if mode == "max" else score < best


def fit(model: nn.Module, *, batches: Callable[[int, torch.Generator], Iterable[Any]],
        step: Callable[[nn.Module, Any], torch.Tensor], optimizer: torch.optim.Optimizer, epochs: int,
        scheduler: Any = None, evaluate: Callable[[nn.Module], dict[str, float]] | None = None,
        monitor: str = "train_loss", mode: str = "min", early_stopping_patience: int | None = None,
        seed: int = 0, device: str | torch.device | None = None, checkpoint_path: str | Path | None = None,
        config: Any = None, progress: bool = True, description: str = "train", amp: bool = True,
        max_grad_norm: float | None = None, batches_per_epoch: int | None = None,
        on_epoch_end: Callable[[int, dict[str, float]], None] | None = None,
        channels_last: bool | None = None) -> TrainResult:
    """Train ``model`` for up to ``epochs`` epochs; return it holding the best weights.

    Args:
        model: The network (may be an ``nn.ModuleDict`` holding several trained parts). Moved to ``device``.
        batches: ``batches(epoch, generator)`` yields the training batches of 0-based epoch ``epoch``; all its
            randomness must come from ``generator`` (a CPU ``torch.Generator``). Tensors in a batch are moved to
            the device by the loop; their first dimension is the batch (several processes split it).
        step: ``step(model, batch) -> loss`` (a scalar tensor, a mean over the batch); the loop does zero_grad,
            backward and the optimiser step.
        optimizer: Optimiser over the model's parameters (parameters keep their identity when moved).
        epochs: Maximum number of epochs (>= 1).
        scheduler: Optional learning-rate scheduler, stepped once per epoch.
        evaluate: ``evaluate(model) -> {name: value}``, called in eval mode under ``torch.no_grad`` after every
            epoch; its values become history columns.
        monitor: Column that selects the best epoch (``"train_loss"`` or a key of ``evaluate``'s result).
        mode: ``"max"`` if a higher monitored value is better, ``"min"`` if lower is better.
        early_stopping_patience: Stop after this many epochs without improvement of ``monitor``; None never stops.
        seed: Run seed (non-negative int); epoch seeds derive from it (see module docstring).
        device: Device string/object; None: this process's GPU under torchrun, else
            :func:`anonpaper.runtime.get_device`.
        checkpoint_path: File for the per-epoch checkpoint. If it exists the run resumes from it (it must come from
            the same ``config``, epochs, seed and monitor); None disables checkpointing.
        config: JSON-like description of everything else that determines the run (data hash, hyper-parameters);
            hashed into the checkpoint so a checkpoint of another run is rejected rather than silently resumed.
        progress: Show tqdm progress bars.
        description: Label of the progress bar.
        amp: Use autocast on CUDA (ignored on CPU).
        max_grad_norm: Clip the global gradient norm to this value; None disables clipping.
        batches_per_epoch: Number of batches per epoch, only for the progress bar's total (None: unknown, or
            ``len()`` of what ``batches`` returns if it has one).
        on_epoch_end: Called as ``on_epoch_end(epoch, row)`` (1-based epoch) after the checkpoint is written;
            exceptions propagate (tests use this to simulate an interruption).
        channels_last: Train in channels-last layout (model and 4-D inputs); None: on CUDA only (faster
            convolutions under autocast; on CPU the layout picks other oneDNN kernels, faster for the classifiers
            but rounding differently, so a CPU run takes it only when asked and keeps its results otherwise).

    Returns:
        :class:`TrainResult`.

    Raises:
        ValueError: On invalid arguments, a monitor column that the evaluation does not produce, a non-finite
            training loss, or a checkpoint written by a different run.
    """
    if not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be a positive integer, got {epochs!r}")
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
    if early_stopping_patience is not None and (not isinstance(early_stopping_patience, int)
                                                or early_stopping_patience < 1):
        raise ValueError(f"early_stopping_patience must be a positive integer or None, got {early_stopping_patience!r}")
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    device = default_device(device)
    rank, world = rank_and_world()
    model.to(device)
    channels_last = device.type == "cuda" if channels_last is None else bool(channels_last)
    if channels_last:
        model.to(memory_format=torch.channels_last)  # 4-D parameters only; parameters keep their identity
    use_fp16_scaler = amp and device.type == "cuda" and not torch.cuda.is_bf16_supported()
    scaler = torch.amp.GradScaler("cuda", enabled=use_fp16_scaler) if device.type == "cuda" else None
    run_id = content_hash({"config": config, "epochs": epochs, "seed": int(seed), "monitor": monitor, "mode": mode,
                           "patience": early_stopping_patience})

    history: list[dict[str, float]] = []
    best_state: dict[str, torch.Tensor] | None = None
    best_score: float | None = None
    best_epoch = 0
    bad_epochs = 0
    start_epoch = 0
    stopped_early = False

    if checkpoint_path is not None:
        state = load_checkpoint(checkpoint_path, map_location="cpu")
        if state is not None:
            if state.get("format") != CHECKPOINT_FORMAT or state.get("run_id") != run_id:
                raise ValueError(f"checkpoint {checkpoint_path} belongs to another run (run id "
                                 f"{state.get('run_id')!r}, expected {run_id!r}); delete it or pass another path")
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            if scheduler is not None and state.get("scheduler") is not None:
                scheduler.load_state_dict(state["scheduler"])
            if scaler is not None and state.get("scaler") is not None:
                scaler.load_state_dict(state["scaler"])
            history = list(state["history"])
            best_state, best_score, best_epoch = state["best_state"], state["best_score"], state["best_epoch"]
            bad_epochs, start_epoch, stopped_early = state["bad_epochs"], state["epoch"], state["stopped_early"]
            restore_rng_state(state["rng"])

    progress_bar = _progress_factory(progress)
    for epoch in range(start_epoch, epochs):
        if stopped_early:
            break
        started = time.perf_counter()
        this_seed = epoch_seed(int(seed), epoch)
        generator = torch.Generator().manual_seed(this_seed)
        torch.manual_seed(this_seed)  # dropout and other global-RNG users in the model
        model.train()
        # The sum of the batch losses stays on the device (float64: the sum Python's floats gave) until the end of
        # the epoch, so that no step waits for the GPU.
        total = torch.zeros((), dtype=torch.float64, device=device)
        count = 0
        iterator = batches(epoch, generator)
        bar = progress_bar(iterator, desc=f"{description} {epoch + 1}/{epochs}", leave=False,
                           total=len(iterator) if hasattr(iterator, "__len__") else batches_per_epoch)
        shown = time.perf_counter()
        for batch in bar:
            share = 1.0
            if world > 1:
                size = batch_length(batch)
                rows = shard_rows(size, rank, world)
                batch, share = select_rows(batch, rows), rows.numel() / size
            batch = move_to_device(batch, device, channels_last)
            optimizer.zero_grad(set_to_none=True)
            if share > 0:
                with autocast_context(device, amp):
                    loss = step(model, batch)
                weighted = loss * share if world > 1 else loss
                if scaler is not None and scaler.is_enabled():
                    scaler.scale(weighted).backward()
                else:
                    weighted.backward()
                total += weighted.detach()
            all_reduce_gradients(model.parameters())
            if scaler is not None and scaler.is_enabled():
                scaler.unscale_(optimizer)
                if max_grad_norm is not None:
                    nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
                scaler.step(optimizer)
                scaler.update()
            else:
                if max_grad_norm is not None:
                    nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
                optimizer.step()
            count += 1
            if hasattr(bar, "set_postfix") and time.perf_counter() - shown >= 1.0:
                bar.set_postfix(loss=f"{float(total) / count:.4f}", refresh=False)
                shown = time.perf_counter()
        if count == 0:
            raise ValueError(f"batches() yielded no batch in epoch {epoch + 1}; the training set is too small "
                             "for the batch size")
        train_loss = float(all_reduce_sum(total)) / count
        if not math.isfinite(train_loss):
            raise ValueError(f"non-finite training loss (mean {train_loss}) in epoch {epoch + 1}; lower the "
                             "learning rate or check the inputs")
        average_buffers(model, lambda name: name.endswith(("running_mean", "running_var")))
        row: dict[str, float] = {"epoch": epoch + 1, "train_loss": train_loss,
                                 "lr": float(optimizer.param_groups[0]["lr"])}
        if evaluate is not None:
            model.eval()
            with torch.no_grad():
                values = evaluate(model)
            row.update({key: float(value) for key, value in values.items()})
        row = broadcast_object(row)  # every process decides on rank 0's values (best epoch, early stopping)
        if monitor not in row:
            raise ValueError(f"monitor {monitor!r} is not among the epoch values {sorted(row)}")
        if scheduler is not None:
            scheduler.step()
        row["seconds"] = time.perf_counter() - started
        history.append(row)
        if _is_better(row[monitor], best_score, mode):
            best_score, best_epoch, bad_epochs = row[monitor], epoch + 1, 0
            best_state = _state_to_cpu(model.state_dict())
        else:
            bad_epochs += 1
            if early_stopping_patience is not None and bad_epochs >= early_stopping_patience:
                stopped_early = True
        if checkpoint_path is not None and rank == 0:
            save_checkpoint(checkpoint_path, {
                "format": CHECKPOINT_FORMAT, "run_id": run_id, "epoch": epoch + 1,
                "model": _state_to_cpu(model.state_dict()), "optimizer": copy.deepcopy(optimizer.state_dict()),
                "scheduler": scheduler.state_dict() if scheduler is not None else None,
                "scaler": scaler.state_dict() if scaler is not None else None,
                "history": history, "best_state": best_state, "best_score": best_score, "best_epoch": best_epoch,
                "bad_epochs": bad_epochs, "stopped_early": stopped_early, "rng": capture_rng_state(),
            })
        if on_epoch_end is not None:
            on_epoch_end(epoch + 1, row)

    if best_state is None:
        raise ValueError(f"no epoch produced a usable {monitor!r} value (all NaN?); history: {history}")
    model.load_state_dict(best_state)
    model.eval()
    return TrainResult(model=model, history=pd.DataFrame(history), best_epoch=best_epoch,
                       best_score=float(best_score), monitor=monitor, mode=mode, stopped_early=stopped_early)


def labelled_minibatches(images: torch.Tensor, labels: torch.Tensor, batch_size: int,
                         augment: Callable[..., torch.Tensor] | None = None, device: torch.device | None = None
                         ) -> Callable[[int, torch.Generator], Iterable[tuple[torch.Tensor, torch.Tensor]]]:
    """The ``batches`` callable of :func:`fit` for (image, label) data: a fresh shuffle each epoch from the epoch's
    generator, optional augmentation from the same generator, and no batch of one (BatchNorm cannot train on it).

    With a CUDA ``device`` each batch goes to it (pinned, non-blocking) before the augmentation, which then runs on
    the GPU (its random draws stay on the CPU generator; its arithmetic is the GPU's); otherwise nothing moves.
    """
    count = images.shape[0]
    to_gpu = device is not None and torch.device(device).type == "cuda"

    def batches(epoch: int, generator: torch.Generator):
        order = torch.randperm(count, generator=generator)
        for start in range(0, count, batch_size):
            index = order[start:start + batch_size]
            if index.numel() < 2:
                continue
            if to_gpu:
                # Gathered straight into pinned memory (one copy), then sent without blocking the host.
                batch = torch.empty((index.numel(), *images.shape[1:]), dtype=images.dtype, pin_memory=True)
                torch.index_select(images, 0, index, out=batch)
                batch, batch_labels = move_to_device((batch, labels[index]), torch.device(device))
            else:
                batch, batch_labels = images[index], labels[index]
            if augment is not None:
                batch = augment(batch, generator)
            yield batch, batch_labels

    return batches


def _progress_factory(enabled: bool):
    if not enabled:
        return lambda iterable, **_: iterable
    from tqdm.auto import tqdm

    return tqdm


def as_image_tensor(images: Any, name: str = "images") -> torch.Tensor:
    """Images as a float32 CPU tensor (N, C, H, W); uint8 data is scaled to [0, 1]. The input is not modified.

    Args:
        images: uint8 numpy array (N, H, W) or (N, H, W, C), or a float torch tensor (N, C, H, W) (used as
            given, normally in [0, 1]).
        name: Argument name for error messages.

    Raises:
        ValueError: On other dtypes/shapes, empty input or non-finite float values.
    """
    if isinstance(images, np.ndarray):
        if images.dtype != np.uint8:
            raise ValueError(f"{name}: numpy images must be uint8 (N, H, W[, C]), got dtype {images.dtype}; pass "
                             "float data as a torch tensor (N, C, H, W)")
        if images.ndim == 3:
            tensor = torch.from_numpy(images.copy())[:, None]
        elif images.ndim == 4:
            tensor = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2)))
        else:
            raise ValueError(f"{name}: uint8 images must be (N, H, W) or (N, H, W, C), got shape {images.shape}")
        tensor = tensor.float() / 255.0
    elif isinstance(images, torch.Tensor):
        if not images.is_floating_point() or images.ndim != 4:
            raise ValueError(f"{name}: tensor images must be float (N, C, H, W), got {images.dtype} "
                             f"{tuple(images.shape)}")
        tensor = images.detach().to("cpu", torch.float32).clone()
        if not torch.all(torch.isfinite(tensor)):
            raise ValueError(f"{name}: images contain NaN or infinite values")
    else:
        raise ValueError(f"{name}: expected a uint8 numpy array or a float torch tensor, got {type(images).__name__}")
    if tensor.shape[0] == 0:
        raise ValueError(f"{name}: no images (N = 0)")
    return tensor


def as_label_tensor(labels: Any, count: int, name: str = "labels") -> torch.Tensor:
    """Integer labels (N,) as an int64 tensor; checks the length against ``count``."""
    array = np.asarray(labels.cpu() if isinstance(labels, torch.Tensor) else labels)
    if array.ndim != 1 or array.shape[0] != count:
        raise ValueError(f"{name}: expected shape ({count},), got {array.shape}")
    if not np.issubdtype(array.dtype, np.integer):
        if np.issubdtype(array.dtype, np.floating) and np.all(array == np.round(array)):
            array = array.astype(np.int64)
        else:
            raise ValueError(f"{name}: expected integer labels, got dtype {array.dtype}")
    return torch.from_numpy(array.astype(np.int64))


def batched_forward(model: nn.Module, images: torch.Tensor, batch_size: int, device: torch.device,
                    function: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """Apply ``function`` (default ``model``) to ``images`` in batches in eval mode without gradients.

    Returns the float32 CPU concatenation of the outputs. The model's train/eval mode is restored afterwards.
    """
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    function = function or model
    was_training = model.training
    model.eval()
    outputs = []
    try:
        with torch.no_grad(), autocast_context(device):
            for start in range(0, images.shape[0], batch_size):
                outputs.append(function(images[start:start + batch_size].to(device)).float().cpu())
    finally:
        model.train(was_training)
    return torch.cat(outputs)


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter (CPU for a parameter-free model)."""
    for parameter in model.parameters():
        return parameter.device
    return torch.device("cpu")
