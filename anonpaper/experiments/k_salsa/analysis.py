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
    """Cluster sizes per k (the remainder check), with the mean alignment loss before and after alignment."""
    return outcome.clusters.merge(outcome.alignment, on="k")


def fidelity_table(outcome: Outcome) -> pd.DataFrame:
    """FD / KID of every method against the private images per k, the real-test small-set reference beside them,
    and FD(centroid) - FD(k-SALSA) with its paired-bootstrap SE."""
    frame = outcome.results[["k", "method", "n_synthetic", "fd", "fd_se", "kid", "kid_std"]].copy()
    frame["method"] = pd.Categorical(frame["method"], list(METHODS) + ["real test"], ordered=True)
    frame = frame.sort_values(["k", "method"]).reset_index(drop=True)
    frame["method"] = frame["method"].astype(str)
    frame = frame.rename(columns={"fd": "FD-vessel-unet", "fd_se": "FD_se", "kid": "KID-vessel-unet",
                                  "kid_std": "KID_std"})
    gaps = pd.DataFrame([{"k": k, "FD centroid - k-SALSA": value["difference"], "gap_se": value["difference_se"]}
                         for k, value in outcome.fd_differences.items()])
    return frame.merge(gaps, on="k")


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
    clusters, each beside its chance level."""
    frame = outcome.results[outcome.results["method"].isin(METHODS)]
    columns = ["k", "method", "held_out_clusters", "pool", "membership_precision", "membership_se",
               "membership_chance", "reid_precision", "reid_se", "reid_chance"]
    return frame[columns].reset_index(drop=True)


def timings_table(outcome: Outcome) -> pd.DataFrame:
    """Wall seconds per stage of the run."""
    return pd.DataFrame([{"stage": name, "seconds": seconds} for name, seconds in outcome.timings.items()]
                        + [{"stage": "total", "seconds": outcome.seconds}])
