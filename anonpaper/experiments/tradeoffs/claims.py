"""The trade-offs chapter's claims, decided from the audits by the one rule (:mod:`anonpaper.experiments.claims`).

Per modality:

- ``<modality>-originals-leak`` (phantom check, directional): every attack beats chance on the unchanged release;
  decided on the attack with the smallest lower bound (value - chance - 2 SE), so it holds only when all do.
- ``<modality>-constant-removes-threats`` (phantom check, equivalence to 0 with margin ``CHANCE_MARGIN``): the
  constant image leaves every threat at chance; decided on the threat whose interval reaches furthest from 0
  (``|advantage retained| + 2 SE``) unless another lies beyond the margin by more than 2 SE (then that one decides,
  and the claim does not hold). A score that is exactly at chance in every bootstrap resample (a constant attacker
  output) has SE 0 and counts as inside.
- ``<modality>-<method>-vs-blur-<threat>`` (directional): the method keeps more utility than Gaussian blur at the
  privacy it reaches against that threat (:func:`anonpaper.experiments.tradeoffs.analysis.matched_gains`: the mean
  gain over the method's knob values that fall inside blur's privacy range). Where none does, the claim is
  undecided and its reason gives blur's range and the method's values.

The instruments are each axis's attack (or task model) on the originals, which must beat chance by
``ATTACKER_MIN_ADVANTAGE`` (``UTILITY_MIN_ADVANTAGE``): advantage retained divides by that margin. A comparison
also carries a :func:`~anonpaper.experiments.claims.varies` check on the advantage retained across releases.
*No change* retains every advantage exactly (advantage retained 1 with SE 0: the audit scores the originals as its
reference), so it anchors the figures and makes no claim.
"""

from __future__ import annotations

import math

from anonpaper.experiments.claims import DECISION_Z, Claim, Instrument, decide, varies
from anonpaper.experiments.tradeoffs.analysis import (COMPARED_WITH_BLUR, REFERENCE, THREAT_LABELS, THREATS,
                                                      instruments, matched_gains, points, reference_range)
from anonpaper.experiments.tradeoffs.pipeline import CONSTANT, METHOD_LABELS, MODALITIES, NO_CHANGE, Outcome

PAPER_COMPARISON = {
    "snow": "Paper 2 compares Snow with VS-Snow, not with blur.",
    "vs-snow": "Paper 2 compares VS-Snow with Snow, not with blur.",
    "k-same-pixel": "Paper 4 uses k-same pixel averaging as its baseline; no paper compares it with blur.",
    "k-salsa": "Paper 4 compares k-SALSA with k-same pixel averaging and the latent centroid, not with blur.",
    "sspace-vessel-edit": "Paper 1 compares its vessel edit with StyleSpace, LowRankGAN and ReSeFa at matched image "
                          "change, not with blur.",
    "stylespace": "Paper 1 uses StyleSpace as a baseline of its vessel edit; no paper compares it with blur.",
    "gmia": "Paper 3 reports GMIA's identity and utility scores, not a comparison with blur at matched privacy (the "
            "GMIA chapter compares them at equal PSNR).",
    "identity-swap": "Paper 5 compares its identity swap with averaged identities (K-Same-like), not with blur.",
}


def _instrument(item: dict) -> Instrument:
    return Instrument(item["name"], item["value"], item["floor"])


def _originals_leak(outcome: Outcome, modality: str) -> Claim:
    frame = points(outcome, modality)
    row = frame.loc[METHOD_LABELS[NO_CHANGE]]
    bounds = {threat: row[f"{threat}_value"] - row[f"{threat}_chance"] - DECISION_Z * row[f"{threat}_se"]
              for threat in THREATS}
    finite = {threat: bound for threat, bound in bounds.items() if math.isfinite(bound)}
    weakest = min(finite, key=finite.get) if finite else THREATS[0]
    effect = row[f"{weakest}_value"] - row[f"{weakest}_chance"]
    ours = {threat: {"value": row[f"{threat}_value"], "chance": row[f"{threat}_chance"], "se": row[f"{threat}_se"]}
            for threat in THREATS}
    return decide(f"{modality}-originals-leak",
                  f"On the unchanged {MODALITIES[modality]} release every attack (linkage, sex inference, "
                  "membership) beats chance", paper="the threats the methods are meant to remove", ours=ours,
                  rule="directional", effect=effect, se=row[f"{weakest}_se"],
                  quantity=f"{THREAT_LABELS[weakest]} score - chance (the weakest attack)",
                  n=int(row[f"{weakest}_n"]), min_n=outcome.config.min_attacked_patients, kind="phantom-check")


def _constant_removes(outcome: Outcome, modality: str) -> Claim:
    config = outcome.config
    frame = points(outcome, modality)
    row = frame.loc[METHOD_LABELS[CONSTANT]]
    checks = instruments(outcome, modality)
    values = {threat: (row[f"{threat}_ar"], row[f"{threat}_ar_se"]) for threat in THREATS}
    finite = {threat: (value, se) for threat, (value, se) in values.items()
              if math.isfinite(value) and math.isfinite(se)}
    spread = {threat: item for threat, item in finite.items() if item[1] > 0}
    # A score at chance in every bootstrap resample (a constant attacker output) has SE 0: inside the margin when it
    # is 0, undecidable by the rule (which needs a positive SE) when it is not.
    flat_outside = [threat for threat, (value, se) in finite.items() if se == 0 and abs(value) > config.chance_margin]
    if flat_outside:
        deciding = flat_outside[0]
    elif spread:
        beyond = {threat: abs(value) - DECISION_Z * se for threat, (value, se) in spread.items()}
        reach = {threat: abs(value) + DECISION_Z * se for threat, (value, se) in spread.items()}
        deciding = (max(beyond, key=beyond.get) if max(beyond.values()) > config.chance_margin
                    else max(reach, key=reach.get))
    else:
        deciding = next(iter(finite), THREATS[0])
    effect, se = finite.get(deciding, (float("nan"), float("nan")))
    ours = {threat: {"advantage_retained": value, "se": se_} for threat, (value, se_) in values.items()}
    return decide(f"{modality}-constant-removes-threats",
                  f"The constant image leaves every threat at chance on the {MODALITIES[modality]} cohort",
                  paper="the zero-information end of every trade-off", ours=ours, rule="equivalence", effect=effect,
                  se=se, margin=config.chance_margin,
                  quantity=f"{THREAT_LABELS[deciding]} advantage retained (the threat reaching furthest from 0)",
                  instruments=[_instrument(checks[threat]) for threat in THREATS],
                  n=int(row[f"{deciding}_n"]), min_n=config.min_attacked_patients, kind="phantom-check")


def _versus_blur(outcome: Outcome, modality: str, method: str, threat: str) -> Claim:
    config = outcome.config
    frame = points(outcome, modality)
    matched = matched_gains(frame, method, threat, REFERENCE)
    checks = instruments(outcome, modality)
    n = int(frame.loc[frame["method"] == method, "utility_n"].min())
    name = METHOD_LABELS[method]
    common = dict(paper=PAPER_COMPARISON[method], rule="directional",
                  instruments=[_instrument(checks[threat]), _instrument(checks["utility"]),
                               varies(f"{threat} advantage retained", frame[f"{threat}_ar"]),
                               varies("utility advantage retained", frame["utility_ar"])],
                  n=n, min_n=config.min_attacked_patients)
    claim_id = f"{modality}-{method}-vs-blur-{threat}"
    statement = f"{name} keeps more {MODALITIES[modality]} utility than Gaussian blur at the same {threat} privacy"
    if matched.empty:
        # Said, not dropped: a reader looks for every method's comparison, and its absence has a measured cause.
        low, high = reference_range(frame, threat, REFERENCE)
        reached = frame.loc[frame["method"] == method, f"{threat}_ar"]
        values = ", ".join(f"{label} {value:+.3g}" for label, value in reached.items())
        ours = {"blur range": [low, high], f"{name} {threat} advantage retained": {
            label: float(value) for label, value in reached.items()}}
        return decide(claim_id, statement, ours=ours, quantity=f"{name} utility - blur utility at matched {threat} "
                      "advantage retained", **common,
                      note=f"no {name} setting reaches a {threat} advantage retained inside blur's measured range "
                           f"[{low:+.3g}, {high:+.3g}] (no change included; {values}): blur matching it needs "
                           "another sigma in BLUR_SIGMAS")
    effect = float(matched["gain"].mean())
    se = float(math.sqrt(float((matched["se"] ** 2).sum())) / len(matched))
    ours = {"mean gain": effect, "se": se, "resolvable (2 SE)": DECISION_Z * se, "matched": matched["label"].tolist(),
            "gains": [round(value, 4) for value in matched["gain"]]}
    return decide(claim_id, statement, ours=ours, effect=effect, se=se,
                  quantity=f"{name} utility - blur utility at matched {threat} advantage retained (mean over "
                           f"{len(matched)} matched setting{'s' if len(matched) > 1 else ''})", **common,
                  note="the gains at the matched settings share the originals' reference, so their SEs are "
                       "combined as if independent (an approximation)")


def evaluate_claims(outcome: Outcome) -> list[Claim]:
    """Every claim of the chapter (module docstring), both modalities."""
    claims = []
    for modality in outcome.modalities:
        claims.append(_originals_leak(outcome, modality))
        claims.append(_constant_removes(outcome, modality))
        methods = set(outcome.modalities[modality].scores["method"])
        for method in COMPARED_WITH_BLUR:
            if method not in methods:
                continue
            for threat in THREATS:
                claims.append(_versus_blur(outcome, modality, method, threat))
    return claims

