"""One audited number: its value on the release, on the originals, at chance, and the advantage retained, each
with a patient-bootstrap standard error (plus the seed spread where networks were trained with several seeds).

**Advantage retained** = ``(score on the release - chance) / (score on the originals - chance)``: 1 when the release
hides (or loses) nothing, 0 when the score is at chance; it can exceed 1 or fall below 0, and it is undefined (NaN)
when the originals' score is not above chance (nothing to retain). A *two-sided* score (the
own-closer share, whose distance from 0.5 on either side is signal) uses ``|release - chance| / |original -
chance|``. Its standard error comes from the same **paired patient bootstrap** as the value's: each resample draws
patients once and recomputes the release score, the originals' score and their ratio on them (no delta method), so
the correlation between the two scores is kept; resamples on which the ratio is undefined are ignored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from anonpaper.metrics.statistics import combine_seeds, patient_bootstrap_se

RowMetric = Callable[[np.ndarray], float]


def advantage_retained(value: float, original: float, chance: float, two_sided: bool = False) -> float:
    """``(value - chance) / (original - chance)`` (two-sided: absolute values of both); NaN when the originals'
    score is not above chance (nothing to retain) or a term is not finite.

    Example:
        >>> advantage_retained(0.75, 1.0, 0.5), advantage_retained(0.5, 0.9, 0.5)
        (0.5, 0.0)
        >>> advantage_retained(0.3, 0.9, 0.5, two_sided=True)
        0.5
        >>> advantage_retained(0.6, 0.45, 0.5)
        nan
    """
    numerator, denominator = value - chance, original - chance
    if two_sided:
        numerator, denominator = abs(numerator), abs(denominator)
    # An originals' score at or below chance has no advantage to retain.
    if not (math.isfinite(numerator) and math.isfinite(denominator)) or denominator < 1e-12:
        return float("nan")
    return float(numerator / denominator)


@dataclass(frozen=True)
class Score:
    """One audited number.

    Attributes:
        metric: What is measured (``"rank-1"``, ``"balanced accuracy"``, ``"QWK"``...).
        meaning: One sentence for the report: what the number says and which direction is worse.
        value: Score on the release (mean over attacker seeds).
        se: Its standard error (patient bootstrap of the attacked patients, plus the seed spread).
        chance: The score of an attacker (or model) that learned nothing from the images.
        original: The same score when the originals themselves are released.
        original_se: Its standard error.
        advantage_retained: ``(value - chance) / (original - chance)`` (module docstring), NaN when undefined.
        advantage_retained_se: Its paired-bootstrap standard error (plus the seed spread).
        seed_sd: Standard deviation of ``value`` between attacker seeds (0 for one seed).
        two_sided: Whether a departure from chance on either side counts (the own-closer share).
        n_images: Images (rows) the score is computed on.
        n_patients: Patients behind them.
        reason: Why the score could not be computed (then every number is NaN); empty otherwise.
    """

    metric: str
    meaning: str
    value: float = float("nan")
    se: float = float("nan")
    chance: float = float("nan")
    original: float = float("nan")
    original_se: float = float("nan")
    advantage_retained: float = float("nan")
    advantage_retained_se: float = float("nan")
    seed_sd: float = float("nan")
    two_sided: bool = False
    n_images: int = 0
    n_patients: int = 0
    reason: str = ""

    @property
    def available(self) -> bool:
        """Whether the score was computed."""
        return not self.reason

    def to_dict(self) -> dict:
        """JSON-ready: non-finite numbers (PSNR of identical images, undefined ratios) become None."""
        def number(value: float):
            return float(value) if value is not None and math.isfinite(value) else None

        entry = {"value": number(self.value), "se": number(self.se), "chance": number(self.chance),
                 "original": number(self.original), "advantage_retained": number(self.advantage_retained),
                 "original_se": number(self.original_se),
                 "advantage_retained_se": number(self.advantage_retained_se), "seed_sd": number(self.seed_sd),
                 "metric": self.metric, "meaning": self.meaning, "two_sided": self.two_sided,
                 "n_images": int(self.n_images), "n_patients": int(self.n_patients)}
        if self.reason:
            entry["reason"] = self.reason
        return entry


@dataclass(frozen=True)
class SeedScore:
    """The three numbers of one attacker seed, each with its bootstrap SE."""

    value: float
    value_se: float
    original: float
    original_se: float
    chance: float
    ratio: float
    ratio_se: float
    n_images: int
    n_patients: int


def paired_seed_score(release_metric: RowMetric, original_metric: RowMetric, release_patients: np.ndarray,
                      original_patients: np.ndarray, chance: float | Callable[[np.ndarray, np.ndarray], float], *,
                      resamples: int, seed: int, two_sided: bool = False) -> SeedScore:
    """Value, originals' value and advantage retained of one attacker, with paired patient-bootstrap SEs.

    The release rows and the originals' rows (e.g. each released image and its source; or the same test images
    scored by a model trained on the release and by one trained on the originals) are stacked into one table;
    :func:`anonpaper.metrics.statistics.patient_bootstrap_se` resamples its patients, so every resample draws the
    same patients for both scores and their ratio.

    Args:
        release_metric: ``metric(rows) -> float`` on release row indices (with repeats) ``0..R-1``.
        original_metric: The same on the originals' row indices ``0..O-1``.
        release_patients: (R,) patient of each release row.
        original_patients: (O,) patient of each originals' row.
        chance: A number, or ``chance(release_rows, original_rows) -> float`` where chance depends on the rows.
        resamples: Bootstrap resamples.
        seed: Seed of the resamples (the same for the three SEs, so they share their draws).
        two_sided: See :func:`advantage_retained`.

    Returns:
        :class:`SeedScore`.
    """
    release_patients, original_patients = np.asarray(release_patients), np.asarray(original_patients)
    count = len(release_patients)
    patients = np.concatenate([release_patients.astype(str), original_patients.astype(str)])
    rows = np.arange(len(patients))
    chance_of = chance if callable(chance) else (lambda release_rows, original_rows: float(chance))

    def split(chosen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return chosen[chosen < count], chosen[chosen >= count] - count

    def release(chosen: np.ndarray) -> float:
        part = split(chosen)[0]
        return release_metric(part) if len(part) else float("nan")

    def original(chosen: np.ndarray) -> float:
        part = split(chosen)[1]
        return original_metric(part) if len(part) else float("nan")

    def ratio(chosen: np.ndarray) -> float:
        return advantage_retained(release(chosen), original(chosen), chance_of(*split(chosen)), two_sided)

    def bootstrap(metric: RowMetric) -> float:
        return patient_bootstrap_se(rows, rows, patients, lambda chosen, _: metric(chosen), resamples, seed)

    return SeedScore(value=release(rows), value_se=bootstrap(release), original=original(rows),
                     original_se=bootstrap(original), chance=float(chance_of(*split(rows))), ratio=ratio(rows),
                     ratio_se=bootstrap(ratio), n_images=count, n_patients=len(np.unique(release_patients)))


def combine(per_seed: list[SeedScore], metric: str, meaning: str, *, two_sided: bool = False) -> Score:
    """One :class:`Score` from the attacker seeds' :class:`SeedScore` (mean over seeds; SE with the seed spread,
    :func:`anonpaper.metrics.statistics.combine_seeds`)."""
    def merged(values: list[float], errors: list[float]) -> tuple[float, float, float]:
        values, errors = np.asarray(values, float), np.asarray(errors, float)
        if not np.all(np.isfinite(values)):
            return float(np.mean(values)), float("nan"), float("nan")
        return combine_seeds(values, errors)

    value, se, seed_sd = merged([s.value for s in per_seed], [s.value_se for s in per_seed])
    original, original_se, _ = merged([s.original for s in per_seed], [s.original_se for s in per_seed])
    ratio, ratio_se, _ = merged([s.ratio for s in per_seed], [s.ratio_se for s in per_seed])
    if not math.isfinite(ratio):
        ratio_se = float("nan")
    chance = float(np.mean([s.chance for s in per_seed]))
    return Score(metric=metric, meaning=meaning, value=value, se=se, chance=chance,
                 original=original, original_se=original_se, advantage_retained=ratio, advantage_retained_se=ratio_se,
                 seed_sd=seed_sd, two_sided=two_sided, n_images=per_seed[0].n_images,
                 n_patients=per_seed[0].n_patients)
