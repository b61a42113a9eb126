"""Real-dataset manifests, loaders and `anonpaper data check`, on fake trees that mimic the real layouts."""

from __future__ import annotations

import gzip
import shutil

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from anonpaper.cli import main
from anonpaper.data import load_cohort
from anonpaper.data.cohort import dr_grade_to_3class
from anonpaper.data.manifests import available_manifests, load_manifest, manifests_dir, validate_manifest
from anonpaper.data.real.base import DataError, read_image_file
from anonpaper.data.real.check import check_dataset
from anonpaper.data.registry import DATASETS
from anonpaper.data.splits import PROTOCOL_KINDS
from fakes import trees

# Protocols scaled down to the fake trees (the manifests' own protocols ask for thousands of images).
SMALL_PROTOCOLS = {
    "chexpert": {"kind": "disjoint_patient_counts", "counts": [6, 2, 2], "balance": "label_pleural_effusion"},
    "warsaw-iris": {"kind": "image_counts_keep_ratio", "counts": [14, 4, 6], "stratify": "disease"},
    "celebamask-hq": {"kind": "identity_counts", "n_identities": [2, 1, 1]},
    "odir-5k": {"kind": "source_counts", "counts": {"odir-train": ["train", 8], "odir-test": ["test", 4]}},
    "aptos2019": {"kind": "pool", "pool_size": 8},
    "mimic-cxr-jpg": "official",
}
MAKERS = {
    "brset": trees.make_brset, "odir-5k": trees.make_odir, "eyepacs": trees.make_eyepacs, "eyeq": trees.make_eyeq,
    "aptos2019": trees.make_aptos, "idrid": trees.make_idrid, "drive": trees.make_drive,
    "chase-db1": trees.make_chase, "mimic-cxr-jpg": trees.make_mimic, "chexpert": trees.make_chexpert,
    "warsaw-iris": trees.make_warsaw_iris, "celebamask-hq": trees.make_celebamask,
}


@pytest.fixture
def brset(tmp_path):
    return trees.make_brset(tmp_path / "brset")


# -- manifests -----------------------------------------------------------------------------------------------------
@pytest.mark.unit
def test_every_manifest_is_valid_registered_and_documented():
    names = available_manifests()
    assert set(names) == set(MAKERS)
    for name in names:
        manifest = load_manifest(name)
        assert DATASETS[name] == manifest.loader  # one registry: the manifest and the registry agree
        for protocol in manifest.split_protocols.values():
            assert protocol["kind"] in PROTOCOL_KINDS
        assert manifest.citation.strip() and manifest.homepage.startswith("http") and manifest.licence.strip()
        assert "tree" in manifest.layout and manifest.label_mapping
    assert load_manifest("brset").access["credentialed"] and load_manifest("mimic-cxr-jpg").access["credentialed"]
    assert not load_manifest("chexpert").access["credentialed"]


@pytest.mark.unit
def test_manifest_validation_and_location(tmp_path, monkeypatch):
    import yaml

    data = yaml.safe_load((manifests_dir() / "brset.yaml").read_text())
    validate_manifest(data, "brset.yaml")
    broken = {key: value for key, value in data.items() if key != "licence"}
    with pytest.raises(ValueError, match="missing required key 'licence'"):
        validate_manifest(broken, "x.yaml")
    with pytest.raises(ValueError, match="default_protocol"):
        validate_manifest({**data, "default_protocol": "nope"}, "x.yaml")
    with pytest.raises(ValueError, match="no data manifest 'nope'"):
        load_manifest("nope")
    (tmp_path / "data_manifests").mkdir()
    shutil.copy(manifests_dir() / "brset.yaml", tmp_path / "data_manifests" / "brset.yaml")
    monkeypatch.setenv("ANONPAPER_PROJECT_ROOT", str(tmp_path))
    assert manifests_dir() == tmp_path / "data_manifests"
    assert available_manifests() == ["brset"]


# -- every loader on its fake tree ---------------------------------------------------------------------------------
@pytest.mark.unit
@pytest.mark.parametrize("name", sorted(MAKERS))
def test_loader_reads_fake_tree_into_the_common_cohort(name, tmp_path):
    root = MAKERS[name](tmp_path / name)
    before = trees.snapshot(root)
    cohort = load_cohort(name, root, protocol=SMALL_PROTOCOLS.get(name))
    manifest = load_manifest(name)
    assert len(cohort) > 0 and cohort.problems.empty
    assert cohort.modality == manifest.modality
    table = cohort.table
    assert set(table["split"]) <= {"train", "val", "test"}
    assert (table.groupby("patient_id")["split"].nunique() == 1).all()
    image = cohort.image(0)
    assert image.dtype == np.uint8
    assert image.ndim == (3 if manifest.image["channels"] == 3 else 2)
    for mask_name, mask in cohort.masks(0).items():
        assert mask.dtype == bool and mask.shape == image.shape[:2] and mask.any()
    if "dr_grade" in table.columns:
        assert table["dr_grade"].between(0, 4).all()
        assert np.array_equal(table["dr_3class"], dr_grade_to_3class(table["dr_grade"].to_numpy()))
    assert trees.snapshot(root) == before  # nothing in the data root is modified


@pytest.mark.unit
def test_brset_label_encodings_follow_the_release(brset):
    raw = pd.read_csv(brset / "labels.csv", dtype={"image_id": str, "patient_id": str})
    cohort = load_cohort("brset", brset)
    merged = cohort.table.merge(raw, on="image_id", suffixes=("", "_raw"))
    assert len(merged) == len(raw)
    assert (merged["sex"] == merged["patient_sex"].map({1: "M", 2: "F"})).all()
    assert (merged["eye"] == merged["exam_eye"].map({1: "R", 2: "L"})).all()
    ages = merged["patient_age"].astype(str).str.replace(",", ".").astype(float)
    assert np.allclose(merged["age"], ages)
    assert (merged["dr_grade"] == merged["DR_ICDR"]).all()
    assert (merged["label_macular_edema"] == merged["macular_edema"]).all()
    # Paper 2's protocol: 70/10/20 by patient (tiny strata here, so only the patient-level property is exact).
    assert cohort.table.groupby("patient_id")["split"].nunique().max() == 1
    assert cohort.image(0).shape == (208, 224, 3)
    resized = load_cohort("brset", brset, image_size=48)
    assert resized.image(0).shape == (48, 48, 3)


@pytest.mark.unit
def test_odir_expands_patients_to_eyes_and_applies_a_quality_file(tmp_path):
    root = trees.make_odir(tmp_path / "odir")
    cohort = load_cohort("odir-5k", root, protocol="patient_70_10_20")
    table = cohort.table
    train = table[table["source"] == "odir-train"]
    assert (train.groupby("patient_id")["eye"].apply(set) == {"L", "R"}).all()
    assert set(train["sex"]) == {"F", "M"}
    # Patient-level flags are identical on both eyes.
    assert (train.groupby("patient_id")["label_normal"].nunique() == 1).all()
    assert table.loc[table["source"] == "odir-test", "patient_id"].str.startswith("test-").all()
    grades = tmp_path / "quality.csv"  # outside the data root: the user's EyeQ grading
    names = sorted(p.name for p in (root / "ODIR-5K" / "Training Images").iterdir())
    pd.DataFrame({"image": names, "quality": [0, 1, 2] * (len(names) // 3)}).to_csv(grades, index=False)
    survival = []
    graded = load_cohort("odir-5k", root, quality_file=grades, include_test=False, protocol="patient_70_10_20",
                         survival=survival)
    assert len(graded) == len(names) - len(names) // 3
    assert ("EyeQ quality Good or Usable (quality <= 1)", len(graded)) in survival


@pytest.mark.unit
def test_masks_follow_preprocessing(tmp_path):
    root = trees.make_idrid(tmp_path / "idrid")
    raw = load_cohort("idrid", root)
    cropped = load_cohort("idrid", root, image_size=64)
    image, masks = cropped.image(0), cropped.masks(0)
    assert image.shape == (64, 64, 3) and masks["hard_exudates"].shape == (64, 64)
    # The exudate patch sits where the same crop puts it: compare with cropping the raw mask by hand.
    from anonpaper.data.preprocessing import crop_fundus

    _, expected = crop_fundus(raw.image(0), 64, masks={"hard_exudates": raw.mask(0, "hard_exudates")})
    assert np.array_equal(masks["hard_exudates"], expected["hard_exudates"])
    cxr = load_cohort("mimic-cxr-jpg", trees.make_mimic(tmp_path / "mimic"), protocol="official", image_size=40)
    assert cxr.image(0).shape == (40, 40)
    iris = load_cohort("warsaw-iris", trees.make_warsaw_iris(tmp_path / "iris"),
                       protocol=SMALL_PROTOCOLS["warsaw-iris"], image_size=32)
    assert iris.image(0).shape == (32, 32)


@pytest.mark.unit
def test_mimic_official_split_min_images_and_label_encoding(tmp_path):
    root = trees.make_mimic(tmp_path / "mimic")
    cohort = load_cohort("mimic-cxr-jpg", root, protocol="official")
    table = cohort.table
    assert set(table["split"]) == {"train", "val", "test"}  # "validate" -> "val"
    assert table["path"].str.match(r"^files/p\d\d/p\d{8}/s\d{8}/[0-9a-f-]+\.jpg$").all()
    labels = pd.read_csv(root / "mimic-cxr-2.0.0-chexpert.csv.gz", dtype={"subject_id": str, "study_id": str})
    merged = table.merge(labels, on="study_id")
    assert np.array_equal(merged["label_pleural_effusion"].fillna(9), merged["Pleural Effusion"].fillna(9))
    assert (merged["label_pleural_effusion"].dropna().isin([-1, 0, 1])).all()
    kept = load_cohort("mimic-cxr-jpg", root,
                       protocol={"kind": "official", "column": "official_split", "min_images": 3})
    assert kept.table.groupby("patient_id").size().min() >= 3 and kept.table["patient_id"].nunique() == 2
    assert load_manifest("mimic-cxr-jpg").split_protocols["paper3"]["min_images"] == 20


@pytest.mark.unit
def test_chexpert_root_may_be_parent_or_release_folder(tmp_path):
    root = trees.make_chexpert(tmp_path / "chexpert")
    for folder in (root, root / "CheXpert-v1.0-small"):
        cohort = load_cohort("chexpert", folder, protocol=SMALL_PROTOCOLS["chexpert"])
        assert cohort.table["split"].value_counts().to_dict() == {"train": 6, "val": 2, "test": 2}
        for name, group in cohort.table.groupby("split"):
            assert group["label_pleural_effusion"].mean() == 0.5  # balanced, as paper 5's set
        assert cohort.table["sex"].dropna().isin(["F", "M"]).all() and cohort.table["sex"].isna().any()
        cohort.image(0)


@pytest.mark.unit
def test_iris_image_level_protocol_kept_beside_a_patient_level_split(tmp_path):
    root = trees.make_warsaw_iris(tmp_path / "iris")
    cohort = load_cohort("warsaw-iris", root, protocol=SMALL_PROTOCOLS["warsaw-iris"])
    table = cohort.table
    assert table["split_within_subject"].value_counts().to_dict() == {"train": 14, "test": 6, "val": 4}
    assert (table.groupby("patient_id")["split_within_subject"].nunique() > 1).any()  # subjects shared, as paper 5
    assert (table.groupby("patient_id")["split"].nunique() == 1).all()


@pytest.mark.unit
def test_celebamask_identity_smiling_and_foreground(tmp_path):
    root = trees.make_celebamask(tmp_path / "celeb")
    cohort = load_cohort("celebamask-hq", root, protocol=SMALL_PROTOCOLS["celebamask-hq"])
    lines = (root / "CelebAMask-HQ-attribute-anno.txt").read_text().splitlines()
    smiling_column = lines[1].split().index("Smiling") + 1
    smiling = {line.split()[0][:-4]: int(line.split()[smiling_column]) for line in lines[2:]}
    for row in cohort.table.itertuples():
        assert row.label_smiling == (1.0 if smiling[row.image_id] == 1 else 0.0)
    foreground = cohort.mask(0, "foreground")
    assert foreground.shape == (256, 256)
    assert foreground.sum() == (64 * 2) * (48 * 2) + (12 * 2) * (48 * 2)  # skin + hair at 2x (512 -> 1024 scale)


# -- bad input -----------------------------------------------------------------------------------------------------
@pytest.mark.unit
def test_bad_label_values_and_duplicates_are_listed_never_guessed(brset):
    table = pd.read_csv(brset / "labels.csv", dtype={"image_id": str, "patient_id": str})
    table.loc[0, "patient_sex"] = 3
    table.loc[1, "DR_ICDR"] = 7
    duplicate = table.iloc[[4]].assign(DR_ICDR=(table.loc[4, "DR_ICDR"] + 1) % 5)
    pd.concat([table, duplicate]).to_csv(brset / "labels.csv", index=False)
    cohort = load_cohort("brset", brset)
    problems = cohort.problems.set_index("record")
    assert problems.loc[table.loc[0, "image_id"], "kind"] == "bad_label"
    assert "patient_sex" in problems.loc[table.loc[0, "image_id"], "message"]
    assert "DR_ICDR" in problems.loc[table.loc[1, "image_id"], "message"]
    assert problems.loc[table.loc[4, "image_id"], "kind"] == "duplicate_id"
    kept = set(cohort.table["image_id"])
    assert not kept & {table.loc[i, "image_id"] for i in (0, 1, 4)} and len(kept) == len(table) - 3
    with pytest.raises(DataError, match="bad_label"):
        load_cohort("brset", brset, on_error="raise")


@pytest.mark.unit
def test_missing_label_column_is_a_clear_error(brset):
    table = pd.read_csv(brset / "labels.csv")
    table.drop(columns=["DR_ICDR"]).to_csv(brset / "labels.csv", index=False)
    with pytest.raises(DataError, match=r"lacks column\(s\) \['DR_ICDR'\]"):
        load_cohort("brset", brset)
    report = check_dataset("brset", brset)
    assert not report.ok and "DR_ICDR" in report.fatal
    assert main(["data", "check", "brset", "--root", str(brset)]) == 1


@pytest.mark.unit
def test_patient_ids_colliding_across_sources(tmp_path):
    # CheXpert's train and valid sets hold different patients; the same patient id in both is a listed skip.
    root = trees.make_chexpert(tmp_path / "chexpert", n_patients=8, valid_patients=2, valid_first=8)
    cohort = load_cohort("chexpert", root, protocol="patient_70_10_20")
    assert "patient00008" not in set(cohort.table["patient_id"])
    assert (cohort.problems["kind"] == "patient_collision").sum() == 1
    assert set(cohort.table["patient_id"]) == {f"patient{i:05d}" for i in list(range(1, 8)) + [9]}
    with pytest.raises(DataError, match="patient_collision"):
        load_cohort("chexpert", root, on_error="raise", protocol="patient_70_10_20")
    # In EyePACS a shared patient also means shared image names: reported as duplicate ids, never merged.
    eyepacs = trees.make_eyepacs(tmp_path / "eyepacs", train_patients=(10, 13), test_patients=(13, 2))
    problems = load_cohort("eyepacs", eyepacs).problems
    assert set(problems["record"]) == {"13_left", "13_right"} and set(problems["kind"]) == {"duplicate_id"}


@pytest.mark.unit
def test_corrupt_files_are_read_lazily_and_fail_clearly(brset, tmp_path):
    photos = brset / "fundus_photos"
    (photos / "img00001.jpg").write_bytes(b"")
    (photos / "img00002.jpg").write_bytes((photos / "img00003.jpg").read_bytes()[:300])  # truncated JPEG
    Image.fromarray(np.full((220, 230), 100, dtype=np.uint8)).save(photos / "img00004.jpg")  # grayscale
    sixteen = np.full((220, 230, 3), 0, dtype=np.uint16)
    Image.fromarray(np.full((220, 230), 257 * 100, dtype=np.uint16)).save(tmp_path / "deep.png")
    cohort = load_cohort("brset", brset)  # zero-byte is caught by a stat; the rest only when read (lazy)
    assert "img00001" not in set(cohort.table["image_id"])
    assert cohort.problems.set_index("record").loc["img00001", "kind"] == "zero_byte"
    position = {image_id: i for i, image_id in enumerate(cohort.table["image_id"])}
    with pytest.raises(DataError, match="corrupt or unreadable") as error:
        cohort.image(position["img00002"])
    assert error.value.kind == "corrupt_image"
    with pytest.raises(DataError, match="1-channel image, expected 3-channel"):
        cohort.image(position["img00004"])
    with pytest.raises(DataError, match="16-bit") as error:
        read_image_file(tmp_path / "deep.png", channels=1)
    assert error.value.kind == "16bit"
    assert read_image_file(tmp_path / "deep.png", channels=1, allow_16bit=True).max() == 100
    assert sixteen.dtype == np.uint16


# -- anonpaper data check ------------------------------------------------------------------------------------------
@pytest.mark.unit
def test_data_check_cli_exit_codes_and_read_only(brset, tmp_path, capsys):
    before = trees.snapshot(brset)
    assert main(["data", "check", "brset", "--root", str(brset)]) == 0
    out = capsys.readouterr().out
    assert "result: OK" in out and "in default split protocol 'paper2'" in out
    assert main(["data", "check", "no-such-dataset", "--root", str(brset)]) == 2
    assert main(["data", "check", "brset", "--root", str(tmp_path / "absent")]) == 2
    photos = brset / "fundus_photos"
    (photos / "img00005.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    Image.fromarray(np.zeros((220, 230, 3), dtype=np.uint8)).save(photos / "img00006.jpg")
    noise = np.random.default_rng(0).integers(0, 255, size=(60, 60, 3), dtype=np.uint8)
    Image.fromarray(noise).save(photos / "img00007.jpg")
    (photos / "img00008.jpg").unlink()
    before = trees.snapshot(brset)
    capsys.readouterr()
    assert main(["data", "check", "brset", "--root", str(brset)]) == 1
    out = capsys.readouterr().out
    for kind in ("corrupt_image", "blank_image", "small_image", "missing_file"):
        assert kind in out
    assert "      16  images decode" in out  # 20 - missing - corrupt - blank - small
    assert trees.snapshot(brset) == before
    assert main(["data", "check", "brset", "--root", str(brset), "--on-error", "raise"]) == 1
    assert "stopped:" in capsys.readouterr().out


@pytest.mark.unit
@pytest.mark.parametrize("name", ["eyepacs", "idrid", "chase-db1", "mimic-cxr-jpg"])
def test_data_check_passes_on_clean_fake_trees(name, tmp_path):
    if name == "mimic-cxr-jpg":  # paper 3 keeps patients with >= 20 images: give one patient 20
        root = trees.make_mimic(tmp_path / name, images_per_patient=(20, 3, 1, 2))
    else:
        root = MAKERS[name](tmp_path / name)
    report = check_dataset(name, root)
    assert report.problems.empty and report.fatal is None, report.summary()
    assert report.survival[0][1] > 0 and report.root_unchanged


@pytest.mark.unit
def test_data_check_reports_unsatisfiable_protocol_and_mask_problems(tmp_path):
    root = trees.make_chexpert(tmp_path / "chexpert")
    report = check_dataset("chexpert", root)  # paper 5 asks for 6500 images; the fake tree has 20
    assert not report.ok and "protocol" in set(report.problems["kind"])
    mimic = trees.make_mimic(tmp_path / "mimic")  # nobody has >= 20 images: paper 3's protocol keeps no one
    report = check_dataset("mimic-cxr-jpg", mimic)
    assert not report.ok and "no record survives" in report.summary()
    drive = trees.make_drive(tmp_path / "drive")
    Image.fromarray(np.zeros((10, 10), dtype=np.uint8)).save(drive / "training" / "1st_manual" / "21_manual1.gif")
    report = check_dataset("drive", drive)
    assert "mask_size" in set(report.problems["kind"])


@pytest.mark.unit
def test_real_dataset_needs_a_root():
    with pytest.raises(ValueError, match="DATA_ROOT"):
        load_cohort("brset")


@pytest.mark.unit
def test_gz_reading_is_not_confused_by_compressed_labels(tmp_path):
    # The MIMIC label files are gzip-compressed CSVs; a corrupt one is a structure error naming the file.
    root = trees.make_mimic(tmp_path / "mimic")
    with gzip.open(root / "mimic-cxr-2.0.0-split.csv.gz", "wt") as handle:
        handle.write("dicom_id,study_id\n1,2\n")
    with pytest.raises(DataError, match=r"mimic-cxr-2.0.0-split.csv.gz.*lacks column\(s\) \['subject_id', 'split'\]"):
        load_cohort("mimic-cxr-jpg", root, protocol="official")


@pytest.mark.unit
def test_data_check_lists_16bit_and_wrong_modality_images(tmp_path):
    aptos = trees.make_aptos(tmp_path / "aptos")
    first = sorted((aptos / "train_images").iterdir())[0]
    Image.fromarray(np.full((220, 230), 30000, dtype=np.uint16)).save(first)  # a 16-bit PNG
    report = check_dataset("aptos2019", aptos)
    problems = report.problems.set_index("record")
    assert problems.loc[first.stem, "kind"] == "16bit" and not report.ok
    mimic = trees.make_mimic(tmp_path / "mimic", images_per_patient=(20, 3, 1, 2))
    colour = sorted((mimic / "files").rglob("*.jpg"))[0]
    photo = np.zeros((300, 260, 3), dtype=np.uint8)
    photo[..., 0] = 200  # a colour photograph where a grayscale radiograph is expected
    Image.fromarray(photo).save(colour)
    report = check_dataset("mimic-cxr-jpg", mimic)
    problems = report.problems.set_index("record")
    assert problems.loc[colour.stem, "kind"] == "wrong_channels"
    assert "expected grayscale" in problems.loc[colour.stem, "message"]


@pytest.mark.unit
def test_mimic_studies_without_or_with_repeated_label_rows_are_skipped(tmp_path):
    root = trees.make_mimic(tmp_path / "mimic")
    labels = pd.read_csv(root / "mimic-cxr-2.0.0-chexpert.csv.gz", dtype=str)
    dropped_study, repeated_study = labels.loc[0, "study_id"], labels.loc[1, "study_id"]
    labels = pd.concat([labels.iloc[1:], labels.iloc[[1]]])
    with gzip.open(root / "mimic-cxr-2.0.0-chexpert.csv.gz", "wt", newline="") as handle:
        labels.to_csv(handle, index=False)
    cohort = load_cohort("mimic-cxr-jpg", root, protocol="official")
    assert not set(cohort.table["study_id"]) & {dropped_study, repeated_study}
    assert {"bad_label", "duplicate_id"} <= set(cohort.problems["kind"])


@pytest.mark.unit
def test_data_check_notes_unexpected_columns(brset):
    table = pd.read_csv(brset / "labels.csv")
    table.assign(my_extra_column=1).to_csv(brset / "labels.csv", index=False)
    report = check_dataset("brset", brset)
    assert report.ok  # extra columns do not change any label
    assert any("my_extra_column" in note for note in report.notes)
