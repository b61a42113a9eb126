"""``anonpaper data check NAME --root DIR``: validate a user's copy of a real dataset, read-only.

The check parses the label files (missing files or columns, unexpected label values, duplicate image ids, patient
ids colliding across sources), stats every file, decodes every image (corrupt, zero-byte, 16-bit, wrong channel
count, too small) and mask (same size as its image), applies the manifest's default split protocol, and reports how
many records survive each step. It snapshots the folder (paths, sizes, modification times) before and after and
reports any change, though it only ever opens files for reading.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from anonpaper.data.manifests import available_manifests, load_manifest
from anonpaper.data.real.base import ON_ERROR, DataError, ProblemLog, read_image_file, read_mask_file
from anonpaper.data.splits import apply_protocol

# Every record kept, one split: the check counts records, then tries the real protocol on the survivors.
KEEP_ALL = {"name": "check (keep all)", "kind": "patient_fractions", "fractions": [1.0, 0.0, 0.0]}


@dataclass
class DataCheckReport:
    """Result of :func:`check_dataset`.

    Attributes:
        name: Dataset name.
        root: The folder checked.
        problems: DataFrame (kind, message, record, file), one row per problem.
        survival: (step, records left) pairs, in order.
        fatal: The error that stopped the check (structure problem, or the first problem with on_error="raise").
        split_counts: Images per split under the default protocol (empty if it could not be applied).
        notes: Informational lines (e.g. images sampled, filters not applied).
        root_unchanged: Whether the folder's listing, sizes and times were identical after the check.
    """

    name: str
    root: Path
    problems: pd.DataFrame
    survival: list = field(default_factory=list)
    fatal: str | None = None
    split_counts: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    root_unchanged: bool = True

    @property
    def ok(self) -> bool:
        """True when nothing is wrong: no fatal error, no problem listed, folder unchanged."""
        return self.fatal is None and self.problems.empty and self.root_unchanged

    def summary(self, max_problems: int = 30) -> str:
        """A human-readable report: verdict, survival per step, problems by kind (first ``max_problems``)."""
        lines = [f"data check: {self.name} at {self.root}",
                 f"result: {'OK' if self.ok else 'PROBLEMS FOUND'}"]
        if self.fatal:
            lines.append(f"stopped: {self.fatal}")
        if self.survival:
            lines.append("records surviving each step:")
            lines += [f"  {count:>8}  {step}" for step, count in self.survival]
        if self.split_counts:
            lines.append("default split protocol: " + ", ".join(f"{k} {v}" for k, v in self.split_counts.items()))
        if not self.problems.empty:
            counts = self.problems["kind"].value_counts()
            lines.append(f"problems ({len(self.problems)}): " + ", ".join(f"{k} {v}" for k, v in counts.items()))
            for problem in self.problems.head(max_problems).itertuples():
                where = problem.file or problem.record or ""
                lines.append(f"  [{problem.kind}] {where}: {problem.message}")
            if len(self.problems) > max_problems:
                lines.append(f"  ... and {len(self.problems) - max_problems} more")
        if not self.root_unchanged:
            lines.append("WARNING: the dataset folder changed during the check")
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)


def _snapshot(root: Path) -> dict:
    listing = {}
    for folder, _, files in os.walk(root):
        for file_name in files:
            path = os.path.join(folder, file_name)
            try:
                stat = os.stat(path)
            except OSError:
                continue
            listing[path] = (stat.st_size, stat.st_mtime_ns)
    return listing


def _loader(name: str):
    module_name, function_name = load_manifest(name).loader.split(":")
    return getattr(importlib.import_module(module_name), function_name)


def check_dataset(name: str, root: str | Path, on_error: str = "skip", max_images: int | None = None,
                  seed: int = 0, **loader_options) -> DataCheckReport:
    """Validate a copy of dataset ``name`` under ``root`` without writing to it.

    Args:
        name: A data-manifest name (e.g. "brset").
        root: The dataset folder.
        on_error: "skip" lists every bad record and goes on; "raise" stops at the first one (reported as fatal).
        max_images: Decode at most this many images (a seeded random sample) instead of all.
        seed: Seed of that sample and of the default split protocol.
        **loader_options: Passed to the dataset loader (e.g. quality_file for ODIR-5K).

    Returns:
        A :class:`DataCheckReport`; ``report.ok`` is False when anything is wrong.

    Raises:
        ValueError: Unknown dataset name (listing the known ones) or bad ``on_error``.
        FileNotFoundError: ``root`` is not a folder.
    """
    known = available_manifests()
    if name not in known:
        raise ValueError(f"unknown dataset {name!r} for data check; known: {', '.join(known)}")
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
    root = Path(root).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"dataset root {root} is not a folder")
    manifest = load_manifest(name)
    before = _snapshot(root)
    notes = _column_notes(root, manifest)
    survival: list = []
    log = ProblemLog(on_error)
    report = DataCheckReport(name, root, log.frame(), survival, notes=notes)
    try:
        cohort = _loader(name)(root, protocol=KEEP_ALL, on_error=on_error, survival=survival, **loader_options)
    except DataError as error:
        report.fatal = str(error)
        report.root_unchanged = _snapshot(root) == before
        return report
    # Problems met while parsing were recorded by the loader; continue the same log.
    log.problems.extend(_problems_from_frame(cohort.problems))
    table = cohort.table
    rows = np.arange(len(table))
    if max_images is not None and max_images < len(rows):
        rows = np.sort(np.random.default_rng(seed).choice(rows, size=max_images, replace=False))
        report.notes.append(f"decoded a random sample of {max_images} of {len(table)} images (max_images)")
    min_side = int(manifest.image.get("min_side", 0))
    good = np.ones(len(table), dtype=bool)
    try:
        for position in rows:
            row = table.iloc[position]
            image_id, relative = row["image_id"], row["path"]
            try:
                image = read_image_file(root / relative, cohort.channels, label=relative)
            except DataError as error:
                log.add(error.kind, str(error).split(": ", 1)[-1], record=image_id, file=relative)
                good[position] = False
                continue
            if int(image.max()) == int(image.min()):
                log.add("blank_image", f"every pixel has the value {int(image.min())} (blank or failed export)",
                        record=image_id, file=relative)
                good[position] = False
                continue
            if min(image.shape[:2]) < min_side:
                log.add("small_image", f"image is {image.shape[1]}x{image.shape[0]} pixels; this dataset's images "
                        f"are at least {min_side} pixels on the short side (wrong file or already resized?)",
                        record=image_id, file=relative)
                good[position] = False
                continue
            for mask_name in cohort.mask_names:
                mask_relative = row.get(f"mask_{mask_name}")
                if not isinstance(mask_relative, str):
                    continue
                try:
                    mask = read_mask_file(root / mask_relative, label=mask_relative)
                except DataError as error:
                    log.add(error.kind, str(error).split(": ", 1)[-1], record=image_id, file=mask_relative)
                    good[position] = False
                    continue
                if mask.shape != image.shape[:2]:
                    log.add("mask_size", f"mask {mask_name!r} is {mask.shape}, image is {image.shape[:2]}",
                            record=image_id, file=mask_relative)
                    good[position] = False
    except DataError as error:  # on_error="raise": the first bad record stops the check
        report.fatal = str(error)
    survival.pop()  # the keep-all protocol step says nothing useful
    decoded = good[rows]
    survival.append((f"images decode with {cohort.channels} channel(s) and plausible size"
                     + (" (sampled)" if len(rows) < len(table) else ""), int(decoded.sum())))
    if report.fatal is None:
        survivors = table[good].drop(columns=["split"]).reset_index(drop=True)
        spec = manifest.split_protocols[manifest.default_protocol]
        try:
            split = apply_protocol(survivors, spec, seed)
            report.split_counts = {key: int(value) for key, value in split.value_counts().items()}
            survival.append((f"in default split protocol {manifest.default_protocol!r}", int(split.notna().sum())))
            if split.notna().sum() == 0:
                raise ValueError("no record survives it")
        except ValueError as error:
            message = f"default split protocol {manifest.default_protocol!r} cannot be applied: {error}"
            if on_error == "raise":
                report.fatal = message
            else:
                log.add("protocol", message)
    report.problems = log.frame()
    report.root_unchanged = _snapshot(root) == before
    return report


def _column_notes(root: Path, manifest) -> list[str]:
    """Notes on label-file columns the manifest does not know (harmless, but a sign of another release)."""
    notes = []
    for entry in manifest.label_files:
        known = set(entry.get("columns", [])) | set(entry.get("optional_columns", []))
        if not entry.get("optional_columns"):
            continue  # the manifest lists only required columns: extra ones cannot be judged
        for relative in [entry["path"]] + list(entry.get("alternatives", [])):
            path = root / relative
            if path.is_file() and path.name.endswith((".csv", ".csv.gz")):
                try:
                    header = list(pd.read_csv(path, nrows=0).columns)
                except Exception as error:  # reported as a structure problem by the loader
                    notes.append(f"cannot read the header of {relative}: {error}")
                    break
                extra = [column for column in header if column not in known and not column.startswith("Unnamed")]
                if extra:
                    notes.append(f"unexpected column(s) in {relative} (ignored): {extra}")
                break
    return notes


def _problems_from_frame(frame: pd.DataFrame) -> list:
    from anonpaper.data.real.base import Problem

    return [Problem(row.kind, row.message, row.record, row.file) for row in frame.itertuples()]
