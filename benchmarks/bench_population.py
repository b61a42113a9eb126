"""Rendering time of the generators' training populations (:mod:`anonpaper.data.population`), one CPU thread.

For each dataset and image size, renders the population from scratch into a temporary cache (so nothing cached is
reused, and the project's cache is left alone) and appends a CSV row to ``benchmarks/results/population.csv``:
patients, images, wall seconds, CPU seconds of this process (less sensitive to other processes on a shared
machine), images per wall second, and the wall seconds projected to the default population size
(``projected_default_s``, linear in images; equal to the measurement when ``--patients`` is the default).

Usage:
    python benchmarks/bench_population.py                                   # both phantoms, 64 px, full size
    python benchmarks/bench_population.py --datasets phantom-retina --sizes 64 128 --patients 500
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

from anonpaper.data.population import DEFAULT_PATIENTS, PopulationSpec, load_population, population_table  # noqa: E402
from anonpaper.runtime import git_sha  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "population.csv"
FIELDS = ["dataset", "image_size", "patients", "images", "wall_s", "cpu_s", "images_per_s", "default_patients",
          "default_images", "projected_default_s", "threads", "load_average", "device_name", "git_commit",
          "timestamp", "note"]


def measure(dataset: str, size: int, patients: int | None, note: str) -> dict:
    """Render one population into a temporary cache; the CSV row of its timing."""
    spec = PopulationSpec(dataset, image_size=size, n_patients=patients)
    default_images = len(population_table(PopulationSpec(dataset, image_size=size)))
    with tempfile.TemporaryDirectory(prefix="bench-population-") as root:
        wall, cpu = time.perf_counter(), time.process_time()
        population = load_population(spec, root=root, progress=True)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        images = len(population.images)
    rate = images / wall
    return {"dataset": dataset, "image_size": size, "patients": spec.n_patients, "images": images,
            "wall_s": f"{wall:.1f}", "cpu_s": f"{cpu:.1f}", "images_per_s": f"{rate:.1f}",
            "default_patients": DEFAULT_PATIENTS[dataset], "default_images": default_images,
            "projected_default_s": f"{default_images / rate:.1f}", "threads": os.environ.get("OMP_NUM_THREADS"),
            "load_average": f"{os.getloadavg()[0]:.2f}", "device_name": platform.machine(),
            "git_commit": git_sha() or "", "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "note": note}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", default=sorted(DEFAULT_PATIENTS), choices=sorted(DEFAULT_PATIENTS))
    parser.add_argument("--sizes", nargs="+", type=int, default=[64])
    parser.add_argument("--patients", type=int, default=None, help="patients per population (default: the default)")
    parser.add_argument("--note", default="", help="free text stored in the row (e.g. 'shared machine, busy')")
    args = parser.parse_args(argv)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    for dataset in args.datasets:
        for size in args.sizes:
            row = measure(dataset, size, args.patients, args.note)
            print(", ".join(f"{name}={row[name]}" for name in ("dataset", "image_size", "patients", "images", "wall_s",
                                                              "cpu_s", "projected_default_s", "load_average")))
            new = not RESULTS.exists()
            with open(RESULTS, "a", newline="") as stream:
                writer = csv.DictWriter(stream, fieldnames=FIELDS, lineterminator="\n")
                if new:
                    writer.writeheader()
                writer.writerow(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
