"""CelebAMask-HQ (paper 5): 30,000 CelebA-HQ faces with 19-class part masks; identities from CelebA.

Layout: ``CelebA-HQ-img/<idx>.jpg``, ``CelebAMask-HQ-mask-anno/<idx // 2000>/<idx:05d>_<part>.png``,
``CelebAMask-HQ-attribute-anno.txt``, ``CelebA-HQ-to-CelebA-mapping.txt`` (idx, orig_idx, orig_file) and CelebA's
``identity_CelebA.txt`` (``<orig_file> <identity>``, not part of the CelebAMask-HQ download: copy it in).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from anonpaper.data.real.base import (DataError, Parsed, ProblemLog, RealCohort, build_cohort, read_mask_file,
                                      require_root)

FACE_PARTS = ("skin", "nose", "eye_g", "l_eye", "r_eye", "l_brow", "r_brow", "l_ear", "r_ear", "mouth", "u_lip",
              "l_lip", "hair", "hat", "ear_r", "neck_l", "neck", "cloth")


def _read_text(root: Path, relative: str) -> list[str]:
    path = root / relative
    if not path.is_file():
        raise DataError(f"missing label file {relative!r} under {root}")
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


def read_attributes(root: Path, relative: str = "CelebAMask-HQ-attribute-anno.txt") -> pd.DataFrame:
    """Parse the attribute file: line 1 the count, line 2 the 40 names, then ``<idx>.jpg v1 ... v40`` (+1/-1)."""
    lines = [line for line in _read_text(root, relative) if line.strip()]
    if len(lines) < 2:
        raise DataError(f"{relative!r}: expected a count line and a header line, found {len(lines)} line(s)")
    names = lines[1].split()
    rows = [line.split() for line in lines[2:]]
    bad = [row[0] for row in rows if len(row) != len(names) + 1]
    if bad:
        raise DataError(f"{relative!r}: {len(bad)} row(s) do not have {len(names)} attributes, e.g. {bad[:3]}")
    table = pd.DataFrame([row[1:] for row in rows], columns=names, index=[row[0] for row in rows]).astype(int)
    values = set(np.unique(table.to_numpy()))
    if not values <= {-1, 1}:
        raise DataError(f"{relative!r}: attribute values must be +1/-1, found {sorted(values)}")
    return table


def parse_celebamask_hq(root: Path, log: ProblemLog) -> Parsed:
    """Rows of CelebA-HQ images with identity (patient_id = CelebA identity) and ``label_smiling`` (0/1)."""
    mapping_lines = [line.split() for line in _read_text(root, "CelebA-HQ-to-CelebA-mapping.txt") if line.strip()]
    if not mapping_lines or mapping_lines[0][:3] != ["idx", "orig_idx", "orig_file"]:
        raise DataError("CelebA-HQ-to-CelebA-mapping.txt: expected header 'idx orig_idx orig_file', found "
                        f"{mapping_lines[0] if mapping_lines else 'nothing'}")
    mapping = {row[0]: row[2] for row in mapping_lines[1:] if len(row) >= 3}
    identity_lines = [line.split() for line in _read_text(root, "identity_CelebA.txt") if line.strip()]
    identity = {row[0]: row[1] for row in identity_lines if len(row) == 2}
    attributes = read_attributes(root)
    if "Smiling" not in attributes.columns:
        raise DataError(f"attribute file lacks 'Smiling'; found {list(attributes.columns)}")
    rows = []
    for name, smiling in attributes["Smiling"].items():
        idx = Path(name).stem
        orig = mapping.get(idx)
        person = identity.get(orig) if orig else None
        if person is None:
            log.add("bad_label", f"no CelebA identity (mapping -> {orig!r})", record=idx)
            continue
        rows.append({"image_id": idx, "patient_id": f"celeb-{person}", "identity": person, "source": "celeba-hq",
                     "path": f"CelebA-HQ-img/{idx}.jpg", "label_smiling": 1.0 if smiling == 1 else 0.0,
                     "mask_folder": f"CelebAMask-HQ-mask-anno/{int(idx) // 2000}"})
    return Parsed(pd.DataFrame(rows), mask_names=("foreground",))


class FaceCohort(RealCohort):
    """CelebAMask-HQ cohort; mask ``foreground`` = union of all annotated parts (paper 5 removes the background
    with it), resized to the image size with nearest neighbour."""

    def _raw_masks(self, row: pd.Series) -> dict[str, np.ndarray]:
        folder = self.root / row["mask_folder"]
        union = None
        for part in FACE_PARTS:
            path = folder / f"{int(row['image_id']):05d}_{part}.png"
            if path.is_file():
                mask = read_mask_file(path, label=str(path.relative_to(self.root)))
                union = mask if union is None else union | mask
        if union is None:
            return {}
        image_shape = self._raw_image(row).shape[:2]
        if union.shape != image_shape:
            from anonpaper.data.preprocessing import CropBox, crop_box_resize

            union = crop_box_resize(union, CropBox(0, 0, *union.shape), image_shape, "nearest")
        return {"foreground": union}


def load_celebamask_hq(root=None, *, protocol=None, seed=0, image_size=None, on_error="skip", allow_16bit=False,
                       check_files=True, survival=None):
    """Load CelebAMask-HQ (default protocol: paper 5's 600/20/30 disjoint celebrities)."""
    root = require_root("celebamask-hq", root)
    log = ProblemLog(on_error)
    parsed = parse_celebamask_hq(root, log)
    cohort = build_cohort("celebamask-hq", parsed.table, root, log, protocol=protocol, seed=seed,
                          image_size=image_size, allow_16bit=allow_16bit, mask_columns=(), check_files=check_files,
                          survival=survival)
    # Same table and problems, with the reader that builds the foreground mask from the part files.
    return FaceCohort("celebamask-hq", cohort.table, root, cohort.manifest, mask_names=("foreground",),
                      problems=cohort.problems, image_size=image_size, allow_16bit=allow_16bit)
