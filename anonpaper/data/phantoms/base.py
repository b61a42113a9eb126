"""What the phantom cohorts share: the registry loader and image/mask access from one cached render."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from anonpaper.data.cohort import Cohort


def load_phantom(name: str, config_class: type, cohort_class: type, root: str | Path | None,
                 options: dict[str, Any]) -> Cohort:
    """Registry loader of a phantom: generate from ``options`` (fields of ``config_class``) or read a written copy.

    Args:
        name: Registry name, for messages (e.g. ``"phantom-cxr"``).
        config_class: The phantom's config dataclass.
        cohort_class: The phantom's cohort class, constructed as ``cohort_class(config)``.
        root: None to generate on the fly; or a folder written by :func:`anonpaper.data.export.write_cohort`,
            which is then read instead (``options`` must then be empty).
        options: Config fields (n_patients, image_size, seed, ...).

    Raises:
        ValueError: For unknown options (listing the valid ones), or options together with a written ``root``.
    """
    if root is not None:
        from anonpaper.data.export import read_written_cohort

        if options:
            raise ValueError(f"{name}: options {sorted(options)} cannot be applied to the cohort already written at "
                             f"{root}; pass root=None to generate a new one")
        return read_written_cohort(root)
    valid = {field.name for field in dataclasses.fields(config_class)}
    unknown = set(options) - valid
    if unknown:
        raise ValueError(f"unknown {name} option(s) {sorted(unknown)}; valid options: {sorted(valid)}")
    return cohort_class(config_class(**options))


class RenderedPhantomCohort(Cohort):
    """A phantom whose ``_render(row)`` returns ``(image, masks)`` from one (cached) render of the row.

    Callers get copies, so modifying a returned array never changes the cache.
    """

    def _render(self, row: pd.Series) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        raise NotImplementedError

    def _read_image(self, row: pd.Series) -> np.ndarray:
        return self._render(row)[0].copy()

    def _read_masks(self, row: pd.Series) -> dict[str, np.ndarray]:
        return {name: mask.copy() for name, mask in self._render(row)[1].items()}
