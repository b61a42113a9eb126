"""Throughput of Snow and VS-Snow on one CPU thread (the issue's targets: Snow >= 2,000 images/s and VS-Snow
>= 500 images/s on 256 x 256 RGB uint8 images in batches of 64).

Run: ``.venv/bin/python benchmarks/bench_snow.py [--batch 64] [--size 256] [--repeats 7]``. Prints one line per
configuration: the median wall time and the median process CPU time per batch (of ``--repeats`` timed calls after
one warm-up call) and the matching images per second; on a shared machine the CPU-time column is the one-core cost.
VS-Snow uses synthetic vessel trees (random branching polylines, 1-3 px wide, about 10 % of the pixels, like fundus
vessel masks at 256 px), because its cost grows with the number of vessel pixels replaced.
"""

from __future__ import annotations

import argparse
import statistics
import time

import cv2
import numpy as np
import torch

from anonpaper.methods.snow import snow, vs_snow


def synthetic_vessel_masks(batch: int, size: int, seed: int, target_fraction: float = 0.10) -> torch.Tensor:
    """bool (batch, size, size) masks of random branching polylines covering about ``target_fraction`` of pixels."""
    rng = np.random.default_rng(seed)
    masks = np.zeros((batch, size, size), dtype=np.uint8)
    for index in range(batch):
        canvas = masks[index]
        while canvas.mean() < target_fraction:
            point = rng.uniform(0.3, 0.7, size=2) * size
            angle = rng.uniform(0, 2 * np.pi)
            thickness = int(rng.integers(1, 4))
            for _ in range(int(rng.integers(10, 30))):
                angle += rng.normal(0, 0.3)
                step = size / 40 * np.array([np.cos(angle), np.sin(angle)])
                nxt = point + step
                cv2.line(canvas, tuple(int(v) for v in point), tuple(int(v) for v in nxt), 1, thickness)
                point = nxt
    return torch.from_numpy(masks.astype(bool))


def time_call(function, repeats: int) -> tuple[float, float]:
    """Median wall time and median process CPU time of ``function()`` in seconds over ``repeats`` calls, after one
    warm-up call. With one thread, CPU time is the one-core cost even when other processes share the machine."""
    function()
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        function()
        cpus.append(time.process_time() - cpu)
        walls.append(time.perf_counter() - wall)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)

    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (args.batch, 3, args.size, args.size), dtype=torch.uint8, generator=generator)
    images_float = images.float() / 255
    vessels = synthetic_vessel_masks(args.batch, args.size, seed=0)
    means = [120.0, 64.0, 32.0]
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, batch {args.batch}, "
          f"{args.size}x{args.size} RGB, vessel fraction {vessels.float().mean():.3f}")

    configurations = []
    for p in (0.1, 0.3, 0.5):
        configurations.append((f"snow      p={p} uint8 bernoulli per_channel",
                               lambda p=p: snow(images, p, means, seed=1)))
    configurations += [
        ("snow      p=0.3 uint8 bernoulli per_location",
         lambda: snow(images, 0.3, means, seed=1, mask_mode="per_location")),
        ("snow      p=0.3 uint8 exact per_channel", lambda: snow(images, 0.3, means, seed=1, sampling="exact")),
        ("snow      p=0.3 float32 bernoulli per_channel",
         lambda: snow(images_float, 0.3, [m / 255 for m in means], seed=1)),
    ]
    for p in (0.1, 0.3, 0.5):
        configurations.append((f"vs-snow   p={p} uint8 bernoulli window 5",
                               lambda p=p: vs_snow(images, vessels, p, seed=1)))
    configurations += [
        ("vs-snow   p=0.3 uint8 exact window 5", lambda: vs_snow(images, vessels, 0.3, seed=1, sampling="exact")),
        ("vs-snow   p=0.3 float32 bernoulli window 5", lambda: vs_snow(images_float, vessels, 0.3, seed=1)),
    ]
    print(f"{'configuration':<48} {'wall ms/batch':>14} {'images/s':>9} {'cpu ms/batch':>13} {'images/s':>9}")
    for name, function in configurations:
        wall, cpu = time_call(function, args.repeats)
        print(f"{name:<48} {wall * 1000:14.1f} {args.batch / wall:9.0f} {cpu * 1000:13.1f} {args.batch / cpu:9.0f}")


if __name__ == "__main__":
    main()
