"""What the project ships in ``weights/`` holds together: each weights file verifies against its JSON and draws
images, each records the command that trains it again, and each unfinished run resumes as the same run with the
command it recorded (so a change to a config or recipe default that would make ``--resume`` refuse a committed run
fails here first; a run keeps its own evaluation settings). Parametrized over what is shipped; nothing shipped, nothing to check."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest
import torch

from anonpaper.cli import build_parser, generators_train_job
from anonpaper.experiments.generators.job import recorded_evaluation
from anonpaper.experiments.generators.pipeline import generate
from anonpaper.experiments.generators.weights import read_weights
from anonpaper.train.checkpoint import load_checkpoint

pytestmark = pytest.mark.unit

WEIGHTS = Path(__file__).resolve().parents[1] / "weights"
# The shipped weights, and the weights candidates exported when they reached their kimg (kept as their record).
SHIPPED = sorted(WEIGHTS.glob("*.pt")) + sorted(WEIGHTS.glob("candidates/*/*.pt"))
# The shipped runs, and the candidates' runs still training (weights/candidates/NAME/KIND.run, committed so that
# training goes on in a later session); a finished candidate's run folder may keep its record without the checkpoint.
RUNS = sorted([path for path in WEIGHTS.glob("*.run") if path.is_dir()]
              + [path for path in WEIGHTS.glob("candidates/*/*.run") if (path / "checkpoint.pt").is_file()])
FINISHED_CANDIDATES = sorted(path for path in WEIGHTS.glob("candidates/*/*.run")
                             if path.is_dir() and not (path / "checkpoint.pt").exists())
#: What the GPU machines are sent: a copy of the tracked tree, refused above this size.
TRAVELLING_TREE_LIMIT = 64 * 2 ** 20


def job_of(command: str):
    """The training job a recorded ``anonpaper generators train ...`` command asks for."""
    argv = shlex.split(command)
    assert argv[:3] == ["anonpaper", "generators", "train"], command
    return generators_train_job(build_parser().parse_args(argv[1:]))


@pytest.mark.parametrize("weights", SHIPPED, ids=lambda path: path.name)
def test_shipped_weights_verify_draw_images_and_name_the_command_that_trains_them(weights):
    kind = weights.stem
    generator, record = read_weights(weights, kind)  # SHA-256, format, kind, config against the state dict
    config = generator.config
    images = generate(generator, 2, seed=0)
    assert images.shape == (2, config.image_channels, config.resolution, config.resolution)
    assert torch.isfinite(images).all()
    assert record["curve"] and record["curve"][-1]["kimg"] == pytest.approx(record["kimg"])
    assert record["sessions"] and record["sessions"][-1]["to_kimg"] == pytest.approx(record["kimg"])
    job = job_of(record["command"])
    assert job.kimg == pytest.approx(record["kimg"])
    assert job.config.stylegan_config(kind).to_dict() == record["stylegan_config"]
    training = {name: value for name, value in record["training"].items() if name != "stylegan_config_name"}
    assert json.loads(json.dumps(job.recipe())) == training
    assert {**job.population.description(), "key": record["population"]["key"]} == record["population"]


@pytest.mark.parametrize("run_dir", RUNS, ids=lambda path: str(path.relative_to(WEIGHTS)))
def test_a_shipped_run_resumes_as_the_same_run_with_its_recorded_command(run_dir):
    record = json.loads((run_dir / "run.json").read_text())
    job, _ = job_of(record["command"]).keeping_evaluation(record["evaluation"])  # as --resume does
    identity = json.loads(json.dumps(job.identity(record["identity"]["population"]["key"])))
    assert identity == record["identity"]
    assert json.loads(json.dumps(job.evaluation())) == recorded_evaluation(record["evaluation"])
    state = load_checkpoint(run_dir / "checkpoint.pt")
    kimg = job.kimg_of(int(state["step"]))
    assert record["sessions"][-1]["to_kimg"] == pytest.approx(kimg)
    assert all(point["kimg"] <= kimg + 1e-9 for point in record["curve"])
    assert sum(session["train_seconds"] for session in record["sessions"]) == pytest.approx(
        record["train_seconds"], abs=1.0)
    assert kimg < job.kimg or (run_dir.parent / f"{run_dir.stem}.pt").exists()  # finished runs have exported


@pytest.mark.parametrize("run_dir", FINISHED_CANDIDATES, ids=lambda path: str(path.relative_to(WEIGHTS)))
def test_a_finished_candidate_without_its_checkpoint_keeps_its_exported_weights_and_record(run_dir):
    record = json.loads((run_dir / "run.json").read_text())
    exported = json.loads((run_dir.parent / f"{run_dir.stem}.json").read_text())
    assert (run_dir.parent / f"{run_dir.stem}.pt").is_file()
    assert record["sessions"][-1]["to_kimg"] == pytest.approx(exported["kimg"]) == pytest.approx(
        job_of(record["command"]).kimg)
    assert record["curve"] == exported["curve"]


def test_the_tracked_tree_fits_what_a_gpu_machine_is_sent():
    """Checkpoints committed to resume a run grow the tree that the GPU check travels in; past the limit no GPU
    session could start from this project."""
    root = WEIGHTS.parent
    listing = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=False)
    if listing.returncode != 0:
        pytest.skip("not a git checkout")
    files = [root / name for name in listing.stdout.decode().split("\0") if name]
    sizes = {path: path.stat().st_size for path in files if path.is_file()}
    largest = sorted(sizes, key=sizes.get, reverse=True)[:3]
    assert sum(sizes.values()) < TRAVELLING_TREE_LIMIT, (
        f"tracked files total {sum(sizes.values()) / 2 ** 20:.1f} MiB, over the {TRAVELLING_TREE_LIMIT / 2 ** 20:g} "
        f"MiB a GPU machine is sent; largest: " + ", ".join(f"{path.relative_to(root)} "
                                                           f"({sizes[path] / 2 ** 20:.1f} MiB)" for path in largest))
