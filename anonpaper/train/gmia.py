"""Training GMIA's latent projection: co-training of encoder, synthesis network and discriminator, or E-training.

GMIA (Li, Ayache and Delingette, ISBI 2025, Sec. 2.1) learns the projection of an image into the latent space as
image reconstruction:

* **Co-training** (:func:`co_train`): the encoder E, the synthesis network S and the discriminator D are trained
  jointly from scratch. E and S minimise ``adversarial + 10 * MSE + 10 * LPIPS`` between ``x`` and ``S(E(x))``
  (non-saturating logistic adversarial loss of ``D(S(E(x)))``), with StyleGAN2's lazy path-length
  regularisation (weight 2 every 4 steps) computed on the latents ``E(x)``; D minimises the logistic loss of real
  ``x`` against ``S(E(x))`` with lazy R1 (gamma 1 every 16 steps). Adam, learning rate 0.0025, betas (0, 0.99),
  for E + S and for D. These are the values of the authors' public code; they are the defaults of
  :class:`anonpaper.train.gan.GANTrainingConfig`, and the loop *is* :func:`anonpaper.train.gan.train_gan` (one
  step = G main, G reg, D main, D reg, EMA; checkpoint and exact resume; progress bar) run on an
  :class:`~anonpaper.models.encoders.EncoderGenerator` with ``latents_from_images`` set, so it synthesises from
  ``E(x)`` instead of mapped random ``z`` (no mapping network, no style mixing).
* **E-training** (:func:`train_encoder`, the paper's baseline): only E is trained, against a frozen pretrained
  generator, with the same reconstruction loss ``10 * MSE + 10 * LPIPS`` and no adversarial term, through the
  package's generic loop :func:`anonpaper.train.loop.fit` (checkpoint and exact resume per epoch).

Reconstruction loss conventions: images enter in [0, 1] and the generator works in [-1, 1]; the MSE is computed on
the [0, 1] scale (as in the authors' code, whose images are in [0, 1]), unclamped, so it is a quarter of the MSE in
[-1, 1]. The perceptual term is a callable passed in (GMIA uses VGG-LPIPS; offline we use the domain LPIPS of a
cohort-trained network, e.g. ``functools.partial(anonpaper.metrics.domain_lpips,
feature_taps=unet.forward_features, reduction="none")``); it receives the real and the reconstructed images in
[0, 1], the latter clamped (the metrics validate their range), and returns per-image (N,) or mean distances.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd
import torch
from torch import nn

from anonpaper.models.encoders import EncoderGenerator
from anonpaper.models.stylegan.layers import to_unit_range
from anonpaper.runtime import get_device
from anonpaper.train.gan import GANTrainingConfig, GeneratorLossContext, batch_source, train_gan
from anonpaper.train.loop import TrainResult, fit

PerceptualDistance = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
SCHEMES = ("co-training", "encoder-training")


@dataclass(frozen=True)
class ProjectionTrainingSettings:
    """Everything that determines a GMIA projection training run (both schemes).

    Attributes:
        gan: Steps, batch size, learning rates, betas, regularisers, EMA, seed, checkpointing, progress
            (:class:`~anonpaper.train.gan.GANTrainingConfig`; its defaults are GMIA's: lr 0.0025, betas (0, 0.99),
            R1 gamma 1 every 16 steps, path length 2 every 4 steps). E-training uses ``total_steps``,
            ``batch_size``, ``generator_lr`` (for E), ``betas``, ``seed``, ``mixed_precision``, ``output_dir`` (the
            checkpoint is ``output_dir/encoder_checkpoint.pt``) and ``progress``.
        mse_weight: Weight of the pixel MSE (on the [0, 1] scale); 10 in GMIA.
        perceptual_weight: Weight of the perceptual distance; 10 in GMIA. Ignored without a perceptual callable.
        adversarial_weight: Weight of the non-saturating adversarial loss in co-training (1 in GMIA); overrides
            ``gan.adversarial_weight``.
        noise_mode: Synthesis noise during E-training: ``"const"`` (default; the frozen generator's fixed noise
            buffers, as the anonymisation uses) or ``"random"``. Co-training draws random noise, as StyleGAN2 does.
        encoder_epoch_steps: E-training steps per epoch of :func:`~anonpaper.train.loop.fit` (one history row,
            one checkpoint and one best-weights check per epoch).
    """

    gan: GANTrainingConfig = field(default_factory=lambda: GANTrainingConfig(style_mixing_probability=0.0))
    mse_weight: float = 10.0
    perceptual_weight: float = 10.0
    adversarial_weight: float = 1.0
    noise_mode: str = "const"
    encoder_epoch_steps: int = 100

    def __post_init__(self) -> None:
        if not isinstance(self.gan, GANTrainingConfig):
            raise ValueError(f"gan must be a GANTrainingConfig, got {type(self.gan).__name__}")
        for name in ("mse_weight", "perceptual_weight", "adversarial_weight"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if not isinstance(self.encoder_epoch_steps, int) or self.encoder_epoch_steps < 1:
            raise ValueError(f"encoder_epoch_steps must be a positive integer, got {self.encoder_epoch_steps!r}")
        if self.noise_mode not in ("const", "random"):
            raise ValueError(f"noise_mode must be 'const' or 'random', got {self.noise_mode!r}")

    def replace(self, **changes) -> "ProjectionTrainingSettings":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


@dataclass
class ProjectionTrainingResult:
    """Outcome of :func:`co_train` or :func:`train_encoder`.

    Attributes:
        encoder: The encoder to use: the exponential moving average for co-training (what the authors evaluate),
            the lowest-training-loss epoch's weights for E-training. Eval mode.
        generator: Its generator: the EMA of the co-trained one, or the (unchanged) frozen one.
        discriminator: The co-trained discriminator; None for E-training.
        history: One row per logged step (co-training: ``loss_g_adv``, ``loss_d``, ``loss_r1``,
            ``loss_path_length``, ``extra_mse``, ``extra_perceptual``, ``loss_g_extra`` = weighted reconstruction
            loss, ...) or per epoch (E-training: ``train_loss``).
        scheme: ``"co-training"`` or ``"encoder-training"``.
        training: The underlying loop's result (:class:`~anonpaper.train.gan.GANTrainingResult` holding the raw
            and EMA :class:`~anonpaper.models.encoders.EncoderGenerator`, or :class:`~anonpaper.train.loop.TrainResult`).
    """

    encoder: nn.Module
    generator: nn.Module
    discriminator: nn.Module | None
    history: pd.DataFrame
    scheme: str
    training: Any = None


def reconstruction_loss(real_images: torch.Tensor, reconstructions: torch.Tensor, mse_weight: float,
                        perceptual_weight: float, perceptual_distance: PerceptualDistance | None = None
                        ) -> tuple[torch.Tensor, dict[str, float]]:
    """GMIA's reconstruction loss ``mse_weight * MSE + perceptual_weight * perceptual`` (batch means).

    Args:
        real_images: (N, C, R, R) targets in [-1, 1] (no gradient needed).
        reconstructions: (N, C, R, R) generator outputs in [-1, 1] nominal, differentiable.
        mse_weight: Weight of the MSE, computed on the [0, 1] scale (a quarter of the [-1, 1] MSE), unclamped.
        perceptual_weight: Weight of ``perceptual_distance``.
        perceptual_distance: Optional ``f(real01, fake01) -> (N,) or scalar``, images in [0, 1] (the
            reconstruction clamped); None drops the term.

    Returns:
        ``(loss, {"mse": float, "perceptual": float})``: the weighted scalar loss (differentiable; lower = closer)
        and the unweighted terms (perceptual NaN without a callable).
    """
    if real_images.shape != reconstructions.shape:
        raise ValueError(f"real_images and reconstructions: expected identical shapes, observed "
                         f"{tuple(real_images.shape)} and {tuple(reconstructions.shape)}")
    real = to_unit_range(real_images.detach(), clamp=True)
    mse = (to_unit_range(reconstructions.float(), clamp=False) - real.float()).square().mean()
    loss = mse_weight * mse
    logs = {"mse": float(mse.detach()), "perceptual": float("nan")}
    if perceptual_distance is not None:
        perceptual = perceptual_distance(real.float(), to_unit_range(reconstructions.float(), clamp=True)).mean()
        loss = loss + perceptual_weight * perceptual
        logs["perceptual"] = float(perceptual.detach())
    return loss, logs


def _encode(autoencoder: nn.Module, real_images: torch.Tensor) -> torch.Tensor:
    return autoencoder.encode(real_images)


def co_train(encoder: nn.Module, generator: nn.Module, discriminator: nn.Module, images: Any,
             settings: ProjectionTrainingSettings, perceptual_distance: PerceptualDistance | None = None, *,
             metrics_hook: Callable[[int, nn.Module], dict] | None = None,
             device: str | torch.device | None = None) -> ProjectionTrainingResult:
    """GMIA co-training: E, S and D trained jointly (adversarial + 10 MSE + 10 LPIPS; see the module docstring).

    Args:
        encoder: A :class:`~anonpaper.models.encoders.LatentEncoder` for ``generator`` (trained in place).
        generator: A :class:`~anonpaper.models.stylegan.StyleGenerator`; its synthesis network is trained in
            place, its mapping network is unused.
        discriminator: A :class:`~anonpaper.models.stylegan.ResidualDiscriminator` (trained in place).
        images: Training images in [0, 1], any form :func:`~anonpaper.train.gan.train_gan` accepts (uint8 numpy
            (N, H, W[, C]), float tensor (N, C, H, W), or a dataset of (C, H, W) tensors).
        settings: :class:`ProjectionTrainingSettings`.
        perceptual_distance: The perceptual callable (see the module docstring); None trains with MSE only.
        metrics_hook: Optional ``f(step, autoencoder_ema) -> {name: float}`` (``autoencoder_ema.reconstruct``
            gives reconstructions), called every ``settings.gan.metrics_every`` steps and at the end.
        device: Device (default: :func:`anonpaper.runtime.get_device`).

    Returns:
        :class:`ProjectionTrainingResult` (scheme ``"co-training"``); resumes from
        ``settings.gan.output_dir/checkpoint.pt`` when it exists.
    """
    autoencoder = EncoderGenerator(encoder, generator)
    gan_config = dataclasses.replace(settings.gan, adversarial_weight=settings.adversarial_weight)

    def reconstruction(context: GeneratorLossContext):
        return reconstruction_loss(context.real_images, context.fake_images, settings.mse_weight,
                                   settings.perceptual_weight, perceptual_distance)

    result = train_gan(autoencoder, discriminator, images, gan_config, extra_generator_loss=reconstruction,
                       metrics_hook=metrics_hook, latents_from_images=_encode, device=device)
    ema = result.generator_ema
    return ProjectionTrainingResult(encoder=ema.encoder.eval(), generator=ema.generator.eval(),
                                    discriminator=result.discriminator, history=result.history,
                                    scheme="co-training", training=result)


def train_encoder(encoder: nn.Module, generator: nn.Module, images: Any, settings: ProjectionTrainingSettings,
                  perceptual_distance: PerceptualDistance | None = None, *,
                  device: str | torch.device | None = None) -> ProjectionTrainingResult:
    """GMIA's E-training baseline: train E alone to reconstruct through a frozen generator (10 MSE + 10 LPIPS).

    Minibatches are drawn with replacement from ``images`` (as the GAN loop does), ``settings.gan.batch_size``
    images each, from the epoch's random generator; the loop is :func:`anonpaper.train.loop.fit` with Adam
    (``settings.gan.generator_lr``, ``settings.gan.betas``). The generator's parameters and buffers are not
    modified (its ``requires_grad`` flags are restored afterwards).

    Args:
        encoder: A :class:`~anonpaper.models.encoders.LatentEncoder` for ``generator`` (trained in place).
        generator: A trained :class:`~anonpaper.models.stylegan.StyleGenerator` (frozen).
        images: Training images in [0, 1] (as for :func:`co_train`).
        settings: :class:`ProjectionTrainingSettings`.
        perceptual_distance: The perceptual callable; None trains with MSE only.
        device: Device (default: :func:`anonpaper.runtime.get_device`).

    Returns:
        :class:`ProjectionTrainingResult` (scheme ``"encoder-training"``, ``discriminator`` None).
    """
    config = settings.gan
    autoencoder = EncoderGenerator(encoder, generator)  # validates that E fits G
    expected = (generator.image_channels, generator.resolution, generator.resolution)
    fetch_batch, dataset_size = batch_source(images, expected)
    steps_per_epoch = min(settings.encoder_epoch_steps, config.total_steps)
    epochs = math.ceil(config.total_steps / steps_per_epoch)
    requires_grad = {name: p.requires_grad for name, p in generator.named_parameters()}
    was_training = generator.training
    generator.eval().requires_grad_(False)

    def batches(epoch: int, random: torch.Generator):
        for step in range(epoch * steps_per_epoch, min((epoch + 1) * steps_per_epoch, config.total_steps)):
            yield fetch_batch(torch.randint(dataset_size, (config.batch_size,), generator=random))

    def step(model: nn.Module, real: torch.Tensor) -> torch.Tensor:
        fake = autoencoder.generator.synthesis(model(real), noise_mode=settings.noise_mode)
        loss, _ = reconstruction_loss(real, fake, settings.mse_weight, settings.perceptual_weight,
                                      perceptual_distance)
        return loss

    optimizer = torch.optim.Adam(encoder.parameters(), lr=config.generator_lr, betas=config.betas, eps=1e-8)
    checkpoint = None if config.output_dir is None else f"{config.output_dir}/encoder_checkpoint.pt"
    run_description = {"scheme": "encoder-training", "gan": dataclasses.asdict(config),
                       "weights": [settings.mse_weight, settings.perceptual_weight], "noise": settings.noise_mode,
                       "images": dataset_size}
    device = device if isinstance(device, torch.device) else get_device(device)
    try:
        generator.to(device)
        result: TrainResult = fit(encoder, batches=batches, step=step, optimizer=optimizer, epochs=epochs,
                                  seed=config.seed, device=device, checkpoint_path=checkpoint,
                                  config=run_description, progress=config.progress, description="train E",
                                  amp=config.mixed_precision, batches_per_epoch=steps_per_epoch)
    finally:
        for name, parameter in generator.named_parameters():
            parameter.requires_grad_(requires_grad[name])
        generator.train(was_training)
    return ProjectionTrainingResult(encoder=result.model, generator=generator, discriminator=None,
                                    history=result.history, scheme="encoder-training", training=result)
