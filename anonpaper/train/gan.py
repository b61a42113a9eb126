"""GAN training loop for the StyleGAN2 / StyleGAN3-T generators (Karras et al. 2020, 2021), pure PyTorch.

Per step (one minibatch of ``batch_size`` images per process), four phases as in the official code:

1. G main: non-saturating logistic loss ``softplus(-D(aug(G(z))))`` times ``adversarial_weight`` plus an optional
   ``extra_generator_loss`` (paper 1: ``0.6 * (LPIPS_vessel + LPIPS_lesion)`` with ``adversarial_weight=0.4``).
2. G reg (StyleGAN2, every ``path_length_interval`` steps, lazy): path-length penalty
   ``(|J_w^T y| - a)^2`` with ``y`` Gaussian image noise scaled by ``1/sqrt(H W)`` and ``a`` its running mean.
3. D main: ``softplus(D(aug(G(z)))) + softplus(-D(aug(x)))``.
4. D reg (every ``r1_interval`` steps, lazy): R1 ``gamma/2 * |grad_x D(aug(x))|^2``.

Lazy regularisation scales the penalty by its interval and Adam's learning rate and betas by
``interval / (interval + 1)`` (StyleGAN2, Appendix B). The path-length penalty uses the running mean AFTER this
step's update, ``a' = lerp(a, mean|J^T y|, decay)``, and lets the gradient flow through ``a'`` (as the official
code does; only the stored buffer is detached). An exponential moving average of the generator (``ema_kimg``
half-life with ramp-up) is what one samples from. StyleGAN3's per-layer input-magnitude estimates decay with
``0.5 ** (images per step / (1000 * magnitude_ema_kimg))`` (official StyleGAN3 training: half-life 20 kimg).
Augmentation: none, DiffAugment, or ADA-style adaptive (see :mod:`anonpaper.models.stylegan.augment`).

Recipes per configuration (:meth:`GANTrainingConfig.for_stylegan_config`, table ``TRAINING_RECIPES``), from the
official configurations:

* ``sg2-paper256``: ADA's ``paper256`` (Karras et al., NeurIPS 2020, "Training generative adversarial networks
  with limited data", and its code's config table): batch 64, Adam lr 0.0025 for G and D, R1 gamma 1, G EMA
  half-life 20 kimg without ramp-up (minibatch-std group 8 lives in the architecture config).
* ``sg2-gmia256``: GMIA (Li et al. 2023, paper 3): lr 0.0025, R1 gamma 1 every 16 steps, path length 2 every 4.
* ``sg2-ada512``: ADA's ``auto`` config (k-SALSA, Jeon et al., ECCV 2022, trains StyleGAN2-ADA at 512 px with a
  2-layer mapping, which is ``auto``): lr 0.0025, R1 gamma ``0.0002 * resolution ** 2 / batch``, EMA
  ``batch * 10 / 32`` kimg with ramp-up 0.05.
* ``sg3t-paper256``: StyleGAN3-T (Karras et al., NeurIPS 2021, "Alias-free generative adversarial networks", and
  the recommended configuration for 256 px in its code: ``--cfg=stylegan3-t --batch=32 --gamma=2``): G lr 0.0025,
  D lr 0.002 (also paper 1's values, Zhao et al. 2023), R1 gamma 2, batch 32, no path length, no style mixing,
  EMA ``batch * 10 / 32`` kimg with ramp-up 0.05.
* other (test and CPU) configurations: :meth:`GANTrainingConfig.for_architecture`.

Deliberate differences from the official StyleGAN3-T recipe: the discriminator keeps its residual skips (the
official config switches to the ``orig`` architecture) and images are not blurred for the discriminator early in
training (``blur_init_sigma``); both are architecture/loss choices outside this module's scope.

Determinism and exact resume: every random draw (batch indices, z, style mixing, noise inputs, augmentation,
path-length noise) comes from one CPU ``torch.Generator`` per process whose state is saved in the checkpoint
together with models, EMA, optimisers, path-length mean, ADA state, history and the global RNG states
(:mod:`anonpaper.train.checkpoint`). A run resumed from a checkpoint continues bit for bit on CPU.

Mixed precision: on CUDA with ``mixed_precision=True`` the main phases run under bfloat16 autocast (no loss scaler
needed); regularisers always run in float32. On CPU everything is float32.

Multi-GPU: launch with ``torchrun --nproc_per_node=K script.py``; the script calls :func:`init_distributed` and then
:func:`train_gan`. Each process draws its own batches; gradients are averaged across processes with
``all_reduce`` after every backward pass (as the official code does instead of wrapping in DDP, because the phases
use different subsets of parameters). Rank 0 writes checkpoints, samples and progress.
"""

from __future__ import annotations

import copy
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from anonpaper.models.stylegan.augment import AdaptiveAugmentController, adaptive_augment, diff_augment
from anonpaper.models.stylegan.config import get_config
from anonpaper.models.stylegan.layers import to_signed_range, to_unit_range
from anonpaper.runtime import capture_rng_state, get_device, restore_rng_state
from anonpaper.train.checkpoint import load_checkpoint, save_checkpoint
from anonpaper.train.loop import as_image_tensor

CHECKPOINT_FORMAT = "anonpaper.gan/1"
AUGMENT_MODES = ("none", "diffaugment", "ada")


@dataclass
class GANTrainingConfig:
    """Hyper-parameters of :func:`train_gan` (defaults: StyleGAN2 at small scale).

    Attributes:
        total_steps: Minibatch steps to train in total (a resumed run continues up to this number).
        batch_size: Images per step per process.
        generator_lr: Adam learning rate of G (0.0025: StyleGAN2-ADA 256 px, StyleGAN3-T, GMIA, paper 1).
        discriminator_lr: Adam learning rate of D (0.0025: StyleGAN2-ADA ``paper256`` and GMIA; StyleGAN3 and paper
            1 use 0.002, see :meth:`for_architecture`).
        betas: Adam betas ((0, 0.99)).
        r1_gamma: R1 weight gamma (default 1: ADA ``paper256`` and GMIA; StyleGAN3-T at 256 px uses 2; ADA's
            automatic rule is ``0.0002 * resolution ** 2 / batch_size``). Per configuration:
            :meth:`for_stylegan_config`. 0 disables.
        r1_interval: Lazy R1 interval (16).
        path_length_weight: Path-length weight (2 for StyleGAN2; 0 for StyleGAN3, which disables it).
        path_length_interval: Lazy path-length interval (4).
        path_length_decay: Decay of the running path-length mean (0.01).
        path_length_batch_shrink: Divides the batch for the path-length pass (2).
        style_mixing_probability: Probability of mixing two latents at a random layer (0.9 SG2; 0 for SG3).
        adversarial_weight: Weight of the non-saturating G loss (1; paper 1 uses 0.4 with its LPIPS loss).
        ema_kimg: Half-life of the generator EMA in thousands of images (None: ``batch_size * world * 10 / 32``).
        ema_rampup: EMA ramp-up ratio (0.05), or None.
        magnitude_ema_kimg: Half-life, in thousands of images, of StyleGAN3's running input magnitudes during
            training (20: the official ``0.5 ** (batch / 20_000)``); None keeps the generator's own decay
            (``sg3_magnitude_ema_beta``). No effect on StyleGAN2.
        augment: ``"none"``, ``"diffaugment"`` or ``"ada"``.
        augment_policy: Comma-separated transforms (see ``augment.POLICIES``).
        ada_target: ADA's target for ``E[sign(D(real))]`` (0.6).
        ada_interval: Steps between ADA updates (4).
        ada_kimg: Thousands of images for p to move from 0 to 1 (500 in ADA; smaller for short runs).
        mixed_precision: bfloat16 autocast on CUDA (ignored on CPU).
        seed: Seed of the training random stream (process ``r`` uses ``seed + 1_000_003 * r``).
        checkpoint_every: Steps between checkpoints (0: only at the end); needs ``output_dir``.
        sample_every: Steps between sample grids written to ``output_dir/samples`` (0: never).
        metrics_every: Steps between calls of ``metrics_hook`` (0: only at the end when a hook is given).
        log_every: Steps between history rows (1: every step).
        sample_count: Images per sample grid.
        output_dir: Directory for ``checkpoint.pt``, ``metrics.jsonl`` and ``samples/``; None keeps nothing on disk.
        progress: Show a tqdm progress bar (rank 0).
    """

    total_steps: int = 1000
    batch_size: int = 8
    generator_lr: float = 0.0025
    discriminator_lr: float = 0.0025
    betas: tuple[float, float] = (0.0, 0.99)
    r1_gamma: float = 1.0
    r1_interval: int = 16
    path_length_weight: float = 2.0
    path_length_interval: int = 4
    path_length_decay: float = 0.01
    path_length_batch_shrink: int = 2
    style_mixing_probability: float = 0.9
    adversarial_weight: float = 1.0
    ema_kimg: float | None = None
    ema_rampup: float | None = 0.05
    magnitude_ema_kimg: float | None = 20.0
    augment: str = "none"
    augment_policy: str = "color,translation,cutout"
    ada_target: float = 0.6
    ada_interval: int = 4
    ada_kimg: float = 500.0
    mixed_precision: bool = True
    seed: int = 0
    checkpoint_every: int = 0
    sample_every: int = 0
    metrics_every: int = 0
    log_every: int = 1
    sample_count: int = 16
    output_dir: str | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        for name in ("total_steps", "batch_size", "r1_interval", "path_length_interval", "path_length_batch_shrink",
                     "ada_interval", "log_every", "sample_count"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"GANTrainingConfig.{name} must be a positive integer, got {value!r}")
        for name in ("checkpoint_every", "sample_every", "metrics_every", "seed"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"GANTrainingConfig.{name} must be a non-negative integer, got {value!r}")
        if self.augment not in AUGMENT_MODES:
            raise ValueError(f"augment must be one of {AUGMENT_MODES}, got {self.augment!r}")
        if not 0.0 <= self.style_mixing_probability <= 1.0:
            raise ValueError(f"style_mixing_probability must be in [0, 1], got {self.style_mixing_probability}")
        for name in ("r1_gamma", "path_length_weight", "adversarial_weight", "generator_lr", "discriminator_lr"):
            if getattr(self, name) < 0:
                raise ValueError(f"GANTrainingConfig.{name} must be >= 0, got {getattr(self, name)}")
        if (self.checkpoint_every or self.sample_every) and self.output_dir is None:
            raise ValueError("checkpoint_every / sample_every need output_dir")
        if self.magnitude_ema_kimg is not None and not self.magnitude_ema_kimg > 0:
            raise ValueError(f"magnitude_ema_kimg must be > 0 or None, got {self.magnitude_ema_kimg!r}")

    @classmethod
    def for_architecture(cls, architecture: str, **changes) -> "GANTrainingConfig":
        """Defaults of the official configs: StyleGAN2 keeps path length (2) and style mixing (0.9) and uses
        lr 0.0025 for D; StyleGAN3 disables both (its ``stylegan3-t`` config sets ``pl_weight=0``,
        ``style_mixing_prob=0``) and trains D with lr 0.002 (its ``--dlr`` default; paper 1 too)."""
        if architecture not in ("sg2", "sg3t"):
            raise ValueError(f"architecture must be 'sg2' or 'sg3t', got {architecture!r}")
        defaults = {} if architecture == "sg2" else {"path_length_weight": 0.0, "style_mixing_probability": 0.0,
                                                      "discriminator_lr": 0.002}
        return cls(**{**defaults, **changes})

    @classmethod
    def for_stylegan_config(cls, name: str, **changes) -> "GANTrainingConfig":
        """The official training recipe of a named StyleGAN configuration (see the module docstring and
        ``TRAINING_RECIPES``), on top of :meth:`for_architecture`; ``changes`` override anything.

        An ``r1_gamma`` of ``"auto"`` in a recipe is ADA's rule ``0.0002 * resolution ** 2 / batch_size`` with the
        final batch size (after ``changes``).

        Example:
            >>> GANTrainingConfig.for_stylegan_config("sg3t-paper256").r1_gamma
            2.0
        """
        config = get_config(name)  # validates the name
        recipe = {**TRAINING_RECIPES.get(name, {}), **changes}
        if recipe.get("r1_gamma") == "auto":
            batch = recipe.get("batch_size", cls.batch_size)
            recipe["r1_gamma"] = 0.0002 * config.resolution ** 2 / batch
        return cls.for_architecture(config.architecture, **recipe)


# Official recipes per StyleGAN configuration name (sources in the module docstring). Batch sizes are totals per
# step: with K processes divide batch_size by K.
TRAINING_RECIPES: dict[str, dict[str, Any]] = {
    "sg2-paper256": {"batch_size": 64, "generator_lr": 0.0025, "discriminator_lr": 0.0025, "r1_gamma": 1.0,
                     "ema_kimg": 20.0, "ema_rampup": None},
    "sg2-gmia256": {"generator_lr": 0.0025, "discriminator_lr": 0.0025, "r1_gamma": 1.0, "r1_interval": 16,
                    "path_length_weight": 2.0, "path_length_interval": 4},
    "sg2-ada512": {"generator_lr": 0.0025, "discriminator_lr": 0.0025, "r1_gamma": "auto", "ema_kimg": None,
                   "ema_rampup": 0.05},
    "sg3t-paper256": {"batch_size": 32, "generator_lr": 0.0025, "discriminator_lr": 0.002, "r1_gamma": 2.0,
                      "ema_kimg": None, "ema_rampup": 0.05, "magnitude_ema_kimg": 20.0},
}


def path_length_penalty(lengths: torch.Tensor, running_mean: torch.Tensor,
                        decay: float) -> tuple[torch.Tensor, torch.Tensor]:
    """StyleGAN2's path-length penalty per sample and the updated running mean (Karras et al. 2020, Eq. 4).

    ``a' = running_mean + decay * (mean(lengths) - running_mean)``; the penalty is ``(lengths - a')^2`` with the
    gradient flowing through ``a'`` (its ``decay * mean(lengths)`` term), as in the official code; the returned
    running mean is ``a'`` detached, for the buffer.

    Args:
        lengths: ``(N,)`` float path lengths ``|J_w^T y|`` (differentiable).
        running_mean: Scalar tensor, the running mean before this step.
        decay: In ``[0, 1]``.

    Returns:
        ``(penalty (N,), new running mean (scalar, detached))``.
    """
    if lengths.ndim != 1:
        raise ValueError(f"lengths: expected shape (N,), observed {tuple(lengths.shape)}")
    if not 0.0 <= decay <= 1.0:
        raise ValueError(f"decay: expected a value in [0, 1], observed {decay}")
    updated = running_mean.detach().lerp(lengths.mean(), decay)
    return (lengths - updated).square(), updated.detach()


def magnitude_ema_beta(images_per_step: int, half_life_kimg: float) -> float:
    """Decay per step of a running estimate with a half-life of ``half_life_kimg`` thousand images.

    Example:
        >>> round(magnitude_ema_beta(32, 20.0), 6)
        0.998892
    """
    return 0.5 ** (images_per_step / (half_life_kimg * 1000.0))


@dataclass
class GeneratorLossContext:
    """What an ``extra_generator_loss`` hook receives in the G main phase.

    Attributes:
        fake_images: (N, C, R, R) generated images in [-1, 1] nominal, differentiable w.r.t. G's parameters
            (before augmentation).
        ws: (N, num_ws, w_dim) latents that produced them.
        real_images: (N, C, R, R) a batch of training images in [-1, 1] (no gradient).
        step: 0-based training step.
        generator: The generator being trained.
    """

    fake_images: torch.Tensor
    ws: torch.Tensor
    real_images: torch.Tensor
    step: int
    generator: nn.Module


@dataclass
class GANTrainingResult:
    """Outcome of :func:`train_gan`.

    Attributes:
        generator: The trained generator (train mode off, on the training device).
        generator_ema: Its exponential moving average (sample from this one).
        discriminator: The trained discriminator.
        step: Steps completed.
        history: One row per logged step: losses, logit means, path-length mean, ADA p, metric values, seconds.
        output_dir: Where checkpoints/samples went (None if nowhere).
        resumed_from_step: Step of the checkpoint resumed from (0 for a fresh run).
    """

    generator: nn.Module
    generator_ema: nn.Module
    discriminator: nn.Module
    step: int
    history: pd.DataFrame
    output_dir: Path | None = None
    resumed_from_step: int = 0
    extras: dict = field(default_factory=dict)


def init_distributed(backend: str | None = None) -> tuple[int, int, torch.device]:
    """Initialise ``torch.distributed`` from torchrun's environment; returns (rank, world_size, device).

    Without torchrun's variables (``WORLD_SIZE`` unset or 1) nothing is initialised and (0, 1, get_device())
    is returned. With CUDA each process uses ``cuda:LOCAL_RANK`` and the NCCL backend; otherwise gloo.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1, get_device()
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group(backend or ("nccl" if device.type == "cuda" else "gloo"))
    return dist.get_rank(), dist.get_world_size(), device


def _distributed() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _average_gradients(module: nn.Module, world: int) -> None:
    """All-reduce (mean) every parameter's gradient across processes; missing gradients count as zero."""
    if world <= 1:
        return
    import torch.distributed as dist

    params = [p for p in module.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.flatten() for p in params])
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for p in params:
        p.grad.copy_(flat[offset: offset + p.numel()].view_as(p))
        offset += p.numel()


def _average_running_statistics(module: nn.Module, world: int) -> None:
    """Average G's running estimates (mapping ``w_avg``, SG3 ``magnitude_ema``) across processes, so every
    process (and the checkpoint written by rank 0) holds the same generator."""
    if world <= 1:
        return
    import torch.distributed as dist

    for name, buffer in module.named_buffers():
        if name.endswith("w_avg") or name.endswith("magnitude_ema"):
            dist.all_reduce(buffer)
            buffer /= world


def _autocast(device: torch.device, enabled: bool):
    """bfloat16 autocast on CUDA when supported (no loss scaling needed); otherwise a no-op context."""
    import contextlib

    if enabled and device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _set_requires_grad(module: nn.Module, flag: bool) -> None:
    for p in module.parameters():
        p.requires_grad_(flag)


def save_image_grid(images: torch.Tensor, path: str | Path, columns: int | None = None) -> Path:
    """Write (N, C, H, W) images in [-1, 1] (C = 1 or 3) as one PNG grid; returns the path."""
    from PIL import Image

    images = to_unit_range(images.detach().float().cpu())
    count, channels, height, width = images.shape
    columns = columns or int(math.ceil(math.sqrt(count)))
    rows = int(math.ceil(count / columns))
    grid = torch.zeros(channels, rows * height, columns * width)
    for index in range(count):
        r, c = divmod(index, columns)
        grid[:, r * height:(r + 1) * height, c * width:(c + 1) * width] = images[index]
    array = (grid.permute(1, 2, 0).numpy() * 255 + 0.5).clip(0, 255).astype(np.uint8)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array[:, :, 0] if channels == 1 else array).save(path)
    return path


def batch_source(images: Any, expected: tuple[int, int, int]) -> tuple[Callable[[torch.Tensor], torch.Tensor], int]:
    """A function from indices to a float32 batch in [-1, 1], and the dataset size.

    Arrays/tensors are validated and converted once; a dataset (``__len__`` + ``__getitem__`` returning a (C, H, W)
    float tensor in [0, 1], or a tuple whose first element is one) is read item by item and validated per batch,
    so large cohorts need not fit in memory as float32.
    """
    if isinstance(images, (np.ndarray, torch.Tensor)):
        data = as_image_tensor(images, "images")
        if tuple(data.shape[1:]) != expected:
            raise ValueError(f"images must be (N, {expected[0]}, {expected[1]}, {expected[2]}) for this generator, "
                             f"got {tuple(data.shape)}")
        if float(data.min()) < 0.0 or float(data.max()) > 1.0:
            raise ValueError(f"images must be in [0, 1], got range [{float(data.min()):.3f}, "
                             f"{float(data.max()):.3f}]")
        data = to_signed_range(data)
        return (lambda indices: data[indices]), data.shape[0]
    if not (hasattr(images, "__len__") and hasattr(images, "__getitem__")) or len(images) == 0:
        raise ValueError(f"images must be an array, a tensor or a non-empty dataset, got {type(images).__name__}")

    def fetch(indices: torch.Tensor) -> torch.Tensor:
        items = []
        for index in indices.tolist():
            item = images[index]
            item = item[0] if isinstance(item, (tuple, list)) else item
            item = torch.as_tensor(item, dtype=torch.float32)
            if tuple(item.shape) != expected:
                raise ValueError(f"dataset item {index} must be a {expected} float image, got {tuple(item.shape)}")
            items.append(item)
        batch = torch.stack(items)
        if float(batch.min()) < 0.0 or float(batch.max()) > 1.0:
            raise ValueError(f"dataset images must be in [0, 1], got range [{float(batch.min()):.3f}, "
                             f"{float(batch.max()):.3f}]")
        return to_signed_range(batch)

    return fetch, len(images)


def train_gan(generator: nn.Module, discriminator: nn.Module, images: Any, config: GANTrainingConfig, *,
              extra_generator_loss: Callable[[GeneratorLossContext], Any] | None = None,
              metrics_hook: Callable[[int, nn.Module], dict] | None = None,
              latents_from_images: Callable[[nn.Module, torch.Tensor], torch.Tensor] | None = None,
              device: str | torch.device | None = None, resume: bool = True) -> GANTrainingResult:
    """Train a :class:`StyleGenerator` against a :class:`ResidualDiscriminator`.

    Args:
        generator: The generator (modified in place: trained).
        discriminator: The discriminator (modified in place).
        images: Training images in [0, 1]: uint8 numpy (N, H, W[, C]) or float tensor (N, C, H, W), or a dataset
            whose items are (C, H, W) float tensors in [0, 1] (or tuples starting with one), matching the
            generator's channels and resolution. Not modified (float32 copies are mapped to [-1, 1]).
        config: :class:`GANTrainingConfig`.
        extra_generator_loss: Optional hook ``f(GeneratorLossContext) -> loss`` or ``-> (loss, {name: value})``;
            the scalar loss is added (as returned; weight it inside) to the G main loss.
        metrics_hook: Optional ``f(step, generator_ema) -> {name: float}`` called every ``metrics_every`` steps
            and at the end; values go to the history and ``metrics.jsonl``.
        latents_from_images: Optional ``f(generator, real_images) -> ws``: when given, every phase synthesises
            from the latents of the phase's real batch (its first images for the path-length pass) instead of
            mapped random z, without style mixing: GMIA's co-training of an encoder with the synthesis network
            (see :mod:`anonpaper.train.gmia`); ``generator`` then holds the encoder too.
        device: Device (default: torchrun's local device or :func:`anonpaper.runtime.get_device`).
        resume: Continue from ``output_dir/checkpoint.pt`` when it exists.

    Returns:
        :class:`GANTrainingResult`.

    Raises:
        ValueError: If the images do not match the generator, are outside [0, 1], or the checkpoint does not fit.
    """
    rank, world = _distributed()
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if world > 1 and torch.cuda.is_available() \
            else get_device()
    device = torch.device(device)
    expected = (generator.image_channels, generator.resolution, generator.resolution)
    fetch_batch, dataset_size = batch_source(images, expected)
    batch = config.batch_size

    G = generator.to(device).train()
    D = discriminator.to(device).train()
    if config.magnitude_ema_kimg is not None:
        # StyleGAN3 layers: the decay follows the images per step, not a fixed 0.999.
        for module in G.modules():
            if hasattr(module, "magnitude_ema_beta"):
                module.magnitude_ema_beta = magnitude_ema_beta(batch * world, config.magnitude_ema_kimg)
    G_ema = copy.deepcopy(G).eval()
    _set_requires_grad(G_ema, False)
    g_ratio = config.path_length_interval / (config.path_length_interval + 1) if config.path_length_weight > 0 else 1.0
    d_ratio = config.r1_interval / (config.r1_interval + 1) if config.r1_gamma > 0 else 1.0
    opt_G = torch.optim.Adam(G.parameters(), lr=config.generator_lr * g_ratio,
                             betas=(config.betas[0] ** g_ratio, config.betas[1] ** g_ratio), eps=1e-8)
    opt_D = torch.optim.Adam(D.parameters(), lr=config.discriminator_lr * d_ratio,
                             betas=(config.betas[0] ** d_ratio, config.betas[1] ** d_ratio), eps=1e-8)
    rng = torch.Generator().manual_seed(config.seed + 1_000_003 * rank)
    ada = AdaptiveAugmentController(config.ada_target, int(config.ada_kimg * 1000))
    pl_mean = torch.zeros([], device=device)
    history: list[dict] = []
    start_step = 0
    output_dir = Path(config.output_dir) if config.output_dir is not None else None
    checkpoint_path = output_dir / "checkpoint.pt" if output_dir is not None else None

    if resume and checkpoint_path is not None:
        state = load_checkpoint(checkpoint_path)
        if state is not None:
            if state.get("format") != CHECKPOINT_FORMAT or state.get("world_size", 1) != world:
                raise ValueError(f"checkpoint {checkpoint_path} has format {state.get('format')!r} / world size "
                                 f"{state.get('world_size')}; expected {CHECKPOINT_FORMAT!r} / {world}")
            G.load_state_dict(state["generator"])
            G_ema.load_state_dict(state["generator_ema"])
            D.load_state_dict(state["discriminator"])
            opt_G.load_state_dict(state["optimizer_generator"])
            opt_D.load_state_dict(state["optimizer_discriminator"])
            rng.set_state(state["training_rng"][rank])
            ada.load_state_dict(state["ada"])
            pl_mean = state["path_length_mean"].to(device)
            history = list(state["history"])
            start_step = int(state["step"])
            restore_rng_state(state["global_rng"])
    resumed_from = start_step

    def augment(x: torch.Tensor) -> torch.Tensor:
        if config.augment == "diffaugment":
            return diff_augment(x, config.augment_policy, generator=rng)
        if config.augment == "ada":
            return adaptive_augment(x, ada.probability, config.augment_policy, generator=rng)
        return x

    def sample_ws(count: int, real_images: torch.Tensor, update_w_avg: bool = False) -> torch.Tensor:
        if latents_from_images is not None:
            return latents_from_images(G, real_images[:count])
        z = torch.randn(count, G.z_dim, generator=rng).to(device)
        ws = G.mapping(z, update_w_avg=update_w_avg)
        # Style mixing: random draws are taken every time so the stream does not depend on the probability.
        mix_draw = float(torch.rand([], generator=rng))
        cutoff = int(torch.randint(1, G.num_ws, [], generator=rng)) if G.num_ws > 1 else 1
        z_mix = torch.randn(count, G.z_dim, generator=rng).to(device)
        if mix_draw < config.style_mixing_probability and G.num_ws > 1:
            ws_mix = G.mapping(z_mix, update_w_avg=False)
            ws = torch.cat([ws[:, :cutoff], ws_mix[:, cutoff:]], dim=1)
        return ws

    def checkpoint(step: int) -> None:
        if checkpoint_path is None:
            return
        rng_states = [rng.get_state()]
        if world > 1:
            import torch.distributed as dist

            rng_states = [None] * world
            dist.all_gather_object(rng_states, rng.get_state())
        if rank != 0:
            return
        save_checkpoint(checkpoint_path, {
            "format": CHECKPOINT_FORMAT, "step": step, "world_size": world,
            "generator": G.state_dict(), "generator_ema": G_ema.state_dict(), "discriminator": D.state_dict(),
            "optimizer_generator": opt_G.state_dict(), "optimizer_discriminator": opt_D.state_dict(),
            "training_rng": rng_states, "global_rng": capture_rng_state(), "ada": ada.state_dict(),
            "path_length_mean": pl_mean.detach().cpu(), "history": history,
            "training_config": asdict(config), "generator_config": getattr(G, "config", None)})

    sample_z = torch.randn(config.sample_count, G.z_dim, generator=torch.Generator().manual_seed(config.seed + 7))
    steps = range(start_step, config.total_steps)
    progress = None
    if config.progress and rank == 0:
        from tqdm.auto import tqdm

        progress = tqdm(total=config.total_steps, initial=start_step, desc="train GAN", unit="step")
    ema_kimg = config.ema_kimg if config.ema_kimg is not None else batch * world * 10 / 32
    tick = time.perf_counter()
    for step in steps:
        row: dict[str, float] = {"step": step + 1}
        real = fetch_batch(torch.randint(dataset_size, (batch,), generator=rng)).to(device)

        # Phase 1: G main.
        _set_requires_grad(G, True)
        _set_requires_grad(D, False)
        with _autocast(device, config.mixed_precision):
            ws = sample_ws(batch, real)
            fake = G.synthesis(ws, noise_mode="random", noise_generator=rng)
            logits = D(augment(fake))
            loss_adv = F.softplus(-logits.float()).mean()
            loss_G = config.adversarial_weight * loss_adv
            if extra_generator_loss is not None:
                extra = extra_generator_loss(GeneratorLossContext(fake, ws, real, step, G))
                extra, extra_logs = extra if isinstance(extra, tuple) else (extra, {})
                loss_G = loss_G + extra.float()
                row["loss_g_extra"] = float(extra.detach())
                row.update({f"extra_{k}": float(v) for k, v in extra_logs.items()})
        opt_G.zero_grad(set_to_none=True)
        loss_G.backward()
        _average_gradients(G, world)
        opt_G.step()
        row["loss_g_adv"] = float(loss_adv.detach())
        row["logits_fake_g"] = float(logits.detach().float().mean())

        # Phase 2: G reg (path length), lazy.
        if config.path_length_weight > 0 and step % config.path_length_interval == 0:
            pl_batch = max(1, batch // config.path_length_batch_shrink)
            ws = sample_ws(pl_batch, real)
            fake = G.synthesis(ws, noise_mode="random", noise_generator=rng)
            pl_noise = torch.randn(fake.shape, generator=rng).to(device) / math.sqrt(fake.shape[2] * fake.shape[3])
            (grads,) = torch.autograd.grad((fake * pl_noise).sum(), ws, create_graph=True)
            lengths = grads.square().sum(dim=2).mean(dim=1).sqrt()
            penalty, pl_mean = path_length_penalty(lengths, pl_mean, config.path_length_decay)
            loss_pl = penalty.mean() * config.path_length_weight * config.path_length_interval
            opt_G.zero_grad(set_to_none=True)
            loss_pl.backward()
            _average_gradients(G, world)
            opt_G.step()
            row["loss_path_length"] = float(loss_pl.detach())
            row["path_length_mean"] = float(pl_mean)

        # Phase 3: D main. The fake pass updates G's running statistics (w_avg, SG3 magnitudes).
        _set_requires_grad(G, False)
        _set_requires_grad(D, True)
        with _autocast(device, config.mixed_precision):
            with torch.no_grad():
                ws = sample_ws(batch, real, update_w_avg=True)
                fake = G.synthesis(ws, noise_mode="random", noise_generator=rng, update_emas=True)
            logits_fake = D(augment(fake)).float()
            logits_real = D(augment(real)).float()
            loss_D = F.softplus(logits_fake).mean() + F.softplus(-logits_real).mean()
        ada.accumulate(logits_real)
        opt_D.zero_grad(set_to_none=True)
        loss_D.backward()
        _average_gradients(D, world)
        opt_D.step()
        _average_running_statistics(G, world)
        row.update(loss_d=float(loss_D.detach()), logits_real=float(logits_real.detach().mean()),
                   logits_fake=float(logits_fake.detach().mean()))

        # Phase 4: D reg (R1 on the un-augmented reals), lazy.
        if config.r1_gamma > 0 and step % config.r1_interval == 0:
            real_input = real.detach().requires_grad_(True)
            (grads,) = torch.autograd.grad(D(augment(real_input)).sum(), real_input, create_graph=True)
            loss_r1 = grads.square().sum(dim=[1, 2, 3]).mean() * (config.r1_gamma / 2) * config.r1_interval
            opt_D.zero_grad(set_to_none=True)
            loss_r1.backward()
            _average_gradients(D, world)
            opt_D.step()
            row["loss_r1"] = float(loss_r1.detach())

        # Generator EMA (half-life ema_kimg, ramped up early in training).
        images_seen = (step + 1) * batch * world
        ema_images = ema_kimg * 1000
        if config.ema_rampup is not None:
            ema_images = min(ema_images, images_seen * config.ema_rampup)
        beta = 0.5 ** (batch * world / max(ema_images, 1e-8))
        with torch.no_grad():
            for p_ema, p in zip(G_ema.parameters(), G.parameters()):
                p_ema.copy_(p.detach().lerp(p_ema, beta))
            for b_ema, b in zip(G_ema.buffers(), G.buffers()):
                b_ema.copy_(b)

        if config.augment == "ada" and (step + 1) % config.ada_interval == 0:
            row["ada_heuristic"] = ada.update()
        row["augment_probability"] = ada.probability if config.augment == "ada" else float(config.augment != "none")
        completed = step + 1
        if completed % config.log_every == 0 or completed == config.total_steps:
            row["seconds"] = time.perf_counter() - tick
            history.append(row)
        if metrics_hook is not None and rank == 0 and (
                (config.metrics_every and completed % config.metrics_every == 0) or completed == config.total_steps):
            metrics = {k: float(v) for k, v in metrics_hook(completed, G_ema).items()}
            history.append({"step": completed, **{f"metric_{k}": v for k, v in metrics.items()}})
            if output_dir is not None:
                output_dir.mkdir(parents=True, exist_ok=True)
                with open(output_dir / "metrics.jsonl", "a") as stream:
                    stream.write(json.dumps({"step": completed, "images_seen": images_seen, **metrics}) + "\n")
        if config.sample_every and rank == 0 and completed % config.sample_every == 0:
            with torch.no_grad():
                samples = G_ema(sample_z.to(device), noise_mode="const")
            save_image_grid(samples, output_dir / "samples" / f"step{completed:07d}.png")
        if config.checkpoint_every and completed % config.checkpoint_every == 0:
            checkpoint(completed)
        if progress is not None:
            progress.update(1)
            progress.set_postfix(loss_g=f"{row['loss_g_adv']:.3f}", loss_d=f"{row['loss_d']:.3f}")
    if progress is not None:
        progress.close()
    final_step = max(start_step, config.total_steps)
    if checkpoint_path is not None and (not config.checkpoint_every or final_step % config.checkpoint_every):
        checkpoint(final_step)
    G.eval()
    D.eval()
    _set_requires_grad(G, True)
    _set_requires_grad(D, True)
    return GANTrainingResult(generator=G, generator_ema=G_ema, discriminator=D, step=final_step,
                             history=pd.DataFrame(history), output_dir=output_dir, resumed_from_step=resumed_from,
                             extras={"path_length_mean": float(pl_mean), "augment_probability": ada.probability})
