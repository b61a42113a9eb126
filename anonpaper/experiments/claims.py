"""Claims: what a chapter tests, decided from the numbers of the run by one rule, in one vocabulary.

Every chapter's ``evaluate_claims(outcome)`` returns a list of :class:`Claim` built with :func:`decide`. A claim's
verdict is one of

- ``"holds"``: the run's numbers support the claim beyond their noise;
- ``"does not hold"``: they contradict it beyond their noise;
- ``"undecided"``: the run cannot tell, and ``reason`` says why: too few test images (``n < min_n``), an effect
  within its noise, no usable standard error, or an instrument under its floor.

**One rule** (:func:`anonpaper.metrics.statistics.rule_verdict`) decides every claim of every chapter, at
:data:`DECISION_Z` standard errors, in one of three forms:

- ``"directional"`` ("A lowers B", "X beats Y"): ``effect`` signed so that positive is the paper's direction;
  holds iff ``effect > z * se``, does not hold iff ``effect < -z * se``;
- ``"retention"`` ("keeps utility"): ``effect`` signed so that negative is a loss, ``margin > 0`` the loss allowed,
  fixed in the chapter's config before the run; holds iff ``effect - z * se >= -margin``, does not hold iff
  ``effect + z * se < -margin``;
- ``"equivalence"`` ("at chance", "unlinkable"): ``effect`` the distance from the reference value, ``margin > 0``;
  holds iff ``|effect| + z * se <= margin``, does not hold iff ``|effect| - z * se > margin``.

Otherwise the claim is undecided. Each :class:`Instrument` a claim rests on (an attacker, a segmenter, a
classifier, a generator...) carries its measured value and a floor; one that misses its floor makes the claim
undecided, and so does a metric that is constant across every setting (:func:`varies`). A record keeps all of these
fields, so :func:`check_record` (and ``anonpaper records check``) recomputes every verdict from them.

``kind`` separates what the paper claims (``"paper"``) from checks that the phantom cohorts do what they were built
to do (``"phantom-check"``), which follow the same rule. ``by_design`` is non-empty when the phantom's construction
settles a paper claim (e.g. the phantom puts its sex signal in the vessels, so "vessels carry sex" is built in, not
discovered); the ledger shows such claims apart.

Example:
    >>> attacker = Instrument("attacker validation accuracy", value=0.81, floor=0.6)
    >>> claim = decide("demo", "Blur lowers attacker accuracy", paper="-20 points", ours={"drop": 0.12},
    ...                rule="directional", effect=0.12, se=0.03, quantity="accuracy drop",
    ...                instruments=[attacker], n=50, min_n=40)
    >>> claim.verdict, claim.reason
    ('holds', 'accuracy drop = +0.12 (SE 0.03): beyond 2 SE (0.06) in the claimed direction')
    >>> decide("demo", "A beats B", paper=">", ours=0.8, rule="directional", effect=0.12, se=0.03,
    ...        n=10, min_n=40).reason
    'too few test images (10 < 40); effect = +0.12 (SE 0.03): beyond 2 SE (0.06) in the claimed direction'
    >>> weak = Instrument("attacker validation accuracy", value=0.52, floor=0.6)
    >>> decide("demo", "A beats B", paper=">", ours=0.8, rule="directional", effect=0.12, se=0.03,
    ...        instruments=[weak]).verdict
    'undecided'
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from anonpaper.metrics.statistics import RULES, combine_seeds, rule_verdict

HOLDS, FAILS, UNDECIDED = "holds", "does not hold", "undecided"
VERDICTS = (HOLDS, FAILS, UNDECIDED)
KINDS = ("paper", "phantom-check")
# A difference decides a claim when it exceeds this many standard errors (about 95 % two-sided).
DECISION_Z = 2.0


@dataclass(frozen=True)
class Instrument:
    """A measuring network or procedure a claim rests on, with its own check.

    Attributes:
        name: What is measured, e.g. ``"vessel segmenter validation Dice"``.
        value: The measured value from this run (NaN when it could not be measured: the check fails).
        floor: The value it must reach, fixed in the chapter's config before the run.
        higher_is_better: True when ``value >= floor`` passes; False when ``value <= floor`` passes (a ceiling).
        seed_sd: The standard deviation of ``value`` between networks trained with different seeds, when ``value``
            is their mean (0: one network).
        seeds: How many networks ``value`` is the mean of. With ``seeds > 1`` the floor must be met beyond the
            seed noise of the mean: ``value - DECISION_Z * seed_sd / sqrt(seeds) >= floor`` (for a ceiling,
            ``value + ... <= floor``), so that an instrument that clears its floor only by one lucky seed fails.

    Example:
        >>> Instrument("lesion U-Net validation Dice", 0.0, 0.3).passed
        False
        >>> Instrument("decoder output spread", 0.2, 0.05).as_dict()["passed"]
        True
        >>> Instrument("attacker rank-1", 0.62, 0.5, seed_sd=0.05, seeds=3).passed  # 0.62 - 2 * 0.029 >= 0.5
        True
        >>> Instrument("attacker rank-1", 0.55, 0.5, seed_sd=0.1, seeds=3).describe()  # the mean clears 0.5
        'attacker rank-1 0.55 (mean of 3 seeds, SD 0.1), less 2 SE: 0.4345 < floor 0.5'
    """

    name: str
    value: float
    floor: float
    higher_is_better: bool = True
    seed_sd: float = 0.0
    seeds: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.floor, (int, float)) or not math.isfinite(self.floor):
            raise ValueError(f"instrument {self.name!r}: floor must be a finite number, got {self.floor!r}")
        if not isinstance(self.seeds, int) or self.seeds < 1:
            raise ValueError(f"instrument {self.name!r}: seeds must be an integer >= 1, got {self.seeds!r}")

    @property
    def passed(self) -> bool:
        """Whether the measured value reaches the floor (False for a value that is NaN or missing)."""
        return instrument_passes(self.value, self.floor, self.higher_is_better, self.seed_sd, self.seeds)

    @property
    def bound(self) -> float:
        """What the floor is checked against: :func:`seed_bound` of ``value`` (``value`` itself for one network)."""
        return seed_bound(self.value, self.seed_sd, self.seeds, self.higher_is_better)

    def describe(self) -> str:
        """E.g. ``"vessel segmenter Dice 0.21 < floor 0.5"``; for the mean of several seeds, the bound the floor is
        checked against is written out, so that a mean above its floor that fails reads as it is decided."""
        sign = (">=" if self.passed else "<") if self.higher_is_better else ("<=" if self.passed else ">")
        text = f"{self.name} {_number(self.value)}"
        if self.seeds > 1:
            side = "less" if self.higher_is_better else "plus"
            text += (f" (mean of {self.seeds} seeds, SD {_number(self.seed_sd)}), {side} {_number(DECISION_Z)} SE: "
                     f"{_number(self.bound)}")
        return f"{text} {sign} floor {_number(self.floor)}"

    def as_dict(self) -> dict[str, Any]:
        entry = {"name": self.name, "value": _plain_float(self.value), "floor": float(self.floor),
                 "higher_is_better": self.higher_is_better, "passed": self.passed}
        if self.seeds > 1:
            entry.update(seed_sd=_plain_float(self.seed_sd), seeds=self.seeds, bound=_plain_float(self.bound))
        return entry


def seed_bound(value: Any, seed_sd: Any = 0.0, seeds: Any = 1, higher_is_better: bool = True) -> float:
    """The value an instrument's floor is checked against: for the mean of ``seeds`` networks, that mean moved
    ``DECISION_Z`` standard errors (``seed_sd / sqrt(seeds)``) away from the passing side (down for a floor, up for
    a ceiling); for one network, ``value`` itself.

    Args:
        value: The instrument's value (the mean over seeds); missing or non-finite gives NaN.
        seed_sd: Standard deviation of the value between seeds (ignored for one seed; non-finite gives an
            unbounded band: -inf for a floor, +inf for a ceiling).
        seeds: How many networks ``value`` is the mean of (missing, NaN or < 1 reads as one: a table row that no
            replicate filled).
        higher_is_better: True for a floor, False for a ceiling.

    Returns:
        The bound (a float; NaN when ``value`` is not a finite number).

    Example:
        >>> round(seed_bound(0.757, 0.045, 3), 3)  # 0.757 - 2 * 0.045 / sqrt(3)
        0.705
        >>> round(seed_bound(0.1, 0.02, 4, higher_is_better=False), 3), seed_bound(0.8, 0.3, 1)
        (0.12, 0.8)
    """
    count = _float_or_nan(seeds)
    seeds = int(count) if math.isfinite(count) and count >= 1 else 1
    value, spread = _float_or_nan(value), _float_or_nan(seed_sd) if seeds > 1 else 0.0
    if not math.isfinite(value):
        return float("nan")
    band = DECISION_Z * spread / math.sqrt(seeds) if math.isfinite(spread) else float("inf")
    return value - band if higher_is_better else value + band


def instrument_passes(value: Any, floor: float, higher_is_better: bool = True, seed_sd: Any = 0.0,
                      seeds: Any = 1) -> bool:
    """Whether ``value`` reaches ``floor`` (a missing or non-finite value never does); for the mean of ``seeds``
    networks, beyond ``DECISION_Z`` standard errors of that mean (:func:`seed_bound`; see :class:`Instrument`)."""
    bound = seed_bound(value, seed_sd, seeds, higher_is_better)
    if math.isnan(bound):
        return False
    return bound >= floor if higher_is_better else bound <= floor


def combine_replicate_tables(tables: Sequence[pd.DataFrame], keys: Sequence[str]) -> pd.DataFrame:
    """One table from the same table measured with judges trained with different seeds (row for row).

    Each column ``c`` that has a standard-error column ``c_se`` becomes the mean over replicates with the SE of
    :func:`anonpaper.metrics.statistics.combine_seeds` (bootstrap SEs plus the seed spread), and gains
    ``c_seed_sd``; a ``value`` column without an SE (an instrument check) becomes the mean, with ``seed_sd`` and
    ``seeds`` columns (what :class:`Instrument` reads); other columns are the first replicate's.

    Args:
        tables: (S,) tables with the same rows in the same order (``keys`` equal row for row).
        keys: The columns that name a row.

    Raises:
        ValueError: When no table is given or the tables' rows differ.

    Example:
        >>> first = pd.DataFrame({"set": ["a"], "rank1": [0.4], "rank1_se": [0.04], "value": [0.7]})
        >>> both = combine_replicate_tables([first, first.assign(rank1=0.6, value=0.9)], ["set"])
        >>> row = both.round(3).to_dict("records")[0]
        >>> row["rank1"], row["rank1_se"], row["rank1_seed_sd"], row["value"], row["seed_sd"], row["seeds"]
        (0.5, 0.108, 0.141, 0.8, 0.141, 2)
    """
    if not tables:
        raise ValueError("combine_replicate_tables needs at least one table")
    first = tables[0].reset_index(drop=True)
    for other in tables[1:]:
        if len(other) != len(first) or not other[list(keys)].reset_index(drop=True).equals(first[list(keys)]):
            raise ValueError(f"the replicate tables hold different rows (by {list(keys)})")
    combined = first.copy()
    if len(tables) == 1:
        return combined
    stacked = [table.reset_index(drop=True) for table in tables]
    for column in first.columns:
        if f"{column}_se" in first.columns:
            values = np.stack([table[column].to_numpy(dtype=np.float64) for table in stacked], axis=1)
            errors = np.stack([table[f"{column}_se"].to_numpy(dtype=np.float64) for table in stacked], axis=1)
            parts = [combine_seeds(row, error) for row, error in zip(values, errors)]
            combined[column] = [part[0] for part in parts]
            combined[f"{column}_se"] = [part[1] for part in parts]
            combined[f"{column}_seed_sd"] = [part[2] for part in parts]
    if "value" in first.columns and "value_se" not in first.columns:
        values = np.stack([table["value"].to_numpy(dtype=np.float64) for table in stacked], axis=1)
        moved = ~np.all(values == values[:, :1], axis=1)  # rows no judge seed moves keep one value, "1 seed"
        combined["value"] = np.where(moved, values.mean(1), values[:, 0])
        combined["seed_sd"] = np.where(moved, values.std(1, ddof=1), 0.0)
        combined["seeds"] = np.where(moved, len(tables), 1)
    return combined


def varies(name: str, values: Iterable[float], tolerance: float = 1e-9) -> Instrument:
    """An instrument check that a metric is not constant across every method and setting.

    A metric that takes one value everywhere (e.g. a lesion score of 1.000 in every row because its detector finds
    nothing) measures nothing, so a claim resting on it must be undecided.

    Args:
        name: The metric, e.g. ``"AMS"``.
        values: Its values across the compared settings; NaN values are ignored.
        tolerance: The smallest range (max - min) that counts as varying.

    Example:
        >>> varies("AMS", [1.0, 1.0, 1.0]).passed, varies("AMS", [0.9, 1.0]).passed
        (False, True)
    """
    finite = [float(value) for value in values if value is not None and math.isfinite(float(value))]
    spread = max(finite) - min(finite) if len(finite) >= 2 else float("nan")
    return Instrument(f"{name} range across settings", spread, tolerance)


@dataclass(frozen=True)
class Claim:
    """A claim tested on our data.

    Attributes:
        id: Short stable identifier, e.g. ``"snow-sex-falls"``.
        statement: The claim in words.
        paper: The paper's number(s) or wording (for a phantom check: the design target).
        ours: Our measured number(s), from this run.
        verdict: ``"holds"``, ``"does not hold"`` or ``"undecided"``.
        reason: Why, generated from the fields below: the deciding numbers, or why the run cannot decide.
        kind: ``"paper"`` or ``"phantom-check"``.
        by_design: Non-empty when the phantom's construction settles the claim: how.
        n: Size of the test set the verdict rests on (None when not a test-set claim).
        min_n: The smallest ``n`` on which the chapter decides (None: no minimum).
        rule: ``"directional"``, ``"retention"`` or ``"equivalence"`` (see the module docstring).
        effect: The deciding effect, signed by the rule's convention.
        se: Its standard error.
        z: Standard errors a decision needs (:data:`DECISION_Z`).
        margin: The allowed loss or distance of a retention or equivalence claim, fixed before the run.
        quantity: What ``effect`` is, in words (e.g. ``"FS_SIFT(alpha 0.2) - FS_SIFT(alpha 1)"``).
        instruments: The instruments the claim rests on, as :meth:`Instrument.as_dict` dictionaries.
    """

    id: str
    statement: str
    paper: Any
    ours: Any
    verdict: str
    reason: str = ""
    kind: str = "paper"
    by_design: str = ""
    n: int | None = None
    min_n: int | None = None
    rule: str = ""
    effect: float | None = None
    se: float | None = None
    z: float | None = None
    margin: float | None = None
    quantity: str = ""
    instruments: tuple = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"claim {self.id!r}: verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if self.kind not in KINDS:
            raise ValueError(f"claim {self.id!r}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.verdict == UNDECIDED and not self.reason:
            raise ValueError(f"claim {self.id!r}: an undecided claim needs a reason")
        if self.rule and self.rule not in RULES:
            raise ValueError(f"claim {self.id!r}: rule must be one of {RULES}, got {self.rule!r}")

    @property
    def holds(self) -> bool | None:
        """True / False for a decided claim, None when undecided."""
        return {HOLDS: True, FAILS: False, UNDECIDED: None}[self.verdict]

    @property
    def failed_instruments(self) -> list[dict]:
        return [instrument for instrument in self.instruments if not instrument["passed"]]

    def as_dict(self) -> dict[str, Any]:
        """The claim's fields plus ``holds``, for results records."""
        fields = asdict(self)
        fields["instruments"] = [dict(instrument) for instrument in self.instruments]
        for name in ("effect", "se", "margin"):
            fields[name] = _plain_float(fields[name])
        return {**fields, "holds": self.holds}


def verdict_from_fields(rule: str, effect: Any, se: Any, z: float, margin: float | None = None,
                        instruments: Sequence[dict] = (), n: int | None = None,
                        min_n: int | None = None) -> str:
    """The verdict the one rule gives from a claim's recorded fields (what :func:`decide` and :func:`check_record`
    both use).

    Undecided when ``n < min_n``, when any instrument has ``passed`` false, or when :func:`rule_verdict` is.

    >>> verdict_from_fields("equivalence", 0.02, 0.01, 2.0, margin=0.05)
    'holds'
    >>> verdict_from_fields("equivalence", 0.02, 0.01, 2.0, margin=0.05, instruments=[{"passed": False}])
    'undecided'
    """
    if n is not None and min_n is not None and n < min_n:
        return UNDECIDED
    if any(not instrument["passed"] for instrument in instruments):
        return UNDECIDED
    holds = rule_verdict(rule, _float_or_nan(effect), _float_or_nan(se), z=z, margin=margin)
    return UNDECIDED if holds is None else (HOLDS if holds else FAILS)


def decide(id: str, statement: str, *, paper: Any, ours: Any, rule: str, effect: float = float("nan"),
           se: float = float("nan"), margin: float | None = None, quantity: str = "", instruments: Iterable[Instrument] = (),
           n: int | None = None, min_n: int | None = None, kind: str = "paper", by_design: str = "",
           note: str = "", z: float = DECISION_Z) -> Claim:
    """Decide a claim by the one rule and build its :class:`Claim`, with a reason generated from the fields.

    Args:
        id, statement, paper, ours: See :class:`Claim`.
        rule: ``"directional"``, ``"retention"`` or ``"equivalence"``.
        effect: The deciding effect, signed by the rule's convention (NaN when it cannot be measured: then
            ``note`` must say why).
        se: Its standard error (a claim with no finite positive SE is undecided).
        margin: Retention / equivalence margin (> 0), from the chapter's config.
        quantity: What ``effect`` is, in words.
        instruments: The instruments the claim rests on; one under its floor makes the claim undecided.
        n, min_n: Test-set size and the chapter's smallest decidable one.
        kind, by_design: See :class:`Claim`.
        note: Context appended to the generated reason (how the effect was computed, what it leaves out).
        z: Standard errors a decision needs.

    Raises:
        ValueError: On an unknown rule or kind, or a retention / equivalence claim without a positive margin.
    """
    instruments = tuple(instrument.as_dict() if isinstance(instrument, Instrument) else dict(instrument)
                        for instrument in instruments)
    verdict = verdict_from_fields(rule, effect, se, z, margin, instruments, n, min_n)
    reason = _reason(rule, effect, se, z, margin, quantity or "effect", instruments, n, min_n)
    if note:
        reason = f"{reason}; {note}"
    return Claim(id, statement, paper, ours, verdict, reason, kind, by_design, n, min_n, rule, _plain_float(effect),
                 _plain_float(se), float(z), None if margin is None else float(margin), quantity, instruments)


def combine_seed_claims(per_seed: Sequence[Sequence[Claim]], replicates: str = "judge seeds") -> list[Claim]:
    """One claim per id from the same claims decided on networks trained with different seeds, decided again.

    A chapter that trains its judges (attackers, classifiers) several times with different seeds decides every
    claim once per replicate and combines them here, so that the verdict carries the judges' training randomness:
    the effect is the mean over replicates and its SE adds their spread to the bootstrap SE
    (:func:`anonpaper.metrics.statistics.combine_seeds`); each instrument becomes the mean of its replicates with
    their SD (:class:`Instrument`, whose floor then holds beyond that spread); numbers in ``ours`` are averaged,
    except the smallest resolvable effect (keys ``"resolvable (...)"`` or ``"2 SE"``), recomputed from the new SE.
    A claim that comes out the same in every replicate (one resting on no judge) is returned as it is.

    Args:
        per_seed: (S, C) the claims of each replicate, the same ids in the same order.
        replicates: What the replicates are, for the reason text.

    Returns:
        (C,) claims, each decided by :func:`decide` from the combined fields.

    Raises:
        ValueError: When no replicate is given or the replicates' claim ids differ.

    Example:
        >>> attacker = lambda value: Instrument("attacker rank-1", value, 0.5)
        >>> seeds = [[decide("c", "A beats B", paper=">", ours={"drop": effect}, rule="directional", effect=effect,
        ...                  se=0.02, instruments=[attacker(rank1)])] for effect, rank1 in ((0.10, 0.8), (0.02, 0.7))]
        >>> [claim.verdict for claims in seeds for claim in claims]
        ['holds', 'undecided']
        >>> combined = combine_seed_claims(seeds)[0]
        >>> combined.verdict, round(combined.effect, 3), round(combined.se, 3), combined.ours
        ('undecided', 0.06, 0.045, {'drop': 0.06})
        >>> combined.instruments[0]["seeds"], round(combined.instruments[0]["seed_sd"], 3)
        (2, 0.071)
    """
    if not per_seed:
        raise ValueError("combine_seed_claims needs the claims of at least one replicate")
    ids = [[claim.id for claim in claims] for claims in per_seed]
    if any(other != ids[0] for other in ids[1:]):
        other = next(other for other in ids if other != ids[0])
        raise ValueError(f"the replicates decided different claims: {ids[0]} against {other}")
    return [_combine_claim([claims[index] for claims in per_seed], replicates) for index in range(len(ids[0]))]


def _combine_claim(claims: list[Claim], replicates: str) -> Claim:
    first = claims[0]
    # Compared as JSON text, where NaN equals NaN: a claim no judge touches is the same in every replicate.
    if len({json.dumps(claim.as_dict(), sort_keys=True, default=str) for claim in claims}) == 1:
        return first
    count = len(claims)
    effects = [_float_or_nan(claim.effect) for claim in claims]
    errors = [_float_or_nan(claim.se) for claim in claims]
    if all(math.isfinite(value) for value in effects + errors):
        effect, se, spread = combine_seeds(effects, errors)
        note = (f"mean of {count} {replicates}, {first.quantity or 'effect'} per seed "
                + ", ".join(f"{value:+.3g}" for value in effects) + f" (SD {spread:.2g})")
    else:
        measured = sum(math.isfinite(value) for value in effects)
        effect, se = float("nan"), float("nan")
        note = f"measured with a usable SE in {measured} of {count} {replicates}"
    generated = _reason(first.rule, first.effect, first.se, first.z, first.margin, first.quantity or "effect",
                        first.instruments, first.n, first.min_n)
    own_note = first.reason[len(generated) + 2:] if first.reason.startswith(generated + "; ") else ""
    names: dict[str, list] = {}
    for claim in claims:
        for instrument in claim.instruments:
            names.setdefault(instrument["name"], []).append(instrument)
    instruments = []
    for name, entries in names.items():
        values = np.array([_float_or_nan(entry["value"]) for entry in entries])
        floor, higher_is_better = entries[0]["floor"], entries[0].get("higher_is_better", True)
        if len(set(values.tolist())) == 1 or np.isnan(values).all():  # an instrument no judge seed moves
            instruments.append(Instrument(name, float(values[0]), floor, higher_is_better))
        else:
            instruments.append(Instrument(name, float(values.mean()), floor, higher_is_better,
                                          float(values.std(ddof=1)), len(values)))
    ours = _mean_of([claim.ours for claim in claims])
    if isinstance(ours, dict) and isinstance(first.ours, dict):
        ours = _resolvable_from(ours, first.ours, _float_or_nan(first.se), se)
    return decide(first.id, first.statement, paper=first.paper, ours=ours,
                  rule=first.rule, effect=effect, se=se, margin=first.margin, quantity=first.quantity,
                  instruments=instruments, n=first.n, min_n=first.min_n, kind=first.kind,
                  by_design=first.by_design, note="; ".join(part for part in (note, own_note) if part), z=first.z)


def _resolvable_from(ours: dict, first: dict, first_se: float, se: float) -> dict:
    """``ours`` with its resolvable-effect entries (keys ``"resolvable (...)"`` or ``"<z> SE"``: a multiple of the
    claim's own SE) recomputed from the combined SE instead of averaged."""
    resolvable = {key for key in ours if isinstance(key, str)
                  and (key.startswith("resolvable (") or key == f"{DECISION_Z:g} SE")}
    for key in resolvable:
        value = first.get(key)
        # The multiple (z, or 100 z for points) read back from the rounded entry, to two significant digits.
        ratio = float(f"{float(value) / first_se:.2g}") if isinstance(value, (int, float)) and first_se > 0 \
            else float("nan")
        ours[key] = round(ratio * se, 4) if math.isfinite(ratio) and math.isfinite(se) else None
    return ours


def _mean_of(values: list[Any]) -> Any:
    """The replicates' ``ours`` averaged where they are numbers (dicts and lists key by key), else the first's."""
    first = values[0]
    if all(isinstance(value, dict) for value in values) and all(value.keys() == first.keys() for value in values):
        return {key: _mean_of([value[key] for value in values]) for key in first}
    if all(isinstance(value, (list, tuple)) for value in values) and len({len(value) for value in values}) == 1:
        return type(first)(_mean_of(list(items)) for items in zip(*values))
    numbers = [value for value in values if isinstance(value, (int, float)) and not isinstance(value, bool)]
    if len(numbers) == len(values) and len(set(numbers)) > 1:
        mean = float(np.mean(numbers))
        return round(mean, 4) if math.isfinite(mean) else None
    return first


def check_record(record: dict) -> list[str]:
    """Problems with the claims of one results record: every verdict recomputed by the one rule from its fields.

    A problem is a claim decided without a rule, an instrument without a finite floor or whose ``passed`` flag
    disagrees with its value and floor, or a verdict that differs from what the rule gives from the recorded
    ``effect``, ``se``, ``z``, ``margin``, instruments and test-set size.

    Args:
        record: A results record as written by :class:`anonpaper.runner.record.Results` (a dict with ``claims``).

    Returns:
        ``"<claim id>: <problem>"`` strings; empty when every claim checks out.

    Example:
        >>> good = decide("a", "A beats B", paper=">", ours=1, rule="directional", effect=0.3, se=0.1).as_dict()
        >>> check_record({"claims": [good]})
        []
        >>> check_record({"claims": [{**good, "verdict": "does not hold"}]})
        ["a: recorded verdict 'does not hold' but the directional rule gives 'holds' (effect 0.3, se 0.1, z 2)"]
    """
    problems = []
    if not isinstance(record, dict) or not isinstance(record.get("claims"), list):
        return ["record: no list of claims"]
    for claim in record["claims"]:
        claim_id = claim.get("id", "?")
        rule = claim.get("rule") or ""
        if rule not in RULES:
            problems.append(f"{claim_id}: no decision rule (verdict {claim.get('verdict')!r} was not decided by the "
                            "one rule from an effect and its SE)")
            continue
        instruments = claim.get("instruments") or []
        bad_instrument = False
        for instrument in instruments:
            floor = instrument.get("floor")
            if not isinstance(floor, (int, float)) or not math.isfinite(floor):
                problems.append(f"{claim_id}: instrument {instrument.get('name')!r} has no finite floor")
                bad_instrument = True
                continue
            expected = instrument_passes(instrument.get("value"), floor, instrument.get("higher_is_better", True),
                                         instrument.get("seed_sd", 0.0), instrument.get("seeds", 1))
            if bool(instrument.get("passed")) != expected:
                problems.append(f"{claim_id}: instrument {instrument.get('name')!r} says passed="
                                f"{instrument.get('passed')} but value {instrument.get('value')} vs floor {floor} "
                                f"gives {expected}")
                bad_instrument = True
        if bad_instrument:
            continue
        z, margin = claim.get("z"), claim.get("margin")
        try:
            expected = verdict_from_fields(rule, claim.get("effect"), claim.get("se"), z, margin, instruments,
                                           claim.get("n"), claim.get("min_n"))
        except ValueError as error:
            problems.append(f"{claim_id}: {error}")
            continue
        if expected != claim.get("verdict"):
            problems.append(f"{claim_id}: recorded verdict {claim.get('verdict')!r} but the {rule} rule gives "
                            f"{expected!r} (effect {claim.get('effect')}, se {claim.get('se')}, z {_number(z)}"
                            + (f", margin {margin}" if margin is not None else "") + ")")
    return problems


def _reason(rule: str, effect: Any, se: Any, z: float, margin: float | None, quantity: str,
            instruments: Sequence[dict], n: int | None, min_n: int | None) -> str:
    """The reason text, generated from the claim's fields."""
    parts = []
    if n is not None and min_n is not None and n < min_n:
        parts.append(f"too few test images ({n} < {min_n})")
    failed = [instrument for instrument in instruments if not instrument["passed"]]
    if failed:
        parts.append("instrument under its floor: " + "; ".join(
            Instrument(i["name"], _float_or_nan(i["value"]), i["floor"], i.get("higher_is_better", True),
                       _float_or_nan(i.get("seed_sd", 0.0)), i.get("seeds", 1)).describe() for i in failed))
    effect, se = _float_or_nan(effect), _float_or_nan(se)
    if not math.isfinite(effect):
        parts.append(f"{quantity} could not be measured")
        return "; ".join(parts)
    measured = f"{quantity} = {effect:+.4g}"
    if not (math.isfinite(se) and se > 0):
        parts.append(f"{measured}, but it has no usable standard error")
        return "; ".join(parts)
    measured += f" (SE {se:.2g})"
    holds = rule_verdict(rule, effect, se, z=z, margin=margin)
    band = z * se
    if rule == "directional":
        outcome = (f"beyond {z:g} SE ({band:.2g}) in the claimed direction" if holds is True else
                   f"beyond {z:g} SE ({band:.2g}) against the claimed direction" if holds is False else
                   f"within {z:g} SE ({band:.2g}) of no effect")
    elif rule == "retention":
        outcome = (f"the loss allowed is {margin:g}; worst case at {z:g} SE {effect - band:+.4g}"
                   + (" stays inside it" if holds is True else
                      f", best case {effect + band:+.4g} is beyond it" if holds is False else
                      f" is beyond it, best case {effect + band:+.4g} is not"))
    else:
        outcome = (f"distance allowed {margin:g}; |effect| + {z:g} SE = {abs(effect) + band:.4g}"
                   + (" inside it" if holds is True else
                      f", and |effect| - {z:g} SE = {abs(effect) - band:.4g} is beyond it" if holds is False else
                      " is not inside it, nor |effect| - z SE beyond it"))
    parts.append(f"{measured}: {outcome}")
    return "; ".join(parts)


def _float_or_nan(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _plain_float(value: Any) -> float | None:
    """A finite float, or None for a missing / NaN / infinite value (records hold JSON numbers or null)."""
    value = _float_or_nan(value)
    return value if math.isfinite(value) else None


def _number(value: Any) -> str:
    value = _float_or_nan(value)
    return f"{value:.4g}" if math.isfinite(value) else "n/a"
