"""Generator training populations: phantom patients the papers' size, drawn apart from every chapter's cohorts,
rendered once into a memory-mapped array.

Paper 1 trained its StyleGAN3 on ODIR-5K's 7,000 training images, k-SALSA on EyePACS and GMIA on tens of thousands of
chest X-rays. The phantoms cost only rendering time, so the shared generators learn a population of that size
(default: 3,000 fundus patients, 7,438 images at seed 0; 1,000 chest X-ray patients, 7,735 images) instead of a
chapter's few hundred.

Disjoint from the chapters, by construction. A phantom patient is a function of the cohort's master seed and the
patient's index (``derive_seed(seed, "retina-patient", index)``; the chest X-ray phantom likewise). A population's
master seed is drawn in its own stream, :func:`population_seed`: a hash of the population's seed, the dataset and
:data:`NAMESPACE`, placed in ``[2**62, 2**63)``, a range no chapter cohort seed comes near (chapters use their
``SEED``; GMIA derives its cohort seed below ``2**31``). Its patient and image ids carry the prefix
:data:`ID_PREFIX`, which no phantom cohort writes, so a population row can never be mistaken for a chapter's.

Stored once. :func:`load_population` renders every image into ``$ANONPAPER_CACHE/generator-populations/<name>/
images.npy`` (uint8 (N, H, W[, C])) and opens it memory-mapped, so a 256 px population (1.5 GB) is not read into
memory. The folder's name holds a key of the population's description, its table and the pixels of its first
images (the phantom code's output, not its source text: editing a docstring does not regenerate it, changing how
a retina is drawn does, and so does another OpenCV release: the record names the :data:`RENDERING_LIBRARIES`).
Rendering is resumable and atomic: images go into ``images.npy.partial`` with a progress file updated after each
flushed block, an interrupted run continues from the last block, and only a complete population
(``population.json``, written last) is ever opened. Two processes that ask for the same population at once (two
jobs, or torchrun's ranks) take turns on a file lock: one renders, the other then opens.

Example:
    >>> spec = PopulationSpec("phantom-retina", image_size=64, n_patients=2, seed=0)
    >>> bool(population_table(spec)["patient_id"].str.startswith(ID_PREFIX).all())
    True
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from anonpaper.cache import atomic_write_bytes, file_sha256
from anonpaper.data.cohort import Cohort
from anonpaper.data.registry import load_cohort
from anonpaper.runtime import cache_dir, content_hash, derive_seed, versions

NAMESPACE = "generator-population"
ID_PREFIX = "gp-"
SEED_FLOOR = 2 ** 62
CACHE_FOLDER = "generator-populations"
FORMAT = "anonpaper.generator-population/1"
# Patients per phantom (defaults): the image counts they give are recorded in the population and checked by tests.
DEFAULT_PATIENTS = {"phantom-retina": 3000, "phantom-cxr": 1000}
PROBE_IMAGES = 4  # first images whose pixels enter the key
# Libraries whose version decides the phantoms' pixels for given seeds: OpenCV draws the anti-aliased vessels, discs
# and lesions and blurs them (5.0.0.93 and 5.1.0.95 render the same retina differently), NumPy draws the parameters.
RENDERING_LIBRARIES = ("opencv-python-headless", "numpy")
BLOCK = 64  # images rendered between flushes of the partial array


def population_seed(seed: int, dataset: str) -> int:
    """The phantom master seed of population ``seed`` of ``dataset``: its own stream, in ``[2**62, 2**63)``.

    Example:
        >>> population_seed(0, "phantom-retina") >= SEED_FLOOR
        True
    """
    return SEED_FLOOR + derive_seed(int(seed), NAMESPACE, dataset) % SEED_FLOOR


def is_population_seed(seed: int) -> bool:
    """Whether a phantom master seed lies in the populations' range (a chapter cohort seed must not)."""
    return int(seed) >= SEED_FLOOR


@dataclass(frozen=True)
class PopulationSpec:
    """What a generator training population is.

    Attributes:
        dataset: ``"phantom-retina"`` or ``"phantom-cxr"``.
        image_size: Square side in pixels the phantom renders at: a power of two in 64..512.
        n_patients: Patients (None: :data:`DEFAULT_PATIENTS` of the dataset); every image of every patient is a
            training image.
        seed: The population's own seed (its phantom master seed is :func:`population_seed` of it).
    """

    dataset: str
    image_size: int = 64
    n_patients: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.dataset not in DEFAULT_PATIENTS:
            raise ValueError(f"population dataset must be one of {sorted(DEFAULT_PATIENTS)}, got {self.dataset!r}")
        size = self.image_size
        if not (isinstance(size, (int, np.integer)) and 64 <= size <= 512 and not size & (size - 1)):
            raise ValueError(f"population image_size must be a power of two in 64..512, got {size!r}")
        if self.n_patients is None:
            object.__setattr__(self, "n_patients", DEFAULT_PATIENTS[self.dataset])
        if not (isinstance(self.n_patients, (int, np.integer)) and self.n_patients >= 1):
            raise ValueError(f"population n_patients must be a positive integer, got {self.n_patients!r}")
        if not (isinstance(self.seed, (int, np.integer)) and self.seed >= 0):
            raise ValueError(f"population seed must be a non-negative integer, got {self.seed!r}")

    @property
    def phantom_seed(self) -> int:
        """The phantom's master seed (:func:`population_seed`)."""
        return population_seed(self.seed, self.dataset)

    def phantom_options(self) -> dict[str, Any]:
        """``load_cohort`` options of the phantom the population renders (its defaults otherwise)."""
        return {"n_patients": int(self.n_patients), "image_size": int(self.image_size), "seed": self.phantom_seed}

    def description(self) -> dict[str, Any]:
        """The spec and the derived phantom options, for keys and provenance."""
        return {"format": FORMAT, **asdict(self), "namespace": NAMESPACE, "phantom": self.phantom_options()}


def population_cohort(spec: PopulationSpec) -> Cohort:
    """The phantom cohort the population renders, its patient and image ids prefixed with :data:`ID_PREFIX`.

    The phantom's own ``split`` column is kept but means nothing here: every image is a training image.
    """
    cohort = load_cohort(spec.dataset, **spec.phantom_options())
    table = cohort.table.copy()
    for column in ("patient_id", "image_id"):
        table[column] = ID_PREFIX + table[column].astype(str)
    # Renders key on the row's own seeds and ids; both id columns are renamed alike, and the chest X-ray phantom
    # reads the patient index from the id's tail, which the prefix leaves alone.
    cohort.table = table
    return cohort


def population_table(spec: PopulationSpec) -> pd.DataFrame:
    """The population's table (one row per image; see the phantom's cohort table), without rendering."""
    return population_cohort(spec).table


@dataclass
class Population:
    """A rendered population.

    Attributes:
        spec: Its :class:`PopulationSpec`.
        images: uint8 (N, H, W, 3) or (N, H, W), memory-mapped read-only.
        table: One row per image (ids prefixed with :data:`ID_PREFIX`, labels, phantom parameters).
        directory: Its folder in the cache.
        record: The ``population.json`` record (description, key, counts, rendering seconds, SHA-256 of the array).
    """

    spec: PopulationSpec
    images: np.ndarray
    table: pd.DataFrame
    directory: Path
    record: dict[str, Any]

    @property
    def key(self) -> str:
        return self.record["key"]

    def provenance(self) -> dict[str, Any]:
        """What a model trained on it records: dataset, spec, phantom seed, image and patient counts, key, hash."""
        return {"dataset": self.spec.dataset, "population": {
            **asdict(self.spec), "phantom_seed": self.spec.phantom_seed, "namespace": NAMESPACE,
            "images": int(len(self.images)), "patients": int(self.table["patient_id"].nunique()),
            "key": self.key, "images_sha256": self.record["images_sha256"]}}


def numpy_avx512() -> bool | None:
    """Whether NumPy dispatches to its AVX-512 kernels here (None off x86 or where NumPy does not say).

    Its AVX-512 ``exp`` and friends differ from the AVX2 ones in the last bit, which reaches the phantoms' parameter
    tables (and so a population's key) though not, in the images measured, their pixels. It follows
    ``NPY_DISABLE_CPU_FEATURES`` (``"X86_V4 AVX512_ICL"`` gives an AVX-512 processor the AVX2 kernels).
    """
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:  # NumPy 1.x
        try:
            from numpy.core._multiarray_umath import __cpu_features__ as features
        except ImportError:
            return None
    for name in ("X86_V4", "AVX512_SKX"):  # NumPy >= 2.4 groups the AVX-512 kernels under X86_V4
        if name in features:
            return bool(features[name])
    return None


def rendering_libraries() -> dict[str, str | None]:
    """Versions of :data:`RENDERING_LIBRARIES` in this environment (None for one not installed).

    >>> sorted(rendering_libraries()) == sorted(RENDERING_LIBRARIES)
    True
    """
    found = versions()
    return {name: found.get(name) for name in RENDERING_LIBRARIES}


def population_key(spec: PopulationSpec, cohort: Cohort | None = None) -> str:
    """Key of the population: its description, its table and the pixels of its first :data:`PROBE_IMAGES` images."""
    cohort = cohort if cohort is not None else population_cohort(spec)
    table = cohort.table
    probe = [cohort.image(index) for index in range(min(PROBE_IMAGES, len(cohort)))]
    pixels = hashlib.sha256(b"".join(np.ascontiguousarray(image).tobytes() for image in probe)).hexdigest()
    return content_hash(spec.description(), table.to_csv(index=False), pixels)


def population_directory(spec: PopulationSpec, key: str, root: str | Path | None = None) -> Path:
    """Folder of a population in the cache (``root``: default ``$ANONPAPER_CACHE``)."""
    name = f"{spec.dataset}-{spec.image_size}px-{spec.n_patients}p-seed{spec.seed}-{key}"
    return Path(root or cache_dir()) / CACHE_FOLDER / name


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock on ``path`` (POSIX ``flock``; elsewhere no lock) for the block's duration."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            import fcntl
        except ImportError:  # not POSIX: concurrent renders of one population are the caller's concern
            yield
            return
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _open_complete(spec: PopulationSpec, directory: Path) -> Population | None:
    """The population in ``directory`` when it is complete and its array has the recorded shape, else None."""
    record_path, array_path = directory / "population.json", directory / "images.npy"
    if not record_path.is_file() or not array_path.is_file():
        return None
    record = json.loads(record_path.read_text())
    images = np.load(array_path, mmap_mode="r")
    if list(images.shape) != record["shape"] or images.dtype != np.uint8:
        raise ValueError(f"{array_path}: shape {images.shape} / dtype {images.dtype} differ from "
                         f"{record_path.name}'s {record['shape']} uint8; delete {directory} to render it again")
    table = pd.read_csv(directory / "table.csv", dtype={"patient_id": str, "image_id": str})
    return Population(spec, images, table, directory, record)


def load_population(spec: PopulationSpec, *, root: str | Path | None = None, progress: bool = True,
                    render: bool = True) -> Population:
    """The rendered population of ``spec``: opened from the cache, or rendered now (resuming a partial render).

    Args:
        spec: The population.
        root: Cache root (default ``$ANONPAPER_CACHE``, see :func:`anonpaper.runtime.cache_dir`).
        progress: Show a progress bar (images rendered, ETA).
        render: Render when it is not cached (False: raise ``LookupError``).

    Returns:
        :class:`Population` with its images memory-mapped.

    Raises:
        LookupError: Not cached and ``render=False``.
        ValueError: A cached array that does not match its record (the message names the folder to delete).
    """
    cohort = population_cohort(spec)
    key = population_key(spec, cohort)
    directory = population_directory(spec, key, root)
    found = _open_complete(spec, directory)
    if found is not None:
        return found
    if not render:
        raise LookupError(f"population {spec} is not rendered yet (expected in {directory})")
    with _locked(directory / ".lock"):
        found = _open_complete(spec, directory)  # rendered by another process while this one waited
        if found is not None:
            return found
        _render(cohort, spec, key, directory, progress)
    return _open_complete(spec, directory)


def _render(cohort: Cohort, spec: PopulationSpec, key: str, directory: Path, progress: bool) -> None:
    """Render every image of ``cohort`` into ``directory`` (resumable; see the module docstring)."""
    count = len(cohort)
    first = cohort.image(0)
    shape = (count, *first.shape)
    partial, state_path = directory / "images.npy.partial", directory / "progress.json"
    state = json.loads(state_path.read_text()) if state_path.is_file() and partial.is_file() else None
    if state is not None and (state.get("key") != key or state.get("shape") != list(shape)):
        state = None  # another population's leftovers (cannot happen with the key in the folder name): start over
    if state is None:
        images = np.lib.format.open_memmap(partial, mode="w+", dtype=np.uint8, shape=shape)
        state = {"key": key, "shape": list(shape), "done": 0, "seconds": 0.0}
    else:
        images = np.lib.format.open_memmap(partial, mode="r+")
    done = int(state["done"])
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=count, initial=done, unit="img", desc=f"rendering {spec.dataset} population "
                                                                f"({spec.n_patients} patients, {spec.image_size} px)")
    tick = time.perf_counter()
    while done < count:
        stop = min(count, done + BLOCK)
        for index in range(done, stop):
            images[index] = cohort.image(index)
        images.flush()
        done = stop
        elapsed = state["seconds"] + time.perf_counter() - tick
        # The progress file moves only after the block is flushed: a crash loses at most one block, never trusts
        # unwritten rows.
        atomic_write_bytes(state_path, json.dumps({**state, "done": done, "seconds": elapsed}).encode())
        if bar is not None:
            bar.update(stop - bar.n)
    if bar is not None:
        bar.close()
    seconds = state["seconds"] + time.perf_counter() - tick
    del images
    array_path = directory / "images.npy"
    os.replace(partial, array_path)
    atomic_write_bytes(directory / "table.csv", cohort.table.to_csv(index=False).encode())
    record = {"format": FORMAT, "key": key, "description": spec.description(), "shape": list(shape),
              "images": count, "patients": int(cohort.table["patient_id"].nunique()),
              "render_seconds": round(seconds, 3), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
              "libraries": rendering_libraries(), "numpy_avx512": numpy_avx512(),
              "images_sha256": file_sha256(array_path)}
    atomic_write_bytes(directory / "population.json", (json.dumps(record, indent=2) + "\n").encode())
    state_path.unlink(missing_ok=True)
