"""Differentiable augmentation for GAN training on small datasets: DiffAugment and an ADA-style adaptive variant.

* DiffAugment (Zhao et al. 2020): colour (brightness, saturation, contrast), translation (up to 1/8 of the side,
  zero fill) and cutout (a square of half the side) applied to every real and generated image the discriminator
  sees, always.
* ADA-style (Karras et al. 2020, "Training GANs with limited data"): the same transforms plus x-flip and rotation,
  each applied per image with probability ``p``; ``p`` is adjusted from the overfitting heuristic
  ``r_t = E[sign(D(real))]`` toward a target (0.6). This is a reduced pipeline (the paper has 18 transforms incl.
  anisotropic scaling and filtering), stated so where used.

Every random draw comes from an explicit ``torch.Generator`` (on CPU) so training is reproducible and resumable.
Images are (N, C, H, W) in [-1, 1]; all ops are differentiable with respect to the images.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

POLICIES = ("color", "translation", "cutout", "flip", "rotation")


def _uniform(n: int, generator: torch.Generator | None, device) -> torch.Tensor:
    return torch.rand(n, generator=generator).to(device)


def _gate(x: torch.Tensor, augmented: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is None:
        return augmented
    return torch.where(mask[:, None, None, None], augmented, x)


def augment_color(x, generator=None, mask=None):
    """Random brightness (+-0.5), saturation (x[0, 2]) and contrast (x[0.5, 1.5]), as in DiffAugment."""
    n, device = x.shape[0], x.device
    y = x + (_uniform(n, generator, device) - 0.5)[:, None, None, None]
    if x.shape[1] > 1:
        mean = y.mean(dim=1, keepdim=True)
        y = (y - mean) * (_uniform(n, generator, device) * 2)[:, None, None, None] + mean
    mean = y.mean(dim=[1, 2, 3], keepdim=True)
    y = (y - mean) * (_uniform(n, generator, device) + 0.5)[:, None, None, None] + mean
    return _gate(x, y, mask)


def augment_translation(x, ratio: float = 0.125, generator=None, mask=None):
    """Integer shift by up to ``ratio`` of the side in x and y, zero fill."""
    n, _, height, width = x.shape
    shift = max(1, int(round(height * ratio)))
    offsets = torch.randint(-shift, shift + 1, (n, 2), generator=generator)
    padded = F.pad(x, [shift, shift, shift, shift])
    rows = [padded[i, :, shift + int(dy): shift + int(dy) + height, shift + int(dx): shift + int(dx) + width]
            for i, (dy, dx) in enumerate(offsets.tolist())]
    return _gate(x, torch.stack(rows), mask)


def augment_cutout(x, ratio: float = 0.5, generator=None, mask=None):
    """Zero a square of side ``ratio * H`` at a random position (may extend past the border)."""
    n, _, height, width = x.shape
    size_y, size_x = int(height * ratio + 0.5), int(width * ratio + 0.5)
    top = torch.randint(0, height + (1 - size_y % 2), (n, 1, 1), generator=generator).to(x.device) - size_y // 2
    left = torch.randint(0, width + (1 - size_x % 2), (n, 1, 1), generator=generator).to(x.device) - size_x // 2
    rows = torch.arange(height, device=x.device)[None, :, None]
    columns = torch.arange(width, device=x.device)[None, None, :]
    inside = (rows >= top) & (rows < top + size_y) & (columns >= left) & (columns < left + size_x)
    return _gate(x, x * (~inside).unsqueeze(1).to(x.dtype), mask)


def augment_flip(x, generator=None, mask=None):
    """Horizontal flip of the images selected by ``mask`` (None: each image with probability 1/2)."""
    if mask is None:
        mask = (torch.rand(x.shape[0], generator=generator) < 0.5).to(x.device)
    return _gate(x, x.flip(3), mask)


def augment_rotation(x, max_degrees: float = 30.0, generator=None, mask=None):
    """Rotation by a uniform angle in [-max_degrees, max_degrees] (paper 1), bilinear, filled with -1 (black)."""
    n = x.shape[0]
    angle = (_uniform(n, generator, x.device) * 2 - 1) * math.radians(max_degrees)
    cos, sin = angle.cos(), angle.sin()
    zero = torch.zeros_like(cos)
    theta = torch.stack([torch.stack([cos, -sin, zero], 1), torch.stack([sin, cos, zero], 1)], 1).to(x.dtype)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    y = F.grid_sample(x + 1, grid, mode="bilinear", padding_mode="zeros", align_corners=False) - 1
    return _gate(x, y, mask)


_FUNCTIONS = {"color": augment_color, "translation": augment_translation, "cutout": augment_cutout,
              "flip": augment_flip, "rotation": augment_rotation}


def _parse(policy: str) -> list[str]:
    names = [p.strip() for p in policy.split(",") if p.strip()]
    unknown = [p for p in names if p not in POLICIES]
    if unknown:
        raise ValueError(f"unknown augmentations {unknown}; expected names from {POLICIES}")
    return names


def diff_augment(x: torch.Tensor, policy: str = "color,translation,cutout",
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """DiffAugment: apply every transform of ``policy`` (comma-separated names) to every image."""
    for name in _parse(policy):
        x = _FUNCTIONS[name](x, generator=generator)
    return x


def adaptive_augment(x: torch.Tensor, probability: float, policy: str = "flip,translation,color,cutout",
                     generator: torch.Generator | None = None) -> torch.Tensor:
    """ADA-style: each transform of ``policy`` applied to each image independently with ``probability``.

    With probability 0 the input is returned unchanged (same object); random draws are still consumed so that the
    random stream does not depend on ``probability``.
    """
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"augmentation probability must be in [0, 1], got {probability}")
    out = x
    for name in _parse(policy):
        mask = (torch.rand(x.shape[0], generator=generator) < probability).to(x.device)
        out = _FUNCTIONS[name](out, generator=generator, mask=mask)
    return x if probability == 0 else out


class AdaptiveAugmentController:
    """Adjusts ADA's probability p so that ``r_t = E[sign(D(real))]`` stays near ``target``.

    Args:
        target: Target of the overfitting heuristic (0.6 in ADA).
        adjustment_images: Images over which p can move from 0 to 1 (500k in ADA; use less for tiny runs).
        initial_probability: Starting p.
    """

    def __init__(self, target: float = 0.6, adjustment_images: int = 500_000, initial_probability: float = 0.0):
        self.target, self.adjustment_images, self.probability = target, adjustment_images, initial_probability
        self._sign_sum, self._count = 0.0, 0

    def accumulate(self, real_logits: torch.Tensor) -> None:
        self._sign_sum += float(torch.sign(real_logits.detach()).sum())
        self._count += int(real_logits.numel())

    def update(self) -> float:
        """Move p by ``sign(r_t - target) * images_seen / adjustment_images``; returns r_t (nan if no data)."""
        if self._count == 0:
            return float("nan")
        heuristic = self._sign_sum / self._count
        step = math.copysign(self._count / self.adjustment_images, heuristic - self.target)
        self.probability = float(min(max(self.probability + step, 0.0), 1.0))
        self._sign_sum, self._count = 0.0, 0
        return heuristic

    def state_dict(self) -> dict:
        return {"probability": self.probability, "sign_sum": self._sign_sum, "count": self._count,
                "target": self.target, "adjustment_images": self.adjustment_images}

    def load_state_dict(self, state: dict) -> None:
        self.probability, self._sign_sum, self._count = state["probability"], state["sign_sum"], state["count"]
        self.target, self.adjustment_images = state["target"], state["adjustment_images"]
