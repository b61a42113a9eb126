"""The style-based generator: mapping network + StyleGAN2 or StyleGAN3-T synthesis, with S-space as an API.

Example:
    >>> from anonpaper.models.stylegan import StyleGenerator, get_config
    >>> G = StyleGenerator(get_config("sg2-tiny"), seed=0)
    >>> z = G.sample_latents(2, seed=1)
    >>> ws = G.mapping(z)                       # (2, num_ws, w_dim)
    >>> codes = G.styles(ws)                    # S, by layer name
    >>> bool((G.synthesis(ws) == G.synthesis_from_styles(codes)).all())
    True
    >>> codes.flatten().shape[1] == G.style_layout.total_channels
    True
"""

from __future__ import annotations

import torch
from torch import nn

from anonpaper.models.stylegan.config import StyleGANConfig
from anonpaper.models.stylegan.mapping import MappingNetwork
from anonpaper.models.stylegan.sspace import StyleCodes, StyleLayout
from anonpaper.models.stylegan.synthesis_sg2 import SynthesisNetworkSG2
from anonpaper.models.stylegan.synthesis_sg3 import SynthesisNetworkSG3T


class StyleGenerator(nn.Module):
    """Mapping z -> w, styles w -> S, synthesis S -> image.

    Images are (N, image_channels, resolution, resolution) float32, nominally in [-1, 1] (not clamped; use
    :func:`~anonpaper.models.stylegan.layers.to_unit_range` for [0, 1]).

    Args:
        config: Architecture (see :mod:`~anonpaper.models.stylegan.config`).
        seed: Seed of the parameter initialisation (a forked RNG; the global generator is left untouched).
            None uses the global generator.
        implementation: Ops implementation of the synthesis network: ``"auto"`` (default: ``"fast"``, or
            ``$ANONPAPER_STYLEGAN_IMPL``), ``"reference"``, ``"fast"`` or ``"triton"`` (CUDA tensors only; others
            run ``"fast"``). See :mod:`anonpaper.models.stylegan.ops`. Changes no weight: switch any time with
            :meth:`set_implementation`.
        mixed_precision: None (float32 everywhere; the default, and the right choice on CPU), ``"fp16"`` or
            ``"bf16"``: the highest-resolution synthesis layers compute in that dtype with clamped activations
            (StyleGAN2-ADA / StyleGAN3 recipe); mapping, styles and the output image stay float32.
        mixed_precision_resolutions: How many of the highest resolutions run in reduced precision (4).
        conv_clamp: Activation clamp in the reduced-precision layers (256).
    """

    def __init__(self, config: StyleGANConfig, seed: int | None = 0, implementation: str = "auto",
                 mixed_precision: str | None = None, mixed_precision_resolutions: int = 4,
                 conv_clamp: float = 256.0):
        super().__init__()
        self.config = config
        self.z_dim, self.w_dim = config.z_dim, config.w_dim
        self.resolution, self.image_channels = config.resolution, config.image_channels
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            options = dict(implementation=implementation, mixed_precision=mixed_precision,
                           mixed_precision_resolutions=mixed_precision_resolutions, conv_clamp=conv_clamp)
            if config.architecture == "sg2":
                self.synthesis_network = SynthesisNetworkSG2(config, **options)
            else:
                self.synthesis_network = SynthesisNetworkSG3T(config, **options)
            self.num_ws = self.synthesis_network.num_ws
            self.mapping_network = MappingNetwork(config.z_dim, config.w_dim, self.num_ws, config.mapping_layers,
                                                  config.mapping_lr_multiplier)

    @property
    def implementation(self) -> str:
        """The synthesis network's ops implementation name (see :meth:`set_implementation`)."""
        return self.synthesis_network.implementation

    def set_implementation(self, implementation: str) -> "StyleGenerator":
        """Switch the synthesis ops (``"auto"``, ``"reference"``, ``"fast"``, ``"triton"``); returns self."""
        self.synthesis_network.set_implementation(implementation)
        return self

    @property
    def has_noise_inputs(self) -> bool:
        return self.config.architecture == "sg2"

    @property
    def style_layout(self) -> StyleLayout:
        """Names and channel counts of the style layers (K = ``style_layout.total_channels``)."""
        return self.synthesis_network.layout

    @property
    def w_avg(self) -> torch.Tensor:
        """Running mean of w, (w_dim,)."""
        return self.mapping_network.w_avg

    def sample_latents(self, batch_size: int, seed: int | None = None, generator: torch.Generator | None = None,
                       device=None) -> torch.Tensor:
        """Standard-normal z (batch_size, z_dim), drawn on CPU from ``generator`` or a fresh one seeded ``seed``."""
        if generator is None:
            generator = torch.Generator().manual_seed(0 if seed is None else seed)
        z = torch.randn(batch_size, self.z_dim, generator=generator)
        return z.to(device if device is not None else self.w_avg.device)

    def mapping(self, z: torch.Tensor, truncation_psi: float = 1.0, truncation_cutoff: int | None = None,
                update_w_avg: bool = False) -> torch.Tensor:
        """z (N, z_dim) -> ws (N, num_ws, w_dim); see :class:`~anonpaper.models.stylegan.mapping.MappingNetwork`."""
        return self.mapping_network(z, truncation_psi, truncation_cutoff, update_w_avg)

    def styles(self, ws: torch.Tensor) -> StyleCodes:
        """ws (N, num_ws, w_dim) -> S codes (per-layer affine outputs); differentiable."""
        return self.synthesis_network.styles(ws)

    def synthesis(self, ws: torch.Tensor, noise_mode: str = "const", noise_generator: torch.Generator | None = None,
                  noise_inputs: dict | None = None, update_emas: bool = False, return_features: bool = False):
        """ws (N, num_ws, w_dim) -> images (N, C, R, R).

        Args:
            ws: Per-layer latents (W+; repeat one w for W).
            noise_mode: StyleGAN2 only: ``"const"`` (fixed buffers, deterministic; default), ``"random"`` (drawn
                from ``noise_generator``, on CPU then moved) or ``"none"``.
            noise_generator: Generator for random noise.
            noise_inputs: StyleGAN2 only: explicit noise maps by conv layer name, each (N or 1, 1, R_l, R_l).
            update_emas: StyleGAN3 only: update the running input magnitudes (training).
            return_features: Also return ``[(layer_name, output), ...]`` in execution order.
        """
        return self.synthesis_network(ws, noise_mode=noise_mode, noise_generator=noise_generator,
                                      noise_inputs=noise_inputs, update_emas=update_emas,
                                      return_features=return_features)

    def synthesis_from_styles(self, codes: StyleCodes, noise_mode: str = "const",
                              noise_generator: torch.Generator | None = None, noise_inputs: dict | None = None,
                              update_emas: bool = False, return_features: bool = False):
        """S codes -> images; ``synthesis(ws) == synthesis_from_styles(styles(ws))`` exactly (same ops)."""
        return self.synthesis_network.forward_from_styles(codes, noise_mode=noise_mode,
                                                          noise_generator=noise_generator,
                                                          noise_inputs=noise_inputs, update_emas=update_emas,
                                                          return_features=return_features)

    def forward(self, z: torch.Tensor, truncation_psi: float = 1.0, noise_mode: str = "const",
                noise_generator: torch.Generator | None = None, update_emas: bool = False) -> torch.Tensor:
        """z (N, z_dim) -> images (N, C, R, R)."""
        ws = self.mapping(z, truncation_psi=truncation_psi, update_w_avg=update_emas)
        return self.synthesis(ws, noise_mode=noise_mode, noise_generator=noise_generator, update_emas=update_emas)
