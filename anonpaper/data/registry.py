"""The one registry of datasets: names map to Cohort loaders (phantoms and real datasets alike).

``load_cohort(name, root=..., **options)`` is what every notebook calls with its ``DATASET``/``DATA_ROOT``
parameters. Entries are import paths, so importing the registry imports no dataset code.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from anonpaper.data.cohort import Cohort

# name -> "module:callable"; the callable takes (root: Path | None, **options) and returns a Cohort.
DATASETS: dict[str, str] = {
    "phantom-retina": "anonpaper.data.phantoms.retina:load_phantom_retina",
    "phantom-cxr": "anonpaper.data.phantoms.cxr:load_phantom_cxr",
    "phantom-iris": "anonpaper.data.phantoms.iris:load_phantom_iris",
    # Real datasets: the user's own copy under DATA_ROOT; layouts and protocols in data_manifests/<name>.yaml.
    "odir-5k": "anonpaper.data.real.fundus:load_odir",
    "brset": "anonpaper.data.real.fundus:load_brset",
    "eyepacs": "anonpaper.data.real.fundus:load_eyepacs",
    "eyeq": "anonpaper.data.real.fundus:load_eyeq",
    "aptos2019": "anonpaper.data.real.fundus:load_aptos",
    "idrid": "anonpaper.data.real.fundus:load_idrid",
    "drive": "anonpaper.data.real.fundus:load_drive",
    "chase-db1": "anonpaper.data.real.fundus:load_chase",
    "mimic-cxr-jpg": "anonpaper.data.real.cxr:load_mimic_cxr",
    "chexpert": "anonpaper.data.real.cxr:load_chexpert",
    "warsaw-iris": "anonpaper.data.real.iris:load_warsaw_iris",
    "celebamask-hq": "anonpaper.data.real.faces:load_celebamask_hq",
}


def register_dataset(name: str, target: str) -> None:
    """Add a dataset loader (``"module:callable"``) to the registry."""
    if ":" not in target:
        raise ValueError(f"target must look like 'package.module:function', got {target!r}")
    DATASETS[name] = target


def available_datasets() -> list[str]:
    return sorted(DATASETS)


def load_cohort(name: str, root: str | Path | None = None, **options: Any) -> Cohort:
    """Load a cohort by registry name.

    Args:
        name: A registered dataset name (see :func:`available_datasets`).
        root: Folder of a real dataset copy (``DATA_ROOT``); phantoms ignore it unless they were written to disk.
        **options: Loader options (phantoms: n_patients, image_size, seed, ...).

    Raises:
        ValueError: For an unknown name, listing the known ones.
    """
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known datasets: {', '.join(available_datasets())}")
    module_name, function_name = DATASETS[name].split(":")
    loader = getattr(importlib.import_module(module_name), function_name)
    return loader(root=Path(root) if root else None, **options)
