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

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Sequence

from anonpaper.metrics.statistics import RULES, rule_verdict

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

    Example:
        >>> Instrument("lesion U-Net validation Dice", 0.0, 0.3).passed
        False
        >>> Instrument("decoder output spread", 0.2, 0.05).as_dict()["passed"]
        True
    """

    name: str
    value: float
    floor: float
    higher_is_better: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.floor, (int, float)) or not math.isfinite(self.floor):
            raise ValueError(f"instrument {self.name!r}: floor must be a finite number, got {self.floor!r}")

    @property
    def passed(self) -> bool:
        """Whether the measured value reaches the floor (False for a value that is NaN or missing)."""
        return instrument_passes(self.value, self.floor, self.higher_is_better)

    def describe(self) -> str:
        """E.g. ``"vessel segmenter Dice 0.21 < floor 0.5"``."""
        sign = (">=" if self.passed else "<") if self.higher_is_better else ("<=" if self.passed else ">")
        return f"{self.name} {_number(self.value)} {sign} floor {_number(self.floor)}"

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": _plain_float(self.value), "floor": float(self.floor),
                "higher_is_better": self.higher_is_better, "passed": self.passed}


def instrument_passes(value: Any, floor: float, higher_is_better: bool = True) -> bool:
    """Whether ``value`` reaches ``floor`` (a missing or non-finite value never does)."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return False
    if not math.isfinite(value):
        return False
    return value >= floor if higher_is_better else value <= floor


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
            expected = instrument_passes(instrument.get("value"), floor, instrument.get("higher_is_better", True))
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
            Instrument(i["name"], i["value"], i["floor"], i.get("higher_is_better", True)).describe() for i in failed))
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
