"""Paper 1's vessel edit and its three baselines as releases of a set of real fundus images.

:func:`vessel_edit_releases` applies the vascular chapter's recipe to any square RGB fundus images:

1. the generators chapter's fundus StyleGAN2 and the chapter's vessel U-Net (shipped weights, else the cache, else
   trained first);
2. the channel ranking on ``score_images`` generated images, exactly as the chapter finds it: vessel masks from the
   U-Net, Jacobian contribution scores of every S channel (Eq. 8-10); StyleSpace's channel and LowRankGAN's and
   ReSeFa's directions on the first ``baseline_images`` of them. The ranking and StyleSpace's channel depend on the
   generator and the scoring settings only: the chapter stores them, and a release with the same generator and
   settings reuses them (:func:`~anonpaper.experiments.vascular.pipeline.vessel_ranking`);
3. each input image projected into W+ (the StyleGAN2-ADA projector recipe) and mapped to S;
4. the edit: paper 1's top channel moved toward its mean by ``alpha`` (Eq. 11), or a baseline stepped so that its
   mean absolute image change on the first ``match_images`` images equals that of paper 1's edit at ``alpha`` (the
   chapter's matched comparison);
5. the edited rendering resized back to the input size.

What the release leaks also includes what the projection keeps of the image (alpha 0 releases the projection); the
vascular chapter measures both. :func:`method_spec` wraps it as a method of the one method registry for the folder
writer (``anonpaper anonymize sspace-vessel-edit``, ``stylespace``, ``lowrankgan``, ``resefa``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

if TYPE_CHECKING:
    import torch

    from anonpaper.methods.registry import MethodSpec

# Registry name -> the chapter's method name.
METHOD_NAMES = {"sspace-vessel-edit": "ours", "stylespace": "StyleSpace", "lowrankgan": "LowRankGAN",
                "resefa": "ReSeFa"}
OPTION_MINIMUMS = {"projector_steps": 1, "score_images": 2}


def vessel_edit_releases(images: np.ndarray, methods: Sequence[str], alphas: Sequence[float], generator_config: Any,
                         config: Any = None, *, seed: int = 0, log: Callable[[str], None] = lambda line: None,
                         progress: bool = False) -> tuple[dict[tuple[str, float], np.ndarray], dict[str, Any]]:
    """Paper 1's vessel edit and its baselines of real fundus images, at several strengths (one ranking, one
    projection).

    Args:
        images: uint8 ``(N, H, H, 3)`` real fundus images (any square size). Not modified.
        methods: Any of ``"ours"``, ``"StyleSpace"``, ``"LowRankGAN"`` and ``"ReSeFa"``.
        alphas: Edit strengths in [0, 1] (Eq. 11; the baselines are matched to ours at each strength; 0 releases
            the projection).
        generator_config: The generators chapter's config whose fundus generator and vessel U-Net are used.
        config: The vascular chapter's config (default its quick defaults): ``generator``, ``score_images``,
            ``baseline_images``, ``match_images``, ``chunk_size``, ``projector_steps``, ``projector_batch``,
            ``segmenter_epochs`` and ``seed`` (of the ranking) are read from it.
        seed: Seed of the projector.
        log: Receives one line per stage.
        progress: Show training progress when a network has to be trained.

    Returns:
        ``({(method, alpha): uint8 (N, H, H, 3)}, details)``; details hold the generator's source and kimg, the
        vessel U-Net's Dice, where the ranking came from (``"computed"`` or ``"cache"``), the edited channel, the
        projection's mean PSNR (dB), the mean absolute change of each edit at the generator's resolution and the
        seconds.

    Raises:
        ValueError: Images that are not square RGB uint8, an unknown method, an alpha outside [0, 1], or a
            baseline that found no direction on this generator.
    """

    from anonpaper.experiments.releases import check_number, square_images, to_uint8, to_unit
    from anonpaper.experiments.vascular.config import Config
    from anonpaper.experiments.vascular.pipeline import (OURS, EditSet, edit_methods, find_baselines,
                                                         generators_config_for, load_fundus_generator, project_real,
                                                         top_channel_edit, vessel_ranking, vessel_segmenter)
    from anonpaper.metrics.quality import psnr
    from anonpaper.models.stylegan import style_statistics
    from anonpaper.runtime import derive_seed

    images = square_images(images, "the vessel edit", channels=3,
                           kind="RGB fundus images (the fundus StyleGAN2 draws them)")
    unknown = [method for method in methods if method not in METHOD_NAMES.values()]
    if unknown or not methods:
        raise ValueError(f"vessel edits must be some of {list(METHOD_NAMES.values())}, got {list(methods)!r}")
    for alpha in alphas:
        check_number("vessel edit", "alpha", alpha, 0, 1)
    config = config or Config()
    started = time.perf_counter()
    generator_config = generators_config_for(config, generator_config)
    trained, _ = load_fundus_generator(generator_config, config.generator, progress)
    generator = trained.generator.eval()
    for parameter in generator.parameters():
        parameter.requires_grad_(False)
    resolution = int(generator.resolution)
    network, dice = vessel_segmenter(config, generator_config, progress)

    # The ranking, as the chapter finds it (on generated images, whose vessels the U-Net reads): the chapter's own
    # when it stored one for this generator and these settings.
    ranked = vessel_ranking(generator, trained, network, config, generator_config, reuse=True)
    origin = "stored by an earlier run" if ranked.source == "cache" else "computed and stored"
    log(f"vessel edit: the S channels ranked on {config.score_images} generated images ({origin})")
    top = ranked.scores.ranking[:1].tolist()
    statistics = style_statistics(generator, num_samples=1000, seed=derive_seed(config.seed, "style-statistics"))
    baselines = None
    if set(methods) - {OURS}:
        rows = slice(0, min(config.baseline_images, config.score_images))
        baselines = find_baselines(generator, ranked.ws[rows], ranked.codes.select(rows), ranked.masks[rows],
                                   config.chunk_size, config.score_image_batch, methods=tuple(methods),
                                   stylespace=ranked.stylespace)
    targets = to_unit(images, resolution)

    log(f"vessel edit: projecting {len(images)} images into W+ ({config.projector_steps} steps each)")
    ws, codes, reconstruction = project_real(generator, targets, config.projector_steps,
                                             derive_seed(seed, "projector"), batch_size=config.projector_batch)
    edit_set = EditSet("real", reconstruction, codes, ws, targets)
    released, changes = {}, {}
    for alpha in alphas:
        if baselines is None:  # ours alone: the baselines' matching is not needed
            edits = {OURS: {"images": top_channel_edit(generator, edit_set, top, statistics["mean"], float(alpha)),
                            "error": ""}}
        else:
            edits = {method: edit for (method, _), edit in edit_methods(
                generator, edit_set, top, top, statistics, baselines, [float(alpha)], config.match_images,
                methods=tuple(methods)).items()}
        for method in methods:
            edited = edits[method]["images"]
            if edited is None:
                raise ValueError(f"{method} found no edit on this generator: {edits[method]['error']}")
            changes[(method, float(alpha))] = float((edited - reconstruction).abs().mean())
            released[(method, float(alpha))] = to_uint8(edited, images.shape[1])
    details = {"generator_source": trained.source, "generator_kimg": float(trained.kimg), "resolution": resolution,
               "ranking": ranked.source,
               "vessel_unet_dice": dice, "top_channel": list(codes.layout.locate(int(top[0]))),
               "projection_psnr": float(psnr(reconstruction, targets)),
               "change": {f"{method} alpha={alpha:g}": value for (method, alpha), value in changes.items()},
               "seconds": time.perf_counter() - started}
    return released, details


def method_spec(name: str, chapter_config: Any, generator_config: Any,
                log: Callable[[str], None] = lambda line: None, progress: bool = False) -> "MethodSpec":
    """Paper 1's vessel edit (``sspace-vessel-edit``) or a baseline (``stylespace``, ``lowrankgan``, ``resefa``)
    as a registry method: the vascular chapter's recipe at ``chapter_config`` on the generators chapter's fundus
    generator at ``generator_config``.

    Options: ``alpha`` (edit strength in [0, 1], default the chapter's table strength, 0.5 as in paper 1's Table
    2), ``projector_steps`` and ``score_images`` (defaults: the chapter config's). The method's seed seeds the
    projector; the whole folder is edited at once (the channel ranking is found once).
    """
    import torch

    from anonpaper.experiments.releases import LEARNED_METHODS, check_number, whole_number_options
    from anonpaper.methods.registry import MethodSpec

    if name not in METHOD_NAMES:
        raise ValueError(f"{__name__} builds {sorted(METHOD_NAMES)}, not {name!r}")
    chapter = chapter_config
    defaults = {"alpha": chapter.table_alpha, "projector_steps": chapter.projector_steps,
                "score_images": chapter.score_images}

    def validate(options: dict[str, Any]) -> None:
        whole_number_options(name, options, OPTION_MINIMUMS)
        check_number(name, "alpha", options["alpha"], 0, 1)

    def apply(images: "torch.Tensor", masks: Any, seed: int, options: dict[str, Any]) -> "torch.Tensor":
        config = chapter.replace(projector_steps=int(options["projector_steps"]),
                                 score_images=int(options["score_images"]),
                                 baseline_images=min(chapter.baseline_images, int(options["score_images"])))
        released, _ = vessel_edit_releases(images.permute(0, 2, 3, 1).contiguous().numpy(), [METHOD_NAMES[name]],
                                           [float(options["alpha"])], generator_config, config, seed=seed, log=log,
                                           progress=progress)
        return torch.from_numpy(next(iter(released.values()))).permute(0, 3, 1, 2).contiguous()

    # The whole set at once: the ranking (and a baseline's matched step) is found once per folder.
    return MethodSpec(name=name, summary=LEARNED_METHODS[name], defaults=defaults, apply=apply, validate=validate,
                      whole_set=True)


__all__ = ["METHOD_NAMES", "method_spec", "vessel_edit_releases"]
