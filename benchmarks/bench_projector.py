"""Speed of the W+ projector (the StyleGAN2-ADA recipe the GAN chapters invert real images with) per generator
config: milliseconds and GFLOP per image and step.

The vascular and trade-off chapters project real fundus images into W+ with the generator's noise maps optimised
too (``--modes noise``), k-SALSA without them, so that the code alone carries the image (``--modes codes``); both
use :func:`anonpaper.models.stylegan.projector.project` with the pixel + Laplacian-pyramid distance and 2,000 mapped
latents for the mean w. What a chapter's projector stage costs with another generator is therefore set by these
rates, and comparing two configs on one machine tells what replacing the shipped generator by a wider one would
cost the chapters' quick budgets.

Generators have random weights (seed 0): speed does not depend on training. The targets are random images in
[-1, 1]. For each (config, mode, batch) the projector runs twice, at ``--steps`` and at ``2 * --steps``; the
difference of the two times over ``steps * batch`` is the cost of one image and step, free of the fixed cost (the
w statistics, the first and last synthesis). Times are wall seconds (a chapter's budget is wall time) and CPU
seconds of this process (``time.process_time``; less disturbed by other processes on a shared machine, and on one
thread the work done). The work per image-step is counted once with :class:`torch.utils.flop_counter.FlopCounterMode`
(one step's operations: the generator's forward, the distance and the backward to the latents and noise maps; the
generator's weights get no gradient). Runs are interleaved over ``--rounds`` rounds and the best kept.

``projected_minutes`` is what projecting ``--images`` images for ``--projector-steps`` steps takes at the measured
wall rate (defaults: the vascular chapter's quick real images and projector steps).

One CSV row per (config, mode, batch) is appended to ``benchmarks/results/projector.csv`` with the thread count,
processor, kernel ISA, torch version and git commit.

Usage:
    python benchmarks/bench_projector.py                                    # sg2-cpu64@128 and sg2-cpu128, 1 thread
    python benchmarks/bench_projector.py --threads 2 --modes noise codes --batches 8 16
    python benchmarks/bench_projector.py --configs sg2-tiny@64 --steps 2 --rounds 1 --no-write
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from bench_stylegan import BenchmarkError, parse_config

from anonpaper.models.stylegan import StyleGenerator
from anonpaper.models.stylegan.projector import laplacian_pyramid_distance, project
from anonpaper.runner.studies import study_config
from anonpaper.runtime import cpu_arithmetic, git_sha

RESULTS = Path(__file__).resolve().parent / "results" / "projector.csv"
FIELDS = ("config", "resolution", "mode", "batch", "steps", "ms_per_image_step", "ms_per_image_step_cpu",
          "gflop_per_image_step", "fixed_s", "images", "projector_steps", "projected_minutes", "threads",
          "processor", "cpu_capability", "torch", "git_commit", "rounds", "timestamp")
# What each mode optimises besides the W+ code, as the chapters call the projector.
MODES = {"noise": True, "codes": False}
W_AVG_SAMPLES = 2000  # the chapters' (vascular project_real, k-SALSA invert)


def timed_run(generator: StyleGenerator, targets: torch.Tensor, steps: int, optimize_noise: bool) -> tuple[float,
                                                                                                           float]:
    """(wall seconds, CPU seconds) of one projection of ``targets`` for ``steps`` steps."""
    wall, cpu = time.perf_counter(), time.process_time()
    project(generator, targets, space="w+", num_steps=steps, optimize_noise=optimize_noise,
            w_avg_samples=W_AVG_SAMPLES, seed=0)
    return time.perf_counter() - wall, time.process_time() - cpu


def flop_per_image_step(generator: StyleGenerator, targets: torch.Tensor, optimize_noise: bool) -> float:
    """Floating-point operations of one projector step per image: the synthesis from W+ (with per-image noise
    maps when ``optimize_noise``), the pixel + pyramid distance, and the backward to the code and noise maps (as in
    :func:`project`; the exploration noise, the Adam update and the noise penalty are left out, a few operations
    per latent)."""
    batch = len(targets)
    ws = generator.w_avg.detach().expand(batch, generator.num_ws, -1).clone().requires_grad_(True)
    noise_maps = None
    if optimize_noise:
        noise_maps = {name: torch.randn(batch, 1, *buffer.shape).requires_grad_(True)
                      for name, buffer in generator.synthesis_network.noise_buffers().items()}
    counter = FlopCounterMode(display=False)
    with counter:
        images = generator.synthesis(ws, noise_mode="const", noise_inputs=noise_maps)
        laplacian_pyramid_distance(images, targets).sum().backward()
    return counter.get_total_flops() / batch


def measure(configs: list[str], modes: list[str], batches: list[int], steps: int, rounds: int, images: int,
            projector_steps: int) -> list[dict]:
    """One row per (config, mode, batch) (see the module docstring), timed on this process's thread count.

    Raises:
        ValueError: A count under 1 or an unknown mode (names it).
        BenchmarkError: An unknown or malformed config name.
    """
    for name, value in (("steps", steps), ("rounds", rounds), ("images", images),
                        ("projector-steps", projector_steps)):
        if value < 1:
            raise ValueError(f"--{name} must be at least 1, got {value}")
    if not batches or min(batches) < 1:
        raise ValueError(f"--batches must be positive, got {batches}")
    unknown = [mode for mode in modes if mode not in MODES]
    if unknown or not modes:
        raise ValueError(f"--modes must be some of {sorted(MODES)}, got {modes}")
    generators = {name: StyleGenerator(parse_config(name), seed=0).eval().requires_grad_(False) for name in configs}
    if any(not generators[name].has_noise_inputs for name in configs) and "noise" in modes:
        raise BenchmarkError("mode 'noise' optimises noise maps, which a StyleGAN3 does not have; time it with "
                             "--modes codes")
    cases = [(name, mode, batch) for name in configs for mode in modes for batch in sorted(set(batches))]
    targets = {}
    for name, generator in generators.items():
        shape = (max(batches), generator.image_channels, generator.resolution, generator.resolution)
        targets[name] = torch.rand(shape, generator=torch.Generator().manual_seed(0)) * 2 - 1
        timed_run(generator, targets[name][:min(batches)], 1, False)  # warm-up: allocations, kernel selection
    arithmetic = cpu_arithmetic()
    print(f"{arithmetic['processor']} ({arithmetic['cpu_capability']}), {torch.get_num_threads()} threads; "
          f"{steps} and {2 * steps} steps per run, best of {rounds} rounds")
    best: dict[tuple, tuple[float, float, float]] = {}
    for _ in range(rounds):
        for name, mode, batch in cases:
            generator, batch_targets = generators[name], targets[name][:batch]
            short_wall, short_cpu = timed_run(generator, batch_targets, steps, MODES[mode])
            long_wall, long_cpu = timed_run(generator, batch_targets, 2 * steps, MODES[mode])
            per_step = 1e3 * (long_wall - short_wall) / (steps * batch)
            per_step_cpu = 1e3 * (long_cpu - short_cpu) / (steps * batch)
            fixed = short_wall - per_step * 1e-3 * steps * batch
            key = (name, mode, batch)
            if key not in best or per_step < best[key][0]:
                best[key] = (per_step, per_step_cpu, fixed)
    flops = {(name, mode): flop_per_image_step(generators[name], targets[name][:1], MODES[mode])
             for name in configs for mode in modes}
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return [{"config": name, "resolution": generators[name].resolution, "mode": mode, "batch": batch,
             "steps": steps, "ms_per_image_step": round(per_step, 3), "ms_per_image_step_cpu": round(per_step_cpu, 3),
             "gflop_per_image_step": round(flops[name, mode] / 1e9, 3), "fixed_s": round(fixed, 2),
             "images": images, "projector_steps": projector_steps,
             "projected_minutes": round(per_step * 1e-3 * images * projector_steps / 60, 2),
             "threads": torch.get_num_threads(), "processor": arithmetic["processor"],
             "cpu_capability": arithmetic["cpu_capability"] or "", "torch": torch.__version__,
             "git_commit": git_sha() or "", "rounds": rounds, "timestamp": stamp}
            for (name, mode, batch), (per_step, per_step_cpu, fixed) in best.items()]


def main(argv: list[str] | None = None) -> int:
    vascular = study_config("03_vascular_sspace", "quick")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", nargs="+", default=["sg2-cpu64@128", "sg2-cpu128"],
                        help="StyleGAN configs, NAME[@RESOLUTION][:FIELD=VALUE,...] (default: the shipped 128 px "
                             "fundus generator's and the wider candidate's)")
    parser.add_argument("--modes", nargs="+", default=["noise"], help="noise (W+ and noise maps, the vascular and "
                                                                      "trade-off chapters) and/or codes (W+ only, "
                                                                      "k-SALSA)")
    parser.add_argument("--batches", type=int, nargs="+", default=[vascular.projector_batch],
                        help="images projected together (default: the vascular chapter's PROJECTOR_BATCH)")
    parser.add_argument("--steps", type=int, default=4, help="the short run's steps (the long run takes twice)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--images", type=int, default=vascular.real_images,
                        help="images of the projected stage time (default: the vascular chapter's REAL_IMAGES)")
    parser.add_argument("--projector-steps", type=int, default=vascular.projector_steps,
                        help="steps of the projected stage time (default: the vascular chapter's PROJECTOR_STEPS)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-write", action="store_true", help="print the rows, do not append them")
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}")
    torch.set_num_threads(args.threads)
    try:
        rows = measure(args.configs, args.modes, args.batches, args.steps, args.rounds, args.images,
                       args.projector_steps)
    except (ValueError, BenchmarkError) as error:
        parser.error(str(error))
    for row in rows:
        print(f"{row['config']:>16} {row['mode']:>5} batch {row['batch']:3d}: {row['ms_per_image_step']:8.2f} ms "
              f"per image-step (CPU {row['ms_per_image_step_cpu']:.2f}), {row['gflop_per_image_step']:.2f} GFLOP, "
              f"fixed {row['fixed_s']:.1f} s; {row['images']} images x {row['projector_steps']} steps: "
              f"{row['projected_minutes']:.1f} min")
    if not args.no_write:
        from result_rows import append_rows  # beside this script; on sys.path when it runs as a script

        append_rows(RESULTS, FIELDS, rows)
        print(f"appended {len(rows)} rows to {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
