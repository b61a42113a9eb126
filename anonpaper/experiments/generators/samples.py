"""PNG samples from shipped generator weights (``anonpaper generate KIND``), for users and for checks outside the
package.

Example::

    write_samples("fundus-sg2", "samples/", 100, seed=0, truncation_psi=0.7)
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from anonpaper.experiments.generators.config import KINDS
from anonpaper.experiments.generators.pipeline import PROJECT_ROOT, generate_batches
from anonpaper.experiments.generators.weights import WeightsRefused, read_weights, weights_paths


class WeightsMissing(FileNotFoundError):
    """No weights file where one was asked for (the message says how to train them)."""


def sample_names(kind: str, count: int, seed: int) -> list[str]:
    """File names of ``count`` samples: ``<kind>-seed<seed>-<index>.png``, index from 0 (zero-padded)."""
    digits = max(5, len(str(count - 1)))
    return [f"{kind}-seed{seed}-{index:0{digits}d}.png" for index in range(count)]


def write_samples(kind: str, out_dir: str | Path, count: int, *, seed: int = 0, truncation_psi: float = 1.0,
                  weights: str | Path | None = None, overwrite: bool = False, batch_size: int = 32,
                  progress: bool = True) -> list[Path]:
    """Write ``count`` PNG images drawn by the shipped generator ``kind``.

    Image ``i`` comes from row ``i`` of z drawn with ``seed`` (the same as the chapter's
    :func:`~anonpaper.experiments.generators.pipeline.generate`), so a given seed always gives the same images,
    whatever the count.

    Args:
        kind: Generator kind (:data:`~anonpaper.experiments.generators.config.KINDS`).
        out_dir: Output folder; created when absent. A non-empty folder is refused unless ``overwrite`` (then files
            of the same names are replaced and other files kept).
        count: Number of images (>= 1).
        seed: Seed of the latents.
        truncation_psi: Truncation towards the mean w (1: none; smaller: more typical, less varied images).
        weights: A ``.pt`` weights file with its ``.json`` beside it (default: the project's ``weights/<kind>.pt``).
        overwrite: Allow a non-empty ``out_dir``.
        batch_size: Images per generator pass (memory).
        progress: Show a progress bar.

    Returns:
        The written files (uint8 RGB PNG for the fundus kinds, grayscale for the chest X-ray one).

    Raises:
        ValueError: An unknown kind, a count below 1, a non-finite or negative ``truncation_psi``.
        FileExistsError: ``out_dir`` is a file, or is not empty without ``overwrite``.
        WeightsMissing: No weights file (the message says how to train it).
        WeightsRefused: The weights do not verify (hash), are of another kind, or draw images with other channels.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown generator kind {kind!r}; expected one of {sorted(KINDS)}")
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
        raise ValueError(f"the number of images must be a positive integer, got {count!r}")
    if not (isinstance(truncation_psi, (int, float)) and math.isfinite(truncation_psi) and truncation_psi >= 0):
        raise ValueError(f"truncation psi must be a finite number >= 0 (1: no truncation), got {truncation_psi!r}")
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise FileExistsError(f"{out_dir} is a file, not a folder")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not overwrite:
        raise FileExistsError(f"{out_dir} is not empty; pass --overwrite to write into it (files of the same names "
                              "are replaced, other files are kept)")
    path = Path(weights) if weights is not None else weights_paths(PROJECT_ROOT / "weights", kind)[0]
    if not path.exists():
        how = (f"train them with `anonpaper generators train {kind}` (writes {path.parent}/{kind}.pt and "
               f"{kind}.json; --out DIR writes elsewhere), or pass --weights FILE")
        raise WeightsMissing(f"no weights for {kind} at {path}: {how}")
    generator, _ = read_weights(path, kind)
    channels = KINDS[kind][3]
    if generator.config.image_channels != channels:
        raise WeightsRefused(f"{path}: draws {generator.config.image_channels}-channel images; {kind} images have "
                             f"{channels}")
    from anonpaper.methods.folder import write_image

    out_dir.mkdir(parents=True, exist_ok=True)
    names = sample_names(kind, count, seed)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=count, unit="img", desc=f"{kind} samples")
    written = []
    for batch in generate_batches(generator, count, seed, truncation_psi, batch_size):
        pixels = (batch.permute(0, 2, 3, 1).numpy() * 255 + 0.5).clip(0, 255).astype(np.uint8)
        for image in pixels:
            target = out_dir / names[len(written)]
            write_image(target, image[:, :, 0] if channels == 1 else image)
            written.append(target)
        if bar is not None:
            bar.update(len(pixels))
    if bar is not None:
        bar.close()
    return written
