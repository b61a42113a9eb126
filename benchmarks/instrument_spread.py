"""How far the cached judges move with their training seed and with the thread count (not a speed benchmark).

The claims of the vascular, GMIA and disentanglement chapters rest on judges trained for seconds to minutes: an
attacker, a DR or finding classifier, U-Nets. Each chapter now trains its judges ``JUDGE_SEEDS`` times and carries
their spread into every claim; this script measures that spread on its own, for each judge's own check, beside the
spread that the thread count alone causes (the same seed trained with 1 and with 2 threads picks other CPU kernels
and reduction orders, and training amplifies the rounding).

For each thread count it starts one worker process (``OMP_NUM_THREADS`` set before torch loads, an empty network
cache of its own, so nothing trained under another thread count is reused) that trains every judge below with
replicate seeds ``0 .. SEEDS - 1`` through the chapters' own trainers (:func:`anonpaper.runtime.replicate_seed`,
``replicate`` arguments) at the chosen profile, and measures its check:

- the vessel U-Net (02, 03): validation Dice;
- the vascular chapter's DR classifier (03): held-out quadratic-weighted kappa;
- the vascular chapter's re-identification attacker (03): validation rank-1;
- GMIA's finding classifier on real images (04): macro AUROC on the real test set;
- the disentanglement chapter's attackers (06): iris validation rank-1, chest X-ray verification AUC;
- the disentanglement chapter's disease classifiers (06): validation AUROC (iris, chest X-ray).

It appends one row per judge, seed and thread count to ``benchmarks/results/instrument_spread.csv`` and prints,
per judge, the SD over seeds at each thread count and the largest difference between thread counts at one seed.

Usage:
    python benchmarks/instrument_spread.py                     # quick profile, 3 seeds, 1 and 2 threads
    python benchmarks/instrument_spread.py --profile smoke --seeds 2 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "instrument_spread.csv"
FIELDS = ["judge", "chapter", "measure", "profile", "seed", "threads", "value", "seconds", "processor", "torch",
          "git_commit", "timestamp"]


def _judges(profile: str):
    """``(judge, chapter, measure, function of the replicate -> value)`` for every judge the script measures."""
    from anonpaper.experiments.disentanglement import pipeline as disentanglement
    from anonpaper.experiments.generators.pipeline import kind_cohort, vessel_cohort
    from anonpaper.experiments.gmia import pipeline as gmia
    from anonpaper.experiments.vascular import pipeline as vascular
    from anonpaper.runner.studies import study_config
    from anonpaper.runtime import replicate_seed
    from anonpaper.train.pretrained import trained_segmenter

    vascular_config = study_config("03_vascular_sspace", profile)
    generator_config = vascular.generators_config_for(
        vascular_config, study_config("02_generators", vascular_config.generators_profile))
    gmia_config = study_config("04_gmia", profile)
    gmia_resolution = study_config("02_generators", gmia_config.generators_profile).stylegan_config(
        "cxr-sg2").resolution
    disentanglement_config = study_config("06_disentanglement", profile)
    loaded: dict = {}

    def once(name, load):
        if name not in loaded:
            loaded[name] = load()
        return loaded[name]

    def vessel_dice(replicate):
        cohort, mask = vessel_cohort(generator_config)
        return trained_segmenter(cohort, mask, epochs=vascular_config.segmenter_epochs,
                                 patch_size=min(64, generator_config.image_size), patches_per_epoch=384,
                                 seed=replicate_seed(generator_config.seed, replicate), progress=False).val_dice

    def dr_qwk(replicate):
        return vascular.train_dr_classifier(vascular_config, generator_config, replicate=replicate)[1]["qwk"]

    def attacker_rank1(replicate):
        cohort = kind_cohort(vascular.FUNDUS_IMAGES, generator_config)
        return vascular.train_attacker(cohort, vascular_config, generator_config.image_size,
                                       replicate=replicate)[1]["val_rank1"]

    def findings_auroc(replicate):
        data = once("gmia", lambda: gmia.load_data(gmia_config, gmia_resolution))
        classifier, _ = gmia.train_finding_classifier(data.images["train"], data.labels["train"], gmia_config,
                                                      gmia.REAL, replicate=replicate)
        return gmia.utility_row(classifier, data, gmia_config, gmia.REAL)["AUROC"]

    def disentanglement_data():
        return once("disentanglement", lambda: disentanglement.load_data(disentanglement_config))

    def attacker_check(key):
        def check(replicate):
            arrays = disentanglement_data()[key]
            attacker, _ = disentanglement.train_attacker(arrays, disentanglement_config, replicate=replicate)
            return disentanglement.attacker_check(attacker, arrays, arrays.images["val"])
        return check

    def disease_check(key):
        def check(replicate):
            arrays = disentanglement_data()[key]
            classifier, _ = disentanglement.train_disease_classifier(arrays, disentanglement_config,
                                                                     replicate=replicate)
            return disentanglement.disease_check(classifier, arrays)
        return check

    return [("vessel U-Net", "02, 03", "validation Dice", vessel_dice),
            ("DR classifier", "03", "held-out QWK", dr_qwk),
            ("re-identification attacker", "03", "validation rank-1", attacker_rank1),
            ("finding classifier (real images)", "04", "test macro AUROC", findings_auroc),
            ("iris attacker", "06", "validation rank-1", attacker_check("iris")),
            ("chest X-ray attacker", "06", "validation verification AUC", attacker_check("cxr")),
            ("iris disease classifier", "06", "validation AUROC", disease_check("iris")),
            ("chest X-ray disease classifier", "06", "validation AUROC", disease_check("cxr"))]


def worker(profile: str, seeds: int, threads: int) -> None:
    """Train every judge at every seed in this process and print one JSON row per line."""
    import time

    import torch

    torch.set_num_threads(threads)
    for judge, chapter, measure, check in _judges(profile):
        for seed in range(seeds):
            started = time.perf_counter()
            value = float(check(seed))
            print(json.dumps({"judge": judge, "chapter": chapter, "measure": measure, "seed": seed,
                              "threads": threads, "value": value,
                              "seconds": round(time.perf_counter() - started, 2)}), flush=True)


def summary(rows: list[dict]) -> list[str]:
    """Per judge: the SD over seeds at each thread count, and the largest change between thread counts at one
    seed."""
    import numpy as np

    lines = []
    for judge in dict.fromkeys(row["judge"] for row in rows):
        mine = [row for row in rows if row["judge"] == judge]
        threads = sorted({row["threads"] for row in mine})
        parts = []
        for count in threads:
            values = [row["value"] for row in mine if row["threads"] == count]
            spread = float(np.std(values, ddof=1)) if len(values) > 1 else float("nan")
            parts.append(f"{count} thread{'s' * (count > 1)}: mean {np.mean(values):.3f}, seed SD {spread:.3f}")
        by_seed = {}
        for row in mine:
            by_seed.setdefault(row["seed"], []).append(row["value"])
        changes = [max(values) - min(values) for values in by_seed.values() if len(values) > 1]
        if changes:
            parts.append(f"largest change between thread counts at one seed {max(changes):.3f}")
        lines.append(f"{judge} ({mine[0]['measure']}): " + "; ".join(parts))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="quick", help="profile of the chapters' configs (default quick)")
    parser.add_argument("--seeds", type=int, default=3, help="replicate seeds per judge (default 3)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts (default 1 2)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="CSV the rows are appended to")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.seeds < 1 or any(count < 1 for count in args.threads):
        parser.error("--seeds and every --threads must be at least 1")
    if args.worker:
        worker(args.profile, args.seeds, args.threads[0])
        return 0

    import time

    import torch

    from anonpaper.runtime import git_sha, processor_name
    from result_rows import append_rows

    rows = []
    for count in args.threads:
        with tempfile.TemporaryDirectory(prefix=f"spread-{count}-") as cache:
            environment = {**os.environ, "OMP_NUM_THREADS": str(count), "MKL_NUM_THREADS": str(count),
                           "ANONPAPER_CACHE": cache}
            print(f"{count} thread(s): training {args.seeds} seed(s) of every judge at {args.profile}", flush=True)
            result = subprocess.run([sys.executable, __file__, "--worker", "--profile", args.profile, "--seeds",
                                     str(args.seeds), "--threads", str(count)], env=environment,
                                    stdout=subprocess.PIPE, text=True)
            if result.returncode:
                print(f"the {count}-thread worker failed (exit {result.returncode})", file=sys.stderr)
                return result.returncode
            rows += [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    common = {"profile": args.profile, "processor": processor_name(), "torch": torch.__version__,
              "git_commit": git_sha(), "timestamp": stamp}
    append_rows(args.out, FIELDS, [{**common, **row} for row in rows])
    for line in summary(rows):
        print(line)
    print(f"{len(rows)} rows appended to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
