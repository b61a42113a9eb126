"""Warsaw-BioBase-Disease-Iris v2.1 (paper 5): near-infrared iris images of eyes with and without disease.

Expected layout (folder per subject) and label table: see ``data_manifests/warsaw-iris.yaml``. The exact file names
of the v2.1 release and its metadata sheet were not verifiable offline, so the loader reads a ``labels.csv`` the user
derives from the release's metadata (columns ``image`` = path relative to the root, ``glaucoma`` = 0/1, optional
``eye`` = L/R); the subject is the first folder of the image path.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from anonpaper.data.manifests import load_manifest
from anonpaper.data.real.base import (DataError, Parsed, ProblemLog, first_existing, load_real, map_column,
                                      read_table_file)


def parse_warsaw_iris(root: Path, log: ProblemLog) -> Parsed:
    """Read ``labels.csv`` (image, glaucoma[, eye]) and the folder-per-subject images it names."""
    entry = load_manifest("warsaw-iris").label_file("labels")
    relative = first_existing(root, [entry["path"]] + list(entry.get("alternatives", [])), "Warsaw iris labels")
    raw = read_table_file(root, relative, entry["columns"], dtype={"image": str})
    paths = raw["image"].astype(str).str.strip().str.replace("\\", "/", regex=False)
    subjects = paths.map(lambda path: path.split("/", 1)[0] if "/" in path else None)
    table = pd.DataFrame({"image_id": paths.str.replace(r"\.[A-Za-z]+$", "", regex=True), "patient_id": subjects,
                          "source": "warsaw-iris", "path": paths})
    bad = subjects.isna()
    for path in paths[bad]:
        log.add("bad_label", "image path has no subject folder (expected <subject>/<file>)", record=path)
    disease, bad_disease = map_column(raw["glaucoma"], {0: 0, 1: 1}, "glaucoma", table["image_id"], log,
                                      allow_missing=False)
    table["disease"] = disease
    bad |= bad_disease
    if "eye" in raw.columns:
        eye, bad_eye = map_column(raw["eye"], {"L": "L", "R": "R", "left": "L", "right": "R"}, "eye",
                                  table["image_id"], log)
        table["eye"] = eye
        bad |= bad_eye
    table = table[~bad.to_numpy()].copy()
    if table.empty:
        raise DataError(f"no usable rows in {relative!r}")
    table["disease"] = table["disease"].astype(int)
    table["identity"] = table["patient_id"]
    return Parsed(table.reset_index(drop=True))


def load_warsaw_iris(root=None, **options):
    """Load Warsaw-BioBase-Disease-Iris v2.1 (default protocol: paper 5's image-level 1165/270/360 keeping the
    glaucoma ratio; see the manifest for why that protocol is stored in ``split_within_subject``)."""
    return load_real("warsaw-iris", parse_warsaw_iris, root, **options)
