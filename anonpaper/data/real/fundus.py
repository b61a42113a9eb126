"""Fundus datasets: BRSET, ODIR-5K, EyePACS, EyeQ, APTOS 2019, IDRiD, DRIVE, CHASE_DB1.

Each ``parse_<name>(root, log, ...)`` reads the dataset's own label files into the common schema (see
``anonpaper.data.cohort``) and each ``load_<name>(root, ...)`` returns a split :class:`RealCohort`. Layouts, label
encodings and split protocols are documented in ``data_manifests/<name>.yaml``; the parsers read those facts from
the manifest where they are machine-readable (label-file candidates, required columns).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from anonpaper.data.cohort import dr_grade_to_3class
from anonpaper.data.manifests import load_manifest
from anonpaper.data.real.base import (DataError, Parsed, ProblemLog, first_existing, list_images, load_real,
                                      map_column, numeric_column, read_table_file)

EYE_FROM_WORD = {"left": "L", "right": "R"}


def _label_file(name: str, key: str, root: Path) -> tuple[str, list[str]]:
    """(relative path that exists, required columns) of label file ``key`` of manifest ``name``."""
    entry = load_manifest(name).label_file(key)
    candidates = [entry["path"]] + list(entry.get("alternatives", []))
    return first_existing(root, candidates, f"{name} label file {key!r}"), list(entry.get("columns", []))


def _grades(table: pd.DataFrame, raw: pd.Series, column: str, log: ProblemLog) -> tuple[pd.DataFrame, pd.Series]:
    grades, bad = map_column(raw, {grade: grade for grade in range(5)}, column, table["image_id"], log,
                             allow_missing=False)
    table = table.assign(dr_grade=grades)
    return table, bad


def _finish_grades(table: pd.DataFrame) -> pd.DataFrame:
    table = table.copy()
    table["dr_grade"] = table["dr_grade"].astype(int)
    table["dr_3class"] = dr_grade_to_3class(table["dr_grade"].to_numpy())
    return table


# -- BRSET ---------------------------------------------------------------------------------------------------------
BRSET_FINDINGS = ("diabetic_retinopathy", "macular_edema", "scar", "nevus", "amd", "vascular_occlusion",
                  "hypertensive_retinopathy", "drusens", "hemorrhage", "retinal_detachment", "myopic_fundus",
                  "increased_cup_disc", "other")


def parse_brset(root: Path, log: ProblemLog) -> Parsed:
    """BRSET (PhysioNet): ``labels.csv`` + ``fundus_photos/<image_id>.jpg``.

    patient_sex 1 -> "M", 2 -> "F"; exam_eye 1 -> "R", 2 -> "L"; patient_age may use a decimal comma;
    DR_ICDR 0-4 -> dr_grade (required); the 13 finding columns (0/1) -> label_<finding>.
    """
    relative, columns = _label_file("brset", "labels", root)
    raw = read_table_file(root, relative, columns, dtype={"image_id": str, "patient_id": str})
    image_folder = first_existing(root, ["fundus_photos", "images"], "BRSET image folder")
    ids = raw["image_id"].astype(str).str.strip()
    table = pd.DataFrame({"image_id": ids, "patient_id": raw["patient_id"].astype(str).str.strip(),
                          "source": "brset", "path": image_folder + "/" + ids + ".jpg"})
    sex, bad_sex = map_column(raw["patient_sex"], {1: "M", 2: "F"}, "patient_sex", ids, log)
    eye, bad_eye = map_column(raw["exam_eye"], {1: "R", 2: "L"}, "exam_eye", ids, log)
    age, bad_age = numeric_column(raw["patient_age"], "patient_age", ids, log, 0, 120, decimal_comma=True)
    table = table.assign(sex=sex, eye=eye, age=age, camera=raw["camera"].astype(str))
    table, bad_grade = _grades(table, raw["DR_ICDR"], "DR_ICDR", log)
    bad = bad_sex | bad_eye | bad_age | bad_grade
    for finding in BRSET_FINDINGS:
        if finding in raw.columns:
            values, bad_finding = map_column(raw[finding], {0: 0.0, 1: 1.0}, finding, ids, log)
            table[f"label_{finding}"] = values
            bad |= bad_finding
    if "quality" in raw.columns:
        table["quality"] = raw["quality"].astype(str)
    return Parsed(_finish_grades(table[~bad.to_numpy()]))


def load_brset(root=None, **options):
    """Load BRSET as a :class:`RealCohort` (options: protocol, seed, image_size, on_error, allow_16bit)."""
    return load_real("brset", parse_brset, root, **options)


# -- ODIR-5K -------------------------------------------------------------------------------------------------------
ODIR_LABELS = {"N": "normal", "D": "diabetes", "G": "glaucoma", "C": "cataract", "A": "amd", "H": "hypertension",
               "M": "myopia", "O": "other"}
ODIR_NAME = re.compile(r"^(?P<patient>\d+)_(?P<eye>left|right)\.(jpg|jpeg|png)$", re.IGNORECASE)


def parse_odir(root: Path, log: ProblemLog, quality_file: str | Path | None = None,
               include_test: bool = True) -> Parsed:
    """ODIR-5K: one row per patient (ID, Patient Age, Patient Sex, Left-Fundus, Right-Fundus, keywords, N..O).

    Each patient row becomes two image rows (left, right). The N..O flags are PATIENT-level (both eyes together);
    they become ``label_<name>`` on both eyes, and the per-eye diagnostic keywords go to ``keywords``. With the
    Kaggle ``full_df.csv`` (one row per image, ``filename`` column), only the listed images are used. Unlabelled
    testing images (``<ID>_left.jpg``) are added as source ``odir-test`` when ``include_test``.

    Args:
        quality_file: Optional CSV (path absolute or relative to root, read only) with columns ``image`` (file
            name) and ``quality`` (EyeQ grades: 0 Good, 1 Usable, 2 Reject), as produced by an EyeQ-trained
            grader. Paper 1 keeps Good and Usable; without the file no quality filter is applied (and the report
            says so).
        include_test: Add the unlabelled testing images.
    """
    relative, columns = _label_file("odir-5k", "annotations", root)
    raw = read_table_file(root, relative, columns)
    manifest = load_manifest("odir-5k")
    train_folder = first_existing(root, manifest.layout["train_image_dirs"], "ODIR-5K training image folder")
    raw = raw.assign(ID=raw["ID"].astype(str).str.strip())
    rows = []
    if "filename" in raw.columns:  # Kaggle full_df.csv: one row per image
        for _, record in raw.iterrows():
            match = ODIR_NAME.match(str(record["filename"]).strip())
            if not match:
                log.add("bad_label", f"filename {record['filename']!r} is not <ID>_left/right.jpg",
                        record=str(record["filename"]))
                continue
            side = match["eye"].lower()
            rows.append((record, match.group(0), side))
    else:
        for _, record in raw.iterrows():
            for side, column in (("left", "Left-Fundus"), ("right", "Right-Fundus")):
                rows.append((record, str(record[column]).strip(), side))
    table = pd.DataFrame({
        "image_id": [file_name.rsplit(".", 1)[0] for _, file_name, _ in rows],
        "patient_id": [record["ID"] for record, _, _ in rows],
        "source": "odir-train",
        "eye": [EYE_FROM_WORD[side] for _, _, side in rows],
        "path": [f"{train_folder}/{file_name}" for _, file_name, _ in rows],
        "keywords": [record[f"{side.capitalize()}-Diagnostic Keywords"] for record, _, side in rows],
    })
    patient_rows = pd.DataFrame([record for record, _, _ in rows]).reset_index(drop=True)
    ids = table["image_id"]
    sex, bad = map_column(patient_rows["Patient Sex"], {"Female": "F", "Male": "M"}, "Patient Sex", ids, log)
    age, bad_age = numeric_column(patient_rows["Patient Age"], "Patient Age", ids, log, 0, 120)
    table = table.assign(sex=sex, age=age)
    bad |= bad_age
    for letter, label in ODIR_LABELS.items():
        values, bad_label = map_column(patient_rows[letter], {0: 0.0, 1: 1.0}, letter, ids, log,
                                       allow_missing=False)
        table[f"label_{label}"] = values
        bad |= bad_label
    table = table[~bad.to_numpy()]
    if include_test:
        for folder in manifest.layout["test_image_dirs"]:
            if (root / folder).is_dir():
                test_rows = []
                for path in list_images(root, folder):
                    match = ODIR_NAME.match(Path(path).name)
                    if match:
                        test_rows.append({"image_id": "test-" + Path(path).stem,
                                          "patient_id": "test-" + match["patient"], "source": "odir-test",
                                          "eye": EYE_FROM_WORD[match["eye"].lower()], "path": path})
                table = pd.concat([table, pd.DataFrame(test_rows)], ignore_index=True)
                break
    filters = []
    if quality_file is not None:
        quality_path = Path(quality_file) if Path(quality_file).is_absolute() else root / quality_file
        grades = read_table_file(quality_path.parent, quality_path.name, ["image", "quality"])
        lookup = dict(zip(grades["image"].astype(str).map(lambda name: Path(name).name), grades["quality"]))
        table = table.assign(quality=table["path"].map(lambda path: lookup.get(Path(path).name, np.nan)))
        filters.append(("EyeQ quality Good or Usable (quality <= 1)", lambda t: t["quality"] <= 1))
    return Parsed(table.reset_index(drop=True), filters=filters)


def load_odir(root=None, quality_file=None, include_test=True, **options):
    """Load ODIR-5K (paper 1's protocol needs ``quality_file``; see :func:`parse_odir`)."""
    return load_real("odir-5k", parse_odir, root, quality_file=quality_file, include_test=include_test, **options)


# -- EyePACS and EyeQ ----------------------------------------------------------------------------------------------
EYEPACS_NAME = re.compile(r"^(?P<patient>\d+)_(?P<eye>left|right)$")


def _eyepacs_rows(table: pd.DataFrame, log: ProblemLog, source: str, folder: str, column: str = "image",
                  suffix: str = ".jpeg") -> tuple[pd.DataFrame, pd.Series]:
    """Rows for ``<patient>_<left|right>`` names (``.jpeg`` stripped) and a bool Series of unparsable names."""
    names = table[column].astype(str).str.strip().str.replace(r"\.jpe?g$", "", regex=True)
    matches = names.str.extract(EYEPACS_NAME.pattern)
    bad = matches["patient"].isna()
    for name in names[bad]:
        log.add("bad_label", f"image name {name!r} is not <patient>_left/right", record=name)
    return pd.DataFrame({"image_id": names, "patient_id": matches["patient"], "source": source,
                         "eye": matches["eye"].map(EYE_FROM_WORD), "path": folder + "/" + names + suffix}), bad


def parse_eyepacs(root: Path, log: ProblemLog) -> Parsed:
    """EyePACS (Kaggle DR 2015): ``trainLabels.csv`` (image, level) + ``train/<image>.jpeg``; optionally
    ``retinopathy_solution.csv`` (image, level, Usage) + ``test/``. Image names are ``<patient>_<left|right>``.
    Train and test hold different patients, so a patient id found in both is reported as a collision."""
    relative, columns = _label_file("eyepacs", "train", root)
    parts = []
    raw = read_table_file(root, relative, columns)
    rows, bad = _eyepacs_rows(raw, log, "eyepacs-train", "train")
    rows, bad_grade = _grades(rows, raw["level"], "level", log)
    parts.append(rows.assign(official_split="train")[~(bad | bad_grade).to_numpy()])
    if (root / "retinopathy_solution.csv").is_file():
        entry = load_manifest("eyepacs").label_file("test")
        raw = read_table_file(root, entry["path"], entry["columns"])
        rows, bad = _eyepacs_rows(raw, log, "eyepacs-test", "test")
        rows, bad_grade = _grades(rows, raw["level"], "level", log)
        rows = rows.assign(official_split="test", kaggle_usage=raw["Usage"].astype(str))
        parts.append(rows[~(bad | bad_grade).to_numpy()])
    return Parsed(_finish_grades(pd.concat(parts, ignore_index=True)))


def load_eyepacs(root=None, **options):
    """Load EyePACS (Kaggle DR) as a :class:`RealCohort`."""
    return load_real("eyepacs", parse_eyepacs, root, **options)


EYEQ_QUALITY = {0: "good", 1: "usable", 2: "reject"}


def parse_eyeq(root: Path, log: ProblemLog, keep_reject: bool = False) -> Parsed:
    """EyeQ: ``Label_EyeQ_train.csv`` / ``Label_EyeQ_test.csv`` (image, quality 0/1/2, DR_grade) over EyePACS
    images in ``train/`` and ``test/``. Reject-quality images are filtered out unless ``keep_reject``."""
    parts = []
    for key, split, folder in (("train", "train", "train"), ("test", "test", "test")):
        relative, columns = _label_file("eyeq", key, root)
        raw = read_table_file(root, relative, columns)
        rows, bad = _eyepacs_rows(raw, log, f"eyeq-{key}", folder)
        quality, bad_quality = map_column(raw["quality"], {0: 0, 1: 1, 2: 2}, "quality", rows["image_id"], log,
                                          allow_missing=False)
        rows, bad_grade = _grades(rows, raw["DR_grade"], "DR_grade", log)
        rows = rows.assign(quality=quality, official_split=split)
        parts.append(rows[~(bad | bad_quality | bad_grade).to_numpy()])
    table = pd.concat(parts, ignore_index=True)
    table["quality"] = table["quality"].astype(int)
    table["quality_name"] = table["quality"].map(EYEQ_QUALITY)
    filters = [] if keep_reject else [("EyeQ quality Good or Usable", lambda t: t["quality"] <= 1)]
    return Parsed(_finish_grades(table), filters=filters)


def load_eyeq(root=None, keep_reject=False, **options):
    """Load EyeQ (EyePACS images with quality grades) as a :class:`RealCohort`."""
    return load_real("eyeq", parse_eyeq, root, keep_reject=keep_reject, **options)


# -- APTOS 2019 ----------------------------------------------------------------------------------------------------
def parse_aptos(root: Path, log: ProblemLog) -> Parsed:
    """APTOS 2019: ``train.csv`` (id_code, diagnosis 0-4) + ``train_images/<id_code>.png``.

    APTOS has no patient ids: each image is its own ``patient_id`` (both eyes of one person may exist; nothing in
    the release can tell).
    """
    relative, columns = _label_file("aptos2019", "train", root)
    raw = read_table_file(root, relative, columns, dtype={"id_code": str})
    ids = raw["id_code"].astype(str).str.strip()
    table = pd.DataFrame({"image_id": ids, "patient_id": ids, "source": "aptos-train",
                          "path": "train_images/" + ids + ".png"})
    table, bad = _grades(table, raw["diagnosis"], "diagnosis", log)
    return Parsed(_finish_grades(table[~bad.to_numpy()]))


def load_aptos(root=None, **options):
    """Load APTOS 2019 (labelled training part) as a :class:`RealCohort`."""
    return load_real("aptos2019", parse_aptos, root, **options)


# -- IDRiD (segmentation part) -------------------------------------------------------------------------------------
IDRID_LESIONS = {"microaneurysms": ("1. Microaneurysms", "MA"), "haemorrhages": ("2. Haemorrhages", "HE"),
                 "hard_exudates": ("3. Hard Exudates", "EX"), "soft_exudates": ("4. Soft Exudates", "SE"),
                 "optic_disc": ("5. Optic Disc", "OD")}


def parse_idrid(root: Path, log: ProblemLog) -> Parsed:
    """IDRiD, part A (segmentation): 81 images with lesion masks (hard exudates for all; other lesions for some).

    Layout: ``A. Segmentation/1. Original Images/{a. Training Set,b. Testing Set}/IDRiD_NN.jpg`` and
    ``A. Segmentation/2. All Segmentation Groundtruths/<set>/<n. Lesion>/IDRiD_NN_<XX>.tif``. No patient ids are
    released: each image is its own patient. Images without a hard-exudate mask are listed and skipped.
    """
    base = first_existing(root, ["A. Segmentation", "."], "IDRiD segmentation folder")
    prefix = "" if base == "." else base + "/"
    rows = []
    for set_folder, split in (("a. Training Set", "train"), ("b. Testing Set", "test")):
        image_folder = f"{prefix}1. Original Images/{set_folder}"
        if not (root / image_folder).is_dir():
            raise DataError(f"missing IDRiD folder {image_folder!r} under {root}")
        for path in list_images(root, image_folder):
            stem = Path(path).stem
            row = {"image_id": stem, "patient_id": stem, "source": "idrid", "path": path, "official_split": split}
            for name, (lesion_folder, code) in IDRID_LESIONS.items():
                mask = f"{prefix}2. All Segmentation Groundtruths/{set_folder}/{lesion_folder}/{stem}_{code}.tif"
                row[f"mask_{name}"] = mask if (root / mask).is_file() else np.nan
            if not isinstance(row["mask_hard_exudates"], str):
                log.add("missing_file", "no hard-exudate mask for this image", record=stem)
                continue
            rows.append(row)
    return Parsed(pd.DataFrame(rows), mask_names=tuple(IDRID_LESIONS))


def load_idrid(root=None, **options):
    """Load IDRiD segmentation images with lesion masks as a :class:`RealCohort`."""
    return load_real("idrid", parse_idrid, root, **options)


# -- DRIVE and CHASE_DB1 -------------------------------------------------------------------------------------------
def parse_drive(root: Path, log: ProblemLog) -> Parsed:
    """DRIVE: ``{training,test}/images/NN_{training,test}.tif``, ``1st_manual/NN_manual1.gif`` (vessels),
    ``mask/NN_{training,test}_mask.gif`` (field of view). Each image is its own patient."""
    rows = []
    for folder, word, split in (("training", "training", "train"), ("test", "test", "test")):
        if not (root / folder / "images").is_dir():
            raise DataError(f"missing DRIVE folder {folder + '/images'!r} under {root}")
        for path in list_images(root, f"{folder}/images"):
            match = re.match(rf"^(\d+)_{word}$", Path(path).stem)
            if not match:
                log.add("bad_label", f"unexpected DRIVE image name {Path(path).name!r}", file=path)
                continue
            number = match.group(1)
            vessels = f"{folder}/1st_manual/{number}_manual1.gif"
            if not (root / vessels).is_file():
                log.add("missing_file", "no manual vessel annotation (1st_manual)", record=f"drive-{number}",
                        file=vessels)
                continue
            rows.append({"image_id": f"drive-{number}", "patient_id": f"drive-{number}", "source": "drive",
                         "path": path, "mask_vessels": vessels, "mask_fov": f"{folder}/mask/{number}_{word}_mask.gif",
                         "official_split": split})
    return Parsed(pd.DataFrame(rows), mask_names=("vessels", "fov"))


def load_drive(root=None, **options):
    """Load DRIVE with vessel and field-of-view masks as a :class:`RealCohort`."""
    return load_real("drive", parse_drive, root, **options)


def parse_chase(root: Path, log: ProblemLog, train_patients: int = 10) -> Parsed:
    """CHASE_DB1: ``Image_NN{L,R}.jpg`` with ``Image_NN{L,R}_1stHO.png`` (first observer's vessels), flat folder.

    14 children, both eyes: patient ``NN``, eye L/R. Official split by the common convention: the first
    ``train_patients`` children (20 images) train, the rest (8 images) test.
    """
    rows = []
    pattern = re.compile(r"^Image_(\d{2})([LR])$")
    for path in list_images(root, "."):
        stem = Path(path).stem
        match = pattern.match(stem)
        if not match:
            continue  # the annotation PNGs and anything else
        vessels = f"{stem}_1stHO.png"
        if not (root / vessels).is_file():
            log.add("missing_file", "no first-observer vessel annotation", record=stem, file=vessels)
            continue
        patient = int(match.group(1))
        rows.append({"image_id": stem, "patient_id": f"chase-{match.group(1)}", "source": "chase_db1",
                     "eye": match.group(2), "path": path, "mask_vessels": vessels,
                     "official_split": "train" if patient <= train_patients else "test"})
    if not rows:
        raise DataError(f"no CHASE_DB1 images (Image_NNL.jpg / Image_NNR.jpg) in {root}")
    return Parsed(pd.DataFrame(rows), mask_names=("vessels",))


def load_chase(root=None, **options):
    """Load CHASE_DB1 with vessel masks as a :class:`RealCohort`."""
    return load_real("chase-db1", parse_chase, root, **options)
