"""The learned anonymization methods (generators, encoders, autoencoders) as releases of any image set, for
``anonpaper anonymize`` and chapter 07.

The pixel methods live in the one method registry (:mod:`anonpaper.methods.registry`). The learned methods need the
generators chapter's trained networks, which live at this layer, so each chapter that reproduces one exposes a
``release`` module with a function that anonymizes a set of images and a builder of a registry
:class:`~anonpaper.methods.registry.MethodSpec` around it; :func:`gan_method` finds the builder by name.

:data:`LEARNED_METHODS` (name -> summary) is read by the command line without importing torch: this module and the
release modules import torch only where they run.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import torch

    from anonpaper.methods.registry import MethodSpec

_VESSEL_EDIT = ("the fundus StyleGAN2 of the generators chapter; each image is projected into W+, edited and "
                "resized back (RGB fundus images of one square size)")
LEARNED_METHODS: dict[str, str] = {
    "k-salsa": "k-SALSA (paper 4): every image replaced by the synthetic image of its cluster of at least k patients, "
               "drawn by the fundus StyleGAN2 of the generators chapter from the cluster's latent centroid after "
               "local style alignment (RGB fundus images of one square size)",
    "sspace-vessel-edit": "paper 1's vessel edit: the S-space channel with the highest Jacobian contribution to the "
                          "vessels moved toward its mean by alpha (Eq. 11), on " + _VESSEL_EDIT,
    "stylespace": "StyleSpace (paper 1's baseline): the channel most locally active on the vessels, stepped to the "
                  "image change of paper 1's edit at alpha, on " + _VESSEL_EDIT,
    "lowrankgan": "LowRankGAN (paper 1's baseline): the first low-rank vessel direction in W of the middle layers, "
                  "stepped to the image change of paper 1's edit at alpha, on " + _VESSEL_EDIT,
    "resefa": "ReSeFa (paper 1's baseline): the first region-based semantic direction in W, stepped to the image "
              "change of paper 1's edit at alpha, on " + _VESSEL_EDIT,
    "gmia": "GMIA (paper 3): each chest X-ray encoded by the GMIA chapter's co-trained encoder and its latent code "
            "optimised for m-margin identity and finding-feature losses, then decoded (grayscale images of one "
            "square size)",
    "identity-swap": "the disentanglement identity swap (paper 5): each image's identity vector replaced by a new "
                     "identity sampled from the identity VAE (privacy term), decoded with its medical and other "
                     "vectors unchanged, by the disentanglement chapter's networks (grayscale chest X-ray or iris "
                     "images of one square size; -o modality cxr|iris)",
}
# Which chapter builds each method: ``(release module, study name)``; the module's
# ``method_spec(name, chapter_config, generator_config, log, progress)`` builds it from that chapter's config.
BUILDERS: dict[str, tuple[str, str]] = {
    "k-salsa": ("anonpaper.experiments.k_salsa.release", "05_k_salsa"),
    "sspace-vessel-edit": ("anonpaper.experiments.vascular.release", "03_vascular_sspace"),
    "stylespace": ("anonpaper.experiments.vascular.release", "03_vascular_sspace"),
    "lowrankgan": ("anonpaper.experiments.vascular.release", "03_vascular_sspace"),
    "resefa": ("anonpaper.experiments.vascular.release", "03_vascular_sspace"),
    "gmia": ("anonpaper.experiments.gmia.release", "04_gmia"),
    "identity-swap": ("anonpaper.experiments.disentanglement.release", "06_disentanglement"),
}


def is_learned_method(name: str) -> bool:
    """Whether ``name`` (underscores read as hyphens) is one of :data:`LEARNED_METHODS`."""
    return name.replace("_", "-") in LEARNED_METHODS


def learned_method(name: str, chapter_config: Any, generator_config: Any,
               log: Callable[[str], None] = lambda line: None, progress: bool = False) -> "MethodSpec":
    """The learned method ``name`` as a registry method.

    Args:
        name: One of :data:`LEARNED_METHODS`.
        chapter_config: The config of the chapter that reproduces the method (``BUILDERS[name][1]``) at the
            profile whose networks and recipe the method uses; the method's options override its fields.
        generator_config: The generators chapter's config at ``chapter_config.generators_profile`` (None for a
            chapter that trains its own decoder, e.g. the disentanglement chapter).
        log: Receives one line per stage.
        progress: Show training progress when a network has to be trained first.

    Raises:
        ValueError: ``name`` is not one of :data:`LEARNED_METHODS`.
    """
    key = name.replace("_", "-")
    if key not in LEARNED_METHODS:
        raise ValueError(f"unknown learned method {name!r}; available: {sorted(LEARNED_METHODS)}")
    module = importlib.import_module(BUILDERS[key][0])
    return module.method_spec(key, chapter_config, generator_config, log=log, progress=progress)


def resize_square_images(images: "torch.Tensor", size: int) -> "torch.Tensor":
    """Square ``[0, 1]`` images ``(N, C, H, H)`` to ``size`` px (area when shrinking, bilinear when enlarging)."""
    import torch.nn.functional as F

    if images.shape[-1] == size:
        return images
    mode = "area" if images.shape[-1] > size else "bilinear"
    kwargs = {} if mode == "area" else {"align_corners": False}
    return F.interpolate(images, size=(size, size), mode=mode, **kwargs).clamp(0, 1)


def square_images(images: Any, method: str, *, channels: int, kind: str) -> Any:
    """The images as uint8 ``(N, H, H, C)``; ValueError names the problem unless they are uint8 images of one square
    size with ``channels`` channels (grayscale may come as ``(N, H, H)``). ``kind`` says what the method works on."""
    import numpy as np

    if not isinstance(images, np.ndarray) or images.dtype != np.uint8 or images.ndim not in (3, 4):
        raise ValueError(f"{method} needs uint8 images (N, H, W[, C]), got {getattr(images, 'dtype', type(images))} "
                         f"{getattr(images, 'shape', '')}")
    images = images[..., None] if images.ndim == 3 else images
    if images.shape[-1] != channels:
        raise ValueError(f"{method} works on {kind}: the images must have {channels} channel"
                         f"{'s' if channels > 1 else ''}, got {images.shape[-1]}")
    if images.shape[1] != images.shape[2]:
        raise ValueError(f"{method} needs square images of one size, got {images.shape[1]} x {images.shape[2]}")
    return images


def to_unit(images: Any, side: int | None = None) -> "torch.Tensor":
    """uint8 ``(N, H, H, C)`` -> float ``(N, C, side, side)`` in [0, 1] (resized when ``side`` is given)."""
    import numpy as np
    import torch

    unit = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float() / 255
    return unit if side is None else resize_square_images(unit, side)


def to_uint8(images: "torch.Tensor", side: int | None = None) -> Any:
    """Float ``(N, C, H, H)`` in [0, 1] -> uint8 ``(N, side, side, C)`` (resized when ``side`` is given): what a
    release holds."""
    import torch

    images = images.float().clamp(0, 1)
    images = images if side is None else resize_square_images(images, side)
    return (images * 255).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()


def check_number(method: str, name: str, value: Any, low: float, high: float) -> None:
    """ValueError unless ``value`` is a number in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ValueError(f"method {method!r}: option {name!r} must be a number in [{low:g}, {high:g}], got {value!r}")


def whole_number_options(method: str, options: dict[str, Any], minimums: dict[str, int]) -> None:
    """ValueError unless every option in ``minimums`` is a whole number at or above its minimum."""
    for name, minimum in minimums.items():
        value = options[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < minimum:
            raise ValueError(f"method {method!r}: option {name!r} must be a whole number >= {minimum}, got {value!r}")


__all__ = ["BUILDERS", "LEARNED_METHODS", "check_number", "is_learned_method", "learned_method",
           "resize_square_images", "square_images", "to_uint8", "to_unit", "whole_number_options"]
