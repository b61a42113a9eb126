"""The k-SALSA chapter's claims, each decided from the run's numbers (:mod:`anonpaper.experiments.claims`).

Rules: a difference decides only beyond ``DECISION_Z`` combined standard errors; a claim resting on a test set
(real test images for utility, the held-out candidate pool for membership) is undecided below
``Config.min_test_images``; the fidelity claim counts only the k at which at least ``Config.min_eval_images``
synthetic images exist. The utility claims rest on the DR classifier: when the classifier trained on the private
real images does not beat chance (QWK above 0 beyond noise) on the test images, grading is not learnable at this
size and those claims are undecided (``instrument_failed``).

The paper's headline numbers (its tables) are not in this project's copy of the paper, so ``paper`` states the
direction the paper reports, not a number.
"""

from __future__ import annotations

import math

import numpy as np

from anonpaper.experiments.claims import DECISION_Z, Claim, decide, instrument_failed
from anonpaper.experiments.k_salsa.pipeline import Outcome
from anonpaper.metrics.statistics import sequence_falls

PAPER = "Jeon et al., ECCV 2022"


def _combine(verdicts: dict[int, bool | None]) -> bool | None:
    """Per-k verdicts -> one: True when every k holds, False when any k contradicts beyond noise, else None.

    >>> _combine({2: True, 5: True}), _combine({2: True, 5: None}), _combine({2: True, 5: False})
    (True, None, False)
    """
    values = list(verdicts.values())
    if any(value is False for value in values):
        return False
    if values and all(value is True for value in values):
        return True
    return None


def _beyond(difference: float, se: float) -> bool | None:
    """True: difference > 0 beyond noise; False: < 0 beyond noise; None: within noise or not finite."""
    noise = DECISION_Z * se
    if not math.isfinite(difference) or not math.isfinite(noise) or abs(difference) <= noise:
        return None
    return difference > 0


def _against_baseline(outcome: Outcome, ks: list[int], baseline: str, column: str, se_column: str,
                      higher_is_better: bool) -> tuple[dict[int, bool | None], dict, str]:
    """k-SALSA against ``baseline`` at every k on ``column``: per-k verdicts (True: k-SALSA better beyond noise,
    False: worse, None: within noise), the ``ours`` numbers and the reason."""
    sign = 1.0 if higher_is_better else -1.0
    verdicts = {}
    for k in ks:
        aligned, base = outcome.row(k, "k-SALSA"), outcome.row(k, baseline)
        verdicts[k] = _beyond(sign * (aligned[column] - base[column]), float(np.hypot(aligned[se_column],
                                                                                      base[se_column])))
    ours = {f"k={k}": {baseline: round(outcome.row(k, baseline)[column], 3),
                       "k-SALSA": round(outcome.row(k, "k-SALSA")[column], 3)} for k in ks}
    better, worse = ("higher", "lower") if higher_is_better else ("lower", "higher")
    reason = "; ".join(f"k={k}: {'within noise' if v is None else (better if v else worse)}"
                       for k, v in verdicts.items())
    return verdicts, ours, reason


def utility_check(outcome: Outcome) -> str | None:
    """None when the DR classifier trained on the private real images beats chance (QWK > 0 beyond noise)."""
    reference = outcome.reference
    if _beyond(reference["qwk"], reference["qwk_se"]) is True:
        return None
    return (f"the DR classifier trained on the {outcome.inversion['images']} private real images reaches QWK "
            f"{reference['qwk']:.3f} (SE {reference['qwk_se']:.3f}) on the real test images: DR grading is not "
            "learnable at this size")


def evaluate_claims(outcome: Outcome) -> list[Claim]:
    """The chapter's claims (see the module docstring)."""
    config = outcome.config
    ks = list(config.k_values)
    claims: list[Claim] = []

    # 1. Alignment improves fidelity over the plain centroid at equal k (FD, paired bootstrap).
    counted = {k: outcome.row(k, "k-SALSA")["n_synthetic"] for k in ks}
    decided = [k for k in ks if counted[k] >= config.min_eval_images]
    verdicts = {k: _beyond(outcome.fd_differences[k]["difference"], outcome.fd_differences[k]["difference_se"])
                for k in decided}
    ours = {f"k={k}": {"FD centroid": round(outcome.row(k, "centroid")["fd"], 3),
                       "FD k-SALSA": round(outcome.row(k, "k-SALSA")["fd"], 3)} for k in ks}
    reason = "; ".join(f"k={k}: FD(centroid) - FD(k-SALSA) = {outcome.fd_differences[k]['difference']:.3f}, "
                       f"{DECISION_Z:g} SE = {DECISION_Z * outcome.fd_differences[k]['difference_se']:.3f}"
                       + ("" if k in decided else f" (not counted: {counted[k]} < {config.min_eval_images} images)")
                       for k in ks)
    claims.append(decide(
        "k-salsa-alignment-fidelity", "Local style alignment gives synthetic images closer to the real ones "
                                      "(lower FD-vessel-unet) than the plain latent centroid at equal k",
        paper=f"{PAPER}: k-SALSA has lower FID than the centroid baseline at every k",
        ours=ours, holds=_combine(verdicts) if decided else None,
        reason=reason if decided else f"no k with at least {config.min_eval_images} synthetic images; " + reason,
        n=max(counted.values()), min_n=config.min_eval_images))

    # 2. Membership inference falls toward chance as k grows (k-SALSA): precision minus chance falls.
    rows = [outcome.row(k, "k-SALSA") for k in ks]
    excess = [row["membership_precision"] - row["membership_chance"] for row in rows]
    errors = [row["membership_se"] for row in rows]
    pool = int(min(row["pool"] for row in rows))
    claims.append(decide(
        "k-salsa-membership-falls", "Membership inference against k-SALSA falls toward chance as k grows (top-k "
                                    "precision minus chance k/N on held-out clusters)",
        paper=f"{PAPER}: the attacker's top-k precision approaches chance as k grows",
        ours={f"k={k}": {"precision": round(row["membership_precision"], 3),
                         "chance": round(row["membership_chance"], 3)} for k, row in zip(ks, rows)},
        holds=sequence_falls(excess, errors, DECISION_Z),
        reason="precision - chance: " + ", ".join(f"k={k}: {value:.3f} (SE {se:.3f})"
                                                  for k, value, se in zip(ks, excess, errors)),
        n=pool, min_n=config.min_test_images))

    # 3. k-SALSA resists membership inference better than k-same pixel averaging at equal k.
    verdicts, ours, reason = _against_baseline(outcome, ks, "k-same pixel", "membership_precision", "membership_se",
                                               higher_is_better=False)
    claims.append(decide(
        "k-salsa-membership-below-pixel", "Membership inference is weaker against k-SALSA than against k-same pixel "
                                          "averaging at equal k",
        paper=f"{PAPER}: k-SALSA mitigates membership inference compared with k-same averaging",
        ours=ours, holds=_combine(verdicts), reason=reason, n=pool, min_n=config.min_test_images))

    # 4. Utility falls with k (QWK of the classifier trained on k-SALSA images).
    rows = [outcome.row(k, "k-SALSA") for k in ks]
    n_test = int(rows[0]["n_test"])
    utility_falls = decide(
        "k-salsa-utility-falls", "The DR classifier trained on k-SALSA images loses utility on real test images as k "
                                 "grows (quadratic weighted kappa falls)",
        paper=f"{PAPER}: classification performance decreases as k grows",
        ours={"real (k=1)": round(outcome.reference["qwk"], 3),
              **{f"k={k}": round(row["qwk"], 3) for k, row in zip(ks, rows)}},
        holds=sequence_falls([row["qwk"] for row in rows], [row["qwk_se"] for row in rows], DECISION_Z),
        reason="QWK: " + ", ".join(f"k={k}: {row['qwk']:.3f} (SE {row['qwk_se']:.3f})" for k, row in zip(ks, rows)),
        n=n_test, min_n=config.min_test_images)

    # 5. Alignment improves utility over the plain centroid (the paper's classification result).
    verdicts, ours, reason = _against_baseline(outcome, ks, "centroid", "qwk", "qwk_se", higher_is_better=True)
    utility_alignment = decide(
        "k-salsa-alignment-utility", "A DR classifier trained on k-SALSA images grades real images better (QWK) than "
                                     "one trained on the plain centroids at equal k",
        paper=f"{PAPER}: k-SALSA improves classification over the centroid and k-same baselines",
        ours=ours, holds=_combine(verdicts), reason=reason, n=n_test, min_n=config.min_test_images)
    failed = utility_check(outcome)
    for claim in (utility_falls, utility_alignment):
        claims.append(instrument_failed(claim, "DR classifier", failed) if failed else claim)

    # 6. The remainder fix: every cluster has at least k members and every image is in exactly one cluster.
    table = outcome.clusters
    ok = bool((table["min_size"] >= table["k"]).all() and table["every_image_once"].all())
    with_remainder = table[table["remainder"] > 0]
    claims.append(decide(
        "k-salsa-clusters-at-least-k", "Same-size clustering keeps every cluster at k members or more, with every "
                                       "private image in exactly one cluster, also when k does not divide N",
        paper="k-anonymity needs clusters of at least k (the authors' code leaves clusters below k when k does not "
              "divide N)",
        ours={f"k={row.k}": {"remainder": row.remainder, "min size": row.min_size, "max size": row.max_size}
              for row in table.itertuples()},
        holds=ok,
        reason=("smallest cluster / k: " + ", ".join(f"{row.min_size}/{row.k}" for row in table.itertuples())
                + (f"; N = {int(table['images'].iloc[0])} leaves a remainder at k = "
                   f"{', '.join(str(k) for k in with_remainder['k'])}" if len(with_remainder)
                   else "; no k leaves a remainder at this N (the check is then trivial)")),
        kind="phantom-check"))
    return claims
