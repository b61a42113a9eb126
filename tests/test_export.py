"""Tests of write_cohort / DiskCohort: round trip, refusal to overwrite, resume, CLI, a generic grayscale cohort."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from anonpaper.cli import main
from anonpaper.data.cohort import Cohort
from anonpaper.data.export import DiskCohort, read_written_cohort, write_cohort
from anonpaper.data.phantoms.retina import RetinaPhantomCohort, RetinaPhantomConfig, load_phantom_retina
from anonpaper.data.registry import load_cohort


def small_retina() -> RetinaPhantomCohort:
    return RetinaPhantomCohort(RetinaPhantomConfig(n_patients=2, images_per_patient=(1, 2), image_size=64, seed=9))


class GrayCohort(Cohort):
    """A tiny grayscale cohort without masks, to check that export is generic."""

    modality = "cxr"
    channels = 1

    def __init__(self):
        table = pd.DataFrame({"image_id": ["a", "b"], "patient_id": ["p1", "p2"], "split": ["train", "test"],
                              "label_x": [1.0, np.nan]})
        super().__init__("gray", table)

    def _read_image(self, row):
        return np.full((8, 10), 40 if row["image_id"] == "a" else 200, np.uint8)


@pytest.mark.unit
def test_round_trip_images_masks_table_keypoints(tmp_path):
    cohort = small_retina()
    write_cohort(cohort, tmp_path / "out", progress=False)
    disk = read_written_cohort(tmp_path / "out")
    assert isinstance(disk, DiskCohort) and len(disk) == len(cohort)
    assert disk.mask_names == cohort.mask_names and disk.modality == "fundus" and disk.name == "phantom-retina"
    pd.testing.assert_frame_equal(disk.table[["image_id", "patient_id", "split", "sex", "dr_grade"]],
                                  cohort.table[["image_id", "patient_id", "split", "sex", "dr_grade"]])
    assert np.allclose(disk.table["rotation_deg"], cohort.table["rotation_deg"])
    for index in range(len(cohort)):
        assert np.array_equal(disk.image(index), cohort.image(index))
        for name in cohort.mask_names:
            assert np.array_equal(disk.mask(index, name), cohort.mask(index, name)), name
        assert np.allclose(disk.keypoints(index)["bifurcation"], cohort.keypoints(index)["bifurcation"])
    manifest = pd.read_csv(tmp_path / "out" / "manifest.csv")
    assert {"image_path", "mask_vessel_path", "keypoints_path"} <= set(manifest.columns)
    # The registry loader reads a written folder instead of generating.
    assert np.array_equal(load_phantom_retina(root=tmp_path / "out").image(0), cohort.image(0))


@pytest.mark.unit
def test_refuses_foreign_non_empty_folder_unless_overwrite(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="overwrite"):
        write_cohort(small_retina(), out, progress=False)
    assert not (out / "images").exists()
    write_cohort(small_retina(), out, overwrite=True, progress=False)
    assert (out / "notes.txt").read_text() == "keep me"
    # A different cohort is foreign to this folder too.
    other = RetinaPhantomCohort(RetinaPhantomConfig(n_patients=2, image_size=64, seed=10))
    with pytest.raises(FileExistsError):
        write_cohort(other, out, progress=False)


@pytest.mark.unit
def test_resume_skips_complete_rows_and_restores_missing_ones(tmp_path):
    cohort = small_retina()
    out = write_cohort(cohort, tmp_path / "out", progress=False)
    files = sorted(p for p in out.rglob("*.png"))
    before = {p: p.stat().st_mtime_ns for p in files}
    missing = out / "images" / f"{cohort.table['image_id'].iloc[0]}.png"
    content = missing.read_bytes()
    missing.unlink()
    marker = json.loads((out / "cohort.json").read_text())
    marker["complete"] = False  # as after an interruption
    (out / "cohort.json").write_text(json.dumps(marker))
    with pytest.raises(ValueError, match="did not finish"):
        DiskCohort(out)
    write_cohort(small_retina(), out, progress=False)  # a fresh, identical cohort object resumes
    assert missing.read_bytes() == content
    for path, stamp in before.items():
        if path.name != missing.name:  # the incomplete row is rewritten whole; other rows are untouched
            assert path.stat().st_mtime_ns == stamp, path
    assert json.loads((out / "cohort.json").read_text())["complete"] is True


@pytest.mark.unit
def test_generic_grayscale_cohort_without_masks(tmp_path):
    write_cohort(GrayCohort(), tmp_path / "g", progress=False)
    disk = read_written_cohort(tmp_path / "g")
    assert disk.channels == 1 and disk.mask_names == () and disk.modality == "cxr"
    assert disk.image(1).shape == (8, 10) and int(disk.image(1)[0, 0]) == 200
    assert np.isnan(disk.table["label_x"].iloc[1])
    with pytest.raises(ValueError, match="without keypoints"):
        disk.keypoints(0)


@pytest.mark.unit
def test_cli_generate_and_refuse_overwrite(tmp_path, capsys):
    out = tmp_path / "cli"
    argv = ["cohort", "generate", "phantom-retina", "--out", str(out), "--n-patients", "2", "--image-size", "64",
            "--seed", "4", "--quiet", "-o", "images_per_patient", "[1, 1]"]
    assert main(argv) == 0
    disk = load_cohort("phantom-retina", root=out)
    assert len(disk) == 2 and disk.image(0).shape == (64, 64, 3)
    assert main(argv) == 0  # the same cohort again: resumes, nothing to do
    other = argv.copy()
    other[other.index("--seed") + 1] = "5"
    assert main(other) == 2
    assert "overwrite" in capsys.readouterr().err
    assert main(other + ["--overwrite"]) == 0
    assert read_written_cohort(out).table["patient_id"].iloc[0].startswith("R5-")


@pytest.mark.unit
def test_complete_folder_is_skipped_and_said_so(tmp_path):
    from anonpaper.data.export import ForeignFolderError

    cohort = small_retina()
    messages = []
    out = write_cohort(cohort, tmp_path / "out", progress=False, log=messages.append)
    assert messages == [f"{out}: wrote {len(cohort)} images of phantom-retina ({len(cohort)} in all; manifest.csv, "
                        f"images/, masks/)"]
    stamps = {path: path.stat().st_mtime_ns for path in out.rglob("*.png")}
    messages.clear()
    write_cohort(small_retina(), out, progress=False, log=messages.append)
    assert messages == [f"{out} already holds this cohort complete ({len(cohort)} images): skipped, nothing written"]
    assert {path: path.stat().st_mtime_ns for path in out.rglob("*.png")} == stamps
    other = RetinaPhantomCohort(RetinaPhantomConfig(n_patients=2, image_size=64, seed=10))
    with pytest.raises(ForeignFolderError, match="pass overwrite=True") as refused:
        write_cohort(other, out, progress=False)
    assert refused.value.folder == out and isinstance(refused.value, FileExistsError)
    assert "--overwrite" not in str(refused.value), "the Python error speaks Python"
