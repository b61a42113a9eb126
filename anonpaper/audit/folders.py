"""The audit on folders (the ``anonpaper audit`` command): read an original and a released image folder, pair
them, run :func:`anonpaper.audit.suite.audit_release` and write the report.

Original folder, one of:

* a folder written by ``anonpaper cohort generate`` (it holds ``cohort.json``; read with
  :func:`anonpaper.data.export.read_written_cohort`): patients from ``patient_id``, the sensitive attribute from
  ``sex`` (F = 0, M = 1), tasks from ``dr_grade`` (QWK) and the ``label_<finding>`` columns (one multi-label task
  ``findings``, macro AUROC; CheXpert's uncertain -1 and unmentioned blanks count as negative);
* a plain folder of images (searched recursively, as ``anonpaper anonymize`` does) with a labels CSV: a ``file``
  column (the path under the folder, e.g. ``a/b.png``), a ``patient`` column, and optionally the sensitive column
  (``sex`` by default: F/M or 0/1), ``dr_grade`` and ``label_<finding>`` columns (0/1).

Released folder: the images written by ``anonpaper anonymize`` (same relative paths as the original images, PNG),
or a folder with the cohort layout (``cohort.json`` and ``images/``); each released file is paired with the original
of the same path (suffix aside). Originals without a released image are patients outside the release.

Every problem (an unpaired file, a missing patient id, a label column that does not fit, too few patients) stops
the audit before any training with a ValueError naming the file and the problem.
"""

from __future__ import annotations

import json

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from anonpaper.audit.report import check_output_folder, write_report
from anonpaper.audit.settings import AuditSettings
from anonpaper.audit.suite import AuditReport, audit_release
from anonpaper.data.export import MANIFEST, MARKER, read_written_cohort
from anonpaper.methods.folder import list_images, read_image

FILE_COLUMN, PATIENT_COLUMN = "file", "patient"
GRADE_COLUMN = "dr_grade"
FINDING_PREFIX = "label_"
SEX_CODES = {"F": 0, "M": 1, "0": 0, "1": 1}


@dataclass
class FolderPair:
    """An original and a released folder read into the arrays :func:`audit_release` takes.

    Attributes:
        original: float32 (N, C, H, W) in [0, 1].
        released: float32 (M, C, H, W) in [0, 1].
        patients: (N,) patient ids.
        source: (M,) index of each released image's original.
        sensitive: (N,) attribute classes, or None.
        sensitive_name: Name of the attribute column.
        tasks: Task labels by name (``dr_grade`` (N,), ``findings`` (N, K)).
        original_keys: (N,) pairing key (relative path without suffix) of each original.
        released_files: (M,) released file paths.
        notes: What the reader assumed (e.g. uncertain findings counted negative).
    """

    original: np.ndarray
    released: np.ndarray
    patients: np.ndarray
    source: np.ndarray
    sensitive: np.ndarray | None
    sensitive_name: str
    tasks: dict[str, np.ndarray]
    original_keys: np.ndarray
    released_files: list[Path]
    notes: list[str] = field(default_factory=list)


def _float_images(images: list[np.ndarray]) -> np.ndarray:
    stacked = np.stack(images)
    if stacked.ndim == 3:
        stacked = stacked[:, None]
    else:
        stacked = stacked.transpose(0, 3, 1, 2)
    return np.ascontiguousarray(stacked, dtype=np.float32) / 255.0


def _sex_classes(values: pd.Series, where: str, column: str, keys: np.ndarray) -> np.ndarray:
    text = values.map(lambda value: "" if value is None or (isinstance(value, float) and math.isnan(value))
                      else str(int(value)) if isinstance(value, float) and value.is_integer() else str(value).strip())
    bad = ~text.isin(list(SEX_CODES))
    if bad.any():
        index = int(np.flatnonzero(bad.to_numpy())[0])
        raise ValueError(f"{where}: column {column!r} must hold F/M (or 0/1) for every image; {keys[index]!r} has "
                         f"{values.iloc[index]!r}")
    return text.map(SEX_CODES).to_numpy().astype(np.int64)


def _grades(values: pd.Series, where: str, keys: np.ndarray) -> np.ndarray:
    numbers = pd.to_numeric(values, errors="coerce")
    bad = numbers.isna() | (numbers < 0) | (numbers != numbers.round())
    if bad.any():
        index = int(np.flatnonzero(bad.to_numpy())[0])
        raise ValueError(f"{where}: column {GRADE_COLUMN!r} must hold a non-negative integer grade for every image; "
                         f"{keys[index]!r} has {values.iloc[index]!r}")
    return numbers.to_numpy().astype(np.int64)


def _findings(table: pd.DataFrame, columns: list[str], where: str, keys: np.ndarray,
              uncertain_negative: bool) -> np.ndarray:
    numbers = table[columns].apply(pd.to_numeric, errors="coerce")
    if uncertain_negative:
        numbers = numbers.fillna(0.0).replace(-1.0, 0.0)
    bad = ~numbers.isin([0.0, 1.0])
    if bad.to_numpy().any():
        row, column = (int(v[0]) for v in np.nonzero(bad.to_numpy()))
        raise ValueError(f"{where}: finding column {columns[column]!r} must hold 0 or 1; {keys[row]!r} has "
                         f"{table[columns[column]].iloc[row]!r}")
    return numbers.to_numpy().astype(np.float32)


def _labels(table: pd.DataFrame, where: str, keys: np.ndarray, sensitive: str,
            uncertain_negative: bool) -> tuple[np.ndarray | None, dict[str, np.ndarray]]:
    attribute = _sex_classes(table[sensitive], where, sensitive, keys) if sensitive in table.columns else None
    tasks = {}
    if GRADE_COLUMN in table.columns:
        tasks[GRADE_COLUMN] = _grades(table[GRADE_COLUMN], where, keys)
    findings = sorted(column for column in table.columns if column.startswith(FINDING_PREFIX))
    if len(findings) == 1:
        tasks[findings[0]] = _findings(table, findings, where, keys, uncertain_negative)[:, 0].astype(np.int64)
    elif findings:
        tasks["findings"] = _findings(table, findings, where, keys, uncertain_negative)
    return attribute, tasks


def _read_cohort_originals(folder: Path, labels_csv: Path | None, sensitive: str):
    if labels_csv is not None:
        raise ValueError(f"{labels_csv}: {folder} is a folder written by `anonpaper cohort generate` whose "
                         f"{MANIFEST} holds its patients and labels; --labels is for plain folders")
    cohort = read_written_cohort(folder)
    table = cohort.table
    keys = table["image_id"].astype(str).to_numpy()
    missing = table["patient_id"].isna() | (table["patient_id"].astype(str).str.strip().isin(["", "nan"]))
    if missing.any():
        raise ValueError(f"{folder / MANIFEST}: image {keys[int(np.flatnonzero(missing.to_numpy())[0])]!r} has no "
                         "patient_id")
    attribute, tasks = _labels(table, str(folder / MANIFEST), keys, sensitive, uncertain_negative=True)
    images = [cohort.image(index) for index in range(len(cohort))]
    odd = [index for index, image in enumerate(images) if image.shape != images[0].shape]
    if odd:
        raise ValueError(f"{folder / 'images' / keys[odd[0]]}.png: shape {images[odd[0]].shape} differs from "
                         f"{images[0].shape} of {keys[0]!r}; the audit needs one image size")
    images = _float_images(images)
    return images, table["patient_id"].astype(str).to_numpy(), keys, attribute, tasks


def _read_plain_originals(folder: Path, labels_csv: Path | None, sensitive: str):
    if labels_csv is None:
        raise ValueError(f"{folder} is a plain image folder (no {MARKER}): give --labels CSV with a {FILE_COLUMN!r} "
                         f"and a {PATIENT_COLUMN!r} column (and optional labels)")
    if not Path(labels_csv).is_file():
        raise FileNotFoundError(f"labels CSV {labels_csv} does not exist")
    table = pd.read_csv(labels_csv, dtype={FILE_COLUMN: str, PATIENT_COLUMN: str}, keep_default_na=True)
    for column in (FILE_COLUMN, PATIENT_COLUMN):
        if column not in table.columns:
            raise ValueError(f"{labels_csv}: needs a {column!r} column; it has {list(table.columns)}")
    allowed = {FILE_COLUMN, PATIENT_COLUMN, sensitive, GRADE_COLUMN}
    unknown = [column for column in table.columns if column not in allowed and not column.startswith(FINDING_PREFIX)]
    if unknown:
        raise ValueError(f"{labels_csv}: unknown column(s) {unknown}; the columns are {FILE_COLUMN!r}, "
                         f"{PATIENT_COLUMN!r}, the sensitive attribute {sensitive!r}, {GRADE_COLUMN!r} and "
                         f"{FINDING_PREFIX}<finding> (0/1)")
    files = {relative.as_posix(): path for path, relative in list_images(folder)}
    if not files:
        raise FileNotFoundError(f"no images under {folder}")
    names = table[FILE_COLUMN].fillna("").astype(str).str.strip()
    duplicated = names[names.duplicated()]
    if len(duplicated):
        raise ValueError(f"{labels_csv}: file {duplicated.iloc[0]!r} has more than one row")
    for line, (name, patient) in enumerate(zip(names, table[PATIENT_COLUMN]), start=2):
        if name not in files:
            raise ValueError(f"{labels_csv} line {line}: file {name!r} is not an image under {folder}")
        if patient is None or (isinstance(patient, float) and math.isnan(patient)) or not str(patient).strip():
            raise ValueError(f"{labels_csv} line {line} (file {name!r}): missing patient id")
    unlisted = sorted(set(files) - set(names))
    if unlisted:
        raise ValueError(f"{folder / unlisted[0]}: no row in {labels_csv} (missing patient id); every image needs "
                         "one")
    keys = np.array([Path(name).with_suffix("").as_posix() for name in names])
    attribute, tasks = _labels(table, str(labels_csv), names.to_numpy(), sensitive, uncertain_negative=False)
    images = [read_image(files[name]) for name in names]
    shapes = {image.shape for image in images}
    if len(shapes) > 1:
        odd = next(name for name, image in zip(names, images) if image.shape != images[0].shape)
        raise ValueError(f"{folder / odd}: shape {read_image(files[odd]).shape} differs from {images[0].shape} of "
                         f"{folder / names.iloc[0]}; the audit needs one image size")
    return _float_images(images), table[PATIENT_COLUMN].astype(str).str.strip().to_numpy(), keys, attribute, tasks


def read_folders(original_dir: str | Path, released_dir: str | Path, labels_csv: str | Path | None = None,
                 sensitive: str = "sex") -> FolderPair:
    """Read and pair an original and a released folder (module docstring); nothing is written.

    Args:
        original_dir: A cohort folder, or a plain image folder described by ``labels_csv``.
        released_dir: The released images (paired by relative path, suffix aside).
        labels_csv: The labels CSV of a plain original folder.
        sensitive: Column of the sensitive attribute (F/M or 0/1); absent = no attribute inference.

    Returns:
        :class:`FolderPair`.

    Raises:
        ValueError: An unpaired or unreadable file, a missing patient id, a label that does not fit, an image of
            another size.
        FileNotFoundError: A folder or the CSV does not exist.
    """
    original_dir, released_dir = Path(original_dir), Path(released_dir)
    for folder in (original_dir, released_dir):
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder} does not exist or is not a folder")
    cohort = (original_dir / MARKER).is_file()
    reader = _read_cohort_originals if cohort else _read_plain_originals
    original, patients, keys, attribute, tasks = reader(original_dir, None if labels_csv is None else
                                                        Path(labels_csv), sensitive)
    notes = []
    if cohort and any(name == "findings" or name.startswith(FINDING_PREFIX) for name in tasks):
        notes.append("Findings marked uncertain (-1) or left blank in the cohort's manifest count as negative.")
    index_of = {key: position for position, key in enumerate(keys)}

    released_root, released_table = released_dir, None
    if (released_dir / MARKER).is_file():
        released_root = released_dir / "images"
        released_table = read_written_cohort(released_dir).table.set_index("image_id")
    elif cohort and (released_dir / "images").is_dir():
        released_root = released_dir / "images"
    listed = list_images(released_root)
    if not listed:
        raise FileNotFoundError(f"no released images under {released_root}")
    source, released, files, seen = [], [], [], {}
    for path, relative in listed:
        key = relative.with_suffix("").as_posix()
        if key in seen:
            raise ValueError(f"{path} and {seen[key]} are two released versions of one original {key!r}")
        seen[key] = path
        if key not in index_of:
            raise ValueError(f"{path}: unpaired file, no original image {key}.* under {original_dir}")
        position = index_of[key]
        if released_table is not None and key in released_table.index and "patient_id" in released_table.columns:
            named = str(released_table.loc[key, "patient_id"])
            if named != patients[position]:
                raise ValueError(f"{released_dir / MANIFEST}: image {key!r} names patient {named!r}, its original "
                                 f"belongs to {patients[position]!r}")
        image = read_image(path)
        if _float_images([image]).shape[1:] != original.shape[1:]:
            raise ValueError(f"{path}: (channels, height, width) {_float_images([image]).shape[1:]} differ from its "
                             f"original's {original.shape[1:]}; the release must keep the originals' size")
        source.append(position)
        released.append(image)
        files.append(path)
    return FolderPair(original=original, released=_float_images(released), patients=patients,
                      source=np.asarray(source, dtype=np.int64), sensitive=attribute, sensitive_name=sensitive,
                      tasks=tasks, original_keys=keys, released_files=files, notes=notes)


def release_method(released_dir: Path) -> str | None:
    """``"METHOD {options}"`` from the ``release.json`` that ``anonpaper anonymize`` writes beside a release (None
    when there is none); ValueError names the file when it is not a release record."""
    path = released_dir / "release.json"
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
        return f"{record['method']} {json.dumps(record.get('options', {}), sort_keys=True)}"
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: not a release record written by `anonpaper anonymize` ({error})") from None


def audit_folders(original_dir: str | Path, released_dir: str | Path, out_dir: str | Path, *,
                  labels_csv: str | Path | None = None, sensitive: str = "sex", overwrite: bool = False,
                  settings: AuditSettings | None = None, log: Callable[[str], None] | None = None) -> AuditReport:
    """Audit a released folder against its original folder and write ``report.json`` and ``report.html``.

    Args:
        original_dir: See :func:`read_folders`.
        released_dir: See :func:`read_folders`.
        out_dir: New or empty report folder; never an input folder, inside one or containing one.
        labels_csv: See :func:`read_folders`.
        sensitive: See :func:`read_folders`.
        overwrite: Allow a non-empty ``out_dir`` (only the two report files are replaced).
        settings: :class:`AuditSettings` (default: smoke-sized).
        log: Called with progress lines; None is silent.

    Returns:
        The :class:`AuditReport` (also written to ``out_dir``).

    Raises:
        ValueError, FileNotFoundError, FileExistsError: Bad folders, files, labels or output folder, each naming
            the file and the problem, before any network is trained.
    """
    out_dir = check_output_folder(out_dir, [original_dir, released_dir], overwrite)
    pair = read_folders(original_dir, released_dir, labels_csv, sensitive)
    log = log or (lambda line: None)
    log(f"audit: {len(pair.original)} original images of {len(np.unique(pair.patients))} patients, "
        f"{len(pair.released)} released images")
    try:
        report = audit_release(pair.original, pair.released, pair.patients, source=pair.source,
                               sensitive=pair.sensitive, sensitive_name=sensitive, tasks=pair.tasks,
                               settings=settings, log=log)
    except ValueError as error:
        raise ValueError(f"{released_dir}: {error}") from error
    report.notes[:0] = pair.notes
    described = {"original": Path(original_dir), "released": Path(released_dir)}
    if labels_csv is not None:
        described["labels"] = Path(labels_csv)
    method = release_method(Path(released_dir))
    if method is not None:
        described["method"] = method
    write_report(report, out_dir, inputs=described)
    return report
