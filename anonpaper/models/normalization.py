"""Per-channel input normalisation stored with a model, so a trained network carries its training statistics.

The training helpers wrap a network in :class:`InputNormalization` with the mean and standard deviation of the
training images (after scaling to [0, 1]); prediction code then feeds images in [0, 1] and never needs to know the
statistics.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn


class InputNormalization(nn.Module):
    """``model((x - mean) / std)`` with per-channel ``mean`` and ``std`` kept as buffers (saved in state_dict).

    Args:
        model: The wrapped network, taking normalised (N, C, H, W) float input.
        mean: Per-channel means, length C.
        std: Per-channel standard deviations, length C, all positive.

    Attributes:
        model: The wrapped network (use it to reach layers, e.g. for Grad-CAM).

    Raises:
        ValueError: If mean and std differ in length or a std is not positive and finite.
    """

    def __init__(self, model: nn.Module, mean: Any, std: Any):
        super().__init__()
        mean_tensor = torch.as_tensor(np.asarray(mean, dtype=np.float32)).reshape(-1)
        std_tensor = torch.as_tensor(np.asarray(std, dtype=np.float32)).reshape(-1)
        if mean_tensor.shape != std_tensor.shape:
            raise ValueError(f"mean has {mean_tensor.numel()} channels but std has {std_tensor.numel()}")
        if not torch.all(torch.isfinite(std_tensor) & (std_tensor > 0)):
            raise ValueError(f"std must be positive and finite, got {std_tensor.tolist()}")
        self.model = model
        self.register_buffer("mean", mean_tensor.reshape(1, -1, 1, 1))
        self.register_buffer("std", std_tensor.reshape(1, -1, 1, 1))
        # Segmentation helpers pad inputs to this multiple; forward it from the wrapped network.
        self.size_multiple = getattr(model, "size_multiple", 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the wrapped model to normalised input.

        Args:
            x: Float tensor (N, C, H, W), images scaled to [0, 1].

        Returns:
            Whatever the wrapped model returns.
        """
        if x.ndim != 4 or x.shape[1] != self.mean.shape[1]:
            raise ValueError(f"expected input (N, {self.mean.shape[1]}, H, W), got {tuple(x.shape)}")
        return self.model((x - self.mean) / self.std)

    def forward_features(self, x: torch.Tensor) -> Any:
        """The wrapped model's ``forward_features`` on normalised input (for U-Net feature taps)."""
        return self.model.forward_features((x - self.mean) / self.std)


def unwrap(model: nn.Module) -> nn.Module:
    """The network inside an :class:`InputNormalization` wrapper (or ``model`` itself)."""
    return model.model if isinstance(model, InputNormalization) else model


def channel_statistics(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and standard deviation of float images (N, C, H, W), computed in float64.

    A channel with zero spread gets std 1 so normalisation stays finite.

    Returns:
        Two float32 tensors of length C.
    """
    if images.ndim != 4:
        raise ValueError(f"expected images (N, C, H, W), got shape {tuple(images.shape)}")
    values = images.transpose(0, 1).reshape(images.shape[1], -1).double()
    mean = values.mean(dim=1)
    std = values.std(dim=1, unbiased=False)
    std = torch.where(std > 1e-8, std, torch.ones_like(std))
    return mean.float(), std.float()
