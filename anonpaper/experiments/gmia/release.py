"""GMIA's latent optimisation (paper 3) as a release of a set of chest X-rays.

:func:`gmia_releases` applies the GMIA chapter's networks and recipe to any square grayscale chest X-rays: the
co-trained encoder and generator (AE-GAN co-training on the chapter's cohort), the identity embedding E_id and the
finding classifier E_ut (all trained on the chapter's cohort, or read from the cache when the chapter ran at the
same profile). Each image is resized to the generator's resolution, encoded, its latent code optimised for the
m-margin identity loss and the finding-feature utility loss (``steps`` Adam steps), decoded and resized back.
:func:`method_spec` wraps it as a method of the one method registry (``anonpaper anonymize gmia``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

if TYPE_CHECKING:
    import torch

    from anonpaper.methods.registry import MethodSpec

NAME = "gmia"


def gmia_releases(images: np.ndarray, generator_config: Any, config: Any = None, *,
                  margins: Sequence[float] | None = None, log: Callable[[str], None] = lambda line: None,
                  progress: bool = False) -> tuple[dict[float, np.ndarray], dict[str, Any]]:
    """GMIA latent optimisation of chest X-rays with the GMIA chapter's networks, at one or more margins.

    Args:
        images: uint8 ``(N, H, H)`` or ``(N, H, H, 1)`` chest X-rays (any square size). Not modified.
        generator_config: The generators chapter's config (its chest X-ray StyleGAN2's architecture and
            resolution are co-training's).
        config: The GMIA chapter's config (default: its quick defaults): the cohort the networks learn, their
            recipes, and the latent optimisation's ``steps``, ``learning_rate`` and batch size.
        margins: Identity margins m of L_id = max(0, cos - m), each in [-1, 1] (default: the config's main
            ``margin``).
        log: Receives one line per stage.
        progress: Show training progress when a network has to be trained first.

    Returns:
        ``({margin: uint8 images of the input's shape}, details)``; details hold the mean final identity cosine
        of the images to their originals through E_id at each margin, the mean PSNR (dB) of the plain
        reconstructions and the seconds.

    Raises:
        ValueError: Images that are not square grayscale uint8, or a margin outside [-1, 1].
    """
    from anonpaper.experiments.gmia.config import Config
    from anonpaper.experiments.gmia.pipeline import (REAL, anonymise_images, co_train_projection, load_data,
                                                     to_tensor, train_finding_classifier, train_identity_network,
                                                     train_lpips_network)
    from anonpaper.experiments.releases import check_number, square_images, to_uint8, to_unit
    from anonpaper.methods.gmia import LatentOptimizationSettings
    from anonpaper.metrics.quality import psnr
    from anonpaper.runtime import get_device

    shape = images.shape
    grayscale = square_images(images, "GMIA", channels=1, kind="grayscale chest X-rays (the chest X-ray generator "
                                                                 "draws them)")
    config = config or Config()
    margins = [float(config.margin)] if margins is None else [float(margin) for margin in margins]
    for margin in margins:
        check_number("GMIA", "margin", margin, -1, 1)
    started = time.perf_counter()
    device = get_device(config.device)
    stylegan_config = generator_config.stylegan_config("cxr-sg2")
    resolution = int(stylegan_config.resolution)
    log(f"GMIA: the chapter's networks at {resolution} px (trained first when not cached)")
    data = load_data(config, resolution)
    lpips, lpips_info = train_lpips_network(data, config, device, progress)
    identity, identity_info = train_identity_network(data.images["train"], data.patients["train"], config, "E_id",
                                                     device, progress)
    utility, utility_info = train_finding_classifier(data.images["train"], data.labels["train"], config, REAL,
                                                     device, progress)
    encoder, generator, projection_info = co_train_projection(data, config, stylegan_config, lpips,
                                                              lpips_info["key"], device, progress)
    sized = to_uint8(to_unit(grayscale, resolution))[..., 0]  # what the chapter's networks take: uint8 (N, R, R)
    released, cosines, reconstruction_psnr = {}, {}, float("nan")
    for margin in margins:
        settings = LatentOptimizationSettings(steps=config.steps, learning_rate=config.learning_rate, margin=margin,
                                              identity_weight=1.0, utility_weight=1.0,
                                              batch_size=config.anonymise_batch_size, progress=progress)
        log(f"GMIA: optimising {len(sized)} latent codes ({config.steps} steps, margin {margin:g})")
        result = anonymise_images(encoder, generator, sized, identity, utility, settings,
                                  {"networks": {"E_id": identity_info["key"], "E_ut": utility_info["key"],
                                                "co-training": projection_info["key"]}, "release": True})
        released[margin] = to_uint8(to_tensor(result["images"]), grayscale.shape[1]).reshape(shape)
        cosines[margin] = float(np.mean(result["final_cosine"]))
        reconstruction_psnr = float(psnr(to_tensor(result["reconstructions"]), to_tensor(sized)))
    details = {"final_cosine": cosines, "reconstruction_psnr": reconstruction_psnr, "resolution": resolution,
               "seconds": time.perf_counter() - started}
    return released, details


def method_spec(name: str, chapter_config: Any, generator_config: Any,
                log: Callable[[str], None] = lambda line: None, progress: bool = False) -> "MethodSpec":
    """GMIA as a registry method: the GMIA chapter's networks and recipe at ``chapter_config``.

    Options: ``margin`` (identity margin m of L_id = max(0, cos - m), in [-1, 1]; default the chapter's main
    setting) and ``steps`` (latent optimisation Adam steps; default the chapter's). The optimisation is
    deterministic (no seed), and each image is optimised on its own, so the whole folder is passed at once only to
    share the networks.
    """
    from anonpaper.experiments.releases import LEARNED_METHODS, check_number, whole_number_options
    from anonpaper.methods.registry import MethodSpec

    if name != NAME:
        raise ValueError(f"{__name__} builds {NAME!r}, not {name!r}")
    defaults = {"margin": float(chapter_config.margin), "steps": chapter_config.steps}

    def validate(options: dict[str, Any]) -> None:
        whole_number_options(NAME, options, {"steps": 1})
        check_number(NAME, "margin", options["margin"], -1, 1)

    def apply(images: "torch.Tensor", masks: Any, seed: int, options: dict[str, Any]) -> "torch.Tensor":
        import torch

        margin = float(options["margin"])
        # The chapter's config keeps its main margin among its ablation margins (loosest first).
        margins = tuple(sorted(set(chapter_config.margins) | {margin}, reverse=True))
        config = chapter_config.replace(margin=margin, margins=margins, steps=int(options["steps"]))
        released, _ = gmia_releases(images.permute(0, 2, 3, 1).contiguous().numpy(), generator_config, config,
                                    log=log, progress=progress)
        return torch.from_numpy(released[margin]).permute(0, 3, 1, 2).contiguous()

    return MethodSpec(name=NAME, summary=LEARNED_METHODS[NAME], defaults=defaults, apply=apply, validate=validate,
                      whole_set=True)


__all__ = ["NAME", "gmia_releases", "method_spec"]
