"""Fake dataset trees that mimic the real layouts (file names, CSV columns, label encodings) with tiny images.

Each ``make_<dataset>(root, ...)`` writes a small copy under ``root`` and returns ``root``. Images are synthetic
(a bright disc on black for fundus, a gray gradient for chest X-rays, a dark pupil on a gray iris), seeded.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image


def fundus_image(height: int, width: int, seed: int) -> np.ndarray:
    """uint8 (H, W, 3): an orange disc of radius 0.45*min(H, W) on black, with speckle (a fundus stand-in)."""
    rng = np.random.default_rng(seed)
    rows, cols = np.mgrid[:height, :width]
    inside = (rows - height / 2) ** 2 + (cols - width / 2) ** 2 <= (0.45 * min(height, width)) ** 2
    image = np.zeros((height, width, 3), dtype=np.uint8)
    color = np.array([190, 90, 40]) + rng.integers(-20, 20, size=3)
    image[inside] = np.clip(color + rng.normal(0, 8, size=(int(inside.sum()), 3)), 0, 255).astype(np.uint8)
    return image


def gray_image(height: int, width: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = np.linspace(40, 200, width)[None, :] + np.linspace(0, 30, height)[:, None]
    return np.clip(base + rng.normal(0, 5, size=(height, width)), 0, 255).astype(np.uint8)


def iris_image(height: int, width: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows, cols = np.mgrid[:height, :width]
    center = (height / 2 + rng.integers(-10, 10), width / 2 + rng.integers(-10, 10))
    distance = np.hypot(rows - center[0], cols - center[1])
    image = np.full((height, width), 170.0)
    image[distance < 90] = 110
    image[distance < 30] = 15
    return np.clip(image + rng.normal(0, 4, size=image.shape), 0, 255).astype(np.uint8)


def save(array: np.ndarray, path: Path, **options) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path, **options)


def save_mask(mask: np.ndarray, path: Path) -> None:
    save((mask.astype(np.uint8) * 255), path)


# -- fundus --------------------------------------------------------------------------------------------------------
BRSET_COLUMNS = ["image_id", "patient_id", "camera", "patient_age", "comorbidities", "diabetes_time_y", "insuline",
                 "patient_sex", "exam_eye", "diabetes", "nationality", "optic_disc", "vessels", "macula", "DR_SDRG",
                 "DR_ICDR", "focus", "iluminaton", "image_field", "artifacts", "diabetic_retinopathy",
                 "macular_edema", "scar", "nevus", "amd", "vascular_occlusion", "hypertensive_retinopathy",
                 "drusens", "hemorrhage", "retinal_detachment", "myopic_fundus", "increased_cup_disc", "other",
                 "quality"]


def make_brset(root: Path, n_patients: int = 10, seed: int = 0, size=(208, 224)) -> Path:
    """BRSET: labels.csv (real columns; sex 1/2, eye 1/2, ages with decimal commas) + fundus_photos/*.jpg."""
    rng = np.random.default_rng(seed)
    rows = []
    number = 0
    for patient in range(1, n_patients + 1):
        sex = int(rng.integers(1, 3))
        age = f"{int(rng.integers(20, 90))},0" if patient % 3 == 0 else str(int(rng.integers(20, 90)))
        grade = int(rng.integers(0, 5))
        for eye in (1, 2):
            number += 1
            image_id = f"img{number:05d}"
            findings = {name: int(rng.integers(0, 2)) for name in BRSET_COLUMNS[20:33]}
            findings["diabetic_retinopathy"] = int(grade > 0)
            rows.append({"image_id": image_id, "patient_id": str(patient), "camera": "Canon CR" if eye == 1 else
                         "NIKON NF505", "patient_age": age, "comorbidities": "diabetes1", "diabetes_time_y": "5",
                         "insuline": "yes", "patient_sex": sex, "exam_eye": eye, "diabetes": "yes",
                         "nationality": "Brazil", "optic_disc": 1, "vessels": 1, "macula": 1, "DR_SDRG": grade,
                         "DR_ICDR": grade, "focus": 1, "iluminaton": 1, "image_field": 1, "artifacts": 1,
                         **findings, "quality": "Adequate"})
            save(fundus_image(*size, seed=number), root / "fundus_photos" / f"{image_id}.jpg", quality=90)
    pd.DataFrame(rows, columns=BRSET_COLUMNS).to_csv(root / "labels.csv", index=False)
    return root


ODIR_COLUMNS = ["ID", "Patient Age", "Patient Sex", "Left-Fundus", "Right-Fundus", "Left-Diagnostic Keywords",
                "Right-Diagnostic Keywords", "N", "D", "G", "C", "A", "H", "M", "O", "filepath", "labels", "target",
                "filename"]


def make_odir(root: Path, n_patients: int = 6, n_test_patients: int = 3, seed: int = 0) -> Path:
    """ODIR-5K, Kaggle layout: full_df.csv (one row per image) + ODIR-5K/Training Images + Testing Images."""
    rng = np.random.default_rng(seed)
    rows = []
    for patient in range(n_patients):
        flags = {letter: 0 for letter in "NDGCAHMO"}
        flags["N" if patient % 2 == 0 else "D"] = 1
        for side in ("left", "right"):
            file_name = f"{patient}_{side}.jpg"
            rows.append({"ID": patient, "Patient Age": int(rng.integers(30, 80)),
                         "Patient Sex": "Female" if patient % 2 else "Male", "Left-Fundus": f"{patient}_left.jpg",
                         "Right-Fundus": f"{patient}_right.jpg", "Left-Diagnostic Keywords": "normal fundus",
                         "Right-Diagnostic Keywords": "normal fundus", **flags,
                         "filepath": f"../input/{file_name}", "labels": "['N']", "target": "[1, 0, 0, 0, 0, 0, 0, 0]",
                         "filename": file_name})
            save(fundus_image(200, 240, seed=patient * 2 + (side == "left")),
                 root / "ODIR-5K" / "Training Images" / file_name, quality=90)
    pd.DataFrame(rows, columns=ODIR_COLUMNS).to_csv(root / "full_df.csv", index=False)
    for patient in range(1000, 1000 + n_test_patients):
        for side in ("left", "right"):
            save(fundus_image(200, 240, seed=patient), root / "ODIR-5K" / "Testing Images" / f"{patient}_{side}.jpg")
    return root


def make_eyepacs(root: Path, train_patients=(10, 13, 15), test_patients=(1, 2), seed: int = 0) -> Path:
    """EyePACS: trainLabels.csv (image, level) + train/*.jpeg; retinopathy_solution.csv + test/*.jpeg."""
    rng = np.random.default_rng(seed)
    for folder, patients, file_name in (("train", train_patients, "trainLabels.csv"),
                                        ("test", test_patients, "retinopathy_solution.csv")):
        rows = []
        for patient in patients:
            for side in ("left", "right"):
                name = f"{patient}_{side}"
                row = {"image": name, "level": int(rng.integers(0, 5))}
                if folder == "test":
                    row["Usage"] = "Private"
                rows.append(row)
                save(fundus_image(200, 230, seed=patient), root / folder / f"{name}.jpeg", format="JPEG")
        pd.DataFrame(rows).to_csv(root / file_name, index=False)
    return root


def make_eyeq(root: Path, seed: int = 0) -> Path:
    """EyeQ: Label_EyeQ_{train,test}.csv (unnamed index, image, quality, DR_grade) over EyePACS folders."""
    make_eyepacs(root, seed=seed)
    for folder, labels in (("train", "trainLabels.csv"), ("test", "retinopathy_solution.csv")):
        table = pd.read_csv(root / labels)
        out = pd.DataFrame({"image": table["image"] + ".jpeg", "quality": np.arange(len(table)) % 3,
                            "DR_grade": table["level"]})
        out.to_csv(root / f"Label_EyeQ_{folder}.csv")  # keeps pandas' unnamed index column, as the release has
    return root


def make_aptos(root: Path, n_images: int = 12, seed: int = 0) -> Path:
    """APTOS 2019: train.csv (id_code, diagnosis) + train_images/<id_code>.png."""
    rng = np.random.default_rng(seed)
    ids = [f"{value:012x}" for value in rng.integers(0, 2 ** 40, size=n_images)]
    for position, code in enumerate(ids):
        save(fundus_image(200, 220, seed=position), root / "train_images" / f"{code}.png")
    pd.DataFrame({"id_code": ids, "diagnosis": rng.integers(0, 5, size=n_images)}).to_csv(root / "train.csv",
                                                                                        index=False)
    return root


def make_idrid(root: Path, train=(1, 2), test=(55,)) -> Path:
    """IDRiD segmentation part with hard-exudate (and optic-disc) masks as .tif."""
    base = root / "A. Segmentation"
    for numbers, set_folder in ((train, "a. Training Set"), (test, "b. Testing Set")):
        for number in numbers:
            stem = f"IDRiD_{number:02d}"
            image = fundus_image(200, 300, seed=number)
            save(image, base / "1. Original Images" / set_folder / f"{stem}.jpg", quality=90)
            exudates = np.zeros(image.shape[:2], dtype=bool)
            exudates[90:100, 140:160] = True
            rgb = np.zeros(image.shape, dtype=np.uint8)
            rgb[exudates] = (255, 0, 0)  # IDRiD masks are RGB with the lesion in one channel
            save(rgb, base / "2. All Segmentation Groundtruths" / set_folder / "3. Hard Exudates" / f"{stem}_EX.tif")
            disc = np.zeros(image.shape[:2], dtype=bool)
            disc[80:120, 200:230] = True
            save_mask(disc, base / "2. All Segmentation Groundtruths" / set_folder / "5. Optic Disc" / f"{stem}_OD.tif")
    return root


def make_drive(root: Path, train=(21, 22), test=(1,)) -> Path:
    """DRIVE: {training,test}/images/*.tif, 1st_manual/*_manual1.gif, mask/*_mask.gif (565x584)."""
    for numbers, folder, word in ((train, "training", "training"), (test, "test", "test")):
        for number in numbers:
            image = fundus_image(584, 565, seed=number)
            save(image, root / folder / "images" / f"{number:02d}_{word}.tif")
            vessels = np.zeros(image.shape[:2], dtype=bool)
            vessels[290:294, 100:460] = True
            save_mask(vessels, root / folder / "1st_manual" / f"{number:02d}_manual1.gif")
            save_mask(image.max(axis=2) > 0, root / folder / "mask" / f"{number:02d}_{word}_mask.gif")
    return root


def make_chase(root: Path, children=(1, 2, 11)) -> Path:
    """CHASE_DB1: Image_NN{L,R}.jpg + _1stHO.png + _2ndHO.png (960x999)."""
    for child in children:
        for eye in "LR":
            stem = f"Image_{child:02d}{eye}"
            image = fundus_image(960, 999, seed=child)
            save(image, root / f"{stem}.jpg", quality=85)
            vessels = np.zeros(image.shape[:2], dtype=bool)
            vessels[480:484, 200:800] = True
            save_mask(vessels, root / f"{stem}_1stHO.png")
            save_mask(vessels, root / f"{stem}_2ndHO.png")
    return root


# -- chest X-ray ---------------------------------------------------------------------------------------------------
CHEXPERT_FINDINGS = ["No Finding", "Enlarged Cardiomediastinum", "Cardiomegaly", "Lung Opacity", "Lung Lesion",
                     "Edema", "Consolidation", "Pneumonia", "Atelectasis", "Pneumothorax", "Pleural Effusion",
                     "Pleural Other", "Fracture", "Support Devices"]
MIMIC_FINDINGS = sorted(CHEXPERT_FINDINGS)


def _write_gz_csv(table: pd.DataFrame, path: Path) -> None:
    with gzip.open(path, "wt", newline="") as handle:
        table.to_csv(handle, index=False)


def make_mimic(root: Path, images_per_patient=(4, 3, 1, 2), splits=("train", "train", "validate", "test"),
               seed: int = 0) -> Path:
    """MIMIC-CXR-JPG: metadata/chexpert/split .csv.gz + files/pXX/pSUBJECT/sSTUDY/DICOM.jpg (grayscale)."""
    rng = np.random.default_rng(seed)
    metadata, labels, split_rows = [], [], []
    for position, (count, split) in enumerate(zip(images_per_patient, splits)):
        subject = str(10000032 + position * 1111111)
        for image in range(count):
            study = str(50000000 + position * 1000 + image // 2)
            dicom = f"{rng.integers(0, 2**32):08x}-{rng.integers(0, 2**32):08x}"
            metadata.append({"dicom_id": dicom, "subject_id": subject, "study_id": study,
                             "PerformedProcedureStepDescription": "CHEST (PA AND LAT)",
                             "ViewPosition": "PA" if image % 2 == 0 else "LATERAL", "Rows": 300, "Columns": 260,
                             "StudyDate": 21800506, "StudyTime": 213014.531,
                             "ProcedureCodeSequence_CodeMeaning": "CHEST (PA AND LAT)",
                             "ViewCodeSequence_CodeMeaning": "postero-anterior",
                             "PatientOrientationCodeSequence_CodeMeaning": "Erect"})
            split_rows.append({"dicom_id": dicom, "study_id": study, "subject_id": subject, "split": split})
            save(gray_image(300, 260, seed=len(metadata)),
                 root / "files" / f"p{subject[:2]}" / f"p{subject}" / f"s{study}" / f"{dicom}.jpg", quality=90)
            if image % 2 == 0:
                row = {"subject_id": subject, "study_id": study}
                row.update({finding: rng.choice([1.0, 0.0, -1.0, np.nan]) for finding in MIMIC_FINDINGS})
                labels.append(row)
    _write_gz_csv(pd.DataFrame(metadata), root / "mimic-cxr-2.0.0-metadata.csv.gz")
    _write_gz_csv(pd.DataFrame(labels, columns=["subject_id", "study_id"] + MIMIC_FINDINGS),
                  root / "mimic-cxr-2.0.0-chexpert.csv.gz")
    _write_gz_csv(pd.DataFrame(split_rows), root / "mimic-cxr-2.0.0-split.csv.gz")
    return root


def make_chexpert(root: Path, n_patients: int = 8, valid_patients: int = 2, seed: int = 0,
                  valid_first: int = 64541) -> Path:
    """CheXpert-v1.0-small: train.csv / valid.csv (real columns, 1/0/-1/blank) + patientNNNNN/studyN/viewN_*.jpg."""
    rng = np.random.default_rng(seed)
    release = root / "CheXpert-v1.0-small"
    for split, patients in (("train", range(1, n_patients + 1)),
                            ("valid", range(valid_first, valid_first + valid_patients))):
        rows = []
        for patient in patients:
            for view in (1, 2):
                path = f"CheXpert-v1.0-small/{split}/patient{patient:05d}/study1/view{view}_" \
                       f"{'frontal' if view == 1 else 'lateral'}.jpg"
                row = {"Path": path, "Sex": ["Male", "Female", "Unknown"][patient % 3],
                       "Age": int(rng.integers(20, 90)), "Frontal/Lateral": "Frontal" if view == 1 else "Lateral",
                       "AP/PA": "AP" if view == 1 else ""}
                row.update({finding: rng.choice([1.0, 0.0, -1.0, np.nan]) for finding in CHEXPERT_FINDINGS})
                row["Pleural Effusion"] = float((patient + view) % 2)
                rows.append(row)
                save(gray_image(320, 270, seed=patient * 3 + view), root / path, quality=90)
        pd.DataFrame(rows).to_csv(release / f"{split}.csv", index=False)
    return root


# -- iris and faces ------------------------------------------------------------------------------------------------
def make_warsaw_iris(root: Path, n_subjects: int = 6, images_per_subject: int = 4) -> Path:
    """Warsaw-BioBase-Disease-Iris: <subject>/<subject>_<eye>_<n>.bmp (grayscale 640x480 scaled down) + labels.csv."""
    rows = []
    for subject in range(1, n_subjects + 1):
        for number in range(images_per_subject):
            eye = "L" if number % 2 == 0 else "R"
            relative = f"{subject:04d}/{subject:04d}_{eye}_{number}.bmp"
            save(iris_image(240, 320, seed=subject * 10 + number), root / relative)
            rows.append({"image": relative, "glaucoma": int(subject % 4 == 0), "eye": eye})
    pd.DataFrame(rows).to_csv(root / "labels.csv", index=False)
    return root


CELEBA_ATTRIBUTES = ["5_o_Clock_Shadow", "Arched_Eyebrows", "Attractive", "Bags_Under_Eyes", "Bald", "Bangs",
                     "Big_Lips", "Big_Nose", "Black_Hair", "Blond_Hair", "Blurry", "Brown_Hair", "Bushy_Eyebrows",
                     "Chubby", "Double_Chin", "Eyeglasses", "Goatee", "Gray_Hair", "Heavy_Makeup", "High_Cheekbones",
                     "Male", "Mouth_Slightly_Open", "Mustache", "Narrow_Eyes", "No_Beard", "Oval_Face", "Pale_Skin",
                     "Pointy_Nose", "Receding_Hairline", "Rosy_Cheeks", "Sideburns", "Smiling", "Straight_Hair",
                     "Wavy_Hair", "Wearing_Earrings", "Wearing_Hat", "Wearing_Lipstick", "Wearing_Necklace",
                     "Wearing_Necktie", "Young"]


def make_celebamask(root: Path, n_images: int = 12, n_identities: int = 4, seed: int = 0) -> Path:
    """CelebAMask-HQ: CelebA-HQ-img/<idx>.jpg, mask-anno/<idx//2000>/<idx:05d>_<part>.png, attribute, mapping and
    CelebA identity files."""
    rng = np.random.default_rng(seed)
    attribute_lines = [str(n_images), " ".join(CELEBA_ATTRIBUTES)]
    mapping_lines = ["idx         orig_idx    orig_file"]
    identity_lines = []
    for idx in range(n_images):
        image = np.full((256, 256, 3), 90, dtype=np.uint8)
        image[64:192, 80:176] = (200, 160, 140)
        save(image, root / "CelebA-HQ-img" / f"{idx}.jpg", quality=90)
        skin = np.zeros((128, 128), dtype=bool)
        skin[32:96, 40:88] = True
        save_mask(skin, root / "CelebAMask-HQ-mask-anno" / str(idx // 2000) / f"{idx:05d}_skin.png")
        hair = np.zeros((128, 128), dtype=bool)
        hair[20:32, 40:88] = True
        save_mask(hair, root / "CelebAMask-HQ-mask-anno" / str(idx // 2000) / f"{idx:05d}_hair.png")
        values = rng.choice([-1, 1], size=len(CELEBA_ATTRIBUTES))
        attribute_lines.append(f"{idx}.jpg  " + " ".join(str(v) for v in values))
        orig_idx = 1000 + idx * 7
        mapping_lines.append(f"{idx:<12}{orig_idx:<12}{orig_idx + 1:06d}.jpg")
        identity_lines.append(f"{orig_idx + 1:06d}.jpg {idx % n_identities + 100}")
    (root / "CelebAMask-HQ-attribute-anno.txt").write_text("\n".join(attribute_lines) + "\n")
    (root / "CelebA-HQ-to-CelebA-mapping.txt").write_text("\n".join(mapping_lines) + "\n")
    (root / "identity_CelebA.txt").write_text("\n".join(identity_lines) + "\n")
    return root


def snapshot(root: Path) -> dict:
    """{relative path: (size, mtime_ns, sha-free content bytes length)} of every file: compare before/after."""
    return {str(path.relative_to(root)): (path.stat().st_size, path.stat().st_mtime_ns, path.read_bytes())
            for path in sorted(root.rglob("*")) if path.is_file()}
