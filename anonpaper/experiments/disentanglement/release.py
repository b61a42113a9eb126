"""The disentanglement identity swap (paper 5) as a release of a set of iris or chest X-ray images.

:func:`identity_swap_releases` applies the disentanglement chapter's networks to any grayscale images of one
modality: the disentanglement network of that cohort (medical, identity and "other" vectors; trained on the
chapter's cohort, or read from the cache) and its identity VAE trained with the privacy term. Each image is resized
to the chapter's image size, encoded, its identity vector moved toward a new identity sampled from the VAE by
``strength`` (1: replaced, the paper's anonymisation; 0: a plain reconstruction), decoded with its medical and
other vectors unchanged and resized back. :func:`method_spec` wraps it as a method of the one method registry
(``anonpaper anonymize identity-swap``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

if TYPE_CHECKING:
    import torch

    from anonpaper.methods.registry import MethodSpec

NAME = "identity-swap"
MODALITIES = ("cxr", "iris")


def identity_swap_releases(images: np.ndarray, modality: str, strengths: Sequence[float], config: Any = None, *,
                           seed: int = 0, log: Callable[[str], None] = lambda line: None,
                           progress: bool = False) -> tuple[dict[float, np.ndarray], dict[str, Any]]:
    """Paper 5's anonymisation of grayscale images with the disentanglement chapter's networks.

    Args:
        images: uint8 ``(N, H, H)`` or ``(N, H, H, 1)`` images of one modality (any square size). Not modified.
        modality: ``"cxr"`` (chest X-rays; identity learnt with the Siamese loss) or ``"iris"``.
        strengths: Identity replacements in [0, 1] (1: the paper's anonymisation; 0: the reconstruction); one new
            identity per image serves every strength.
        config: The disentanglement chapter's config (default: its quick defaults).
        seed: Seed of the sampled identities.
        log: Receives one line per stage.
        progress: Show training progress when a network has to be trained first.

    Returns:
        ``({strength: uint8 images of the input's shape}, details)``; details hold the chapter size, the mean
        cosine between the images' identity vectors and the decoded ones at each strength, and the seconds.

    Raises:
        ValueError: Images that are not square grayscale uint8, an unknown modality or a strength outside [0, 1].
    """
    import torch

    from anonpaper.experiments.disentanglement.config import Config
    from anonpaper.experiments.disentanglement.pipeline import load_data, train_network, train_vae
    from anonpaper.experiments.releases import check_number, square_images, to_uint8, to_unit
    from anonpaper.methods.disentangle import anonymise, new_identities
    from anonpaper.methods.disentangle import to_uint8 as decoded_to_uint8
    from anonpaper.runtime import derive_seed
    from anonpaper.train.disentangle import encode_all, image_tensor

    if modality not in MODALITIES:
        raise ValueError(f"identity swap: modality must be one of {list(MODALITIES)}, got {modality!r}")
    for strength in strengths:
        check_number("identity swap", "strength", strength, 0, 1)
    shape = images.shape
    grayscale = square_images(images, "identity swap", channels=1, kind=f"grayscale {modality} images")
    config = config or Config()
    started = time.perf_counter()
    log(f"identity swap: the chapter's {modality} networks at {config.image_size} px (trained first when not "
        "cached)")
    arrays = load_data(config, progress)[modality]
    model, _ = train_network(arrays, config, progress=progress)
    vae, _ = train_vae(model, arrays, config, privacy=True, progress=progress)
    sized = to_uint8(to_unit(grayscale, config.image_size))[..., 0]  # what the network takes: uint8 (N, S, S)
    medical, identity, other = encode_all(model, image_tensor(sized))
    replacement = new_identities(len(sized), "vae", seed=derive_seed(seed, "identity-swap"), vae=vae)
    released, cosines = {}, {}
    for strength in strengths:
        decoded, new_identity = anonymise(model, medical, identity, other, replacement, float(strength))
        # Rounded to 8 bits at the network's size, as a decoded image is, then resized to the input's.
        released[float(strength)] = to_uint8(to_unit(decoded_to_uint8(decoded)[..., None]),
                                             grayscale.shape[1]).reshape(shape)
        cosines[float(strength)] = float(torch.nn.functional.cosine_similarity(identity, new_identity, dim=1).mean())
    details = {"image_size": config.image_size, "identity_cosine": cosines, "seconds": time.perf_counter() - started}
    return released, details


def method_spec(name: str, chapter_config: Any, generator_config: Any = None,
                log: Callable[[str], None] = lambda line: None, progress: bool = False) -> "MethodSpec":
    """The identity swap as a registry method: the disentanglement chapter's networks at ``chapter_config``
    (``generator_config`` is not used: the chapter trains its own decoder).

    Options: ``modality`` (``cxr`` or ``iris``, default ``cxr``) and ``strength`` (identity replacement in
    [0, 1], default 1: the paper's anonymisation). The method's seed seeds the sampled identities.
    """
    from anonpaper.experiments.releases import LEARNED_METHODS, check_number
    from anonpaper.methods.registry import MethodSpec

    if name != NAME:
        raise ValueError(f"{__name__} builds {NAME!r}, not {name!r}")

    def validate(options: dict[str, Any]) -> None:
        if options["modality"] not in MODALITIES:
            raise ValueError(f"method {NAME!r}: option 'modality' must be one of {list(MODALITIES)}, got "
                             f"{options['modality']!r}")
        check_number(NAME, "strength", options["strength"], 0, 1)

    def apply(images: "torch.Tensor", masks: Any, seed: int, options: dict[str, Any]) -> "torch.Tensor":
        import torch

        released, _ = identity_swap_releases(images.permute(0, 2, 3, 1).contiguous().numpy(), options["modality"],
                                             [float(options["strength"])], chapter_config, seed=seed, log=log,
                                             progress=progress)
        return torch.from_numpy(next(iter(released.values()))).permute(0, 3, 1, 2).contiguous()

    return MethodSpec(name=NAME, summary=LEARNED_METHODS[NAME], defaults={"modality": "cxr", "strength": 1.0},
                      apply=apply, validate=validate, whole_set=True)


__all__ = ["MODALITIES", "NAME", "identity_swap_releases", "method_spec"]
