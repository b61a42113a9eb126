"""Claims: what a chapter tests, decided from the numbers of the run, in one vocabulary.

Every chapter's ``evaluate_claims(outcome)`` returns a list of :class:`Claim` built with :func:`decide`. A claim's
verdict is one of

- ``"holds"``: the run's numbers support the claim beyond their noise;
- ``"does not hold"``: they contradict it;
- ``"undecided"``: the run cannot tell, and ``reason`` says why: too few test images (one rule for every chapter:
  ``n < min_n``), a difference within its noise, or an instrument that failed its own check.

The noise rule is one too: a difference decides a claim when it exceeds :data:`DECISION_Z` combined standard
errors.

``kind`` separates what the paper claims (``"paper"``) from checks that the phantom cohorts do what they were
built to do (``"phantom-check"``: calibration targets, learnability). ``by_design`` is non-empty when the
phantom's construction settles a paper claim (e.g. the phantom puts its sex signal in the vessels, so "vessels
carry sex" is built in, not discovered); the ledger shows such claims apart.

Example:
    >>> claim = decide("demo", "A beats B", paper=">", ours=0.8, holds=True, reason="0.8 > 0.5", n=10, min_n=40)
    >>> claim.verdict, claim.reason
    ('undecided', 'too few test images (10 < 40); 0.8 > 0.5')
    >>> decide("demo", "A beats B", paper=">", ours=0.8, holds=True, reason="0.8 > 0.5", n=50, min_n=40).verdict
    'holds'
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

HOLDS, FAILS, UNDECIDED = "holds", "does not hold", "undecided"
VERDICTS = (HOLDS, FAILS, UNDECIDED)
KINDS = ("paper", "phantom-check")
# A difference decides a claim when it exceeds this many combined standard errors (about 95 % two-sided).
DECISION_Z = 2.0


@dataclass(frozen=True)
class Claim:
    """A claim tested on our data.

    Attributes:
        id: Short stable identifier, e.g. ``"snow-sex-falls"``.
        statement: The claim in words.
        paper: The paper's number(s) or wording (for a phantom check: the design target).
        ours: Our measured number(s), from this run.
        verdict: ``"holds"``, ``"does not hold"`` or ``"undecided"``.
        reason: Why: the deciding numbers, or why the run cannot decide.
        kind: ``"paper"`` or ``"phantom-check"``.
        by_design: Non-empty when the phantom's construction settles the claim: how.
        n: Size of the test set the verdict rests on (None when not a test-set claim).
        min_n: The smallest ``n`` on which the chapter decides (None: no minimum).
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

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"claim {self.id!r}: verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if self.kind not in KINDS:
            raise ValueError(f"claim {self.id!r}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.verdict == UNDECIDED and not self.reason:
            raise ValueError(f"claim {self.id!r}: an undecided claim needs a reason")

    @property
    def holds(self) -> bool | None:
        """True / False for a decided claim, None when undecided."""
        return {HOLDS: True, FAILS: False, UNDECIDED: None}[self.verdict]

    def as_dict(self) -> dict[str, Any]:
        """The claim's fields plus ``holds``, for results records."""
        return {**asdict(self), "holds": self.holds}


def decide(id: str, statement: str, *, paper: Any, ours: Any, holds: bool | None, reason: str = "",
           n: int | None = None, min_n: int | None = None, kind: str = "paper", by_design: str = "") -> Claim:
    """Build a :class:`Claim` whose verdict follows from ``holds`` and the test-set size.

    Args:
        holds: The verdict computed from ``ours`` (True / False), or None when the numbers cannot decide (then
            ``reason`` must say why, e.g. "difference within 2 SE").
        reason: The deciding numbers, or why undecided.
        n: Test-set size behind the verdict; with ``min_n``, ``n < min_n`` makes the claim undecided whatever
            ``holds`` says (the one rule for "too few test images").
        min_n: The chapter's smallest decidable test set.
        kind, by_design: See :class:`Claim`.
    """
    if holds is not None and not isinstance(holds, bool):
        holds = bool(holds)  # numpy booleans
    if n is not None and min_n is not None and n < min_n:
        prefix = f"too few test images ({n} < {min_n})"
        return Claim(id, statement, paper, ours, UNDECIDED, f"{prefix}; {reason}" if reason else prefix, kind,
                     by_design, n, min_n)
    verdict = UNDECIDED if holds is None else (HOLDS if holds else FAILS)
    return Claim(id, statement, paper, ours, verdict, reason, kind, by_design, n, min_n)


def instrument_failed(claim: Claim, instrument: str, why: str) -> Claim:
    """``claim`` made undecided because an instrument it relies on failed its own check.

    Args:
        instrument: What failed, e.g. ``"vessel segmenter"``.
        why: The failed check with its numbers, e.g. ``"test Dice 0.21 < 0.5"``.
    """
    reason = f"{instrument} failed its check ({why})" + (f"; {claim.reason}" if claim.reason else "")
    return Claim(claim.id, claim.statement, claim.paper, claim.ours, UNDECIDED, reason, claim.kind, claim.by_design,
                 claim.n, claim.min_n)
