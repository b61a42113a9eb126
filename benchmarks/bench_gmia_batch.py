"""Speed of GMIA's latent optimisation against the number of images optimised together (``ANONYMISE_BATCH_SIZE``).

:func:`anonpaper.methods.gmia.anonymize` optimises one latent code per image by Adam, a chunk of ``batch_size``
images at a time; each step synthesises the chunk, runs the identity embedding and the utility classifier on it and
back-propagates through all three. The result does not depend on the chunk size beyond float rounding (the loss is
a sum of per-image losses), so the chunk size is a pure speed setting, and this script measures it.

The networks are the GMIA chapter's architectures at a profile (the generators chapter's chest X-ray StyleGAN2 and
the latent encoder, an ``EmbeddingNet`` on ``IDENTITY_BACKBONE``, a multi-label classifier on
``UTILITY_BACKBONE``) with random weights: speed does not depend on training. The images are random too. For each
batch size the optimisation runs twice, at ``--steps`` and at ``2 * --steps``; the difference of the two times over
``steps * images`` is the cost of one image and step, free of the fixed cost (encoding, first and last synthesis,
allocation). Times are wall seconds (the chapter's budget is wall time) and CPU seconds of this process
(``time.process_time``; less disturbed by other processes on a shared machine). Batch sizes are interleaved over
``--rounds`` rounds and the best round kept.

One CSV row per batch size is appended to ``benchmarks/results/gmia_batch.csv`` with the profile, resolution,
thread count, processor, torch version and git commit.

Usage:
    python benchmarks/bench_gmia_batch.py                               # quick profile, 2 threads, 8 16 32 64 128
    python benchmarks/bench_gmia_batch.py --threads 1 --batches 16 32 --images 64 --steps 4
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from anonpaper.data.phantoms.cxr import FINDINGS
from anonpaper.methods.gmia import LatentOptimizationSettings, anonymize
from anonpaper.models.classifiers import build_classifier
from anonpaper.models.embedding import EmbeddingNet
from anonpaper.models.encoders import LatentEncoder
from anonpaper.models.stylegan import StyleGenerator
from anonpaper.runner.studies import study_config
from anonpaper.runtime import git_sha, processor_name

RESULTS = Path(__file__).resolve().parent / "results" / "gmia_batch.csv"
FIELDS = ("profile", "resolution", "stylegan_config", "batch", "images", "steps", "ms_per_image_step",
          "ms_per_image_step_cpu", "fixed_s", "threads", "processor", "torch", "git_commit", "rounds", "timestamp")


def networks(profile: str) -> tuple:
    """The GMIA chapter's encoder, generator, E_id and E_ut at ``profile`` with random weights (seed 0), the
    generator's config name and its :class:`StyleGANConfig`."""
    generators = study_config("02_generators", profile)
    gmia = study_config("04_gmia", profile)
    stylegan_config = generators.stylegan_config("cxr-sg2")
    torch.manual_seed(0)  # EmbeddingNet and build_classifier draw their initial weights from the global stream
    generator = StyleGenerator(stylegan_config, seed=0, implementation="fast").eval()
    encoder = LatentEncoder(stylegan_config, generator.num_ws, seed=0).eval()
    identity = EmbeddingNet(1, gmia.identity_dim, gmia.identity_backbone).eval()
    utility = build_classifier(gmia.utility_backbone, 1, len(FINDINGS)).eval()
    return encoder, generator, identity, utility, generators.cxr_sg2_config, stylegan_config


def timed_run(nets: tuple, images: torch.Tensor, steps: int, batch: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one :func:`anonymize` call."""
    encoder, generator, identity, utility = nets
    settings = LatentOptimizationSettings(steps=steps, batch_size=batch, margin=0.0, progress=False)
    wall, cpu = time.perf_counter(), time.process_time()
    anonymize(encoder, generator, images, identity, utility.forward_features, settings)
    return time.perf_counter() - wall, time.process_time() - cpu


def measure(profile: str, batches: list[int], images: int, steps: int, rounds: int) -> list[dict]:
    """One row per batch size (see the module docstring), timed on this process's thread count.

    Raises:
        ValueError: A count under 1 (names it).
    """
    for name, value in (("images", images), ("steps", steps), ("rounds", rounds)):
        if value < 1:
            raise ValueError(f"--{name} must be at least 1, got {value}")
    if not batches or min(batches) < 1:
        raise ValueError(f"--batches must be positive, got {batches}")
    *nets, config_name, stylegan_config = networks(profile)
    resolution = int(stylegan_config.resolution)
    pixels = torch.rand(images, 1, resolution, resolution, generator=torch.Generator().manual_seed(0))
    timed_run(nets, pixels[:min(8, images)], 1, 8)  # warm-up: first-call allocations and kernel selection
    print(f"{processor_name()}, {torch.get_num_threads()} threads, {profile} ({config_name} at {resolution} px), "
          f"{images} images, {steps} and {2 * steps} steps")
    best: dict[int, tuple[float, float, float]] = {}
    for _ in range(rounds):
        for batch in batches:
            short_wall, short_cpu = timed_run(nets, pixels, steps, batch)
            long_wall, long_cpu = timed_run(nets, pixels, 2 * steps, batch)
            per_step = 1e3 * (long_wall - short_wall) / (steps * images)
            per_step_cpu = 1e3 * (long_cpu - short_cpu) / (steps * images)
            fixed = short_wall - per_step * 1e-3 * steps * images
            if batch not in best or per_step < best[batch][0]:
                best[batch] = (per_step, per_step_cpu, fixed)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return [{"profile": profile, "resolution": resolution, "stylegan_config": config_name, "batch": batch,
             "images": images, "steps": steps, "ms_per_image_step": round(per_step, 3),
             "ms_per_image_step_cpu": round(per_step_cpu, 3), "fixed_s": round(fixed, 2),
             "threads": torch.get_num_threads(), "processor": processor_name(), "torch": torch.__version__,
             "git_commit": git_sha() or "", "rounds": rounds, "timestamp": stamp}
            for batch, (per_step, per_step_cpu, fixed) in sorted(best.items())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="quick", help="the chapters' profile whose architectures are timed")
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 16, 32, 64, 128])
    parser.add_argument("--images", type=int, default=128, help="images optimised per run")
    parser.add_argument("--steps", type=int, default=6, help="the short run's steps (the long run takes twice)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-write", action="store_true", help="print the rows, do not append them")
    args = parser.parse_args()
    if args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}")
    torch.set_num_threads(args.threads)
    try:
        rows = measure(args.profile, args.batches, args.images, args.steps, args.rounds)
    except ValueError as error:
        parser.error(str(error))
    for row in rows:
        print(f"batch {row['batch']:4d}: {row['ms_per_image_step']:7.2f} ms per image-step (CPU "
              f"{row['ms_per_image_step_cpu']:.2f}), fixed {row['fixed_s']:.1f} s")
    if not args.no_write:
        from result_rows import append_rows  # beside this script; on sys.path when it runs as a script

        append_rows(RESULTS, FIELDS, rows)
        print(f"appended {len(rows)} rows to {RESULTS}")


if __name__ == "__main__":
    main()
