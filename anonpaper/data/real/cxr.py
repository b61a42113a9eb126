"""Chest X-ray datasets: MIMIC-CXR-JPG (paper 3) and CheXpert (paper 5).

Findings become ``label_<finding>`` columns (snake case) with the CheXpert labeller's encoding kept as is:
1.0 positive, 0.0 negative, -1.0 uncertain, NaN not mentioned. Any other value is a listed problem.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from anonpaper.data.real.base import (Parsed, ProblemLog, first_existing, load_real, map_column,
                                      numeric_column, read_table_file)
from anonpaper.data.manifests import load_manifest

FINDINGS = ("No Finding", "Enlarged Cardiomediastinum", "Cardiomegaly", "Lung Opacity", "Lung Lesion", "Edema",
            "Consolidation", "Pneumonia", "Atelectasis", "Pneumothorax", "Pleural Effusion", "Pleural Other",
            "Fracture", "Support Devices")
FINDING_VALUES = {1: 1.0, 0: 0.0, -1: -1.0}


def finding_column(finding: str) -> str:
    """``"Pleural Effusion"`` -> ``"label_pleural_effusion"``."""
    return "label_" + finding.lower().replace(" ", "_")


def _findings(table: pd.DataFrame, raw: pd.DataFrame, log: ProblemLog) -> tuple[pd.DataFrame, pd.Series]:
    bad = pd.Series(False, index=table.index)
    for finding in FINDINGS:
        values, bad_finding = map_column(raw[finding], FINDING_VALUES, finding, table["image_id"], log)
        table[finding_column(finding)] = values.astype(float)
        bad |= bad_finding
    return table, bad


# -- MIMIC-CXR-JPG -------------------------------------------------------------------------------------------------
def parse_mimic(root: Path, log: ProblemLog, views: tuple[str, ...] | None = None) -> Parsed:
    """MIMIC-CXR-JPG 2.0.0: metadata, CheXpert labels and official split (csv.gz) + ``files/pXX/pSUBJECT/sSTUDY/DICOM.jpg``.

    Args:
        views: Keep only these ``ViewPosition`` values (e.g. ("PA", "AP")); None keeps all (GMIA does not say it
            filtered views).
    """
    manifest = load_manifest("mimic-cxr-jpg")
    tables = {}
    for key in ("metadata", "chexpert", "split"):
        entry = manifest.label_file(key)
        relative = first_existing(root, [entry["path"]] + list(entry.get("alternatives", [])), f"MIMIC {key} file")
        tables[key] = read_table_file(root, relative, entry["columns"],
                                      dtype={"dicom_id": str, "subject_id": str, "study_id": str})
    metadata, labels, split = tables["metadata"], tables["chexpert"], tables["split"]
    table = metadata[["dicom_id", "subject_id", "study_id", "ViewPosition"]].copy()
    table["subject_id"] = table["subject_id"].str.strip()
    table["study_id"] = table["study_id"].str.strip()
    split_map = dict(zip(split["dicom_id"].str.strip(), split["split"].astype(str).str.strip()))
    table["official_split"] = table["dicom_id"].map(split_map)
    no_split = table["official_split"].isna()
    for dicom in table.loc[no_split, "dicom_id"]:
        log.add("bad_label", "image has no row in the official split file", record=dicom)
    labels = labels.assign(subject_id=labels["subject_id"].str.strip(), study_id=labels["study_id"].str.strip())
    # A study with two label rows, or none, has no trustworthy label: its images are listed and skipped (a missing
    # row must not read as "not mentioned").
    repeated = labels.duplicated(["subject_id", "study_id"], keep=False)
    bad_studies = set(labels.loc[repeated, "study_id"])
    labels = labels[~repeated]
    unlabelled = ~table["study_id"].isin(set(labels["study_id"])) & ~table["study_id"].isin(bad_studies)
    for dicom, study in zip(table["dicom_id"], table["study_id"]):
        if study in bad_studies:
            log.add("duplicate_id", f"study {study} has several rows in the CheXpert label file", record=dicom)
    for dicom, study in zip(table.loc[unlabelled, "dicom_id"], table.loc[unlabelled, "study_id"]):
        log.add("bad_label", f"study {study} has no row in the CheXpert label file", record=dicom)
    no_labels = (table["study_id"].isin(bad_studies) | unlabelled).to_numpy()
    merged = table.merge(labels, on=["subject_id", "study_id"], how="left", validate="many_to_one")
    out = pd.DataFrame({
        "image_id": merged["dicom_id"].str.strip(),
        "patient_id": merged["subject_id"],
        "study_id": merged["study_id"],
        "source": "mimic-cxr",
        "view": merged["ViewPosition"],
        "official_split": merged["official_split"],
        "path": ("files/p" + merged["subject_id"].str[:2] + "/p" + merged["subject_id"] + "/s"
                 + merged["study_id"] + "/" + merged["dicom_id"].str.strip() + ".jpg"),
    })
    out, bad = _findings(out, merged, log)
    bad |= no_split.to_numpy() | no_labels
    patients_file = manifest.layout.get("optional_patients_file")
    if patients_file and (root / patients_file).is_file():  # MIMIC-IV hosp/patients: sex and anchor age
        patients = read_table_file(root, patients_file, ["subject_id", "gender", "anchor_age"],
                                   dtype={"subject_id": str})
        sex_map = dict(zip(patients["subject_id"], patients["gender"]))
        age_map = dict(zip(patients["subject_id"], patients["anchor_age"]))
        sex, bad_sex = map_column(out["patient_id"].map(sex_map), {"F": "F", "M": "M"}, "gender",
                                  out["image_id"], log)
        out = out.assign(sex=sex, age=pd.to_numeric(out["patient_id"].map(age_map), errors="coerce"))
        bad |= bad_sex
    out = out[~bad.to_numpy()]
    filters = []
    if views:
        filters.append((f"view in {list(views)}", lambda t: t["view"].isin(views)))
    return Parsed(out.reset_index(drop=True), filters=filters)


def load_mimic_cxr(root=None, views=None, **options):
    """Load MIMIC-CXR-JPG (default protocol: official split, patients with >= 20 images; paper 3)."""
    return load_real("mimic-cxr-jpg", parse_mimic, root, views=tuple(views) if views else None, **options)


# -- CheXpert ------------------------------------------------------------------------------------------------------
def _chexpert_prefix(root: Path, paths: pd.Series) -> str:
    """CSV paths start with the release folder (``CheXpert-v1.0-small/...``); root may be its parent or itself."""
    sample = [str(path) for path in paths.head(20)]
    if not sample:
        return ""
    if any((root / path).exists() for path in sample):
        return ""
    stripped = [path.split("/", 1)[1] if "/" in path else path for path in sample]
    if any((root / path).exists() for path in stripped):
        return "strip"
    return ""  # files missing either way; paths stay as written and the missing files are reported


def parse_chexpert(root: Path, log: ProblemLog, frontal_only: bool = False) -> Parsed:
    """CheXpert v1.0 (or -small): ``train.csv`` and ``valid.csv`` (Path, Sex, Age, Frontal/Lateral, AP/PA, 14
    findings). Sex Male/Female -> M/F, Unknown -> missing. Patient from the path (``patientNNNNN``)."""
    manifest = load_manifest("chexpert")
    parts = []
    for key, source in (("train", "chexpert-train"), ("valid", "chexpert-valid")):
        entry = manifest.label_file(key)
        if key == "valid" and not any((root / p).is_file() for p in [entry["path"]] + entry.get("alternatives", [])):
            continue
        relative = first_existing(root, [entry["path"]] + list(entry.get("alternatives", [])), f"CheXpert {key}.csv")
        raw = read_table_file(root, relative, entry["columns"])
        paths = raw["Path"].astype(str).str.strip()
        if _chexpert_prefix(root, paths) == "strip":
            paths = paths.str.split("/", n=1).str[1]
        patient = paths.str.extract(r"(patient\d+)")[0]
        study = paths.str.extract(r"(study\d+)")[0]
        table = pd.DataFrame({"image_id": paths.str.replace(r"\.jpg$", "", regex=True),
                              "patient_id": patient, "study_id": patient + "/" + study, "source": source,
                              "path": paths, "view": raw["Frontal/Lateral"], "projection": raw["AP/PA"],
                              "official_split": "train" if key == "train" else "val"})
        bad = patient.isna()
        for path in paths[bad]:
            log.add("bad_label", "Path has no patientNNNNN component", record=path)
        sex, bad_sex = map_column(raw["Sex"], {"Male": "M", "Female": "F", "Unknown": np.nan}, "Sex",
                                  table["image_id"], log)
        age, bad_age = numeric_column(raw["Age"], "Age", table["image_id"], log, 0, 120)
        table = table.assign(sex=sex, age=age)
        table, bad_findings = _findings(table, raw, log)
        parts.append(table[~(bad | bad_sex | bad_age | bad_findings).to_numpy()])
    table = pd.concat(parts, ignore_index=True)
    filters = [("frontal views only", lambda t: t["view"] == "Frontal")] if frontal_only else []
    return Parsed(table, filters=filters)


def load_chexpert(root=None, frontal_only=False, **options):
    """Load CheXpert (default protocol: paper 5's 6000/200/300 images from disjoint patients, balanced effusion)."""
    return load_real("chexpert", parse_chexpert, root, frontal_only=frontal_only, **options)
