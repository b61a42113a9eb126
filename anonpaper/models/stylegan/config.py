"""Named StyleGAN2 / StyleGAN3-T configurations: tiny CPU ones for tests and smoke runs, the papers' sizes for GPU.

A :class:`StyleGANConfig` fully determines a generator and discriminator architecture. Widths follow the papers'
rules: StyleGAN2 uses ``min(channel_base // resolution, channel_max)`` feature maps per resolution (Karras et al.
2020, ADA code base); StyleGAN3 uses ``min((channel_base / 2) / cutoff, channel_max)`` per layer, where the cutoff
frequency grows geometrically from ``first_cutoff`` to ``resolution / 2`` over the first
``num_layers - num_critical`` layers (Karras et al. 2021, Sec. 3 and Appendix F).

Checks against published numbers: ``sg2-paper256`` has 7,424 style channels and ``sg3t-paper256`` 6,175 (Zhao et
al., Biomedical Optics Express 2023, paper 1); the tests assert both.

Minibatch standard deviation group size, per configuration, as in the official configurations: 4 in StyleGAN2's
and StyleGAN3's own configs (Karras et al. 2020, 2021: ``--mbstd-group 4``) and in ADA's ``auto`` config at four or
more images per GPU; 8 in ADA's ``paper256`` and ``paper512`` configs (Karras et al., NeurIPS 2020, "Training
generative adversarial networks with limited data"), which ``sg2-paper256`` follows (channel base 16384, 8-layer
mapping, batch 64). The training recipes that go with each configuration (learning rates, R1 gamma, EMA) are in
:mod:`anonpaper.train.gan` (``GANTrainingConfig.for_stylegan_config``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

ARCHITECTURES = ("sg2", "sg3t")


@dataclass(frozen=True)
class StyleGANConfig:
    """Architecture of a style-based generator and its residual discriminator.

    Attributes:
        architecture: ``"sg2"`` (StyleGAN2: constant input, modulated 3x3 convs with noise, skip ToRGB) or
            ``"sg3t"`` (StyleGAN3-T: Fourier-feature input, alias-free filtered nonlinearities, no noise).
        resolution: Output side length in pixels; a power of two from 32 to 1024.
        image_channels: 1 (grayscale) or 3 (RGB).
        z_dim: Latent z size.
        w_dim: Intermediate latent w size.
        mapping_layers: Number of fully connected layers in the mapping network (8 in SG2, 2 in SG3/ADA-512).
        mapping_lr_multiplier: Learning-rate multiplier of the mapping network (0.01 in both papers).
        channel_base: Width scale of the synthesis network (see module docstring for the rule per architecture).
        channel_max: Upper bound on feature maps per layer.
        discriminator_channel_base: Width scale of the discriminator (SG2 rule, ``min(base // res, max)``).
        discriminator_channel_max: Upper bound on discriminator feature maps.
        minibatch_std_group_size: Group size of the minibatch standard deviation layer (4 in StyleGAN2/3; 8 in
            ADA's paper256/paper512 configs, hence in ``sg2-paper256``).
        minibatch_std_channels: Number of std feature maps appended (1 in the papers).
        sg3_num_layers: StyleGAN3 synthesis layers excluding ToRGB (14 in the paper).
        sg3_num_critical: Final layers sampled critically (2 in the paper).
        sg3_margin_size: Extra pixels on each side of intermediate feature maps (10 in the paper).
        sg3_first_cutoff: Cutoff frequency of the first layer (2).
        sg3_first_stopband: Stopband of the first layer (2 ** 2.1).
        sg3_last_stopband_relative: Stopband of the last layer relative to its cutoff (2 ** 0.3).
        sg3_filter_size: Low-pass filter taps per up/down-sampling factor (6).
        sg3_output_scale: Scale of the final image (0.25).
        sg3_magnitude_ema_beta: Decay of the running input-magnitude estimate of each layer outside training
            (0.999). :func:`anonpaper.train.gan.train_gan` replaces it by the StyleGAN3 training rule
            ``0.5 ** (batch / 20_000)`` (half-life 20,000 images; ``GANTrainingConfig.magnitude_ema_kimg``).
    """

    architecture: str = "sg2"
    resolution: int = 32
    image_channels: int = 3
    z_dim: int = 32
    w_dim: int = 32
    mapping_layers: int = 2
    mapping_lr_multiplier: float = 0.01
    channel_base: int = 512
    channel_max: int = 32
    discriminator_channel_base: int = 512
    discriminator_channel_max: int = 32
    minibatch_std_group_size: int = 4
    minibatch_std_channels: int = 1
    sg3_num_layers: int = 14
    sg3_num_critical: int = 2
    sg3_margin_size: int = 10
    sg3_first_cutoff: float = 2.0
    sg3_first_stopband: float = 2 ** 2.1
    sg3_last_stopband_relative: float = 2 ** 0.3
    sg3_filter_size: int = 6
    sg3_output_scale: float = 0.25
    sg3_magnitude_ema_beta: float = 0.999
    description: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise ValueError(f"architecture must be one of {ARCHITECTURES}, got {self.architecture!r}")
        if self.resolution < 32 or self.resolution > 1024 or self.resolution & (self.resolution - 1):
            raise ValueError(f"resolution must be a power of two in [32, 1024], got {self.resolution}")
        if self.image_channels not in (1, 3):
            raise ValueError(f"image_channels must be 1 (grayscale) or 3 (RGB), got {self.image_channels}")
        for name in ("z_dim", "w_dim", "mapping_layers", "channel_base", "channel_max", "discriminator_channel_base",
                     "discriminator_channel_max", "minibatch_std_group_size", "minibatch_std_channels",
                     "sg3_filter_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.architecture == "sg3t" and not (1 <= self.sg3_num_critical < self.sg3_num_layers):
            raise ValueError(f"need 1 <= sg3_num_critical < sg3_num_layers, got {self.sg3_num_critical}, "
                             f"{self.sg3_num_layers}")

    def replace(self, **changes) -> "StyleGANConfig":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """Plain-dict form (for checkpoints and content hashes)."""
        return dataclasses.asdict(self)

    @property
    def log2_resolution(self) -> int:
        return int(math.log2(self.resolution))


_NAMED: dict[str, StyleGANConfig] = {
    # Test-sized models: 32 px, 16-32 feature maps; a forward pass takes milliseconds on one CPU core.
    "sg2-tiny": StyleGANConfig(architecture="sg2", resolution=32, description="SG2 32px, widths 16-32 (tests)"),
    "sg3t-tiny": StyleGANConfig(architecture="sg3t", resolution=32, sg3_num_layers=4, sg3_num_critical=2,
                                sg3_margin_size=4, description="SG3-T 32px, 4 layers, widths 16-32 (tests)"),
    # CPU benchmark / smoke-profile models at 64 px.
    "sg2-cpu64": StyleGANConfig(architecture="sg2", resolution=64, z_dim=64, w_dim=64, channel_base=2048,
                                channel_max=64, discriminator_channel_base=2048, discriminator_channel_max=64,
                                description="SG2 64px, widths 32-64 (CPU smoke/quick)"),
    "sg3t-cpu64": StyleGANConfig(architecture="sg3t", resolution=64, z_dim=64, w_dim=64, channel_base=2048,
                                 channel_max=64, discriminator_channel_base=2048, discriminator_channel_max=64,
                                 sg3_num_layers=6, sg3_margin_size=6,
                                 description="SG3-T 64px, 6 layers, widths 32-64 (CPU smoke/quick)"),
    # CPU-trainable 128 px fundus generator candidate: twice sg2-cpu64's feature maps at 64 and 128 px (32 at the
    # output, where the vessels are drawn) for about twice its cost per kimg on a CPU.
    "sg2-cpu128": StyleGANConfig(architecture="sg2", resolution=128, z_dim=64, w_dim=64, channel_base=4096,
                                 channel_max=64, discriminator_channel_base=4096, discriminator_channel_max=64,
                                 description="SG2 128px, widths 32-64 (CPU-trained fundus generator)"),
    # The papers' sizes.
    "sg2-paper256": StyleGANConfig(architecture="sg2", resolution=256, z_dim=512, w_dim=512, mapping_layers=8,
                                   channel_base=16384, channel_max=512, discriminator_channel_base=16384,
                                   discriminator_channel_max=512, minibatch_std_group_size=8,
                                   description="StyleGAN2 256px (ADA paper256: channel base 16384, 8-layer mapping, "
                                               "minibatch-std group 8)"),
    "sg3t-paper256": StyleGANConfig(architecture="sg3t", resolution=256, z_dim=512, w_dim=512, mapping_layers=2,
                                    channel_base=32768, channel_max=512, discriminator_channel_base=32768,
                                    discriminator_channel_max=512,
                                    description="StyleGAN3-T 256px (paper 1's generator; 14 layers)"),
    "sg2-gmia256": StyleGANConfig(architecture="sg2", resolution=256, image_channels=1, z_dim=512, w_dim=512,
                                  mapping_layers=8, channel_base=16384, channel_max=512,
                                  discriminator_channel_base=16384, discriminator_channel_max=512,
                                  description="StyleGAN2 256px grayscale (GMIA, chest X-ray)"),
    "sg2-ada512": StyleGANConfig(architecture="sg2", resolution=512, z_dim=512, w_dim=512, mapping_layers=2,
                                 channel_base=32768, channel_max=512, discriminator_channel_base=32768,
                                 discriminator_channel_max=512,
                                 description="StyleGAN2-ADA 512px, 2-layer mapping (k-SALSA)"),
}


def list_configs() -> dict[str, str]:
    """Names of the predefined configurations and one-line descriptions."""
    return {name: config.description for name, config in _NAMED.items()}


def get_config(name: str, **overrides) -> StyleGANConfig:
    """A predefined configuration, optionally with fields overridden.

    Args:
        name: One of :func:`list_configs` (e.g. ``"sg2-tiny"``, ``"sg3t-paper256"``).
        **overrides: Fields to change, e.g. ``image_channels=1`` for grayscale or ``resolution=64``.

    Raises:
        ValueError: If ``name`` is unknown or an override is not a config field / invalid.
    """
    if name not in _NAMED:
        raise ValueError(f"unknown StyleGAN config {name!r}; expected one of {sorted(_NAMED)}")
    known = {f.name for f in dataclasses.fields(StyleGANConfig)}
    unknown = set(overrides) - known
    if unknown:
        raise ValueError(f"unknown StyleGANConfig fields {sorted(unknown)}; expected a subset of {sorted(known)}")
    return _NAMED[name].replace(**overrides) if overrides else _NAMED[name]
