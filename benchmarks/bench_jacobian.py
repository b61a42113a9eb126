"""Speed of paper 1's contribution scores: forward-mode JVP rate against the generator's plain forward rate.

Two rates per config (random weights; speed does not depend on training):

* ``forward img/s``: :meth:`StyleGenerator.synthesis_from_styles` without gradients, best over the batch sizes in
  ``--forward-batches``.
* ``jvp chan-img/s``: channel-images per second of
  :func:`anonpaper.methods.jacobian_edit.contribution_scores` (JVPs plus the top-``||M||_0`` reduction) on
  ``--images`` images, for each chunk size in ``--chunk-sizes``. Channels are a stratified sample of
  ``--channels`` channels (every j-th flat index), so every layer is represented in proportion to its size; the cost of
  a channel depends on its layer (tangents start at that layer).

On CPU both are timed in CPU seconds of this process (``time.process_time``; with one thread this is the work done
and is less sensitive to other processes on a shared machine) and in wall seconds; on CUDA in wall seconds after a
synchronize. Each rate is the best of ``--rounds`` interleaved rounds. ``ratio`` = JVP rate / forward rate; the
issue's target is ``ratio >= 0.5``. The projection for the paper (``T = 1000`` images, ``K`` channels of
``--paper-config``) is ``T K / (ratio * paper forward rate)``; the paper config's forward rate is measured on one
image (``--paper-forward``; slow on CPU) or not projected.

Each (config, chunk size) appends a CSV row to ``benchmarks/results/jacobian.csv`` with the device name, thread
count, torch version and git commit.

Usage:
    python benchmarks/bench_jacobian.py                                      # sg3t-tiny, sg3t-cpu64, 1 thread
    python benchmarks/bench_jacobian.py --configs sg3t-cpu64 --chunk-sizes 1 4 16 --paper-forward
    python benchmarks/bench_jacobian.py --configs sg2-tiny@64 sg2-cpu64@128  # the vascular chapter's quick edits
    python benchmarks/bench_jacobian.py --device cuda --configs sg3t-paper256 --images 4 --chunk-sizes 16 64
"""

from __future__ import annotations

import argparse
import csv
import platform
import time
from pathlib import Path

import numpy as np
import torch

from bench_stylegan import parse_config

from anonpaper.methods.jacobian_edit import contribution_scores
from anonpaper.models.stylegan import StyleGenerator, get_config
from anonpaper.runtime import git_sha

RESULTS = Path(__file__).resolve().parent / "results" / "jacobian.csv"
FIELDS = ("config", "channels_total", "device", "device_name", "threads", "torch", "git_commit", "images",
          "channels_timed", "chunk_size", "forward_images_per_s", "forward_batch", "jvp_channel_images_per_s",
          "ratio", "paper_config", "paper_projected_hours", "timestamp")


def _timed(function, device: torch.device) -> tuple[float, float]:
    """(seconds the rate is computed from, wall seconds) of one call: CPU seconds of this process on CPU, wall
    seconds (after a synchronize) on CUDA."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    cpu, wall = time.process_time(), time.perf_counter()
    function()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    wall = time.perf_counter() - wall
    return (wall if device.type == "cuda" else time.process_time() - cpu), wall


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
    """Best images per second over the batch sizes, and that batch size."""
    device = next(generator.parameters()).device
    best, best_batch = 0.0, batches[0]
    for batch in batches:
        codes = generator.styles(generator.mapping(generator.sample_latents(batch, seed=1).to(device))).detach()
        with torch.no_grad():
            generator.synthesis_from_styles(codes)  # warm-up
            seconds, _ = _timed(lambda: [generator.synthesis_from_styles(codes) for _ in range(repeats)], device)
        rate = batch * repeats / seconds
        if rate > best:
            best, best_batch = rate, batch
    return best, best_batch


def jvp_rate(generator: StyleGenerator, images: int, channels: int, chunk_size: int) -> tuple[float, float, int]:
    """(channel-images per second as in :func:`_timed`, per wall second, channels timed) of contribution_scores."""
    device = next(generator.parameters()).device
    codes = generator.styles(generator.mapping(generator.sample_latents(images, seed=2).to(device))).detach()
    masks = _vessel_like_masks(images, generator.resolution).to(device)
    total = generator.style_layout.total_channels
    stride = max(1, total // channels)
    selected = list(range(0, total, stride))[:channels]
    contribution_scores(generator, codes, masks, channels=selected[:chunk_size], chunk_size=chunk_size,
                        progress=False)  # warm-up
    seconds, wall = _timed(lambda: contribution_scores(generator, codes, masks, channels=selected,
                                                       chunk_size=chunk_size, progress=False), device)
    work = len(selected) * images
    return work / seconds, work / wall, len(selected)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", nargs="+", default=["sg3t-tiny", "sg3t-cpu64"])
    parser.add_argument("--chunk-sizes", nargs="+", type=int, default=[4, 8, 16])
    parser.add_argument("--images", type=int, default=2, help="T of the timed run")
    parser.add_argument("--channels", type=int, default=48, help="stratified channel sample per timed run")
    parser.add_argument("--forward-batches", nargs="+", type=int, default=[1, 2, 8])
    parser.add_argument("--repeats", type=int, default=3, help="forward passes per timed forward measurement")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds; the best rate of each is kept")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--paper-config", default="sg3t-paper256")
    parser.add_argument("--paper-images", type=int, default=1000)
    parser.add_argument("--paper-forward", action="store_true", help="time one forward pass of --paper-config")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else (
        platform.processor() or platform.machine() or "cpu")

    paper_generator = StyleGenerator(get_config(args.paper_config), seed=0).eval().to(device)
    paper_channels = paper_generator.style_layout.total_channels
    paper_rate = None
    if args.paper_forward:
        paper_rate, _ = forward_rate(paper_generator, [1] if device.type == "cpu" else [1, 8, 32], 1)
    del paper_generator

    unit = "CPU second" if device.type == "cpu" else "second"
    print(f"{device} ({device_name}), threads {args.threads}; T = {args.images} timed images; rates per {unit} "
          f"(wall in brackets), best of {args.rounds} rounds")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    new_file = not args.output.exists()
    with open(args.output, "a", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=FIELDS, lineterminator="\n")
        if new_file:
            writer.writeheader()
        for name in args.configs:
            generator = StyleGenerator(parse_config(name), seed=0).eval().to(device)
            for parameter in generator.parameters():
                parameter.requires_grad_(False)
            forward, batch, jvp = 0.0, 0, {chunk: (0.0, 0.0, 0) for chunk in args.chunk_sizes}
            for _ in range(args.rounds):  # interleaved, so a busy spell on a shared machine hits both rates
                rate, rate_batch = forward_rate(generator, args.forward_batches, args.repeats)
                if rate > forward:
                    forward, batch = rate, rate_batch
                for chunk in args.chunk_sizes:
                    measured = jvp_rate(generator, args.images, args.channels, chunk)
                    if measured[0] > jvp[chunk][0]:
                        jvp[chunk] = measured
            print(f"{name}: K = {generator.style_layout.total_channels}, forward {forward:.2f} img/s (batch {batch})")
            for chunk, (rate, wall_rate, timed) in jvp.items():
                ratio = rate / forward
                line = (f"  chunk {chunk:3d}: jvp {rate:7.2f} chan-img/s [{wall_rate:7.2f}] over {timed} channels, "
                        f"ratio {ratio:.2f}")
                hours = None
                if paper_rate is not None:
                    hours = args.paper_images * paper_channels / (ratio * paper_rate) / 3600
                    line += f"; projected {args.paper_config} T={args.paper_images}: {hours:.1f} h"
                print(line, flush=True)
                writer.writerow({"config": name, "channels_total": generator.style_layout.total_channels,
                                 "device": str(device), "device_name": device_name,
                                 "threads": torch.get_num_threads(), "torch": torch.__version__,
                                 "git_commit": git_sha() or "", "images": args.images, "channels_timed": timed,
                                 "chunk_size": chunk, "forward_images_per_s": f"{forward:.2f}",
                                 "forward_batch": batch, "jvp_channel_images_per_s": f"{rate:.2f}",
                                 "ratio": f"{ratio:.3f}", "paper_config": args.paper_config,
                                 "paper_projected_hours": "" if hours is None else f"{hours:.1f}",
                                 "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
                stream.flush()
    if paper_rate is not None:
        print(f"{args.paper_config}: K = {paper_channels}, forward {paper_rate:.3f} img/s (batch 1)")
    else:
        print(f"{args.paper_config}: K = {paper_channels}; add --paper-forward for the projected time")


if __name__ == "__main__":
    main()
