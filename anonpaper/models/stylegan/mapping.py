"""Mapping network z -> w (StyleGAN, Karras et al. 2019/2020): normalised z through an MLP with lr multiplier 0.01.

It also tracks the running mean ``w_avg`` of its outputs during training, used for the truncation trick and as the
projector's starting point.
"""

from __future__ import annotations

import torch
from torch import nn

from anonpaper.models.stylegan.layers import EqualizedLinear


class MappingNetwork(nn.Module):
    """MLP from latent z (N, z_dim) to w (N, num_ws, w_dim), broadcast to every synthesis layer.

    Args:
        z_dim: Latent size.
        w_dim: Output size.
        num_ws: Number of synthesis inputs w is broadcast to.
        num_layers: Depth of the MLP (8 for StyleGAN2, 2 for StyleGAN3 and ADA-512).
        lr_multiplier: Learning-rate multiplier of every layer.
        w_avg_beta: Decay of the running mean of w.
    """

    def __init__(self, z_dim: int, w_dim: int, num_ws: int, num_layers: int = 8, lr_multiplier: float = 0.01,
                 w_avg_beta: float = 0.998):
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"mapping num_layers must be >= 1, got {num_layers}")
        self.z_dim, self.w_dim, self.num_ws, self.w_avg_beta = z_dim, w_dim, num_ws, w_avg_beta
        sizes = [z_dim] + [w_dim] * num_layers
        self.layers = nn.ModuleList(
            EqualizedLinear(sizes[i], sizes[i + 1], activation="lrelu", lr_multiplier=lr_multiplier)
            for i in range(num_layers))
        self.register_buffer("w_avg", torch.zeros(w_dim))

    def forward(self, z: torch.Tensor, truncation_psi: float = 1.0, truncation_cutoff: int | None = None,
                update_w_avg: bool = False) -> torch.Tensor:
        """Map latents to broadcast intermediate latents.

        Args:
            z: (N, z_dim) float latents (standard normal in training).
            truncation_psi: Truncation strength; 1 = none, 0 = every w equals ``w_avg``.
            truncation_cutoff: Truncate only the first this-many of the ``num_ws`` copies (None: all).
            update_w_avg: Update the running mean of w with this batch (training only).

        Returns:
            (N, num_ws, w_dim) tensor.

        Raises:
            ValueError: If ``z`` is not (N, z_dim).
        """
        if z.ndim != 2 or z.shape[1] != self.z_dim:
            raise ValueError(f"z must have shape (N, {self.z_dim}), got {tuple(z.shape)}")
        # Normalise z to unit second moment so its scale does not matter (StyleGAN, Sec. 2).
        x = z * (z.square().mean(dim=1, keepdim=True) + 1e-8).rsqrt()
        for layer in self.layers:
            x = layer(x)
        if update_w_avg:
            with torch.no_grad():
                self.w_avg.copy_(x.detach().float().mean(dim=0).lerp(self.w_avg, self.w_avg_beta))
        ws = x.unsqueeze(1).repeat(1, self.num_ws, 1)
        if truncation_psi != 1.0:
            cutoff = self.num_ws if truncation_cutoff is None else truncation_cutoff
            ws = ws.clone()
            ws[:, :cutoff] = self.w_avg.to(ws.dtype).lerp(ws[:, :cutoff], truncation_psi)
        return ws
