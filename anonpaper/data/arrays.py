"""A fundus cohort as per-split NumPy arrays (images, sex, DR class, patients, vessel and field-of-view masks).

The chapters that train classifiers on a whole cohort (Snow / VS-Snow, k-SALSA) read it once into memory with
:func:`load_arrays`; every array is indexed by split name (``"train"``, ``"val"``, ``"test"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from anonpaper.data.cohort import Cohort, dr_grade_to_3class
from anonpaper.runtime import content_hash

SPLITS = ("train", "val", "test")


@dataclass
class CohortArrays:
    """A fundus cohort as per-split arrays.

    Attributes:
        images: split -> uint8 (N, H, W, 3).
        sex: split -> int64 (N,), 0 = "F", 1 = "M".
        dr: split -> int64 (N,), 0 healthy, 1 NPDR, 2 PDR.
        patients: split -> (N,) patient ids (str), for patient-clustered bootstrap.
        vessels: split -> bool (N, H, W) ground-truth vessel masks, or None when the cohort has none.
        fov: split -> bool (N, H, W) field-of-view masks, or None.
        description: JSON-like description of the cohort's content (for cache keys).
    """

    images: dict[str, np.ndarray]
    sex: dict[str, np.ndarray]
    dr: dict[str, np.ndarray]
    patients: dict[str, np.ndarray]
    vessels: dict[str, np.ndarray] | None
    fov: dict[str, np.ndarray] | None
    description: dict[str, Any]


def _resize(array: np.ndarray, size: int, nearest: bool) -> np.ndarray:
    import cv2

    if array.shape[0] == size and array.shape[1] == size:
        return array
    if nearest:
        return cv2.resize(array.astype(np.uint8), (size, size), interpolation=cv2.INTER_NEAREST).astype(bool)
    return cv2.resize(array, (size, size), interpolation=cv2.INTER_AREA)


def load_arrays(cohort: Cohort, image_size: int | None = None, progress: bool = False) -> CohortArrays:
    """Read a fundus cohort's images, labels and masks into per-split arrays.

    Args:
        cohort: A fundus :class:`~anonpaper.data.cohort.Cohort` with columns ``sex`` and ``dr_3class`` (or
            ``dr_grade``); RGB images.
        image_size: Resize every image (area interpolation) and mask (nearest) to this square side; None keeps
            the cohort's size (all images must then share it).
        progress: Show a progress bar.

    Returns:
        :class:`CohortArrays`.

    Raises:
        ValueError: Missing columns, unknown sex values, grayscale images, or an empty split.
    """
    table = cohort.table
    if "sex" not in table.columns:
        raise ValueError(f"cohort {cohort.name!r}: fundus arrays need a 'sex' column")
    if "dr_3class" not in table.columns and "dr_grade" not in table.columns:
        raise ValueError(f"cohort {cohort.name!r}: needs a 'dr_3class' or 'dr_grade' column")
    keep = table["sex"].isin(["F", "M"]).to_numpy().copy()
    dr_column = table["dr_3class"] if "dr_3class" in table.columns else None
    if dr_column is None:
        keep &= table["dr_grade"].notna().to_numpy()
    else:
        keep &= dr_column.notna().to_numpy()
    has_vessels = "vessel" in cohort.mask_names
    has_fov = "fov" in cohort.mask_names
    indices = np.flatnonzero(keep)
    iterator = indices
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(indices, desc=f"loading {cohort.name}", leave=False)
    images, vessels, fovs = [], [], []
    for index in iterator:
        image = cohort.image(int(index))
        if image.ndim != 3 or image.shape[2] != 3:
            raise ValueError(f"cohort {cohort.name!r}: row {index} is not an RGB (H, W, 3) image: {image.shape}")
        masks = cohort.masks(int(index)) if (has_vessels or has_fov) else {}
        if image_size is not None:
            image = _resize(image, image_size, nearest=False)
        images.append(image)
        if has_vessels:
            vessels.append(_resize(masks["vessel"], image_size, True) if image_size else masks["vessel"])
        if has_fov:
            fovs.append(_resize(masks["fov"], image_size, True) if image_size else masks["fov"])
    shapes = {image.shape for image in images}
    if len(shapes) != 1:
        raise ValueError(f"cohort {cohort.name!r}: images differ in size {sorted(shapes)[:3]}; pass image_size")
    all_images = np.stack(images)
    rows = table.iloc[indices].reset_index(drop=True)
    sex = (rows["sex"] == "M").to_numpy().astype(np.int64)
    dr = (rows["dr_3class"].to_numpy() if "dr_3class" in rows.columns
          else dr_grade_to_3class(rows["dr_grade"].to_numpy())).astype(np.int64)
    split = rows["split"].to_numpy()
    arrays = CohortArrays(images={}, sex={}, dr={}, patients={}, vessels={} if has_vessels else None,
                          fov={} if has_fov else None, description={})
    for name in SPLITS:
        selected = split == name
        if not selected.any():
            raise ValueError(f"cohort {cohort.name!r}: split {name!r} has no usable images")
        arrays.images[name] = all_images[selected]
        arrays.sex[name] = sex[selected]
        arrays.dr[name] = dr[selected]
        arrays.patients[name] = rows["patient_id"].astype(str).to_numpy()[selected]
        if has_vessels:
            arrays.vessels[name] = np.stack(vessels)[selected]
        if has_fov:
            arrays.fov[name] = np.stack(fovs)[selected]
    arrays.description = {
        "dataset": cohort.name, "images": int(len(all_images)), "shape": list(all_images.shape[1:]),
        "content": content_hash(all_images, sex, dr, split.astype(str),
                                rows["patient_id"].astype(str).to_numpy().astype(str)),
    }
    return arrays


def split_summary(arrays: CohortArrays) -> pd.DataFrame:
    """Images, patients, female share and DR class counts per split (one row per split)."""
    rows = []
    for name in SPLITS:
        dr_counts = np.bincount(arrays.dr[name], minlength=3)
        rows.append({"split": name, "images": len(arrays.images[name]),
                     "patients": len(np.unique(arrays.patients[name])),
                     "female_share": float(np.mean(arrays.sex[name] == 0)),
                     "healthy": int(dr_counts[0]), "NPDR": int(dr_counts[1]), "PDR": int(dr_counts[2])})
    return pd.DataFrame(rows).set_index("split")
