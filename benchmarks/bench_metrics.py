"""Throughput of every metric in ``anonpaper.metrics`` on 1,000 image pairs of 256 x 256 RGB, one CPU thread.

Run: ``.venv/bin/python benchmarks/bench_metrics.py [--images 1000] [--size 256] [--batch 25] [--budget 20]``.

Each metric runs batch by batch over up to ``--images`` image pairs drawn cyclically from a pool of ``--pool``
deterministic synthetic pairs (smooth random textures with rendered branching vessels, so SIFT and the bifurcation
detector find realistic numbers of keypoints; the "edited" image is the original with noise and shifted vessels;
the pool is generated once, outside the timings, to keep memory small). When a metric's elapsed time passes ``--budget``
seconds it stops early, and the line says how many images were measured and the extrapolated time for all
``--images`` (linear extrapolation; marked ``extrapolated``). Set-level metrics (Frechet distance, KID, SWD) are
timed once on the number of images processed; FD/KID use 2048-d random features like Inception's pool3.

Output: one line per metric: images measured, wall seconds, CPU seconds of this process (less sensitive to other
processes on a shared machine), images per wall second, and wall seconds for ``--images`` images.
"""

from __future__ import annotations

import argparse
import time

import cv2
import numpy as np
import torch

from anonpaper import metrics


def synthetic_batch(start: int, count: int, size: int) -> tuple[torch.Tensor, torch.Tensor, np.ndarray, np.ndarray]:
    """Originals and edits (N, 3, S, S) in [0, 1] plus their vessel masks (N, S, S) uint8; deterministic in start."""
    originals, edits, masks, edit_masks = [], [], [], []
    for index in range(start, start + count):
        rng = np.random.default_rng(index)
        background = cv2.GaussianBlur(rng.random((size, size, 3)).astype(np.float32), (0, 0), 6)
        background = (background - background.min()) / (np.ptp(background) + 1e-6) * 0.4 + 0.3
        mask = np.zeros((size, size), np.uint8)
        for _ in range(6):
            point = rng.uniform(0.3, 0.7, size=2) * size
            angle = rng.uniform(0, 2 * np.pi)
            for _ in range(int(rng.integers(10, 25))):
                angle += rng.normal(0, 0.35)
                nxt = point + size / 40 * np.array([np.cos(angle), np.sin(angle)])
                cv2.line(mask, tuple(int(v) for v in point), tuple(int(v) for v in nxt), 1, int(rng.integers(1, 4)))
                point = nxt
        edit_mask = np.roll(mask, (int(rng.integers(-6, 7)), int(rng.integers(-6, 7))), (0, 1))
        image = background * (1 - 0.5 * mask[..., None])
        edit = np.clip(background * (1 - 0.5 * edit_mask[..., None]) + rng.normal(0, 0.03, image.shape), 0, 1)
        originals.append(image.transpose(2, 0, 1))
        edits.append(edit.transpose(2, 0, 1))
        masks.append(mask)
        edit_masks.append(edit_mask)
    to_tensor = lambda arrays: torch.from_numpy(np.stack(arrays).astype(np.float32))  # noqa: E731
    return to_tensor(originals), to_tensor(edits), np.stack(masks), np.stack(edit_masks)


class TinyTaps(torch.nn.Module):
    """8-tap conv stack (channels 8-64) standing in for the segmentation U-Net of the domain LPIPS."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        widths = [3, 8, 16, 32, 64]
        self.down = torch.nn.ModuleList(torch.nn.Conv2d(widths[i], widths[i + 1], 3, padding=1) for i in range(4))
        self.up = torch.nn.ModuleList(torch.nn.Conv2d(widths[i + 1], widths[i + 1], 3, padding=1) for i in range(4))

    def forward(self, images: torch.Tensor) -> list[torch.Tensor]:
        taps, current = [], images
        for layer in self.down:
            current = torch.nn.functional.avg_pool2d(torch.relu(layer(current)), 2)
            taps.append(current)
        for layer in self.up:
            taps.append(torch.relu(layer(taps[len(taps) - 4])))
        return taps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--batch", type=int, default=25)
    parser.add_argument("--pool", type=int, default=100, help="distinct synthetic pairs, reused cyclically")
    parser.add_argument("--budget", type=float, default=20.0, help="seconds per metric before extrapolating")
    args = parser.parse_args()
    torch.set_num_threads(1)
    taps = TinyTaps().eval()

    paired = {
        "mse": lambda a, b, m, n: metrics.mse(a, b, reduction="none"),
        "psnr": lambda a, b, m, n: metrics.psnr(a, b, reduction="none"),
        "ssim": lambda a, b, m, n: metrics.ssim(a, b, reduction="none"),
        "iw_ssim (5 scales)": lambda a, b, m, n: metrics.iw_ssim(a, b, reduction="none"),
        "feature_tap_distance (8 taps)": lambda a, b, m, n: metrics.feature_tap_distance(a, b, taps),
        "fs_sift": lambda a, b, m, n: metrics.fs_sift(a, b, reduction="none"),
        "bifurcation FS_SR baseline": lambda a, b, m, n: [
            metrics.bifurcation_keypoint_similarity(a[i, 1].numpy(), m[i], b[i, 1].numpy(), n[i])
            for i in range(a.shape[0])
        ],
        "rroi": lambda a, b, m, n: metrics.rroi(torch.from_numpy(m[:, None].astype(np.float32)), a, b),
    }
    print(f"# {args.images} images of {args.size}x{args.size} RGB, batch {args.batch}, 1 thread, "
          f"budget {args.budget:.0f} s per metric")
    print(f"{'metric':34s} {'measured':>8s} {'wall s':>9s} {'cpu s':>9s} {'images/s':>10s} "
          f"{'s per ' + str(args.images):>12s}")

    def report(name: str, measured: int, wall: float, cpu: float, total_seconds: float) -> None:
        note = "" if measured == args.images else " (extrapolated)"
        print(f"{name:34s} {measured:8d} {wall:9.2f} {cpu:9.2f} {measured / wall:10.1f} {total_seconds:12.1f}{note}",
              flush=True)

    start = time.perf_counter()
    pool = synthetic_batch(0, args.pool, args.size)
    generation_seconds = time.perf_counter() - start

    def batch_at(offset: int, count: int):
        index = (np.arange(offset, offset + count) % args.pool)
        return pool[0][index], pool[1][index], pool[2][index], pool[3][index]

    for name, function in paired.items():
        done, elapsed, cpu = 0, 0.0, 0.0
        while done < args.images and elapsed < args.budget:
            count = min(args.batch, args.images - done)
            batch = batch_at(done, count)
            start, start_cpu = time.perf_counter(), time.process_time()
            with torch.no_grad():
                function(*batch)
            elapsed += time.perf_counter() - start
            cpu += time.process_time() - start_cpu
            done += count
        report(name, done, elapsed, cpu, elapsed * args.images / done)

    # Set-level metrics.
    rng = np.random.default_rng(0)
    features_real = rng.normal(size=(args.images, 2048))
    features_fake = rng.normal(loc=0.1, size=(args.images, 2048))
    set_level = {
        "frechet_distance 2048-d sqrtm": lambda: metrics.frechet_distance(features_real, features_fake),
        "frechet_distance 2048-d eigh": lambda: metrics.frechet_distance(features_real, features_fake, "eigh"),
        "kid 2048-d, 100 subsets": lambda: metrics.kernel_inception_distance(
            features_real, features_fake, subset_size=min(1000, args.images), subsets=100
        ),
    }
    for name, function in set_level.items():
        start, start_cpu = time.perf_counter(), time.process_time()
        function()
        wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        report(name, args.images, wall, cpu, wall)
    swd_images = min(args.images, 200)  # two sets of 1000 x 3 x 256 x 256 float32 would need 1.6 GB
    first, second, _, _ = batch_at(0, swd_images)
    start, start_cpu = time.perf_counter(), time.process_time()
    metrics.swd(first, second)
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    report("swd (progressive-GAN protocol)", swd_images, wall, cpu, wall * args.images / swd_images)
    print(f"# synthetic pool generation (not counted above): {generation_seconds:.1f} s for {args.pool} pairs")


if __name__ == "__main__":
    main()
