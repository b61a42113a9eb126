"""Privacy and utility instruments shared by every chapter.

Image convention: ``torch`` floating tensors ``(N, C, H, W)`` with values in ``[0, 1]``; numpy ``uint8`` batches
``(N, H, W[, C])`` enter through :func:`images_from_uint8`. Every function validates its inputs and raises
``ValueError`` naming the expected and observed shape, range or dtype; none modifies its inputs. Docstrings state
which direction is better.

Modules: :mod:`.quality` (MSE, PSNR, SSIM, IW-SSIM, LPIPS, feature-tap/domain LPIPS), :mod:`.distribution`
(Frechet distance / FID, KID, SWD), :mod:`.identity` (FS_SIFT, FS_SR, bifurcation keypoints, verification,
re-identification), :mod:`.lesion` (RROI, AMS), :mod:`.privacy` (linkability, singling out, membership and attribute
inference), :mod:`.segmentation` (Dice), :mod:`.saliency` (saliency enrichment),
:mod:`.statistics` (patient bootstrap, decision rules), :mod:`.classification` (utility metrics), :mod:`.tradeoff` (trade-off score, Pareto front).
"""

from ._validation import images_from_uint8
from .classification import (
    accuracy,
    auroc,
    average_precision,
    balanced_accuracy,
    classification_summary,
    confusion_matrix,
    macro_f1,
    precision_recall_f1,
    quadratic_weighted_kappa,
)
from .distribution import (
    DistributionScore,
    FrechetDistance,
    SlicedWassersteinDistance,
    frechet_distance,
    frechet_distance_from_statistics,
    inception_input,
    kernel_inception_distance,
    knn_precision_recall,
    laplacian_pyramid,
    load_inception_extractor,
    radial_power_spectrum,
    sliced_wasserstein_distance,
    swd,
    swd_descriptors,
)
from .identity import (
    FS_SR_PROTOCOLS,
    KeypointProtocol,
    bifurcation_keypoint_similarity,
    cross_pair_scores,
    equal_error_rate,
    fs_sift,
    match_fraction,
    sift_features,
    sift_homography_similarity,
    keypoint_similarity,
    match_descriptors,
    pair_scores,
    patch_descriptors,
    rank1_accuracy,
    reidentification_accuracy,
    select_threshold,
    verification_auc,
    verification_metrics,
    vessel_bifurcations,
)
from .lesion import RROISummary, attribute_matching_score, attribute_matching_score_from_labels, rroi, rroi_summary
from .privacy import (
    attribute_inference_summary,
    cluster_membership,
    cluster_membership_top_k_precision,
    distance_to_closest_record,
    inner_pairs,
    inner_risk,
    linkability_as_published,
    membership_top_k_precision,
    outer_risk,
    singling_out_risk,
)
from .quality import (
    PairedImageMetric,
    domain_lpips,
    feature_tap_distance,
    iw_ssim,
    load_lpips,
    lpips_distance,
    mse,
    psnr,
    ssim,
)
from .saliency import saliency_vessel_enrichment
from .segmentation import dice_score
from .statistics import difference_se, patient_bootstrap_se, rule_verdict, sequence_drop
from .tradeoff import min_max_normalise, pareto_front, similarity_tradeoff_score

__all__ = [
    "images_from_uint8",
    # quality
    "mse", "psnr", "ssim", "iw_ssim", "feature_tap_distance", "domain_lpips", "load_lpips", "lpips_distance",
    "PairedImageMetric",
    # distribution
    "DistributionScore", "frechet_distance", "frechet_distance_from_statistics", "FrechetDistance",
    "kernel_inception_distance", "knn_precision_recall", "sliced_wasserstein_distance", "laplacian_pyramid", "swd_descriptors", "swd",
    "SlicedWassersteinDistance", "load_inception_extractor", "inception_input", "radial_power_spectrum",
    # identity
    "fs_sift", "match_fraction", "FS_SR_PROTOCOLS", "KeypointProtocol", "sift_features", "sift_homography_similarity", "match_descriptors",
    "keypoint_similarity",
    "vessel_bifurcations", "patch_descriptors",
    "bifurcation_keypoint_similarity", "pair_scores", "cross_pair_scores", "verification_metrics", "select_threshold",
    "verification_auc", "equal_error_rate", "reidentification_accuracy", "rank1_accuracy",
    # segmentation, saliency
    "dice_score", "saliency_vessel_enrichment",
    # statistics and decision rules
    "patient_bootstrap_se", "difference_se", "rule_verdict", "sequence_drop",
    # lesion
    "rroi", "rroi_summary", "RROISummary", "attribute_matching_score", "attribute_matching_score_from_labels",
    # privacy
    "inner_pairs", "inner_risk", "outer_risk", "singling_out_risk", "membership_top_k_precision",
    "distance_to_closest_record", "attribute_inference_summary", "cluster_membership",
    "cluster_membership_top_k_precision", "linkability_as_published",
    # classification
    "confusion_matrix", "accuracy", "balanced_accuracy", "precision_recall_f1", "macro_f1", "auroc",
    "average_precision", "quadratic_weighted_kappa", "classification_summary",
    # trade-off
    "min_max_normalise", "similarity_tradeoff_score", "pareto_front",
]
