"""Throughput of the package's classifier training loop against a plain PyTorch loop (images/s).

Both loops train the same network (a classifier of :func:`anonpaper.models.classifiers.build_classifier` inside
the same :class:`~anonpaper.models.normalization.InputNormalization`, same initial weights) on the same images
held in memory, with Adam and a cross-entropy loss, for the same epochs and batch size:

* ``package``: :func:`anonpaper.train.classifier.train_classifier` as the chapters call it (no augmentation, no
  progress bar, no checkpoint), which also evaluates ``--val-images`` validation images after every epoch and
  keeps the best weights. Timed from the entry of its loop (:func:`anonpaper.train.loop.fit`) to its return, so
  that the set-up both loops share (uint8 images to float, per-channel statistics; seconds for paper-size data)
  does not dilute the comparison.
* ``plain``: a hand-written loop, timed after the same set-up: per batch shuffle, index, copy to the device
  (pinned, non-blocking on CUDA), forward, loss, backward, step; the loss summed on the device, read once per
  epoch; channels-last and bfloat16 autocast on CUDA (float32, default layout on CPU, where channels-last
  convolutions take other kernels). No validation.

With ``--channels-last`` both loops train in channels-last layout on the CPU too (the package loop through
``TrainSettings(channels_last=True)``); the rows say which layout ran (``layout``), so that runs with and without
the flag compare the layouts on one machine.

Rounds alternate the two loops so that a shared machine's load hits both alike; the best round of each is kept.
Besides wall-clock images/s, each row has images per second of the process's CPU time (``time.process_time``),
which a busy shared machine disturbs much less than wall time (with one thread, CPU time is the loop's own work;
on CUDA it is the host's work only). Each run appends one row per loop to ``benchmarks/results/train_loop.csv``
with the device, threads, torch version and git commit; the package row carries its ratios to the plain loop.

Usage:
    python benchmarks/bench_train_loop.py                                  # CPU, small_cnn, 64 px, 1 thread
    python benchmarks/bench_train_loop.py --model resnet10t --size 128 --threads 2 --channels-last
    python benchmarks/bench_train_loop.py --device cuda --model resnet50d --size 256 --batch 64 --images 2048
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path
from unittest import mock

import numpy as np
import torch
from torch.nn import functional as F

from anonpaper.models.classifiers import CLASSIFIER_NAMES, build_classifier
from anonpaper.models.normalization import InputNormalization, channel_statistics
from anonpaper.runtime import git_sha
from anonpaper.train import classifier as classifier_module
from anonpaper.train.loop import TrainSettings
from result_rows import append_rows

RESULTS = Path(__file__).resolve().parent / "results" / "train_loop.csv"
FIELDS = ["loop", "model", "image_size", "batch", "images", "val_images", "epochs", "layout", "images_per_s",
          "ratio_to_plain",
          "images_per_cpu_s", "cpu_ratio_to_plain", "device", "device_name", "threads", "torch", "git_commit", "rounds",
          "note", "timestamp"]
LEARNING_RATE = 1e-3


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        from anonpaper.runtime import processor_name

        return processor_name()
    except ImportError:
        return platform.processor() or platform.machine() or "cpu"


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_data(count: int, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random uint8 RGB images (count, size, size, 3) and balanced binary labels."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (count, size, size, 3), dtype=np.uint8), np.arange(count) % 2


def _network(model: str, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_classifier(model, 3, 2)


def package_loop(model: str, train: tuple, val: tuple, batch: int, epochs: int, device: torch.device,
                 channels_last: bool = False) -> tuple[float, float]:
    """(wall, CPU) seconds of the loop of one :func:`train_classifier` call (from the entry of ``fit``)."""
    network = _network(model, 0)
    started: list[tuple[float, float]] = []
    fit = classifier_module.fit

    def timed_fit(*args, **kwargs):
        _synchronize(device)
        started.append((time.perf_counter(), time.process_time()))
        return fit(*args, **kwargs)

    with mock.patch.object(classifier_module, "fit", timed_fit):
        classifier_module.train_classifier(network, train, val, TrainSettings(
            epochs=epochs, batch_size=batch, lr=LEARNING_RATE, seed=0, device=device, progress=False,
            channels_last=channels_last or None),
            class_weights=None)
    _synchronize(device)
    return time.perf_counter() - started[0][0], time.process_time() - started[0][1]


def plain_loop(model: str, train: tuple, batch: int, epochs: int, device: torch.device,
               channels_last: bool = False) -> tuple[float, float]:
    """(wall, CPU) seconds of a hand-written loop over the same images (see the module docstring)."""
    cuda = device.type == "cuda"
    images = torch.from_numpy(np.ascontiguousarray(train[0].transpose(0, 3, 1, 2))).float() / 255
    labels = torch.from_numpy(train[1].astype(np.int64))
    mean, std = channel_statistics(images)
    _synchronize(device)
    start, start_cpu = time.perf_counter(), time.process_time()
    network = InputNormalization(_network(model, 0), mean, std).to(device)
    layout = torch.channels_last if cuda or channels_last else torch.contiguous_format
    network = network.to(memory_format=layout)
    optimizer = torch.optim.Adam(network.parameters(), lr=LEARNING_RATE, weight_decay=1e-5)
    generator = torch.Generator().manual_seed(0)
    count = images.shape[0]
    for _ in range(epochs):
        network.train()
        total = torch.zeros((), dtype=torch.float64, device=device)
        order = torch.randperm(count, generator=generator)
        for first in range(0, count, batch):
            index = order[first:first + batch]
            if index.numel() < 2:
                continue  # as the package loop: BatchNorm cannot train on one image
            x = images[index]
            y = labels[index]
            if cuda:
                x, y = x.pin_memory(), y.pin_memory()
            x = x.to(device, non_blocking=True).contiguous(memory_format=layout)
            y = y.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
                loss = F.cross_entropy(network(x).float(), y)
            loss.backward()
            optimizer.step()
            total += loss.detach()
        float(total)  # one read per epoch, as a loop that logs its loss must
    _synchronize(device)
    return time.perf_counter() - start, time.process_time() - start_cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default="small_cnn", choices=CLASSIFIER_NAMES)
    parser.add_argument("--size", type=int, default=64, help="image side in pixels")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--images", type=int, default=512, help="training images")
    parser.add_argument("--val-images", type=int, default=32, help="validation images of the package loop")
    parser.add_argument("--epochs", type=int, default=2, help="epochs per timed run")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; the best of each loop is kept")
    parser.add_argument("--threads", type=int, default=1, help="CPU intra-op threads")
    parser.add_argument("--channels-last", action="store_true",
                        help="both loops in channels-last layout on the CPU too (always so on CUDA)")
    parser.add_argument("--note", default="", help="free text stored with the rows (e.g. 'machine shared')")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    for name in ("size", "batch", "images", "val_images", "epochs", "rounds", "threads"):
        if getattr(args, name) < 1:
            print(f"error: --{name.replace('_', '-')} must be >= 1", file=sys.stderr)
            return 2
    if args.batch < 2 or args.images < args.batch:
        print("error: need --batch >= 2 and --images >= --batch", file=sys.stderr)
        return 2
    try:
        device = torch.device(args.device)
    except RuntimeError as error:
        print(f"error: unsupported device {args.device!r}: {error}", file=sys.stderr)
        return 2
    if device.type == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda asked for, but torch sees no CUDA device", file=sys.stderr)
        return 2
    if device.type not in ("cpu", "cuda"):
        print(f"error: unsupported device {device}; use cpu or cuda[:index]", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    train = make_data(args.images, args.size, 0)
    val = make_data(args.val_images, args.size, 1)
    print(f"device={device} ({_device_name(device)}) threads={torch.get_num_threads()} torch={torch.__version__} "
          f"model={args.model} {args.size}px batch={args.batch} images={args.images} epochs={args.epochs}")
    # Warm-up (kernel choice, allocator, lazy imports) outside the timed rounds.
    warm_up = (train[0][:2 * args.batch], train[1][:2 * args.batch])
    plain_loop(args.model, warm_up, args.batch, 1, device, args.channels_last)
    package_loop(args.model, warm_up, val, args.batch, 1, device, args.channels_last)
    best = {"plain": [float("inf")] * 2, "package": [float("inf")] * 2}  # wall, CPU seconds
    for round_ in range(args.rounds):
        for loop in ("plain", "package"):
            seconds = (plain_loop(args.model, train, args.batch, args.epochs, device, args.channels_last)
                       if loop == "plain" else
                       package_loop(args.model, train, val, args.batch, args.epochs, device, args.channels_last))
            best[loop] = [min(old, new) for old, new in zip(best[loop], seconds)]
            print(f"round {round_ + 1} {loop:<8} {args.epochs * args.images / seconds[0]:9.1f} img/s  "
                  f"{args.epochs * args.images / seconds[1]:9.1f} img/CPU-s", flush=True)
    rates = {loop: args.epochs * args.images / seconds[0] for loop, seconds in best.items()}
    cpu_rates = {loop: args.epochs * args.images / seconds[1] for loop, seconds in best.items()}
    append_rows(args.output, FIELDS, ({
        "loop": loop, "model": args.model, "image_size": args.size, "batch": args.batch,
        "images": args.images, "val_images": args.val_images if loop == "package" else 0,
        "epochs": args.epochs,
        "layout": "channels_last" if args.channels_last or device.type == "cuda" else "contiguous",
        "images_per_s": f"{rates[loop]:.1f}",
        "ratio_to_plain": f"{rates['package'] / rates['plain']:.3f}" if loop == "package" else "",
        "images_per_cpu_s": f"{cpu_rates[loop]:.1f}",
        "cpu_ratio_to_plain": f"{cpu_rates['package'] / cpu_rates['plain']:.3f}" if loop == "package" else "",
        "device": str(device), "device_name": _device_name(device), "threads": torch.get_num_threads(),
        "torch": torch.__version__, "git_commit": git_sha() or "", "rounds": args.rounds,
        "note": args.note, "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        for loop in ("plain", "package")))
    print(f"plain {rates['plain']:.1f} img/s, package {rates['package']:.1f} img/s "
          f"(ratio {rates['package'] / rates['plain']:.3f}; per CPU second {cpu_rates['plain']:.1f} and "
          f"{cpu_rates['package']:.1f}, ratio {cpu_rates['package'] / cpu_rates['plain']:.3f}); rows appended to "
          f"{args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
