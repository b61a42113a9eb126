"""Speed of paper 1's contribution scores: forward-mode JVP rate against the generator's plain forward rate.

Two rates per config (random weights; speed does not depend on training):

* ``forward img/s``: :meth:`StyleGenerator.synthesis_from_styles` without gradients, best over the batch sizes in
  ``--forward-batches``.
* ``jvp chan-img/s``: channel-images per second of
  :func:`anonpaper.methods.jacobian_edit.contribution_scores` (JVPs plus the top-``||M||_0`` reduction) on
  ``--images`` images, for each chunk size in ``--chunk-sizes``. Channels are a stratified sample of
  ``--channels`` channels (every j-th flat index), so every layer is represented in proportion to its size; the cost of
  a channel depends on its layer (tangents start at that layer).

Both are timed in CPU seconds of this process (``time.process_time``; with one thread this is the work done and is
less sensitive to other processes on a shared machine) and in wall seconds. ``ratio`` = JVP rate / forward rate; the
issue's target is ``ratio >= 0.5``. The projection for the paper (``T = 1000`` images, ``K`` channels of
``--paper-config``) is ``T K / (ratio * paper forward rate)``; the paper config's forward rate is measured on one
image (``--paper-forward``; slow on CPU) or not projected.

Usage:
    python benchmarks/bench_jacobian.py                                      # sg3t-tiny, sg3t-cpu64, 1 thread
    python benchmarks/bench_jacobian.py --configs sg3t-cpu64 --chunk-sizes 1 4 16 --paper-forward
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from anonpaper.methods.jacobian_edit import contribution_scores
from anonpaper.models.stylegan import StyleGenerator, get_config


def _timed(function) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one call."""
    cpu, wall = time.process_time(), time.perf_counter()
    function()
    return time.process_time() - cpu, time.perf_counter() - wall


def _vessel_like_masks(count: int, size: int, seed: int = 0) -> torch.Tensor:
    """Thin random curves covering about 10% of the image (the mask density matters only for the top-k step)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    masks = []
    for _ in range(count):
        field = sum(np.sin(2 * np.pi * (rng.uniform(1, 4) * xx * np.cos(a) + rng.uniform(1, 4) * yy * np.sin(a)))
                    for a in rng.uniform(0, np.pi, 3))
        masks.append((np.abs(field) < np.quantile(np.abs(field), 0.1)).astype(np.float32))
    return torch.from_numpy(np.stack(masks))


def forward_rate(generator: StyleGenerator, batches: list[int], repeats: int) -> tuple[float, int]:
    """Best images per CPU second over the batch sizes, and that batch size."""
    best, best_batch = 0.0, batches[0]
    for batch in batches:
        codes = generator.styles(generator.mapping(generator.sample_latents(batch, seed=1))).detach()
        with torch.no_grad():
            generator.synthesis_from_styles(codes)  # warm-up
            cpu, _ = _timed(lambda: [generator.synthesis_from_styles(codes) for _ in range(repeats)])
        rate = batch * repeats / cpu
        if rate > best:
            best, best_batch = rate, batch
    return best, best_batch


def jvp_rate(generator: StyleGenerator, images: int, channels: int, chunk_size: int) -> tuple[float, float, int]:
    """(channel-images per CPU second, per wall second, channels timed) of contribution_scores."""
    codes = generator.styles(generator.mapping(generator.sample_latents(images, seed=2))).detach()
    masks = _vessel_like_masks(images, generator.resolution)
    total = generator.style_layout.total_channels
    stride = max(1, total // channels)
    selected = list(range(0, total, stride))[:channels]
    contribution_scores(generator, codes, masks, channels=selected[:chunk_size], chunk_size=chunk_size,
                        progress=False)  # warm-up
    cpu, wall = _timed(lambda: contribution_scores(generator, codes, masks, channels=selected,
                                                   chunk_size=chunk_size, progress=False))
    work = len(selected) * images
    return work / cpu, work / wall, len(selected)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", nargs="+", default=["sg3t-tiny", "sg3t-cpu64"])
    parser.add_argument("--chunk-sizes", nargs="+", type=int, default=[1, 2, 4, 8, 16])
    parser.add_argument("--images", type=int, default=2, help="T of the timed run")
    parser.add_argument("--channels", type=int, default=48, help="stratified channel sample per timed run")
    parser.add_argument("--forward-batches", nargs="+", type=int, default=[1, 2, 8])
    parser.add_argument("--repeats", type=int, default=3, help="forward passes per timed forward measurement")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--paper-config", default="sg3t-paper256")
    parser.add_argument("--paper-images", type=int, default=1000)
    parser.add_argument("--paper-forward", action="store_true", help="time one forward pass of --paper-config")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    paper_generator = StyleGenerator(get_config(args.paper_config), seed=0).eval()
    paper_channels = paper_generator.style_layout.total_channels
    paper_rate = None
    if args.paper_forward:
        paper_rate, _ = forward_rate(paper_generator, [1], 1)
    del paper_generator

    print(f"threads {args.threads}; T = {args.images} timed images; rates per CPU second (wall in brackets)")
    for name in args.configs:
        generator = StyleGenerator(get_config(name), seed=0).eval()
        for parameter in generator.parameters():
            parameter.requires_grad_(False)
        forward, batch = forward_rate(generator, args.forward_batches, args.repeats)
        print(f"{name}: K = {generator.style_layout.total_channels}, forward {forward:.2f} img/s (batch {batch})")
        for chunk in args.chunk_sizes:
            cpu_rate, wall_rate, timed = jvp_rate(generator, args.images, args.channels, chunk)
            line = (f"  chunk {chunk:3d}: jvp {cpu_rate:7.2f} chan-img/s [{wall_rate:7.2f}] over {timed} channels, "
                    f"ratio {cpu_rate / forward:.2f}")
            if paper_rate is not None:
                hours = args.paper_images * paper_channels / (cpu_rate / forward * paper_rate) / 3600
                line += f"; projected {args.paper_config} T={args.paper_images}: {hours:.0f} CPU h"
            print(line, flush=True)
    if paper_rate is not None:
        print(f"{args.paper_config}: K = {paper_channels}, forward {paper_rate:.3f} img/s (batch 1)")
    else:
        print(f"{args.paper_config}: K = {paper_channels}; add --paper-forward for the projected time")


if __name__ == "__main__":
    main()
