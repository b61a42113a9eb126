"""Reading a generator's evaluations after the fact: the training curve of a run folder, of shipped weights or of
the generators chapter's record, with the chapter's vessel-tree check decided at every point, and two generators'
vessel trees compared beyond noise (``anonpaper generators curve``).

A training job (:mod:`.job`) evaluates its generator every ``EVAL_KIMG`` with the chapter's instruments and keeps
each evaluation as a point of its curve (``run.json``, and the exported ``<kind>.json``); the chapter's record
(``results/<profile>/02_generators.json``) holds one such evaluation per generator. Every point carries the same
metric names, so one reader serves the three: :func:`read_curves`.

Two evaluations compare only when they read the same real images with the same instruments: the settings in
:data:`COMPARED_SETTINGS` must agree (a curve recorded before a setting existed has its legacy value,
:data:`~anonpaper.experiments.generators.job.LEGACY_EVALUATION`). :func:`compare_trees` then says, per tree
statistic, whether one generator's vessels are closer to the real ones than the other's by more than
:data:`~anonpaper.experiments.claims.DECISION_Z` standard errors of the difference: the chapter's one rule, applied
to ``|reference difference| - |candidate difference|``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from anonpaper.experiments.claims import DECISION_Z, Claim
from anonpaper.experiments.generators.claims import binding_tree_statistic, tree_claim, tree_differences
from anonpaper.experiments.generators.config import KINDS, Config
from anonpaper.experiments.generators.job import EVALUATION_FIELDS, recorded_evaluation
from anonpaper.experiments.generators.pipeline import FEATURE_MASKS, TREE_STATISTICS
from anonpaper.metrics.statistics import difference_se, rule_verdict

CHAPTER_STUDY = "02_generators"
# What decides which real images an evaluation reads and how its trees are counted: two evaluations that differ
# here measure different things, and their tree statistics do not compare.
COMPARED_SETTINGS = ("seed", "eval_images", "retina_patients", "segmenter_epochs", "vessel_data_root",
                     "tree_min_area")


class CurveError(ValueError):
    """A file that holds no generator evaluation, or two evaluations that do not compare; the message names the
    file(s) and the problem."""


@dataclass(frozen=True)
class Curve:
    """One generator's evaluations, oldest first.

    Attributes:
        source: The file read.
        kind: Generator kind (:data:`~anonpaper.experiments.generators.config.KINDS`).
        settings: The evaluation's settings: the chapter parameters of
            :data:`~anonpaper.experiments.generators.job.EVALUATION_FIELDS` and ``seed`` (lower-case field names).
        points: One dict per evaluation: ``kimg`` (NaN when the file does not say), ``train_seconds`` and the
            chapter's metric names (``"precision"``, ``"vessel_skeleton/length_per_piece/generated"``, ...).
    """

    source: Path
    kind: str
    settings: dict[str, Any]
    points: tuple[dict[str, Any], ...]

    @property
    def mask(self) -> str:
        return FEATURE_MASKS[KINDS[self.kind][0]]

    @property
    def config(self) -> Config:
        """The generators chapter's config with this evaluation's settings (the tolerances at their defaults)."""
        fields = {item.name for item in dataclasses.fields(Config)}
        return Config(**{name: value for name, value in self.settings.items() if name in fields})

    def value(self, point: dict[str, Any], name: str) -> float:
        """A point's metric as a float (NaN when absent or not measured)."""
        found = point.get(name)
        return float(found) if isinstance(found, (int, float)) else math.nan

    def reader(self, point: dict[str, Any]) -> Callable[[str], float]:
        """``point``'s metrics by name (:meth:`value`), as the tree check reads them."""
        return functools.partial(self.value, point)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise CurveError(f"{path}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CurveError(f"{path}: not a JSON file ({error})") from None
    if not isinstance(record, dict):
        raise CurveError(f"{path}: holds no generator evaluation (a JSON {type(record).__name__}, not an object)")
    return record


def _known_kind(path: Path, kind: Any) -> str:
    if kind not in KINDS:
        raise CurveError(f"{path}: unknown generator kind {kind!r}; expected one of {sorted(KINDS)}")
    return kind


def read_curves(path: str | Path) -> list[Curve]:
    """The generator evaluations in ``path``.

    Args:
        path: A run folder (``<kind>.run/``) or its ``run.json``, a shipped weights JSON (``weights/<kind>.json``),
            or a generators chapter record (``results/<profile>/02_generators.json``: one single-point curve per
            generator it evaluated).

    Raises:
        CurveError: The path does not exist, is not JSON, or is none of these.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "run.json"
    record = _read_json(path)
    if record.get("study") == CHAPTER_STUDY:
        return _chapter_curves(path, record)
    if isinstance(record.get("curve"), list):
        return [record_curve(path, record)]
    raise CurveError(f"{path}: holds no generator evaluation (expected a run's run.json, a weights JSON with a "
                     f"curve, or a {CHAPTER_STUDY} record)")


def record_curve(source: str | Path, record: dict[str, Any]) -> Curve:
    """The curve of a run's ``run.json`` or of a weights JSON already read (``record``; ``source``: where from).

    Raises:
        CurveError: The record names no known generator kind or has no ``curve`` list.
    """
    source = Path(source)
    if not isinstance(record.get("curve"), list):
        raise CurveError(f"{source}: holds no evaluation curve")
    kind = _known_kind(source, record.get("kind") or (record.get("identity") or {}).get("kind"))
    seed = record.get("seed", (record.get("identity") or {}).get("network_seed"))
    settings = {**recorded_evaluation(record.get("evaluation") or {}), "seed": seed}
    points = tuple({**point, "kimg": float(point.get("kimg", math.nan))} for point in record["curve"])
    return Curve(source, kind, settings, points)


def _chapter_curves(path: Path, record: dict[str, Any]) -> list[Curve]:
    """One single-point curve per generator of a chapter record: its metrics are ``"<kind>/<metric>"``."""
    parameters = {name.lower(): value for name, value in (record.get("parameters") or {}).items()}
    # A record from before a setting existed was evaluated with its legacy value (as a run's record is).
    settings = {**recorded_evaluation({name: parameters[name] for name in EVALUATION_FIELDS if name in parameters}),
                "seed": parameters.get("seed")}
    rows = {row.get("kind"): row for row in (record.get("tables") or {}).get("generators") or []}
    curves = []
    for kind in KINDS:
        prefix = f"{kind}/"
        metrics = {name[len(prefix):]: value for name, value in (record.get("metrics") or {}).items()
                   if name.startswith(prefix)}
        if not metrics:
            continue
        row = rows.get(kind, {})
        mask = FEATURE_MASKS[KINDS[kind][0]]
        dice = (record.get("metrics") or {}).get(f"segmenter/{mask}/val_dice")
        point = {**metrics, "kimg": float(row.get("kimg", math.nan)), "train_seconds": row.get("train_seconds"),
                 "segmenter_dice": dice}
        curves.append(Curve(path, kind, settings, (point,)))
    if not curves:
        raise CurveError(f"{path}: a {CHAPTER_STUDY} record without generator metrics")
    return curves


def _unet(curve: Curve, point: dict[str, Any]) -> list[dict[str, Any]]:
    """The segmenter's instrument at a point: its Dice when recorded, else the check the run wrote (empty: passed)."""
    config = curve.config
    dice = curve.value(point, "segmenter_dice")
    check = point.get("segmenter_check")
    passed = (dice >= config.segmenter_min_dice) if math.isfinite(dice) else (check == "")
    return [{"name": f"{curve.mask} U-Net validation Dice" if math.isfinite(dice) or not check else check,
             "value": dice if math.isfinite(dice) else None, "floor": config.segmenter_min_dice,
             "higher_is_better": True, "passed": bool(passed)}]


def tree_check(curve: Curve, point: dict[str, Any]) -> Claim:
    """The chapter's vessel-tree check at one point of ``curve`` (the generators chapter's rule and tolerance)."""
    config = curve.config
    size = {"n": int(config.eval_images), "min_n": config.min_eval_images, "kind": "phantom-check"}
    return tree_claim(curve.reader(point), curve.kind, config, _unet(curve, point), size)


def _percent(effect: float, se: float) -> str:
    return f"{100 * effect:+.1f} % (SE {100 * se:.1f})" if math.isfinite(effect) else ""


def curve_table(curve: Curve) -> pd.DataFrame:
    """One row per evaluation of ``curve``: kimg, training hours, FD, k-NN precision / recall, mask fraction, and
    for fundus generators the tree statistics (generated and real, relative difference with its SE) and the tree
    check's verdict; the label distance."""
    mask = curve.mask
    rows = []
    for point in curve.points:
        value = curve.reader(point)
        seconds = value("train_seconds")
        row = {"kimg": value("kimg"), "hours": round(seconds / 3600, 2) if math.isfinite(seconds) else math.nan,
               f"FD-{mask}-unet": value(f"FD-{mask}-unet"), "precision": value("precision"),
               "recall": value("recall"), f"{mask} fraction": value(f"{mask}_fraction/generated"),
               f"{mask} fraction (real)": value(f"{mask}_fraction/real")}
        if math.isfinite(value(f"{mask}_skeleton/length_per_piece/real")):
            for name, (effect, se) in tree_differences(value, mask).items():
                row[name.replace("_", " ")] = value(f"{mask}_skeleton/{name}/generated")
                row[f"{name.replace('_', ' ')} (real)"] = value(f"{mask}_skeleton/{name}/real")
                row[f"{name.replace('_', ' ')} vs real"] = _percent(effect, se)
            row["tree check"] = tree_check(curve, point).verdict
        row["label distance"] = value("labels/distance")
        rows.append(row)
    return pd.DataFrame(rows)


def check_comparable(candidate: Curve, reference: Curve) -> None:
    """Raise :class:`CurveError` unless the two evaluations read the same real images with the same instruments
    (:data:`COMPARED_SETTINGS`) and evaluate the same modality."""
    if FEATURE_MASKS[KINDS[candidate.kind][0]] != FEATURE_MASKS[KINDS[reference.kind][0]]:
        raise CurveError(f"{candidate.source} ({candidate.kind}) and {reference.source} ({reference.kind}) are "
                         "generators of different modalities")
    differing = [f"{name.upper()}: {candidate.settings.get(name)!r} against {reference.settings.get(name)!r}"
                 for name in COMPARED_SETTINGS if candidate.settings.get(name) != reference.settings.get(name)]
    if differing:
        raise CurveError(f"{candidate.source} and {reference.source} were evaluated differently, so their vessel "
                         f"trees do not compare: {'; '.join(differing)}")


def compare_trees(candidate: Curve, reference: Curve, *, point: int = -1, reference_point: int = -1,
                  z: float = DECISION_Z) -> pd.DataFrame:
    """Whether ``candidate``'s vessel trees are closer to the real images than ``reference``'s, per tree statistic.

    For each statistic, ``closer by`` is ``|reference's relative difference| - |candidate's|`` (positive: the
    candidate is closer to the real trees) with the SE of a difference of independent estimates; the verdict is
    the one rule's directional decision on it: ``"closer"``, ``"farther"`` or ``"within noise"`` (``"not
    measured"`` when either evaluation lacks the statistic). The row of the
    candidate's binding statistic (what its tree check is decided on) is marked.

    Args:
        candidate, reference: Curves whose evaluations compare (:func:`check_comparable`).
        point, reference_point: Which evaluation of each (default: the last).
        z: Standard errors a decision needs.

    Returns:
        One row per statistic: ``statistic``, ``candidate``, ``candidate SE``, ``reference``, ``reference SE`` (the
        relative differences from real), ``closer by``, ``SE``, ``verdict``, ``binding``.

    Raises:
        CurveError: The evaluations do not compare, or a curve has no such point.
    """
    check_comparable(candidate, reference)
    chosen = []
    for curve, index in ((candidate, point), (reference, reference_point)):
        try:
            chosen.append(curve.points[index])
        except IndexError:
            raise CurveError(f"{curve.source}: has {len(curve.points)} evaluations, no point {index}") from None
    ours, theirs = (tree_differences(curve.reader(chosen_point), curve.mask)
                    for curve, chosen_point in ((candidate, chosen[0]), (reference, chosen[1])))
    binding = binding_tree_statistic(ours, z)
    rows = []
    for name in TREE_STATISTICS:
        (effect, se), (reference_effect, reference_se) = ours[name], theirs[name]
        closer = abs(reference_effect) - abs(effect)
        closer_se = difference_se(se, reference_se)
        verdict = rule_verdict("directional", closer, closer_se, z=z)
        rows.append({"statistic": name.replace("_", " "), "candidate": effect, "candidate SE": se,
                     "reference": reference_effect, "reference SE": reference_se, "closer by": closer,
                     "SE": closer_se,
                     "verdict": ("not measured" if not math.isfinite(closer) else
                                 {True: "closer", False: "farther", None: "within noise"}[verdict]),
                     "binding": name == binding})
    return pd.DataFrame(rows)
