"""Retina phantom speed (images/s at 256 and 1024 px, one thread) and memory while streaming a cohort to disk.

Run: ``.venv/bin/python benchmarks/bench_phantom_retina.py [--images 60] [--stream 40 160]``. Targets of the issue:
>= 25 images/s at 256 px and >= 2 images/s at 1024 px on one core, and flat memory while writing to disk.
Timings include building each patient's anatomy (vessel tree, lesions, texture), amortised over the patient's
images (1-4, mean 2.5). Peak RSS is measured in child processes that write N images each: flat memory means the
peak does not grow with N.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time


def images_per_second(size: int, images: int, repeats: int = 2) -> tuple[float, float, int]:
    """(best wall-clock rate, best CPU-time rate, rows) rendering image + masks of fresh cohorts (higher is better)."""
    from anonpaper.data.phantoms.retina import RetinaPhantomCohort, RetinaPhantomConfig

    patients = max(1, int(round(images / 2.5)))
    wall_rates, cpu_rates = [], []
    rows = 0
    for repeat in range(repeats):
        cohort = RetinaPhantomCohort(RetinaPhantomConfig(n_patients=patients, image_size=size, seed=100 + repeat))
        rows = len(cohort)
        wall, cpu = time.perf_counter(), time.process_time()
        for index in range(rows):
            cohort.masks(index)  # renders image, masks and keypoints once
            cohort.image(index)
        wall_rates.append(rows / (time.perf_counter() - wall))
        cpu_rates.append(rows / (time.process_time() - cpu))
    return max(wall_rates), max(cpu_rates), rows


def _memory_mib(field: str) -> float:
    """VmHWM (peak) or VmRSS (current) of this process in MiB, from /proc (reset at exec, unlike ru_maxrss)."""
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def _stream_child(n_images: int, size: int) -> None:
    """Child process: write about n_images rows to a temporary folder; print rows, base and peak RSS, rate."""
    import cv2

    from anonpaper.data.export import write_cohort
    from anonpaper.data.phantoms.retina import RetinaPhantomCohort, RetinaPhantomConfig

    cv2.setNumThreads(1)
    base_mib = _memory_mib("VmRSS")
    cohort = RetinaPhantomCohort(RetinaPhantomConfig(n_patients=max(1, int(round(n_images / 2.5))), image_size=size,
                                                     seed=7))
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        write_cohort(cohort, folder, progress=False)
        elapsed = time.perf_counter() - start
    print(f"{len(cohort)} {base_mib:.1f} {_memory_mib('VmHWM'):.1f} {len(cohort) / elapsed:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=60, help="rows per speed measurement at 256 px")
    parser.add_argument("--images-1024", type=int, default=10, help="rows per speed measurement at 1024 px")
    parser.add_argument("--stream", type=int, nargs="+", default=[40, 160], help="rows written per RSS measurement")
    parser.add_argument("--stream-size", type=int, default=512)
    parser.add_argument("--child", type=int, nargs=2, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _stream_child(*args.child)
        return
    import cv2
    import torch

    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    print("| measurement | value | target |")
    print("|---|---|---|")
    for size, count, target in ((256, args.images, 25.0), (1024, args.images_1024, 2.0)):
        wall, cpu, rows = images_per_second(size, count)
        print(f"| images/s at {size} px, 1 thread (CPU time; wall) | {cpu:.1f}; {wall:.1f} ({rows} rows) "
              f"| >= {target:g} |")
    for count in args.stream:
        output = subprocess.run([sys.executable, __file__, "--child", str(count), str(args.stream_size)],
                                check=True, capture_output=True, text=True).stdout.split()
        rows, base, peak, rate = int(output[0]), float(output[1]), float(output[2]), float(output[3])
        print(f"| peak RSS writing {rows} rows at {args.stream_size} px | {peak:.0f} MiB (after imports "
              f"{base:.0f} MiB; {rate:.1f} rows/s wall) | flat in N |")


if __name__ == "__main__":
    main()
