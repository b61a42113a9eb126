"""Apply an anonymization method to a folder of images (the ``anonpaper anonymize`` command).

``anonymize_folder(method, input_dir, output_dir, options, progress)`` reads every image under ``input_dir``
(recursively; .png, .jpg, .jpeg, .bmp, .tif, .tiff), applies the method and writes the result under ``output_dir``
at the same relative path. Outputs are always PNG (lossless), so the method's pixel-level guarantees survive the
file: ``a/b.jpg`` becomes ``a/b.png``, ``a/b.png`` stays ``a/b.png``. Outputs never overwrite inputs: the output
folder must not be the input folder, lie inside it, or contain it, and must be absent or empty. Each file is written
atomically (temporary file, then rename).

Methods come from the one method registry (:mod:`anonpaper.methods.registry`: ``snow``, ``vs-snow``); the folder
adds two options of its own, ``seed`` and ``masks``. Options (``-o NAME VALUE`` on the command line):

snow:
    p (alias of replace_fraction, default 0.3), seed (default 0), mask_mode (per_channel | per_location),
    sampling (bernoulli | exact), channel_mean (list of per-channel means in RGB order, 0-255; default: the mean of
    all pixels of all images in the input folder, as the paper does over its dataset; a folder mixing RGB and
    grayscale images gets one mean per kind).
vs-snow:
    p / replace_fraction (default 0.3), seed (default 0), window_size (default 5), sampling, masks (REQUIRED: a
    folder of vessel masks with the same relative paths as the images, or the same path with a .png suffix; a mask
    pixel is vessel where its value is > 127, or > 0 for 0/1 masks).

A cohort folder written by ``anonpaper cohort generate`` (it holds ``cohort.json``) is read as a cohort: only its
``images/`` are anonymized (never its label masks under ``masks/``), and VS-Snow takes its vessel masks from
``masks/vessel/`` unless ``masks`` is given.

A bad option, folder or mask name stops the command before anything is written; an unreadable image or a mask of
the wrong size found midway stops it with the files written so far left in place (rerun into a new folder).

Randomness: image ``rel/path.png`` is processed with seed ``hash(seed, rel/path.png)``, so results do not depend on
the order or the number of files in the folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np

from anonpaper.cache import atomic_write_bytes
from anonpaper.methods.registry import ImageAnonymizer, get
from anonpaper.runtime import content_hash

# The marker file of a folder written by `anonpaper cohort generate` (anonpaper.data.export.MARKER).
COHORT_MARKER = "cohort.json"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")


# ---------------------------------------------------------------------------------------------------------------
# image files
# ---------------------------------------------------------------------------------------------------------------
def read_image(path: Path) -> np.ndarray:
    """Read an 8-bit image as uint8 (H, W, 3) RGB or (H, W) grayscale; ValueError names the file and problem."""
    image = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    if image is None:
        raise ValueError(f"{path}: cannot be read as an image")
    if image.dtype != np.uint8:
        raise ValueError(f"{path}: expected an 8-bit image, got dtype {image.dtype}")
    if image.ndim == 3 and image.shape[2] == 1:
        image = image[:, :, 0]
    if image.ndim == 3:
        if image.shape[2] != 3:
            raise ValueError(f"{path}: expected grayscale or RGB, got {image.shape[2]} channels (e.g. alpha)")
        image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    return image


def write_image(path: Path, image: np.ndarray) -> None:
    """Write a uint8 (H, W, 3) RGB or (H, W) image as PNG, atomically, creating parent folders."""
    encoded = cv2.cvtColor(image, cv2.COLOR_RGB2BGR) if image.ndim == 3 else image
    ok, buffer = cv2.imencode(".png", encoded)
    if not ok:
        raise ValueError(f"{path}: PNG encoding failed for an image of shape {image.shape}")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, buffer.tobytes())


def read_mask(path: Path, shape: tuple[int, int]) -> np.ndarray:
    """Read a binary mask (0/255 or 0/1 values) as bool (H, W); it must match the image's ``shape``."""
    mask = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
    if mask is None:
        raise ValueError(f"{path}: cannot be read as a mask image")
    if mask.shape != tuple(shape):
        raise ValueError(f"{path}: mask shape {mask.shape} differs from its image's {tuple(shape)}")
    return mask > (127 if mask.max() > 1 else 0)


def list_images(folder: Path) -> list[tuple[Path, Path]]:
    """(path, relative path) of every image file under ``folder``, sorted by relative path."""
    files = [path for path in folder.rglob("*") if path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES]
    return sorted(((path, path.relative_to(folder)) for path in files), key=lambda pair: pair[1].as_posix())


def _folder_dataset_options(anonymizer: ImageAnonymizer, files: list[tuple[Path, Path]]) -> dict[int, ImageAnonymizer]:
    """The anonymizer fitted to the folder's images, one per channel count (RGB and grayscale separately).

    Streamed: one image in memory at a time.
    """
    if not anonymizer.needs_fit:
        return {}
    channel_counts = sorted({1 if read_image(path).ndim == 2 else 3 for path, _ in files})

    def images_with(channels: int):
        for path, _ in files:
            image = read_image(path)
            image = image[:, :, None] if image.ndim == 2 else image
            if image.shape[2] == channels:
                yield image

    return {channels: anonymizer.fit(images_with(channels)) for channels in channel_counts}


def _check_folders(input_dir: Path, output_dir: Path) -> None:
    if not input_dir.is_dir():
        raise FileNotFoundError(f"input folder {input_dir} does not exist or is not a folder")
    source, target = input_dir.resolve(), output_dir.resolve()
    if target == source:
        raise ValueError(f"output folder {output_dir} is the input folder; outputs never overwrite inputs")
    if source in target.parents:
        raise ValueError(f"output folder {output_dir} lies inside the input folder {input_dir}; choose a folder "
                         "outside it")
    if target in source.parents:
        raise ValueError(f"output folder {output_dir} contains the input folder {input_dir}; choose another folder")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise FileExistsError(f"output folder {output_dir} exists and is not empty; give a new or empty folder")


def _find_mask(masks_dir: Path, relative: Path) -> Path:
    for candidate in (masks_dir / relative, (masks_dir / relative).with_suffix(".png")):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"no vessel mask for image {relative.as_posix()} in {masks_dir} (looked for "
                            f"{relative.as_posix()} and {relative.with_suffix('.png').as_posix()})")


def anonymize_folder(method: str, input_dir: Path | str, output_dir: Path | str, options: dict[str, Any] | None = None,
                     progress: bool = True) -> list[Path]:
    """Anonymize every image under ``input_dir`` into ``output_dir`` (same relative paths, PNG files).

    Args:
        method: A registered method (:func:`anonpaper.methods.registry.available`: ``"snow"``, ``"vs-snow"``).
        input_dir: Folder of 8-bit grayscale or RGB images (searched recursively). Never written to.
        output_dir: New or empty folder, not the input folder, not inside it and not containing it.
        options: Method options (module docstring), e.g. ``{"p": 0.3, "seed": 1}``; ``"p"`` is the
            method's ``replace_fraction``.
        progress: Show a tqdm progress bar.

    Returns:
        The written output paths, in input order.

    Raises:
        ValueError: Unknown method or option, bad option values, unreadable images, output folder = input folder
            or inside it, output name clashes, or a vessel mask that does not match its image.
        FileNotFoundError: Missing input folder, no images in it, missing ``masks`` folder or mask file.
        FileExistsError: Non-empty output folder.
    """
    options = dict(options or {})
    # The folder's own options; everything else is the method's (validated by the registry).
    seed = options.pop("seed", 0)
    masks_option = options.pop("masks", None)
    anonymizer = get(method, **options)
    input_dir, output_dir = Path(input_dir), Path(output_dir)
    _check_folders(input_dir, output_dir)
    if isinstance(seed, str) and seed.isdigit():
        seed = int(seed)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"option seed must be a non-negative integer, got {seed!r}")

    if (input_dir / COHORT_MARKER).is_file():
        # A written cohort: its images only (its masks/ are labels, not images to anonymize).
        if masks_option is None and anonymizer.method.needs_masks and (input_dir / "masks" / "vessel").is_dir():
            masks_option = input_dir / "masks" / "vessel"
        input_dir = input_dir / "images"
    masks_dir = None
    if anonymizer.method.needs_masks:
        if masks_option is None:
            raise ValueError(f"method {method!r} needs vessel masks: pass -o masks DIR (a folder of masks with the "
                             "images' file names)")
        masks_dir = Path(masks_option)
        if not masks_dir.is_dir():
            raise FileNotFoundError(f"masks folder {masks_dir} does not exist or is not a folder")
    elif masks_option is not None:
        raise ValueError(f"method {method!r} takes no masks option")

    files = list_images(input_dir)
    if not files:
        raise FileNotFoundError(f"no images ({', '.join(IMAGE_SUFFIXES)}) under {input_dir}")
    targets: dict[Path, Path] = {}
    for _, relative in files:
        target = relative.with_suffix(".png")
        if target in targets:
            raise ValueError(f"{relative.as_posix()} and {targets[target].as_posix()} would both be written as "
                             f"{target.as_posix()}; rename one")
        targets[target] = relative
    mask_paths = {relative: _find_mask(masks_dir, relative) for _, relative in files} if masks_dir else {}

    fitted = _folder_dataset_options(anonymizer, files)
    iterator = files
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(files, desc=f"anonymize {method}", unit="image")
    written = []
    for path, relative in iterator:
        image = read_image(path)
        mask = read_mask(mask_paths[relative], image.shape[:2]) if masks_dir else None
        # A per-file seed: results do not depend on file order or on which other files are in the folder.
        image_seed = int(content_hash(seed, relative.as_posix()), 16)
        try:
            channels = 1 if image.ndim == 2 else image.shape[2]
            result = fitted.get(channels, anonymizer).one(image, seed=image_seed, mask=mask)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from error
        target = output_dir / relative.with_suffix(".png")
        write_image(target, result)
        written.append(target)
    return written
