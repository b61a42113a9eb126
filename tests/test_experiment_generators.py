"""The generators chapter: shipped-weights loader (good, corrupt, mismatched), cache and resume, config
validation, claims logic, and the k-NN precision/recall metric."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from anonpaper.experiments import generators as chapter
from anonpaper.experiments.claims import FAILS, HOLDS, UNDECIDED
from anonpaper.experiments.generators import pipeline
from anonpaper.metrics.distribution import knn_precision_recall
from anonpaper.models.stylegan import StyleGenerator, get_config
from anonpaper.train.gan import train_gan

pytestmark = pytest.mark.unit


def tiny_config(tmp_path=None, **changes) -> chapter.Config:
    """Smoke-sized chapter config: 32 px `sg2-tiny` fundus and chest X-ray generators (not quick's shipped ones), a
    small_cnn."""
    values = dict(image_size=32, cxr_image_size=32, fundus_sg2_config="sg2-tiny", cxr_sg2_config="sg2-tiny",
                  classifier_backbone="small_cnn",
                  retina_patients=8, cxr_patients=4, fundus_sg3t_kimg=0.032, fundus_sg2_kimg=0.032,
                  cxr_sg2_kimg=0.032, checkpoint_kimg=0.016, eval_images=8, min_eval_images=8, projector_images=1,
                  projector_steps=2, segmenter_epochs=1, weights_dir=str(tmp_path / "weights") if tmp_path else None)
    values.update(changes)
    return chapter.Config(**values)


def _state(generator) -> dict:
    return {key: value.detach().clone() for key, value in generator.state_dict().items()}


# -- shipped weights ------------------------------------------------------------------------------------------------

def test_exported_weights_load_back_in_float16_precision(tmp_path):
    config = get_config("sg2-tiny")
    generator = StyleGenerator(config, seed=3)
    path = chapter.export_weights(generator, tmp_path, kind="fundus-sg2", kimg=1.5, seed=3, metrics={"FD": 2.0})
    loaded, record = chapter.load_weights(tmp_path, "fundus-sg2", config)
    assert path.name == "fundus-sg2.pt" and record["kimg"] == 1.5 and record["metrics"] == {"FD": 2.0}
    assert len(record["sha256"]) == 64
    for key, value in generator.state_dict().items():
        expected = value.half().float() if value.is_floating_point() else value
        assert torch.equal(loaded.state_dict()[key], expected), key
    assert chapter.load_weights(tmp_path / "elsewhere", "fundus-sg2", config) is None


def test_corrupt_weights_are_refused_naming_the_file(tmp_path):
    config = get_config("sg2-tiny")
    path = chapter.export_weights(StyleGenerator(config, seed=0), tmp_path, kind="fundus-sg2", kimg=1, seed=0)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(chapter.WeightsRefused, match=r"fundus-sg2\.pt.*SHA-256"):
        chapter.load_weights(tmp_path, "fundus-sg2", config)


def test_weights_of_another_config_or_channels_are_refused(tmp_path):
    config = get_config("sg2-tiny")
    chapter.export_weights(StyleGenerator(config, seed=0), tmp_path, kind="fundus-sg2", kimg=1, seed=0)
    with pytest.raises(chapter.WeightsRefused, match=r"fundus-sg2\.pt.*w_dim: expected 16"):
        chapter.load_weights(tmp_path, "fundus-sg2", config.replace(w_dim=16))
    with pytest.raises(chapter.WeightsRefused, match=r"fundus-sg2\.pt: 3 image channels.*asks for 1"):
        chapter.load_weights(tmp_path, "fundus-sg2", config.replace(image_channels=1))
    (tmp_path / "fundus-sg2.json").unlink()
    with pytest.raises(chapter.WeightsRefused, match=r"fundus-sg2\.json is missing"):
        chapter.load_weights(tmp_path, "fundus-sg2", config)


def test_load_generator_uses_matching_weights_and_trains_on_refusal_only_when_asked(tmp_path, capsys):
    config = tiny_config(tmp_path)
    expected = config.stylegan_config("cxr-sg2")
    chapter.export_weights(StyleGenerator(expected, seed=5), tmp_path / "weights", kind="cxr-sg2", kimg=7, seed=0)
    trained = chapter.load_generator("cxr-sg2", config, train=False, progress=False)
    assert trained.source == "weights" and trained.kimg == 7
    # Another profile's config (same kind, another width): the file is not used; nothing cached, so nothing to load.
    wrong = tiny_config(tmp_path, cxr_sg2_config="sg2-cpu64")
    with pytest.raises(LookupError):
        chapter.load_generator("cxr-sg2", wrong, train=False, progress=False)
    assert "shipped weights not used, they hold another config" in capsys.readouterr().out
    # A damaged file stops the chapter, unless asked to train instead.
    weights = tmp_path / "weights" / "cxr-sg2.pt"
    weights.write_bytes(weights.read_bytes()[:-16])
    with pytest.raises(chapter.WeightsRefused, match="SHA-256"):
        chapter.load_generator("cxr-sg2", config, train=False, progress=False)
    with pytest.raises(LookupError):
        chapter.load_generator("cxr-sg2", tiny_config(tmp_path, train_if_weights_refused=True), train=False,
                               progress=False)


# -- cache and resume -----------------------------------------------------------------------------------------------

def test_interrupted_training_resumes_to_the_uninterrupted_generator(tmp_path, monkeypatch):
    config = tiny_config(None)
    kind = "fundus-sg3t"
    monkeypatch.setenv("ANONPAPER_CACHE", str(tmp_path / "straight"))
    straight = chapter.load_generator(kind, config, progress=False)
    assert straight.source == "trained" and straight.resumed_from_kimg == 0
    assert chapter.load_generator(kind, config, progress=False).source == "cache"

    # An interrupted run: the same key's run folder holds a checkpoint from half-way.
    monkeypatch.setenv("ANONPAPER_CACHE", str(tmp_path / "interrupted"))
    key = pipeline.ArtifactCache(pipeline.CACHE_NAMESPACE, owner=pipeline.__name__).key(
        chapter.generator_description(kind, config))
    run_dir = pipeline.cache_dir() / "stylegan-runs" / key
    settings = pipeline.training_config(kind, config, output_dir=str(run_dir), progress=False)
    settings.total_steps //= 2
    stylegan = config.stylegan_config(kind)
    images = pipeline.load_images(kind, config)
    train_gan(StyleGenerator(stylegan, seed=pipeline.derive_seed(config.seed, "G", kind), implementation="fast"),
              pipeline.ResidualDiscriminator(stylegan, seed=pipeline.derive_seed(config.seed, "D", kind)),
              images, settings, device="cpu")
    resumed = chapter.load_generator(kind, config, progress=False)
    assert resumed.resumed_from_kimg == pytest.approx(config.kimg(kind) / 2)
    for name, value in _state(straight.generator).items():
        assert torch.equal(resumed.generator.state_dict()[name], value), name


def test_cache_key_changes_with_config_data_and_seed():
    base = chapter.generator_description("fundus-sg2", tiny_config())
    for changes in ({"seed": 1}, {"retina_patients": 9}, {"fundus_sg2_kimg": 0.064}, {"augment": "ada"}):
        assert chapter.generator_description("fundus-sg2", tiny_config(**changes)) != base, changes
    assert chapter.generator_description("fundus-sg2", tiny_config(cxr_patients=5)) == base


# -- config ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("changes, message", [
    ({"fundus_sg3t_config": "sg2-tiny"}, "FUNDUS_SG3T_CONFIG must be a sg3t config"),
    ({"cxr_sg2_config": "nope"}, "CXR_SG2_CONFIG must be one of"),
    ({"fundus_sg2_kimg": 0}, "FUNDUS_SG2_KIMG must be a number > 0"),
    ({"batch_size": 6}, "BATCH_SIZE must be a positive multiple of 4"),
    ({"image_size": 48}, "IMAGE_SIZE must be a power of two"),
    ({"cxr_image_size": 16}, "CXR_IMAGE_SIZE must be a power of two >= 32"),
    ({"augment": "mixup"}, "AUGMENT must be"),
])
def test_config_validation_names_the_parameter(changes, message):
    with pytest.raises(ValueError, match=message):
        chapter.Config(**changes)


def test_config_channels_and_cohort_size():
    config = chapter.Config()
    assert config.stylegan_config("cxr-sg2").image_channels == 1
    assert config.stylegan_config("fundus-sg3t").architecture == "sg3t"
    assert config.cohort_size == 128 and config.cohort_options("cxr-sg2")["n_patients"] == config.cxr_patients


def test_fundus_and_chest_xray_sizes_are_separate():
    config = chapter.Config(image_size=128, cxr_image_size=32)
    assert config.stylegan_config("fundus-sg3t").resolution == config.stylegan_config("fundus-sg2").resolution == 128
    assert config.stylegan_config("cxr-sg2").resolution == 32
    assert config.cohort_size == config.cohort_options("fundus-sg2")["image_size"] == 128
    assert config.cohort_size_of("cxr-sg2") == config.cohort_options("cxr-sg2")["image_size"] == 64
    images = torch.zeros(2, 1, 32, 32)
    assert pipeline.to_cohort_size(images, config, "cxr-sg2").shape[-1] == 64
    assert pipeline.to_cohort_size(torch.zeros(2, 3, 32, 32), config, "fundus-sg2").shape[-1] == 128


# -- claims ---------------------------------------------------------------------------------------------------------

def _outcome(values: dict[str, float], dice: float = 0.7, eval_images: int = 100) -> chapter.Outcome:
    config = tiny_config(eval_images=eval_images, min_eval_images=50, projector_psnr_target=20.0, projector_images=8)
    rows = [{"kind": "fundus-sg2", "metric": name, "value": value, "protocol": ""} for name, value in values.items()]
    trained = chapter.TrainedGenerator("fundus-sg2", None, "trained", 1.0, pd.DataFrame(), 1.0)
    samples = {"fundus-sg2": {"real": np.zeros((eval_images, 3, 32, 32))}}
    return chapter.Outcome(config, {"fundus-sg2": trained}, pd.DataFrame(rows), samples,
                           {"phantom-retina": {"mask": "vessel", "val_dice": dice, "check": ""}})


GOOD = {"FD-vessel-unet": 10.0, "FD-vessel-unet/untrained": 40.0, "vessel_fraction/real": 0.10,
        "FD-vessel-unet/se": 1.0, "FD-vessel-unet/untrained/se": 2.0,
        "vessel_fraction/generated": 0.11, "vessel_fraction/relative_difference/se": 0.05,
        "projector_W+/PSNR": 25.0, "projector_W+/PSNR/se": 0.5, "projector_W/PSNR": 20.0,
        "projector_W+/SSIM": 0.8,
        "vessel_skeleton/length_per_piece/real": 56.0, "vessel_skeleton/length_per_piece/generated": 48.0,
        "vessel_skeleton/junctions_per_image/real": 1.2, "vessel_skeleton/junctions_per_image/generated": 1.0,
        "vessel_skeleton/length_per_piece/relative_difference/se": 0.1,
        "vessel_skeleton/junctions_per_image/relative_difference/se": 0.1,
        "vessel_skeleton/pieces_per_image/real": 2.3, "vessel_skeleton/pieces_per_image/generated": 3.0,
        "vessel_skeleton/largest_piece/real": 0.95, "vessel_skeleton/largest_piece/generated": 0.8,
        "vessel_skeleton/jpeg_change": 0.05,
        "memorisation/nn_distance/generated": 1.02, "memorisation/nn_distance/held_out": 1.0,
        "memorisation/ratio": 1.02, "memorisation/ratio/se": 0.02, "memorisation/n/held_out": 60}
STROKES = {"vessel_skeleton/length_per_piece/generated": 7.7}  # the quick StyleGAN2's scattered strokes


def _verdicts(outcome) -> dict[str, str]:
    return {claim.id: claim.verdict for claim in chapter.evaluate_claims(outcome)}


def test_claims_hold_on_good_numbers_and_fail_on_bad_ones():
    assert set(_verdicts(_outcome(GOOD)).values()) == {HOLDS}
    bad = {**GOOD, **STROKES, "FD-vessel-unet": 20.0, "vessel_fraction/generated": 0.2, "projector_W+/PSNR": 15.0,
           "memorisation/ratio": 0.5}
    assert set(_verdicts(_outcome(bad)).values()) == {FAILS}


def test_tree_claim_fails_on_strokes_or_missing_junctions_and_is_absent_without_skeleton_numbers():
    assert _verdicts(_outcome(GOOD))["fundus-sg2-vessel-tree"] == HOLDS
    strokes = _verdicts(_outcome({**GOOD, **STROKES}))
    assert strokes["fundus-sg2-vessel-tree"] == FAILS and strokes["fundus-sg2-vessel-fraction"] == HOLDS
    no_junctions = {**GOOD, "vessel_skeleton/junctions_per_image/generated": 0.3}
    assert _verdicts(_outcome(no_junctions))["fundus-sg2-vessel-tree"] == FAILS
    no_real_junctions = {**GOOD, "vessel_skeleton/junctions_per_image/real": 0.0}
    assert _verdicts(_outcome(no_real_junctions))["fundus-sg2-vessel-tree"] == UNDECIDED
    failed = _verdicts(_outcome(GOOD, dice=0.2))
    assert failed["fundus-sg2-vessel-tree"] == UNDECIDED
    # Within the tolerance but not by two SE: undecided, not held.
    noisy = {**GOOD, "vessel_skeleton/junctions_per_image/relative_difference/se": 0.3}
    assert _verdicts(_outcome(noisy))["fundus-sg2-vessel-tree"] == UNDECIDED
    lungs_like = {name: value for name, value in GOOD.items() if "skeleton" not in name}
    assert "fundus-sg2-vessel-tree" not in _verdicts(_outcome(lungs_like))


def test_tree_claim_is_undecided_when_jpeg_saved_real_images_read_as_other_trees():
    """The skeleton statistics' own floor: real images saved as JPEG (quality 90) must keep both statistics within
    half the tolerance; past it, or unmeasured, the claim is undecided, whichever way the numbers point."""
    for numbers in (GOOD, {**GOOD, **STROKES}):
        claims = {claim.id: claim for claim in chapter.evaluate_claims(
            _outcome({**numbers, "vessel_skeleton/jpeg_change": 0.66}))}
        tree = claims["fundus-sg2-vessel-tree"]
        assert tree.verdict == UNDECIDED
        assert "saved as JPEG at quality 90 0.66 > floor 0.25" in tree.reason
        assert claims["fundus-sg2-vessel-fraction"].verdict == HOLDS  # the pixel count has no such floor
    at_floor = _verdicts(_outcome({**GOOD, "vessel_skeleton/jpeg_change": 0.25}))
    assert at_floor["fundus-sg2-vessel-tree"] == HOLDS
    unmeasured = {name: value for name, value in GOOD.items() if name != "vessel_skeleton/jpeg_change"}
    assert _verdicts(_outcome(unmeasured))["fundus-sg2-vessel-tree"] == UNDECIDED


def test_memorisation_claim_fails_on_copies_and_waits_for_held_out_images_and_noise():
    verdict = "fundus-sg2-no-memorisation"
    assert _verdicts(_outcome(GOOD))[verdict] == HOLDS
    copies = {**GOOD, "memorisation/ratio": 0.3}  # samples far closer to training images than unseen reals are
    assert _verdicts(_outcome(copies))[verdict] == FAILS
    # Within the margin but not by two SE: undecided; too few held-out images: undecided.
    assert _verdicts(_outcome({**GOOD, "memorisation/ratio": 0.93}))[verdict] == UNDECIDED
    assert _verdicts(_outcome({**GOOD, "memorisation/n/held_out": 5}))[verdict] == UNDECIDED
    assert _verdicts(_outcome(GOOD, dice=0.2))[verdict] == UNDECIDED


def test_memorisation_rows_find_copies_of_the_training_images():
    """A 'generator' whose samples are training images sits at distance 0 from them (ratio 0); fresh images of the
    same cohort sit about as far as held-out ones (ratio near 1)."""
    from anonpaper.data import load_cohort

    config = tiny_config(bootstrap=20)
    cohort = load_cohort("phantom-retina", n_patients=24, image_size=64, seed=5)
    images = torch.nn.functional.avg_pool2d(torch.from_numpy(cohort.load_images()).permute(0, 3, 1, 2).float() / 255,
                                            2)  # the generator's 32 px
    train, held_out, fresh = images[:24], images[24:34], images[34:44]
    segmenter = pipeline.evaluation_instruments("fundus-sg2", config, progress=False)[0][0]

    def ratio(generated):
        rows, nearest = pipeline.memorisation_rows("fundus-sg2", config, segmenter, "vessel", train, generated,
                                                   held_out)
        values = {row["metric"]: row["value"] for row in rows}
        return values["memorisation/ratio"], values["memorisation/ratio/se"], nearest

    copied, _, nearest = ratio(train[3:8])
    assert copied == 0.0 and nearest.tolist() == [3, 4, 5, 6, 7]
    unseen, se, _ = ratio(fresh)
    assert 0.5 < unseen < 2.0 and se > 0


def test_memorisation_of_weights_that_learned_a_population_is_measured_against_that_population():
    """Shipped weights learned a phantom population of patients outside the cohort. A 'generator' that copies that
    population sits about as far from the cohort's images as any real image does (a check against the cohort
    cannot see it), and at distance 0 from the population (:func:`learned_images`), which the check now reads."""
    from anonpaper.data.population import PopulationSpec, load_population

    config = tiny_config(bootstrap=20)
    spec = PopulationSpec("phantom-retina", image_size=64, n_patients=6, seed=3)
    key = load_population(spec, progress=False).key
    record = {"population": {**spec.description(), "key": key}}
    shipped = chapter.TrainedGenerator("fundus-sg2", None, "weights", 1.0, pd.DataFrame(), 1.0, provenance=record)
    assert pipeline.learned_population(shipped) == spec
    learned, table, name = pipeline.learned_images(shipped, config)
    assert learned.dtype == np.uint8 and learned.shape[1:] == (32, 32, 3) and len(learned) >= 12
    assert len(table) == len(learned) and table["patient_id"].nunique() == 6
    assert name.startswith(f"{len(learned)} images of the population") and key in name and "record" not in name
    # the description says when the population renders here otherwise than where the weights learned it
    elsewhere = {"population": {**record["population"], "key": "0123456789abcdef"}}
    assert "record key 0123456789abcdef" in pipeline.learned_images(
        chapter.TrainedGenerator("fundus-sg2", None, "weights", 1.0, pd.DataFrame(), 1.0, provenance=elsewhere),
        config)[2]
    # weights trained in the chapter learned its cohort
    trained_here = chapter.TrainedGenerator("fundus-sg2", None, "trained", 1.0, pd.DataFrame(), 1.0)
    assert pipeline.learned_population(trained_here) is None
    cohort_train, cohort_table, cohort_name = pipeline.learned_images(trained_here, config)
    assert cohort_name == f"{len(cohort_train)} training images of the chapter's cohort"
    assert len(cohort_table) == len(cohort_train) and set(cohort_table["split"]) == {"train"}
    # images the caller already holds stand in for the cohort's, and only for a generator that learned the cohort
    assert np.array_equal(cohort_train, pipeline.load_images("fundus-sg2", config))
    assert pipeline.learned_images(trained_here, config, cohort_train=cohort_train)[0] is cohort_train
    assert pipeline.learned_images(shipped, config, cohort_train=cohort_train)[0].shape == learned.shape

    segmenter = pipeline.evaluation_instruments("fundus-sg2", config, progress=False)[0][0]
    copies = pipeline._as_float(learned[:6])
    held_out = pipeline._as_float(pipeline.load_images("fundus-sg2", config, "test"))

    def ratio(train):
        rows, nearest = pipeline.memorisation_rows("fundus-sg2", config, segmenter, "vessel", train, copies, held_out,
                                                   name)
        values = {row["metric"]: row["value"] for row in rows}
        return values["memorisation/ratio"], values["memorisation/n/train"], nearest

    # read a chunk at a time from uint8: the same nearest images (the distances to a tolerance: other batch shapes)
    pipeline_chunk = pipeline.MEMORISATION_CHUNK
    try:
        pipeline.MEMORISATION_CHUNK = 5
        chunked = ratio(learned)
    finally:
        pipeline.MEMORISATION_CHUNK = pipeline_chunk
    against_population = ratio(learned)
    assert against_population[0] == pytest.approx(0.0, abs=1e-4) and against_population[1] == len(learned)
    assert chunked[0] == pytest.approx(0.0, abs=1e-4)
    assert chunked[2].tolist() == against_population[2].tolist() == [0, 1, 2, 3, 4, 5]
    against_cohort, count, _ = ratio(cohort_train)
    assert count == len(cohort_train) and against_cohort > 0.5


def test_skeleton_statistics_tell_a_phantom_vessel_tree_from_scattered_strokes():
    from anonpaper.data import load_cohort

    cohort = load_cohort("phantom-retina", n_patients=4, image_size=64, seed=0)
    trees = np.stack([np.asarray(mask) > 0 for mask in cohort.split("train").load_masks("vessel")])
    rng = np.random.default_rng(0)
    strokes = np.zeros_like(trees)
    for image in strokes:  # same order of vessel area, as short disconnected dashes
        for row, column in rng.integers(4, 56, size=(12, 2)):
            image[row, column:column + 5] = True
    tree_stats, stroke_stats = pipeline.skeleton_statistics(trees), pipeline.skeleton_statistics(strokes)
    assert tree_stats["length_per_piece"] > 3 * stroke_stats["length_per_piece"]
    assert tree_stats["largest_piece"] > 0.6 > stroke_stats["largest_piece"]
    assert tree_stats["junctions_per_image"] >= 1 and set(tree_stats) == set(pipeline.SKELETON_STATISTICS)
    empty = pipeline.skeleton_statistics(np.zeros((2, 8, 8), dtype=bool))
    assert empty["length_per_piece"] == 0.0 and np.isnan(empty["largest_piece"])
    with pytest.raises(ValueError, match="boolean"):
        pipeline.skeleton_statistics(np.zeros((2, 8, 8)))


def test_claims_undecided_for_small_runs_and_a_failed_segmenter():
    small = _verdicts(_outcome(GOOD, eval_images=10))
    assert small["fundus-sg2-fd"] == UNDECIDED and small["fundus-sg2-vessel-fraction"] == UNDECIDED
    failed = _verdicts(_outcome(GOOD, dice=0.2))
    assert failed["fundus-sg2-vessel-fraction"] == UNDECIDED and failed["fundus-sg2-fd"] == UNDECIDED
    assert failed["fundus-sg2-projector"] == HOLDS  # PSNR needs no U-Net
    from anonpaper.experiments.claims import check_record

    claims = chapter.evaluate_claims(_outcome(GOOD, dice=0.2))
    assert check_record({"claims": [claim.as_dict() for claim in claims]}) == []
    assert "vessel U-Net validation Dice 0.2 < floor" in claims[0].reason


def test_skeleton_rows_aggregate_to_the_statistics_and_bootstrap():
    masks = np.zeros((3, 32, 32), dtype=bool)
    masks[0, 16, 2:30] = True
    masks[1, 4, 2:8] = masks[1, 20, 2:8] = True
    rows = pipeline.skeleton_rows(masks)
    assert rows.shape == (3, 4) and np.isnan(rows[2, 2])
    assert pipeline.aggregate_skeletons(rows) == pipeline.skeleton_statistics(masks)
    assert pipeline.relative_difference(1.5, 1.0) == 0.5 and np.isnan(pipeline.relative_difference(1.0, 0.0))


def test_dropping_small_mask_pieces_keeps_trees_and_removes_specks():
    from anonpaper.data import load_cohort

    cohort = load_cohort("phantom-retina", n_patients=4, image_size=64, seed=0)
    trees = np.stack([np.asarray(mask) > 0 for mask in cohort.split("train").load_masks("vessel")])
    from scipy import ndimage

    specked, rng = trees.copy(), np.random.default_rng(0)
    for image in specked:  # one-pixel specks away from the vessels, as noise or compression leaves in a mask
        free = np.flatnonzero(~ndimage.binary_dilation(image, iterations=3))
        image.flat[rng.choice(free, 20, replace=False)] = True
    plain, specks = pipeline.skeleton_statistics(trees), pipeline.skeleton_statistics(specked)
    assert specks["pieces_per_image"] > plain["pieces_per_image"] + 10  # each speck a piece of its own
    cleaned = pipeline.skeleton_statistics(specked, min_area=4)
    reference = pipeline.skeleton_statistics(trees, min_area=4)
    assert abs(cleaned["length_per_piece"] - reference["length_per_piece"]) < 0.1 * reference["length_per_piece"]
    assert pipeline.skeleton_statistics(trees, min_area=0) == plain == pipeline.skeleton_statistics(trees, 1)
    assert pipeline.skeleton_statistics(trees, min_area=10_000)["length_per_image"] == 0.0
    with pytest.raises(ValueError, match="min_area"):
        pipeline.skeleton_statistics(trees, min_area=-1)


def test_jpeg_round_trip_keeps_shape_and_range_and_rejects_other_layouts():
    images = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    saved = pipeline.jpeg_round_trip(images, 90)
    assert saved.shape == images.shape and saved.dtype == torch.float32
    assert 0.0 <= float(saved.min()) and float(saved.max()) <= 1.0
    worse = pipeline.jpeg_round_trip(images, 10)
    assert 0.0 < float((saved - images).abs().mean()) < float((worse - images).abs().mean())
    gray = pipeline.jpeg_round_trip(images[:, :1], 90)
    assert gray.shape == (2, 1, 32, 32)
    with pytest.raises(ValueError, match="expects"):
        pipeline.jpeg_round_trip(images[0], 90)


# -- precision / recall ---------------------------------------------------------------------------------------------

def test_knn_precision_recall_separates_disjoint_sets():
    rng = np.random.default_rng(0)
    real = rng.normal(size=(40, 3))
    assert knn_precision_recall(real, real) == (1.0, 1.0)
    assert knn_precision_recall(real, real + 100.0) == (0.0, 0.0)
    narrow = real[:20] * 0.01  # a collapsed generator: precise, little recall
    precision, recall = knn_precision_recall(real, narrow)
    assert precision == 1.0 and recall < 0.5


def test_export_outcome_writes_loadable_weights_with_metrics(tmp_path):
    config = tiny_config()
    generator = StyleGenerator(config.stylegan_config("fundus-sg2"), seed=1)
    trained = chapter.TrainedGenerator("fundus-sg2", generator, "trained", 0.5, pd.DataFrame(), 1.0)
    metrics = pd.DataFrame([{"kind": "fundus-sg2", "metric": "SWD", "value": 3.0, "protocol": ""}])
    outcome = chapter.Outcome(config, {"fundus-sg2": trained}, metrics)
    (path,) = chapter.export_outcome(outcome, tmp_path)
    _, record = chapter.load_weights(tmp_path, "fundus-sg2", config.stylegan_config("fundus-sg2"))
    assert path.parent == tmp_path and record["metrics"] == {"SWD": 3.0} and record["data"]["n_patients"] == 8


def test_vessel_claim_reports_the_native_fraction_when_generators_are_smaller_than_the_cohort():
    claims = chapter.evaluate_claims(_outcome({**GOOD, "vessel_fraction/real_native": 0.09}))
    (vessel,) = [claim for claim in claims if claim.id == "fundus-sg2-vessel-fraction"]
    assert vessel.ours["real_native"] == 0.09 and "against 0.0900 at 64 px" in vessel.reason


def test_mask_figure_shows_each_image_above_its_mask_and_skips_kinds_without_masks():
    import matplotlib.pyplot as plt

    outcome = _outcome(GOOD, eval_images=8)
    real_mask = np.zeros((3, 1, 32, 32), dtype=np.float32)
    real_mask[:, :, 16, 2:30] = 1.0
    outcome.samples["fundus-sg2"].update(generated=np.ones((8, 3, 32, 32)), real_mask=real_mask,
                                         generated_mask=np.zeros((3, 1, 32, 32), dtype=np.float32))
    outcome.samples["fundus-sg3t"] = {"real": np.zeros((8, 3, 32, 32))}  # an older outcome: no masks
    figure = chapter.plot_masks(outcome)
    axes = np.asarray(figure.axes).reshape(4, 3)  # real, its masks, generated, their masks; three columns
    assert [axis.get_ylabel() for axis in axes[:, 0]] == ["fundus-sg2\nreal", "fundus-sg2\nreal vessel mask",
                                                          "fundus-sg2\ngenerated", "fundus-sg2\ngenerated vessel mask"]
    shown = axes[1, 0].get_images()[0].get_array()
    assert shown.shape == (32, 32) and shown[16, 2:30].min() == 1.0 and shown.sum() == 28
    plt.close(figure)


def test_curve_figure_draws_each_shipped_generators_provenance_and_names_its_protocol():
    import matplotlib.pyplot as plt

    config = tiny_config()
    curve = [{"step": step, "kimg": kimg, "FD-vessel-unet": fd, "precision": 0.1 * step, "recall": 0.05 * step,
              "vessel_fraction/generated": 0.04, "vessel_fraction/real": 0.05,
              "vessel_skeleton/length_per_piece/generated": 15.0, "vessel_skeleton/length_per_piece/real": 30.0,
              "vessel_skeleton/junctions_per_image/generated": 6.0, "vessel_skeleton/junctions_per_image/real": 8.0}
             for step, kimg, fd in ((0, 0.0, 300.0), (1, 5.0, 3.0), (2, 10.0, 1.0))]
    record = {"kind": "fundus-sg2", "seed": 0, "evaluation": {"eval_images": 200}, "curve": curve}
    losses = pd.DataFrame({"step": [0, 1], "loss_d": [1.0, 0.9], "loss_g_adv": [0.8, 1.1]})
    outcome = chapter.Outcome(config, {
        "fundus-sg3t": chapter.TrainedGenerator("fundus-sg3t", None, "trained", 0.5, losses, 1.0),
        "fundus-sg2": chapter.TrainedGenerator("fundus-sg2", None, "weights", 10.0, pd.DataFrame(curve), 1.0,
                                               weights_file="weights/fundus-sg2.pt", provenance=record)},
        pd.DataFrame(columns=["kind", "metric", "value", "protocol"]))
    figure = chapter.plot_curves(outcome)
    fd_axis, pr_axis, difference_axis = figure.axes  # one column: only the shipped generator has a curve
    assert fd_axis.get_title() == "fundus-sg2 (fundus-sg2.pt)" and fd_axis.get_yscale() == "log"
    assert list(pr_axis.get_lines()[0].get_ydata()) == pytest.approx([0.0, 0.1, 0.2])
    fraction, length, junctions = difference_axis.get_lines()[:3]
    assert list(length.get_ydata()) == [-0.5] * 3 and list(junctions.get_ydata()) == [-0.25] * 3
    assert list(fraction.get_ydata()) == pytest.approx([-0.2] * 3)
    # a run recorded before TREE_MIN_AREA existed counted every piece, and the figure says so
    assert difference_axis.get_title() == "tree statistics: every mask piece counted (this run's protocol)"
    plt.close(figure)
    training = chapter.plot_training(outcome)
    assert "the evaluation curve is in the next figure" in training.axes[1].texts[0].get_text()
    plt.close(training)
    nothing = chapter.plot_curves(chapter.Outcome(config, {"fundus-sg3t": outcome.generators["fundus-sg3t"]},
                                                  outcome.metrics))
    assert "no shipped generator with an evaluation curve" in nothing.axes[0].texts[0].get_text()
    plt.close(nothing)


def test_spectrum_rows_find_a_blurred_generator_short_at_high_frequencies_only_and_the_figure_draws_them():
    import matplotlib.pyplot as plt

    config = tiny_config(bootstrap=5)
    real = torch.rand(12, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    kernel = torch.tensor([1.0, 2.0, 1.0])
    kernel = (kernel[:, None] * kernel[None] / 16).expand(3, 1, 3, 3)
    blurred = torch.nn.functional.conv2d(torch.nn.functional.pad(real, (1, 1, 1, 1), mode="replicate"), kernel,
                                         groups=3)
    rows, spectra = pipeline.spectrum_rows("fundus-sg2", config, real, blurred)
    values = {row["metric"]: row["value"] for row in rows}
    coarse, finest = (f"spectrum/{low:g}-{high:g}_nyquist/db" for low, high in
                      (pipeline.SPECTRUM_BANDS[0], pipeline.SPECTRUM_BANDS[-1]))
    assert -1.0 < values[coarse] < 0.0 and values[finest] < -10.0  # the binomial passes low and stops high
    assert all(values[f"{name}/se"] > 0 for name in (coarse, finest))
    same, _ = pipeline.spectrum_rows("fundus-sg2", config, real, real)
    assert all(row["value"] == 0.0 for row in same if not row["metric"].endswith("/se"))
    assert set(spectra) == {"real", "generated"} and spectra["real"].shape == (20,)

    outcome = _outcome(GOOD, eval_images=8)
    outcome.metrics = pd.concat([outcome.metrics, pd.DataFrame(rows)], ignore_index=True)
    outcome.samples["fundus-sg2"].update({f"spectrum_{name}": value for name, value in spectra.items()})
    summary = chapter.spectrum_summary(outcome)
    assert summary.startswith("- **fundus-sg2**") and f"{values[finest]:+.1f} dB" in summary
    figure = chapter.plot_spectra(outcome)
    (axis,) = figure.axes
    assert [line.get_label() for line in axis.get_lines()] == ["real", "generated"]
    plt.close(figure)
