"""The generators chapter on a real fundus copy (DATASET, DATA_ROOT, DATA_PROTOCOL, VESSEL_DATA_ROOT), on fake trees
with ODIR-5K's and DRIVE's real layouts and tiny images: the fundus generators learn the copy, the chest X-ray one
the phantom, the vessel U-Net a DRIVE copy when given, and a missing or broken copy stops the run before training."""

from __future__ import annotations

import shutil

import cv2
import numpy as np
import pytest

from anonpaper.data import load_cohort
from anonpaper.experiments import generators as chapter
from anonpaper.experiments.generators import pipeline
from anonpaper.models.stylegan import StyleGenerator
from fakes import trees

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def odir(tmp_path_factory):
    """ODIR-5K's Kaggle layout: 12 training patients (both eyes), 4 testing patients."""
    return trees.make_odir(tmp_path_factory.mktemp("odir"), n_patients=12, n_test_patients=4)


def real_config(root, **changes) -> chapter.Config:
    values = dict(image_size=32, dataset="odir-5k", data_root=str(root), data_protocol="patient_70_10_20",
                  retina_patients=8, cxr_patients=4, fundus_sg3t_kimg=0.016, fundus_sg2_kimg=0.016, cxr_sg2_kimg=0.016,
                  checkpoint_kimg=0.016, eval_images=8, min_eval_images=8, projector_images=1, projector_steps=2,
                  segmenter_epochs=1, weights_dir=None)
    values.update(changes)
    return chapter.Config(**values)


@pytest.mark.parametrize("changes, message", [
    ({"dataset": "odir-5k"}, "set DATA_ROOT to the folder of your copy"),
    ({"data_root": "/somewhere"}, "DATA_ROOT is '/somewhere' but DATASET is the phantom"),
    ({"dataset": "mimic-cxr-jpg", "data_root": "/somewhere"}, "DATASET must be 'phantom-retina' or a real fundus"),
    ({"dataset": "odir-5k", "data_root": "/somewhere", "data_protocol": "nope"}, "DATA_PROTOCOL must be None or one"),
    ({"data_protocol": "paper1"}, "DATA_PROTOCOL applies to a real dataset"),
    ({"vessel_data_root": ""}, "VESSEL_DATA_ROOT must be a folder path or None"),
])
def test_data_parameters_are_validated_naming_the_parameter(changes, message):
    with pytest.raises(ValueError, match=message):
        chapter.Config(**changes)


def test_fundus_cohort_is_the_copy_and_the_chest_xray_cohort_the_phantom(odir):
    config = real_config(odir)
    counts = chapter.check_data(config)
    copy = load_cohort("odir-5k", odir, image_size=64, protocol="patient_70_10_20", seed=0)
    assert counts == {split: len(copy.split(split)) for split in ("train", "val", "test")}
    images = pipeline.load_images("fundus-sg3t", config)
    expected = np.stack([cv2.resize(image, (32, 32), interpolation=cv2.INTER_AREA)
                         for image in copy.split("train").load_images()])
    assert images.shape == (counts["train"], 32, 32, 3) and np.array_equal(images, expected)
    assert chapter.kind_cohort("fundus-sg2", config).name == "odir-5k"
    assert chapter.kind_cohort("cxr-sg2", config).name == "phantom-cxr"
    description = chapter.generator_description("fundus-sg3t", config)
    assert description["data"]["name"] == "odir-5k"
    phantom = chapter.generator_description("fundus-sg3t", real_config(odir, dataset="phantom-retina", data_root=None,
                                                                       data_protocol=None))
    assert phantom["data"]["name"] == "phantom-retina" and phantom != description  # never the phantom's cache entry


def test_fundus_generator_trains_on_the_real_images(odir, tmp_path, monkeypatch):
    monkeypatch.setenv("ANONPAPER_CACHE", str(tmp_path / "cache"))
    config = real_config(odir)
    seen = []
    train_gan = pipeline.train_gan

    def recording(generator, discriminator, images, settings, **options):
        seen.append(np.asarray(images).copy())
        return train_gan(generator, discriminator, images, settings, **options)

    monkeypatch.setattr(pipeline, "train_gan", recording)
    trained = chapter.load_generator("fundus-sg3t", config, progress=False)
    assert trained.source == "trained" and len(seen) == 1
    assert np.array_equal(seen[0], pipeline.load_images("fundus-sg3t", config))
    assert chapter.load_generator("fundus-sg3t", config, progress=False).source == "cache"


def test_missing_or_broken_copy_stops_the_run_before_any_training(odir, tmp_path, monkeypatch):
    def no_training(*args, **kwargs):
        raise AssertionError("training started on a broken copy")

    monkeypatch.setattr(pipeline, "train_gan", no_training)
    missing = tmp_path / "not-there"
    with pytest.raises(chapter.DataCopyError, match=rf"DATA_ROOT '{missing}'.*not a folder"):
        chapter.run(real_config(missing), progress=False)
    broken = tmp_path / "broken"
    shutil.copytree(odir, broken)
    (broken / "full_df.csv").unlink()
    with pytest.raises(chapter.DataCopyError, match=rf"DATA_ROOT '{broken}'.*no odir-5k label file.*full_df.csv"):
        chapter.run(real_config(broken), progress=False)
    corrupt = tmp_path / "corrupt"
    shutil.copytree(odir, corrupt)
    for path in (corrupt / "ODIR-5K" / "Training Images").iterdir():
        path.write_bytes(b"not a jpeg")
    with pytest.raises(chapter.DataCopyError, match=rf"DATA_ROOT '{corrupt}'.*Training Images"):
        chapter.run(real_config(corrupt), progress=False)
    small = trees.make_odir(tmp_path / "small", n_patients=2, n_test_patients=1)
    with pytest.raises(chapter.DataCopyError, match=r"training images \(at least 8 needed\)"):
        chapter.run(real_config(small), progress=False)
    # paper 1's protocol (3000 training and 500 testing images) on a tiny copy
    with pytest.raises(chapter.DataCopyError, match=r"has 8 images, protocol asks for 500"):
        chapter.check_data(real_config(odir, data_protocol=None))


def test_shipped_weights_of_another_dataset_are_not_used(odir, tmp_path):
    config = real_config(odir, weights_dir=str(tmp_path / "weights"))
    expected = config.stylegan_config("fundus-sg3t")
    chapter.export_weights(StyleGenerator(expected, seed=1), tmp_path / "weights", kind="fundus-sg3t", kimg=5, seed=0,
                           data={"dataset": "phantom-retina"})
    with pytest.raises(LookupError):  # the phantom's file is passed over, and nothing is cached for the copy
        chapter.load_generator("fundus-sg3t", config, train=False, progress=False)
    phantom = real_config(odir, dataset="phantom-retina", data_root=None, data_protocol=None,
                          weights_dir=str(tmp_path / "weights"))
    assert chapter.load_generator("fundus-sg3t", phantom, train=False, progress=False).source == "weights"


def test_vessel_unet_learns_a_drive_copy_when_given(tmp_path):
    drive = trees.make_drive(tmp_path / "drive", train=(21, 22, 23), test=(1, 2))
    config = real_config(None, dataset="phantom-retina", data_root=None, data_protocol=None,
                         vessel_data_root=str(drive))
    cohort, mask = chapter.vessel_cohort(config)
    assert cohort.name == "drive" and mask == "vessels"
    assert (len(cohort.split("train")), len(cohort.split("val"))) == (3, 2)  # DRIVE's test images check the Dice
    assert chapter.check_data(config) == {"vessel_train": 3, "vessel_val": 2}
    assert cohort.split("train").masks(0)["vessels"].shape == (64, 64)
    _, info = pipeline._segmenter("phantom-retina", config, progress=False)
    assert info["mask"] == "vessel" and info["trained_on"] == "drive" and np.isfinite(info["val_dice"])
    phantom, mask = chapter.vessel_cohort(real_config(None, dataset="phantom-retina", data_root=None,
                                                      data_protocol=None))
    assert phantom.name == "phantom-retina" and mask == "vessel"
    shutil.rmtree(drive / "training" / "images")
    with pytest.raises(chapter.DataCopyError, match=rf"VESSEL_DATA_ROOT '{drive}'.*training/images"):
        chapter.check_data(config)
