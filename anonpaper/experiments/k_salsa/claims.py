"""The k-SALSA chapter's claims, each decided by the one rule (:func:`anonpaper.experiments.claims.decide`).

Rules: every claim is directional, decided beyond ``DECISION_Z`` standard errors either way. A claim "at every k"
is decided on its least supported k (:func:`weakest_k`: the smallest effect / SE), so it holds only when every k
holds and does not hold as soon as one k contradicts it beyond noise; the record keeps that k's effect and SE. A
trend over k ("falls as k grows") is the drop from the first to the last k (:func:`~anonpaper.metrics.statistics.
sequence_drop`), so a rise within the noise is undecided, not a contradiction. Claims resting on a test set (real
test images for utility, the held-out candidate pool for membership) are undecided below
``config.min_test_images``; the fidelity claims count only the k with at least ``config.min_eval_images``
synthetic images.

Instruments, each with its floor in the config: the releases are k-anonymous (every cluster holds at least k
images, and k distinct patients with ``CLUSTER_UNIT`` 'patient'); FD is computed on the generators chapter's cohort
DR classifier (which the alignment never sees), which must grade the real test images (QWK >= ``dr_min_qwk``); the
utility claims rest on the DR classifiers trained on the private real images (QWK >= ``dr_min_qwk``) and on the
generator keeping the grade (the cohort classifier's QWK on the members' reconstructions ``G(w)`` >=
``generator_label_min_qwk``). Membership precision is normalised for chance, ``(p - c) / (1 - c)``, because
chance differs across k.

The paper's headline numbers (its tables) are not in this project's copy of the paper, so ``paper`` states the
direction the paper reports; ``ours`` records ``2 SE``, the smallest effect the run resolves.
"""

from __future__ import annotations

import math

from anonpaper.experiments.claims import DECISION_Z, Claim, Instrument, decide
from anonpaper.experiments.k_salsa.pipeline import DR_FEATURES, Outcome
from anonpaper.metrics.statistics import difference_se, sequence_drop

PAPER = "Jeon et al., ECCV 2022"


def weakest_k(effects: dict[int, tuple[float, float]]) -> int | None:
    """The k whose ``(effect, se)`` is least supported: the smallest ``effect / se`` (a k without a finite effect
    or a positive SE counts as 0, i.e. undecided). The rule on that k's effect and SE decides "at every k": it holds
    iff every k holds, and does not hold iff some k does not. None when ``effects`` is empty.

    >>> weakest_k({2: (0.5, 0.1), 5: (0.3, 0.1), 10: (0.9, 0.1)})
    5
    >>> weakest_k({2: (0.5, 0.1), 5: (-0.4, 0.1), 10: (0.1, float("nan"))})
    5
    """
    def support(item: tuple[int, tuple[float, float]]) -> float:
        effect, se = item[1]
        usable = math.isfinite(effect) and math.isfinite(se) and se > 0
        return effect / se if usable else 0.0

    return min(effects.items(), key=support)[0] if effects else None


def _round(value) -> float | None:
    return round(float(value), 4) if value is not None and math.isfinite(float(value)) else None


def instruments(outcome: Outcome) -> dict[str, Instrument]:
    """The chapter's instruments with their measured values and floors."""
    config, table = outcome.config, outcome.clusters
    found = {"clusters": Instrument("smallest cluster / k (images)", float((table["min_size"] / table["k"]).min()),
                                    1.0)}
    if config.cluster_unit == "patient":
        value = float((table["min_patients"] / table["k"]).min()) if "min_patients" in table else float("nan")
        found["patients"] = Instrument("fewest distinct patients in a cluster / k", value, 1.0)
    check = outcome.dr_check
    found["dr features"] = Instrument("cohort DR classifier (the FD features): QWK on the real test split",
                                      check.get("held_out_qwk", float("nan")), config.dr_min_qwk)
    found["generator label"] = Instrument("cohort DR classifier on the members' reconstructions G(w): QWK against "
                                          "their grades", check.get("reconstruction_qwk", float("nan")),
                                          config.generator_label_min_qwk)
    found["reference"] = Instrument("DR classifiers trained on the private real images: QWK on the real test images",
                                    outcome.reference["qwk"], config.dr_min_qwk)
    return found


def evaluate_claims(outcome: Outcome) -> list[Claim]:
    """The chapter's claims (see the module docstring)."""
    config = outcome.config
    ks = list(config.k_values)
    tools = instruments(outcome)
    anonymity = [tools["clusters"]] + ([tools["patients"]] if "patients" in tools else [])
    utility_tools = anonymity + [tools["reference"], tools["generator label"]]
    claims: list[Claim] = []

    def at_every_k(claim_id: str, statement: str, paper: str, effects: dict[int, tuple[float, float]],
                   quantity: str, ours: dict, used: list[Instrument], n: int, min_n: int, note: str = "") -> None:
        chosen = weakest_k(effects)
        effect, se = effects[chosen] if chosen is not None else (float("nan"), float("nan"))
        per_k = "; ".join(f"k={k}: {value:+.3f} (SE {error:.3f})" for k, (value, error) in effects.items())
        claims.append(decide(
            claim_id, statement, paper=paper, ours={**ours, "2 SE": _round(DECISION_Z * se)}, rule="directional",
            effect=effect, se=se, quantity=f"{quantity} at the least supported k"
            + (f" (k={chosen})" if chosen is not None else ""), instruments=used, n=n, min_n=min_n,
            note="; ".join(part for part in (f"every k: {per_k}" if per_k else "no k to decide on", note) if part)))

    # Fidelity on the cohort DR classifier's features, which the alignment never sees: k-SALSA against the latent
    # centroid (the alignment's effect) and against k-same pixel averaging, at every k with enough images.
    counted = {k: int(outcome.row(k, "k-SALSA")["n_synthetic"]) for k in ks}
    decided = [k for k in ks if counted[k] >= config.min_eval_images]
    skipped = [k for k in ks if k not in decided]
    gaps = outcome.fd_gaps
    note = (f"k = {', '.join(map(str, skipped))} not counted (fewer than {config.min_eval_images} synthetic images)"
            if skipped else "")
    for baseline, claim_id, statement, paper in (
            ("centroid", "k-salsa-alignment-fidelity", "Local style alignment brings the synthetic images closer to "
             "the private ones than the plain latent centroid at equal k (FD-DR-classifier)",
             f"{PAPER}: k-SALSA has lower FID than the centroid baseline"),
            ("k-same pixel", "k-salsa-fidelity-beats-pixel", "k-SALSA's synthetic images are closer to the private "
             "ones than k-same pixel averages at equal k (FD-DR-classifier)",
             f"{PAPER}: k-SALSA improves image fidelity upon k-same averaging")):
        part = gaps[(gaps["features"] == DR_FEATURES) & (gaps["baseline"] == baseline)].set_index("k") \
            if len(gaps) else gaps
        effects = {k: (float(part.loc[k, "difference"]), float(part.loc[k, "difference_se"]))
                   for k in decided if k in part.index}
        ours = {f"k={k}": {f"FD-DR {baseline}": _round(outcome.row(k, baseline)["fd_dr"]),
                           "FD-DR k-SALSA": _round(outcome.row(k, "k-SALSA")["fd_dr"])} for k in ks}
        at_every_k(claim_id, statement, paper, effects, f"FD-DR({baseline}) - FD-DR(k-SALSA)", ours,
                   anonymity + [tools["dr features"]], n=max(counted.values()), min_n=config.min_eval_images,
                   note=note)

    # Membership inference, precision normalised for chance.
    rows = {k: outcome.row(k, "k-SALSA") for k in ks}
    pixel = {k: outcome.row(k, "k-same pixel") for k in ks}
    pool = int(min(row["pool"] for row in rows.values()))
    ours = {f"k={k}": {"precision": _round(row["membership_precision"]), "chance": _round(row["membership_chance"]),
                       "normalised": _round(row["membership_normalised"])} for k, row in rows.items()}
    effect, se = sequence_drop([rows[k]["membership_normalised"] for k in ks],
                               [rows[k]["membership_normalised_se"] for k in ks])
    claims.append(decide(
        "k-salsa-membership-falls", "Membership inference against k-SALSA falls toward chance as k grows (top-k "
        "precision on held-out clusters, normalised for chance: (p - c) / (1 - c))",
        paper=f"{PAPER}: the attacker's top-k precision approaches chance as k grows",
        ours={**ours, "2 SE": _round(DECISION_Z * se)}, rule="directional", effect=effect, se=se,
        quantity=f"normalised precision at k={ks[0]} minus at k={ks[-1]}", instruments=anonymity, n=pool,
        min_n=config.min_test_images,
        note=f"each attacker trained on about {config.attacker_budget} pairs at every k"))
    effects = {k: (pixel[k]["membership_normalised"] - rows[k]["membership_normalised"],
                   difference_se(pixel[k]["membership_normalised_se"], rows[k]["membership_normalised_se"]))
               for k in ks}
    at_every_k("k-salsa-membership-below-pixel", "Membership inference is weaker against k-SALSA than against "
               "k-same pixel averaging at equal k (normalised top-k precision)",
               f"{PAPER}: k-SALSA mitigates membership inference compared with k-same averaging", effects,
               "normalised precision(k-same pixel) - normalised precision(k-SALSA)",
               {f"k={k}": {"k-same pixel": _round(pixel[k]["membership_normalised"]),
                           "k-SALSA": _round(rows[k]["membership_normalised"])} for k in ks}, anonymity, n=pool,
               min_n=config.min_test_images)

    # Utility: QWK of the DR classifiers trained on each release, on the real test images.
    n_test = int(rows[ks[0]]["n_test"])
    effect, se = sequence_drop([rows[k]["qwk"] for k in ks], [rows[k]["qwk_se"] for k in ks])
    claims.append(decide(
        "k-salsa-utility-falls", "The DR classifier trained on k-SALSA images loses utility on real test images as "
        "k grows (quadratic weighted kappa falls)", paper=f"{PAPER}: classification performance decreases as k grows",
        ours={"real (k=1)": _round(outcome.reference["qwk"]), **{f"k={k}": _round(rows[k]["qwk"]) for k in ks},
              "2 SE": _round(DECISION_Z * se)},
        rule="directional", effect=effect, se=se, quantity=f"QWK at k={ks[0]} minus at k={ks[-1]}",
        instruments=utility_tools, n=n_test, min_n=config.min_test_images))
    for baseline, claim_id, statement, paper in (
            ("centroid", "k-salsa-alignment-utility", "A DR classifier trained on k-SALSA images grades real images "
             "better (QWK) than one trained on the plain centroids at equal k",
             f"{PAPER}: k-SALSA improves classification over the centroid baseline"),
            ("k-same pixel", "k-salsa-utility-beats-pixel", "A DR classifier trained on k-SALSA images grades real "
             "images better (QWK) than one trained on k-same pixel averages at equal k",
             f"{PAPER}: k-SALSA improves classification over k-same averaging")):
        base = {k: outcome.row(k, baseline) for k in ks}
        effects = {k: (rows[k]["qwk"] - base[k]["qwk"], difference_se(rows[k]["qwk_se"], base[k]["qwk_se"]))
                   for k in ks}
        at_every_k(claim_id, statement, paper, effects, f"QWK(k-SALSA) - QWK({baseline})",
                   {f"k={k}": {baseline: _round(base[k]["qwk"]), "k-SALSA": _round(rows[k]["qwk"])} for k in ks},
                   utility_tools, n=n_test, min_n=config.min_test_images)
    return claims


__all__ = ["PAPER", "evaluate_claims", "instruments", "weakest_k"]
