"""Image-to-latent encoders for StyleGAN generators: GMIA's encoder E and the encoder + generator autoencoder.

GMIA (Li, Ayache and Delingette, "Generative Medical Image Anonymization Based on Latent Code Projection and
Optimization", ISBI 2025, Sec. 2.1) projects a chest X-ray into the latent space of a StyleGAN2 generator with an
encoder that mirrors the generator: a 1x1 "fromIMG" convolution, then one residual block per resolution (two 3x3
convolutions, the second downsampling, plus a downsampling 1x1 skip), down to 4 x 4 (6 blocks at 256 px). In the
authors' code the trunk is exactly the StyleGAN2 residual discriminator's (without minibatch standard deviation and
without the output logit), followed by a 3x3 convolution and a fully connected layer with leaky ReLU whose output
is one ``w`` repeated to every synthesis layer, i.e. the encoder maps into W, not W+. The fully connected layer's
leaky ReLU (gain sqrt(2)) is the same output non-linearity as the mapping network's last layer, so E's outputs live
where mapped latents live.

:class:`LatentEncoder` builds that network from the package's discriminator blocks
(:class:`~anonpaper.models.stylegan.discriminator.DiscriminatorBlock`, same widths as
:class:`~anonpaper.models.stylegan.ResidualDiscriminator` for the same config). One generalisation: the last layer
outputs ``w_dim`` features (the authors' outputs the 4 x 4 width, which equals ``w_dim`` in their 256 px config), and
``space="w+"`` outputs one w per synthesis layer instead.

:class:`EncoderGenerator` holds E and a :class:`~anonpaper.models.stylegan.StyleGenerator` as one module, the
"G = (E, S)" of GMIA's co-training: it exposes the generator interface that
:func:`anonpaper.train.gan.train_gan` needs plus :meth:`EncoderGenerator.encode` and
:meth:`EncoderGenerator.reconstruct`.

Example:
    >>> import torch
    >>> from anonpaper.models.stylegan import StyleGenerator, get_config
    >>> config = get_config("sg2-tiny", image_channels=1)
    >>> generator = StyleGenerator(config, seed=0)
    >>> encoder = LatentEncoder(config, num_ws=generator.num_ws, seed=1)
    >>> ws = encoder(torch.zeros(2, 1, 32, 32))
    >>> tuple(ws.shape) == (2, generator.num_ws, config.w_dim)
    True
    >>> bool((ws[:, 0] == ws[:, -1]).all())  # W: one w repeated to every layer
    True
"""

from __future__ import annotations

import torch
from torch import nn

from anonpaper.models.stylegan.config import StyleGANConfig
from anonpaper.models.stylegan.discriminator import DiscriminatorBlock, EqualizedConv2d
from anonpaper.models.stylegan.generator import StyleGenerator
from anonpaper.models.stylegan.layers import EqualizedLinear
from anonpaper.models.stylegan.synthesis_sg2 import sg2_channels

LATENT_SPACES = ("w", "w+")


class LatentEncoder(nn.Module):
    """GMIA's encoder E: images (N, C, R, R) in [-1, 1] -> latents (N, num_ws, w_dim) for a style generator.

    Args:
        config: The generator's architecture; channels and resolution of the images, ``w_dim``, and the
            discriminator widths (``discriminator_channel_base`` / ``discriminator_channel_max``) of the trunk.
        num_ws: Number of synthesis inputs of the generator (``StyleGenerator.num_ws``).
        space: ``"w"`` (GMIA: one w, repeated ``num_ws`` times) or ``"w+"`` (one w per synthesis input).
        seed: Seed of the parameter initialisation (a forked RNG; the global generator is left untouched). None uses
            the global generator.

    Raises:
        ValueError: On an unknown space or a non-positive ``num_ws``.
    """

    def __init__(self, config: StyleGANConfig, num_ws: int, space: str = "w", seed: int | None = 0):
        super().__init__()
        if space not in LATENT_SPACES:
            raise ValueError(f"space must be one of {LATENT_SPACES}, got {space!r}")
        if not isinstance(num_ws, int) or num_ws < 1:
            raise ValueError(f"num_ws must be a positive integer, got {num_ws!r}")
        self.config, self.space, self.num_ws, self.w_dim = config, space, num_ws, config.w_dim
        self.resolution, self.image_channels = config.resolution, config.image_channels
        resolutions = [2 ** i for i in range(config.log2_resolution, 1, -1)]  # R, R/2, ..., 4
        width = {r: sg2_channels(r, config.discriminator_channel_base, config.discriminator_channel_max)
                 for r in resolutions}
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            self.from_image = EqualizedConv2d(config.image_channels, width[config.resolution], 1)
            self.blocks = nn.ModuleList(DiscriminatorBlock(width[r], width[r // 2]) for r in resolutions[:-1])
            self.epilogue_conv = EqualizedConv2d(width[4], width[4], 3)
            self.latent_rows = 1 if space == "w" else num_ws
            self.to_latent = EqualizedLinear(width[4] * 16, self.latent_rows * config.w_dim, activation="lrelu")

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Encode images.

        Args:
            images: (N, C, R, R) float, in [-1, 1] (the generator's range; map [0, 1] data with
                :func:`~anonpaper.models.stylegan.to_signed_range`).

        Returns:
            (N, num_ws, w_dim) latents, same dtype; for ``space="w"`` every row equals the first.

        Raises:
            ValueError: If the images do not have the configured channels and resolution.
        """
        expected = (self.image_channels, self.resolution, self.resolution)
        if images.ndim != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(f"encoder expects images (N, {expected[0]}, {expected[1]}, {expected[2]}), "
                             f"got {tuple(images.shape)}")
        x = self.from_image(images)
        for block in self.blocks:
            x = block(x)
        x = self.to_latent(self.epilogue_conv(x).flatten(1))
        x = x.view(images.shape[0], self.latent_rows, self.w_dim)
        return x.expand(-1, self.num_ws, -1) if self.latent_rows == 1 else x


class EncoderGenerator(nn.Module):
    """GMIA's autoencoder G = (E, S): an encoder and a style generator trained or used together.

    It presents the generator interface of :func:`anonpaper.train.gan.train_gan` (``image_channels``,
    ``resolution``, ``z_dim``, ``num_ws``, ``mapping``, ``synthesis``, ``forward(z)``), delegating to the
    generator, so that the GAN loop trains both parts with one optimiser and keeps one EMA of both.

    Args:
        encoder: A :class:`LatentEncoder` (or any module images in [-1, 1] -> (N, num_ws, w_dim)).
        generator: The :class:`~anonpaper.models.stylegan.StyleGenerator` it encodes for.

    Raises:
        ValueError: If the encoder's latents or images do not fit the generator.
    """

    def __init__(self, encoder: nn.Module, generator: StyleGenerator):
        super().__init__()
        for name in ("num_ws", "w_dim", "resolution", "image_channels"):
            if getattr(encoder, name, getattr(generator, name)) != getattr(generator, name):
                raise ValueError(f"encoder.{name} = {getattr(encoder, name)} does not match the generator's "
                                 f"{getattr(generator, name)}")
        self.encoder, self.generator = encoder, generator
        self.config = generator.config
        self.z_dim, self.w_dim, self.num_ws = generator.z_dim, generator.w_dim, generator.num_ws
        self.resolution, self.image_channels = generator.resolution, generator.image_channels

    @property
    def w_avg(self) -> torch.Tensor:
        """The generator's running mean of mapped w, (w_dim,)."""
        return self.generator.w_avg

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """(N, C, R, R) images in [-1, 1] -> (N, num_ws, w_dim) latents."""
        return self.encoder(images)

    def reconstruct(self, images: torch.Tensor, noise_mode: str = "const") -> torch.Tensor:
        """(N, C, R, R) images in [-1, 1] -> G(E(images)), (N, C, R, R) in [-1, 1] nominal (not clamped)."""
        return self.generator.synthesis(self.encoder(images), noise_mode=noise_mode)

    def mapping(self, z: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        """The generator's mapping network (untrained in GMIA's co-training, which never uses it)."""
        return self.generator.mapping(z, *args, **kwargs)

    def synthesis(self, ws: torch.Tensor, *args, **kwargs):
        """The generator's synthesis network S (see :meth:`StyleGenerator.synthesis`)."""
        return self.generator.synthesis(ws, *args, **kwargs)

    def forward(self, z: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        """z -> images through the generator (mapping + synthesis); use :meth:`reconstruct` for images."""
        return self.generator(z, *args, **kwargs)
