"""`anonpaper anonymize METHOD` on folders (anonpaper.methods.folder through anonpaper.cli.main): Snow and VS-Snow on
plain folders, every registered method on folders written by `anonpaper cohort generate` (fundus RGB and chest X-ray
grayscale), the release's pairing and parameters, and bad input refused with exit code 2."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import cv2
import numpy as np
import pandas as pd
import pytest

from anonpaper.cli import main
from anonpaper.methods.folder import anonymize_folder, read_image
from anonpaper.methods.registry import available

pytestmark = pytest.mark.unit


def write_rgb(path: Path, image: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), cv2.cvtColor(image, cv2.COLOR_RGB2BGR) if image.ndim == 3 else image)


@pytest.fixture
def image_folder(tmp_path):
    """Three RGB images (one in a subfolder, one JPEG) and one grayscale image, 24 x 32, values 0..99."""
    rng = np.random.default_rng(0)
    folder = tmp_path / "images"
    names = ["a.png", "sub/b.png", "c.jpg"]
    for name in names:
        write_rgb(folder / name, rng.integers(0, 100, (24, 32, 3), dtype=np.uint8))
    write_rgb(folder / "gray.png", rng.integers(0, 100, (24, 32), dtype=np.uint8))
    (folder / "notes.txt").write_text("not an image")
    return folder


@pytest.fixture
def mask_folder(tmp_path):
    """Vessel masks (0/255 PNG) with the images' relative paths (.png), a band of rows 5-7 and column 10."""
    folder = tmp_path / "masks"
    mask = np.zeros((24, 32), dtype=np.uint8)
    mask[5:8, :] = 255
    mask[:, 10] = 255
    for name in ["a.png", "sub/b.png", "c.png", "gray.png"]:
        write_rgb(folder / name, mask)
    return folder, mask > 0


def folder_digest(folder: Path) -> dict[str, str]:
    return {path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}


def test_snow_folder_replaces_about_p_with_the_folder_mean(image_folder, tmp_path):
    before = folder_digest(image_folder)
    out = tmp_path / "out"
    code = main(["anonymize", "snow", "--in", str(image_folder), "--out", str(out), "-o", "p", "0.3", "--quiet"])
    assert code == 0
    assert folder_digest(image_folder) == before  # inputs untouched
    assert sorted(folder_digest(out)) == ["a.png", "c.png", "gray.png", "pairing.csv", "release.json", "sub/b.png"]
    # The folder's means are pixel-weighted over all RGB images (and separately over the grayscale one).
    rgb_inputs = {name: read_image(image_folder / name) for name in ["a.png", "c.jpg", "sub/b.png"]}
    rgb_mean = np.round(np.concatenate([image.reshape(-1, 3) for image in rgb_inputs.values()]).mean(axis=0))
    replaced = total = 0
    for name, source in rgb_inputs.items():
        result = read_image(out / Path(name).with_suffix(".png"))
        changed = result != source  # inputs are < 100 and the means are not, so changed == replaced
        assert np.array_equal(result[~changed], source[~changed])
        replaced += int(changed.sum())
        total += changed.size
        for channel in range(3):
            assert np.all(result[..., channel][changed[..., channel]] == rgb_mean[channel])
    assert abs(replaced / total - 0.3) < 0.03
    gray_source, gray_result = read_image(image_folder / "gray.png"), read_image(out / "gray.png")
    assert gray_result.shape == (24, 32)
    assert np.all(gray_result[gray_result != gray_source] == np.round(gray_source.mean()))


def rgb_folder(tmp_path, count=3, seed=1):
    rng = np.random.default_rng(seed)
    folder = tmp_path / "rgb"
    images = {}
    for index in range(count):
        images[f"img{index}.png"] = rng.integers(0, 100, (24, 32, 3), dtype=np.uint8)
        write_rgb(folder / f"img{index}.png", images[f"img{index}.png"])
    return folder, images


def test_snow_folder_constant_is_the_dataset_channel_mean(tmp_path):
    folder, images = rgb_folder(tmp_path)
    out = tmp_path / "out"
    assert main(["anonymize", "snow", "--in", str(folder), "--out", str(out), "-o", "p", "0.5", "--quiet"]) == 0
    expected = np.round(np.stack(list(images.values())).reshape(-1, 3).astype(np.float64).mean(axis=0))
    for name, source in images.items():
        result = read_image(out / name)
        changed = result != source
        assert np.array_equal(result[~changed], source[~changed])
        for channel in range(3):
            assert np.all(result[..., channel][changed[..., channel]] == expected[channel])


def test_snow_folder_seed_determinism_channel_mean_option_and_p_zero(image_folder, tmp_path, capsys):
    folder, images = rgb_folder(tmp_path)
    runs = {}
    for name, seed in [("one", 5), ("two", 5), ("three", 6)]:
        out = tmp_path / name
        assert main(["anonymize", "snow", "--in", str(folder), "--out", str(out), "-o", "p", "0.3",
                     "-o", "seed", str(seed), "-o", "channel_mean", "[250, 251, 252]", "--quiet"]) == 0
        runs[name] = folder_digest(out)
    assert runs["one"] == runs["two"] and runs["one"] != runs["three"]
    result = read_image(tmp_path / "one" / "img0.png")
    source = images["img0.png"]
    changed = result != source
    assert np.all(result[..., 0][changed[..., 0]] == 250) and np.all(result[..., 2][changed[..., 2]] == 252)
    # A 3-value channel_mean cannot serve the folder's grayscale image: the error names the file.
    assert main(["anonymize", "snow", "--in", str(image_folder), "--out", str(tmp_path / "mixed"),
                 "-o", "channel_mean", "[250, 251, 252]", "--quiet"]) == 2
    assert "gray.png: channel_mean must hold one value per channel (1)" in capsys.readouterr().err
    out = tmp_path / "identity"
    assert main(["anonymize", "snow", "--in", str(image_folder), "--out", str(out), "-o", "p", "0", "--quiet"]) == 0
    for name in ["a.png", "sub/b.png", "gray.png"]:
        assert np.array_equal(read_image(out / name), read_image(image_folder / name))


def test_vs_snow_folder_changes_only_vessel_pixels(image_folder, mask_folder, tmp_path):
    masks, vessel = mask_folder
    out = tmp_path / "out"
    code = main(["anonymize", "vs-snow", "--in", str(image_folder), "--out", str(out), "-o", "p", "0.5",
                 "-o", "masks", str(masks), "--quiet"])
    assert code == 0
    changed_vessel = 0
    for name, written in [("a.png", "a.png"), ("sub/b.png", "sub/b.png"), ("c.jpg", "c.png"), ("gray.png", "gray.png")]:
        source, result = read_image(image_folder / name), read_image(out / written)
        changed = (result != source).reshape(24, 32, -1).any(axis=2)
        assert not np.any(changed & ~vessel)
        changed_vessel += int(changed.sum())
    assert changed_vessel > 0.3 * 4 * vessel.sum()


def test_anonymize_folder_api_with_progress_returns_written_paths(tmp_path):
    folder, images = rgb_folder(tmp_path)
    written = anonymize_folder("snow", folder, tmp_path / "out", options={"replace_fraction": "2e-1"}, progress=True)
    assert [path.name for path in written] == sorted(images)
    assert {"snow", "vs-snow"} <= set(available())


@pytest.mark.parametrize("extra, message", [
    (["-o", "p", "1.5"], "[0, 1]"),
    (["-o", "probability", "0.3"], "no option 'probability'"),
    (["-o", "p", "0.3", "-o", "replace_fraction", "0.2"], "given twice"),
    (["-o", "channel_mean", "grey"], "channel_mean"),
    (["-o", "p", "a lot"], "must be a number"),
    (["-o", "p", "3e-0"], "[0, 1]"),  # YAML leaves 3e-0 a string; it is read as the number 3.0 and rejected
])
def test_bad_options_exit_2(image_folder, tmp_path, capsys, extra, message):
    out = tmp_path / "out"
    assert main(["anonymize", "snow", "--in", str(image_folder), "--out", str(out), "--quiet", *extra]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_outputs_never_overwrite_inputs(image_folder, tmp_path, capsys):
    before = folder_digest(image_folder)
    base = ["anonymize", "snow", "--in", str(image_folder), "--quiet", "--out"]
    assert main(base + [str(image_folder)]) == 2
    assert "is the input folder" in capsys.readouterr().err
    assert main(base + [str(image_folder / "sub" / "anon")]) == 2
    assert "inside the input folder" in capsys.readouterr().err
    assert main(base + [str(image_folder.parent)]) == 2
    assert "contains the input folder" in capsys.readouterr().err
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x.txt").write_text("keep me")
    assert main(base + [str(busy)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert folder_digest(image_folder) == before and (busy / "x.txt").read_text() == "keep me"


def test_usage_errors_exit_2(image_folder, mask_folder, tmp_path, capsys):
    masks, _ = mask_folder
    out = str(tmp_path / "out")
    assert main(["anonymize", "smudge", "--in", str(image_folder), "--out", out, "--quiet"]) == 2
    assert "unknown method 'smudge'" in capsys.readouterr().err
    assert main(["anonymize", "vs-snow", "--in", str(image_folder), "--out", out, "--quiet"]) == 2
    assert "needs vessel masks" in capsys.readouterr().err
    assert main(["anonymize", "snow", "--in", str(tmp_path / "missing"), "--out", out, "--quiet"]) == 2
    assert "does not exist" in capsys.readouterr().err
    (masks / "sub" / "b.png").unlink()
    assert main(["anonymize", "vs-snow", "--in", str(image_folder), "--out", out, "-o", "masks", str(masks),
                 "--quiet"]) == 2
    assert "no vessel mask for image sub/b.png" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["anonymize", "snow", "--in", str(empty), "--out", out, "--quiet"]) == 2
    assert "no images" in capsys.readouterr().err


def test_name_clash_and_mask_size_mismatch_exit_2(tmp_path, capsys):
    folder, images = rgb_folder(tmp_path, count=1)
    write_rgb(folder / "img0.bmp", images["img0.png"])
    assert main(["anonymize", "snow", "--in", str(folder), "--out", str(tmp_path / "o1"), "--quiet"]) == 2
    assert "would both be written as img0.png" in capsys.readouterr().err
    (folder / "img0.bmp").unlink()
    masks = tmp_path / "masks"
    write_rgb(masks / "img0.png", np.zeros((10, 10), dtype=np.uint8))
    assert main(["anonymize", "vs-snow", "--in", str(folder), "--out", str(tmp_path / "o2"), "-o", "masks",
                 str(masks), "--quiet"]) == 2
    assert "differs from its image" in capsys.readouterr().err


def test_a_written_cohort_folder_anonymizes_its_images_not_its_masks(tmp_path):
    from anonpaper.data.export import write_cohort
    from anonpaper.data.registry import load_cohort

    cohort = load_cohort("phantom-retina", n_patients=2, image_size=64, seed=0)
    folder = tmp_path / "cohort"
    write_cohort(cohort, folder, progress=False)
    for method in ("snow", "vs-snow"):
        output = tmp_path / f"out-{method}"
        written = anonymize_folder(method, folder, output, options={"p": 0.5}, progress=False)
        assert len(written) == len(cohort)
        assert all(path.parent == output / "images" for path in written), "the cohort's images/ only, same layout"
        assert not (output / "masks").exists()


# ---------------------------------------------------------------------------------------------------------------
# Every method on folders written by `anonpaper cohort generate` (smoke size: 64 px, a few patients)
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cohorts(tmp_path_factory):
    """A fundus (RGB, vessel masks) and a chest X-ray (grayscale) cohort written by the CLI."""
    root = tmp_path_factory.mktemp("cohorts")
    assert main(["cohort", "generate", "phantom-retina", "--out", str(root / "fundus"), "--n-patients", "7",
                 "--image-size", "64", "--seed", "2", "--quiet"]) == 0
    assert main(["cohort", "generate", "phantom-cxr", "--out", str(root / "cxr"), "--n-patients", "6", "--image-size",
                 "64", "--seed", "2", "-o", "images_per_patient", "2", "--quiet"]) == 0
    return {"fundus": root / "fundus", "cxr": root / "cxr"}


def release_of(cohort: Path, out: Path) -> tuple[pd.DataFrame, dict, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The release's pairing, parameters, released images and their source images (by image id)."""
    pairing = pd.read_csv(out / "pairing.csv", dtype=str)
    record = json.loads((out / "release.json").read_text())
    released = {Path(name).stem: read_image(out / name) for name in pairing["file"]}
    sources = {Path(name).stem: read_image(cohort / name) for name in pairing["source"]}
    return pairing, record, released, sources


def check_layout(cohort: Path, out: Path, method: str) -> tuple[pd.DataFrame, dict, dict, dict]:
    """The release keeps the cohort's layout (images/<id>.png, same ids, shapes and channels) and describes itself."""
    manifest = pd.read_csv(cohort / "manifest.csv", dtype=str)
    pairing, record, released, sources = release_of(cohort, out)
    assert sorted(path.name for path in out.iterdir()) == ["images", "pairing.csv", "release.json"]
    assert sorted(pairing["file"]) == sorted(manifest["image_path"]) == sorted(pairing["source"])
    assert dict(zip(pairing["file"], pairing["patient_id"])) == dict(zip(manifest["image_path"], manifest["patient_id"]))
    assert record["method"] == method and record["layout"] == "cohort" and record["images"] == len(manifest)
    assert record["patients"] == manifest["patient_id"].nunique()
    for key, image in released.items():
        assert image.shape == sources[key].shape and image.dtype == np.uint8, key
    return pairing, record, released, sources


METHOD_OPTIONS = {"blur": ["-o", "sigma", "1.5"], "pixelate": ["-o", "block", "8"],
                  "gaussian-noise": ["-o", "sigma", "0.2", "-o", "seed", "4"], "constant": [],
                  "k-same-pixel": ["-o", "k", "2"], "snow": ["--p", "0.3"], "vs-snow": ["-o", "p", "0.5"]}


def test_every_method_is_registered_and_has_a_cli_test():
    assert set(available()) == set(METHOD_OPTIONS)


@pytest.mark.parametrize("modality", ["fundus", "cxr"])
@pytest.mark.parametrize("method", sorted(METHOD_OPTIONS))
def test_every_method_on_a_written_cohort(cohorts, tmp_path, method, modality):
    cohort = cohorts[modality]
    before = folder_digest(cohort)
    out = tmp_path / "release"
    code = main(["anonymize", method, "--in", str(cohort), "--out", str(out), "--quiet", *METHOD_OPTIONS[method]])
    if method == "vs-snow" and modality == "cxr":  # a chest X-ray cohort has no vessel masks
        assert code == 2 and not out.exists()
        return
    assert code == 0
    assert folder_digest(cohort) == before  # the inputs are never written to
    pairing, record, released, sources = check_layout(cohort, out, method)
    keys = sorted(released)
    changed = [not np.array_equal(released[key], sources[key]) for key in keys]
    assert all(changed), f"{method} left images unchanged"
    if method == "blur":
        assert record["options"] == {"sigma": 1.5}
        for key in keys:  # blur smooths: neighbouring pixels differ less
            def roughness(image):
                return np.abs(np.diff(image.astype(float), axis=0)).mean()
            assert roughness(released[key]) < roughness(sources[key])
    elif method == "pixelate":
        assert record["options"] == {"block_size": 8}
        for key in keys:
            blocks = released[key].reshape(8, 8, 8, 8, -1)
            assert (blocks == blocks[:, :1, :, :1]).all(), "every 8 x 8 block holds one value"
    elif method == "gaussian-noise":
        assert record["options"] == {"sigma": 0.2} and record["seed"] == 4
        difference = np.concatenate([(released[key].astype(float) - sources[key]).ravel() for key in keys])
        middle = np.concatenate([((sources[key] > 80) & (sources[key] < 175)).ravel() for key in keys])
        assert abs(difference[middle].std() / 255 - 0.2) < 0.03  # unclipped values move by sigma
    elif method == "constant":
        stacked = np.stack([sources[key] for key in keys]).astype(np.float64)
        expected = np.round(stacked.reshape(len(keys), -1, stacked.shape[-1] if stacked.ndim == 4 else 1)
                            .mean(axis=(0, 1)))
        computed = record["options_from_the_folder"]
        assert record["options"] == {"value": None} and len(computed) == 1
        for key in keys:
            values = np.unique(released[key].reshape(-1, released[key].shape[-1] if released[key].ndim == 3 else 1),
                               axis=0)
            assert np.array_equal(values, expected[None]), key
    elif method == "k-same-pixel":
        patient_of = dict(zip((Path(name).stem for name in pairing["file"]), pairing["patient_id"]))
        groups: dict[bytes, list[str]] = {}
        for key in keys:
            groups.setdefault(released[key].tobytes(), []).append(key)
        for members in groups.values():
            assert len({patient_of[key] for key in members}) >= 2, "a cluster holds at least k = 2 patients"
            mean = np.mean([sources[key].astype(float) for key in members], axis=0)
            assert np.abs(released[members[0]] - mean).max() <= 0.5 + 1e-9, "the cluster's mean image"
        for patient in set(patient_of.values()):  # a patient's images stay in one cluster
            assert len({released[key].tobytes() for key in keys if patient_of[key] == patient}) == 1


def test_k_same_pixel_on_a_plain_folder_needs_its_patients(tmp_path, capsys):
    folder, images = rgb_folder(tmp_path, count=4)
    out = tmp_path / "out"
    assert main(["anonymize", "k-same-pixel", "--in", str(folder), "--out", str(out), "-o", "k", "2", "--quiet"]) == 2
    assert "-o patients CSV" in capsys.readouterr().err and not out.exists()
    patients = tmp_path / "patients.csv"
    pd.DataFrame({"file": ["img0.png", "img1.png", "img2.png"], "patient": ["a", "a", "b"]}).to_csv(patients,
                                                                                                  index=False)
    assert main(["anonymize", "k-same-pixel", "--in", str(folder), "--out", str(out), "-o", "k", "2", "-o",
                 "patients", str(patients), "--quiet"]) == 2
    assert "img3.png: no row in" in capsys.readouterr().err and not out.exists()
    pd.DataFrame({"file": [f"img{i}.png" for i in range(4)], "patient": ["a", "a", "b", "c"]}).to_csv(patients,
                                                                                                    index=False)
    assert main(["anonymize", "k-same-pixel", "--in", str(folder), "--out", str(out), "-o", "k", "2", "-o",
                 "patients", str(patients), "--quiet"]) == 0
    pairing = pd.read_csv(out / "pairing.csv", dtype=str)
    assert pairing["patient_id"].tolist() == ["a", "a", "b", "c"] and pairing["file"].tolist() == sorted(images)
    # Patient a's two images share a cluster; with 3 patients and k = 2 one cluster of 3 patients: all equal.
    assert len({read_image(out / name).tobytes() for name in images}) == 1


@pytest.mark.parametrize("method, extra, message", [
    ("blur", ["-o", "sigma", "-1"], "option sigma must be a finite number >= 0"),
    ("pixelate", ["-o", "block", "0"], "option block_size must be a whole number >= 1"),
    ("pixelate", ["-o", "block", "2.5"], "option block_size must be a whole number >= 1"),
    ("gaussian-noise", ["-o", "sigma", "nan"], "option sigma must be a finite number"),
    ("constant", ["-o", "value", "[300, 0, 0]"], "option value must hold numbers in [0, 255]"),
    ("constant", ["-o", "value", "[10, 20, 30]"], "gray.png: value must hold one value per channel (1)"),
    ("k-same-pixel", ["-o", "k", "0"], "option k must be a whole number >= 1"),
    ("blur", ["-o", "masks", "somewhere"], "takes no masks option"),
])
def test_bad_baseline_options_exit_2(image_folder, tmp_path, capsys, method, extra, message):
    out = tmp_path / "out"
    assert main(["anonymize", method, "--in", str(image_folder), "--out", str(out), "--quiet", *extra]) == 2
    assert message in capsys.readouterr().err


def test_seeded_noise_does_not_depend_on_the_other_files(tmp_path):
    folder, _ = rgb_folder(tmp_path, count=3)
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "img1.png").write_bytes((folder / "img1.png").read_bytes())
    for source, out in ((folder, tmp_path / "o1"), (alone, tmp_path / "o2")):
        assert main(["anonymize", "gaussian-noise", "--in", str(source), "--out", str(out), "--quiet"]) == 0
    assert (tmp_path / "o1" / "img1.png").read_bytes() == (tmp_path / "o2" / "img1.png").read_bytes()


def test_a_method_that_mixes_patients_takes_the_whole_set_with_its_patients():
    from anonpaper.methods import get

    ksame = get("k-same-pixel", k=2)
    images = np.arange(4, dtype=np.uint8).reshape(4, 1, 1, 1) * 50
    with pytest.raises(ValueError, match="anonymizes a whole set at once"):
        ksame.one(images[0], seed=0)
    with pytest.raises(ValueError, match="needs the patient of every image"):
        ksame(images, seed=0)
    with pytest.raises(ValueError, match="a missing one"):
        ksame(images, seed=0, patients=["a", "b", None, "c"])
    # Patients, not images, are the unit: two images of one patient never make a cluster of k = 2 on their own.
    result = ksame(images, seed=0, patients=["a", "a", "b", "b"]).ravel().tolist()
    assert result == [75, 75, 75, 75]


# ---------------------------------------------------------------------------------------------------------------
# k-SALSA (a GAN method: the generators chapter's smoke fundus StyleGAN2, trained into the test cache in seconds)
# ---------------------------------------------------------------------------------------------------------------
K_SALSA_SMOKE = ["-o", "profile", "smoke", "-o", "projector_steps", "2", "-o", "alignment_steps", "1"]


def test_k_salsa_on_a_written_fundus_cohort_releases_one_synthetic_image_per_cluster(cohorts, tmp_path):
    cohort = cohorts["fundus"]
    before = folder_digest(cohort)
    out = tmp_path / "release"
    assert main(["anonymize", "k-salsa", "--in", str(cohort), "--out", str(out), "--quiet", "-o", "k", "2",
                 *K_SALSA_SMOKE]) == 0
    assert folder_digest(cohort) == before
    pairing, record, released, sources = check_layout(cohort, out, "k-salsa")
    assert record["options"] == {"k": 2, "projector_steps": 2, "alignment_steps": 1}
    patient_of = dict(zip((Path(name).stem for name in pairing["file"]), pairing["patient_id"]))
    groups: dict[bytes, list[str]] = {}
    for key, image in released.items():
        assert not np.array_equal(image, sources[key]), f"{key}: k-SALSA releases a synthetic image"
        groups.setdefault(image.tobytes(), []).append(key)
    assert 1 < len(groups) <= len(set(patient_of.values())) // 2
    for members in groups.values():
        assert len({patient_of[key] for key in members}) >= 2, "a cluster holds at least k = 2 patients"
    for patient in set(patient_of.values()):  # a patient's images stay in one cluster
        assert len({released[key].tobytes() for key in released if patient_of[key] == patient}) == 1


def test_profile_is_refused_for_a_pixel_method(image_folder, tmp_path, capsys):
    assert main(["anonymize", "blur", "--in", str(image_folder), "--out", str(tmp_path / "out"), "--quiet", "-o",
                 "profile", "smoke"]) == 2
    assert "takes no profile option" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------
# Paper 1's vessel edit and its baselines (the smoke fundus StyleGAN2 and vessel U-Net, trained in seconds)
# ---------------------------------------------------------------------------------------------------------------
VESSEL_SMOKE = ["-o", "profile", "smoke", "-o", "projector_steps", "2", "-o", "score_images", "4"]


@pytest.mark.parametrize("method", ["sspace-vessel-edit", "stylespace", "lowrankgan", "resefa"])
def test_vessel_edits_on_a_written_fundus_cohort(cohorts, tmp_path, method):
    cohort = cohorts["fundus"]
    before = folder_digest(cohort)
    out = tmp_path / "release"
    assert main(["anonymize", method, "--in", str(cohort), "--out", str(out), "--quiet", *VESSEL_SMOKE]) == 0
    assert folder_digest(cohort) == before
    pairing, record, released, sources = check_layout(cohort, out, method)
    assert record["options"] == {"alpha": 0.5, "projector_steps": 2, "score_images": 4}
    assert all(not np.array_equal(released[key], sources[key]) for key in released), "a rendering, not the input"
    assert len({image.tobytes() for image in released.values()}) == len(released), "one edit per image"


def test_vessel_edit_strength_zero_releases_the_projection_and_one_moves_it(cohorts, tmp_path):
    releases = {}
    for alpha in ("0", "1"):
        out = tmp_path / f"alpha-{alpha}"
        assert main(["anonymize", "sspace-vessel-edit", "--in", str(cohorts["fundus"]), "--out", str(out), "--quiet",
                     "-o", "alpha", alpha, *VESSEL_SMOKE]) == 0
        releases[alpha] = release_of(cohorts["fundus"], out)[2]
    moved = [np.abs(releases["1"][key].astype(int) - releases["0"][key]).mean() for key in releases["0"]]
    assert min(moved) > 0, "alpha 1 moves the top channel away from the projection"


# ---------------------------------------------------------------------------------------------------------------
# GMIA (the GMIA chapter's smoke networks: co-trained encoder and generator, E_id, E_ut; trained in seconds)
# ---------------------------------------------------------------------------------------------------------------
GMIA_SMOKE = ["-o", "profile", "smoke", "-o", "steps", "3"]


def test_gmia_on_a_written_chest_x_ray_cohort(cohorts, tmp_path):
    cohort = cohorts["cxr"]
    before = folder_digest(cohort)
    out = tmp_path / "release"
    assert main(["anonymize", "gmia", "--in", str(cohort), "--out", str(out), "--quiet", *GMIA_SMOKE,
                 "-o", "margin", "-0.3"]) == 0
    assert folder_digest(cohort) == before
    pairing, record, released, sources = check_layout(cohort, out, "gmia")
    assert record["options"] == {"margin": -0.3, "steps": 3}
    assert all(image.ndim == 2 for image in released.values()), "grayscale in, grayscale out"
    assert all(not np.array_equal(released[key], sources[key]) for key in released), "a rendering, not the input"
    # Deterministic: the same command gives the same release.
    again = tmp_path / "again"
    assert main(["anonymize", "gmia", "--in", str(cohort), "--out", str(again), "--quiet", *GMIA_SMOKE,
                 "-o", "margin", "-0.3"]) == 0
    assert folder_digest(out / "images") == folder_digest(again / "images")


# ---------------------------------------------------------------------------------------------------------------
# The disentanglement identity swap (the disentanglement chapter's smoke networks, trained in seconds)
# ---------------------------------------------------------------------------------------------------------------
def test_identity_swap_on_a_written_chest_x_ray_cohort(cohorts, tmp_path):
    cohort = cohorts["cxr"]
    before = folder_digest(cohort)
    releases = {}
    for strength in ("0", "1"):
        out = tmp_path / f"strength-{strength}"
        assert main(["anonymize", "identity-swap", "--in", str(cohort), "--out", str(out), "--quiet", "-o", "profile",
                     "smoke", "-o", "strength", strength, "-o", "seed", "3"]) == 0
        pairing, record, releases[strength], sources = check_layout(cohort, out, "identity-swap")
        assert record["options"] == {"modality": "cxr", "strength": float(strength)} and record["seed"] == 3
    assert folder_digest(cohort) == before
    moved = [np.abs(releases["1"][key].astype(int) - releases["0"][key]).mean() for key in releases["0"]]
    assert min(moved) > 0, "a new identity changes the decoded image"


# ---------------------------------------------------------------------------------------------------------------
# The learned methods refuse what they cannot anonymize, before anything is written
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("method, modality, extra, message", [
    ("k-salsa", "cxr", [*K_SALSA_SMOKE[:3], "-o", "k", "2"], "3 channels"),  # RGB fundus images only
    ("k-salsa", "fundus", [*K_SALSA_SMOKE[:3], "-o", "k", "8"], "k must be a whole number in [1, 7]"),  # 7 patients
    ("k-salsa", "fundus", ["-o", "k", "2", "-o", "profile", "huge"], "-o profile"),
    ("k-salsa", "fundus", [*K_SALSA_SMOKE[:3], "-o", "alignment_steps", "0"], "alignment_steps"),
    ("sspace-vessel-edit", "cxr", VESSEL_SMOKE, "3 channels"),
    ("sspace-vessel-edit", "fundus", [*VESSEL_SMOKE, "-o", "alpha", "1.5"], "'alpha' must be a number in [0, 1]"),
    ("sspace-vessel-edit", "fundus", [*VESSEL_SMOKE, "-o", "score_images", "1"],
     "'score_images' must be a whole number >= 2"),
    ("gmia", "fundus", GMIA_SMOKE, "must have 1 channel"),
    ("gmia", "cxr", [*GMIA_SMOKE, "-o", "margin", "2"], "'margin' must be a number in [-1, 1]"),
    ("identity-swap", "fundus", ["-o", "profile", "smoke"], "must have 1 channel"),
    ("identity-swap", "cxr", ["-o", "profile", "smoke", "-o", "modality", "face"], "'modality' must be one of"),
    ("identity-swap", "cxr", ["-o", "profile", "smoke", "-o", "strength", "-0.1"],
     "'strength' must be a number in [0, 1]"),
])
def test_learned_methods_refuse_bad_input_with_exit_2(cohorts, tmp_path, capsys, method, modality, extra, message):
    out = tmp_path / "release"
    assert main(["anonymize", method, "--in", str(cohorts[modality]), "--out", str(out), "--quiet", *extra]) == 2
    error = capsys.readouterr().err
    assert message in error, error
    assert not list(out.glob("images/*")), "nothing is released"


def test_learned_methods_on_plain_folders(cohorts, tmp_path, capsys):
    """A plain folder (no cohort, no patients) suits the methods that need no patients; a non-square one is refused
    naming the problem."""
    import shutil

    plain = tmp_path / "plain"
    shutil.copytree(cohorts["fundus"] / "images", plain)
    out = tmp_path / "edited"
    assert main(["anonymize", "sspace-vessel-edit", "--in", str(plain), "--out", str(out), "--quiet",
                 *VESSEL_SMOKE]) == 0
    pairing = pd.read_csv(out / "pairing.csv", dtype=str)
    assert list(pairing.columns) == ["file", "source"] and len(pairing) == len(list(plain.glob("*.png")))
    folder, _ = rgb_folder(tmp_path)  # 24 x 32 px
    assert main(["anonymize", "sspace-vessel-edit", "--in", str(folder), "--out", str(tmp_path / "wide"), "--quiet",
                 *VESSEL_SMOKE]) == 2
    assert "square images" in capsys.readouterr().err
    assert main(["anonymize", "k-salsa", "--in", str(plain), "--out", str(tmp_path / "ks"), "--quiet",
                 *K_SALSA_SMOKE]) == 2
    assert "-o patients CSV" in capsys.readouterr().err
