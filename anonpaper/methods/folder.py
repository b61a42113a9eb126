"""Apply an anonymization method to a folder of images (the ``anonpaper anonymize`` command).

``anonymize_folder(method, input_dir, output_dir, options, progress)`` reads every image under ``input_dir``
(recursively; .png, .jpg, .jpeg, .bmp, .tif, .tiff), applies the method and writes the result under ``output_dir``
at the same relative path. Outputs are always PNG (lossless), so the method's pixel-level guarantees survive the
file: ``a/b.jpg`` becomes ``a/b.png``, ``a/b.png`` stays ``a/b.png``. Outputs never overwrite inputs: the output
folder must not be the input folder, lie inside it, or contain it, and must be absent or empty. Each file is written
atomically (temporary file, then rename).

A release describes itself: beside the images, ``output_dir`` receives ``pairing.csv`` (one row per released image:
``file``, its path under ``output_dir``; ``source``, the path of its source image under ``input_dir``; and
``patient_id`` where the patients are known) and ``release.json`` (the method, its resolved options, including those
computed from the folder such as Snow's channel means, the seed, the input folder and the counts).

Methods come from the one method registry (:mod:`anonpaper.methods.registry`); the folder adds options of its own,
``seed``, ``masks`` and ``patients``. Options (``-o NAME VALUE`` on the command line):

snow:
    p (alias of replace_fraction, default 0.3), seed (default 0), mask_mode (per_channel | per_location),
    sampling (bernoulli | exact), channel_mean (list of per-channel means in RGB order, 0-255; default: the mean of
    all pixels of all images in the input folder, as the paper does over its dataset; a folder mixing RGB and
    grayscale images gets one mean per kind).
vs-snow:
    p / replace_fraction (default 0.3), seed (default 0), window_size (default 5), sampling, masks (REQUIRED: a
    folder of vessel masks with the same relative paths as the images, or the same path with a .png suffix; a mask
    pixel is vessel where its value is > 127, or > 0 for 0/1 masks).
blur:
    sigma (Gaussian standard deviation in pixels, default 2).
pixelate:
    block_size / block (block side in pixels, default 4).
gaussian-noise:
    sigma (standard deviation in [0, 1] intensity units, default 0.1), seed (default 0).
constant:
    value (per-channel value, 0-255; default: the folder's channel mean, like Snow's).
k-same-pixel:
    k (patients per cluster, default 5), patients (for a plain folder: a CSV with columns ``file``, the image's path
    under the folder, and ``patient``). Every image of a cluster of at least k patients is replaced by the cluster's
    mean image, so all images of one channel count must share one size.

The learned methods (``k-salsa``, ``sspace-vessel-edit``, ``stylespace``, ``lowrankgan``, ``resefa``, ``gmia``,
``identity-swap``) are built at the experiments layer around the chapters' trained networks
(:mod:`anonpaper.experiments.releases`) and passed in as a :class:`~anonpaper.methods.registry.MethodSpec`; they
take the whole folder at once (one size, one channel count). Their options: ``k`` (k-SALSA), ``alpha`` (the vessel
edits), ``margin`` and ``steps`` (GMIA), ``modality`` and ``strength`` (identity swap), the inversion's step counts,
and ``profile`` on the command line.

A cohort folder written by ``anonpaper cohort generate`` (it holds ``cohort.json``) is read as a cohort: only its
``images/`` are anonymized (never its label masks under ``masks/``), the release keeps the layout (its images go to
``output_dir/images/``, with the same file names), the patients come from its ``manifest.csv``, and VS-Snow takes
its vessel masks from ``masks/vessel/`` unless ``masks`` is given.

A bad option, folder or mask name stops the command before anything is written; an unreadable image or a mask of
the wrong size found midway stops it with the files written so far left in place (rerun into a new folder).

Randomness: image ``rel/path.png`` is processed with seed ``hash(seed, rel/path.png)``, so results do not depend on
the order or the number of files in the folder (a method that mixes patients, k-same, is deterministic).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pandas as pd

from anonpaper import __version__
from anonpaper.cache import atomic_write_bytes
from anonpaper.data.export import MANIFEST, MARKER as COHORT_MARKER
from anonpaper.methods.registry import ImageAnonymizer, MethodSpec, get
from anonpaper.runtime import content_hash

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")
PAIRING, RELEASE = "pairing.csv", "release.json"


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


def _cohort_patients(folder: Path) -> dict[str, str]:
    """Patient of each image of a written cohort, by its path under ``images/``."""
    manifest = folder / MANIFEST
    if not manifest.is_file():
        raise FileNotFoundError(f"{manifest} is missing: {folder} has {COHORT_MARKER} but no manifest")
    table = pd.read_csv(manifest, dtype=str, keep_default_na=False)
    for column in ("image_path", "patient_id"):
        if column not in table.columns:
            raise ValueError(f"{manifest}: needs a {column!r} column")
    return {Path(path).relative_to("images").as_posix(): patient
            for path, patient in zip(table["image_path"], table["patient_id"])}


def _csv_patients(path: Path, folder: Path, files: list[tuple[Path, Path]]) -> dict[str, str]:
    """Patient of each image of a plain folder from a CSV with ``file`` and ``patient`` columns."""
    if not path.is_file():
        raise FileNotFoundError(f"patients CSV {path} does not exist")
    table = pd.read_csv(path, dtype=str, keep_default_na=False)
    for column in ("file", "patient"):
        if column not in table.columns:
            raise ValueError(f"{path}: needs a {column!r} column (the image's path under {folder}, its patient); it "
                             f"has {list(table.columns)}")
    named = {}
    for line, (name, patient) in enumerate(zip(table["file"].str.strip(), table["patient"].str.strip()), start=2):
        if not patient:
            raise ValueError(f"{path} line {line} (file {name!r}): missing patient id")
        if name in named:
            raise ValueError(f"{path} line {line}: file {name!r} has more than one row")
        named[name] = patient
    missing = [relative.as_posix() for _, relative in files if relative.as_posix() not in named]
    if missing:
        raise ValueError(f"{folder / missing[0]}: no row in {path} (missing patient id); every image needs one")
    return named


def _check_seed(seed: Any) -> int:
    if isinstance(seed, str) and seed.isdigit():
        seed = int(seed)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"option seed must be a non-negative integer, got {seed!r}")
    return seed


def _common_folder(files: list[tuple[Path, Path]]) -> Path:
    """The folder that holds every file of ``files`` (``(path, relative)`` pairs of one input folder)."""
    path, relative = files[0]
    return Path(*path.parts[:len(path.parts) - len(relative.parts)])


def _as_channels_last(image: np.ndarray) -> np.ndarray:
    return image[:, :, None] if image.ndim == 2 else image


def _anonymize_whole_set(anonymizer: ImageAnonymizer, fitted: dict[int, ImageAnonymizer],
                         files: list[tuple[Path, Path]], patients: dict[str, str], seed: int) -> dict[Path, np.ndarray]:
    """Results of a method that takes the whole set (mixes patients, or learns from the set): one call per channel
    count (RGB and grayscale apart)."""
    loaded = {relative: read_image(path) for path, relative in files}
    results = {}
    for channels in sorted({_as_channels_last(image).shape[2] for image in loaded.values()}):
        group = [relative for relative, image in loaded.items() if _as_channels_last(image).shape[2] == channels]
        first = loaded[group[0]]
        odd = next((relative for relative in group if loaded[relative].shape != first.shape), None)
        if odd is not None:
            raise ValueError(f"{odd.as_posix()}: shape {loaded[odd].shape} differs from {first.shape} of "
                             f"{group[0].as_posix()}; {anonymizer.name} takes the set as one batch, so its images "
                             "must share one size")
        batch = np.stack([_as_channels_last(loaded[relative]) for relative in group])
        try:
            output = fitted.get(channels, anonymizer)(batch, seed=int(content_hash(seed, "whole set", channels), 16),
                                                     patients=None if patients is None else
                                                     [patients[relative.as_posix()] for relative in group])
        except ValueError as error:  # the method judges the whole set: name the folder and the images it read
            raise ValueError(f"{_common_folder(files)}: {error}") from error
        for relative, image in zip(group, output):
            results[relative] = image[:, :, 0] if loaded[relative].ndim == 2 else image
    return results


def _release_record(anonymizer: ImageAnonymizer, fitted: dict[int, ImageAnonymizer], seed: int, input_dir: Path,
                    cohort: bool, masks_dir: Path | None, count: int, patients: dict[str, str] | None) -> dict:
    def plain(value: Any) -> Any:
        return value.tolist() if hasattr(value, "tolist") else str(value) if isinstance(value, Path) else value

    options = {name: plain(value) for name, value in anonymizer.options.items()}
    computed = {f"{channels} channel{'s' if channels > 1 else ''}": {
        name: plain(value) for name, value in fitted_anonymizer.options.items() if anonymizer.options[name] is None}
        for channels, fitted_anonymizer in sorted(fitted.items())}
    return {"method": anonymizer.name, "summary": anonymizer.method.summary, "options": options,
            **({"options_from_the_folder": computed} if computed else {}), "seed": seed,
            "input": str(input_dir), "layout": "cohort" if cohort else "folder",
            "masks": None if masks_dir is None else str(masks_dir), "images": count,
            "patients": None if patients is None else len(set(patients.values())),
            "written_by": f"anonpaper {__version__} anonymize"}


def anonymize_folder(method: str | MethodSpec, input_dir: Path | str, output_dir: Path | str, options: dict[str, Any] | None = None,
                     progress: bool = True) -> list[Path]:
    """Anonymize every image under ``input_dir`` into ``output_dir`` (same relative paths, PNG files), with
    ``pairing.csv`` and ``release.json`` beside them (module docstring).

    Args:
        method: A registered method (:func:`anonpaper.methods.registry.available`), or a
            :class:`~anonpaper.methods.registry.MethodSpec` built around trained networks (the learned methods).
        input_dir: Folder of 8-bit grayscale or RGB images (searched recursively), or a folder written by
            ``anonpaper cohort generate``. Never written to.
        output_dir: New or empty folder, not the input folder, not inside it and not containing it.
        options: Method options (module docstring), e.g. ``{"p": 0.3, "seed": 1}``; ``"p"`` is the
            method's ``replace_fraction``.
        progress: Show a tqdm progress bar.

    Returns:
        The written image paths, in input order.

    Raises:
        ValueError: Unknown method or option, bad option values, unreadable images, output folder = input folder
            or inside it, output name clashes, a vessel mask that does not match its image, or missing patients
            for a method that mixes patients.
        FileNotFoundError: Missing input folder, no images in it, missing ``masks`` folder, mask file or patients
            CSV.
        FileExistsError: Non-empty output folder.
    """
    options = dict(options or {})
    # The folder's own options; everything else is the method's (validated by the registry).
    seed = options.pop("seed", 0)
    masks_option = options.pop("masks", None)
    patients_option = options.pop("patients", None)
    anonymizer = get(method, **options)
    method = anonymizer.name
    input_dir, output_dir = Path(input_dir), Path(output_dir)
    _check_folders(input_dir, output_dir)
    seed = _check_seed(seed)

    cohort = (input_dir / COHORT_MARKER).is_file()
    image_dir, image_out = (input_dir / "images", output_dir / "images") if cohort else (input_dir, output_dir)
    # A written cohort: its images only (its masks/ are labels, not images to anonymize).
    if cohort and masks_option is None and anonymizer.method.needs_masks and (input_dir / "masks" / "vessel").is_dir():
        masks_option = input_dir / "masks" / "vessel"
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

    files = list_images(image_dir)
    if not files:
        raise FileNotFoundError(f"no images ({', '.join(IMAGE_SUFFIXES)}) under {image_dir}")
    targets: dict[Path, Path] = {}
    for _, relative in files:
        target = relative.with_suffix(".png")
        if target in targets:
            raise ValueError(f"{relative.as_posix()} and {targets[target].as_posix()} would both be written as "
                             f"{target.as_posix()}; rename one")
        targets[target] = relative
    mask_paths = {relative: _find_mask(masks_dir, relative) for _, relative in files} if masks_dir else {}
    if cohort and patients_option is not None:
        raise ValueError(f"{input_dir} is a cohort folder whose {MANIFEST} names the patients; the patients option is "
                         "for plain folders")
    patients = (_cohort_patients(input_dir) if cohort else
                None if patients_option is None else _csv_patients(Path(patients_option), input_dir, files))
    if patients is not None:
        unnamed = [relative.as_posix() for _, relative in files if relative.as_posix() not in patients]
        if unnamed:
            raise ValueError(f"{image_dir / unnamed[0]}: not listed in {input_dir / MANIFEST}")
    if anonymizer.method.needs_patients and patients is None:
        raise ValueError(f"method {method!r} clusters patients: pass -o patients CSV (columns file, patient) for a "
                         "plain folder, or give a folder written by `anonpaper cohort generate`")

    fitted = _folder_dataset_options(anonymizer, files)
    whole_set = _anonymize_whole_set(anonymizer, fitted, files, patients, seed) \
        if anonymizer.takes_whole_set else None
    iterator = files
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(files, desc=f"anonymize {method}", unit="image")
    written, rows = [], []
    for path, relative in iterator:
        if whole_set is not None:
            result = whole_set[relative]
        else:
            image = read_image(path)
            mask = read_mask(mask_paths[relative], image.shape[:2]) if masks_dir else None
            # A per-file seed: results do not depend on file order or on which other files are in the folder.
            image_seed = int(content_hash(seed, relative.as_posix()), 16)
            try:
                channels = 1 if image.ndim == 2 else image.shape[2]
                result = fitted.get(channels, anonymizer).one(image, seed=image_seed, mask=mask)
            except ValueError as error:
                raise ValueError(f"{path}: {error}") from error
        target = image_out / relative.with_suffix(".png")
        write_image(target, result)
        written.append(target)
        rows.append({"file": target.relative_to(output_dir).as_posix(),
                     "source": path.relative_to(input_dir).as_posix(),
                     **({} if patients is None else {"patient_id": patients[relative.as_posix()]})})
    atomic_write_bytes(output_dir / PAIRING, pd.DataFrame(rows).to_csv(index=False).encode())
    record = _release_record(anonymizer, fitted, seed, input_dir, cohort, masks_dir, len(written), patients)
    atomic_write_bytes(output_dir / RELEASE, (json.dumps(record, indent=2) + "\n").encode())
    return written
