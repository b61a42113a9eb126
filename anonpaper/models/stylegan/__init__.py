"""StyleGAN2 and StyleGAN3-T in pure PyTorch, with S-space (per-layer styles) as a first-class API.

Main entry points:

* :func:`get_config` / :func:`list_configs` / :class:`StyleGANConfig`: named architectures (tiny CPU, papers' 256 px).
* :class:`StyleGenerator`: ``mapping(z) -> ws``, ``styles(ws) -> StyleCodes``, ``synthesis(ws)``,
  ``synthesis_from_styles(codes)`` (exactly equal to ``synthesis(ws)`` for ``codes = styles(ws)``).
* :class:`StyleCodes` / :class:`StyleLayout`: named per-layer styles, flattening to K channels, index <-> (layer,
  channel); :func:`style_statistics` (generated samples) and :func:`codes_statistics` (e.g. projected real
  images) for per-channel mean/std.
* :class:`ResidualDiscriminator`: residual discriminator with minibatch std.
* :func:`project`: W / W+ projection of real images (StyleGAN2-ADA recipe).
* :func:`diff_augment`, :func:`adaptive_augment`, :class:`AdaptiveAugmentController`: augmentation for small data.

Training lives in :mod:`anonpaper.train.gan`.
"""

from anonpaper.models.stylegan.augment import AdaptiveAugmentController, adaptive_augment, diff_augment
from anonpaper.models.stylegan.config import StyleGANConfig, get_config, list_configs
from anonpaper.models.stylegan.discriminator import ResidualDiscriminator
from anonpaper.models.stylegan.generator import StyleGenerator
from anonpaper.models.stylegan.layers import to_signed_range, to_unit_range
from anonpaper.models.stylegan.projector import (PYRAMID_DISTANCE_NAME, ProjectionResult, feature_distance,
                                                 laplacian_pyramid_distance, project)
from anonpaper.models.stylegan.sspace import (StyleCodes, StyleLayout, codes_statistics, concatenate_codes,
                                              style_statistics)

__all__ = [
    "AdaptiveAugmentController", "PYRAMID_DISTANCE_NAME", "ProjectionResult", "ResidualDiscriminator", "StyleCodes",
    "StyleGANConfig", "StyleGenerator", "StyleLayout", "adaptive_augment", "codes_statistics", "concatenate_codes",
    "diff_augment", "feature_distance", "get_config", "laplacian_pyramid_distance", "list_configs", "project",
    "style_statistics", "to_signed_range", "to_unit_range",
]
