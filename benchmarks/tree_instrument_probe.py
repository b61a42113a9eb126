"""How the vessel-tree statistics of the generators chapter respond to mild degradations of real images.

The vessel-tree check (generators chapter) compares skeleton statistics of U-Net vessel masks of generated and real
images. A good instrument reads real images that lost nothing the eye sees (faint Gaussian noise, JPEG at quality
90) as the same trees. This script measures that, for each smallest kept mask piece (``TREE_MIN_AREA``): the
chapter's evaluation reals (``EVAL_IMAGES`` of the cohort at the generator's side, the run's cohort-trained U-Net,
threshold 0.5), clean and degraded (Gaussian noise, JPEG, a 3x3 binomial blur, 64 px and back), and the shipped
fundus generator's samples when a weights file matches (``--weights-dir``).

``TREE_MIN_AREA`` is chosen from the real images alone: the smallest candidate at which JPEG at quality 90 and
Gaussian noise of SD 0.02 keep both tree statistics (skeleton length per piece, junctions per image) within half of
``TREE_TOLERANCE`` of the clean images'. Rows (one per degradation and candidate) go to
``benchmarks/results/tree_instrument.csv`` with the thread count, processor and commit.

Usage:
    python benchmarks/tree_instrument_probe.py                      # the quick chapter's 128 px fundus evaluation
    python benchmarks/tree_instrument_probe.py --min-areas 0 12 --no-write
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch

from anonpaper.experiments.generators.config import Config
from anonpaper.experiments.generators.pipeline import (MASK_THRESHOLD, TREE_STATISTICS, aggregate_skeletons,
                                                       evaluation_instruments, evaluation_reals, generate,
                                                       jpeg_round_trip, load_shipped_generator, relative_difference,
                                                       skeleton_rows, to_cohort_size)
from anonpaper.methods.baselines import gaussian_noise
from anonpaper.metrics.quality import mse
from anonpaper.runtime import git_sha
from anonpaper.train.segmenter import segment

RESULTS = Path(__file__).resolve().parent / "results" / "tree_instrument.csv"
KIND = "fundus-sg2"
# The generators chapter's evaluation of the shipped fundus run (its recorded settings).
EVALUATION = {"eval_images": 200, "segmenter_epochs": 15, "classifier_backbone": "small_cnn", "classifier_epochs": 20,
              "retina_patients": 300, "cxr_patients": 120}
# The degradations that the rule reads (the eye sees no change in them at 128 px).
RULE_SETTINGS = ("jpeg q90", "noise sd 0.02")
FIELDS = ["setting", "min_area", "psnr_db", "vessel_fraction", "length_per_image", "pieces_per_image",
          "length_per_piece", "largest_piece", "junctions_per_image", "change_length_per_piece",
          "change_junctions_per_image", "image_size", "images", "threads", "device_name", "git_commit", "timestamp"]


def degraded(real: torch.Tensor, seed: int) -> dict[str, torch.Tensor]:
    """The real images and their mild degradations, (N, 3, R, R) in [0, 1] each."""
    binomial = torch.tensor([1.0, 2.0, 1.0])
    kernel = (binomial[:, None] * binomial[None]) / 16
    blurred = torch.nn.functional.conv2d(torch.nn.functional.pad(real, (1, 1, 1, 1), mode="replicate"),
                                         kernel.expand(real.shape[1], 1, 3, 3), groups=real.shape[1])
    side = real.shape[-1]
    down = torch.nn.functional.interpolate(torch.nn.functional.interpolate(real, size=side // 2, mode="area"),
                                           size=side, mode="bilinear", align_corners=False)
    sets = {"real": real}
    for sigma in (0.005, 0.01, 0.02, 0.04):
        sets[f"noise sd {sigma:g}"] = gaussian_noise(real, sigma, seed)
    for quality in (90, 75, 50):
        sets[f"jpeg q{quality}"] = jpeg_round_trip(real, quality)
    sets["blur 3x3 binomial"] = blurred.clamp(0, 1)
    sets[f"{side // 2} px and back"] = down.clamp(0, 1)
    return sets


def psnr_db(images: torch.Tensor, reference: torch.Tensor) -> float:
    """PSNR of the whole set (pooled squared error; images in [0, 1]), inf for identical sets."""
    error = float(mse(images, reference))
    return float("inf") if error == 0 else 10 * float(np.log10(1.0 / error))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--resolution", type=int, default=128)
    parser.add_argument("--min-areas", type=int, nargs="+", default=[0, 3, 5, 8, 12, 20])
    parser.add_argument("--weights-dir", default="weights", help="shipped weights (samples of the matching file)")
    parser.add_argument("--no-write", action="store_true", help="print the rows, append nothing")
    args = parser.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    config = Config(image_size=args.resolution, weights_dir=args.weights_dir,
                    **{name: value for name, value in EVALUATION.items()})
    (segmenter, info), _ = evaluation_instruments(KIND, config, progress=True)
    real, _ = evaluation_reals(KIND, config)
    sets = degraded(real, config.seed)
    shipped = load_shipped_generator(KIND, config) if args.weights_dir else None
    if shipped is not None:
        sets[f"generated ({Path(shipped.weights_file).name}, {shipped.kimg:g} kimg)"] = generate(shipped.generator,
                                                                                             len(real), 12345)
    masks = {name: segment(segmenter, to_cohort_size(images, config, KIND)) >= MASK_THRESHOLD
             for name, images in sets.items()}
    stamp = {"image_size": args.resolution, "images": len(real), "threads": torch.get_num_threads(),
             "device_name": platform.processor() or platform.machine(), "git_commit": git_sha() or "",
             "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    rows, chosen = [], None
    for min_area in args.min_areas:
        statistics = {name: aggregate_skeletons(skeleton_rows(mask, min_area)) for name, mask in masks.items()}
        changes = {name: {statistic: relative_difference(values[statistic], statistics["real"][statistic])
                          for statistic in TREE_STATISTICS} for name, values in statistics.items()}
        for name, values in statistics.items():
            rows.append({"setting": name, "min_area": min_area,
                         "psnr_db": f"{psnr_db(sets[name], real):.2f}" if not name.startswith("generated") else "",
                         "vessel_fraction": f"{masks[name].mean():.4f}",
                         **{key: f"{value:.4f}" for key, value in values.items()},
                         **{f"change_{key}": f"{value:+.4f}" for key, value in changes[name].items()}, **stamp})
        worst = max(abs(changes[name][statistic]) for name in RULE_SETTINGS for statistic in TREE_STATISTICS)
        print(f"min area {min_area:3d}: largest change under {' / '.join(RULE_SETTINGS)} {worst:.3f} "
              f"(half the tolerance: {config.tree_tolerance / 2:g}); generated: "
              + ", ".join(f"{statistic} {value:+.3f}" for name in changes if name.startswith("generated")
                          for statistic, value in changes[name].items()))
        if chosen is None and worst <= config.tree_tolerance / 2:
            chosen = min_area
    print(f"U-Net validation Dice {info['val_dice']:.3f}; TREE_MIN_AREA by the rule: {chosen} "
          f"(the chapter's default: {Config().tree_min_area})")
    if not args.no_write:
        from result_rows import append_rows  # beside this script; on sys.path when it runs as a script

        append_rows(RESULTS, FIELDS, rows)
        print(f"{len(rows)} rows -> {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
