"""Is the fundus DR-grade deficit of the shipped generator a softness that the grade reader mistakes for health?

The generators chapter reads the DR grades of generated fundus images with a classifier trained from scratch on the
real cohort images (``resnet10t``, focal loss, 20 epochs), and k-SALSA reads the members' reconstructions ``G(w)``
with the same classifier. The generator's images read as healthier than the real ones (about 58 % grade 0 against
30 %), and the reconstructions read as grade 0 throughout (QWK 0.00). A reader trained on the phantom's sharp
renderings could mistake any loss of fine detail for health, since microaneurysms are one or two pixels at 128 px.
This probe separates the two readings:

1. It reads the held-out real check images, clean and mildly degraded (``tree_instrument_probe.degraded``: Gaussian
   noise, JPEG, a 3x3 binomial blur, half size and back), with the chapter's reader and with the same recipe trained
   on images degraded the way nnU-Net augments (Isensee et al., Nature Methods 2021: Gaussian blur of sigma 0.5-1
   px, low-resolution simulation at 0.5-1x, additive Gaussian noise). A reader that keeps its QWK and its grade
   shares on blurred real images cannot blame blur for what it reads off generated ones.
2. It reads the chapter's generated evaluation samples (the same seed) with both readers: the total variation of
   their grade shares from the real evaluation images'.
3. It inverts held-out real images into W+ as k-SALSA does (``k_salsa.pipeline.invert``: StyleGAN2-ADA projector,
   no noise maps), from the mean w and from the nearest of a pool of random samples (by the pixel distance of
   4x-pooled images, so a start with lesions when the target has them), and grades the reconstructions with both
   readers (QWK against the true grades, grade shares).

Rows (one per reader and image set) go to ``benchmarks/results/label_instrument.csv`` with the thread count,
processor and commit.

Usage:
    python benchmarks/label_instrument_probe.py                     # the quick chapter's 128 px fundus evaluation
    python benchmarks/label_instrument_probe.py --inversions 4 --projector-steps 5 --epochs 1 --no-write
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from anonpaper.experiments.generators.config import Config
from anonpaper.experiments.generators.labels import (_probabilities, label_classifier, label_columns,
                                                     label_sets)
from anonpaper.experiments.generators.pipeline import (evaluation_reals, generate, kind_cohort,
                                                       load_shipped_generator)
from anonpaper.experiments.k_salsa.pipeline import invert
from anonpaper.metrics.classification import quadratic_weighted_kappa
from anonpaper.models.classifiers import build_classifier
from anonpaper.runtime import derive_seed, git_sha
from anonpaper.train.augment import DegradationAugment
from anonpaper.train.classifier import train_classifier
from anonpaper.train.loop import TrainSettings

RESULTS = Path(__file__).resolve().parent / "results" / "label_instrument.csv"
KIND = "fundus-sg2"
GRADES = 5
FIELDS = ["reader", "images", "setting", "count", "qwk", "grade_0", "grade_1", "grade_2", "grade_3", "grade_4",
          "distance", "distance_to", "projector_steps", "psnr_db", "image_size", "threads", "device_name",
          "git_commit", "timestamp"]


def robust_reader(config: Config, sets, epochs: int, strength: float) -> torch.nn.Module:
    """The chapter's DR-reader recipe (``label_classifier``), trained on degraded images."""
    torch.manual_seed(derive_seed(config.seed, "dr-init"))
    model = build_classifier(config.classifier_backbone, 3, GRADES)
    batch = int(min(32, max(2, len(sets.train[1]))))
    settings = TrainSettings(epochs=epochs, batch_size=batch, lr=1e-3, lr_schedule="cosine",
                             seed=derive_seed(config.seed, "dr"), device="cpu", progress=False)
    return train_classifier(model, sets.train, sets.val, settings, loss="focal", focal_gamma=0.6,
                            augment=DegradationAugment(strength)).model.cpu().eval()


def grade_shares(grades: np.ndarray) -> np.ndarray:
    """Share of each of the five grades, (5,)."""
    return np.bincount(grades, minlength=GRADES) / max(len(grades), 1)


def total_variation(first: np.ndarray, second: np.ndarray) -> float:
    """Half the L1 distance of two share vectors (the chapter's label distance)."""
    return float(np.abs(first - second).sum() / 2)


def nearest_sample_codes(generator, targets: torch.Tensor, pool: int, seed: int) -> torch.Tensor:
    """W+ codes (N, L, D) of the random sample (of ``pool``) nearest to each target in 4x-pooled pixels."""
    draws = torch.Generator().manual_seed(seed)
    best = torch.full((len(targets),), float("inf"))
    codes = None
    pooled_targets = F.avg_pool2d(targets, 4)
    with torch.no_grad():
        for start in range(0, pool, 50):
            ws = generator.mapping(torch.randn(min(50, pool - start), generator.z_dim, generator=draws))
            images = (generator.synthesis(ws, noise_mode="const").clamp(-1, 1) + 1) / 2
            distance = ((F.avg_pool2d(images, 4)[None] - pooled_targets[:, None]) ** 2).mean(dim=(2, 3, 4))
            value, index = distance.min(1)
            codes = ws[index].clone() if codes is None else codes
            closer = value < best
            best[closer], codes[closer] = value[closer], ws[index[closer]]
    return codes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=None, help="reader epochs (default: the chapter's)")
    parser.add_argument("--strength", type=float, default=2.5, help="degradation probabilities x nnU-Net's")
    parser.add_argument("--inversions", type=int, default=24, help="held-out images inverted (0: none)")
    parser.add_argument("--projector-steps", type=int, default=100, help="W+ projector steps (k-SALSA's quick)")
    parser.add_argument("--pool", type=int, default=2000, help="random samples the nearest start is chosen from")
    parser.add_argument("--weights-dir", default="weights")
    parser.add_argument("--no-write", action="store_true", help="print the rows, append nothing")
    args = parser.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    config = Config(weights_dir=args.weights_dir)
    epochs = args.epochs or config.classifier_epochs
    from tree_instrument_probe import degraded  # beside this script; on sys.path when it runs as a script

    cohort = kind_cohort(KIND, config)
    _, columns, _ = label_columns(KIND, cohort)
    sets = label_sets(cohort, KIND, columns, config, config.seed)
    # The commit is read before the work: a checkout edited while the probe runs does not relabel its rows.
    stamp = {"image_size": config.image_size, "threads": torch.get_num_threads(),
             "device_name": platform.processor() or platform.machine(), "git_commit": git_sha() or "",
             "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    started = time.perf_counter()
    readers = {"chapter": label_classifier(KIND, config, backbone=config.classifier_backbone, epochs=epochs,
                                           progress=False).model,
               "degradation-trained": robust_reader(config, sets, epochs, args.strength)}
    print(f"readers ready in {time.perf_counter() - started:.0f} s", flush=True)
    check = torch.from_numpy(sets.check[0]).permute(0, 3, 1, 2).float() / 255
    truth = sets.check[1]
    real, _ = evaluation_reals(KIND, config)
    shipped = load_shipped_generator(KIND, config)
    generated = generate(shipped.generator, len(real), derive_seed(config.seed, "samples", KIND))
    image_sets = {("check", name): (images, truth) for name, images in degraded(check, config.seed).items()}
    image_sets[("evaluation", "real")] = (real, None)
    image_sets[("evaluation", "generated")] = (generated, None)
    steps = {}
    if args.inversions:
        pick = np.sort(np.random.default_rng(config.seed).choice(len(check), min(args.inversions, len(check)),
                                                                 replace=False))
        targets = check[pick]
        image_sets[("inverted", "targets")] = (targets, truth[pick])  # first: the reconstructions' reference
        starts = {"mean w": None,
                  f"nearest of {args.pool}": nearest_sample_codes(shipped.generator, targets, args.pool,
                                                                 config.seed)}
        for start_name, initial in starts.items():
            inversion = invert(shipped.generator, targets, args.projector_steps, config.seed, initial_ws=initial)
            name = f"reconstruction from {start_name}"
            image_sets[("inverted", name)] = (inversion.reconstructions, truth[pick])
            steps[name] = (args.projector_steps, float(np.mean(inversion.psnr)))
    rows = []
    for reader_name, reader in readers.items():
        shares = {}
        for (group, name), (images, labels) in image_sets.items():
            grades = _probabilities(reader, "grade", images).argmax(1)
            shares[(group, name)] = grade_shares(grades)
            reference = {"check": ("check", "real"), "evaluation": ("evaluation", "real"),
                         "inverted": ("inverted", "targets")}[group]
            distance = total_variation(shares[(group, name)], shares[reference]) if reference in shares else 0.0
            qwk = quadratic_weighted_kappa(labels, grades, GRADES) if labels is not None else float("nan")
            projector_steps, psnr_db = steps.get(name, ("", float("nan")))
            rows.append({"reader": reader_name, "images": group, "setting": name, "count": len(images),
                         "qwk": f"{qwk:.4f}", **{f"grade_{grade}": f"{share:.4f}" for grade, share
                                                 in enumerate(shares[(group, name)])},
                         "distance": f"{distance:.4f}", "distance_to": " ".join(reference),
                         "projector_steps": projector_steps, "psnr_db": f"{psnr_db:.2f}", **stamp})
            print(f"{reader_name:19s} {group:10s} {name:32s} QWK {qwk:6.3f} shares "
                  f"{np.round(shares[(group, name)], 3)} TV to {' '.join(reference)} {distance:.3f}", flush=True)
    if not args.no_write:
        from result_rows import append_rows

        append_rows(RESULTS, FIELDS, rows)
        print(f"{len(rows)} rows -> {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
