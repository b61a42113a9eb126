"""Training a shared generator as a job of its own (``anonpaper generators train KIND``), apart from the chapters
that read it.

A job trains generator ``kind`` (:data:`~anonpaper.experiments.generators.config.KINDS`) with the generators
chapter's recipe (:func:`~anonpaper.experiments.generators.pipeline.training_config`, networks from
:func:`~anonpaper.experiments.generators.pipeline.build_networks`) on a phantom population the papers' size
(:mod:`anonpaper.data.population`), for as long as it needs:

* **Chunks.** Training runs in chunks of ``CHECKPOINT_KIMG`` (shortened to fit ``--minutes``), each a call of
  :func:`anonpaper.train.gan.train_gan` that resumes from the run's checkpoint and writes it again at its end
  (atomically). The trainer resumes bit for bit, so the weights do not depend on where the chunks fall: a job
  stopped by ``--minutes``, interrupted, or continued days later from a committed checkpoint ends with the same
  weights as one uninterrupted run, and two runs of the same command from scratch give the same file
  (per processor and thread count).
* **Evaluation** every ``EVAL_KIMG`` (and at 0 kimg) with the chapter's own instruments
  (:func:`~anonpaper.experiments.generators.pipeline.evaluation_instruments`,
  :func:`~anonpaper.experiments.generators.pipeline.comparison_rows`): Frechet distance, KID and k-NN precision /
  recall of the cohort-trained U-Net's features, SWD, the vessel (lung) fraction, the vessel-tree statistics and
  the label distance, against real images of the chapter's cohort, whose patients are not in the population. Each
  point goes into the run's curve; the trainer writes a sample grid at each point.
* **Export** when the target kimg is reached: the EMA generator in float16 with its JSON (StyleGAN config,
  recipe, kimg, seed, population, commit, the curve, training seconds and the command that trains it again) into
  ``weights/`` (:func:`~anonpaper.experiments.generators.weights.export_weights`), which the chapters load with
  :func:`~anonpaper.experiments.generators.pipeline.load_shipped_generator`.

The run folder ``<out>/<kind>.run/`` holds ``checkpoint.pt`` (the trainer's), ``run.json`` (what is trained, the
curve, the training seconds so far and one entry per session: commit, device, processor ISA and threads, the kimg it
covered), ``samples/`` (a grid per evaluation, kept local) and ``latest.png`` (the newest grid); commit it, samples
left out, beside unfinished weights to continue later. A session that computes differently from the last one
(another ISA or thread count) is warned about, since the weights are bit-identical only per processor and thread
count; the run continues.

Under ``torchrun`` every process runs the job; the trainer splits each batch, rank 0 evaluates and writes, and
the chunk boundaries are rank 0's (so a time limit cannot make the processes disagree).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch

from anonpaper.cache import atomic_write_bytes
from anonpaper.data.population import (Population, PopulationSpec, load_population, numpy_avx512,
                                       rendering_libraries)
from anonpaper.experiments.generators.config import KINDS, Config
from anonpaper.experiments.generators.pipeline import (PROJECT_ROOT, build_networks, comparison_rows,
                                                       evaluation_instruments, evaluation_reals, generate,
                                                       to_generator_size, training_config)
from anonpaper.experiments.generators.weights import export_weights
from anonpaper.models.stylegan import StyleGenerator
from anonpaper.runtime import cpu_arithmetic, derive_seed, git_sha
from anonpaper.train.checkpoint import load_checkpoint, pack_history, save_checkpoint
from anonpaper.train.distributed import broadcast_object, init_distributed, is_main_process
from anonpaper.train.gan import train_gan
from anonpaper.train.loop import as_image_tensor

RUN_FORMAT = "anonpaper.generator-run/1"
DEFAULT_EVAL_KIMG = 4.0
# Recipe fields that say how a run is driven, not what it learns: the job sets them per chunk, and the images per
# pass (``batch_gpu``, a memory knob) change only the rounding of the sums.
DRIVING_FIELDS = ("total_steps", "output_dir", "progress", "checkpoint_every", "sample_every", "metrics_every",
                  "log_every", "sample_count", "batch_gpu")
# Chapter parameters that only shape the evaluation curve (a resumed run must keep them: one curve, one protocol).
EVALUATION_FIELDS = ("eval_images", "segmenter_epochs", "classifier_backbone", "classifier_epochs", "retina_patients",
                     "cxr_patients", "vessel_data_root", "tree_min_area", "tree_jpeg_quality", "classifier_augment",
                     "label_jpeg_quality")
# What a run recorded before an evaluation field existed was evaluated with: the vessel-tree statistics counted
# every mask piece, the label classifiers learned undegraded images (the JPEG floors' qualities only add rows, so
# their defaults are kept).
LEGACY_EVALUATION = {"tree_min_area": 0, "tree_jpeg_quality": 90, "classifier_augment": 0.0, "label_jpeg_quality": 90}
LATEST_SAMPLES = "latest.png"  # a copy of the newest sample grid in the run folder
REAL_SET = "real images of the chapter's cohort (patients outside the training population)"

_clock = time.perf_counter  # replaced in tests to simulate a time limit


class RunMismatch(ValueError):
    """A run folder that holds another job than the one asked for (the message names the folder and what
    differs)."""


@dataclass(frozen=True)
class TrainingJob:
    """What ``anonpaper generators train`` trains.

    Attributes:
        kind: Generator kind (``"fundus-sg3t"``, ``"fundus-sg2"``, ``"cxr-sg2"``).
        config: The generators chapter's :class:`Config`: the kind's StyleGAN config, kimg and image size, batch,
            augmentation, seed, checkpoint interval (``CHECKPOINT_KIMG``) and the evaluation's instruments and
            sizes. Its fundus dataset must be the phantom.
        population_patients: Patients of the training population (None:
            :data:`anonpaper.data.population.DEFAULT_PATIENTS`).
        population_seed: The population's own seed.
        eval_kimg: Thousands of images between evaluations (0: no evaluation).
        given: The chapter parameters (field names) set on purpose rather than left at their defaults: a resumed
            run keeps its recorded evaluation settings where they were not given (the defaults may have changed
            since), and refuses to change those given otherwise.
    """

    kind: str
    config: Config = field(default_factory=Config)
    population_patients: int | None = None
    population_seed: int = 0
    eval_kimg: float = DEFAULT_EVAL_KIMG
    given: frozenset = frozenset()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown generator kind {self.kind!r}; expected one of {sorted(KINDS)}")
        if self.config.dataset_name(self.kind) != KINDS[self.kind][0]:
            raise ValueError(f"a training job learns a phantom population; DATASET {self.config.dataset!r} is a real "
                             "copy, which the generators chapter trains on itself (DATA_ROOT)")
        if not (isinstance(self.eval_kimg, (int, float)) and self.eval_kimg >= 0):
            raise ValueError(f"eval_kimg must be a number >= 0, got {self.eval_kimg!r}")
        self.population  # validates the population's patients and seed

    @property
    def population(self) -> PopulationSpec:
        """The training population: the kind's phantom at the cohort side of its generator (>= 64 px)."""
        return PopulationSpec(KINDS[self.kind][0], image_size=self.config.cohort_size_of(self.kind),
                              n_patients=self.population_patients, seed=self.population_seed)

    @property
    def kimg(self) -> float:
        return self.config.kimg(self.kind)

    @property
    def steps(self) -> int:
        """Training steps to the target kimg (global batches)."""
        return self.config.total_steps(self.kind)

    def steps_of(self, kimg: float) -> int:
        """Steps in ``kimg`` thousand images (at least one)."""
        return max(1, int(round(kimg * 1000 / self.config.batch_size)))

    def kimg_of(self, steps: int) -> float:
        return steps * self.config.batch_size / 1000

    def recipe(self) -> dict[str, Any]:
        """The trainer's settings that determine the weights (no step count, folders or intervals)."""
        recipe = dataclasses.asdict(training_config(self.kind, self.config, output_dir=None, progress=False))
        return {name: value for name, value in recipe.items() if name not in DRIVING_FIELDS}

    def identity(self, population_key: str) -> dict[str, Any]:
        """What the trained weights are a function of, besides the kimg: a resumed run must match it."""
        return {"format": RUN_FORMAT, "kind": self.kind,
                "stylegan_config": self.config.stylegan_config(self.kind).to_dict(), "training": self.recipe(),
                "network_seed": self.config.seed, "population": {**self.population.description(),
                                                                  "key": population_key}}

    def evaluation(self) -> dict[str, Any]:
        """The evaluation's settings (a resumed run keeps them, so the curve has one protocol)."""
        return {name: getattr(self.config, name) for name in EVALUATION_FIELDS}

    def command(self) -> str:
        """The command that trains these weights again."""
        config = self.config
        parts = [f"anonpaper generators train {self.kind}", f"--kimg {self.kimg:g}",
                 f"--resolution {config.image_size_of(self.kind)}",
                 f"--stylegan-config {getattr(config, KINDS[self.kind][1])}", f"--seed {config.seed}",
                 f"--batch {config.batch_size}", f"--population-patients {self.population.n_patients}",
                 f"--population-seed {self.population_seed}", f"--eval-kimg {self.eval_kimg:g}",
                 f"--checkpoint-kimg {config.checkpoint_kimg:g}"]
        if config.augment != Config().augment:
            parts.append(f"-p AUGMENT {config.augment!r}")
        for name, value in sorted(((config.generator_changes or {}).get(self.kind) or {}).items()):
            parts.append(shlex.quote(f"--change={name}={json.dumps(value)}"))  # read back by parse_change
        # The evaluation is spelled out whole, so that the command gives the same curve whatever the defaults become.
        parts += [f"-p {name.upper()} {getattr(config, name)!r}" for name in EVALUATION_FIELDS
                  if getattr(config, name) is not None]
        return " ".join(parts)

    def keeping_evaluation(self, recorded: dict[str, Any]) -> tuple[TrainingJob, list[str]]:
        """This job with a run's ``recorded`` evaluation settings where they were not given on purpose.

        A run's curve has one protocol, and a run recorded before a default changed must still resume with the
        command it recorded. Settings that were given (:attr:`given`) are left as asked, for the run's check to
        refuse.

        Returns:
            The job, and one ``"NAME: run's VALUE (default now VALUE)"`` line per setting kept from the run.
        """
        recorded = recorded_evaluation(recorded)
        kept = {name: recorded[name] for name in EVALUATION_FIELDS
                if name in recorded and name not in self.given and recorded[name] != getattr(self.config, name)}
        if not kept:
            return self, []
        notes = [f"{name.upper()}: the run's {value!r} (default now {getattr(self.config, name)!r})"
                 for name, value in kept.items()]
        return dataclasses.replace(self, config=dataclasses.replace(self.config, **kept)), notes


def training_job(kind: str, *, kimg: float | None = None, resolution: int | None = None,
                 stylegan_config: str | None = None, seed: int | None = None, batch_size: int | None = None,
                 checkpoint_kimg: float | None = None, population_patients: int | None = None,
                 population_seed: int = 0, eval_kimg: float = DEFAULT_EVAL_KIMG,
                 parameters: dict[str, Any] | None = None, changes: dict[str, Any] | None = None) -> TrainingJob:
    """A :class:`TrainingJob` from the command line's options: the chapter's defaults (``quick``), with
    ``parameters`` (chapter parameter names, e.g. ``{"EVAL_IMAGES": 100}``) and the named options on top;
    ``changes`` (``--change``, e.g. ``{"generator_lr": 0.001}``) change ``kind``'s StyleGAN config or recipe
    (``GENERATOR_CHANGES`` of ``kind``).

    Raises:
        ValueError: An unknown kind or parameter, an option given twice (named and in ``parameters``), or an
            invalid value (the chapter config's message names it).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown generator kind {kind!r}; expected one of {sorted(KINDS)}")
    _, config_field, kimg_field, _ = KINDS[kind]
    size_field = "image_size" if KINDS[kind][0] == "phantom-retina" else "cxr_image_size"
    known = {item.name for item in dataclasses.fields(Config)}
    values: dict[str, Any] = {}
    for name, value in (parameters or {}).items():
        field_name = name.lower()
        if field_name not in known:
            raise ValueError(f"unknown generators chapter parameter {name!r}; known: "
                             f"{', '.join(sorted(item.upper() for item in known))}")
        values[field_name] = value
    named = {kimg_field: kimg, size_field: resolution, config_field: stylegan_config, "seed": seed,
             "batch_size": batch_size, "checkpoint_kimg": checkpoint_kimg}
    for name, value in named.items():
        if value is None:
            continue
        if name in values:
            raise ValueError(f"{name.upper()} is given twice (as an option and as a parameter)")
        values[name] = value
    if changes:
        if "generator_changes" in values:
            raise ValueError("GENERATOR_CHANGES is given twice (as --change and as a parameter)")
        values["generator_changes"] = {kind: dict(changes)}
    return TrainingJob(kind, Config(**values), population_patients, population_seed, eval_kimg,
                       given=frozenset(values))


# ---------------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------------

class PopulationImages(torch.utils.data.Dataset):
    """A population's memory-mapped images as the trainer's dataset: item ``i`` is float (C, R, R) in [0, 1] at the
    generator's side (read one at a time, so a 256 px population is never copied whole into float32)."""

    def __init__(self, images: np.ndarray, side: int):
        self.images = images if images.shape[1] == side else to_generator_size(np.asarray(images), side)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> torch.Tensor:
        return as_image_tensor(np.asarray(self.images[index:index + 1]))[0]


@dataclass
class JobOutcome:
    """What :func:`run_job` did.

    Attributes:
        kind: Generator kind.
        kimg: Thousands of images trained so far (the checkpoint's).
        target_kimg: The job's target.
        finished: Whether the target was reached (then ``weights`` is the exported file).
        weights: The exported ``.pt`` file, or None.
        run_dir: The run folder (checkpoint, run.json, samples).
        curve: One row per evaluation (kimg, train_seconds, metrics).
        train_seconds: Training wall seconds over every session of the run.
        stopped_by_time: Whether ``minutes`` ended this session before the target.
        population: The training population.
    """

    kind: str
    kimg: float
    target_kimg: float
    finished: bool
    weights: Path | None
    run_dir: Path
    curve: pd.DataFrame
    train_seconds: float
    stopped_by_time: bool
    population: Population

    @property
    def seconds_per_kimg(self) -> float:
        return self.train_seconds / self.kimg if self.kimg else float("nan")


def run_directory(out_dir: str | Path | None, kind: str) -> Path:
    """The run folder of ``kind`` under ``out_dir`` (default: the project's ``weights/``)."""
    return Path(out_dir if out_dir is not None else PROJECT_ROOT / "weights") / f"{kind}.run"


def recorded_evaluation(recorded: dict[str, Any]) -> dict[str, Any]:
    """A run's recorded evaluation settings, with the :data:`LEGACY_EVALUATION` value of each field it predates."""
    return {**LEGACY_EVALUATION, **recorded}


def _differences(expected: Any, found: Any, prefix: str = "") -> list[str]:
    """Leaf paths where two JSON-like values differ (``a.b: expected X, run has Y``)."""
    if isinstance(expected, dict) and isinstance(found, dict):
        return [difference for name in sorted(set(expected) | set(found))
                for difference in _differences(expected.get(name), found.get(name), f"{prefix}{name}.")]
    if expected != found:
        return [f"{prefix.rstrip('.')}: asked {expected!r}, run has {found!r}"]
    return []


POPULATION_KEY = "population.key:"


def only_population_key(differences: list[str]) -> bool:
    """Whether the population's key is all that differs: the same spec and patients, other pixels (what
    ``--rerendered-population`` lets a run train on from, with :func:`population_change` recorded)."""
    return bool(differences) and all(line.startswith(POPULATION_KEY) for line in differences)


def population_change(recorded_identity: dict[str, Any], identity: dict[str, Any], at_kimg: float) -> dict[str, Any]:
    """The ``population_changes`` entry of a run that trains on from ``at_kimg`` on its population as this environment
    renders it: the kimg, both keys, and the libraries and kernels that rendered the new one (copied into the
    exported provenance)."""
    return {"at_kimg": round(float(at_kimg), 3), "from_key": recorded_identity["population"].get("key"),
            "to_key": identity["population"]["key"], "libraries": rendering_libraries(),
            "numpy_avx512": numpy_avx512(), "commit": git_sha()}


def _population_hint(differences: list[str], record: dict[str, Any]) -> str:
    """What to say beside a differing ``population.key``: same spec, other pixels means another renderer.

    The key hashes the population's description, table and first images. When the spec is the same and only the
    key differs, the phantom drew other pixels from the same seeds, which another OpenCV release does; the run's
    sessions name the libraries they rendered with (sessions recorded before they did name none)."""
    if not any(line.startswith(POPULATION_KEY) for line in differences):
        return ""
    recorded = [session for session in record.get("sessions") or [] if session.get("libraries")]
    there = (f"the run's last session rendered with "
             f"{_rendering_text(recorded[-1]['libraries'], recorded[-1].get('numpy_avx512'))}"
             if recorded else "the run's sessions do not record theirs")
    return (f" (the phantom renders these images differently here, with "
            f"{_rendering_text(rendering_libraries(), numpy_avx512())}; {there}: the pixels depend on the OpenCV "
            "release and on NumPy's AVX-512 kernels; continue the run where they match, or pass "
            "--rerendered-population to train on from here on the images as drawn here, recorded in run.json)")


def _rendering_text(libraries: dict[str, Any], avx512: bool | None) -> str:
    kernels = {True: "NumPy's AVX-512 kernels", False: "NumPy's AVX2 kernels"}.get(avx512)
    return ", ".join([f"{name} {version}" for name, version in libraries.items()] + ([kernels] if kernels else []))


def _read_run(run_dir: Path) -> dict | None:
    path = run_dir / "run.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise RunMismatch(f"{path}: unreadable ({error}); delete {run_dir} to start again") from error


def start_branch(job: TrainingJob, run_dir: Path, source: Path, record_of_source: dict[str, Any],
                 identity: dict[str, Any], evaluation: dict[str, Any],
                 rerendered_population: bool = False) -> dict[str, Any]:
    """Start ``run_dir`` as a branch of the run in ``source``, whose ``run.json`` is ``record_of_source`` (see
    :func:`run_job`'s ``branch_from``): copy its checkpoint, and write a ``run.json`` with this job's identity, the
    source's curve, protocols, sessions and training seconds so far, and a ``branch`` entry (source folder, kimg
    and step, the copied checkpoint's SHA-256, the source's identity and what differs from it; with another batch
    size, the checkpoint and curve restated in the new steps by :func:`rebatched_branch`, and a ``rebatched``
    entry). Returns that record. With ``rerendered_population``, the
    source's population may differ in its key alone (:func:`population_change` is recorded).

    Raises:
        RunMismatch: The source differs in more than the training recipe, or in its evaluation, or its checkpoint
            is past the job's target.
    """
    source_identity = record_of_source.get("identity") or {}
    differences = _differences(identity, source_identity)
    fixed = [line for line in differences if not line.startswith("training.")]
    changes = list(record_of_source.get("population_changes") or [])
    if rerendered_population and only_population_key(fixed):
        changes.append(population_change(source_identity, identity, _recorded_kimg(record_of_source)))
        fixed = []
        differences = [line for line in differences if not line.startswith(POPULATION_KEY)]
    if fixed:
        raise RunMismatch(f"{source / 'run.json'} is another generator than the one asked for (a branch may change "
                          "only the training recipe): " + "; ".join(fixed[:8])
                          + _population_hint(fixed, record_of_source))
    protocol = _differences(evaluation, recorded_evaluation(record_of_source.get("evaluation") or {}))
    if protocol:
        raise RunMismatch(f"{source / 'run.json'} was evaluated otherwise (a branch continues its curve, one "
                          "protocol): " + "; ".join(protocol[:8]))
    checkpoint = (source / "checkpoint.pt").read_bytes()
    state = torch.load(io.BytesIO(checkpoint), map_location="cpu", weights_only=False)
    source_step = int(state["step"])
    source_batch = int(state["training_config"]["batch_size"])  # every trainer checkpoint records its recipe
    curve = [point for point in record_of_source.get("curve") or [] if point["step"] <= source_step]
    rebatched = None
    if source_batch != job.config.batch_size:
        state, curve, rebatched = rebatched_branch(state, curve, source_batch, job.config.batch_size,
                                                    source / "checkpoint.pt")
    step = int(state["step"])
    if step > job.steps:
        raise RunMismatch(f"{source / 'checkpoint.pt'} is at {job.kimg_of(step):g} kimg, past the target "
                          f"{job.kimg:g} kimg; ask for more")
    run_dir.mkdir(parents=True, exist_ok=True)
    if rebatched is None:
        atomic_write_bytes(run_dir / "checkpoint.pt", checkpoint)
    else:
        save_checkpoint(run_dir / "checkpoint.pt", state)
    record = {"format": RUN_FORMAT, "identity": identity, "evaluation": evaluation, "curve": curve,
              "protocols": dict(record_of_source.get("protocols") or {}),
              "train_seconds": float(record_of_source.get("train_seconds") or 0.0),
              "sessions": list(record_of_source.get("sessions") or []), "command": job.command(),
              **({"population_changes": changes} if changes else {}),
              "branch": {"from": str(source), "from_kimg": job.kimg_of(step), "from_step": step,
                         "checkpoint_sha256": hashlib.sha256(checkpoint).hexdigest(),
                         "source_command": record_of_source.get("command"), "source_identity": source_identity,
                         "changed": [line.replace("asked", "branch has").replace("run has", "source had")
                                     for line in differences],
                         **({"rebatched": rebatched} if rebatched else {})}}
    atomic_write_bytes(run_dir / "run.json", (json.dumps(record, indent=1, default=str) + "\n").encode())
    return record


def rebatched_branch(state: dict[str, Any], curve: list[dict[str, Any]], source_batch: int, batch: int,
                     path: Path) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """A trainer checkpoint and its run's curve restated for another batch size, for a branch that changes it.

    The trainer counts steps (global batches), so a checkpoint of step ``s`` at batch ``b`` is ``s * b`` images
    into the run: at batch ``batch`` the branch starts at step ``s * b / batch``, which must be a whole number. The
    curve's evaluations keep their kimg and are given the step of that kimg at the new batch (a float where it
    falls between steps). The per-step loss history is left out of the branch's checkpoint (its steps count
    another batch; the source's checkpoint keeps it). Everything else (networks, optimisers, random streams, the
    path-length mean, ADA's state) carries over as it is; the trainer's per-step rules (lazy regularisation
    intervals) and its per-image ones (EMA half-life, augmentation speed) then run at the new batch, as NVIDIA's
    code does when a run is resumed with another ``--batch``.

    Args:
        state: The source's checkpoint (:func:`~anonpaper.train.checkpoint.load_checkpoint`); not modified.
        curve: The source's evaluations up to the checkpoint (``run.json["curve"]``); not modified.
        source_batch: The source run's images per step.
        batch: The branch's images per step (> 0).
        path: The source checkpoint's file, for messages.

    Returns:
        ``(state, curve, rebatched)``: the restated checkpoint and curve, and the record of the change
        (``{"from_batch", "to_batch", "from_step", "to_step", "images"}``).

    Raises:
        RunMismatch: The checkpoint's images are not a whole number of the new batches.
    """
    source_step = int(state["step"])
    images = source_step * source_batch
    if batch <= 0 or images % batch:
        raise RunMismatch(f"{path} is at {images} images (step {source_step} of {source_batch}), not a whole number "
                          f"of batches of {batch}: branch from another checkpoint or choose another --batch")
    step = images // batch
    restated = {**state, "step": step, "history": pack_history([]),
                "training_config": {**state["training_config"], "batch_size": batch}}

    def step_at(kimg: float) -> int | float:
        images_then = round(float(kimg) * 1000)
        return images_then // batch if images_then % batch == 0 else images_then / batch

    curve = [{**point, "step": step_at(point["kimg"])} for point in curve]
    return restated, curve, {"from_batch": source_batch, "to_batch": batch, "from_step": source_step,
                             "to_step": step, "images": images}


def _checkpoint_step(run_dir: Path) -> int:
    state = load_checkpoint(run_dir / "checkpoint.pt")
    return int(state["step"]) if state is not None else 0


def _recorded_kimg(record: dict[str, Any]) -> float:
    """How far a run.json says its run trained: its last session's end, or its last evaluation (older records)."""
    ends = [float(item.get("to_kimg") or 0.0) for item in record.get("sessions") or []]
    ends += [float(point.get("kimg") or 0.0) for point in record.get("curve") or []]
    return max(ends, default=0.0)


def _jsonable(value: Any) -> Any:
    """Round-trip through JSON (tuples become lists), so a fresh identity compares equal to a stored one."""
    return json.loads(json.dumps(value, default=str))


def run_job(job: TrainingJob, out_dir: str | Path | None = None, *, resume: bool = False,
            minutes: float | None = None, progress: bool = True, device: str | None = None,
            batch_gpu: int | None = None, branch_from: str | Path | None = None,
            rerendered_population: bool = False, log: Callable[[str], None] = print) -> JobOutcome:
    """Train ``job`` in chunks with checkpoints and evaluations; export its weights when the target kimg is reached.

    Args:
        job: The :class:`TrainingJob`.
        out_dir: Where the weights go (default: the project's ``weights/``); the run folder is
            ``<out_dir>/<kind>.run``.
        resume: Continue the run in the run folder (its checkpoint, its curve). Without it an existing run folder is
            refused, so a run is never overwritten by accident.
        minutes: Stop after about this many minutes of this session, rendering and evaluations included (at a
            checkpoint; ``resume`` continues); None: no limit.
        progress: Show progress (kimg, s/kimg, ETA) and a line per evaluation.
        device: Training device (None: the config's, else torchrun's or the best available).
        batch_gpu: Images per forward/backward pass of one process (None: its whole share of the batch), to fit
            a large batch in GPU memory; the weights differ from a run without it only by rounding.
        branch_from: Another run folder of the same generator (kind, architecture, network seed, population) to
            start this run from (``--branch-from``): its checkpoint is copied into the new run folder, with its curve
            and sessions, and training continues from there under this job's recipe (e.g. a lower learning rate
            or another R1 gamma, or another batch size: :func:`rebatched_branch`). The source is only read.
            Only for a run folder without a run yet; a branch is
            continued later with ``resume`` alone. The branch's ``run.json`` and exported provenance record the
            source folder, its kimg, the SHA-256 of the checkpoint copied and what the recipe changed.
        rerendered_population: Continue (or branch from) a run whose population this environment renders with
            other pixels (another OpenCV release; the same spec and patients), training on the images as drawn
            here from now on; the run takes the new key (later sessions here resume without the flag) and records
            the change (:func:`population_change`). Without it such a run is refused, naming the libraries.
        log: Where lines go (rank 0 only).

    Returns:
        :class:`JobOutcome`.

    Raises:
        RunMismatch: The run folder holds another job (the message lists what differs), or exists without
            ``resume``, or its checkpoint is past the target kimg, or missing while its ``run.json`` records
            training; or ``branch_from`` is not a run, differs from the job in more than its training recipe or
            in its evaluation, or the run folder holds a run already.
    """
    if minutes is not None and not minutes > 0:
        raise ValueError(f"minutes must be > 0 (or None for no limit), got {minutes!r}")
    start = _clock()
    _, world, default_device = init_distributed()
    main = is_main_process()
    say = log if main else (lambda _: None)
    kind = job.kind
    run_dir = run_directory(out_dir, kind)
    record = _read_run(run_dir)
    source = None
    if branch_from is not None:
        if record is not None:
            raise RunMismatch(f"{run_dir} holds a run already; --branch-from starts a new run folder (continue this "
                              "one with --resume alone, or pass another --out)")
        source = Path(branch_from)
        record_of_source = _read_run(source)
        if record_of_source is None or not (source / "checkpoint.pt").is_file():
            raise RunMismatch(f"{source}: not a run folder to branch from (it needs run.json and checkpoint.pt)")
        job, kept = job.keeping_evaluation(record_of_source.get("evaluation") or {})
        if kept:
            say(f"{kind}: the branch keeps the evaluation settings of {source}: {'; '.join(kept)}")
    if record is not None and resume:
        job, kept = job.keeping_evaluation(record.get("evaluation") or {})
        if kept:
            say(f"{kind}: the run keeps its evaluation settings: {'; '.join(kept)}")
    config = job.config
    device = device or config.device or default_device
    population = load_population(job.population, progress=progress and main)
    identity = _jsonable(job.identity(population.key))
    evaluation = _jsonable(job.evaluation())
    if source is not None:
        record = (start_branch(job, run_dir, source, record_of_source, identity, evaluation, rerendered_population)
                  if main else None)
        record = broadcast_object(record)
        say(f"{kind}: branched from {source} at {record['branch']['from_kimg']:g} kimg; the recipe changes: "
            + ("; ".join(record["branch"]["changed"]) or "nothing"))
        resume = True
    if record is not None and not resume:
        raise RunMismatch(f"{run_dir} holds a run of {kind} already; pass --resume to continue it, or another --out "
                          f"(or delete the folder) to start again")
    if record is None and (run_dir / "checkpoint.pt").exists():
        raise RunMismatch(f"{run_dir} has a checkpoint but no run.json: not a run of this job; delete it or use "
                          "another --out")
    if record is not None:
        record["evaluation"] = recorded_evaluation(record.get("evaluation") or {})  # spelled out from now on
        differences = _differences(identity, record.get("identity")) + _differences(evaluation, record["evaluation"])
        if rerendered_population and only_population_key(differences):
            change = population_change(record["identity"], identity, _recorded_kimg(record))
            record.setdefault("population_changes", []).append(change)
            record["identity"], differences = identity, []  # the key was all that differed
            say(f"{kind}: trains on from {change['at_kimg']:g} kimg on its population as rendered here (key "
                f"{change['from_key']} -> {change['to_key']}; recorded in run.json)")
        if differences:
            raise RunMismatch(f"{run_dir / 'run.json'} is another run than the one asked for: "
                              + "; ".join(differences[:8]) + ("; ..." if len(differences) > 8 else "")
                              + _population_hint(differences, record))
    elif resume:
        say(f"{run_dir}: no run to resume; starting one")
    step = _checkpoint_step(run_dir)
    recorded_kimg = _recorded_kimg(record) if record is not None else 0.0
    if step == 0 and recorded_kimg > 0:
        # Resuming would train from scratch under the old curve: a run folder copied or committed without its
        # checkpoint (or a checkpoint left out to keep a tree small) is refused instead.
        raise RunMismatch(f"{run_dir / 'checkpoint.pt'} is missing, but {run_dir / 'run.json'} records training to "
                          f"{recorded_kimg:g} kimg: put the checkpoint back (a committed one: git checkout "
                          f"COMMIT -- {run_dir / 'checkpoint.pt'}) or delete {run_dir} to start again")
    total = job.steps
    if step > total:
        raise RunMismatch(f"{run_dir / 'checkpoint.pt'} is at {job.kimg_of(step):g} kimg, past the target "
                          f"{job.kimg:g} kimg; ask for at least that many kimg")
    record = record or {"format": RUN_FORMAT, "identity": identity, "evaluation": evaluation, "curve": [],
                        "protocols": {}, "train_seconds": 0.0, "command": job.command()}
    record["curve"] = [point for point in record["curve"] if point["step"] <= step]  # an older checkpoint put back
    record.update(target_kimg=job.kimg, command=job.command())
    session = session_record(device, world, job.kimg_of(step))
    if "sessions" not in record and step > 0:  # a run.json written before sessions were recorded
        record["sessions"] = [{"from_kimg": 0.0, "to_kimg": job.kimg_of(step), "train_seconds": record["train_seconds"],
                               "note": "not recorded: run.json from before sessions were recorded"}]
    sessions = record.setdefault("sessions", [])
    change = arithmetic_change(sessions, session)
    if change:
        say(f"{kind}: {change}")
    sessions.append(session)

    side = config.image_size_of(kind)
    dataset = PopulationImages(population.images, side)
    generator, discriminator = build_networks(kind, config)
    eval_steps = job.steps_of(job.eval_kimg) if job.eval_kimg else 0
    settings = dataclasses.replace(training_config(kind, config, output_dir=str(run_dir), progress=False),
                                   checkpoint_every=0, metrics_every=0, sample_every=eval_steps,
                                   batch_gpu=batch_gpu)
    checkpoint_steps = job.steps_of(config.checkpoint_kimg)
    instruments = None

    def save_record() -> None:
        if main:
            atomic_write_bytes(run_dir / "run.json", (json.dumps(record, indent=1, default=str) + "\n").encode())

    def evaluate_at(at_step: int, network: torch.nn.Module) -> None:
        nonlocal instruments
        if instruments is None:
            say(f"{kind}: evaluation instruments (cohort-trained U-Net and label classifier; cached after the first "
                "run)")
            instruments = (*evaluation_instruments(kind, config, progress), evaluation_reals(kind, config)[0])
        point, protocols = curve_point(job, network, instruments, at_step, record["train_seconds"])
        record["curve"].append(point)
        record["protocols"].update(protocols)
        say(describe_point(kind, point))

    if main:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_record()
        if eval_steps and step == 0 and not record["curve"]:
            untrained, _ = build_networks(kind, config)
            evaluate_at(0, untrained)
            save_record()
    bar = None
    if progress and main:
        from tqdm.auto import tqdm

        bar = tqdm(total=round(job.kimg, 3), initial=round(job.kimg_of(step), 3), unit="kimg",
                   desc=f"train {kind}", bar_format="{l_bar}{bar}| {n:.4g}/{total:g} kimg [{elapsed}{postfix}]")
    seconds_per_step = None
    stopped_by_time = False
    while step < total:
        end = min(total, (step // checkpoint_steps + 1) * checkpoint_steps)
        if eval_steps:
            end = min(end, (step // eval_steps + 1) * eval_steps)
        if minutes is not None:
            left = start + minutes * 60 - _clock()
            if left <= 0:
                end = step
            elif seconds_per_step:
                end = min(end, step + max(1, int(left / seconds_per_step)))
        end = broadcast_object(end)  # rank 0 decides (and every process waits for its writes)
        if end <= step:
            stopped_by_time = True
            break
        tick = _clock()
        result = train_gan(generator, discriminator, dataset, dataclasses.replace(settings, total_steps=end),
                           device=device, resume=True)
        elapsed = _clock() - tick
        seconds_per_step = elapsed / (end - step)
        step = int(result.step)
        record["train_seconds"] += elapsed
        session.update(to_kimg=job.kimg_of(step), train_seconds=round(session["train_seconds"] + elapsed, 3))
        if main:
            if eval_steps and (step % eval_steps == 0 or step == total):
                evaluate_at(step, result.generator_ema)
            grid = run_dir / "samples" / f"step{step:07d}.png"
            if grid.exists():  # the newest grid, committed with the run (samples/ stays local: one per evaluation)
                atomic_write_bytes(run_dir / LATEST_SAMPLES, grid.read_bytes())
            save_record()
        if bar is not None:
            rate = seconds_per_step * 1000 / config.batch_size
            bar.n = round(job.kimg_of(step), 3)
            bar.set_postfix_str(f"{rate:.1f} s/kimg, ETA {_duration(rate * (job.kimg - job.kimg_of(step)))}")
    if bar is not None:
        bar.close()
    weights = None
    if step >= total and main:
        if eval_steps and (not record["curve"] or record["curve"][-1]["step"] != step):
            evaluate_at(step, ema_generator(job, run_dir)[0])  # the last session ended before its evaluation
            save_record()
        weights = export_run(job, run_dir, record, population)
        say(f"{kind}: {job.kimg_of(step):g} kimg, exported {weights} (and {weights.with_suffix('.json').name})")
    elif stopped_by_time:
        say(f"{kind}: stopped at {job.kimg_of(step):g}/{job.kimg:g} kimg after {minutes:g} minutes; "
            f"the checkpoint is in {run_dir}, continue with --resume")
    outcome = JobOutcome(kind, job.kimg_of(step), job.kimg, step >= total, weights, run_dir,
                         pd.DataFrame(record["curve"]), record["train_seconds"], stopped_by_time, population)
    say(f"{kind}: {outcome.kimg:g}/{job.kimg:g} kimg, {outcome.seconds_per_kimg:.1f} s/kimg over "
        f"{outcome.train_seconds / 60:.1f} min of training; run folder {run_dir}"
        + (f"; weights {weights}" if weights else ""))
    return outcome


# What makes two sessions' arithmetic alike: the same floats come out only for the same values of all of these.
ARITHMETIC_FIELDS = ("device", "processes", "cpu_capability", "cpu_caps", "numpy_avx512", "torch_threads", "torch",
                     "libraries")


def session_record(device: Any, processes: int, from_kimg: float) -> dict[str, Any]:
    """What one session of a run records in ``run.json["sessions"]`` (and the exported provenance): when it
    started, the commit, the device, processes and CPU arithmetic (processor, kernel ISA, caps, threads, NumPy's
    AVX-512 kernels), the versions of the libraries that render the phantoms
    (:func:`~anonpaper.data.population.rendering_libraries`), the kimg it started from and reached, and its
    training seconds."""
    return {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": git_sha(),
            "device": str(device), "processes": int(processes), **cpu_arithmetic(),
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__, "numpy_avx512": numpy_avx512(),
            "libraries": rendering_libraries(), "from_kimg": from_kimg, "to_kimg": from_kimg, "train_seconds": 0.0}


def arithmetic_change(sessions: list[dict[str, Any]], session: dict[str, Any]) -> str | None:
    """A warning when ``session`` computes differently from the run's last session (another processor ISA, thread
    count, device, process count, torch or rendering libraries): the run goes on, but its weights are then not
    bit-identical to an uninterrupted run on either machine. None when nothing differs (or no earlier session
    recorded its arithmetic; a field the last session did not record yet is not compared).
    """
    if not sessions or "torch_threads" not in sessions[-1]:
        return None
    last = sessions[-1]
    differences = [f"{name} {last.get(name)!r} -> {session.get(name)!r}" for name in ARITHMETIC_FIELDS
                   if name in last and last.get(name) != session.get(name)]
    if not differences:
        return None
    return ("this session computes differently from the run's last one (" + ", ".join(differences) + "); the "
            "run continues, but its weights will not be bit-identical to an uninterrupted run (both sessions are "
            "recorded in run.json)")


def _duration(seconds: float) -> str:
    seconds = max(0.0, float(seconds))
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def curve_point(job: TrainingJob, generator: torch.nn.Module, instruments: tuple, step: int,
                train_seconds: float) -> tuple[dict[str, Any], dict[str, str]]:
    """One evaluation of ``generator`` at ``step``: ``({"step", "kimg", "train_seconds", metric: value, ...},
    {metric: protocol})`` from :func:`~anonpaper.experiments.generators.pipeline.comparison_rows` (psi 1, the
    chapter's seeded z, so successive points see the same latents)."""
    (segmenter, info), classifier, real = instruments
    kind, config = job.kind, job.config
    network = generator.eval()
    fake = generate(network, len(real), derive_seed(config.seed, "samples", kind))
    rows = comparison_rows(kind, config, segmenter, info["mask"], real, fake, classifier, real_set=REAL_SET)
    point = {"step": int(step), "kimg": job.kimg_of(step), "train_seconds": round(float(train_seconds), 3)}
    point.update({row["metric"]: (None if math.isnan(row["value"]) else row["value"]) for row in rows})
    dice = float(info["val_dice"])
    point["segmenter_dice"], point["segmenter_check"] = (dice if math.isfinite(dice) else None), info["check"]
    return point, {row["metric"]: row["protocol"] for row in rows}


CURVE_SUMMARY = ("FD-{mask}-unet", "precision", "recall", "{mask}_fraction/generated",
                 "vessel_skeleton/length_per_piece/generated", "labels/distance")


def describe_point(kind: str, point: dict[str, Any]) -> str:
    """One line of a curve point's headline numbers."""
    mask = "vessel" if KINDS[kind][0] == "phantom-retina" else "lungs"
    parts = []
    for template in CURVE_SUMMARY:
        name = template.format(mask=mask)
        if point.get(name) is not None:
            parts.append(f"{name.replace('/generated', '')} {point[name]:.3g}")
    return f"{kind} at {point['kimg']:g} kimg: " + ", ".join(parts)


def ema_generator(job: TrainingJob, run_dir: Path) -> tuple[StyleGenerator, int]:
    """The EMA generator of the run's checkpoint (eval mode, CPU) and the checkpoint's step."""
    state = load_checkpoint(run_dir / "checkpoint.pt")
    if state is None:
        raise RunMismatch(f"{run_dir} has no checkpoint.pt")
    generator = StyleGenerator(job.config.stylegan_config(job.kind), seed=0)
    generator.load_state_dict(state["generator_ema"])
    return generator.eval(), int(state["step"])


def export_run(job: TrainingJob, run_dir: Path, record: dict, population: Population) -> Path:
    """Export the run's EMA generator (from its checkpoint) beside the run folder, as ``<kind>.pt`` + ``.json`` with
    the provenance (``record``: the run's ``run.json``)."""
    generator, step = ema_generator(job, run_dir)
    kimg = job.kimg_of(step)
    curve = record["curve"]
    last = {name: value for name, value in (curve[-1].items() if curve else ())
            if isinstance(value, (int, float)) and name not in ("step",)}
    directory = run_dir.parent
    seconds = float(record["train_seconds"])
    branch = record.get("branch")
    provenance = {
        "training": {**record["identity"]["training"], "stylegan_config_name": getattr(job.config,
                                                                                       KINDS[job.kind][1])},
        "population": record["identity"]["population"], "curve": curve, "protocols": record["protocols"],
        "evaluation": record["evaluation"], "training_seconds": round(seconds, 3),
        "s_per_kimg": round(seconds / kimg, 3) if kimg else None, "sessions": record.get("sessions", []),
        # A branch trains again from its source's checkpoint: the source's command to that kimg, then this one.
        "command": job.command() + (f" --branch-from {shlex.quote(branch['from'])}" if branch else ""),
        **({"branch": branch} if branch else {}),
        **({"population_changes": record["population_changes"]} if record.get("population_changes") else {}),
        "chapter_parameters": job.config.parameters()}
    return export_weights(generator, directory, kind=job.kind, kimg=kimg, seed=job.config.seed, metrics=last,
                          data=population.provenance(), provenance=provenance)


def population_for(kind: str, *, resolution: int | None = None, patients: int | None = None, seed: int = 0,
                   progress: bool = True) -> Population:
    """The training population of generator ``kind`` (rendered now when not cached): what ``anonpaper generators
    population KIND`` prepares ahead of training."""
    job = training_job(kind, resolution=resolution, population_patients=patients, population_seed=seed)
    return load_population(job.population, progress=progress)


__all__ = ["DEFAULT_EVAL_KIMG", "JobOutcome", "PopulationImages", "RunMismatch", "TrainingJob",
           "arithmetic_change", "curve_point", "describe_point", "ema_generator", "export_run", "only_population_key",
           "population_change", "population_for", "run_directory", "run_job", "session_record", "start_branch",
           "training_job"]
