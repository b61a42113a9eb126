"""Generator training as a job of its own: the training populations (size, disjoint patients, resumable cache),
`generators train` (deterministic, resumable, time-limited, evaluated, exported with provenance), the shipped
weights' checks, `load_shipped_generator`, and `anonpaper generate`."""

from __future__ import annotations

import json
import shlex
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from anonpaper.cli import build_parser, generators_train_job, main
from anonpaper.data import load_cohort
from anonpaper.data import population as populations
from anonpaper.data.population import ID_PREFIX, PopulationSpec, load_population, population_table
from anonpaper.experiments import generators as chapter
from anonpaper.experiments.generators import job as jobs
from anonpaper.experiments.generators.curves import compare_trees, curve_table, read_curves
from anonpaper.experiments.generators.weights import sha256_of
from anonpaper.models.stylegan import StyleGenerator, get_config

pytestmark = pytest.mark.unit

TINY = {"RETINA_PATIENTS": 8, "CXR_PATIENTS": 4, "SEGMENTER_EPOCHS": 1, "CLASSIFIER_BACKBONE": "small_cnn",
        "CLASSIFIER_EPOCHS": 1, "EVAL_IMAGES": 8}


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ANONPAPER_CACHE", str(tmp_path / "cache"))


def tiny_job(kind: str = "fundus-sg2", eval_kimg: float = 0.0, **changes) -> jobs.TrainingJob:
    """4 steps of 8 images at 32 px (`sg2-tiny` for a StyleGAN2), a checkpoint every 2 steps, on a population of 3
    patients."""
    options = dict(kimg=0.032, resolution=32, checkpoint_kimg=0.016, population_patients=3, eval_kimg=eval_kimg,
                   parameters=dict(TINY))
    if kind in ("fundus-sg2", "cxr-sg2"):  # their quick configs are the shipped ones, larger than this test needs
        options["stylegan_config"] = "sg2-tiny"
    options.update(changes)
    return jobs.training_job(kind, **options)


# -- populations ----------------------------------------------------------------------------------------------------

def test_default_populations_have_the_papers_size():
    fundus = population_table(PopulationSpec("phantom-retina"))
    chest = population_table(PopulationSpec("phantom-cxr"))
    assert len(fundus) >= 7000 and fundus["patient_id"].nunique() == 3000
    assert len(chest) >= 7000 and chest["patient_id"].nunique() == 1000


def _identity_keys(table) -> set[int]:
    """What makes a phantom patient: its anatomy seed (retina) or its studies' render seeds (chest X-ray)."""
    column = "anatomy_seed" if "anatomy_seed" in table.columns else "image_seed"
    return set(table[column].astype(np.int64))


def test_population_patients_are_disjoint_from_every_chapter_cohort():
    from anonpaper.experiments.gmia.config import Config as GMIAConfig
    from anonpaper.experiments.gmia.pipeline import cohort_seed

    for dataset, patients in (("phantom-retina", 300), ("phantom-cxr", 120)):
        spec = PopulationSpec(dataset, n_patients=400)
        table = population_table(spec)
        assert table["patient_id"].str.startswith(ID_PREFIX).all()
        assert table["image_id"].str.startswith(ID_PREFIX).all()
        assert populations.is_population_seed(spec.phantom_seed)
        population_keys = _identity_keys(table)
        # The chapters' cohorts: their SEED (0 by default, small integers in use) and GMIA's derived seed.
        seeds = list(range(8)) + [cohort_seed(GMIAConfig())]
        for seed in seeds:
            assert not populations.is_population_seed(seed)
            cohort = load_cohort(dataset, n_patients=patients, image_size=64, seed=seed).table
            assert not cohort["patient_id"].str.startswith(ID_PREFIX).any()
            assert not population_keys & _identity_keys(cohort), (dataset, seed)
        # The check can fail: a cohort drawn with the population's own phantom seed shares its patients.
        same = load_cohort(dataset, n_patients=patients, image_size=64, seed=spec.phantom_seed).table
        assert population_keys & _identity_keys(same)
    other_seed = population_table(PopulationSpec("phantom-retina", n_patients=50, seed=1))
    assert not _identity_keys(other_seed) & _identity_keys(population_table(PopulationSpec("phantom-retina",
                                                                                           n_patients=50)))


def test_population_is_rendered_once_memory_mapped_and_matches_the_phantom(tmp_path):
    spec = PopulationSpec("phantom-cxr", image_size=64, n_patients=3)
    population = load_population(spec, progress=False)
    assert isinstance(population.images, np.memmap) and not population.images.flags.writeable
    cohort = populations.population_cohort(spec)
    assert population.images.shape == (len(cohort), 64, 64)
    assert np.array_equal(population.images[-1], cohort.image(len(cohort) - 1))
    assert list(population.table["patient_id"]) == list(cohort.table["patient_id"])
    record = json.loads((population.directory / "population.json").read_text())
    assert record["images"] == len(cohort) and record["images_sha256"] == sha256_of(population.directory / "images.npy")
    assert record["libraries"] == populations.rendering_libraries() and "numpy_avx512" in record  # what drew them
    again = load_population(spec, progress=False, render=False)  # opened, not rendered
    assert again.directory == population.directory
    with pytest.raises(LookupError, match="not rendered"):
        load_population(PopulationSpec("phantom-cxr", image_size=64, n_patients=4), render=False)


def test_interrupted_rendering_is_never_used_and_resumes_to_the_same_array(tmp_path, monkeypatch):
    spec = PopulationSpec("phantom-retina", image_size=64, n_patients=6)
    straight = load_population(spec, root=tmp_path / "straight", progress=False)
    monkeypatch.setattr(populations, "BLOCK", 4)
    real_image = populations.Cohort.image
    calls = {"n": 0}

    def failing(self, index):
        calls["n"] += 1
        if calls["n"] > 4 + populations.PROBE_IMAGES + 1:  # the key's probe images, the shape probe, one block
            raise RuntimeError("killed")
        return real_image(self, index)

    monkeypatch.setattr(populations.Cohort, "image", failing)
    root = tmp_path / "interrupted"
    with pytest.raises(RuntimeError, match="killed"):
        load_population(spec, root=root, progress=False)
    monkeypatch.setattr(populations.Cohort, "image", real_image)
    (directory,) = (root / populations.CACHE_FOLDER).iterdir()
    assert (directory / "images.npy.partial").exists() and not (directory / "population.json").exists()
    assert json.loads((directory / "progress.json").read_text())["done"] == 4
    with pytest.raises(LookupError):
        load_population(spec, root=root, render=False)
    resumed = load_population(spec, root=root, progress=False)
    assert np.array_equal(np.asarray(resumed.images), np.asarray(straight.images))
    assert resumed.key == straight.key and not (directory / "progress.json").exists()


@pytest.mark.parametrize("changes", [{"seed": 1}, {"image_size": 128}, {"n_patients": 4}])
def test_population_key_follows_what_it_is(changes):
    base = dict(dataset="phantom-retina", image_size=64, n_patients=3)
    assert populations.population_key(PopulationSpec(**base)) != populations.population_key(
        PopulationSpec(**{**base, **changes}))


@pytest.mark.parametrize("options, message", [
    ({"dataset": "phantom-iris"}, "population dataset must be one of"),
    ({"dataset": "phantom-retina", "image_size": 96}, "power of two in 64..512"),
    ({"dataset": "phantom-retina", "n_patients": 0}, "n_patients must be a positive integer"),
    ({"dataset": "phantom-retina", "seed": -1}, "seed must be a non-negative integer"),
])
def test_population_spec_refuses_bad_values(options, message):
    with pytest.raises(ValueError, match=message):
        PopulationSpec(**options)


# -- training job ---------------------------------------------------------------------------------------------------

def test_training_twice_from_scratch_gives_identical_weights(tmp_path):
    first = jobs.run_job(tiny_job(), tmp_path / "a", progress=False, log=lambda _: None)
    second = jobs.run_job(tiny_job(), tmp_path / "b", progress=False, log=lambda _: None)
    assert first.finished and first.kimg == pytest.approx(0.032)
    assert sha256_of(first.weights) == sha256_of(second.weights)
    other = jobs.run_job(tiny_job(seed=1), tmp_path / "c", progress=False, log=lambda _: None)
    assert sha256_of(other.weights) != sha256_of(first.weights)


def test_interrupted_and_committed_runs_resume_to_the_uninterrupted_weights(tmp_path, monkeypatch):
    straight = jobs.run_job(tiny_job(), tmp_path / "straight", progress=False, log=lambda _: None)
    real_train = jobs.train_gan
    calls = {"n": 0}

    def interrupted(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:  # killed during the second chunk: the first chunk's checkpoint is on disk
            raise RuntimeError("killed")
        return real_train(*args, **kwargs)

    monkeypatch.setattr(jobs, "train_gan", interrupted)
    with pytest.raises(RuntimeError, match="killed"):
        jobs.run_job(tiny_job(), tmp_path / "stopped", progress=False, log=lambda _: None)
    monkeypatch.setattr(jobs, "train_gan", real_train)
    run_dir = tmp_path / "stopped" / "fundus-sg2.run"
    assert torch.load(run_dir / "checkpoint.pt", weights_only=False)["step"] == 2
    assert not (tmp_path / "stopped" / "fundus-sg2.pt").exists()
    # The run folder as committed and checked out elsewhere, days later.
    shutil.copytree(tmp_path / "stopped", tmp_path / "checkout")
    resumed = jobs.run_job(tiny_job(), tmp_path / "checkout", resume=True, progress=False, log=lambda _: None)
    assert resumed.finished and sha256_of(resumed.weights) == sha256_of(straight.weights)


def test_time_limit_stops_at_a_checkpoint_and_resume_finishes_the_same_weights(tmp_path, monkeypatch):
    straight = jobs.run_job(tiny_job(), tmp_path / "straight", progress=False, log=lambda _: None)
    ticks = iter(range(0, 10 ** 6, 100))  # each look at the clock: 100 s later
    monkeypatch.setattr(jobs, "_clock", lambda: float(next(ticks)))
    lines = []
    limited = jobs.run_job(tiny_job(), tmp_path / "limited", minutes=5, progress=False, log=lines.append)
    assert limited.stopped_by_time and not limited.finished and limited.weights is None
    assert limited.kimg == pytest.approx(0.016) and any("continue with --resume" in line for line in lines)
    monkeypatch.setattr(jobs, "_clock", __import__("time").perf_counter)
    finished = jobs.run_job(tiny_job(), tmp_path / "limited", resume=True, progress=False, log=lambda _: None)
    assert sha256_of(finished.weights) == sha256_of(straight.weights)
    assert finished.train_seconds >= limited.train_seconds > 0
    sessions = json.loads(finished.weights.with_suffix(".json").read_text())["sessions"]
    assert [(item["from_kimg"], item["to_kimg"]) for item in sessions] == [(0.0, 0.016), (0.016, 0.032)]
    assert all(item["torch_threads"] == torch.get_num_threads() and item["processes"] == 1 for item in sessions)
    assert sessions[0]["train_seconds"] == pytest.approx(limited.train_seconds, abs=1e-3)


def test_a_session_on_other_arithmetic_is_warned_about_and_recorded():
    first = jobs.session_record("cpu", 1, 0.0)
    assert jobs.arithmetic_change([], first) is None and jobs.arithmetic_change([first], dict(first)) is None
    other_isa = "DEFAULT" if first["cpu_capability"] != "DEFAULT" else "AVX2"  # differs on whichever processor runs it
    other = {**first, "torch_threads": first["torch_threads"] + 1, "cpu_capability": other_isa, "started": "later"}
    change = jobs.arithmetic_change([first], other)
    assert "torch_threads" in change and "cpu_capability" in change and "bit-identical" in change
    assert "started" not in change  # when and where from is not arithmetic
    # The phantoms' renderer is part of it (another OpenCV draws other training images); a field an older session did
    # not record is not compared.
    assert set(first["libraries"]) == set(populations.RENDERING_LIBRARIES) and "numpy_avx512" in first
    renderer = {**first, "libraries": {**first["libraries"], "opencv-python-headless": "0.0.0"}}
    assert "libraries" in jobs.arithmetic_change([first], renderer)
    older = {name: value for name, value in first.items() if name not in ("libraries", "numpy_avx512")}
    assert jobs.arithmetic_change([older], first) is None


def test_a_run_whose_population_renders_otherwise_here_is_refused_naming_the_renderer(tmp_path):
    jobs.run_job(tiny_job(kimg=0.016), tmp_path, progress=False, log=lambda _: None)
    run_json = tmp_path / "fundus-sg2.run" / "run.json"
    record = json.loads(run_json.read_text())
    assert record["sessions"][-1]["libraries"] == populations.rendering_libraries()
    # As if the run's images had been rendered by another OpenCV: the same population spec, another key.
    record["identity"]["population"]["key"] = "0" * 16
    record["sessions"][-1]["libraries"]["opencv-python-headless"] = "0.0.0"
    run_json.write_text(json.dumps(record))
    with pytest.raises(jobs.RunMismatch, match=r"population\.key: .*renders these images differently here, with "
                                               r"opencv-python-headless .*the run's last session rendered with "
                                               r"opencv-python-headless 0\.0\.0"):
        jobs.run_job(tiny_job(kimg=0.032), tmp_path, resume=True, progress=False, log=lambda _: None)
    with pytest.raises(jobs.RunMismatch, match=r"population\.key: .*OpenCV release.*--rerendered-population"):
        jobs.run_job(tiny_job(kimg=0.032), tmp_path / "branch", branch_from=tmp_path / "fundus-sg2.run",
                     progress=False, log=lambda _: None)
    # Asked for, the run trains on from its checkpoint on the images as drawn here, and says so in its records.
    branch = jobs.run_job(tiny_job(kimg=0.032), tmp_path / "branch", branch_from=tmp_path / "fundus-sg2.run",
                          rerendered_population=True, progress=False, log=lambda _: None)
    lines = []
    resumed = jobs.run_job(tiny_job(kimg=0.032), tmp_path, resume=True, rerendered_population=True, progress=False,
                           log=lines.append)
    assert resumed.finished and branch.finished and any("as rendered here" in line for line in lines)
    for outcome in (resumed, branch):
        provenance = json.loads(outcome.weights.with_suffix(".json").read_text())
        change, = provenance["population_changes"]
        assert change["from_key"] == "0" * 16 and change["to_key"] == provenance["population"]["key"] != "0" * 16
        assert change["at_kimg"] == pytest.approx(0.016) and change["libraries"] == populations.rendering_libraries()
    # The identity took the new key: the next session here resumes without the flag.
    assert jobs.run_job(tiny_job(kimg=0.048), tmp_path, resume=True, progress=False, log=lambda _: None).finished
    # Another population altogether (not just another rendering of it) is still refused.
    with pytest.raises(jobs.RunMismatch, match=r"population\.n_patients"):
        jobs.run_job(tiny_job(kimg=0.064, population_patients=4), tmp_path, resume=True, rerendered_population=True,
                     progress=False, log=lambda _: None)


def test_a_run_is_never_overwritten_or_resumed_as_another(tmp_path):
    jobs.run_job(tiny_job(kimg=0.016), tmp_path, progress=False, log=lambda _: None)
    with pytest.raises(jobs.RunMismatch, match="pass --resume"):
        jobs.run_job(tiny_job(kimg=0.016), tmp_path, progress=False, log=lambda _: None)
    with pytest.raises(jobs.RunMismatch, match=r"network_seed: asked 3, run has 0"):
        jobs.run_job(tiny_job(kimg=0.016, seed=3), tmp_path, resume=True, progress=False, log=lambda _: None)
    with pytest.raises(jobs.RunMismatch, match=r"population\.n_patients"):
        jobs.run_job(tiny_job(kimg=0.016, population_patients=4), tmp_path, resume=True, progress=False,
                     log=lambda _: None)
    run_json = tmp_path / "fundus-sg2.run" / "run.json"
    legacy = json.loads(run_json.read_text())
    del legacy["sessions"]  # as written before sessions were recorded
    run_json.write_text(json.dumps(legacy))
    longer = jobs.run_job(tiny_job(kimg=0.032), tmp_path, resume=True, progress=False, log=lambda _: None)
    assert longer.finished and longer.kimg == pytest.approx(0.032)  # a finished run trains on to a larger target
    sessions = json.loads(run_json.read_text())["sessions"]
    assert "not recorded" in sessions[0]["note"] and sessions[0]["to_kimg"] == pytest.approx(0.016)
    assert sessions[1]["from_kimg"] == pytest.approx(0.016) and sessions[1]["to_kimg"] == pytest.approx(0.032)
    with pytest.raises(jobs.RunMismatch, match="past the target"):
        jobs.run_job(tiny_job(kimg=0.016), tmp_path, resume=True, progress=False, log=lambda _: None)


def test_a_run_folder_without_its_checkpoint_is_refused_not_restarted(tmp_path):
    jobs.run_job(tiny_job(kimg=0.016), tmp_path, progress=False, log=lambda _: None)
    run_dir = tmp_path / "fundus-sg2.run"
    (run_dir / "checkpoint.pt").unlink()
    recorded = (run_dir / "run.json").read_bytes()
    with pytest.raises(jobs.RunMismatch, match=r"checkpoint\.pt is missing, but .*run\.json records training to "
                                               r"0\.016 kimg"):
        jobs.run_job(tiny_job(kimg=0.032), tmp_path, resume=True, progress=False, log=lambda _: None)
    assert (run_dir / "run.json").read_bytes() == recorded  # left as it was


def test_a_resumed_run_keeps_its_evaluation_settings_unless_others_are_asked_for(tmp_path):
    jobs.run_job(tiny_job(kimg=0.016), tmp_path, progress=False, log=lambda _: None)
    run_json = tmp_path / "fundus-sg2.run" / "run.json"
    recorded = json.loads(run_json.read_text())
    assert "-p EVAL_IMAGES 8" in recorded["command"] and "-p CLASSIFIER_BACKBONE 'small_cnn'" in recorded["command"]
    # A default changed since the run was recorded, and the command did not name the setting: the run keeps its own.
    parameters = {name: value for name, value in TINY.items() if name != "EVAL_IMAGES"}
    later = tiny_job(kimg=0.032, parameters={**parameters, "EVAL_IMAGES": 9})
    later = jobs.TrainingJob(later.kind, later.config, later.population_patients, later.population_seed,
                             later.eval_kimg, given=later.given - {"eval_images"})
    lines = []
    resumed = jobs.run_job(later, tmp_path, resume=True, progress=False, log=lines.append)
    assert resumed.finished
    assert any("EVAL_IMAGES: the run's 8 (default now 9)" in line for line in lines)
    record = json.loads(run_json.read_text())
    assert record["evaluation"] == recorded["evaluation"] and "-p EVAL_IMAGES 8" in record["command"]
    # Asked for on purpose, another setting is another run.
    with pytest.raises(jobs.RunMismatch, match=r"eval_images: asked 9, run has 8"):
        jobs.run_job(tiny_job(kimg=0.048, parameters={**parameters, "EVAL_IMAGES": 9}), tmp_path, resume=True,
                     progress=False, log=lambda _: None)


def test_a_run_recorded_before_an_evaluation_setting_existed_resumes_with_its_old_value(tmp_path):
    jobs.run_job(tiny_job(kimg=0.016), tmp_path, progress=False, log=lambda _: None)
    run_json = tmp_path / "fundus-sg2.run" / "run.json"
    recorded = json.loads(run_json.read_text())
    assert recorded["evaluation"]["tree_min_area"] == 12 and "-p TREE_MIN_AREA 12" in recorded["command"]
    for name in jobs.LEGACY_EVALUATION:  # as written before the vessel-tree statistics dropped small pieces
        del recorded["evaluation"][name]
    run_json.write_text(json.dumps(recorded))
    later = tiny_job(kimg=0.032)
    later = jobs.TrainingJob(later.kind, later.config, later.population_patients, later.population_seed,
                             later.eval_kimg, given=frozenset())
    lines = []
    assert jobs.run_job(later, tmp_path, resume=True, progress=False, log=lines.append).finished
    assert any("TREE_MIN_AREA: the run's 0 (default now 12)" in line for line in lines)
    record = json.loads(run_json.read_text())
    assert record["evaluation"]["tree_min_area"] == 0 and "-p TREE_MIN_AREA 0" in record["command"]
    # Its label classifiers keep learning undegraded images, as they did when the run began.
    assert record["evaluation"]["classifier_augment"] == 0.0 and "-p CLASSIFIER_AUGMENT 0.0" in record["command"]


def test_evaluation_curve_and_provenance_reach_the_chapter(tmp_path):
    lines = []
    outcome = jobs.run_job(tiny_job(eval_kimg=0.016), tmp_path, progress=False, log=lines.append)
    curve = outcome.curve
    assert list(curve["step"]) == [0, 2, 4]
    for metric in ("FD-vessel-unet", "precision", "recall", "vessel_fraction/generated",
                   "vessel_skeleton/length_per_piece/generated", "labels/distance"):
        assert curve[metric].notna().all(), metric
    assert curve["FD-vessel-unet"].iloc[0] != curve["FD-vessel-unet"].iloc[-1]
    assert any(line.startswith("fundus-sg2 at 0.016 kimg: FD-vessel-unet") for line in lines)
    assert sorted(path.name for path in (outcome.run_dir / "samples").iterdir()) == ["step0000002.png",
                                                                                    "step0000004.png"]
    latest = (outcome.run_dir / "latest.png").read_bytes()  # committed with the run; samples/ is not
    assert latest == (outcome.run_dir / "samples" / "step0000004.png").read_bytes()
    record = json.loads(outcome.weights.with_suffix(".json").read_text())
    assert record["kimg"] == pytest.approx(0.032) and record["sha256"] == sha256_of(outcome.weights)
    assert record["data"]["dataset"] == "phantom-retina"
    assert record["data"]["population"]["patients"] == 3 and record["data"]["population"]["seed"] == 0
    assert [point["step"] for point in record["curve"]] == [0, 2, 4]
    assert record["metrics"]["FD-vessel-unet"] == pytest.approx(curve["FD-vessel-unet"].iloc[-1])
    assert record["command"].startswith("anonpaper generators train fundus-sg2 --kimg 0.032 --resolution 32")
    assert record["training"]["stylegan_config_name"] == "sg2-tiny" and "precision" in record["protocols"]
    # ``anonpaper generators curve`` reads the run and its export alike, the tree check decided at every point
    (from_run,), (from_weights,) = read_curves(outcome.run_dir), read_curves(outcome.weights.with_suffix(".json"))
    assert [point["step"] for point in from_run.points] == [point["step"] for point in from_weights.points] == [0, 2, 4]
    assert "segmenter_dice" in from_run.points[-1] and "segmenter_check" in from_run.points[-1]
    table = curve_table(from_run)
    assert list(table["kimg"]) == [0, 0.016, 0.032] and table["tree check"].isin(["holds", "does not hold",
                                                                                   "undecided"]).all()
    assert compare_trees(from_run, from_weights)["closer by"].tolist() == [0.0, 0.0]
    state = torch.load(outcome.run_dir / "checkpoint.pt", weights_only=False)
    expected = {key: value.half().float() for key, value in state["generator_ema"].items()}

    config = chapter.Config(image_size=32, fundus_sg2_config="sg2-tiny", weights_dir=str(tmp_path),
                            **{k.lower(): v for k, v in TINY.items()})
    shipped = chapter.load_shipped_generator("fundus-sg2", config)
    assert shipped.source == "weights" and shipped.weights_file == str(outcome.weights)
    assert shipped.provenance["command"] == record["command"] and list(shipped.history["step"]) == [0, 2, 4]
    for key, value in shipped.generator.state_dict().items():
        assert torch.equal(value, expected[key]), key
    assert chapter.load_generator("fundus-sg2", config, train=False).weights_file == str(outcome.weights)
    assert chapter.load_shipped_generator("cxr-sg2", config) is None  # nothing shipped for that kind


def test_chest_xray_job_trains_grayscale_on_its_own_population(tmp_path):
    outcome = jobs.run_job(tiny_job("cxr-sg2", kimg=0.016), tmp_path, progress=False, log=lambda _: None)
    assert outcome.population.spec.dataset == "phantom-cxr" and outcome.population.images.ndim == 3
    generator, record = chapter.load_weights(tmp_path, "cxr-sg2", get_config("sg2-tiny", image_channels=1))
    assert record["stylegan_config"]["image_channels"] == 1 and generator.config.resolution == 32


@pytest.mark.parametrize("changes, message", [
    ({"kind": "fundus-sg4"}, "unknown generator kind"),
    ({"parameters": {"NOPE": 1}}, "unknown generators chapter parameter 'NOPE'"),
    ({"parameters": {"SEED": 1}, "seed": 2}, "SEED is given twice"),
    ({"resolution": 48}, "IMAGE_SIZE must be a power of two"),
    ({"eval_kimg": -1}, "eval_kimg must be a number >= 0"),
    ({"population_patients": 0}, "n_patients must be a positive integer"),
    ({"changes": {"resolution": 64}}, r"GENERATOR_CHANGES\['fundus-sg2'\]: \['resolution'\] cannot be changed"),
    ({"changes": {"seed": 3}}, r"\['seed'\] cannot be changed here"),
    ({"changes": {"generator_lr": -1.0}}, r"GENERATOR_CHANGES\['fundus-sg2'\]: .*generator_lr must be >= 0"),
    ({"changes": {"channel_max": 0}}, r"GENERATOR_CHANGES\['fundus-sg2'\]: channel_max must be a positive"),
    ({"changes": {"r1_gamma": 2.0}, "parameters": {"GENERATOR_CHANGES": {"fundus-sg2": {"r1_gamma": 1.0}}}},
     "GENERATOR_CHANGES is given twice"),
    ({"parameters": {"GENERATOR_CHANGES": {"fundus-sg4": {"r1_gamma": 1.0}}}}, "unknown generator kind 'fundus-sg4'"),
    ({"parameters": {"GENERATOR_CHANGES": {"fundus-sg2": {}}}}, "must be a non-empty mapping"),
])
def test_training_job_refuses_bad_options(changes, message):
    options = {"kind": "fundus-sg2", **changes}
    with pytest.raises(ValueError, match=message):
        jobs.training_job(options.pop("kind"), **options)


def test_changes_reach_the_architecture_the_recipe_the_identity_and_the_command():
    job = tiny_job("fundus-sg3t", changes={"generator_lr": 1e-5, "sg3_first_cutoff": 4.0})
    stylegan, recipe = job.config.stylegan_config("fundus-sg3t"), job.recipe()
    assert stylegan.sg3_first_cutoff == 4.0 and stylegan.resolution == 32 and recipe["generator_lr"] == 1e-5
    plain = tiny_job("fundus-sg3t")
    assert plain.recipe()["generator_lr"] != 1e-5 and plain.recipe()["ada_kimg"] == recipe["ada_kimg"] == 100.0
    assert job.identity("key") != plain.identity("key")
    assert job.config.stylegan_config("fundus-sg2") == plain.config.stylegan_config("fundus-sg2")  # other kinds kept
    # The recorded command asks for the same run (as a committed run's resume is checked).
    again = generators_train_job(build_parser().parse_args(shlex.split(job.command())[1:]))
    assert "--change=generator_lr=1e-05" in job.command() and again.identity("key") == job.identity("key")
    assert "--change" not in plain.command()


def test_a_changed_generator_never_loads_shipped_weights(shipped, capsys):
    config, path = shipped
    asked = chapter.Config(weights_dir=str(path.parent), fundus_sg2_config="sg2-tiny", image_size=32,
                           generator_changes={"fundus-sg2": {"r1_gamma": 5.0}})
    assert chapter.load_shipped_generator("fundus-sg2", asked) is None
    assert "GENERATOR_CHANGES changes its config or recipe" in capsys.readouterr().out
    assert chapter.load_shipped_generator("fundus-sg2", asked.replace(generator_changes=None)) is not None


# -- shipped weights: what the chapters' loading path refuses -------------------------------------------------------

@pytest.fixture
def shipped(tmp_path):
    config = get_config("sg2-tiny")
    path = chapter.export_weights(StyleGenerator(config, seed=0), tmp_path / "weights", kind="fundus-sg2", kimg=1,
                                  seed=0, data={"dataset": "phantom-retina"})
    return config, path


def test_truncated_weights_are_refused_naming_the_file(shipped):
    config, path = shipped
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(chapter.WeightsRefused, match=r"fundus-sg2\.pt: SHA-256 .* truncated"):
        chapter.load_shipped_generator("fundus-sg2", config, weights_dir=path.parent)


def test_weights_of_another_kind_or_resolution_are_refused(shipped):
    config, path = shipped
    with pytest.raises(chapter.WeightsRefused, match=r"fundus-sg2\.pt: resolution 32 px, the chapter asks for 64"):
        chapter.load_shipped_generator("fundus-sg2", config.replace(resolution=64), weights_dir=path.parent)
    path.with_suffix(".json").rename(path.parent / "fundus-sg3t.json")
    path.rename(path.parent / "fundus-sg3t.pt")
    with pytest.raises(chapter.WeightsRefused, match=r"fundus-sg3t\.json: describes a 'fundus-sg2' generator"):
        chapter.load_shipped_generator("fundus-sg3t", config, weights_dir=path.parent)


def test_a_description_that_is_not_json_or_misses_its_hash_is_refused(shipped):
    config, path = shipped
    description = path.with_suffix(".json")
    record = json.loads(description.read_text())
    description.write_text(json.dumps({**record, "sha256": None}))
    with pytest.raises(chapter.WeightsRefused, match=r"does not match None"):
        chapter.load_shipped_generator("fundus-sg2", config, weights_dir=path.parent)
    description.write_text(description.read_text()[:40])
    with pytest.raises(chapter.WeightsRefused, match=r"fundus-sg2\.json: unreadable description"):
        chapter.load_shipped_generator("fundus-sg2", config, weights_dir=path.parent)


def test_load_shipped_generator_without_weights_or_provenance_clashes(tmp_path, shipped):
    config, path = shipped
    assert chapter.load_shipped_generator("fundus-sg2", config, weights_dir=tmp_path / "none") is None
    assert chapter.load_shipped_generator("fundus-sg2", chapter.Config(image_size=32, weights_dir=None)) is None
    loaded = chapter.load_shipped_generator("fundus-sg2", config, weights_dir=path.parent)
    assert loaded.kimg == 1 and loaded.weights_file == str(path)
    # The page names the file and the start of its verified hash (outside the project: the full path).
    assert chapter.weights_label(loaded) == f"{path} (SHA-256 {sha256_of(path)[:12]}...)"
    with pytest.raises(TypeError, match="config_or_spec"):
        chapter.load_shipped_generator("fundus-sg2", {"resolution": 32})
    with pytest.raises(ValueError, match="clash"):
        chapter.export_weights(loaded.generator, path.parent, kind="fundus-sg2", kimg=1, seed=0,
                               provenance={"sha256": "x"})


# -- anonpaper generate / generators train ----------------------------------------------------------------------------

@pytest.fixture
def chest_weights(tmp_path):
    """A tiny chest X-ray generator, trained for one step and exported."""
    outcome = jobs.run_job(tiny_job("cxr-sg2", kimg=0.008), tmp_path / "weights", progress=False, log=lambda _: None)
    return outcome.weights


def test_generate_writes_seeded_pngs_and_refuses_a_full_folder(tmp_path, chest_weights, capsys):
    out = tmp_path / "samples"
    assert main(["generate", "cxr-sg2", "--n", "3", "--out", str(out), "--weights", str(chest_weights),
                 "--seed", "4", "--quiet"]) == 0
    files = sorted(out.iterdir())
    assert [path.name for path in files] == [f"cxr-sg2-seed4-{index:05d}.png" for index in range(3)]
    image = Image.open(files[0])
    assert image.mode == "L" and image.size == (32, 32)
    first = [path.read_bytes() for path in files]
    assert main(["generate", "cxr-sg2", "--n", "3", "--out", str(out), "--weights", str(chest_weights),
                 "--seed", "4", "--quiet"]) == 2
    assert "is not empty; pass --overwrite" in capsys.readouterr().err
    assert main(["generate", "cxr-sg2", "--n", "2", "--out", str(out), "--weights", str(chest_weights),
                 "--seed", "4", "--overwrite", "--truncation", "1", "--quiet"]) == 0
    assert [path.read_bytes() for path in sorted(out.iterdir())] == first  # same seed, same images
    assert main(["generate", "cxr-sg2", "--n", "2", "--out", str(tmp_path / "truncated"), "--truncation", "0",
                 "--weights", str(chest_weights), "--quiet"]) == 0
    flat = [np.asarray(Image.open(path)) for path in sorted((tmp_path / "truncated").iterdir())]
    assert np.array_equal(flat[0], flat[1])  # psi 0: every sample is the mean w's image


@pytest.mark.parametrize("arguments, message", [
    (["fundus-sg9", "--n", "2"], "unknown generator kind 'fundus-sg9'"),
    (["cxr-sg2", "--n", "0"], "--n must be a positive number of images, got 0"),
    (["cxr-sg2", "--n", "-3"], "--n must be a positive number of images, got -3"),
    (["fundus-sg2", "--n", "2", "--truncation", "nan"], "truncation psi must be a finite number"),
])
def test_generate_refuses_bad_input_with_exit_2(tmp_path, chest_weights, capsys, arguments, message):
    assert main(["generate", *arguments, "--out", str(tmp_path / "x"), "--weights", str(chest_weights)]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_generate_without_weights_says_how_to_train_them(tmp_path, capsys):
    assert main(["generate", "fundus-sg3t", "--n", "2", "--out", str(tmp_path / "x"),
                 "--weights", str(tmp_path / "missing.pt")]) == 2
    error = capsys.readouterr().err
    assert "no weights for fundus-sg3t" in error and "anonpaper generators train fundus-sg3t" in error


def test_generate_refuses_weights_of_another_kind(tmp_path, chest_weights, capsys):
    assert main(["generate", "fundus-sg2", "--n", "2", "--out", str(tmp_path / "x"),
                 "--weights", str(chest_weights)]) == 2
    assert "describes a 'cxr-sg2' generator, not 'fundus-sg2'" in capsys.readouterr().err


def test_generators_train_command_trains_resumes_and_refuses(tmp_path, capsys):
    command = ["generators", "train", "cxr-sg2", "--kimg", "0.016", "--resolution", "32", "--checkpoint-kimg", "0.008",
               "--population-patients", "3", "--eval-kimg", "0", "--out", str(tmp_path), "--quiet"]
    for name, value in TINY.items():
        command += ["-p", name, str(value)]
    assert main(command) == 0
    assert "cxr-sg2: 0.016/0.016 kimg" in capsys.readouterr().out
    assert (tmp_path / "cxr-sg2.pt").exists() and (tmp_path / "cxr-sg2.run" / "checkpoint.pt").exists()
    assert main(command) == 2 and "pass --resume" in capsys.readouterr().err
    assert main(command + ["--resume"]) == 0
    assert main(command + ["--minutes", "0"]) == 2 and "--minutes must be > 0" in capsys.readouterr().err
    assert main(["generators", "train", "cxr-sg9", "--out", str(tmp_path)]) == 2
    assert "unknown generator kind" in capsys.readouterr().err
    # A resumed run asked with another recipe is another run: refused, naming what differs.
    assert main(command + ["--resume", "--change", "r1_gamma=3"]) == 2
    assert "training.r1_gamma: asked 3" in capsys.readouterr().err
    for change, message in (("r1_gamma", "--change takes NAME=VALUE"), ("resolution=64", "cannot be changed here")):
        assert main(command + ["--change", change]) == 2 and message in capsys.readouterr().err


def test_a_branch_starts_from_another_runs_checkpoint_with_its_own_recipe_and_leaves_the_source_alone(tmp_path):
    jobs.run_job(tiny_job(kimg=0.016), tmp_path / "source", progress=False, log=lambda _: None)
    source = tmp_path / "source" / "fundus-sg2.run"
    before = {path.name: path.read_bytes() for path in source.iterdir() if path.is_file()}
    lines = []
    branch = jobs.run_job(tiny_job(kimg=0.032, changes={"generator_lr": 0.0005, "discriminator_lr": 0.0005}),
                          tmp_path / "branch", branch_from=source, progress=False, log=lines.append)
    assert branch.finished and branch.kimg == pytest.approx(0.032)
    assert {path.name: path.read_bytes() for path in source.iterdir() if path.is_file()} == before  # only read
    record = json.loads((tmp_path / "branch" / "fundus-sg2.run" / "run.json").read_text())
    assert record["branch"]["from_kimg"] == pytest.approx(0.016) and record["branch"]["from_step"] == 2
    assert record["branch"]["checkpoint_sha256"] == sha256_of(source / "checkpoint.pt")
    assert sorted(line.split(":")[0] for line in record["branch"]["changed"]) == ["training.discriminator_lr",
                                                                                 "training.generator_lr"]
    assert any("branched from" in line and "generator_lr" in line for line in lines)
    provenance = json.loads(branch.weights.with_suffix(".json").read_text())
    assert provenance["branch"]["from"] == str(source) and "--branch-from" in provenance["command"]
    # The branch trained with its own learning rate: the optimiser's state dict carried the source's.
    state = torch.load(tmp_path / "branch" / "fundus-sg2.run" / "checkpoint.pt", weights_only=False)
    lrs = {group["lr"] for group in state["optimizer_generator"]["param_groups"]}
    assert lrs and all(lr < 0.0005 + 1e-12 for lr in lrs)
    # Trained on without the change, the same checkpoint gives other weights: the recipe reached the optimiser.
    plain = jobs.run_job(tiny_job(kimg=0.032), tmp_path / "plain", branch_from=source, progress=False,
                         log=lambda _: None)
    assert sha256_of(plain.weights) != sha256_of(branch.weights)


def test_a_branch_with_another_batch_counts_the_same_images_in_its_own_steps(tmp_path):
    jobs.run_job(tiny_job(kimg=0.016, eval_kimg=0.016), tmp_path / "source", progress=False, log=lambda _: None)
    source = tmp_path / "source" / "fundus-sg2.run"
    before = {path.name: path.read_bytes() for path in source.iterdir() if path.is_file()}
    # 16 images: step 2 at batch 8 is step 1 at batch 16, and the branch trains two more steps of 16 to 48 images.
    branch = jobs.run_job(tiny_job(kimg=0.048, batch_size=16), tmp_path / "branch", branch_from=source,
                          progress=False, log=lambda _: None)
    assert branch.finished and branch.kimg == pytest.approx(0.048)
    assert {path.name: path.read_bytes() for path in source.iterdir() if path.is_file()} == before
    run = tmp_path / "branch" / "fundus-sg2.run"
    record = json.loads((run / "run.json").read_text())
    assert record["branch"]["rebatched"] == {"from_batch": 8, "to_batch": 16, "from_step": 2, "to_step": 1,
                                             "images": 16}
    assert record["branch"]["from_kimg"] == pytest.approx(0.016) and record["branch"]["from_step"] == 1
    assert any(line.startswith("training.batch_size") for line in record["branch"]["changed"])
    # The source's evaluations keep their kimg and take the step of that kimg at the new batch.
    assert [(point["kimg"], point["step"]) for point in record["curve"]] == [(0.0, 0), (0.016, 1)]
    state = torch.load(run / "checkpoint.pt", weights_only=False)
    assert state["step"] == 3 and state["training_config"]["batch_size"] == 16
    # A checkpoint whose images are not a whole number of the new batches is refused, naming it.
    with pytest.raises(jobs.RunMismatch, match=r"checkpoint.pt is at 16 images .* not a whole number of batches of "
                                                r"32"):
        jobs.run_job(tiny_job(kimg=0.064, batch_size=32), tmp_path / "other", branch_from=source, progress=False,
                     log=lambda _: None)
    assert not (tmp_path / "other" / "fundus-sg2.run" / "checkpoint.pt").exists()


def test_a_branch_of_another_generator_or_into_an_existing_run_is_refused(tmp_path):
    jobs.run_job(tiny_job(kimg=0.016), tmp_path / "source", progress=False, log=lambda _: None)
    source = tmp_path / "source" / "fundus-sg2.run"
    with pytest.raises(jobs.RunMismatch, match=r"another generator .*network_seed"):
        jobs.run_job(tiny_job(kimg=0.032, seed=5), tmp_path / "a", branch_from=source, progress=False,
                     log=lambda _: None)
    with pytest.raises(jobs.RunMismatch, match=r"evaluated otherwise .*eval_images"):
        jobs.run_job(tiny_job(kimg=0.032, parameters={**TINY, "EVAL_IMAGES": 16}), tmp_path / "b",
                     branch_from=source, progress=False, log=lambda _: None)
    with pytest.raises(jobs.RunMismatch, match="not a run folder to branch from"):
        jobs.run_job(tiny_job(kimg=0.032), tmp_path / "c", branch_from=tmp_path / "nothing", progress=False,
                     log=lambda _: None)
    with pytest.raises(jobs.RunMismatch, match="holds a run already"):
        jobs.run_job(tiny_job(kimg=0.032), tmp_path / "source", branch_from=source, progress=False,
                     log=lambda _: None)
    assert not (tmp_path / "a").exists() or not any((tmp_path / "a").rglob("checkpoint.pt"))
