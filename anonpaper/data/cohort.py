"""The common Cohort interface: phantoms and real datasets look the same to every notebook.

A cohort is a table (one row per image) plus access to each row's image and masks. Phantom cohorts render images
on demand from per-row seeds; real cohorts read the files a data manifest names. Notebooks only ever see this
interface, so ``DATASET="phantom-retina"`` and ``DATASET="brset"`` run the same code.

Table schema (columns; ``REQUIRED_COLUMNS`` always present, others where the dataset has them):
    image_id (str, unique), patient_id (str), split ("train" | "val" | "test"), source (str),
    eye ("L" | "R"), sex ("F" | "M"), age (float, years),
    dr_grade (int 0-4, ICDR), dr_3class (int: 0 healthy, 1 NPDR, 2 PDR),
    label_<finding> (float: 1 positive, 0 negative, -1 uncertain, NaN unmentioned; chest X-ray),
    disease (int; iris), plus dataset-specific acquisition columns.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

REQUIRED_COLUMNS = ("image_id", "patient_id", "split")
SPLITS = ("train", "val", "test")
SEX_VALUES = ("F", "M")
EYE_VALUES = ("L", "R")
MODALITIES = ("fundus", "cxr", "iris", "face")


def dr_grade_to_3class(grade: int | np.ndarray | pd.Series):
    """Map ICDR grades 0-4 to the 3 classes of paper 2: 0 healthy (grade 0), 1 NPDR (1-3), 2 PDR (4).

    >>> [int(dr_grade_to_3class(g)) for g in range(5)]
    [0, 1, 1, 1, 2]
    """
    values = np.asarray(grade)
    if values.size and (np.nanmin(values) < 0 or np.nanmax(values) > 4):
        raise ValueError(f"DR grades must lie in 0..4, got range [{np.nanmin(values)}, {np.nanmax(values)}]")
    result = np.where(values == 0, 0, np.where(values == 4, 2, 1))
    return result.item() if np.ndim(grade) == 0 else result


def validate_table(table: pd.DataFrame, name: str) -> None:
    """Check the common schema; raise ValueError naming the cohort, the column and the problem."""
    missing = [column for column in REQUIRED_COLUMNS if column not in table.columns]
    if missing:
        raise ValueError(f"cohort {name!r}: table lacks required column(s) {missing}; has {list(table.columns)}")
    duplicated = table["image_id"][table["image_id"].duplicated()].unique()
    if len(duplicated):
        raise ValueError(f"cohort {name!r}: duplicate image_id values, e.g. {list(duplicated[:5])}")
    bad_split = set(table["split"].dropna().unique()) - set(SPLITS)
    if bad_split:
        raise ValueError(f"cohort {name!r}: split values must be in {SPLITS}, found {sorted(bad_split)}")
    leaked = table.groupby("patient_id")["split"].nunique()
    leaked = leaked[leaked > 1]
    if len(leaked):
        raise ValueError(f"cohort {name!r}: patients in more than one split, e.g. {list(leaked.index[:5])}")
    if "sex" in table.columns:
        bad = set(table["sex"].dropna().unique()) - set(SEX_VALUES)
        if bad:
            raise ValueError(f"cohort {name!r}: sex values must be in {SEX_VALUES}, found {sorted(bad)}")
    if "eye" in table.columns:
        bad = set(table["eye"].dropna().unique()) - set(EYE_VALUES)
        if bad:
            raise ValueError(f"cohort {name!r}: eye values must be in {EYE_VALUES}, found {sorted(bad)}")


class Cohort(ABC):
    """A table of images with per-row image and mask access.

    Subclasses implement :meth:`_read_image` and (if they have masks) :meth:`_read_masks`; everything else
    (subsetting, splits, batch loading) is shared.

    Attributes:
        name: Registry name, e.g. ``"phantom-retina"`` or ``"brset"``.
        modality: One of ``MODALITIES``.
        table: One row per image, index 0..N-1, schema in the module docstring.
        mask_names: Names of the masks :meth:`masks` returns (may be empty).
        channels: 3 for RGB images (H, W, 3), 1 for grayscale images returned as (H, W).
    """

    modality: str = "fundus"
    mask_names: tuple[str, ...] = ()
    channels: int = 3

    def __init__(self, name: str, table: pd.DataFrame):
        self.name = name
        self.table = table.reset_index(drop=True)
        validate_table(self.table, name)

    # -- to implement -------------------------------------------------------------------------------------------
    @abstractmethod
    def _read_image(self, row: pd.Series) -> np.ndarray:
        """Return the image of ``row``: uint8, (H, W, 3) RGB or (H, W) grayscale."""

    def _read_masks(self, row: pd.Series) -> dict[str, np.ndarray]:
        """Return the masks of ``row`` as bool (H, W) arrays keyed by name; empty when the dataset has none."""
        return {}

    # -- shared -------------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.table)

    def __repr__(self) -> str:
        counts = self.table["split"].value_counts().to_dict()
        return (f"{type(self).__name__}(name={self.name!r}, images={len(self)}, "
                f"patients={self.table['patient_id'].nunique()}, splits={counts})")

    def _row(self, index: int) -> pd.Series:
        if not -len(self) <= index < len(self):
            raise IndexError(f"cohort {self.name!r} has {len(self)} images; index {index} is out of range")
        return self.table.iloc[index]

    def image(self, index: int) -> np.ndarray:
        """The image of row ``index``: uint8, (H, W, 3) RGB or (H, W) grayscale."""
        return self._read_image(self._row(index))

    def masks(self, index: int) -> dict[str, np.ndarray]:
        """All masks of row ``index``: bool (H, W) arrays keyed by name (see ``mask_names``)."""
        return self._read_masks(self._row(index))

    def mask(self, index: int, name: str) -> np.ndarray:
        """One mask of row ``index``; KeyError lists the available names."""
        masks = self.masks(index)
        if name not in masks:
            raise KeyError(f"cohort {self.name!r} has no mask {name!r}; available: {sorted(masks)}")
        return masks[name]

    def subset(self, rows: Sequence[int] | np.ndarray | pd.Series) -> "Cohort":
        """A cohort of the given rows (positions or a boolean mask), sharing this one's reader."""
        selector = np.asarray(rows)
        table = self.table[selector] if selector.dtype == bool else self.table.iloc[selector]
        clone = copy.copy(self)
        clone.table = table.reset_index(drop=True)
        return clone

    def split(self, name: str) -> "Cohort":
        """The rows of one split (``"train"``, ``"val"`` or ``"test"``)."""
        if name not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {name!r}")
        return self.subset(self.table["split"].to_numpy() == name)

    def load_images(self, indices: Iterable[int] | None = None, progress: bool = False) -> np.ndarray:
        """Stack images into one array: uint8 (N, H, W, 3) or (N, H, W). All images must share a size."""
        indices = range(len(self)) if indices is None else list(indices)
        if progress:
            from tqdm.auto import tqdm

            indices = tqdm(indices, desc=f"loading {self.name}", leave=False)
        images = [self.image(index) for index in indices]
        shapes = {image.shape for image in images}
        if len(shapes) > 1:
            raise ValueError(f"cohort {self.name!r}: images differ in size {sorted(shapes)[:4]}; resize them first")
        return np.stack(images) if images else np.zeros((0,), dtype=np.uint8)

    def load_masks(self, name: str, indices: Iterable[int] | None = None) -> np.ndarray:
        """Stack one mask over rows: bool (N, H, W)."""
        indices = range(len(self)) if indices is None else list(indices)
        return np.stack([self.mask(index, name) for index in indices])
