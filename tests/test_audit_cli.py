"""`anonpaper audit` on folders: a phantom cohort written by `anonpaper cohort generate`, anonymized by
`anonpaper anonymize`, then audited (smoke size: 24 patients at 64 px, one CPU thread, about half a minute); and
bad input refused with exit code 2 and an error naming the file and the problem."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import cv2
import numpy as np
import pandas as pd
import pytest

from anonpaper.cli import main

pytestmark = pytest.mark.unit

# Small networks: the CLI test checks the command, not the attackers' strength (tests/test_audit.py does).
SMOKE = ["-o", "identity_epochs", "10", "-o", "classifier_epochs", "5", "-o", "bootstrap_resamples", "50"]
TINY = ["-o", "identity_epochs", "2", "-o", "classifier_epochs", "1", "-o", "bootstrap_resamples", "10"]


def digest(folder: Path) -> dict[str, str]:
    return {path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A written phantom cohort and its release by Gaussian blur (sigma 1 px), both written by the CLI."""
    root = tmp_path_factory.mktemp("audit-cli")
    cohort, released = root / "cohort", root / "released"
    assert main(["cohort", "generate", "phantom-retina", "--out", str(cohort), "--n-patients", "24", "--image-size",
                 "64", "--seed", "1", "-o", "images_per_patient", "[2, 3]", "-o", "sex_effect", "8", "--quiet"]) == 0
    assert main(["anonymize", "blur", "-o", "sigma", "1", "--in", str(cohort), "--out", str(released), "--quiet"]) == 0
    return cohort, released


def test_audit_of_an_anonymized_cohort_folder(folders, tmp_path, capsys):
    cohort, released = folders
    before = digest(cohort), digest(released)
    out = tmp_path / "report"
    assert main(["audit", "--original", str(cohort), "--released", str(released), "--out", str(out), "--quiet",
                 *SMOKE]) == 0
    assert (digest(cohort), digest(released)) == before  # the inputs are never written to
    assert sorted(path.name for path in out.iterdir()) == ["report.html", "report.json"]
    report = json.loads((out / "report.json").read_text())
    assert set(report["threats"]) == {"linkage", "attribute", "membership"}
    assert set(report["utility"]) == {"dr_grade", "image_fidelity"}
    assert report["sensitive_attribute"] == "sex" and report["counts"]["released_patients"] == 24
    for section in ("threats", "utility"):
        for group, scores in report[section].items():
            for name, entry in scores.items():
                assert {"value", "se", "chance", "original", "advantage_retained"} <= set(entry), (group, name)
                if name != "psnr":
                    assert entry["original"] is not None and entry["se"] is not None, (group, name)
    linkage = report["threats"]["linkage"]["rank1"]
    assert linkage["original"] > linkage["chance"]  # the identity attacker links the originals
    assert "<svg" in (out / "report.html").read_text()
    assert "wrote" in capsys.readouterr().out
    # A second run into the same folder is refused without --overwrite.
    assert main(["audit", "--original", str(cohort), "--released", str(released), "--out", str(out), "--quiet"]) == 2
    assert "is not empty" in capsys.readouterr().err


def test_audit_of_a_plain_folder_with_a_labels_csv(folders, tmp_path):
    cohort, released = folders
    plain = tmp_path / "plain"
    shutil.copytree(cohort / "images", plain)
    table = pd.read_csv(cohort / "manifest.csv")
    labels = tmp_path / "labels.csv"
    pd.DataFrame({"file": table["image_id"] + ".png", "patient": table["patient_id"], "sex": table["sex"],
                  "dr_grade": table["dr_grade"]}).to_csv(labels, index=False)
    out = tmp_path / "report"
    # A plain copy of the cohort's images/ pairs with the release's images/ (same relative paths).
    assert main(["audit", "--original", str(plain), "--released", str(released / "images"), "--labels", str(labels),
                 "--out", str(out), "--quiet", *TINY]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["inputs"]["labels"] == str(labels) and "dr_grade" in report["utility"]


def test_audit_of_a_k_salsa_release(folders, tmp_path):
    """A GAN method end to end on the command line: `cohort generate` -> `anonymize k-salsa` -> `audit`."""
    cohort, _ = folders
    released, out = tmp_path / "k-salsa", tmp_path / "report"
    assert main(["anonymize", "k-salsa", "--in", str(cohort), "--out", str(released), "--quiet", "-o", "k", "3",
                 "-o", "profile", "smoke", "-o", "projector_steps", "2", "-o", "alignment_steps", "1"]) == 0
    assert main(["audit", "--original", str(cohort), "--released", str(released), "--out", str(out), "--quiet",
                 *TINY]) == 0
    report = json.loads((out / "report.json").read_text())
    assert set(report["threats"]) == {"linkage", "attribute", "membership"}
    assert report["counts"]["released_patients"] == 24
    # Each released image is its cluster's synthetic image: far from its source in pixels.
    psnr = report["utility"]["image_fidelity"]["psnr"]
    assert psnr["value"] is not None and psnr["value"] < 30


# Every method of `anonpaper anonymize`, pixel and GAN, on the modality it works on, at smoke size.
EVERY_METHOD = {
    "snow": ("fundus", ["--p", "0.3"]), "vs-snow": ("fundus", ["-o", "p", "0.5"]),
    "blur": ("cxr", ["-o", "sigma", "2"]), "pixelate": ("cxr", ["-o", "block", "8"]),
    "gaussian-noise": ("cxr", ["-o", "sigma", "0.2"]), "constant": ("fundus", []),
    "k-same-pixel": ("cxr", ["-o", "k", "3"]),
    "k-salsa": ("fundus", ["-o", "k", "3", "-o", "profile", "smoke", "-o", "projector_steps", "2", "-o",
                           "alignment_steps", "1"]),
    "sspace-vessel-edit": ("fundus", ["-o", "profile", "smoke", "-o", "projector_steps", "2", "-o", "score_images",
                                      "4"]),
    "stylespace": ("fundus", ["-o", "profile", "smoke", "-o", "projector_steps", "2", "-o", "score_images", "4"]),
    "lowrankgan": ("fundus", ["-o", "profile", "smoke", "-o", "projector_steps", "2", "-o", "score_images", "4"]),
    "resefa": ("fundus", ["-o", "profile", "smoke", "-o", "projector_steps", "2", "-o", "score_images", "4"]),
    "gmia": ("cxr", ["-o", "profile", "smoke", "-o", "steps", "3"]),
    "identity-swap": ("cxr", ["-o", "profile", "smoke"]),
}


@pytest.fixture(scope="module")
def cxr_cohort(tmp_path_factory):
    """A written chest X-ray phantom cohort of 24 patients (3 images each, 64 px)."""
    cohort = tmp_path_factory.mktemp("audit-cli-cxr") / "cohort"
    assert main(["cohort", "generate", "phantom-cxr", "--out", str(cohort), "--n-patients", "24", "--image-size", "64",
                 "--seed", "1", "-o", "images_per_patient", "3", "--quiet"]) == 0
    return cohort


def test_every_anonymize_method_has_an_audit_test():
    from anonpaper.experiments.releases import LEARNED_METHODS
    from anonpaper.methods.registry import available

    assert set(EVERY_METHOD) == set(available()) | set(LEARNED_METHODS)


@pytest.mark.parametrize("method", sorted(EVERY_METHOD))
def test_anonymize_then_audit_with_every_method(folders, cxr_cohort, tmp_path, method):
    """`cohort generate` -> `anonymize METHOD` -> `audit`: every method's release is audited on one footing."""
    modality, options = EVERY_METHOD[method]
    cohort = folders[0] if modality == "fundus" else cxr_cohort
    released, out = tmp_path / "released", tmp_path / "report"
    assert main(["anonymize", method, "--in", str(cohort), "--out", str(released), "--quiet", *options]) == 0
    assert main(["audit", "--original", str(cohort), "--released", str(released), "--out", str(out), "--quiet",
                 *TINY]) == 0
    report = json.loads((out / "report.json").read_text())
    assert set(report["threats"]) == {"linkage", "attribute", "membership"}
    assert report["counts"]["released_patients"] == 24
    assert report["inputs"]["method"].split(" ")[0] == method  # read from the release's release.json


def _refused(capsys, arguments: list[str], *expected: str) -> None:
    assert main(["audit", *arguments, "--quiet"]) == 2
    error = capsys.readouterr().err
    for text in expected:
        assert text in error, error


def test_bad_folders_are_refused_naming_the_file(folders, tmp_path, capsys):
    cohort, released = folders
    out = str(tmp_path / "out")
    # An unpaired released file (the release keeps the cohort's layout: its images are under images/).
    extra = tmp_path / "extra"
    shutil.copytree(released, extra)
    cv2.imwrite(str(extra / "images" / "stray.png"), np.zeros((64, 64, 3), np.uint8))
    _refused(capsys, ["--original", str(cohort), "--released", str(extra), "--out", out], "stray.png",
             "unpaired file")
    # A released image of another size.
    resized = tmp_path / "resized"
    shutil.copytree(released, resized)
    first = sorted((resized / "images").glob("*.png"))[0]
    cv2.imwrite(str(first), np.zeros((32, 32, 3), np.uint8))
    _refused(capsys, ["--original", str(cohort), "--released", str(resized), "--out", out], first.name,
             "must keep the originals' size")
    # A release of 3 patients: fewer than the attackers need.
    table = pd.read_csv(cohort / "manifest.csv")
    few = tmp_path / "few"
    few.mkdir()
    for image_id in table[table["patient_id"].isin(table["patient_id"].unique()[:3])]["image_id"]:
        shutil.copy(released / "images" / f"{image_id}.png", few)
    _refused(capsys, ["--original", str(cohort), "--released", str(few), "--out", out], str(few),
             "covers 3 patients", "min_patients_per_attacker")
    # The report folder inside an input folder; --labels for a cohort folder; an unknown setting.
    _refused(capsys, ["--original", str(cohort), "--released", str(released), "--out", str(cohort / "report")],
             "lies inside the audited folder")
    _refused(capsys, ["--original", str(cohort), "--released", str(released), "--out", out, "--labels",
                      str(cohort / "manifest.csv")], "--labels is for plain folders")
    _refused(capsys, ["--original", str(cohort), "--released", str(released), "--out", out, "-o", "epochs", "3"],
             "unknown audit option")
    assert not (tmp_path / "out").exists() and not (cohort / "report").exists()


def test_bad_labels_csv_is_refused_naming_the_problem(folders, tmp_path, capsys):
    cohort, released = folders
    plain = tmp_path / "plain"
    shutil.copytree(cohort / "images", plain)
    table = pd.read_csv(cohort / "manifest.csv")
    good = pd.DataFrame({"file": table["image_id"] + ".png", "patient": table["patient_id"], "sex": table["sex"]})
    labels = tmp_path / "labels.csv"
    arguments = ["--original", str(plain), "--released", str(released / "images"), "--labels", str(labels), "--out",
                 str(tmp_path / "out")]
    _refused(capsys, arguments[:4] + arguments[6:], "plain image folder", "give --labels")
    good.assign(patient=good["patient"].where(good.index != 4, "")).to_csv(labels, index=False)
    _refused(capsys, arguments, "labels.csv line 6", "missing patient id")
    good.drop(index=7).to_csv(labels, index=False)
    _refused(capsys, arguments, good["file"][7], "no row in")
    good.assign(site="a").to_csv(labels, index=False)
    _refused(capsys, arguments, "unknown column(s) ['site']")
    good.assign(sex=good["sex"].where(good.index != 2, "X")).to_csv(labels, index=False)
    _refused(capsys, arguments, "column 'sex' must hold F/M", good["file"][2])
    good.assign(dr_grade=1.5).to_csv(labels, index=False)
    _refused(capsys, arguments, "'dr_grade' must hold a non-negative integer grade")
