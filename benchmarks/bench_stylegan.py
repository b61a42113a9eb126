"""Throughput of the pure-PyTorch StyleGAN2 / StyleGAN3-T: seconds per 1,000 images (s/kimg).

Two numbers per config:

* ``train s/kimg``: full training steps of :func:`anonpaper.train.gan.train_gan` (G main, lazy path length every 4
  steps, D main, lazy R1 every 16 steps, EMA), timed over ``--steps`` steps after one warm-up step, divided by the
  images per step. Comparable in kind to the papers' s/kimg (published anchors on one A100 at 256 px:
  StyleGAN2 12.5, StyleGAN3-T 49.8, with NVIDIA's custom CUDA ops).
* ``generate s/kimg``: generator forward passes only (no gradient).

Usage:
    python benchmarks/bench_stylegan.py                         # CPU, 64 px configs, 1 thread
    python benchmarks/bench_stylegan.py --device cuda --configs sg2-paper256 sg3t-paper256 --batch 32
"""

from __future__ import annotations

import argparse
import time

import torch

from anonpaper.models.stylegan import ResidualDiscriminator, StyleGenerator, get_config
from anonpaper.train.gan import GANTrainingConfig, train_gan

PUBLISHED_A100_256PX = {"sg2": 12.5, "sg3t": 49.8}


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def benchmark(name: str, device: torch.device, batch: int, steps: int) -> dict:
    config = get_config(name)
    G, D = StyleGenerator(config, seed=0), ResidualDiscriminator(config, seed=1)
    data = torch.rand(max(64, batch), config.image_channels, config.resolution, config.resolution,
                      generator=torch.Generator().manual_seed(0))
    training = GANTrainingConfig(total_steps=steps + 1, batch_size=batch, progress=False,
                                 path_length_weight=2.0 if config.architecture == "sg2" else 0.0,
                                 style_mixing_probability=0.9 if config.architecture == "sg2" else 0.0)
    result = train_gan(G, D, data, training, device=device)
    _synchronize(device)
    seconds = result.history["seconds"].to_numpy()
    train_per_image = (seconds[-1] - seconds[0]) / (steps * batch)

    G_eval = result.generator_ema
    z = G_eval.sample_latents(batch, seed=1, device=device)
    with torch.no_grad():
        G_eval(z)  # warm-up
        _synchronize(device)
        start = time.perf_counter()
        repeats = max(1, steps // 2)
        for _ in range(repeats):
            G_eval(z)
        _synchronize(device)
        generate_per_image = (time.perf_counter() - start) / (repeats * batch)
    return {"config": name, "resolution": config.resolution, "style_channels": G.style_layout.total_channels,
            "generator_parameters": sum(p.numel() for p in G.parameters()),
            "train_s_per_kimg": 1000 * train_per_image, "generate_s_per_kimg": 1000 * generate_per_image}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["sg2-cpu64", "sg3t-cpu64"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=16, help="timed training steps (16 covers one R1 interval)")
    parser.add_argument("--threads", type=int, default=1, help="CPU intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(f"device={device} threads={torch.get_num_threads()} batch={args.batch} steps={args.steps} "
          f"torch={torch.__version__}")
    print(f"{'config':<15}{'res':>5}{'K (S)':>8}{'G params':>12}{'train s/kimg':>15}{'generate s/kimg':>17}")
    for name in args.configs:
        row = benchmark(name, device, args.batch, args.steps)
        print(f"{row['config']:<15}{row['resolution']:>5}{row['style_channels']:>8}{row['generator_parameters']:>12,}"
              f"{row['train_s_per_kimg']:>15.1f}{row['generate_s_per_kimg']:>17.1f}")
    print(f"published anchors (one A100, 256 px, NVIDIA CUDA ops): {PUBLISHED_A100_256PX} train s/kimg")


if __name__ == "__main__":
    main()
