"""k-SALSA as a release of a set of fundus images: the recipe of the k-SALSA chapter applied to any images.

:func:`k_salsa_release` is the one place that turns member images and their patients into k-SALSA images (paper 4):
every image is projected into W+ of the generators chapter's fundus StyleGAN2 (the k-SALSA chapter's projector, no
noise maps), the images are grouped into clusters of at least ``k`` distinct patients in W+ (each patient's images
stay in one cluster), and each cluster's latent centroid is refined by local style alignment on the generators
chapter's vessel U-Net features with the k-SALSA chapter's learning rate and loss weights. Each image is released as
its cluster's synthetic image, resized back to the input size. The trade-offs chapter (07) and
``anonpaper anonymize k-salsa`` both call it.

:func:`method_spec` wraps it as a method of the one method registry (:mod:`anonpaper.methods.registry`) for the
folder writer: it needs the patient of every image and anonymizes the whole folder at once.

The module imports torch only where it runs (:mod:`anonpaper.experiments.releases` holds its summary).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

if TYPE_CHECKING:
    import torch

    from anonpaper.methods.registry import MethodSpec

NAME = "k-salsa"
GENERATOR_KIND = "fundus-sg2"
DEFAULT_K = 5


def k_salsa_release(images: np.ndarray, patients: Sequence[Any], k_values: Sequence[int], generator_config: Any, *,
                    projector_steps: int, alignment_steps: int, seed: int, recipe: Any = None,
                    log: Callable[[str], None] = lambda line: None,
                    progress: bool = False) -> tuple[dict[float, np.ndarray], dict[str, Any]]:
    """k-SALSA releases of ``images`` at every k of ``k_values``.

    Args:
        images: uint8 ``(N, H, H, 3)`` member images (any square size; resized to the generator's resolution for
            inversion and back for the release). Not modified.
        patients: ``(N,)`` patient id of each image: clusters hold at least k distinct patients.
        k_values: The k to release at (each >= 1; at most the number of patients).
        generator_config: The generators chapter's config whose fundus StyleGAN2 and vessel U-Net are used
            (:func:`anonpaper.experiments.generators.load_generator`: shipped weights, else the cache, else trained).
        projector_steps: Projector Adam steps per image into W+.
        alignment_steps: Local style alignment Adam steps per cluster.
        seed: Seed of the projector.
        recipe: The k-SALSA chapter's config whose projector batch, alignment learning rate, loss weights and patch
            grid are used (default: its quick defaults).
        log: Receives one line per stage.
        progress: Show the generator's training progress when it has to be trained.

    Returns:
        ``({k: uint8 (N, H, H, 3)}, details)``: each image replaced by its cluster's synthetic image; details hold
        the generator's source and kimg, the resolution, the inversion's mean PSNR (dB) and the seconds.

    Raises:
        ValueError: Images that are not square RGB uint8, a patient list of another length, or a k that is not a
            whole number in [1, number of patients].
    """
    import torch

    from anonpaper.experiments.generators.pipeline import load_generator
    from anonpaper.experiments.k_salsa.config import Config as KSalsaConfig
    from anonpaper.experiments.releases import resize_square_images, square_images, to_uint8, to_unit
    from anonpaper.experiments.k_salsa.pipeline import feature_network, feature_taps, invert
    from anonpaper.methods.ksalsa import k_salsa_synthesize, same_size_clusters
    from anonpaper.runtime import derive_seed

    images = square_images(images, "k-SALSA", channels=3, kind="RGB fundus images (the fundus StyleGAN2 draws them)")
    patients = np.asarray(patients).astype(str)
    if patients.shape != images.shape[:1]:
        raise ValueError(f"k-SALSA needs one patient id per image: {len(images)} images, patients of shape "
                         f"{patients.shape}")
    distinct = len(set(patients.tolist()))
    for k in k_values:
        if isinstance(k, bool) or int(k) != k or not 1 <= k <= distinct:
            raise ValueError(f"k-SALSA: k must be a whole number in [1, {distinct}] (the number of patients), "
                             f"got {k!r}")
    recipe = recipe or KSalsaConfig()
    started = time.perf_counter()
    trained = load_generator(GENERATOR_KIND, generator_config, progress=progress)
    generator = trained.generator
    resolution = int(generator.resolution)
    members = to_unit(images, resolution)
    log(f"k-SALSA: inverting {len(members)} images ({projector_steps} projector steps each)")
    inversion = invert(generator, members, projector_steps, derive_seed(seed, "k-salsa-projector"),
                       batch_size=recipe.projector_batch)
    network, _ = feature_network(generator_config)
    taps = feature_taps(network, generator_config.cohort_size)
    depth = len(taps(members[:1])) // 2
    released = {}
    for k in k_values:
        log(f"k-SALSA: k = {k}")
        labels = same_size_clusters(inversion.codes, int(k), patients)
        result = k_salsa_synthesize(generator, inversion.codes, taps, labels=labels, member_images=members,
                                    num_steps=alignment_steps, learning_rate=recipe.alignment_lr,
                                    content_weight=recipe.content_weight, style_weight=recipe.style_weight,
                                    patch_grid=recipe.patch_grid, content_tap=depth - 1, style_tap=0)
        synthetic = resize_square_images(result.aligned_images.cpu().float().clamp(0, 1), images.shape[1])
        released[float(k)] = to_uint8(synthetic[torch.as_tensor(labels)])
    details = {"generator_source": trained.source, "generator_kimg": float(trained.kimg), "resolution": resolution,
               "inversion_psnr": float(np.mean(inversion.psnr)), "seconds": time.perf_counter() - started}
    return released, details


def method_spec(name: str, chapter_config: Any, generator_config: Any,
                log: Callable[[str], None] = lambda line: None, progress: bool = False) -> "MethodSpec":
    """k-SALSA as a registry method: the k-SALSA chapter's recipe at ``chapter_config`` on the generators
    chapter's fundus StyleGAN2 at ``generator_config``.

    Options: ``k`` (patients per cluster, default 5), ``projector_steps`` and ``alignment_steps`` (defaults: the
    chapter config's). The method's seed seeds the projector. It needs the patient of every image
    (``needs_patients``) and anonymizes the whole set at once.
    """
    from anonpaper.experiments.releases import LEARNED_METHODS, whole_number_options
    from anonpaper.methods.registry import MethodSpec

    if name != NAME:
        raise ValueError(f"{__name__} builds {NAME!r}, not {name!r}")
    defaults = {"k": DEFAULT_K, "projector_steps": chapter_config.projector_steps,
                "alignment_steps": chapter_config.alignment_steps}

    def apply(images: "torch.Tensor", masks: Any, seed: int, options: dict[str, Any], *,
              patients: np.ndarray) -> "torch.Tensor":
        import torch

        array = images.permute(0, 2, 3, 1).contiguous().numpy()
        released, _ = k_salsa_release(array, patients, [int(options["k"])], generator_config,
                                      projector_steps=int(options["projector_steps"]),
                                      alignment_steps=int(options["alignment_steps"]), seed=seed,
                                      recipe=chapter_config, log=log, progress=progress)
        return torch.from_numpy(next(iter(released.values()))).permute(0, 3, 1, 2).contiguous()

    def validate(options: dict[str, Any]) -> None:
        whole_number_options(NAME, options, {"k": 1, "projector_steps": 1, "alignment_steps": 1})

    return MethodSpec(name=NAME, summary=LEARNED_METHODS[NAME], defaults=defaults, apply=apply, validate=validate,
                      needs_patients=True)


__all__ = ["DEFAULT_K", "GENERATOR_KIND", "NAME", "k_salsa_release", "method_spec"]
