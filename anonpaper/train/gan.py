"""GAN training loop for the StyleGAN2 / StyleGAN3-T generators (Karras et al. 2020, 2021), pure PyTorch.

Per step (one minibatch of ``batch_size`` images over all processes), four phases as in the official code:

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
path-length noise) comes from one CPU ``torch.Generator``, seeded alike on every process, whose state is saved in
the checkpoint together with models, EMA, optimisers, path-length mean, ADA state, history and the global RNG
states (:mod:`anonpaper.train.checkpoint`). A run resumed from a checkpoint continues bit for bit on CPU.

Mixed precision: on CUDA with ``mixed_precision=True`` the main phases run under bfloat16 autocast (no loss scaler
needed); regularisers always run in float32. On CPU everything is float32.

Several processes and gradient accumulation (as NVIDIA's ``--batch`` and ``--batch-gpu``): launch with
``torchrun --nproc_per_node=K script.py``; the script calls
:func:`anonpaper.train.distributed.init_distributed` and then :func:`train_gan`. ``batch_size`` is the global
batch; each of the K processes trains ``batch_size / K`` images of it in ``rounds`` passes of ``batch_gpu``
images (:meth:`GANTrainingConfig.passes`), each pass's loss weighted by its share of the batch, the gradients
accumulated over the passes and summed over the processes (one flat ``all_reduce`` per phase, as the official code
does rather than a DDP wrapper, because the phases train G and D in turn), then one optimiser step per phase. Rank
0 writes checkpoints, samples, metrics and progress; every process holds the same networks, EMA and history.

What a split changes, and what not. Every process draws the random numbers of the whole global batch from the
shared stream and uses its rows: sample ``i`` of the batch goes to pass ``i mod P`` (P = K * rounds passes, pass
``round * K + rank``), so a run's randomness does not depend on K or ``batch_gpu``, and a checkpoint resumes on any
number of processes. The path-length penalty's running mean ``a'`` is that of the global batch (the passes'
lengths are summed over processes before the penalty's gradient; see :func:`_split_path_length_pass`), ADA counts
every process's reals, and ``w_avg`` is updated once per step from the global batch. The minibatch-std layer of D
(:func:`anonpaper.models.stylegan.layers.minibatch_std`) groups the samples of one pass: it puts sample ``j`` of
``n`` in group ``j mod (n / G)``, so with the strided assignment above the groups of a pass of ``batch_gpu``
images are exactly the groups of one pass over the whole batch whenever the group size G divides ``batch_gpu``
(NVIDIA's code requires that too); otherwise they differ. Two things stay per pass: StyleGAN3's input-magnitude
estimates are updated by each pass in turn (averaged over processes after the phase), so a pass sees estimates
that moved by at most ``1 - beta`` (about 1e-3 per step) from those of one pass; and the sums behind every
gradient run in another order. A split step therefore equals an unsplit one up to float rounding for StyleGAN2
(tests: ``tests/test_distributed.py``) and up to that EMA ordering for StyleGAN3. Costs: every process draws the
whole batch's random numbers (StyleGAN2's noise maps on the CPU, K times the draws of one process) and augments a
pass in place of its rows in a zero batch of the global size (element-wise work only).
"""

from __future__ import annotations

import copy
import json
import math
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
from anonpaper.runtime import capture_rng_state, restore_rng_state
from anonpaper.train.checkpoint import load_checkpoint, pack_history, save_checkpoint, unpack_history
from anonpaper.train.distributed import (all_reduce_gradients, all_reduce_sum, average_buffers, default_device,
                                         rank_and_world, select_rows)
from anonpaper.train.distributed import init_distributed  # noqa: F401 (was defined here; scripts import it)
from anonpaper.train.loop import as_image_tensor

CHECKPOINT_FORMAT = "anonpaper.gan/2"  # /2: the history column-packed (pack_history); /1 (a list of rows) still resumes
READABLE_CHECKPOINT_FORMATS = ("anonpaper.gan/1", CHECKPOINT_FORMAT)
AUGMENT_MODES = ("none", "diffaugment", "ada")


@dataclass
class GANTrainingConfig:
    """Hyper-parameters of :func:`train_gan` (defaults: StyleGAN2 at small scale).

    Attributes:
        total_steps: Minibatch steps to train in total (a resumed run continues up to this number).
        batch_size: Images per step, over all processes (NVIDIA's ``--batch``).
        batch_gpu: Images per forward/backward pass on one process (NVIDIA's ``--batch-gpu``); a process runs
            ``batch_size / (processes * batch_gpu)`` passes per step and accumulates their gradients before one
            optimiser step. None: ``batch_size / processes`` (one pass). Keep it a multiple of the discriminator's
            minibatch-std group size (otherwise the groups differ from one pass over the batch).
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
        ema_kimg: Half-life of the generator EMA in thousands of images (None: ``batch_size * 10 / 32``).
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
        seed: Seed of the training random stream (the same on every process: it draws the global batch).
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
    batch_gpu: int | None = None
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
        if self.batch_gpu is not None and (isinstance(self.batch_gpu, bool) or not isinstance(self.batch_gpu, int)
                                           or self.batch_gpu < 1 or self.batch_size % self.batch_gpu):
            raise ValueError(f"GANTrainingConfig.batch_gpu must be None or a positive divisor of batch_size "
                             f"{self.batch_size}, got {self.batch_gpu!r}")

    def passes(self, world_size: int = 1) -> tuple[int, int]:
        """``(batch_gpu, rounds)``: images per forward/backward pass of one process and passes per step, for
        ``world_size`` processes (``batch_size = world_size * rounds * batch_gpu``).

        Example:
            >>> GANTrainingConfig(batch_size=32, batch_gpu=4).passes(world_size=2)
            (4, 4)

        Raises:
            ValueError: If the batch does not split evenly into the processes and passes.
        """
        if not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
        if self.batch_size % world_size:
            raise ValueError(f"GANTrainingConfig.batch_size {self.batch_size} does not split into {world_size} "
                             "processes; use a multiple of the number of processes")
        per_process = self.batch_size // world_size
        batch_gpu = per_process if self.batch_gpu is None else self.batch_gpu
        if batch_gpu > per_process or per_process % batch_gpu:
            raise ValueError(f"GANTrainingConfig.batch_gpu {batch_gpu} must divide the {per_process} images per "
                             f"process (batch_size {self.batch_size} over {world_size} processes)")
        return batch_gpu, per_process // batch_gpu

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
# step over all processes, as in the official code.
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


def _noise_shapes(generator: nn.Module) -> list[tuple[str, tuple[int, ...]]]:
    """Names and (R, R) shapes of a StyleGAN2 synthesis network's noise inputs in execution order (none for
    StyleGAN3), for a generator or a wrapper holding one as ``.generator``."""
    network = getattr(generator, "synthesis_network", None)
    if network is None:
        network = getattr(getattr(generator, "generator", None), "synthesis_network", None)
    buffers = network.noise_buffers() if hasattr(network, "noise_buffers") else {}
    return [(name, tuple(buffer.shape)) for name, buffer in buffers.items()]


def train_gan(generator: nn.Module, discriminator: nn.Module, images: Any, config: GANTrainingConfig, *,
              extra_generator_loss: Callable[[GeneratorLossContext], Any] | None = None,
              metrics_hook: Callable[[int, nn.Module], dict] | None = None,
              latents_from_images: Callable[[nn.Module, torch.Tensor], torch.Tensor] | None = None,
              device: str | torch.device | None = None, resume: bool = True) -> GANTrainingResult:
    """Train a :class:`StyleGenerator` against a :class:`ResidualDiscriminator`.

    In a process group (:func:`anonpaper.train.distributed.init_distributed` under ``torchrun``) every process
    runs this function with the same arguments; ``config.batch_size`` is the global batch, each process trains
    its share in passes of ``config.batch_gpu`` images, and rank 0 writes (see the module docstring).

    Args:
        generator: The generator (modified in place: trained).
        discriminator: The discriminator (modified in place).
        images: Training images in [0, 1]: uint8 numpy (N, H, W[, C]) or float tensor (N, C, H, W), or a dataset
            whose items are (C, H, W) float tensors in [0, 1] (or tuples starting with one), matching the
            generator's channels and resolution. Not modified (float32 copies are mapped to [-1, 1]).
        config: :class:`GANTrainingConfig`.
        extra_generator_loss: Optional hook ``f(GeneratorLossContext) -> loss`` or ``-> (loss, {name: value})``;
            the scalar loss is added (as returned; weight it inside) to the G main loss. With passes of
            ``batch_gpu`` images the hook sees one pass at a time and its loss must be a mean over that pass.
        metrics_hook: Optional ``f(step, generator_ema) -> {name: float}`` called every ``metrics_every`` steps
            and at the end (rank 0 only); values go to the history and ``metrics.jsonl``.
        latents_from_images: Optional ``f(generator, real_images) -> ws``: when given, every phase synthesises
            from the latents of the phase's real batch (its first images for the path-length pass) instead of
            mapped random z, without style mixing: GMIA's co-training of an encoder with the synthesis network
            (see :mod:`anonpaper.train.gmia`); ``generator`` then holds the encoder too.
        device: Device (default: torchrun's local device or :func:`anonpaper.runtime.get_device`).
        resume: Continue from ``output_dir/checkpoint.pt`` when it exists (written with any number of processes).

    Returns:
        :class:`GANTrainingResult` (the same on every process).

    Raises:
        ValueError: If the images do not match the generator, are outside [0, 1], the batch does not split into
            the processes and passes, or the checkpoint does not fit.
    """
    rank, world = rank_and_world()
    device = default_device(device)
    expected = (generator.image_channels, generator.resolution, generator.resolution)
    fetch_batch, dataset_size = batch_source(images, expected)
    batch = config.batch_size
    _, rounds = config.passes(world)  # (images per pass, passes per process and step)
    chunks = world * rounds  # passes per step over all processes; sample i of a global batch goes to i mod chunks
    split = chunks > 1
    my_chunks = [round_ * world + rank for round_ in range(rounds)]

    G = generator.to(device).train()
    D = discriminator.to(device).train()
    if config.magnitude_ema_kimg is not None:
        # StyleGAN3 layers: the decay follows the images per update. Each pass updates the estimates with its own
        # images and the processes' estimates are averaged, so one update stands for batch / rounds images.
        for module in G.modules():
            if hasattr(module, "magnitude_ema_beta"):
                module.magnitude_ema_beta = magnitude_ema_beta(batch // rounds, config.magnitude_ema_kimg)
    G_ema = copy.deepcopy(G).eval()
    _set_requires_grad(G_ema, False)
    g_ratio = config.path_length_interval / (config.path_length_interval + 1) if config.path_length_weight > 0 else 1.0
    d_ratio = config.r1_interval / (config.r1_interval + 1) if config.r1_gamma > 0 else 1.0
    opt_G = torch.optim.Adam(G.parameters(), lr=config.generator_lr * g_ratio,
                             betas=(config.betas[0] ** g_ratio, config.betas[1] ** g_ratio), eps=1e-8)
    opt_D = torch.optim.Adam(D.parameters(), lr=config.discriminator_lr * d_ratio,
                             betas=(config.betas[0] ** d_ratio, config.betas[1] ** d_ratio), eps=1e-8)
    # One stream of the global batch's random draws, the same on every process.
    rng = torch.Generator().manual_seed(config.seed)
    ada = AdaptiveAugmentController(config.ada_target, int(config.ada_kimg * 1000))
    pl_mean = torch.zeros([], device=device)
    history: list[dict] = []
    start_step = 0
    output_dir = Path(config.output_dir) if config.output_dir is not None else None
    checkpoint_path = output_dir / "checkpoint.pt" if output_dir is not None else None

    if resume and checkpoint_path is not None:
        state = load_checkpoint(checkpoint_path)
        if state is not None:
            streams = state.get("training_rng") or []
            if state.get("format") not in READABLE_CHECKPOINT_FORMATS or len(streams) != 1:
                raise ValueError(f"checkpoint {checkpoint_path} has format {state.get('format')!r} with "
                                 f"{len(streams)} random streams; expected one of {READABLE_CHECKPOINT_FORMATS} "
                                 "with one (older multi-process runs kept one stream per process and cannot "
                                 "resume: delete it)")
            G.load_state_dict(state["generator"])
            G_ema.load_state_dict(state["generator_ema"])
            D.load_state_dict(state["discriminator"])
            opt_G.load_state_dict(state["optimizer_generator"])
            opt_D.load_state_dict(state["optimizer_discriminator"])
            # An optimiser's state dict carries its learning rate and betas: the config's win, so that a run
            # branched from a checkpoint with another recipe (``generators train --branch-from``) trains with it.
            # For a plain resume they are the same values.
            for optimizer, lr, ratio in ((opt_G, config.generator_lr, g_ratio), (opt_D, config.discriminator_lr,
                                                                                 d_ratio)):
                for group in optimizer.param_groups:
                    group["lr"] = lr * ratio
                    group["betas"] = (config.betas[0] ** ratio, config.betas[1] ** ratio)
            rng.set_state(streams[0])
            ada.load_state_dict(state["ada"])
            pl_mean = state["path_length_mean"].to(device)
            history = unpack_history(state["history"])
            start_step = int(state["step"])
            restore_rng_state(state["global_rng"])
    resumed_from = start_step
    noise_shapes = _noise_shapes(G) if split else []

    def local_chunks(total: int) -> list[tuple[int, torch.Tensor | None, float]]:
        """This process's passes over a global batch of ``total``: (slot, rows, share of the batch); rows None is
        the whole batch. A pass may hold no row (a small path-length batch) and is then left out."""
        if not split:
            return [(0, None, 1.0)]
        passes = []
        for slot, chunk in enumerate(my_chunks):
            rows = torch.arange(chunk, total, chunks)
            if rows.numel():
                passes.append((slot, rows, rows.numel() / total))
        return passes

    def augment(x: torch.Tensor, rows: torch.Tensor | None = None, total: int = 0) -> torch.Tensor:
        if config.augment == "none":
            return x
        if rows is not None:
            # The transforms draw their parameters per sample of the whole batch: a pass is augmented in place of
            # its rows in a zero batch of the global size (every transform acts on each sample alone), so it gets
            # the parameters a single pass would give those rows. Costs element-wise work, no network pass.
            index = rows.to(x.device)
            x = x.new_zeros((total, *x.shape[1:])).index_copy(0, index, x)
        if config.augment == "diffaugment":
            x = diff_augment(x, config.augment_policy, generator=rng)
        else:
            x = adaptive_augment(x, ada.probability, config.augment_policy, generator=rng)
        return x if rows is None else x.index_select(0, rows.to(x.device))

    def draw_latents(count: int):
        """The latent draws for ``count`` images: z, the style-mixing decision and cut-off, and the mixing z."""
        if latents_from_images is not None:
            return None
        z = torch.randn(count, G.z_dim, generator=rng)
        # Style mixing: random draws are taken every time so the stream does not depend on the probability.
        mix_draw = float(torch.rand([], generator=rng))
        cutoff = int(torch.randint(1, G.num_ws, [], generator=rng)) if G.num_ws > 1 else 1
        z_mix = torch.randn(count, G.z_dim, generator=rng)
        return z, mix_draw, cutoff, z_mix

    def latents(drawn, rows: torch.Tensor | None, real_images: torch.Tensor | None, count: int,
                update_w_avg: bool = False) -> torch.Tensor:
        if latents_from_images is not None:
            return latents_from_images(G, real_images[:count])
        z, mix_draw, cutoff, z_mix = drawn
        ws = G.mapping(select_rows(z, rows).to(device), update_w_avg=update_w_avg)
        if mix_draw < config.style_mixing_probability and G.num_ws > 1:
            ws_mix = G.mapping(select_rows(z_mix, rows).to(device), update_w_avg=False)
            ws = torch.cat([ws[:, :cutoff], ws_mix[:, cutoff:]], dim=1)
        return ws

    def draw_noise(count: int) -> dict[str, torch.Tensor] | None:
        """StyleGAN2's noise maps of a global batch, drawn as the synthesis network would draw them in one pass."""
        if not split:
            return None  # drawn inside the synthesis network
        return {name: torch.randn(count, 1, *shape, generator=rng) for name, shape in noise_shapes}

    def synthesize(ws: torch.Tensor, noise: dict | None, rows: torch.Tensor | None, **options) -> torch.Tensor:
        if noise is None:
            return G.synthesis(ws, noise_mode="random", noise_generator=rng, **options)
        return G.synthesis(ws, noise_mode="random", noise_inputs={name: select_rows(value, rows)
                                                                  for name, value in noise.items()} or None,
                           **options)

    def checkpoint(step: int) -> None:
        if checkpoint_path is None or rank != 0:
            return
        save_checkpoint(checkpoint_path, {
            "format": CHECKPOINT_FORMAT, "step": step, "world_size": world,
            "generator": G.state_dict(), "generator_ema": G_ema.state_dict(), "discriminator": D.state_dict(),
            "optimizer_generator": opt_G.state_dict(), "optimizer_discriminator": opt_D.state_dict(),
            "training_rng": [rng.get_state()], "global_rng": capture_rng_state(), "ada": ada.state_dict(),
            "path_length_mean": pl_mean.detach().cpu(), "history": pack_history(history),
            "training_config": asdict(config), "generator_config": getattr(G, "config", None)})

    sample_z = torch.randn(config.sample_count, G.z_dim, generator=torch.Generator().manual_seed(config.seed + 7))
    steps = range(start_step, config.total_steps)
    progress = None
    if config.progress and rank == 0:
        from tqdm.auto import tqdm

        progress = tqdm(total=config.total_steps, initial=start_step, desc="train GAN", unit="step")
    ema_kimg = config.ema_kimg if config.ema_kimg is not None else batch * 10 / 32
    tick = time.perf_counter()
    for step in steps:
        row: dict[str, float] = {"step": step + 1}
        summed: list[str] = []  # row entries that are this process's share of a global-batch mean
        ada_signs = [0.0, 0.0]  # this step's sum of sign(D(real)) and count, for ADA

        def add(name: str, value: Any, share: float) -> None:
            if name not in row:
                row[name] = 0.0
                summed.append(name)
            row[name] += float(value) * share if split else float(value)

        indices = torch.randint(dataset_size, (batch,), generator=rng)
        passes = local_chunks(batch)
        reals = [fetch_batch(select_rows(indices, rows)).to(device) for _, rows, _ in passes]

        # Phase 1: G main.
        _set_requires_grad(G, True)
        _set_requires_grad(D, False)
        drawn, noise = draw_latents(batch), draw_noise(batch)
        augment_state = rng.get_state()
        opt_G.zero_grad(set_to_none=True)
        for slot, rows, share in passes:
            if split:
                rng.set_state(augment_state)
            real = reals[slot]
            with _autocast(device, config.mixed_precision):
                ws = latents(drawn, rows, real, real.shape[0])
                fake = synthesize(ws, noise, rows)
                logits = D(augment(fake, rows, batch))
                loss_adv = F.softplus(-logits.float()).mean()
                loss_G = config.adversarial_weight * loss_adv
                if extra_generator_loss is not None:
                    extra = extra_generator_loss(GeneratorLossContext(fake, ws, real, step, G))
                    extra, extra_logs = extra if isinstance(extra, tuple) else (extra, {})
                    loss_G = loss_G + extra.float()
                    add("loss_g_extra", extra.detach(), share)
                    for name, value in extra_logs.items():
                        add(f"extra_{name}", value, share)
            (loss_G * share if split else loss_G).backward()
            add("loss_g_adv", loss_adv.detach(), share)
            add("logits_fake_g", logits.detach().float().mean(), share)
        all_reduce_gradients(G.parameters())
        opt_G.step()

        # Phase 2: G reg (path length), lazy.
        if config.path_length_weight > 0 and step % config.path_length_interval == 0:
            pl_batch = max(1, batch // config.path_length_batch_shrink)
            scale = config.path_length_weight * config.path_length_interval
            drawn, noise = draw_latents(pl_batch), draw_noise(pl_batch)
            opt_G.zero_grad(set_to_none=True)
            if not split:
                ws = latents(drawn, None, reals[0], pl_batch)
                fake = synthesize(ws, noise, None)
                pl_noise = torch.randn(fake.shape, generator=rng).to(device) / math.sqrt(fake.shape[2] * fake.shape[3])
                (grads,) = torch.autograd.grad((fake * pl_noise).sum(), ws, create_graph=True)
                lengths = grads.square().sum(dim=2).mean(dim=1).sqrt()
                penalty, pl_mean = path_length_penalty(lengths, pl_mean, config.path_length_decay)
                loss_pl = penalty.mean() * scale
                loss_pl.backward()
                add("loss_path_length", loss_pl.detach(), 1.0)
            else:
                pl_mean = _split_path_length_pass(
                    pl_batch, local_chunks(pl_batch), reals, pl_mean, config.path_length_decay, scale,
                    lambda rows, real: latents(drawn, rows, real, rows.numel()),
                    lambda ws, rows: synthesize(ws, noise, rows),
                    torch.randn(pl_batch, *expected, generator=rng), rounds, device, add)
            all_reduce_gradients(G.parameters())
            opt_G.step()
            row["path_length_mean"] = float(pl_mean)

        # Phase 3: D main. The fake pass updates G's running statistics (w_avg, SG3 magnitudes).
        _set_requires_grad(G, False)
        _set_requires_grad(D, True)
        drawn = draw_latents(batch)
        ws_all = None
        if not split or latents_from_images is None:
            # The mapping of the whole batch (cheap) updates w_avg once, with the global batch, on every process.
            with _autocast(device, config.mixed_precision), torch.no_grad():
                ws_all = latents(drawn, None, reals[0], batch, update_w_avg=True)
        noise = draw_noise(batch)
        augment_state = rng.get_state()
        opt_D.zero_grad(set_to_none=True)
        for slot, rows, share in passes:
            if split:
                rng.set_state(augment_state)
            real = reals[slot]
            with _autocast(device, config.mixed_precision):
                with torch.no_grad():
                    ws = select_rows(ws_all, rows) if ws_all is not None else latents(None, rows, real, real.shape[0])
                    fake = synthesize(ws, noise, rows, update_emas=True)
                logits_fake = D(augment(fake, rows, batch)).float()
                logits_real = D(augment(real, rows, batch)).float()
                loss_D = F.softplus(logits_fake).mean() + F.softplus(-logits_real).mean()
            if world == 1:
                ada.accumulate(logits_real)
            else:
                ada_signs[0] += float(torch.sign(logits_real.detach()).sum())
                ada_signs[1] += logits_real.numel()
            (loss_D * share if split else loss_D).backward()
            add("loss_d", loss_D.detach(), share)
            add("logits_real", logits_real.detach().mean(), share)
            add("logits_fake", logits_fake.detach().mean(), share)
        all_reduce_gradients(D.parameters())
        opt_D.step()
        average_buffers(G, lambda name: name.endswith("w_avg") or name.endswith("magnitude_ema"))

        # Phase 4: D reg (R1 on the un-augmented reals), lazy.
        if config.r1_gamma > 0 and step % config.r1_interval == 0:
            augment_state = rng.get_state()
            opt_D.zero_grad(set_to_none=True)
            for slot, rows, share in passes:
                if split:
                    rng.set_state(augment_state)
                real_input = reals[slot].detach().requires_grad_(True)
                (grads,) = torch.autograd.grad(D(augment(real_input, rows, batch)).sum(), real_input,
                                               create_graph=True)
                loss_r1 = grads.square().sum(dim=[1, 2, 3]).mean() * (config.r1_gamma / 2) * config.r1_interval
                (loss_r1 * share if split else loss_r1).backward()
                add("loss_r1", loss_r1.detach(), share)
            all_reduce_gradients(D.parameters())
            opt_D.step()

        if world > 1:
            # Every process logs the global batch's values (and ADA counts every process's reals).
            reduced = all_reduce_sum([row[name] for name in summed] + ada_signs).tolist()
            row.update(zip(summed, reduced[:len(summed)]))
            ada_state = ada.state_dict()
            ada_state.update(sign_sum=ada_state["sign_sum"] + reduced[-2], count=ada_state["count"] + int(reduced[-1]))
            ada.load_state_dict(ada_state)

        # Generator EMA (half-life ema_kimg, ramped up early in training).
        images_seen = (step + 1) * batch
        ema_images = ema_kimg * 1000
        if config.ema_rampup is not None:
            ema_images = min(ema_images, images_seen * config.ema_rampup)
        beta = 0.5 ** (batch / max(ema_images, 1e-8))
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


def _split_path_length_pass(pl_batch: int, passes: list, reals: list[torch.Tensor], pl_mean: torch.Tensor,
                            decay: float, scale: float, latents: Callable, synthesize: Callable,
                            pl_noise: torch.Tensor, rounds: int, device: torch.device, add: Callable) -> torch.Tensor:
    """The path-length phase over several passes (processes or rounds): G's gradients of the global batch's
    penalty accumulate in ``.grad`` (to be all-reduced); returns the updated running mean ``a'``.

    The penalty's mean ``a' = lerp(a, mean(l), decay)`` needs every pass's lengths before any gradient. Its
    gradient splits by pass: ``d/dl_j mean_i (l_i - a')^2 = (2 / P) ((l_j - a') - decay (mean(l) - a'))``, which
    is the gradient of ``(1 / P) sum_{j in pass} ((l_j - a')^2 - 2 decay (mean(l) - a') l_j)`` with ``a'`` and
    ``mean(l)`` held fixed. With one pass per process the lengths' graphs are kept until the mean is known; with
    several rounds the lengths are computed once without a graph for the mean and again for the gradient, so that
    memory stays that of one pass.
    """

    def lengths_of(rows: torch.Tensor, real: torch.Tensor, create_graph: bool) -> torch.Tensor:
        ws = latents(rows, real)
        fake = synthesize(ws, rows)
        noise = select_rows(pl_noise, rows).to(device) / math.sqrt(fake.shape[2] * fake.shape[3])
        (grads,) = torch.autograd.grad((fake * noise).sum(), ws, create_graph=create_graph)
        return grads.square().sum(dim=2).mean(dim=1).sqrt()

    kept = [lengths_of(rows, reals[slot], True) for slot, rows, _ in passes] if rounds == 1 else None
    if kept is not None:
        local_sum = sum(float(lengths.detach().double().sum()) for lengths in kept)
    else:
        local_sum = sum(float(lengths_of(rows, reals[slot], False).double().sum()) for slot, rows, _ in passes)
    mean_length = float(all_reduce_sum([local_sum])[0]) / pl_batch
    updated = pl_mean.detach().lerp(torch.tensor(mean_length, dtype=pl_mean.dtype, device=pl_mean.device), decay)
    offset = 2 * decay * (mean_length - float(updated))
    penalty_sum = 0.0
    add("loss_path_length", 0.0, 1.0)  # every process logs the entry, also one without a pass here
    for index, (slot, rows, _) in enumerate(passes):
        lengths = kept[index] if kept is not None else lengths_of(rows, reals[slot], True)
        surrogate = ((lengths - updated).square() - offset * lengths).sum() / pl_batch
        (surrogate * scale).backward()
        penalty_sum += float((lengths.detach() - updated).square().double().sum())
    add("loss_path_length", penalty_sum / pl_batch * scale, 1.0)
    return updated.detach()
