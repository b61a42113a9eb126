"""Train the SuperRetina-style keypoint detector on retina phantoms and test FS_SR as an identity verifier.

Run on demand (not a test):
    .venv/bin/python benchmarks/train_keypoint_detector.py [--patients 60] [--size 128] [--epochs 15]
        [--synthetic-warps] [--acquisition-strength 1.0] [--dense-anchors 64] [--top-k 100 200]

Training uses the train-split patients' images with the phantom's exact bifurcations and crossings; verification
pairs (half same patient, half different, :func:`anonpaper.experiments.cohorts.identity_pairs`) are drawn from the
test-split patients, never seen in training. For every pair it prints the AUROC (1 = same/different perfectly
separated, 0.5 = chance) of: FS_SR with the learned detector, the classical bifurcation baseline (skeleton
junctions of the EXACT phantom vessel masks + patch descriptors) and FS_SIFT. It also prints the detector's
keypoint precision/recall within 3 px against the exact keypoints on the test images. One CPU thread.

By default the descriptors train on true cross-acquisition pairs (two images of one train patient, correspondences
from the renderer's poses, :func:`anonpaper.train.keypoints.cohort_pairs`) with acquisition jitter and 64 dense
anchors per image (the settings of :func:`anonpaper.train.pretrained.trained_keypoint_detector`);
``--synthetic-warps --acquisition-strength 0 --dense-anchors 0`` is the earlier synthetic-warp-only training.
The detection setting (threshold x top_k) with the best AUROC on pairs of the VALIDATION patients is reported
separately as the selected one; the test pairs never choose a setting.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from anonpaper.data.phantoms.retina import load_phantom_retina
from anonpaper.experiments.cohorts import identity_pairs
from anonpaper.metrics import images_from_uint8
from anonpaper.metrics.identity import bifurcation_keypoint_similarity, fs_sift, verification_auc
from anonpaper.models.keypoints import KeypointNet, detection_precision_recall, fs_sr
from anonpaper.train.keypoints import cohort_keypoints, cohort_pairs, train_keypoint_detector
from anonpaper.train.loop import TrainSettings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patients", type=int, default=60)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--thresholds", type=float, nargs="+", default=[0.05, 0.1, 0.2, 0.3],
                        help="detection thresholds to report (all are printed: no selection on the test pairs)")
    parser.add_argument("--top-k", type=int, nargs="+", default=[100],
                        help="keypoint budgets to report (each with every threshold)")
    parser.add_argument("--synthetic-warps", action="store_true",
                        help="train descriptors on warps of one image only (not on two images of one patient)")
    parser.add_argument("--acquisition-strength", type=float, default=1.0,
                        help="extra colour/illumination/blur/noise jitter of both training views (0 = off)")
    parser.add_argument("--dense-anchors", type=int, default=64,
                        help="random descriptor anchors per training image besides the keypoints (0 = off)")
    parser.add_argument("--save", default=None, help="optional path for the trained weights (torch.save)")
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args()
    torch.set_num_threads(1)

    started = time.perf_counter()
    cohort = load_phantom_retina(n_patients=arguments.patients, images_per_patient=(2, 3),
                                 image_size=arguments.size, seed=arguments.seed)
    train = cohort.split("train")
    test = cohort.split("test")
    train_images = train.load_images()
    train_points = cohort_keypoints(train)
    test_images = test.load_images()
    test_points = cohort_keypoints(test)
    print(f"phantom: {len(train)} train images ({train.table.patient_id.nunique()} patients), {len(test)} test "
          f"images ({test.table.patient_id.nunique()} patients), {np.mean([len(p) for p in train_points]):.1f} "
          f"keypoints/image; rendered in {time.perf_counter() - started:.1f} s")

    model = KeypointNet(in_channels=3, descriptor_dim=arguments.dim, base_width=arguments.width, depth=3)
    started = time.perf_counter()
    pair_options = {}
    if not arguments.synthetic_warps:
        train_pairs, train_transforms = cohort_pairs(train)
        pair_options = {"pairs": train_pairs, "pair_transforms": train_transforms}
        print(f"cross-acquisition training: {len(train_pairs)} ordered same-patient pairs")
    result = train_keypoint_detector(model, train_images, train_points,
                                     TrainSettings(epochs=arguments.epochs, lr=arguments.lr, seed=arguments.seed,
                                                   device="cpu", progress=False),
                                     acquisition_strength=arguments.acquisition_strength,
                                     dense_anchors=arguments.dense_anchors, **pair_options)
    print(f"trained {arguments.epochs} epochs in {time.perf_counter() - started:.1f} s; loss "
          f"{result.history.train_loss.iloc[0]:.3f} -> {result.history.train_loss.iloc[-1]:.3f}")
    if arguments.save:
        torch.save({"config": result.model.config, "state_dict": result.model.state_dict()}, arguments.save)
    pairs = identity_pairs(test.table["patient_id"].to_numpy(), arguments.pairs, arguments.seed)
    first, second = test_images[pairs["first"]], test_images[pairs["second"]]
    same = pairs["same"].to_numpy()
    print(f"{len(pairs)} test pairs ({int(same.sum())} same patient)")
    settings = [(threshold, top_k) for top_k in arguments.top_k for threshold in arguments.thresholds]
    val = cohort.split("val")
    val_images = val.load_images()
    val_pairs = identity_pairs(val.table["patient_id"].to_numpy(), arguments.pairs, arguments.seed + 1)
    val_same = val_pairs["same"].to_numpy()
    val_auroc = {}
    for threshold, top_k in settings:
        scores = fs_sr(result.model, val_images[val_pairs["first"]], val_images[val_pairs["second"]],
                       reduction="none", top_k=top_k, nms_radius=3, threshold=threshold)
        val_auroc[threshold, top_k] = verification_auc(scores, val_same, higher_means_same=True)
    chosen = max(settings, key=lambda setting: (val_auroc[setting], -settings.index(setting)))
    print(f"val pairs: {len(val_pairs)} ({int(val_same.sum())} same patient, {val.table.patient_id.nunique()} "
          f"patients); val AUROC per (threshold, top_k): "
          f"{ {setting: round(value, 3) for setting, value in val_auroc.items()} }; selected {chosen}")
    rows = []
    for threshold, top_k in settings:
        options = {"top_k": top_k, "nms_radius": 3, "threshold": threshold}
        quality = detection_precision_recall(result.model, test_images, test_points, **options)
        print(f"  threshold {threshold}, top_k {top_k}: detection on test images (3 px) "
              f"{ {key: round(value, 3) for key, value in quality.items()} }")
        marker = " [val-selected]" if (threshold, top_k) == chosen else ""
        rows.append((f"FS_SR learned, thr {threshold}, top_k {top_k}{marker}",
                     fs_sr(result.model, first, second, reduction="none", **options)))
    vessel = test.load_masks("vessel")
    green = test_images[..., 1].astype(np.float32) / 255.0
    classical = np.array([bifurcation_keypoint_similarity(green[a], vessel[a], green[b], vessel[b])
                          for a, b in zip(pairs["first"], pairs["second"])])
    sift = fs_sift(images_from_uint8(first), images_from_uint8(second), reduction="none")
    for name, scores in rows + [("bifurcation baseline (exact masks)", classical), ("FS_SIFT", sift)]:
        print(f"  {name:44s} AUROC {verification_auc(scores, same, higher_means_same=True):.3f}   "
              f"mean same {scores[same].mean():.3f}  different {scores[~same].mean():.3f}")


if __name__ == "__main__":
    main()
