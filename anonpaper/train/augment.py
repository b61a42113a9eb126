"""Simple torch augmentations driven by an explicit ``torch.Generator`` (deterministic for a fixed seed).

Paper 2 augments with a horizontal flip and a shift-scale-rotate, each with probability 0.25 (albumentations'
``ShiftScaleRotate`` defaults: shift up to 6.25% of the size, scale within +-10%, rotation within +-45 degrees,
reflected borders). :class:`FlipShiftScaleRotate` implements that with ``affine_grid``/``grid_sample`` and can
move segmentation masks with the same transform. :class:`DegradationAugment` blurs, coarsens and adds noise as
nnU-Net does, for instruments that must read images a little softer or noisier than the ones they learned.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from anonpaper.methods.baselines import gaussian_blur


class FlipShiftScaleRotate:
    """Random horizontal flip and random shift-scale-rotate, decided per image.

    Args:
        flip_probability: Probability of a horizontal flip (0.25 in paper 2).
        affine_probability: Probability of a shift-scale-rotate (0.25 in paper 2).
        shift_limit: Maximum shift as a fraction of the width/height.
        scale_limit: Scale factor drawn from [1 - scale_limit, 1 + scale_limit].
        rotate_limit: Maximum rotation in degrees (either direction).
        padding_mode: ``grid_sample`` padding for pixels from outside the image ("reflection", "border", "zeros").

    Call:
        ``augment(images, generator)`` -> images, or ``augment(images, generator, masks)`` -> (images, masks).
        ``images``: float (N, C, H, W); ``masks``: float or bool (N, H, W) or (N, 1, H, W), moved with the same
        transform by nearest-neighbour sampling. Inputs are not modified.
    """

    def __init__(self, flip_probability: float = 0.25, affine_probability: float = 0.25, shift_limit: float = 0.0625,
                 scale_limit: float = 0.1, rotate_limit: float = 45.0, padding_mode: str = "reflection"):
        for name, value in (("flip_probability", flip_probability), ("affine_probability", affine_probability)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value!r}")
        if shift_limit < 0 or not 0 <= scale_limit < 1 or rotate_limit < 0:
            raise ValueError(f"need shift_limit >= 0, 0 <= scale_limit < 1, rotate_limit >= 0; got {shift_limit}, "
                             f"{scale_limit}, {rotate_limit}")
        if padding_mode not in ("reflection", "border", "zeros"):
            raise ValueError(f"padding_mode must be reflection, border or zeros, got {padding_mode!r}")
        self.flip_probability, self.affine_probability = flip_probability, affine_probability
        self.shift_limit, self.scale_limit, self.rotate_limit = shift_limit, scale_limit, rotate_limit
        self.padding_mode = padding_mode

    def __call__(self, images: torch.Tensor, generator: torch.Generator, masks: torch.Tensor | None = None):
        if images.ndim != 4 or not images.is_floating_point():
            raise ValueError(f"images must be float (N, C, H, W), got {images.dtype} {tuple(images.shape)}")
        count, _, height, width = images.shape
        mask_was_3d = masks is not None and masks.ndim == 3
        mask_dtype = masks.dtype if masks is not None else None
        if masks is not None:
            masks = masks[:, None] if mask_was_3d else masks
            if masks.shape[0] != count or masks.shape[-2:] != images.shape[-2:]:
                raise ValueError(f"masks {tuple(masks.shape)} do not match images {tuple(images.shape)}")
            masks = masks.float()
        # All random draws happen on the CPU generator, whatever the device of the images.
        flip = torch.rand(count, generator=generator) < self.flip_probability
        affine = torch.rand(count, generator=generator) < self.affine_probability
        angle = (torch.rand(count, generator=generator) * 2 - 1) * math.radians(self.rotate_limit)
        scale = 1 + (torch.rand(count, generator=generator) * 2 - 1) * self.scale_limit
        shift = (torch.rand(count, 2, generator=generator) * 2 - 1) * self.shift_limit
        out_images = images.clone()
        out_masks = masks.clone() if masks is not None else None
        flip = flip.to(images.device)
        if flip.any():
            out_images[flip] = out_images[flip].flip(-1)
            if out_masks is not None:
                out_masks[flip] = out_masks[flip].flip(-1)
        if affine.any():
            index = affine.nonzero()[:, 0]
            # grid_sample maps each output location to an input location: the inverse of the forward
            # transform, i.e. rotation by -angle and scaling by 1/scale; normalised coordinates need the aspect
            # ratio on the off-diagonal terms.
            cosine = torch.cos(-angle[index]) / scale[index]
            sine = torch.sin(-angle[index]) / scale[index]
            theta = torch.zeros(index.numel(), 2, 3)
            theta[:, 0, 0] = cosine
            theta[:, 0, 1] = -sine * height / width
            theta[:, 1, 0] = sine * width / height
            theta[:, 1, 1] = cosine
            theta[:, :, 2] = -2 * shift[index]
            theta = theta.to(images.device, images.dtype)
            index = index.to(images.device)
            grid = F.affine_grid(theta, [index.numel(), images.shape[1], height, width], align_corners=False)
            out_images[index] = F.grid_sample(out_images[index], grid, mode="bilinear",
                                              padding_mode=self.padding_mode, align_corners=False)
            if out_masks is not None:
                out_masks[index] = F.grid_sample(out_masks[index], grid.to(out_masks.dtype), mode="nearest",
                                                 padding_mode=self.padding_mode, align_corners=False)
        if out_masks is None:
            return out_images
        out_masks = out_masks[:, 0] if mask_was_3d else out_masks
        return out_images, out_masks.to(mask_dtype)


def paper2_augmentation() -> FlipShiftScaleRotate:
    """The augmentation of paper 2: horizontal flip p = 0.25 and shift-scale-rotate p = 0.25."""
    return FlipShiftScaleRotate(0.25, 0.25)


def acquisition_augmentation() -> FlipShiftScaleRotate:
    """Pose changes of the size real (and phantom) acquisitions vary by: horizontal flip p = 0.5 (a left eye is a
    mirrored right eye) and shift-scale-rotate p = 0.5 within +-15 degrees, zero padding (the black surround of a
    fundus photograph). The cohort chapter's learnability checks use it: a classifier trained from scratch on a few
    hundred images otherwise memorises patients instead of learning the label."""
    return FlipShiftScaleRotate(0.5, 0.5, rotate_limit=15.0, padding_mode="zeros")


class DegradationAugment:
    """nnU-Net's image degradations (Isensee et al., Nature Methods 2021), each decided per image with nnU-Net's
    probability times ``strength``: a Gaussian blur (p 0.2, sigma uniform in ``sigma`` px), a low-resolution
    simulation (p 0.25: area downsampling by a factor uniform in ``zoom``, bilinear back up) and additive Gaussian
    noise (p 0.1, variance uniform in [0, 0.1] of the image's own variance, as nnU-Net draws it on z-scored images).

    A classifier that learned sharp procedural renderings only can read a little blur, compression or noise as a
    change of label; trained with these it learns labels that survive them.

    Args:
        strength: Factor on nnU-Net's probabilities (0.2, 0.25, 0.1), in (0, 4].
        sigma: Range of the blur's standard deviation in pixels.
        zoom: Range of the low-resolution simulation's downsampling factor, within (0, 1].

    Call:
        ``augment(images, generator)`` -> images, or ``augment(images, generator, masks)`` -> (images, masks) with
        the masks unchanged (the degradations move no pixel). ``images``: float (N, C, H, W) in [0, 1]; the output
        stays in [0, 1]. Inputs are not modified; every random draw comes from ``generator`` (on the CPU).

    Example:
        >>> images = torch.rand(4, 3, 16, 16, generator=torch.Generator().manual_seed(0))
        >>> augment = DegradationAugment(strength=4.0)
        >>> torch.equal(augment(images, torch.Generator().manual_seed(1)),
        ...             augment(images, torch.Generator().manual_seed(1)))
        True
    """

    def __init__(self, strength: float = 1.0, sigma: tuple[float, float] = (0.5, 1.0),
                 zoom: tuple[float, float] = (0.5, 1.0)):
        if not isinstance(strength, (int, float)) or not 0 < strength <= 4:
            raise ValueError(f"strength must lie in (0, 4] (nnU-Net's probabilities 0.2, 0.25, 0.1 times it), got "
                             f"{strength!r}")
        if not 0 < sigma[0] <= sigma[1]:
            raise ValueError(f"sigma must be a range 0 < low <= high in pixels, got {sigma!r}")
        if not 0 < zoom[0] <= zoom[1] <= 1:
            raise ValueError(f"zoom must be a range 0 < low <= high <= 1, got {zoom!r}")
        self.strength, self.sigma, self.zoom = float(strength), tuple(sigma), tuple(zoom)
        self.probabilities = (0.2 * strength, 0.25 * strength, 0.1 * strength)

    def __repr__(self) -> str:
        return f"DegradationAugment(strength={self.strength:g}, sigma={self.sigma}, zoom={self.zoom})"

    def __call__(self, images: torch.Tensor, generator: torch.Generator, masks: torch.Tensor | None = None):
        if images.ndim != 4 or not images.is_floating_point():
            raise ValueError(f"images must be float (N, C, H, W), got {images.dtype} {tuple(images.shape)}")
        count, _, height, width = images.shape
        # Every draw is made for every image, in one order, so the stream does not depend on earlier decisions.
        chosen = torch.rand(count, 3, generator=generator) < torch.tensor(self.probabilities)
        amount = torch.rand(count, 3, generator=generator)
        noise = torch.randn(images.shape, generator=generator).to(images)
        sigma = self.sigma[0] + (self.sigma[1] - self.sigma[0]) * amount[:, 0]
        out = gaussian_blur(images.clamp(0, 1), torch.where(chosen[:, 0], sigma, torch.zeros(count))).clone()
        for index in chosen[:, 1].nonzero()[:, 0].tolist():
            factor = self.zoom[0] + (self.zoom[1] - self.zoom[0]) * float(amount[index, 1])
            size = (max(2, round(height * factor)), max(2, round(width * factor)))
            out[index:index + 1] = F.interpolate(F.interpolate(out[index:index + 1], size=size, mode="area"),
                                                 size=(height, width), mode="bilinear", align_corners=False)
        spread = out.std(dim=(1, 2, 3), keepdim=True)
        scale = torch.where(chosen[:, 2], (0.1 * amount[:, 2]).sqrt(), torch.zeros(count)).to(out)
        out = (out + noise * spread * scale[:, None, None, None]).clamp(0, 1)
        return out if masks is None else (out, masks)
