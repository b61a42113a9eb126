"""Tables of the k-SALSA chapter (fractions in [0, 1]; ``*_se`` standard errors).

The paper's own numbers (Jeon et al., ECCV 2022, its tables) are not in this project's copy of the paper, so the
tables show ours only; the claims compare trends with the paper's.
"""

from __future__ import annotations

import pandas as pd

from anonpaper.experiments.k_salsa.pipeline import METHODS, Outcome


def inversion_table(outcome: Outcome) -> pd.DataFrame:
    """The inversions of the private images into W+ compared: PSNR, SSIM (mean and SE over images), the encoder's
    training seconds and the seconds per image; ``used`` marks the codes k-SALSA used."""
    frame = outcome.inversions.rename(columns={"psnr": "PSNR", "psnr_se": "PSNR_se", "ssim": "SSIM",
                                               "ssim_se": "SSIM_se"})
    frame.insert(1, "used", frame["inversion"] == outcome.inversion["inversion"])
    return frame


def clusters_table(outcome: Outcome) -> pd.DataFrame:
    """Cluster sizes per k (the remainder check) and, per cluster, the fewest distinct patients and the patients
    split across clusters (the k-anonymity unit), with the mean alignment loss before and after alignment."""
    return outcome.clusters.merge(outcome.alignment, on="k")


def fidelity_table(outcome: Outcome) -> pd.DataFrame:
    """FD / KID of every method against the private images per k, on two feature networks: ``FD-DR-classifier``
    (the generators chapter's cohort DR classifier, which the alignment never sees: the claims' FD) and
    ``FD-vessel-unet`` (the U-Net whose taps the alignment optimises, so alignment lowers it by construction: shown,
    never decisive); the real-test small-set reference beside them."""
    columns = ["k", "method", "n_synthetic", "fd_dr", "fd_dr_se", "kid_dr", "fd", "fd_se", "kid"]
    frame = outcome.results[[column for column in columns if column in outcome.results.columns]].copy()
    frame["method"] = pd.Categorical(frame["method"], list(METHODS) + ["real test"], ordered=True)
    frame = frame.sort_values(["k", "method"]).reset_index(drop=True)
    frame["method"] = frame["method"].astype(str)
    return frame.rename(columns={"fd_dr": "FD-DR-classifier", "fd_dr_se": "FD-DR SE", "kid_dr": "KID-DR-classifier",
                                 "fd": "FD-vessel-unet", "fd_se": "FD-unet SE", "kid": "KID-vessel-unet"})


def fidelity_gaps_table(outcome: Outcome) -> pd.DataFrame:
    """FD(baseline) - FD(k-SALSA) per k, feature network and baseline, with paired-bootstrap SEs over clusters
    (positive = k-SALSA closer to the private images)."""
    return outcome.fd_gaps.rename(columns={"difference": "FD(baseline) - FD(k-SALSA)", "difference_se": "SE"})


def utility_table(outcome: Outcome) -> pd.DataFrame:
    """DR grading of the real test images by classifiers trained on each release (and on the private reals): means
    over the classifier seeds, SEs with the seed spread, and the spread itself (``QWK_seed_sd``)."""
    reference = outcome.reference
    rows = [{"k": 1, "method": "real (private images)", "training_images": outcome.inversion["images"],
             "accuracy": reference["accuracy"], "accuracy_se": reference["accuracy_se"], "QWK": reference["qwk"],
             "QWK_se": reference["qwk_se"], "QWK_seed_sd": reference["qwk_seed_sd"],
             "predicted_classes": reference["predicted_classes"], "n_test": reference["n_test"]}]
    for row in outcome.results[outcome.results["method"].isin(METHODS)].itertuples():
        rows.append({"k": row.k, "method": row.method, "training_images": row.n_synthetic, "accuracy": row.accuracy,
                     "accuracy_se": row.accuracy_se, "QWK": row.qwk, "QWK_se": row.qwk_se,
                     "QWK_seed_sd": row.qwk_seed_sd, "predicted_classes": row.predicted_classes,
                     "n_test": row.n_test})
    return pd.DataFrame(rows)


def privacy_table(outcome: Outcome) -> pd.DataFrame:
    """Membership inference (pair classifier) and re-identification (SIFT matcher) top-k precision on held-out
    clusters, each beside its chance level and normalised for it, ``(p - c) / (1 - c)`` (0 = chance; comparable
    across k); with each attacker's training epochs and pairs (its budget is fixed across k)."""
    frame = outcome.results[outcome.results["method"].isin(METHODS)]
    columns = ["k", "method", "held_out_clusters", "pool", "attacker_epochs", "attacker_pairs",
               "membership_precision", "membership_se", "membership_chance", "membership_normalised",
               "membership_normalised_se", "reid_precision", "reid_se", "reid_chance", "reid_normalised"]
    return frame[[column for column in columns if column in frame.columns]].reset_index(drop=True)


def instruments_table(outcome: Outcome) -> pd.DataFrame:
    """Every instrument the claims rest on: measured value, floor from the config, passed; a claim resting on a
    failed instrument is undecided. Below: the cohort DR classifier's QWK on the private images themselves (its
    training images: the ceiling of the reconstruction check)."""
    from anonpaper.experiments.k_salsa.claims import instruments

    rows = [{"instrument": item.name, "value": item.value, "floor": item.floor, "passed": item.passed}
            for item in instruments(outcome).values()]
    rows.append({"instrument": "cohort DR classifier on the private images themselves (reference, no floor)",
                 "value": outcome.dr_check.get("private_qwk", float("nan")), "floor": float("nan"), "passed": None})
    return pd.DataFrame(rows).set_index("instrument")


def timings_table(outcome: Outcome) -> pd.DataFrame:
    """Wall seconds per stage of the run."""
    return pd.DataFrame([{"stage": name, "seconds": seconds} for name, seconds in outcome.timings.items()]
                        + [{"stage": "total", "seconds": outcome.seconds}])
