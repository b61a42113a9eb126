"""Sweep of CPU-trained generators at equal wall time, judged by the vessel-tree check.

Each variant is a StyleGAN config, optionally with fields of the config or of its training recipe changed
(``CONFIG:FIELD=VALUE,FIELD=VALUE``, as ``anonpaper generators train --change`` takes them): widths, learning
rates, R1 gamma, the StyleGAN3 cutoff schedule. Each is trained as ``anonpaper generators train KIND`` does, for the
same number of minutes and on one thread, and every evaluation of each run up to the training seconds that all of
them reached (equal wall time) is tabulated: FD and SWD of the cohort-trained U-Net's features, k-NN precision /
recall, the vessel fraction and the vessel-tree statistics beside the real images', the label distance, and
``tree_distance``, the largest relative difference of the tree check's statistics (skeleton length per connected
piece, junctions per image; the generators chapter's claim holds when it is within ``TREE_TOLERANCE`` beyond noise).
The variant whose last row within equal wall time has the smaller ``tree_distance`` is the one to train on, when
its trees are closer beyond noise (the script says so per other variant, by the chapter's rule:
:func:`anonpaper.experiments.generators.curves.compare_trees`).

Rows go to ``benchmarks/results/generator_sweep.csv`` with the variant's changes, the widths (feature maps at each
resolution) and parameter counts, the thread count, processor and commit.

Usage:
    python benchmarks/generator_sweep.py --configs sg2-cpu64 sg2-cpu128 --resolution 128 --minutes 33 \\
        --out /tmp/sweep                                   # train both (start them side by side: --only VARIANT)
    python benchmarks/generator_sweep.py --kind fundus-sg3t --configs sg3t-tiny \\
        "sg3t-tiny:generator_lr=0.001,discriminator_lr=0.001" sg3t-tiny:sg3_first_cutoff=4.0 --minutes 30 \\
        --out /tmp/sg3t                                    # a recipe and cutoff sweep of one config
    python benchmarks/generator_sweep.py --runs /tmp/sweep/sg2-cpu64/fundus-sg2.run \\
        /tmp/sweep/sg2-cpu128/fundus-sg2.run               # tabulate finished or running run folders
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import shlex
import sys
import time
from pathlib import Path

import torch

from anonpaper.cli import parse_changes
from anonpaper.experiments.generators.claims import tree_differences
from anonpaper.experiments.generators.curves import compare_trees, read_curves
from anonpaper.experiments.generators.job import run_job, training_job
from anonpaper.models.stylegan import ResidualDiscriminator, StyleGANConfig, StyleGenerator
from anonpaper.models.stylegan.synthesis_sg3 import sg3_layer_schedule

RESULTS = Path(__file__).resolve().parent / "results" / "generator_sweep.csv"
METRICS = ("FD-vessel-unet", "SWD", "precision", "recall", "vessel_fraction/generated", "vessel_fraction/real",
           "vessel_skeleton/length_per_piece/generated", "vessel_skeleton/length_per_piece/real",
           "vessel_skeleton/junctions_per_image/generated", "vessel_skeleton/junctions_per_image/real",
           "vessel_skeleton/largest_piece/generated", "vessel_skeleton/largest_piece/real", "labels/distance")
FIELDS = ["config", "changes", "resolution", "widths", "generator_params", "discriminator_params", "kimg",
          "train_seconds", "s_per_kimg", *[name.replace("/", "_") for name in METRICS], "tree_distance",
          "equal_seconds", "threads", "processor", "git_commit", "timestamp"]


def widths(config: StyleGANConfig) -> str:
    """Feature maps of the synthesis network: per resolution for a StyleGAN2 (``4:64 8:64 ... 128:16``), per layer
    for a StyleGAN3, ``c<cutoff>:<maps>`` (``c2:32 c11.3:23 c64:4 c64:4``: its maps shrink as the cutoff frequency
    grows, ``min(channel_base / 2 / cutoff, channel_max)``; the layers at the highest cutoff draw the finest
    detail)."""
    if config.architecture == "sg3t":
        schedule = sg3_layer_schedule(config)
        return " ".join(f"c{cutoff:.3g}:{int(maps)}"
                        for cutoff, maps in zip(schedule["cutoffs"][:-1], schedule["channels"][:-1]))
    return " ".join(f"{2 ** level}:{min(config.channel_base // 2 ** level, config.channel_max)}"
                    for level in range(2, config.log2_resolution + 1))


def tree_distance(point: dict) -> float:
    """The largest |relative difference| of the tree check's statistics, generated against real (NaN: one was not
    measured)."""
    differences = tree_differences(lambda name: point.get(name) if point.get(name) is not None else math.nan)
    values = [abs(effect) for effect, _ in differences.values()]
    return max(values) if all(math.isfinite(value) for value in values) else math.nan


def config_name(record: dict) -> str:
    """The StyleGAN config's name, from the run's command (``--stylegan-config NAME``)."""
    match = re.search(r"--stylegan-config (\S+)", record.get("command", ""))
    if match is None:
        raise ValueError("run.json has no --stylegan-config in its command; not a run of anonpaper generators train")
    return match.group(1)


def changes_of(record: dict) -> str:
    """The run's ``--change`` fields from its command, ``"generator_lr=0.001 sg3_first_cutoff=4.0"`` (empty: none)."""
    return " ".join(token[len("--change="):] for token in shlex.split(record.get("command", ""))
                    if token.startswith("--change="))


def parse_variant(text: str) -> tuple[str, dict]:
    """``"CONFIG:FIELD=VALUE,..."`` as ``(config name, {field: value})``, each change read as ``--change`` reads it
    (:func:`anonpaper.cli.parse_changes`).

    Raises:
        ValueError: A change that is not ``FIELD=VALUE``, naming the variant.
    """
    name, _, listed = text.partition(":")
    try:
        return name, parse_changes(filter(None, listed.split(",")))
    except ValueError as error:
        raise ValueError(f"variant {text!r}: {error}") from error


def variant_folder(name: str, changes: dict) -> str:
    """The variant's run folder name: the config, then ``+field=value`` per change."""
    return name + "".join(f"+{field}={value}" for field, value in changes.items())


def rows_of_runs(run_dirs: list[Path]) -> list[dict]:
    """One row per evaluation of each run, up to the training seconds every run reached (equal wall time)."""
    records = []
    for run_dir in run_dirs:
        path = run_dir / "run.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no run.json (expected an anonpaper generators train run folder)")
        records.append(json.loads(path.read_text()))
    equal = min(max(point["train_seconds"] for point in record["curve"]) for record in records)
    rows = []
    for record in records:
        config = StyleGANConfig(**record["identity"]["stylegan_config"])
        generator = StyleGenerator(config, seed=0)
        discriminator = ResidualDiscriminator(config, seed=1)
        for point in record["curve"]:
            if point["train_seconds"] > equal + 1e-6:
                continue
            row = {"config": config_name(record), "changes": changes_of(record), "resolution": config.resolution,
                   "widths": widths(config),
                   "generator_params": sum(p.numel() for p in generator.parameters()),
                   "discriminator_params": sum(p.numel() for p in discriminator.parameters()),
                   "kimg": point["kimg"], "train_seconds": round(point["train_seconds"], 1),
                   "s_per_kimg": round(point["train_seconds"] / point["kimg"], 1) if point["kimg"] else "",
                   "tree_distance": round(tree_distance(point), 4), "equal_seconds": round(equal, 1)}
            # A metric an evaluation could not measure is recorded as None (JSON null): an empty cell.
            row.update({name.replace("/", "_"): round(point[name], 4) if point[name] is not None else ""
                        for name in METRICS if name in point})
            # The machine and commit of the session that trained to this point (blank: not recorded, a run.json from
            # before sessions were recorded); the timestamp is the tabulation's.
            session = next((item for item in record.get("sessions") or []
                            if item["from_kimg"] <= point["kimg"] <= item["to_kimg"]), {})
            row.update(threads=session.get("torch_threads", ""), processor=session.get("processor", ""),
                       git_commit=session.get("commit", ""),
                       timestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["sg2-cpu64", "sg2-cpu128"],
                        help="variants: CONFIG or CONFIG:FIELD=VALUE,... (StyleGAN config or training recipe fields)")
    parser.add_argument("--kind", default="fundus-sg2")
    parser.add_argument("--resolution", type=int, default=128)
    parser.add_argument("--minutes", type=float, default=33.0, help="training minutes per config")
    parser.add_argument("--eval-kimg", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=None, help="folder of the runs (one sub-folder per config)")
    parser.add_argument("--only", default=None, help="train this variant only (to run the variants side by side)")
    parser.add_argument("--runs", nargs="+", type=Path, default=None, help="tabulate these run folders, no training")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.runs is None:
        if args.out is None:
            parser.error("--out is needed to train (or --runs to tabulate existing run folders)")
        torch.set_num_threads(1)  # one thread per run, so two runs share a 2-core machine without spin-waiting
        run_dirs = []
        for variant in args.configs:
            name, changes = parse_variant(variant)
            job = training_job(args.kind, kimg=1000, resolution=args.resolution, stylegan_config=name,
                               eval_kimg=args.eval_kimg, changes=changes)
            folder = args.out / variant_folder(name, changes)
            if args.only in (None, variant):
                run_job(job, folder, minutes=args.minutes, resume=True)
            run_dirs.append(folder / f"{args.kind}.run")
        if args.only is not None:
            return 0
    else:
        run_dirs = args.runs
    rows = rows_of_runs(run_dirs)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    new_file = not args.output.exists()
    if not new_file:
        with args.output.open(newline="") as handle:
            header = next(csv.reader(handle), [])
        if header != FIELDS:
            raise ValueError(f"{args.output}: its columns are not this script's ({len(header)} against "
                             f"{len(FIELDS)}); give another --output")
    with args.output.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        if new_file:
            writer.writeheader()
        writer.writerows(rows)
    last = {}
    for row in rows:
        last[variant_label(row["config"], row["changes"])] = row
    for name, row in last.items():
        print(f"{name} ({row['widths']}): {row['kimg']:g} kimg in {row['train_seconds']:.0f} s, tree distance "
              f"{row['tree_distance']}, FD {row.get('FD-vessel-unet', '')}")
    best = min(last, key=lambda name: last[name]["tree_distance"])
    print(f"closest vessel trees at equal wall time ({last[best]['equal_seconds']:.0f} s): {best}")
    for line in noise_lines(run_dirs, best):
        print(line)
    return 0


def variant_label(config: str, changes: str) -> str:
    """How a variant is named in the printout: the config, then its changes."""
    return " ".join(filter(None, (config, changes)))


def noise_lines(run_dirs: list[Path], best: str) -> list[str]:
    """Whether the closest variant's trees are closer than each other variant's beyond noise, at the last
    evaluation within equal wall time (:func:`~anonpaper.experiments.generators.curves.compare_trees`, on the
    closest one's binding statistic)."""
    curves = {}
    for run_dir in run_dirs:
        record = json.loads((run_dir / "run.json").read_text())
        curves[variant_label(config_name(record), changes_of(record))] = read_curves(run_dir)[0]
    equal = min(max(point["train_seconds"] for point in curve.points) for curve in curves.values())

    def last_within(curve) -> int:
        return max(index for index, point in enumerate(curve.points) if point["train_seconds"] <= equal + 1e-6)

    lines = []
    for name, curve in curves.items():
        if name == best:
            continue
        table = compare_trees(curves[best], curve, point=last_within(curves[best]), reference_point=last_within(curve))
        row = table[table["binding"]].iloc[0]
        lines.append(f"  against {name}: {row['statistic']} closer by {row['closer by']:+.3f} (SE {row['SE']:.3f}): "
                     f"{row['verdict']}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
