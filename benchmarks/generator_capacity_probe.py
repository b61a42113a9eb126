"""Can a generator architecture draw a retina's vessel tree at all? A capacity probe, apart from GAN training.

A GAN that draws no vessels may lack the capacity to render them or may not have learned them yet (too few kimg,
an unlucky recipe). This probe separates the two without a discriminator: it fits each architecture, weights and
one W+ code per image, to reproduce a few real fundus images of the generators chapter's evaluation set, by pixel
mean squared error plus a weighted squared error of their fine detail (what a 5 px box mean removes: plain MSE
leaves 1-3 px vessels for last), with Adam. It reads the reconstructions with the chapter's own instruments: the
cohort-trained vessel U-Net's masks (Dice against the real images' masks) and the vessel-tree statistics (skeleton
length per connected piece, junctions per image; mask pieces under ``TREE_MIN_AREA`` px dropped) beside the real
images'. The trivial reference is the same real images Gaussian-blurred to the fit's mean PSNR: a fit that keeps
the vessels where a blur of the same pixel error loses them spends its error elsewhere; one that loses them where
the blur loses them too has not fitted far enough to tell (a fit further off than any blur gets no reference). An
architecture that cannot reproduce the vessels of a few images it is fitted to cannot learn them as a
distribution either; one that can has the capacity, and what it lacks is training.

Each variant is a StyleGAN config with optional changes (``CONFIG@RESOLUTION:FIELD=VALUE,...``, as
``bench_stylegan.py`` reads them). A StyleGAN3's running input magnitudes are calibrated first on random latents
(training keeps them as a slow running mean) and then held fixed; a StyleGAN2's noise inputs are its constant
buffers, the same for every image, so no per-image detail hides in them. Rows (one per variant) go to
``benchmarks/results/generator_capacity.csv`` with the steps, the seconds, the thread count, processor and commit.

Usage:
    python benchmarks/generator_capacity_probe.py --configs sg3t-tiny@128 sg3t-tiny@128:channel_base=2048 \\
        sg2-cpu64@128 sg2-cpu128 --images 4 --steps 1500
    python benchmarks/generator_capacity_probe.py --configs sg2-tiny@32 --images 4 --steps 20 --no-write
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch

from anonpaper.experiments.generators.config import Config
from anonpaper.experiments.generators.pipeline import (MASK_THRESHOLD, TREE_STATISTICS, aggregate_skeletons,
                                                       evaluation_instruments, evaluation_reals, relative_difference,
                                                       skeleton_rows, to_cohort_size)
from anonpaper.methods.baselines import blur_to_psnr
from anonpaper.metrics.quality import psnr
from anonpaper.metrics.segmentation import dice_score
from anonpaper.models.stylegan import StyleGenerator
from anonpaper.runtime import git_sha
from anonpaper.train.segmenter import segment

RESULTS = Path(__file__).resolve().parent / "results" / "generator_capacity.csv"
KIND = "fundus-sg2"  # the fundus evaluation set and instruments (the same for every fundus generator)
# The generators chapter's evaluation of the fundus runs (the wide candidate's recorded settings).
EVALUATION = {"eval_images": 200, "segmenter_epochs": 15, "classifier_backbone": "small_cnn", "classifier_epochs": 20,
              "retina_patients": 300, "cxr_patients": 120, "tree_min_area": 12}
DETAIL_WINDOW = 5  # px: the box mean the detail term subtracts (vessels are 1-3 px wide at 128 px)
CALIBRATION_BATCHES = 20  # random-latent passes that set a StyleGAN3's input magnitudes before the fit
FIELDS = ["config", "resolution", "architecture", "generator_params", "images", "steps", "learning_rate",
          "detail_weight", "psnr_db",
          "vessel_dice", "blur_vessel_dice", "blur_sigma", "vessel_fraction_reconstructed", "vessel_fraction_real",
          "length_per_piece_reconstructed", "length_per_piece_real", "junctions_per_image_reconstructed",
          "junctions_per_image_real", "tree_distance", "fit_seconds", "threads", "device_name", "git_commit",
          "timestamp"]


def calibrate_magnitudes(generator: StyleGenerator, batches: int = CALIBRATION_BATCHES, seed: int = 0) -> None:
    """Set a StyleGAN3's running input magnitudes from ``batches`` passes of random latents (a fast running mean:
    training's beta of 0.999 would need thousands); a StyleGAN2 has none and is left as it is."""
    layers = [module for module in generator.modules() if hasattr(module, "magnitude_ema_beta")]
    if not layers:
        return
    betas = [layer.magnitude_ema_beta for layer in layers]
    for layer in layers:
        layer.magnitude_ema_beta = 0.5
    noise = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _ in range(batches):
            z = torch.randn(8, generator.config.z_dim, generator=noise)
            generator.synthesis(generator.mapping(z), update_emas=True)
    for layer, beta in zip(layers, betas):
        layer.magnitude_ema_beta = beta


def high_pass(images: torch.Tensor, size: int = DETAIL_WINDOW) -> torch.Tensor:
    """What a ``size`` x ``size`` box mean does not keep: vessels one to three pixels wide, edges, texture."""
    return images - torch.nn.functional.avg_pool2d(images, size, stride=1, padding=size // 2,
                                                   count_include_pad=False)


def fit(generator: StyleGenerator, targets: torch.Tensor, steps: int, learning_rate: float,
        detail_weight: float = 0.0, seed: int = 0, report_every: int = 0) -> torch.Tensor:
    """Fit the synthesis network and one W+ code per target image to ``targets`` (N, C, R, R) in [0, 1] by pixel
    MSE plus ``detail_weight`` times the MSE of their :func:`high_pass` (Adam, full batch; plain MSE leaves fine
    structure for last, the detail term weights it up); the generator's output in [-1, 1] is
    mapped to [0, 1]. Prints the PSNR every ``report_every`` steps (0: never), to see whether the fit has levelled
    off. Returns the reconstructions."""
    noise = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        start = generator.mapping(torch.randn(len(targets), generator.config.z_dim, generator=noise))
    codes = torch.nn.Parameter(start.clone())
    parameters = [codes, *generator.synthesis_network.parameters()]
    optimizer = torch.optim.Adam(parameters, lr=learning_rate, betas=(0.9, 0.99))
    for step in range(steps):
        images = (generator.synthesis(codes) + 1) / 2
        loss = torch.nn.functional.mse_loss(images, targets)
        if detail_weight:
            loss = loss + detail_weight * torch.nn.functional.mse_loss(high_pass(images), high_pass(targets))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if report_every and (step + 1) % report_every == 0:
            error = torch.nn.functional.mse_loss(images.detach(), targets).item()
            print(f"  step {step + 1}: pooled PSNR {10 * math.log10(1 / max(error, 1e-12)):.2f} dB", flush=True)
    with torch.no_grad():
        return ((generator.synthesis(codes) + 1) / 2).clamp(0, 1)


def main(argv: list[str] | None = None) -> int:
    from bench_stylegan import parse_config  # beside this script; on sys.path when it runs as a script
    from result_rows import append_rows

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", nargs="+", default=["sg3t-tiny@128", "sg2-cpu64@128"],
                        help="variants: CONFIG[@RESOLUTION][:FIELD=VALUE,...] (all at one resolution)")
    parser.add_argument("--images", type=int, default=8, help="real images to fit (the first of the evaluation set)")
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--learning-rate", type=float, default=0.002)
    parser.add_argument("--detail-weight", type=float, default=10.0,
                        help="weight of the high-pass (5 px box) MSE beside the pixel MSE (0: pixel MSE alone)")
    parser.add_argument("--no-write", action="store_true", help="print the rows, append nothing")
    args = parser.parse_args(argv)
    if args.images < 2 or args.steps < 1 or not args.learning_rate > 0 or args.detail_weight < 0:
        parser.error("--images must be >= 2, --steps >= 1, --learning-rate > 0 and --detail-weight >= 0")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    configs = {name: parse_config(name) for name in args.configs}
    resolutions = {config.resolution for config in configs.values()}
    if len(resolutions) != 1:
        parser.error(f"the variants must share one resolution, got {sorted(resolutions)}")
    config = Config(image_size=resolutions.pop(), **EVALUATION)
    (segmenter, info), _ = evaluation_instruments(KIND, config, progress=True)
    real, _ = evaluation_reals(KIND, config)
    targets = real[: args.images]
    real_masks = segment(segmenter, to_cohort_size(targets, config, KIND)) >= MASK_THRESHOLD
    real_trees = aggregate_skeletons(skeleton_rows(real_masks, config.tree_min_area))
    stamp = {"threads": torch.get_num_threads(), "device_name": platform.processor() or platform.machine(),
             "git_commit": git_sha() or "", "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(f"{len(targets)} real images at {config.image_size} px; vessel U-Net validation Dice {info['val_dice']:.3f}; "
          f"real trees: {real_trees['length_per_piece']:.1f} px per piece, {real_trees['junctions_per_image']:.2f} "
          "junctions per image")
    rows = []
    for name, stylegan_config in configs.items():
        torch.manual_seed(0)
        generator = StyleGenerator(stylegan_config, seed=0)
        calibrate_magnitudes(generator)
        started = time.perf_counter()
        reconstructed = fit(generator, targets, args.steps, args.learning_rate, args.detail_weight,
                            report_every=max(1, args.steps // 5))
        seconds = time.perf_counter() - started
        masks = segment(segmenter, to_cohort_size(reconstructed, config, KIND)) >= MASK_THRESHOLD
        trees = aggregate_skeletons(skeleton_rows(masks, config.tree_min_area))
        mean_psnr = float(psnr(reconstructed, targets, reduction="none").double().mean())
        # The trivial reference at the same pixel error: the real images blurred to the fit's mean PSNR.
        try:
            blurred = blur_to_psnr(targets, mean_psnr, per_image=False)
        except ValueError:  # further off than any blur: no reference at that error
            blurred = None
        blur_masks = None if blurred is None else (
            segment(segmenter, to_cohort_size(blurred.images, config, KIND)) >= MASK_THRESHOLD)
        differences = [relative_difference(trees[statistic], real_trees[statistic]) for statistic in TREE_STATISTICS]
        row = {"config": name, "resolution": stylegan_config.resolution,
               "architecture": stylegan_config.architecture,
               "generator_params": sum(parameter.numel() for parameter in generator.synthesis_network.parameters()),
               "images": len(targets), "steps": args.steps, "learning_rate": args.learning_rate,
               "detail_weight": args.detail_weight,
               "psnr_db": round(mean_psnr, 2), "vessel_dice": round(dice_score(masks, real_masks), 4),
               "blur_vessel_dice": "" if blurred is None else round(dice_score(blur_masks, real_masks), 4),
               "blur_sigma": "" if blurred is None else round(float(blurred.parameter[0]), 3),
               "vessel_fraction_reconstructed": round(float(masks.mean()), 4),
               "vessel_fraction_real": round(float(real_masks.mean()), 4),
               "length_per_piece_reconstructed": round(trees["length_per_piece"], 2),
               "length_per_piece_real": round(real_trees["length_per_piece"], 2),
               "junctions_per_image_reconstructed": round(trees["junctions_per_image"], 3),
               "junctions_per_image_real": round(real_trees["junctions_per_image"], 3),
               "tree_distance": round(max(abs(value) for value in differences), 4)
               if all(np.isfinite(differences)) else "",
               "fit_seconds": round(seconds, 1), **stamp}
        rows.append(row)
        print(f"{name}: PSNR {row['psnr_db']} dB, vessel Dice {row['vessel_dice']} (real images blurred to that "
              f"PSNR, sigma {row['blur_sigma']} px: {row['blur_vessel_dice']}), "
              f"{row['length_per_piece_reconstructed']} px per piece, {row['junctions_per_image_reconstructed']} "
              f"junctions per image, tree distance {row['tree_distance']} ({seconds:.0f} s)")
    if not args.no_write:
        append_rows(RESULTS, FIELDS, rows)
        print(f"{len(rows)} rows -> {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
