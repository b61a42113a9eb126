"""Privacy metrics: linkability (inner / outer risk as verification), singling out (hidden rate, local cloaking),
membership inference (top-k precision of a pair classifier, distance to closest record) and attribute inference.

Conventions: record ``i`` of the real set corresponds to record ``i`` of the anonymised set (its own anonymisation);
embeddings are ``(N, D)`` identity features (e.g. from the re-identification network). Directions are stated per
function; "risk" numbers are higher = more privacy risk.
"""

from __future__ import annotations

import numpy as np

from ._validation import check_binary, check_features, check_labels, check_positive_int, to_numpy
from .classification import accuracy
from .identity import cross_pair_scores, equal_error_rate, pair_scores, verification_auc, verification_metrics

__all__ = [
    "inner_pairs",
    "inner_risk",
    "outer_risk",
    "singling_out_risk",
    "membership_top_k_precision",
    "cluster_membership",
    "cluster_membership_top_k_precision",
    "distance_to_closest_record",
    "attribute_inference_summary",
    "linkability_as_published",
]


def inner_pairs(embeddings, patient_ids, kind: str = "squared_distance") -> tuple[np.ndarray, np.ndarray]:
    """All unordered pairs ``i < j`` of one (anonymised) set: scores and "same patient" labels.

    Returns:
        ``(scores (P,), same_patient (P,) int64)`` with ``P = N (N - 1) / 2``; see :func:`pair_scores` for ``kind``.
    """
    features = check_features(embeddings, "embeddings", min_rows=2)
    identities = check_labels(patient_ids, "patient_ids", length=features.shape[0])
    first, second = np.triu_indices(features.shape[0], k=1)
    scores = cross_pair_scores(features, features, kind)[first, second]
    return scores, (identities[first] == identities[second]).astype(np.int64)


def _verification_report(scores, labels, threshold, higher_means_same) -> dict:
    report = verification_metrics(scores, labels, threshold, higher_means_same)
    both = 0 < labels.sum() < labels.size
    report["auc"] = verification_auc(scores, labels, higher_means_same) if both else float("nan")
    report["eer"] = equal_error_rate(scores, labels, higher_means_same) if both else float("nan")
    return report


def inner_risk(embeddings, patient_ids, threshold: float, kind: str = "squared_distance") -> dict:
    """Inner linkability risk (GMIA): can two ANONYMISED images be linked to the same patient?

    All pairs of the anonymised test set are verified at ``threshold`` (chosen on real validation pairs with
    :func:`anonpaper.metrics.select_threshold`). High inner risk means anonymised images of one patient still
    resemble each other (kept relative linkability; GMIA considers that expected).

    Args:
        embeddings: ``(N, D)`` identity embeddings of anonymised images.
        patient_ids: ``(N,)`` patient of each image.
        threshold: Verification threshold on the pair score.
        kind: ``"squared_distance"`` (lower = same) or ``"cosine"`` (higher = same).

    Returns:
        :func:`anonpaper.metrics.verification_metrics` dict (true TAR, FAR, FRR, F1, accuracy) plus ``auc`` and
        ``eer`` (NaN when only one pair class exists).
    """
    scores, labels = inner_pairs(embeddings, patient_ids, kind)
    return _verification_report(scores, labels, threshold, kind == "cosine")


def outer_risk(
    real_embeddings,
    anonymised_embeddings,
    threshold: float,
    kind: str = "squared_distance",
    patient_ids=None,
) -> dict:
    """Outer linkability risk (GMIA): can a real image be linked to its own anonymisation?

    GMIA's protocol uses only the ``N`` positive pairs ``(real_i, anonymised_i)``, so accuracy equals TAR and FAR is
    undefined (NaN). With ``patient_ids`` the negatives ``(real_i, anonymised_j)`` of different patients are added
    too (all of them), giving FAR, AUC and EER. Lower TAR = less outer risk = better anonymisation.

    Args:
        real_embeddings: ``(N, D)``.
        anonymised_embeddings: ``(N, D)``, row ``i`` the anonymisation of real row ``i``.
        threshold: Verification threshold.
        kind: ``"squared_distance"`` or ``"cosine"``.
        patient_ids: Optional ``(N,)`` patient ids to add negative pairs.

    Returns:
        Verification dict as in :func:`inner_risk`. NOT symmetric in its arguments only in naming; swapping real and
        anonymised gives the same numbers (pair scores are symmetric).
    """
    real = check_features(real_embeddings, "real_embeddings")
    anonymised = check_features(anonymised_embeddings, "anonymised_embeddings")
    if real.shape != anonymised.shape:
        raise ValueError(f"embeddings: expected identical shapes, observed {real.shape} and {anonymised.shape}")
    scores = pair_scores(real, anonymised, kind)
    labels = np.ones(real.shape[0], dtype=np.int64)
    if patient_ids is not None:
        identities = check_labels(patient_ids, "patient_ids", length=real.shape[0])
        first, second = np.nonzero(identities[:, None] != identities[None, :])
        scores = np.concatenate([scores, cross_pair_scores(real, anonymised, kind)[first, second]])
        labels = np.concatenate([labels, np.zeros(first.size, dtype=np.int64)])
    return _verification_report(scores, labels, threshold, kind == "cosine")


def _distances(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    squared = (first**2).sum(1)[:, None] + (second**2).sum(1)[None, :] - 2.0 * first @ second.T
    return np.sqrt(np.maximum(squared, 0.0))


def singling_out_risk(real_features, anonymised_features) -> dict:
    """Hidden rate (HR) and local cloaking (LC) of GMIA (Euclidean distance in the given feature space).

    For real record ``i``, count ``c_i`` = number of OTHER anonymised records strictly closer to it than its own
    anonymisation ``i``. HR = fraction of records with ``c_i > 0`` (their own anonymisation is not the nearest);
    LC = median of ``c_i``.

    Args:
        real_features: ``(N, D)``.
        anonymised_features: ``(N, D)``, row ``i`` the anonymisation of real row ``i``.

    Returns:
        ``{"hidden_rate": float in [0, 1], "local_cloaking": float in [0, N - 1], "cloaking_counts": (N,) int}``;
        higher = better privacy (less singling-out risk); identical sets give 0 and 0 (worst case). Not symmetric:
        the roles of real and anonymised sets differ.
    """
    real = check_features(real_features, "real_features", min_rows=2)
    anonymised = check_features(anonymised_features, "anonymised_features", min_rows=2)
    if real.shape != anonymised.shape:
        raise ValueError(f"features: expected identical shapes, observed {real.shape} and {anonymised.shape}")
    distances = _distances(real, anonymised)
    own = np.diag(distances)
    counts = (distances < own[:, None]).sum(axis=1)  # own distance is never < itself, so it is excluded
    return {
        "hidden_rate": float(np.mean(counts > 0)),
        "local_cloaking": float(np.median(counts)),
        "cloaking_counts": counts,
    }


def membership_top_k_precision(scores, membership, k: int) -> dict:
    """Top-k precision of a membership-inference pair classifier (k-SALSA protocol).

    For each synthetic image (row), the attacker scores every candidate real image (columns) for "was in this
    image's cluster"; precision@k = fraction of the ``k`` highest-scored candidates that are true members.
    Ties are broken by candidate order (stable sort), which is deterministic.

    Args:
        scores: ``(S, R)`` attacker scores (higher = more likely member).
        membership: ``(S, R)`` binary, 1 where candidate ``r`` is in synthetic image ``s``'s cluster.
        k: Candidates kept per row (usually the cluster size).

    Returns:
        ``{"precision_at_k": mean over rows, "chance": mean member rate per row, "per_row": (S,)}``; higher
        precision = stronger attack (more risk); a perfect attacker reaches ``min(1, members / k)``.
    """
    values = to_numpy(scores, "scores").astype(np.float64)
    members = to_numpy(membership, "membership")
    if values.ndim != 2 or members.shape != values.shape:
        raise ValueError(
            f"scores and membership: expected identical (S, R) shapes, observed {values.shape} and {members.shape}"
        )
    if not np.isfinite(values).all():
        raise ValueError("scores: expected finite values, observed NaN or infinity")
    members = check_binary(members.ravel(), "membership").reshape(values.shape)
    k = check_positive_int(k, "k")
    if k > values.shape[1]:
        raise ValueError(f"k: expected at most the number of candidates {values.shape[1]}, observed {k}")
    top = np.argsort(-values, axis=1, kind="stable")[:, :k]
    per_row = np.take_along_axis(members, top, axis=1).mean(axis=1)
    return {"precision_at_k": float(per_row.mean()), "chance": float(members.mean()), "per_row": per_row}


def cluster_membership(pool_clusters, query_clusters) -> np.ndarray:
    """Membership matrix of released cluster images against a candidate pool (k-SALSA attack protocol).

    Row ``s`` is the synthetic image released for cluster ``query_clusters[s]``; column ``r`` is candidate ``r`` of
    the pool; an entry is 1 when the candidate was a member of that cluster. In k-SALSA's evaluation the pool is
    every real image of the held-out set (members of queried and non-queried clusters alike) and the queries are
    the synthetic images of held-out clusters.

    Args:
        pool_clusters: ``(R,)`` integer cluster of every candidate (e.g. :func:`anonpaper.methods.ksalsa.
            same_size_clusters` labels); candidates outside every queried cluster simply have no 1 in any row.
        query_clusters: ``(S,)`` cluster ids of the released images, each present in ``pool_clusters``.

    Returns:
        ``int64 (S, R)`` binary matrix, ready for :func:`membership_top_k_precision` and
        :func:`anonpaper.train.membership.membership_pairs`.

    Example:
        >>> cluster_membership([0, 1, 0, 2], [2, 0]).tolist()
        [[0, 0, 0, 1], [1, 0, 1, 0]]
    """
    pool = check_labels(pool_clusters, "pool_clusters")
    queries = check_labels(query_clusters, "query_clusters")
    missing = np.setdiff1d(queries, pool)
    if missing.size:
        raise ValueError(f"query_clusters: expected clusters present in pool_clusters, observed absent {missing[:10]}")
    return (queries[:, None] == pool[None, :]).astype(np.int64)


def cluster_membership_top_k_precision(scores, pool_clusters, query_clusters, k: int | None = None) -> dict:
    """Membership-inference top-k precision per released cluster image, against chance.

    Builds the membership matrix with :func:`cluster_membership` and scores it with
    :func:`membership_top_k_precision`. With ``k=None`` each row keeps as many candidates as its cluster has
    members (R-precision), so a perfect attacker reaches 1 even when clusters have ``k`` to ``2k - 1`` members;
    an integer ``k`` (the authors' top-k with k the anonymity level) is used for every row.

    Args:
        scores: ``(S, R)`` attacker scores (higher = more likely member), e.g. from
            :func:`anonpaper.train.membership.membership_attack_scores`.
        pool_clusters: ``(R,)`` cluster of every candidate.
        query_clusters: ``(S,)`` cluster of every released image (row).
        k: Candidates kept per row, or None for each row's member count.

    Returns:
        ``{"precision_at_k": mean over rows, "chance": mean over rows of members / R (the expected precision of a
        random ranking), "per_cluster": (S,), "members": (S,) int, "k": (S,) int}``; higher precision = stronger
        attack (more risk); chance is about ``k / R``.
    """
    membership = cluster_membership(pool_clusters, query_clusters)
    values = to_numpy(scores, "scores")
    if values.shape != membership.shape:
        raise ValueError(f"scores: expected shape (S, R) = {membership.shape}, observed {values.shape}")
    members = membership.sum(axis=1)
    if k is not None:
        keep = np.full(members.shape, check_positive_int(k, "k"))
        per_cluster = membership_top_k_precision(values, membership, int(keep[0]))["per_row"]
    else:
        keep, per_cluster = members.copy(), np.zeros(members.shape, dtype=np.float64)
        for size in np.unique(members):
            rows = members == size
            per_cluster[rows] = membership_top_k_precision(values[rows], membership[rows], int(size))["per_row"]
    return {
        "precision_at_k": float(per_cluster.mean()),
        "chance": float((members / membership.shape[1]).mean()),
        "per_cluster": per_cluster,
        "members": members,
        "k": keep,
    }


def distance_to_closest_record(synthetic_features, training_features, holdout_features=None) -> dict:
    """Distance to closest record (DCR): Euclidean distance from each synthetic record to its nearest training
    record, and, with a holdout set from the same distribution, the share of synthetic records closer to training
    than to holdout.

    Args:
        synthetic_features: ``(S, D)``.
        training_features: ``(T, D)`` (the private set the generator saw).
        holdout_features: Optional ``(H, D)`` records the generator never saw.

    Returns:
        dict with ``dcr_training`` ``(S,)``, ``median_dcr_training``, and with holdout ``dcr_holdout``,
        ``median_dcr_holdout`` and ``share_closer_to_training``. Larger DCR = more privacy; a copy of a training
        record gives 0. ``share_closer_to_training`` near 0.5 (for equal-sized T and H) = no memorisation signal;
        near 1 = memorisation (risk). Ties (equal distance) count as 0.5.
    """
    synthetic = check_features(synthetic_features, "synthetic_features")
    training = check_features(training_features, "training_features")
    if training.shape[1] != synthetic.shape[1]:
        raise ValueError(f"features: expected dimension {synthetic.shape[1]}, observed {training.shape[1]}")
    to_training = _distances(synthetic, training).min(axis=1)
    result = {"dcr_training": to_training, "median_dcr_training": float(np.median(to_training))}
    if holdout_features is not None:
        holdout = check_features(holdout_features, "holdout_features")
        if holdout.shape[1] != synthetic.shape[1]:
            raise ValueError(f"holdout_features: expected dimension {synthetic.shape[1]}, observed {holdout.shape[1]}")
        to_holdout = _distances(synthetic, holdout).min(axis=1)
        closer = np.where(to_training < to_holdout, 1.0, np.where(to_training == to_holdout, 0.5, 0.0))
        result.update(
            dcr_holdout=to_holdout,
            median_dcr_holdout=float(np.median(to_holdout)),
            share_closer_to_training=float(closer.mean()),
        )
    return result


def attribute_inference_summary(y_true, y_pred) -> dict:
    """Attacker accuracy against chance for an attribute-inference attack (e.g. sex from fundus images).

    Chance is the majority-class share of ``y_true`` (what a constant guess achieves).

    Returns:
        ``{"accuracy", "chance", "advantage" = accuracy - chance, "normalised_advantage" = advantage /
        (1 - chance)}``; higher = stronger attack (more risk); 0 advantage = the attribute is hidden.
    """
    truth = check_labels(y_true, "y_true")
    predicted = check_labels(y_pred, "y_pred", length=truth.shape[0])
    attacker = accuracy(truth, predicted)
    chance = float(np.bincount(truth - truth.min()).max() / truth.size)
    advantage = attacker - chance
    return {
        "accuracy": attacker,
        "chance": chance,
        "advantage": advantage,
        "normalised_advantage": advantage / (1 - chance) if chance < 1 else float("nan"),
    }


def linkability_as_published(report: dict) -> dict:
    """The linkability columns of GMIA's Table 3 (F1, Acc, TAR, "FAR") from an :func:`inner_risk` /
    :func:`outer_risk` report, with the column the authors call FAR made explicit.

    In the GMIA authors' evaluation code (Li, Ayache and Delingette, ISBI 2025) the column headed "FAR" holds
    ``1 - TAR``, i.e. the false REJECTION rate FRR = FN / positives, not the false acceptance rate FP / negatives:
    every row of the paper's Table 3 has TAR + "FAR" = 1 (e.g. 0.441 + 0.559). Their outer risk uses only the
    positive pairs ``(real_i, anonymised_i)``, so its accuracy equals TAR, its F1 equals ``2 TAR / (1 + TAR)`` and a
    true FAR does not exist. This function keeps both: ``far_as_published`` (= FRR, comparable with the paper's
    column) and ``far`` (the true FAR, NaN without negative pairs).

    Args:
        report: A dict with ``f1``, ``accuracy``, ``tar``, ``far`` and ``frr`` (what
            :func:`anonpaper.metrics.verification_metrics`, :func:`inner_risk` and :func:`outer_risk` return).

    Returns:
        ``{"f1", "accuracy", "tar", "far_as_published", "far"}`` as floats. For an attacker higher F1 / accuracy /
        TAR and lower ``far_as_published`` mean more linkability risk.

    Example:
        >>> row = linkability_as_published({"f1": 0.5, "accuracy": 0.6, "tar": 0.4, "far": 0.1, "frr": 0.6})
        >>> row["far_as_published"], row["far"]
        (0.6, 0.1)
    """
    missing = [key for key in ("f1", "accuracy", "tar", "far", "frr") if key not in report]
    if missing:
        raise ValueError(f"report: expected the keys f1, accuracy, tar, far and frr of a verification report, "
                         f"observed it lacks {missing}")
    return {"f1": float(report["f1"]), "accuracy": float(report["accuracy"]), "tar": float(report["tar"]),
            "far_as_published": float(report["frr"]), "far": float(report["far"])}
