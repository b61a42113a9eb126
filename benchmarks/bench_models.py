"""Forward and forward+backward throughput (images/s) of every classifier and segmenter configuration on CPU.

Run on demand (not a test):  .venv/bin/python benchmarks/bench_models.py [--size 128] [--batch 4] [--repeats 3]
Uses one CPU thread (the study machines are shared), so the numbers are per-core throughputs.
"""

from __future__ import annotations

import argparse
import time

import torch

from anonpaper.models.classifiers import CLASSIFIER_NAMES, build_classifier
from anonpaper.models.embedding import EmbeddingNet
from anonpaper.models.frunet import FRUNet
from anonpaper.models.unet import UNet


def configurations(channels: int):
    """(name, factory) pairs: every classifier, U-Nets and FR-UNets at paper and CPU widths, an embedding net."""
    for name in CLASSIFIER_NAMES:
        yield f"classifier/{name}", lambda name=name: build_classifier(name, channels, 3)
    for width in (32, 16, 8):
        yield f"unet/base{width}-depth4", lambda width=width: UNet(channels, 1, base_width=width, depth=4)
    for widths in ((32, 64, 128, 256), (16, 32, 64, 128), (8, 16, 32, 64)):
        yield f"frunet/{'-'.join(map(str, widths))}", lambda widths=widths: FRUNet(channels, 1, widths=widths)
    yield "embedding/resnet18d-128", lambda: EmbeddingNet(channels, 128, backbone="resnet18d")


def measure(model: torch.nn.Module, images: torch.Tensor, repeats: int) -> tuple[float, float]:
    """Images per second for inference (eval, no grad) and for a training step (forward + backward)."""
    model.eval()
    with torch.no_grad():
        model(images)  # warm-up
        start = time.perf_counter()
        for _ in range(repeats):
            model(images)
        forward = repeats * images.shape[0] / (time.perf_counter() - start)
    model.train()
    model(images).float().mean().backward()  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        model.zero_grad(set_to_none=True)
        model(images).float().mean().backward()
    backward = repeats * images.shape[0] / (time.perf_counter() - start)
    return forward, backward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=128, help="image side in pixels")
    parser.add_argument("--batch", type=int, default=4, help="images per batch")
    parser.add_argument("--channels", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="timed batches per measurement")
    parser.add_argument("--only", default="", help="substring filter on configuration names")
    arguments = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    images = torch.rand(arguments.batch, arguments.channels, arguments.size, arguments.size)
    print(f"CPU, 1 thread, batch {arguments.batch}, {arguments.channels}x{arguments.size}x{arguments.size}, "
          f"torch {torch.__version__}")
    print(f"{'configuration':<32}{'params (M)':>11}{'forward img/s':>15}{'train img/s':>13}")
    for name, factory in configurations(arguments.channels):
        if arguments.only and arguments.only not in name:
            continue
        model = factory()
        parameters = sum(p.numel() for p in model.parameters()) / 1e6
        forward, backward = measure(model, images, arguments.repeats)
        print(f"{name:<32}{parameters:>11.2f}{forward:>15.2f}{backward:>13.2f}", flush=True)


if __name__ == "__main__":
    main()
