"""Shared machinery of the real-dataset loaders: safe file reading, problem logs, the lazy ``RealCohort``.

Nothing here writes to the dataset folder: files are opened read-only and only ever read.

Bad input policy (``on_error``): a structural problem (missing label file, missing column) always raises
``DataError``; a per-record problem (missing or zero-byte image, unexpected label value, duplicate image id,
patient id colliding across sources) raises with ``on_error="raise"`` or, with ``on_error="skip"``, drops the
record and lists it in ``cohort.problems``. A record is never kept with a guessed label.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import pandas as pd

from anonpaper.data.cohort import Cohort
from anonpaper.data.manifests import Manifest, load_manifest
from anonpaper.data.splits import apply_protocol, assert_no_patient_leakage, patient_split

ON_ERROR = ("skip", "raise")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".tif", ".tiff", ".bmp", ".gif")


class DataError(ValueError):
    """A problem with a user's copy of a dataset (names the file and what was expected vs found).

    Attributes:
        kind: Problem category (see :class:`Problem`), "structure" for a missing label file or column.
    """

    def __init__(self, message: str, kind: str = "structure"):
        super().__init__(message)
        self.kind = kind


@dataclass
class Problem:
    """One problem found in a dataset copy.

    Attributes:
        kind: Short category, e.g. "missing_file", "zero_byte", "corrupt_image", "bad_label", "duplicate_id",
            "patient_collision", "wrong_channels", "16bit", "small_image".
        message: Human-readable explanation (expected vs found).
        record: The image id concerned, if any.
        file: The file concerned (relative to the root where possible), if any.
    """

    kind: str
    message: str
    record: str | None = None
    file: str | None = None


@dataclass
class ProblemLog:
    """Collects problems; raises at once with ``on_error="raise"``."""

    on_error: str = "skip"
    problems: list[Problem] = field(default_factory=list)

    def __post_init__(self):
        if self.on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, got {self.on_error!r}")

    def add(self, kind: str, message: str, record: str | None = None, file: str | None = None) -> None:
        problem = Problem(kind, message, None if record is None else str(record), file)
        if self.on_error == "raise":
            where = f" [{problem.file or problem.record}]" if (problem.file or problem.record) else ""
            raise DataError(f"{kind}{where}: {message}", kind)
        self.problems.append(problem)

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame([vars(problem) for problem in self.problems],
                            columns=["kind", "message", "record", "file"])


# -- reading files -------------------------------------------------------------------------------------------------
def read_table_file(root: Path, relative: str, required_columns: Iterable[str] = (), **read_options) -> pd.DataFrame:
    """Read a label table (.csv, .csv.gz, .txt with whitespace, .xlsx) under ``root``; check required columns.

    Raises:
        DataError: Missing file, unreadable file, or missing required column(s) (named, with the columns found).
    """
    path = Path(root) / relative
    if not path.is_file():
        raise DataError(f"missing label file {relative!r} under {root}")
    try:
        if path.name.endswith((".xlsx", ".xls")):
            try:
                table = pd.read_excel(path, **read_options)
            except ImportError as error:
                raise DataError(f"reading {relative!r} needs openpyxl ({error}); install it or export the sheet "
                                f"to CSV with the same columns") from error
        else:
            table = pd.read_csv(path, **read_options)
    except DataError:
        raise
    except Exception as error:  # pandas raises many types for bad files; name the file
        raise DataError(f"cannot read label file {relative!r}: {type(error).__name__}: {error}") from error
    missing = [column for column in required_columns if column not in table.columns]
    if missing:
        raise DataError(f"label file {relative!r} lacks column(s) {missing}; found {list(table.columns)}")
    return table


def _to_uint8_channels(array: np.ndarray, channels: int, where: str) -> np.ndarray:
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[..., 0]
    if channels == 3:
        if array.ndim == 3 and array.shape[2] == 4:
            if array[..., 3].min() < 255:
                raise DataError(f"{where}: RGBA image with transparency; expected 3-channel RGB", "wrong_channels")
            array = array[..., :3]
        if array.ndim != 3 or array.shape[2] != 3:
            found = 1 if array.ndim == 2 else array.shape[2]
            raise DataError(f"{where}: {found}-channel image, expected 3-channel RGB (wrong modality or channel "
                            f"count)", "wrong_channels")
        return np.ascontiguousarray(array)
    if array.ndim == 3:
        if array.shape[2] == 4:
            array = array[..., :3]
        if array.shape[2] != 3 or not (np.array_equal(array[..., 0], array[..., 1])
                                       and np.array_equal(array[..., 0], array[..., 2])):
            raise DataError(f"{where}: colour image ({array.shape[2]} channels differing), expected grayscale",
                            "wrong_channels")
        array = array[..., 0]
    return np.ascontiguousarray(array)


def read_image_file(path: Path, channels: int = 3, allow_16bit: bool = False, label: str | None = None) -> np.ndarray:
    """Read one image, strictly.

    Args:
        path: The file (opened read-only).
        channels: 3 for RGB (H, W, 3) or 1 for grayscale (H, W). RGB files whose channels are identical are
            accepted as grayscale (lossless); opaque RGBA is accepted as RGB.
        allow_16bit: Accept 16-bit images, mapped to 8 bits by v / 257 (0 -> 0, 65535 -> 255); else DataError.
        label: How to name the file in messages (default: the path).

    Returns:
        uint8 array, (H, W, 3) or (H, W).

    Raises:
        DataError: Missing, zero-byte, corrupt or truncated file, wrong channel count, 16-bit (unless allowed).
    """
    from PIL import Image, UnidentifiedImageError

    where = label or str(path)
    if not path.is_file():
        raise DataError(f"{where}: file not found", "missing_file")
    if path.stat().st_size == 0:
        raise DataError(f"{where}: zero-byte file", "zero_byte")
    try:
        with Image.open(path) as handle:
            handle.load()  # forces a full decode: truncated files raise here
            mode = handle.mode
            if mode == "P":
                handle = handle.convert("RGBA" if "transparency" in handle.info else "RGB")
                mode = handle.mode
            elif mode == "1":
                handle = handle.convert("L")
                mode = "L"
            elif mode in ("CMYK", "YCbCr", "LAB", "HSV"):
                handle = handle.convert("RGB")
                mode = "RGB"
            array = np.array(handle)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as error:
        raise DataError(f"{where}: corrupt or unreadable image ({type(error).__name__}: {error})",
                        "corrupt_image") from error
    if array.dtype == bool:
        array = array.astype(np.uint8) * 255
    if array.dtype != np.uint8:
        if array.dtype in (np.uint16, np.int32, np.int16) or mode.startswith("I"):
            if not allow_16bit:
                raise DataError(f"{where}: {array.dtype} (16-bit) image, mode {mode!r}; expected 8-bit. "
                                f"Pass allow_16bit=True to map it to 8 bits", "16bit")
            if array.min() < 0 or array.max() > 65535:
                raise DataError(f"{where}: 16-bit image values outside 0..65535", "16bit")
            array = np.round(array.astype(np.float64) / 257.0).astype(np.uint8)
        else:
            raise DataError(f"{where}: unsupported pixel type {array.dtype} (mode {mode!r})", "unsupported_pixels")
    if array.ndim == 3 and array.shape[2] == 2:  # LA: gray + alpha
        array = array[..., 0]
    return _to_uint8_channels(array, channels, where)


def read_mask_file(path: Path, label: str | None = None) -> np.ndarray:
    """Read a binary annotation mask (PNG/GIF/TIF, any channel count): bool (H, W), True where any channel > 0."""
    from PIL import Image, UnidentifiedImageError

    where = label or str(path)
    if not path.is_file():
        raise DataError(f"{where}: mask file not found", "missing_file")
    if path.stat().st_size == 0:
        raise DataError(f"{where}: zero-byte mask file", "zero_byte")
    try:
        with Image.open(path) as handle:
            handle.load()
            if handle.mode == "P":
                handle = handle.convert("L")
            array = np.array(handle)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as error:
        raise DataError(f"{where}: corrupt or unreadable mask ({type(error).__name__}: {error})",
                        "corrupt_image") from error
    return array.any(axis=2) if array.ndim == 3 else array > 0


# -- table-level checks --------------------------------------------------------------------------------------------
def map_column(values: pd.Series, mapping: dict, column: str, ids: pd.Series, log: ProblemLog,
               allow_missing: bool = True) -> tuple[pd.Series, pd.Series]:
    """Map raw label values through ``mapping``; report each unexpected value.

    Returns:
        (mapped values, bool Series of rows to drop). Missing raw values (NaN/blank) map to NaN when
        ``allow_missing``, else they are problems too.
    """
    normalised = values.map(lambda value: value.strip() if isinstance(value, str) else value)
    missing = normalised.isna() | (normalised.astype(str) == "")
    lookup = {}
    for key, target in mapping.items():
        lookup[key] = target
        lookup[str(key)] = target
        if isinstance(key, (int, np.integer)):
            lookup[float(key)] = target
    bad = ~missing & ~normalised.map(lambda value: value in lookup or str(value) in lookup)
    if not allow_missing:
        bad |= missing
    for image_id, value in zip(ids[bad], values[bad]):
        log.add("bad_label", f"column {column!r} has value {value!r}; expected one of {list(mapping)}"
                + ("" if allow_missing else " (missing not allowed)"), record=image_id)
    mapped = normalised.map(lambda value: lookup.get(value, lookup.get(str(value), np.nan)))
    return mapped.where(~missing & ~bad), bad


def numeric_column(values: pd.Series, column: str, ids: pd.Series, log: ProblemLog, low: float, high: float,
                   decimal_comma: bool = False) -> tuple[pd.Series, pd.Series]:
    """Parse numbers (optionally with a decimal comma); values outside [low, high] or unparsable are problems."""
    text = values.astype(str).str.strip()
    if decimal_comma:
        text = text.str.replace(",", ".", regex=False)
    numbers = pd.to_numeric(text.where(~values.isna()), errors="coerce")
    bad = (~values.isna() & numbers.isna()) | (numbers < low) | (numbers > high)
    for image_id, value in zip(ids[bad], values[bad]):
        log.add("bad_label", f"column {column!r} has value {value!r}; expected a number in [{low}, {high}]",
                record=image_id)
    return numbers.where(~bad), bad


def drop_duplicate_ids(table: pd.DataFrame, log: ProblemLog) -> pd.DataFrame:
    """Drop every row whose image_id occurs more than once (which label is right cannot be known)."""
    duplicated = table["image_id"].duplicated(keep=False)
    for image_id in table.loc[duplicated, "image_id"].unique():
        count = int((table["image_id"] == image_id).sum())
        log.add("duplicate_id", f"image id occurs {count} times in the label files; all its rows dropped",
                record=image_id)
    return table[~duplicated]


def drop_patient_collisions(table: pd.DataFrame, log: ProblemLog) -> pd.DataFrame:
    """Drop rows of patient ids found in several sources that the manifest says hold different patients."""
    if "source" not in table.columns or table["source"].nunique() < 2:
        return table
    sources_per_patient = table.groupby("patient_id")["source"].nunique()
    colliding = set(sources_per_patient.index[sources_per_patient > 1])
    for patient in sorted(colliding, key=str):
        sources = sorted(table.loc[table["patient_id"] == patient, "source"].unique())
        log.add("patient_collision", f"patient id {patient!r} occurs in sources {sources}, which hold different "
                f"patients; an id cannot name two people, so its rows are dropped", record=str(patient))
    return table[~table["patient_id"].isin(colliding)]


def drop_missing_files(table: pd.DataFrame, root: Path, log: ProblemLog,
                       columns: Iterable[str] = ("path",)) -> pd.DataFrame:
    """Drop rows whose files are absent or zero-byte (a cheap stat; decoding is left to reading/checking)."""
    keep = np.ones(len(table), dtype=bool)
    for column in columns:
        if column not in table.columns:
            continue
        what = "image" if column == "path" else column.replace("mask_", "mask ")
        for position, (image_id, relative) in enumerate(zip(table["image_id"], table[column])):
            if not keep[position] or not isinstance(relative, str):
                continue
            path = root / relative
            if not path.is_file():
                log.add("missing_file", f"{what} file not found", record=image_id, file=relative)
                keep[position] = False
            elif path.stat().st_size == 0:
                log.add("zero_byte", f"{what} file is empty (0 bytes)", record=image_id, file=relative)
                keep[position] = False
    return table[keep]


# -- the cohort ----------------------------------------------------------------------------------------------------
class RealCohort(Cohort):
    """A cohort read lazily from a user's copy of a real dataset.

    The table has the common schema plus ``path`` (image file relative to ``root``) and ``mask_<name>`` columns
    (mask files relative to ``root``). Nothing is decoded until :meth:`image` / :meth:`masks` are called.

    Attributes:
        root: The dataset folder (read only).
        manifest: The data manifest of the dataset.
        problems: DataFrame of problems met while loading (kind, message, record, file): the listed skips.
        image_size: When set, images (and masks, with the same geometry) go through the modality's
            preprocessing (fundus field-of-view crop, CXR border crop + square, iris crop, face resize) to
            (image_size, image_size).
    """

    def __init__(self, name: str, table: pd.DataFrame, root: Path, manifest: Manifest,
                 mask_names: tuple[str, ...] = (), problems: pd.DataFrame | None = None,
                 image_size: int | None = None, allow_16bit: bool = False):
        super().__init__(name, table)
        self.root = Path(root)
        self.manifest = manifest
        self.modality = manifest.modality
        self.channels = int(manifest.image["channels"])
        self.mask_names = tuple(mask_names)
        self.problems = problems if problems is not None else ProblemLog().frame()
        if image_size is not None and int(image_size) < 8:
            raise ValueError(f"image_size must be >= 8 or None, got {image_size}")
        self.image_size = None if image_size is None else int(image_size)
        self.allow_16bit = allow_16bit

    def _raw_image(self, row: pd.Series) -> np.ndarray:
        return read_image_file(self.root / row["path"], self.channels, self.allow_16bit, label=row["path"])

    def _raw_masks(self, row: pd.Series) -> dict[str, np.ndarray]:
        masks = {}
        for name in self.mask_names:
            relative = row.get(f"mask_{name}")
            if isinstance(relative, str):
                masks[name] = read_mask_file(self.root / relative, label=relative)
        return masks

    def _preprocess(self, image: np.ndarray, masks: dict[str, np.ndarray] | None):
        from anonpaper.data import preprocessing as prep

        size = self.image_size
        if self.modality == "fundus":
            if masks is None:
                return prep.crop_fundus(image, size), None
            return prep.crop_fundus(image, size, masks=masks)
        if self.modality == "cxr":
            return prep.crop_cxr(image, size), None
        if self.modality == "iris":
            return prep.crop_iris(image, size), None
        resized = prep.resize_square(image, size)
        if masks is None:
            return resized, None
        return resized, {name: prep.crop_box_resize(mask, prep.CropBox(0, 0, *mask.shape[:2]), size, "nearest")
                         for name, mask in masks.items()}

    def _read_image(self, row: pd.Series) -> np.ndarray:
        image = self._raw_image(row)
        if self.image_size is None:
            return image
        return self._preprocess(image, None)[0]

    def _read_masks(self, row: pd.Series) -> dict[str, np.ndarray]:
        masks = self._raw_masks(row)
        if self.image_size is None or not masks:
            return masks
        image = self._raw_image(row)
        for name, mask in masks.items():
            if mask.shape != image.shape[:2]:
                raise DataError(f"{row['path']}: mask {name!r} is {mask.shape}, image is {image.shape[:2]}")
        return self._preprocess(image, masks)[1]


def build_cohort(name: str, table: pd.DataFrame, root: Path | None, log: ProblemLog, *, protocol: str | None = None,
                 seed: int = 0, image_size: int | None = None, allow_16bit: bool = False,
                 mask_columns: tuple[str, ...] = (), check_files: bool = True,
                 filters: list[tuple[str, Callable[[pd.DataFrame], pd.Series]]] | None = None,
                 survival: list | None = None) -> RealCohort:
    """The common tail of every loader: dedupe, collisions, file checks, filters, split protocol, cohort.

    Args:
        name: Registry/manifest name.
        table: Parsed label rows (common schema + ``path`` + ``mask_*``), ``split`` optional (official splits
            go in ``official_split``).
        root: Dataset folder.
        log: The problem log of this load.
        protocol: Name of a split protocol in the manifest (None: the manifest's default).
        seed: Seed of the split.
        image_size: See :class:`RealCohort`.
        mask_columns: Mask names (columns ``mask_<name>``).
        check_files: Stat every image/mask file (drops missing/zero-byte ones).
        filters: (description, row predicate) pairs applied before the split, e.g. a quality filter.
        survival: If a list, (step, rows left) pairs are appended to it.
    """
    manifest = load_manifest(name)
    survival = survival if survival is not None else []
    survival.append(("label rows parsed", len(table)))
    table = drop_duplicate_ids(table, log)
    survival.append(("unique image ids", len(table)))
    if manifest.layout.get("patients_disjoint_across_sources", False):
        table = drop_patient_collisions(table, log)
        survival.append(("no patient id collision across sources", len(table)))
    if check_files:
        table = drop_missing_files(table, Path(root), log, ["path"] + [f"mask_{m}" for m in mask_columns])
        survival.append(("files present and non-empty", len(table)))
    for description, predicate in filters or []:
        table = table[predicate(table).to_numpy(dtype=bool)]
        survival.append((description, len(table)))
    if isinstance(protocol, dict):
        protocol_name, spec = protocol.get("name", "custom"), protocol
    else:
        protocol_name = protocol or manifest.default_protocol
        if protocol_name not in manifest.split_protocols:
            raise ValueError(f"dataset {name!r} has no split protocol {protocol_name!r}; "
                             f"known: {sorted(manifest.split_protocols)}")
        spec = manifest.split_protocols[protocol_name]
    table = table.reset_index(drop=True)
    if table.empty:
        raise DataError(f"dataset {name!r}: no usable records left before splitting (see the problems listed)",
                        "empty")
    split = apply_protocol(table, spec, seed)
    if spec["kind"] == "image_counts_keep_ratio":
        # Image-level protocol (paper 5, iris): the same subject is in several splits, which the Cohort's
        # patient-level invariant forbids in ``split``. Keep it in ``split_within_subject`` and give ``split`` a
        # patient-level split of the same proportions, stratified by the same label.
        counts = np.asarray(spec["counts"], dtype=float)
        table = table.assign(split_within_subject=split)[split.notna().to_numpy()].reset_index(drop=True)
        split = patient_split(table, tuple(counts / counts.sum()), spec.get("stratify"), seed)
    table = table.assign(split=split)
    table = table[table["split"].notna()].reset_index(drop=True)
    survival.append((f"in split protocol {protocol_name!r}", len(table)))
    assert_no_patient_leakage(table)
    return RealCohort(name, table, Path(root), manifest, mask_names=mask_columns, problems=log.frame(),
                      image_size=image_size, allow_16bit=allow_16bit)


def require_root(name: str, root: Path | None) -> Path:
    """The dataset folder, which must exist (a real dataset cannot be generated or downloaded)."""
    if root is None:
        raise ValueError(f"dataset {name!r} is a real dataset: pass root=DATA_ROOT (its folder); nothing is "
                         f"downloaded. See data_manifests/{name}.yaml for the expected layout")
    root = Path(root).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"dataset {name!r}: root {root} is not a folder")
    return root


@dataclass
class Parsed:
    """What a dataset parser returns: label rows in the common schema plus file paths, and pre-split filters.

    Attributes:
        table: Rows with image_id, patient_id, source, path (relative to root), optional mask_<name> paths,
            schema label columns, and ``official_split`` where the dataset has one.
        mask_names: Names of the masks (columns ``mask_<name>``).
        filters: (description, predicate) pairs applied before splitting, e.g. quality filtering.
    """

    table: pd.DataFrame
    mask_names: tuple[str, ...] = ()
    filters: list = field(default_factory=list)


def load_real(name: str, parser: Callable[..., Parsed], root: Path | None, *, protocol: str | None = None,
              seed: int = 0, image_size: int | None = None, on_error: str = "skip", allow_16bit: bool = False,
              check_files: bool = True, survival: list | None = None, **parse_options) -> RealCohort:
    """Run ``parser`` on ``root`` and turn its rows into a split :class:`RealCohort` (see :func:`build_cohort`)."""
    root = require_root(name, root)
    log = ProblemLog(on_error)
    parsed = parser(root, log, **parse_options)
    return build_cohort(name, parsed.table, root, log, protocol=protocol, seed=seed, image_size=image_size,
                        allow_16bit=allow_16bit, mask_columns=parsed.mask_names, check_files=check_files,
                        filters=parsed.filters, survival=survival)


def first_existing(root: Path, candidates: Iterable[str], what: str) -> str:
    """The first of ``candidates`` (relative paths) that exists under ``root``; DataError listing them otherwise."""
    candidates = list(candidates)
    for candidate in candidates:
        if (root / candidate).exists():
            return candidate
    raise DataError(f"no {what} under {root}: looked for {candidates}")


def list_images(root: Path, folder: str) -> list[str]:
    """Image files (by suffix) directly in ``root/folder``, as sorted paths relative to ``root``."""
    directory = root / folder
    return sorted(str(path.relative_to(root)) for path in directory.iterdir()
                  if path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES)
