"""Apply an anonymization method to a folder of images (the ``anonpaper anonymize`` command).

``anonymize_folder(method, input_dir, output_dir, options, progress)`` reads every image under ``input_dir``
(recursively; .png, .jpg, .jpeg, .bmp, .tif, .tiff), applies the method and writes the result under ``output_dir``
at the same relative path. Outputs are always PNG (lossless), so the method's pixel-level guarantees survive the
file: ``a/b.jpg`` becomes ``a/b.png``, ``a/b.png`` stays ``a/b.png``. Outputs never overwrite inputs: the output
folder must not be the input folder, lie inside it, or contain it, and must be absent or empty. Each file is written
atomically (temporary file, then rename).

Methods are a small registry (``FOLDER_METHODS``, name -> :class:`FolderMethod`); ``snow`` and ``vs-snow`` are
built in, and :func:`register_folder_method` adds others. Options (``-o NAME VALUE`` on the command line):

snow:
    p (alias of replace_fraction, default 0.3), seed (default 0), mask_mode (per_channel | per_location),
    sampling (bernoulli | exact), channel_mean (list of per-channel means in RGB order, 0-255; default: the mean of
    all pixels of all images in the input folder, as the paper does over its dataset; a folder mixing RGB and
    grayscale images gets one mean per kind).
vs-snow:
    p / replace_fraction (default 0.3), seed (default 0), window_size (default 5), sampling, masks (REQUIRED: a
    folder of vessel masks with the same relative paths as the images, or the same path with a .png suffix; a mask
    pixel is vessel where its value is > 127, or > 0 for 0/1 masks).

A bad option, folder or mask name stops the command before anything is written; an unreadable image or a mask of
the wrong size found midway stops it with the files written so far left in place (rerun into a new folder).

Randomness: image ``rel/path.png`` is processed with seed ``hash(seed, rel/path.png)``, so results do not depend on
the order or the number of files in the folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import cv2
import numpy as np
import torch

from anonpaper.runner.cache import atomic_write_bytes
from anonpaper.runtime import content_hash

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")


@dataclass(frozen=True)
class FolderMethod:
    """A method usable on a folder of images.

    Attributes:
        name: Registry name, e.g. ``"snow"``.
        defaults: Accepted option names and their defaults (``None`` = no default). Unknown options are an error.
        aliases: Short names mapped to option names (``{"p": "replace_fraction"}``).
        prepare: ``prepare(files, options) -> state``: one pass over the input files before any is written
            (e.g. the dataset channel mean); ``files`` are (path, relative path) pairs.
        apply: ``apply(image, mask, seed, options, state) -> image``: one uint8 (H, W, C) RGB or (H, W) image
            (and a bool (H, W) mask or None) to a new uint8 array of the same shape.
        validate: ``validate(options)`` raises ValueError on bad option values before any file is read.
        needs_masks: Whether the method needs a ``masks`` folder.
    """

    name: str
    defaults: dict[str, Any]
    apply: Callable[..., np.ndarray]
    prepare: Callable[..., Any] = lambda files, options: None
    validate: Callable[[dict[str, Any]], None] = lambda options: None
    aliases: dict[str, str] = field(default_factory=dict)
    needs_masks: bool = False


FOLDER_METHODS: dict[str, FolderMethod] = {}


def register_folder_method(method: FolderMethod) -> None:
    """Add (or replace) a method in the folder registry under ``method.name``."""
    FOLDER_METHODS[method.name] = method


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


def _as_tensor(image: np.ndarray) -> torch.Tensor:
    """uint8 (H, W, C) or (H, W) array -> uint8 (1, C, H, W) tensor."""
    tensor = torch.from_numpy(np.ascontiguousarray(image))
    tensor = tensor.unsqueeze(-1) if tensor.ndim == 2 else tensor
    return tensor.permute(2, 0, 1).unsqueeze(0).contiguous()


def _as_array(tensor: torch.Tensor, like: np.ndarray) -> np.ndarray:
    array = tensor[0].permute(1, 2, 0).cpu().numpy()
    return np.ascontiguousarray(array[:, :, 0] if like.ndim == 2 else array)


# ---------------------------------------------------------------------------------------------------------------
# Snow and VS-Snow on single images
# ---------------------------------------------------------------------------------------------------------------
def _snow_validate(options):
    from anonpaper.methods.snow import Snow

    means = options["channel_mean"]
    if means is not None and (not isinstance(means, (list, tuple)) or not means
                              or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in means)):
        raise ValueError(f"option channel_mean must be a list of numbers (RGB order, 0-255), got {means!r}")
    Snow(options["replace_fraction"], tuple(means or (0.0,)), options["mask_mode"], options["sampling"])


def _vs_snow_validate(options):
    from anonpaper.methods.snow import VSSnow

    VSSnow(options["replace_fraction"], options["window_size"], options["sampling"])


def _snow_prepare(files, options):
    """Per-channel means over all pixels of all images (as ``snow.channel_mean``), separately for RGB and gray."""
    if options["channel_mean"] is not None:
        return None
    # Streamed (one image in memory at a time): pixel-weighted running sums per channel count.
    totals: dict[int, tuple[torch.Tensor, int]] = {}
    for path, _ in files:
        image = _as_tensor(read_image(path))
        channels, pixels = image.shape[1], image.shape[2] * image.shape[3]
        previous_sum, previous_pixels = totals.get(channels, (torch.zeros(channels, dtype=torch.float64), 0))
        totals[channels] = (previous_sum + image.to(torch.float64).sum(dim=(0, 2, 3)), previous_pixels + pixels)
    return {channels: total / pixels for channels, (total, pixels) in totals.items()}


def _snow_apply(image, mask, seed, options, state):
    from anonpaper.methods.snow import snow

    channels = 1 if image.ndim == 2 else image.shape[2]
    means = options["channel_mean"] if options["channel_mean"] is not None else state[channels]
    result = snow(_as_tensor(image), options["replace_fraction"], means, mask_mode=options["mask_mode"],
                  sampling=options["sampling"], seed=seed)
    return _as_array(result, image)


def _vs_snow_apply(image, mask, seed, options, state):
    from anonpaper.methods.snow import vs_snow

    result = vs_snow(_as_tensor(image), torch.from_numpy(mask).unsqueeze(0), options["replace_fraction"],
                     window_size=options["window_size"], sampling=options["sampling"], seed=seed)
    return _as_array(result, image)


register_folder_method(FolderMethod(
    name="snow", apply=_snow_apply, prepare=_snow_prepare, validate=_snow_validate, aliases={"p": "replace_fraction"},
    defaults={"replace_fraction": 0.3, "seed": 0, "mask_mode": "per_channel", "sampling": "bernoulli",
              "channel_mean": None}))
register_folder_method(FolderMethod(
    name="vs-snow", apply=_vs_snow_apply, validate=_vs_snow_validate, aliases={"p": "replace_fraction"},
    needs_masks=True,
    defaults={"replace_fraction": 0.3, "seed": 0, "window_size": 5, "sampling": "bernoulli", "masks": None}))


# ---------------------------------------------------------------------------------------------------------------
# the folder driver
# ---------------------------------------------------------------------------------------------------------------
def _resolve_options(method: FolderMethod, options: dict[str, Any] | None) -> dict[str, Any]:
    resolved = dict(method.defaults)
    given: dict[str, str] = {}
    for name, value in (options or {}).items():
        target = method.aliases.get(name, name)
        if target not in method.defaults:
            accepted = sorted(set(method.defaults) | set(method.aliases))
            raise ValueError(f"method {method.name!r} has no option {name!r}; accepted options: {accepted}")
        if target in given:
            raise ValueError(f"method {method.name!r}: option {target!r} given twice (as {given[target]!r} and "
                             f"{name!r})")
        given[target] = name
        default = method.defaults[target]
        if isinstance(value, str) and isinstance(default, (int, float)) and not isinstance(default, bool):
            # YAML reads "1e-1" as a string; accept any number spelling for numeric options.
            try:
                value = type(default)(value)
            except ValueError:
                raise ValueError(f"method {method.name!r}: option {name!r} must be a number, got {value!r}") from None
        resolved[target] = value
    return resolved


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
        method: A name in ``FOLDER_METHODS`` (``"snow"``, ``"vs-snow"``).
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
    if method not in FOLDER_METHODS:
        raise ValueError(f"unknown method {method!r}; available: {sorted(FOLDER_METHODS)}")
    spec = FOLDER_METHODS[method]
    resolved = _resolve_options(spec, options)
    spec.validate(resolved)
    input_dir, output_dir = Path(input_dir), Path(output_dir)
    _check_folders(input_dir, output_dir)
    seed = resolved.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"option seed must be a non-negative integer, got {seed!r}")

    masks_dir = None
    if spec.needs_masks:
        if resolved.get("masks") is None:
            raise ValueError(f"method {method!r} needs vessel masks: pass -o masks DIR (a folder of masks with the "
                             "images' file names)")
        masks_dir = Path(resolved["masks"])
        if not masks_dir.is_dir():
            raise FileNotFoundError(f"masks folder {masks_dir} does not exist or is not a folder")

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

    state = spec.prepare(files, resolved)
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
            result = spec.apply(image, mask, image_seed, resolved, state)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from error
        target = output_dir / relative.with_suffix(".png")
        write_image(target, result)
        written.append(target)
    return written
