"""StyleGAN2 / StyleGAN3-T throughput per ops implementation: train s/kimg, generation images/s, peak GPU memory.

For every config, batch size and implementation (``reference``: step-by-step PyTorch; ``fast``: resampling matrices
/ polyphase convs with folded gains; ``triton``: Triton kernels, CUDA only), measured in interleaved rounds so that
a shared machine's load hits every implementation alike (the best round is kept):

* ``train_s_per_kimg``: full steps of :func:`anonpaper.train.gan.train_gan` (G main, lazy path length every 4
  steps for SG2, D main, lazy R1 every 16 steps, EMA), timed after one warm-up step, per 1,000 images.
  Published anchors (one A100, 256 px, NVIDIA's CUDA ops): StyleGAN2 12.5, StyleGAN3-T 49.8 s/kimg.
* ``generate_images_per_s``: generator forward passes without gradients.
* ``peak_memory_gib``: peak CUDA memory of the training steps (empty on CPU).

Each run appends one CSV row to ``benchmarks/results/stylegan.csv`` with the device name, torch / triton versions,
git commit and thread count. A config and batch that do not fit in GPU memory stop with a message naming them,
the memory asked for and what to try (a smaller batch or gradient accumulation).

``--memory`` measures instead what a training forward of the generator (mapping + synthesis, parameters requiring
grad) keeps for backward, with :class:`~anonpaper.models.stylegan.ops.saved_memory.SavedTensorMeter` (each saved
storage once, parameters and buffers left out; the graph gets placeholders, so the machine only needs the forward's
working set). Bytes are measured at two batch sizes (``--memory-batches``, default 1 and 2): the difference is the
bytes per image, the rest the batch-independent part (per-forward weight tensors), and their sum at
``--projected-batch`` (32) the projection in GiB. These are the generator's saved activations only: a training
step's peak also holds the discriminator's, the gradients, Adam's state and the backward's working set. The byte
counts do not depend on the device, so a GPU configuration is measured on the CPU; 16-bit layers are measured in
bf16 there (fp16 convolutions are too slow on the CPU), which has fp16's byte size. Rows go to
``benchmarks/results/stylegan_memory.csv`` with the official StyleGAN3-T code's peak (18.6 GiB at batch 32) beside
``sg3t-paper256``.

Usage:
    python benchmarks/bench_stylegan.py                                  # CPU, 64 px configs, 2 threads
    python benchmarks/bench_stylegan.py --configs sg2-tiny@64 sg3t-tiny@64  # a named config at another resolution
    python benchmarks/bench_stylegan.py --configs sg3t-tiny@128 sg3t-tiny@128:channel_base=4096 --threads 1
    python benchmarks/bench_stylegan.py --device cuda --configs sg2-paper256 sg3t-paper256 --batch 32 \\
        --implementations reference fast triton --mixed-precision fp16
    python benchmarks/bench_stylegan.py --memory --configs sg3t-paper256 --implementations reference fast
"""

from __future__ import annotations

import argparse
import csv
import platform
import re
import sys
import time
from pathlib import Path

import torch

from anonpaper.cli import parse_changes
from anonpaper.models.stylegan import ResidualDiscriminator, StyleGenerator, get_config, list_configs
from anonpaper.models.stylegan.ops import IMPLEMENTATIONS
from anonpaper.models.stylegan.ops.saved_memory import SavedTensorMeter
from anonpaper.runtime import git_sha
from anonpaper.train.gan import GANTrainingConfig, train_gan

RESULTS = Path(__file__).resolve().parent / "results" / "stylegan.csv"
PRECISIONS = ("none", "fp16", "bf16")
FIELDS = ["config", "batch", "implementation", "mixed_precision", "device", "device_name", "threads", "torch",
          "triton", "git_commit", "steps", "rounds", "train_s_per_kimg", "generate_images_per_s", "peak_memory_gib",
          "timestamp"]

MEMORY_RESULTS = Path(__file__).resolve().parent / "results" / "stylegan_memory.csv"
MEMORY_FIELDS = ["config", "implementation", "mixed_precision", "device", "device_name", "torch", "git_commit",
                 "batches", "saved_mib_per_image", "saved_mib_fixed", "projected_batch", "projected_gib",
                 "official_peak_gib", "seconds", "timestamp"]
# Peak GPU memory of NVIDIA's official code for a whole training step (G and D, fp16 layers) at the projected batch.
OFFICIAL_PEAK_GIB = {"sg3t-paper256": 18.6}


class BenchmarkError(ValueError):
    """A benchmark request that cannot run (bad device, dtype, config, or out of memory); the message says why."""


def check_request(device: torch.device, implementations: list[str], mixed_precision: str, configs: list[str],
                  batches: list[int]) -> None:
    """Refuse unsupported devices, dtypes, implementations, configs and batch sizes with a readable message."""
    if device.type not in ("cpu", "cuda"):
        raise BenchmarkError(f"unsupported device {device}; use cpu or cuda[:index]")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise BenchmarkError("--device cuda asked for, but torch sees no CUDA device")
    for name in implementations:
        if name not in IMPLEMENTATIONS or name == "auto":
            raise BenchmarkError(f"unknown implementation {name!r}; expected some of {IMPLEMENTATIONS[1:]}")
        if name == "triton" and device.type != "cuda":
            raise BenchmarkError("the triton implementation runs on CUDA only; drop it or use --device cuda")
    if mixed_precision not in PRECISIONS:
        raise BenchmarkError(f"--mixed-precision must be one of {PRECISIONS}, got {mixed_precision!r}")
    if mixed_precision == "fp16" and device.type == "cpu":
        raise BenchmarkError("fp16 layers are not supported on CPU (slow or missing kernels); use bf16 or none")
    for name in configs:
        parse_config(name)
    if any(batch < 1 for batch in batches):
        raise BenchmarkError(f"batch sizes must be positive, got {batches}")


def parse_config(name: str):
    """A named config, ``NAME@RESOLUTION`` for a named config at another resolution (the generators chapter's
    ``quick`` fundus StyleGAN3-T is ``sg3t-tiny@128``), and either with ``:FIELD=VALUE,...`` for other fields
    (``sg3t-tiny@128:channel_base=4096``, read as ``anonpaper generators train --change`` reads them)."""
    named, _, listed = name.partition(":")
    base, _, resolution = named.partition("@")
    if base not in list_configs():
        raise BenchmarkError(f"unknown config {base!r} in {name!r}; expected some of {sorted(list_configs())}, "
                             "optionally with @RESOLUTION and :FIELD=VALUE,...")
    try:
        changes = parse_changes(filter(None, listed.split(",")))
    except ValueError as error:
        raise BenchmarkError(f"{name!r}: {error}") from error
    if resolution:
        if not resolution.isdigit() or int(resolution) < 16 or int(resolution) & (int(resolution) - 1):
            raise BenchmarkError(f"resolution in {name!r} must be a power of two >= 16, got {resolution!r}")
        changes["resolution"] = int(resolution)
    try:
        return get_config(base, **changes)
    except (TypeError, ValueError) as error:
        raise BenchmarkError(f"{name!r}: {error}") from error


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _out_of_memory_message(name: str, batch: int, device: torch.device, error: Exception) -> str:
    asked = re.search(r"Tried to allocate ([\d.]+ [KMG]iB)", str(error))
    total = torch.cuda.get_device_properties(device).total_memory / 2 ** 30 if device.type == "cuda" else None
    return (f"config {name!r} at batch {batch} does not fit on {device}"
            f"{f' ({total:.1f} GiB)' if total else ''}: it asked for {asked.group(1) if asked else 'more memory'}"
            f" beyond what was free. Try a smaller --batch (e.g. {max(1, batch // 2)}), gradient accumulation "
            f"(GANTrainingConfig batch split over steps), or --mixed-precision fp16.")


def run_one(name: str, batch: int, implementation: str, mixed_precision: str, device: torch.device,
            steps: int) -> dict:
    """One measurement: train and generation throughput of one config / batch / implementation."""
    config = parse_config(name)
    precision = None if mixed_precision == "none" else mixed_precision
    G = StyleGenerator(config, seed=0, implementation=implementation, mixed_precision=precision)
    D = ResidualDiscriminator(config, seed=1)
    data = torch.rand(max(64, batch), config.image_channels, config.resolution, config.resolution,
                      generator=torch.Generator().manual_seed(0))
    training = GANTrainingConfig.for_architecture(config.architecture, total_steps=steps + 1, batch_size=batch,
                                                  progress=False)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    try:
        result = train_gan(G, D, data, training, device=device)
        _synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) / 2 ** 30 if device.type == "cuda" else None
        seconds = result.history["seconds"].to_numpy()
        train_per_image = (seconds[-1] - seconds[0]) / (steps * batch)
        G_eval = result.generator_ema
        z = G_eval.sample_latents(batch, seed=1, device=device)
        with torch.no_grad():
            G_eval(z)  # warm-up
            _synchronize(device)
            repeats = max(1, steps // 2)
            start = time.perf_counter()
            for _ in range(repeats):
                G_eval(z)
            _synchronize(device)
            generate_seconds = (time.perf_counter() - start) / repeats
    except torch.cuda.OutOfMemoryError as error:
        raise BenchmarkError(_out_of_memory_message(name, batch, device, error)) from None
    return {"train_s_per_kimg": 1000 * train_per_image, "generate_images_per_s": batch / generate_seconds,
            "peak_memory_gib": peak}


def saved_bytes(name: str, implementation: str, mixed_precision: str, batch: int, device: torch.device) -> int:
    """Bytes a training forward of the generator (mapping + synthesis) keeps for backward, parameters and buffers
    left out (:class:`SavedTensorMeter`, without holding them: the measurement needs only the forward's memory)."""
    precision = None if mixed_precision == "none" else mixed_precision
    generator = StyleGenerator(parse_config(name), seed=0, implementation=implementation,
                               mixed_precision=precision).to(device)
    latents = generator.sample_latents(batch, seed=1, device=device)
    with SavedTensorMeter(exclude=[*generator.parameters(), *generator.buffers()], keep=False) as meter:
        generator(latents)
    return meter.bytes


def memory_row(name: str, implementation: str, mixed_precision: str, batches: tuple[int, int], device: torch.device,
               projected_batch: int) -> dict:
    """Saved bytes per image (slope between the two batch sizes), the batch-independent rest, and the projection."""
    start = time.perf_counter()
    small, large = (saved_bytes(name, implementation, mixed_precision, batch, device) for batch in batches)
    per_image = (large - small) / (batches[1] - batches[0])
    fixed = small - batches[0] * per_image
    return {"batches": f"{batches[0]} {batches[1]}", "saved_mib_per_image": f"{per_image / 2 ** 20:.1f}",
            "saved_mib_fixed": f"{fixed / 2 ** 20:.1f}", "projected_batch": projected_batch,
            "projected_gib": f"{(fixed + projected_batch * per_image) / 2 ** 30:.2f}",
            "official_peak_gib": OFFICIAL_PEAK_GIB.get(name, ""), "seconds": f"{time.perf_counter() - start:.0f}"}


def _triton_version() -> str:
    try:
        import triton

        return triton.__version__
    except ImportError:
        return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["sg2-cpu64", "sg3t-cpu64"])
    parser.add_argument("--batch", nargs="+", type=int, default=[4])
    parser.add_argument("--implementations", nargs="+", default=["reference", "fast"])
    parser.add_argument("--mixed-precision", default="none", choices=PRECISIONS)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=8, help="timed training steps per round")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds; the best is kept")
    parser.add_argument("--threads", type=int, default=2, help="CPU intra-op threads")
    parser.add_argument("--memory", action="store_true",
                        help="measure the generator's saved activation bytes instead of speed (see above)")
    parser.add_argument("--memory-batches", nargs=2, type=int, default=[1, 2], metavar=("B1", "B2"))
    parser.add_argument("--projected-batch", type=int, default=32)
    parser.add_argument("--output", type=Path, default=None,
                        help=f"CSV to append to (default {RESULTS.name}, with --memory {MEMORY_RESULTS.name})")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        device = torch.device(args.device)
    except RuntimeError as error:
        print(f"error: unsupported device {args.device!r}: {error}", file=sys.stderr)
        return 2
    try:
        check_request(device, args.implementations, args.mixed_precision, args.configs, args.batch)
        device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else (
            platform.processor() or platform.machine() or "cpu")
        if args.memory:
            return run_memory(args, device, device_name)
        args.output = args.output or RESULTS
        print(f"device={device} ({device_name}) threads={torch.get_num_threads()} torch={torch.__version__} "
              f"triton={_triton_version() or '-'} steps={args.steps} rounds={args.rounds}")
        args.output.parent.mkdir(parents=True, exist_ok=True)
        new_file = not args.output.exists()
        with open(args.output, "a", newline="") as stream:
            writer = csv.DictWriter(stream, fieldnames=FIELDS, lineterminator="\n")
            if new_file:
                writer.writeheader()
            for name in args.configs:
                for batch in args.batch:
                    best: dict[str, dict] = {}
                    for _ in range(args.rounds):
                        for implementation in args.implementations:
                            row = run_one(name, batch, implementation, args.mixed_precision, device, args.steps)
                            previous = best.get(implementation)
                            if previous is None or row["train_s_per_kimg"] < previous["train_s_per_kimg"]:
                                row["generate_images_per_s"] = max(
                                    row["generate_images_per_s"],
                                    previous["generate_images_per_s"] if previous else 0.0)
                                best[implementation] = row
                            else:
                                previous["generate_images_per_s"] = max(previous["generate_images_per_s"],
                                                                        row["generate_images_per_s"])
                    for implementation, row in best.items():
                        record = {"config": name, "batch": batch, "implementation": implementation,
                                  "mixed_precision": args.mixed_precision, "device": str(device),
                                  "device_name": device_name, "threads": torch.get_num_threads(),
                                  "torch": torch.__version__, "triton": _triton_version(),
                                  "git_commit": git_sha() or "", "steps": args.steps, "rounds": args.rounds,
                                  "train_s_per_kimg": f"{row['train_s_per_kimg']:.2f}",
                                  "generate_images_per_s": f"{row['generate_images_per_s']:.2f}",
                                  "peak_memory_gib": "" if row["peak_memory_gib"] is None
                                  else f"{row['peak_memory_gib']:.2f}",
                                  "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
                        writer.writerow(record)
                        stream.flush()
                        print(f"{name:<14} batch {batch:<4} {implementation:<10} train {record['train_s_per_kimg']:>9}"
                              f" s/kimg   generate {record['generate_images_per_s']:>8} img/s   peak "
                              f"{record['peak_memory_gib'] or '-'} GiB")
    except BenchmarkError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


def run_memory(args, device: torch.device, device_name: str) -> int:
    """The ``--memory`` mode: one row per config and implementation."""
    low, high = args.memory_batches
    if not 1 <= low < high:
        raise BenchmarkError(f"--memory-batches needs 1 <= B1 < B2, got {low} {high}")
    output = args.output or MEMORY_RESULTS
    output.parent.mkdir(parents=True, exist_ok=True)
    new_file = not output.exists()
    print(f"saved activations of a generator training forward: device={device} ({device_name}) "
          f"torch={torch.__version__} batches {low} and {high}, projected to {args.projected_batch}")
    with open(output, "a", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=MEMORY_FIELDS, lineterminator="\n")
        if new_file:
            writer.writeheader()
        for name in args.configs:
            for implementation in args.implementations:
                row = memory_row(name, implementation, args.mixed_precision, (low, high), device,
                                 args.projected_batch)
                record = {"config": name, "implementation": implementation, "mixed_precision": args.mixed_precision,
                          "device": str(device), "device_name": device_name, "torch": torch.__version__,
                          "git_commit": git_sha() or "", **row,
                          "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
                writer.writerow(record)
                stream.flush()
                official = f", official whole step {row['official_peak_gib']} GiB" if row["official_peak_gib"] else ""
                print(f"{name:<14} {implementation:<10} {args.mixed_precision:<5} {row['saved_mib_per_image']:>8} "
                      f"MiB/image + {row['saved_mib_fixed']:>6} MiB fixed -> {row['projected_gib']:>6} GiB at batch "
                      f"{args.projected_batch}{official} ({row['seconds']} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
