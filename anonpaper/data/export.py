"""Write any Cohort to a folder (PNG images, PNG masks, CSV manifest) and read such folders back.

Layout of a written folder::

    cohort.json                 name, modality, channels, mask_names, table hash, complete flag
    manifest.csv                the cohort table + image_path + mask_<name>_path (+ keypoints_path) columns
    images/<image_id>.png       uint8 RGB (or grayscale) image
    masks/<name>/<image_id>.png 0/255 single-channel mask
    keypoints/<image_id>.json   only for cohorts with a ``keypoints(index)`` method

Writing streams one row at a time (memory stays flat), every file is written atomically, and a row counts as done
when all its files exist, so an interrupted write resumes where it stopped, and writing a cohort into a folder
that already holds it complete does nothing (and says so through ``log``). A non-empty folder that is not this
cohort's own output is refused (:class:`ForeignFolderError`) unless ``overwrite=True``.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Callable

import cv2
import numpy as np
import pandas as pd

from anonpaper.data.cohort import Cohort
from anonpaper.cache import atomic_write_bytes
from anonpaper.runtime import content_hash

MARKER = "cohort.json"
MANIFEST = "manifest.csv"
OWN_ENTRIES = (MARKER, MANIFEST, "images", "masks", "keypoints")
_SAFE_ID = re.compile(r"^[A-Za-z0-9._-]+$")


class ForeignFolderError(FileExistsError):
    """The output folder is not empty and holds no output of this cohort (pass ``overwrite=True``).

    Attributes:
        folder: The refused folder.
    """

    def __init__(self, folder: Path):
        self.folder = folder
        super().__init__(f"{folder} is not empty and holds no partial output of this cohort; pass overwrite=True to "
                         f"write into it (this cohort's files and folders there are replaced, other files are kept)")


def _table_hash(cohort: Cohort) -> str:
    csv = cohort.table.to_csv(index=False)
    return content_hash({"name": cohort.name, "table": csv, "masks": list(cohort.mask_names)})


def _encode_png(array: np.ndarray, where: str) -> bytes:
    if array.ndim == 3:
        array = cv2.cvtColor(array, cv2.COLOR_RGB2BGR)
    ok, buffer = cv2.imencode(".png", array, [cv2.IMWRITE_PNG_COMPRESSION, 1])
    if not ok:
        raise ValueError(f"could not encode {where} as PNG (shape {array.shape}, dtype {array.dtype})")
    return buffer.tobytes()


def _row_paths(image_id: str, mask_names: tuple[str, ...], with_keypoints: bool) -> dict[str, str]:
    paths = {"image_path": f"images/{image_id}.png"}
    for name in mask_names:
        paths[f"mask_{name}_path"] = f"masks/{name}/{image_id}.png"
    if with_keypoints:
        paths["keypoints_path"] = f"keypoints/{image_id}.json"
    return paths


def write_cohort(cohort: Cohort, out_dir: str | Path, overwrite: bool = False, progress: bool = True,
                 log: Callable[[str], None] | None = None) -> Path:
    """Write a cohort's images, masks (and keypoints) and a manifest to ``out_dir``.

    Args:
        cohort: Any Cohort.
        out_dir: Destination folder; created if absent.
        overwrite: Allow writing into a non-empty folder that is not this cohort's partial output (this
            cohort's own files and folders there are replaced; other files are left alone).
        progress: Show a tqdm progress bar.
        log: Called with one line when there is nothing to write (the folder already holds this cohort
            complete) or when an interrupted write is resumed; None says nothing.

    Returns:
        The folder.

    Raises:
        ForeignFolderError: (a FileExistsError) If ``out_dir`` is non-empty, is not this cohort's output, and
            overwrite is False.
        ValueError: If an image_id cannot be a file name, or an image or mask has a wrong shape or dtype.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise FileExistsError(f"{out_dir} exists and is not a folder")
    bad_ids = [i for i in cohort.table["image_id"].astype(str) if not _SAFE_ID.match(i)]
    if bad_ids:
        raise ValueError(f"image_id values must be file-name safe ([A-Za-z0-9._-]), e.g. {bad_ids[:3]}")
    table_hash = _table_hash(cohort)
    marker_path = out_dir / MARKER
    resuming = was_complete = False
    if out_dir.exists() and any(out_dir.iterdir()):
        own = False
        if marker_path.exists():
            try:
                existing = json.loads(marker_path.read_text())
                own = existing.get("table_hash") == table_hash
                was_complete = own and bool(existing.get("complete"))
            except (json.JSONDecodeError, OSError):
                own = False
        if own:
            resuming = True
        elif not overwrite:
            raise ForeignFolderError(out_dir)
        else:
            for entry in OWN_ENTRIES:
                path = out_dir / entry
                if path.is_dir():
                    shutil.rmtree(path)
                elif path.exists():
                    path.unlink()
    out_dir.mkdir(parents=True, exist_ok=True)

    mask_names = tuple(cohort.mask_names)
    with_keypoints = callable(getattr(cohort, "keypoints", None)) and getattr(cohort, "has_keypoints", True)
    path_columns = [_row_paths(str(i), mask_names, with_keypoints) for i in cohort.table["image_id"]]
    manifest = pd.concat([cohort.table.reset_index(drop=True), pd.DataFrame(path_columns)], axis=1)
    meta = {"name": cohort.name, "modality": cohort.modality, "channels": int(cohort.channels),
            "mask_names": list(mask_names), "keypoints": with_keypoints, "table_hash": table_hash,
            "n_images": len(cohort), "complete": False}
    if not resuming:
        atomic_write_bytes(marker_path, json.dumps(meta, indent=2).encode())
    atomic_write_bytes(out_dir / MANIFEST, manifest.to_csv(index=False).encode())

    missing_rows = [index for index, paths in enumerate(path_columns)
                    if not all((out_dir / path).exists() for path in paths.values())]
    if was_complete and not missing_rows:
        if log is not None:
            log(f"{out_dir} already holds this cohort complete ({len(cohort)} images): skipped, nothing written")
        return out_dir
    if resuming and log is not None:
        log(f"{out_dir} holds part of this cohort: writing the {len(missing_rows)} missing of {len(cohort)} images")
    rows = missing_rows
    if progress:
        from tqdm.auto import tqdm

        rows = tqdm(rows, desc=f"writing {cohort.name}", leave=False)
    for index in rows:  # rows written completely by an earlier run are not in the list (files appear atomically)
        paths = path_columns[index]
        image_id = str(cohort.table["image_id"].iloc[index])
        image = cohort.image(index)
        expected = 3 if cohort.channels == 3 else 2
        if image.dtype != np.uint8 or image.ndim != expected:
            raise ValueError(f"cohort {cohort.name!r} row {index} ({image_id}): image must be uint8 with "
                             f"{expected} dimensions, got {image.dtype} {image.shape}")
        masks = cohort.masks(index) if mask_names else {}
        for name in mask_names:
            if name not in masks:
                raise ValueError(f"cohort {cohort.name!r} row {index} ({image_id}): mask {name!r} missing; "
                                 f"has {sorted(masks)}")
            if masks[name].shape != image.shape[:2]:
                raise ValueError(f"cohort {cohort.name!r} row {index} ({image_id}): mask {name!r} has shape "
                                 f"{masks[name].shape}, image has {image.shape[:2]}")
            atomic_write_bytes(out_dir / paths[f"mask_{name}_path"],
                               _encode_png(masks[name].astype(np.uint8) * 255, f"mask {name} of {image_id}"))
        if with_keypoints:
            points = cohort.keypoints(index)
            atomic_write_bytes(out_dir / paths["keypoints_path"],
                               json.dumps({k: np.asarray(v).tolist() for k, v in points.items()}).encode())
        # The image goes last: its presence with all masks marks the row complete.
        atomic_write_bytes(out_dir / paths["image_path"], _encode_png(image, f"image {image_id}"))
    meta["complete"] = True
    atomic_write_bytes(marker_path, json.dumps(meta, indent=2).encode())
    if log is not None:
        log(f"{out_dir}: wrote {len(missing_rows)} images of {cohort.name} ({len(cohort)} in all; manifest.csv, "
            f"images/{', masks/' if mask_names else ''})")
    return out_dir


class DiskCohort(Cohort):
    """A cohort read from a folder written by :func:`write_cohort`.

    Attributes:
        root: The folder.
        manifest: The manifest table (the cohort table plus the relative path columns).
        has_keypoints: Whether keypoint files were written.
    """

    def __init__(self, root: str | Path):
        self.root = Path(root)
        marker_path = self.root / MARKER
        if not marker_path.exists():
            raise ValueError(f"{self.root} is not a written cohort folder: {MARKER} is missing")
        meta = json.loads(marker_path.read_text())
        if not meta.get("complete"):
            raise ValueError(f"{self.root}: the cohort write did not finish ({MARKER} says complete=false); "
                             f"rerun the same write to resume it")
        self.manifest = pd.read_csv(self.root / MANIFEST, keep_default_na=True)
        if len(self.manifest) != meta["n_images"]:
            raise ValueError(f"{self.root / MANIFEST}: expected {meta['n_images']} rows, found {len(self.manifest)}")
        self.modality = meta["modality"]
        self.channels = int(meta["channels"])
        self.mask_names = tuple(meta["mask_names"])
        self.has_keypoints = bool(meta.get("keypoints"))
        path_columns = [c for c in self.manifest.columns if c.endswith("_path")]
        table = self.manifest.drop(columns=path_columns)
        for column in ("image_id", "patient_id"):
            table[column] = table[column].astype(str)
        super().__init__(meta["name"], table)

    def _paths(self, row: pd.Series) -> dict[str, str]:
        return _row_paths(str(row["image_id"]), self.mask_names, self.has_keypoints)

    def _read(self, relative: str, flags: int) -> np.ndarray:
        path = self.root / relative
        array = cv2.imread(str(path), flags)
        if array is None:
            raise ValueError(f"cannot read {path} (missing or not a PNG)")
        return array

    def _read_image(self, row: pd.Series) -> np.ndarray:
        if self.channels == 3:
            return cv2.cvtColor(self._read(self._paths(row)["image_path"], cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
        return self._read(self._paths(row)["image_path"], cv2.IMREAD_GRAYSCALE)

    def _read_masks(self, row: pd.Series) -> dict[str, np.ndarray]:
        paths = self._paths(row)
        return {name: self._read(paths[f"mask_{name}_path"], cv2.IMREAD_GRAYSCALE) > 127 for name in self.mask_names}

    def keypoints(self, index: int) -> dict[str, np.ndarray]:
        """Keypoints saved with the cohort (float32 (N, 2) pixel coordinates per kind); ValueError if none."""
        if not self.has_keypoints:
            raise ValueError(f"cohort at {self.root} was written without keypoints")
        data = json.loads((self.root / self._paths(self._row(index))["keypoints_path"]).read_text())
        return {name: np.asarray(value, np.int8 if name.endswith("_kind") else np.float32).reshape(
            (-1,) if name.endswith("_kind") else (-1, 2)) for name, value in data.items()}


def read_written_cohort(root: str | Path) -> DiskCohort:
    """Open a folder written by :func:`write_cohort` as a Cohort."""
    return DiskCohort(root)
