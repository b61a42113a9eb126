"""Speed of the vascular chapter's metric stage: the originals measured once per image set against once per record.

Every method and strength of the vascular sweep compares its edits with the same originals. The chapter measures
the originals' side of the pairs once per image set (:func:`anonpaper.experiments.vascular.pipeline.
original_measures` and :func:`~anonpaper.experiments.vascular.pipeline.judged_originals`); this script times
``--records`` records (one edit of ``--images`` images each, measured by ``measure_unjudged`` and by
``measure_judged`` of ``--judges`` judge seeds) both ways, the one-off measurement of the originals included.
The networks have the chapter's architectures (vessel and exudate U-Nets, keypoint detector, DR ``small_cnn``) with
random weights: speed does not depend on training. The attacker's rank-1 is left out (no gallery); it reads the
edits only. Timed in CPU seconds of this process and in wall seconds (one thread: the work done, less sensitive to
other processes on a shared machine). The numbers must agree both ways; the script checks it.

Each run appends a CSV row to ``benchmarks/results/vascular_metrics.csv`` with the device name, thread count, torch
version and git commit.

Usage:
    python benchmarks/bench_vascular_metrics.py                        # 128 px, 64 images, 3 judges, 6 records
    python benchmarks/bench_vascular_metrics.py --size 64 --records 34  # the quick sweep's records per image set
"""

from __future__ import annotations

import argparse
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from anonpaper.experiments.vascular import pipeline
from anonpaper.models.classifiers import build_classifier
from anonpaper.models.keypoints import KeypointNet
from anonpaper.models.unet import UNet
from anonpaper.runtime import git_sha

RESULTS = Path(__file__).resolve().parent / "results" / "vascular_metrics.csv"
FIELDS = ("device_name", "threads", "torch", "git_commit", "size", "images", "judges", "records",
          "each_record_cpu_s", "each_record_wall_s", "once_cpu_s", "once_wall_s", "speedup", "timestamp")


def judge(size: int) -> pipeline.Instruments:
    """One judge seed's instruments with the chapter's architectures and random weights."""
    return pipeline.Instruments(UNet(3, 1, base_width=8, depth=4).eval(), UNet(3, 1, base_width=8, depth=4).eval(),
                                KeypointNet(3, descriptor_dim=32, base_width=16, depth=3).eval(), None,
                                pd.DataFrame(), size, build_classifier("small_cnn", 3, 5).eval(), 5)


def sweep(judges, originals, edits, real_features, once: bool) -> list:
    """The records' measures, the originals measured once (``once``) or with every record."""
    measured = pipeline.original_measures(judges[0], originals) if once else None
    per_judge = [pipeline.judged_originals(item, originals) if once else None for item in judges]
    rows = []
    for edited in edits:
        rows.append(pipeline.measure_unjudged(judges[0], originals, edited, real_features, measured)[0])
        for item, judged in zip(judges, per_judge):
            rows.append(pipeline.measure_judged(item, originals, edited, None, np.arange(len(originals)), 20, 0,
                                                judged)[0])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=128, help="image side in pixels (the generator's and cohort's)")
    parser.add_argument("--images", type=int, default=64, help="images per edit (EVAL_IMAGES / REAL_IMAGES)")
    parser.add_argument("--judges", type=int, default=3, help="judge seeds (JUDGE_SEEDS)")
    parser.add_argument("--records", type=int, default=6, help="edits measured against the same originals")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--no-write", action="store_true", help="print the row without appending it")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    judges = [judge(args.size) for _ in range(args.judges)]
    draw = torch.Generator().manual_seed(1)
    shape = (args.images, 3, args.size, args.size)
    originals = torch.rand(shape, generator=draw)
    edits = [(originals + 0.05 * torch.randn(shape, generator=draw)).clamp(0, 1) for _ in range(args.records)]
    real_features = pipeline.fd_features(judges[0], torch.rand(shape, generator=draw))
    timings, results = {}, {}
    for once in (False, True):
        cpu, wall = time.process_time(), time.perf_counter()
        results[once] = sweep(judges, originals, edits, real_features, once)
        timings[once] = (time.process_time() - cpu, time.perf_counter() - wall)
    np.testing.assert_equal(results[True], results[False])  # the same numbers both ways
    row = {"device_name": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
           "torch": torch.__version__, "git_commit": git_sha(), "size": args.size, "images": args.images,
           "judges": args.judges, "records": args.records,
           "each_record_cpu_s": round(timings[False][0], 2), "each_record_wall_s": round(timings[False][1], 2),
           "once_cpu_s": round(timings[True][0], 2), "once_wall_s": round(timings[True][1], 2),
           "speedup": round(timings[False][0] / timings[True][0], 2),
           "timestamp": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    print(row)
    if not args.no_write:
        from result_rows import append_rows

        append_rows(RESULTS, FIELDS, [row])


if __name__ == "__main__":
    main()
