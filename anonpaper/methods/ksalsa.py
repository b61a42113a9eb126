"""k-SALSA: k-anonymous synthetic averaging of retinal images via local style alignment.

Jeon, Park, Kim, Morley and Cho, "k-SALSA: k-Anonymous Synthetic Averaging of Retinal Images via Local Style
Alignment", ECCV 2022. The method, as the paper and its public code (hcholab/k-salsa) describe it:

1. Invert every private image into the W+ space of a StyleGAN (the paper: a ReStyle/pSp encoder over a 512 px
   StyleGAN2-ADA; here any W+ codes, e.g. from :func:`anonpaper.models.stylegan.project`).
2. Group the codes into clusters of at least k images (:func:`same_size_clusters`), the k-anonymity unit: one
   synthetic image is released per cluster. With several images per patient, pass the patients as ``groups``:
   then clusters hold at least k distinct patients and each patient's images stay in one cluster.
3. Start from the cluster's latent centroid (:func:`cluster_centroids`; ``G(centroid)`` is the "centroid"
   baseline, :func:`latent_centroid_images`) and optimise W+ with Adam so that the synthetic image keeps the
   members' content (deep features) and their local style (Gram matrices of early features on a grid of patches):
   :func:`local_style_alignment`, :func:`k_salsa_synthesize`.

The k-same pixel baseline (Newton, Sweeney and Malin, IEEE TKDE 2005) is :func:`k_same_pixel_average`.

Conventions. Codes are ``(N, L, D)`` W+ tensors (``L = num_ws``) or ``(N, D)`` W codes. Images given to and
returned by this module are float ``(N, C, H, W)`` in ``[0, 1]`` (the metric convention); the generator's own output
(nominally ``[-1, 1]``) is mapped with ``(x + 1) / 2``. A feature extractor is any callable mapping ``[0, 1]``
images to a list of ``(N, C_l, H_l, W_l)`` feature maps (the mechanism of
:func:`anonpaper.metrics.feature_tap_distance`): a cohort-trained U-Net's ``forward_features``, or a timm
classifier's ``lambda x: model.forward_intermediates(x, intermediates_only=True)``; put it in eval mode first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from anonpaper.metrics._validation import check_features, check_images, check_labels, check_positive_int

__all__ = [
    "same_size_clusters",
    "cluster_members",
    "cluster_centroids",
    "k_same_pixel_average",
    "latent_centroid_images",
    "patch_gram_matrices",
    "local_style_loss",
    "content_loss",
    "AlignmentResult",
    "local_style_alignment",
    "KSalsaResult",
    "k_salsa_synthesize",
]

FeatureTaps = Callable[[torch.Tensor], Sequence[torch.Tensor]]

# Recovered recipe (the authors' command line for k = 5): 100 Adam steps at learning rate 0.1 with the
# StyleGAN2-ADA projector's warm-up / cosine decay, content weight 1e2, style weight 1e-6, a 4 x 4 patch grid.
DEFAULT_STEPS = 100
DEFAULT_LEARNING_RATE = 0.1
DEFAULT_CONTENT_WEIGHT = 1e2
DEFAULT_STYLE_WEIGHT = 1e-6
DEFAULT_PATCH_GRID = 4


# ----------------------------------------------------------------------------------------------------------------
# Same-size k-anonymous clustering


def _flat_codes(codes: Any, name: str = "codes") -> np.ndarray:
    array = codes.detach().cpu().numpy() if isinstance(codes, torch.Tensor) else np.asarray(codes)
    if array.ndim not in (2, 3):
        raise ValueError(f"{name}: expected shape (N, L, D) or (N, D), observed {tuple(array.shape)}")
    return check_features(array.reshape(array.shape[0], -1), name)


def _pairwise_distances(points: np.ndarray) -> np.ndarray:
    squared = (points**2).sum(1)
    distances = squared[:, None] + squared[None, :] - 2.0 * points @ points.T
    np.fill_diagonal(distances, 0.0)
    return np.sqrt(np.maximum(distances, 0.0))


def same_size_clusters(codes: Any, k: int, groups: Any = None) -> np.ndarray:
    """Greedy same-size grouping of latent codes into ``N // k`` clusters of at least ``k`` members.

    With ``groups`` (e.g. the patient of every image) the unit of k-anonymity is the group, not the image: each
    group's codes are averaged, the group means are clustered as below into ``G // k`` clusters of at least ``k``
    groups, and every image joins its group's cluster. So a cluster holds at least ``k`` distinct groups (a k = 2
    cluster is never two photographs of one patient) and no group is split across clusters.

    The k-SALSA grouping (Jeon et al., ECCV 2022), Euclidean on flattened codes: while at least ``k`` points are
    unassigned, take the unassigned point with the largest summed distance to the other unassigned points (the
    most isolated one, so outliers are grouped before their neighbours are used up) and put it in a new cluster
    with its ``k - 1`` nearest unassigned points. The ``r = N mod k`` points left at the end each join the cluster
    whose centroid (mean of its ``k`` founding members) is nearest, so clusters have ``k`` to ``k + r`` members,
    every point belongs to exactly one cluster and none is dropped.

    What the authors' code does instead (``nearestNeighborClust`` in hcholab/k-salsa): it keeps forming groups
    until every point is labelled; for the last group, with fewer than ``k`` points left, the ``k - 1``
    "nearest" are read from a distance row in which assigned points (and the point itself) are masked as NaN and
    sort last, so the group is filled up with ``k - r`` points of EARLIER clusters, which are relabelled. Those
    clusters then have fewer than ``k`` members (and the last one too when it picks itself); for random codes,
    N = 12, k = 5 gives sizes 5, 4, 3 and N = 11, k = 3 gives 3, 3, 3, 2, breaking k-anonymity. Its synthesis
    loader then cuts the cluster-sorted images into batches of exactly ``k``, which straddle clusters whenever a
    cluster's size differs from ``k``. Without a remainder (N divisible by k) both agree with this function up to
    ties.

    Ties (equal summed or pairwise distances) go to the lowest index, so the result is deterministic. Cost: the
    ``N x N`` float64 distance matrix (72 MB for N = 3000) and O(N^2 / k) work after it (N = 3000, k = 5, 256-dim
    codes: 1.7 s on one CPU core).

    Args:
        codes: ``(N, L, D)`` W+ codes or ``(N, D)`` vectors (tensor or array, finite), ``N >= k``.
        k: Minimum cluster size (the k of k-anonymity), ``>= 1``: images, or groups when ``groups`` is given.
        groups: Optional ``(N,)`` group of every code (any hashable labels); needs at least ``k`` groups.

    Returns:
        ``int64 (N,)`` cluster index of every point, in ``[0, N // k)`` (with ``groups``: ``[0, G // k)``); clusters
        are numbered in the order they are formed.

    Raises:
        ValueError: On invalid codes or groups, ``k < 1`` or fewer than ``k`` codes (groups).

    Example:
        >>> labels = same_size_clusters(np.array([[0.0], [0.1], [5.0], [5.1], [5.2]]), k=2)
        >>> labels.tolist()
        [0, 0, 1, 1, 1]
        >>> same_size_clusters(np.array([[0.0], [0.1], [5.0], [5.1]]), k=2, groups=["a", "a", "b", "c"]).tolist()
        [0, 0, 0, 0]
    """
    points = _flat_codes(codes)
    k = check_positive_int(k, "k")
    if groups is not None:
        return _group_clusters(points, k, groups)
    count = points.shape[0]
    if count < k:
        raise ValueError(f"codes: expected at least k = {k} codes to form one cluster, observed {count}")
    distances = _pairwise_distances(points)
    labels = np.full(count, -1, dtype=np.int64)
    unassigned = np.ones(count, dtype=bool)
    # Summed distance to the unassigned points, kept up to date by subtraction (O(N) per member instead of O(N^2)
    # per cluster); assigned points' own sums are never read again.
    summed = distances.sum(axis=1)
    for cluster in range(count // k):
        candidates = np.flatnonzero(unassigned)
        seed = candidates[np.argmax(summed[candidates])]
        others = candidates[candidates != seed]
        nearest = others[np.argsort(distances[seed, others], kind="stable")[: k - 1]]
        members = np.concatenate([[seed], nearest])
        labels[members] = cluster
        unassigned[members] = False
        summed -= distances[:, members].sum(axis=1)
    leftovers = np.flatnonzero(unassigned)
    if leftovers.size:
        founders = np.stack([points[labels == cluster].mean(axis=0) for cluster in range(count // k)])
        to_centroid = ((points[leftovers, None, :] - founders[None, :, :]) ** 2).sum(axis=2)
        labels[leftovers] = np.argmin(to_centroid, axis=1)
    return labels


def _group_clusters(points: np.ndarray, k: int, groups: Any) -> np.ndarray:
    """:func:`same_size_clusters` with groups as the unit: cluster the groups' mean codes, then map back."""
    names = np.asarray(groups)
    if names.shape != (points.shape[0],):
        raise ValueError(f"groups: expected one group per code, shape ({points.shape[0]},), observed {names.shape}")
    unique, inverse = np.unique(names, return_inverse=True)
    if unique.size < k:
        raise ValueError(f"groups: expected at least k = {k} distinct groups to form one cluster, observed "
                         f"{unique.size}")
    means = np.stack([points[inverse == index].mean(axis=0) for index in range(unique.size)])
    return same_size_clusters(means, k)[inverse]


def _check_cluster_labels(labels: Any, count: int | None = None) -> np.ndarray:
    clusters = check_labels(labels, "labels", length=count)
    present = np.unique(clusters)
    if present[0] != 0 or present[-1] != present.size - 1:
        raise ValueError(
            f"labels: expected every cluster index 0..C-1 to be used, observed {present.size} distinct values in "
            f"[{present[0]}, {present[-1]}]"
        )
    return clusters


def cluster_members(labels: Any) -> list[np.ndarray]:
    """Indices of the members of each cluster.

    Args:
        labels: ``(N,)`` cluster index per point, using every index ``0..C-1`` (e.g. from
            :func:`same_size_clusters`).

    Returns:
        A list of ``C`` sorted ``int64`` index arrays; together they partition ``range(N)``.

    Example:
        >>> [members.tolist() for members in cluster_members([1, 0, 1])]
        [[1], [0, 2]]
    """
    clusters = _check_cluster_labels(labels)
    return [np.flatnonzero(clusters == cluster) for cluster in range(int(clusters.max()) + 1)]


def _cluster_means(values: torch.Tensor, labels: np.ndarray) -> torch.Tensor:
    """Mean of ``values`` over each cluster, accumulated in float64 and cast back to the input dtype."""
    clusters = int(labels.max()) + 1
    index = torch.as_tensor(labels, device=values.device)
    totals = torch.zeros((clusters,) + tuple(values.shape[1:]), dtype=torch.float64, device=values.device)
    totals.index_add_(0, index, values.detach().to(torch.float64))
    sizes = torch.bincount(index, minlength=clusters).to(torch.float64)
    return (totals / sizes.view(-1, *([1] * (values.ndim - 1)))).to(values.dtype)


def _as_float_tensor(values: Any, name: str) -> torch.Tensor:
    tensor = values if isinstance(values, torch.Tensor) else torch.from_numpy(np.asarray(values))
    if not tensor.is_floating_point():
        raise ValueError(f"{name}: expected a floating dtype, observed {tensor.dtype}")
    if not bool(torch.isfinite(tensor.detach()).all()):
        raise ValueError(f"{name}: expected finite values, observed NaN or infinity")
    return tensor


def cluster_centroids(codes: Any, labels: Any) -> torch.Tensor:
    """Latent centroid of each cluster: the mean of its members' codes (k-SALSA's starting point).

    Args:
        codes: ``(N, L, D)`` W+ or ``(N, D)`` W codes, floating (tensor or array).
        labels: ``(N,)`` cluster index per code, using every index ``0..C-1``.

    Returns:
        ``(C, L, D)`` or ``(C, D)`` tensor in the codes' dtype and device (computed in float64), detached.

    Example:
        >>> cluster_centroids(torch.tensor([[0.0], [2.0], [5.0]]), [0, 0, 1]).tolist()
        [[1.0], [5.0]]
    """
    values = _as_float_tensor(codes, "codes")
    if values.ndim not in (2, 3):
        raise ValueError(f"codes: expected shape (N, L, D) or (N, D), observed {tuple(values.shape)}")
    return _cluster_means(values, _check_cluster_labels(labels, values.shape[0]))


def k_same_pixel_average(images: Any, labels: Any) -> torch.Tensor:
    """k-same pixel averaging (Newton et al. 2005): the mean image of each cluster's members.

    k-SALSA's pixel baseline averages the members of the SAME clusters as the latent methods (pass the labels of
    :func:`same_size_clusters` on the W+ codes), so the three methods release one image per identical group. For
    the original k-same grouping in pixel space, pass ``same_size_clusters(images.flatten(1), k)``.

    Args:
        images: ``(N, C, H, W)`` floating images (tensor or array), any finite range (``[0, 1]`` by convention).
        labels: ``(N,)`` cluster index per image, using every index ``0..C-1``.

    Returns:
        ``(clusters, C, H, W)`` tensor in the images' dtype and device: per-pixel means, accumulated in float64.
        A cluster's average does not depend on the order of its members.
    """
    values = _as_float_tensor(images, "images")
    if values.ndim != 4:
        raise ValueError(f"images: expected shape (N, C, H, W), observed {tuple(values.shape)}")
    return _cluster_means(values, _check_cluster_labels(labels, values.shape[0]))


# ----------------------------------------------------------------------------------------------------------------
# Generator glue


def _synthesize(generator: Any, ws: torch.Tensor) -> torch.Tensor:
    """Generator images (nominally [-1, 1]) for ``ws``; W codes (N, D) are repeated to every layer."""
    if ws.ndim == 2 and hasattr(generator, "num_ws"):
        ws = ws[:, None, :].expand(-1, generator.num_ws, -1)
    if hasattr(generator, "synthesis"):
        # The package's StyleGenerator: W+ entry point with the fixed noise buffers (deterministic).
        return generator.synthesis(ws, noise_mode="const")
    return generator(ws)


def _generator_device(generator: Any, fallback: torch.device) -> torch.device:
    parameters = getattr(generator, "parameters", None)
    if callable(parameters):
        for parameter in parameters():
            return parameter.device
    return fallback


@torch.no_grad()
def latent_centroid_images(generator: Any, codes: Any, labels: Any, batch_size: int = 16) -> torch.Tensor:
    """The "centroid" baseline of k-SALSA: ``G(mean of the cluster's codes)`` without alignment.

    Args:
        generator: A :class:`~anonpaper.models.stylegan.StyleGenerator` (its ``synthesis(ws)`` with constant noise is
            used) or any callable mapping ``(B, L, D)`` codes to ``(B, C, H, W)`` images in ``[-1, 1]``.
        codes: ``(N, L, D)`` W+ or ``(N, D)`` W codes.
        labels: ``(N,)`` cluster index per code.
        batch_size: Clusters per generator call.

    Returns:
        ``float32 (clusters, C, H, W)`` images in ``[0, 1]`` (clamped), on the generator's device.
    """
    centroids = cluster_centroids(codes, labels)
    batch_size = check_positive_int(batch_size, "batch_size")
    device = _generator_device(generator, centroids.device)
    images = [
        _synthesize(generator, centroids[start:start + batch_size].to(device, torch.float32))
        for start in range(0, centroids.shape[0], batch_size)
    ]
    return ((torch.cat(images) + 1.0) * 0.5).clamp(0.0, 1.0).float()


# ----------------------------------------------------------------------------------------------------------------
# Losses


def _tap(taps: Any, index: int, batch: int) -> torch.Tensor:
    """Tap ``index`` of a feature-tap network's output, validated as ``(batch, C, H, W)``."""
    if not isinstance(taps, (list, tuple)) or len(taps) == 0:
        raise ValueError(
            f"feature_taps: expected a non-empty list of (N, C, H, W) tensors, observed {type(taps).__name__}"
        )
    if not -len(taps) <= index < len(taps):
        raise ValueError(f"feature_taps: expected a tap index in [-{len(taps)}, {len(taps)}), observed {index}")
    features = taps[index]
    if not isinstance(features, torch.Tensor) or features.ndim != 4 or features.shape[0] != batch:
        raise ValueError(
            f"feature_taps: tap {index} expected shape (N={batch}, C, H, W), observed "
            f"{tuple(getattr(features, 'shape', ()))}"
        )
    return features


def patch_gram_matrices(features: torch.Tensor, grid: int = DEFAULT_PATCH_GRID) -> torch.Tensor:
    """Gram matrices of the ``grid x grid`` patches of feature maps (k-SALSA's local style statistics).

    The maps are cut into patches of ``(H // grid) x (W // grid)`` positions, row by row (the last
    ``H mod grid`` rows and ``W mod grid`` columns are left out, as in the authors' crops). For a patch ``P`` with
    channel vectors ``f_p`` the Gram matrix is ``G = sum_{p in P} f_p f_p^T``, NOT divided by the number of
    positions: the recipe's style weight (1e-6) is calibrated to that scale.

    Args:
        features: ``(N, C, H, W)`` float feature maps, ``H, W >= grid``.
        grid: Patches per side (4 in the recipe).

    Returns:
        ``(N, grid * grid, C, C)`` symmetric positive semi-definite matrices, in the features' dtype; patch
        ``i * grid + j`` is the one in patch row ``i``, column ``j``. Differentiable.

    Example:
        >>> patch_gram_matrices(torch.ones(1, 2, 4, 4), grid=2)[0, 0].tolist()
        [[4.0, 4.0], [4.0, 4.0]]
    """
    grid = check_positive_int(grid, "grid")
    if not isinstance(features, torch.Tensor) or features.ndim != 4 or not features.is_floating_point():
        raise ValueError(
            f"features: expected a float tensor (N, C, H, W), observed {type(features).__name__} "
            f"{tuple(getattr(features, 'shape', ()))}"
        )
    batch, channels, height, width = features.shape
    if height < grid or width < grid:
        raise ValueError(f"features: expected height and width >= grid = {grid}, observed {height}x{width}")
    patch_height, patch_width = height // grid, width // grid
    cropped = features[:, :, : grid * patch_height, : grid * patch_width]
    # (N, C, grid, ph, grid, pw) -> (N, grid, grid, C, ph * pw): one row of channel vectors per patch.
    patches = cropped.reshape(batch, channels, grid, patch_height, grid, patch_width)
    patches = patches.permute(0, 2, 4, 1, 3, 5).reshape(batch, grid * grid, channels, patch_height * patch_width)
    return patches @ patches.transpose(-1, -2)


def local_style_loss(synthetic_grams: torch.Tensor, member_grams: torch.Tensor) -> torch.Tensor:
    """k-SALSA's local style loss between one synthetic image and the members of its cluster.

    Every patch ``p`` of member ``m`` is matched to the synthetic patch ``q*(m, p)`` whose flattened Gram matrix is
    the most cosine-similar to its own (ties: the lowest patch index); the loss is the squared Frobenius distance
    ``||G_syn[q*] - G_m[p]||^2`` averaged over the member's patches, then over members. Several member patches may
    match the same synthetic patch, which is what lets the synthetic image place each member's local texture
    where it already fits. The matching is a hard argmax (no gradient); gradients flow through ``G_syn[q*]``.

    Args:
        synthetic_grams: ``(P, C, C)`` patch Gram matrices of the synthetic image.
        member_grams: ``(M, P, C, C)`` patch Gram matrices of the ``M`` members (treated as constants).

    Returns:
        0-d tensor, ``>= 0`` (lower = closer local style); 0 when every member patch equals some synthetic patch.
    """
    if synthetic_grams.ndim != 3 or member_grams.ndim != 4 or member_grams.shape[1:] != synthetic_grams.shape:
        raise ValueError(
            f"grams: expected synthetic (P, C, C) and members (M, P, C, C) with equal (P, C, C), observed "
            f"{tuple(synthetic_grams.shape)} and {tuple(member_grams.shape)}"
        )
    synthetic = synthetic_grams.flatten(1)  # (P, C*C)
    members = member_grams.detach().flatten(2)  # (M, P, C*C)
    with torch.no_grad():
        similarity = F.normalize(members, dim=2) @ F.normalize(synthetic, dim=1).T  # (M, P_member, P_synthetic)
        matched = similarity.argmax(dim=2)  # first maximum on ties
    # index_select, not synthetic[matched]: the backward of advanced indexing accumulates the many repeated indices
    # in parallel on CPU, in an order that changes from run to run (k >= 10 gave different releases on each run);
    # index_select's backward (index_add_) adds them in index order, and gives the same values where the former was
    # stable.
    gathered = synthetic.index_select(0, matched.flatten()).view(*matched.shape, -1)
    return (gathered - members).square().sum(dim=2).mean()


def content_loss(synthetic_features: torch.Tensor, member_features: torch.Tensor,
                 distance: str = "cosine") -> torch.Tensor:
    """Content loss between one synthetic image and the members of its cluster, on one deep feature tap.

    ``"cosine"`` (the recipe): each map is average-pooled over positions to a vector (as the authors' MoCo
    ResNet-50 features are) and the loss is the mean over members of ``1 - cos(pooled synthetic, pooled member)``,
    in ``[0, 2]``. ``"mse"``: the mean squared difference of the full maps, averaged over members (keeps the
    spatial layout; useful with segmentation taps).

    Args:
        synthetic_features: ``(1, C, H, W)`` features of the synthetic image.
        member_features: ``(M, C, H, W)`` features of the members' reconstructions (treated as constants).
        distance: ``"cosine"`` or ``"mse"``.

    Returns:
        0-d tensor, ``>= 0``; lower = closer content; 0 when the synthetic features equal every member's.
    """
    if distance not in ("cosine", "mse"):
        raise ValueError(f"distance: expected 'cosine' or 'mse', observed {distance!r}")
    if synthetic_features.ndim != 4 or synthetic_features.shape[0] != 1 \
            or member_features.shape[1:] != synthetic_features.shape[1:] or member_features.ndim != 4:
        raise ValueError(
            f"features: expected synthetic (1, C, H, W) and members (M, C, H, W), observed "
            f"{tuple(synthetic_features.shape)} and {tuple(member_features.shape)}"
        )
    members = member_features.detach()
    if distance == "mse":
        return (synthetic_features - members).square().mean()
    pooled_synthetic = synthetic_features.mean(dim=(2, 3))
    pooled_members = members.mean(dim=(2, 3))
    return (1.0 - F.cosine_similarity(pooled_synthetic, pooled_members, dim=1, eps=1e-12)).mean()


# ----------------------------------------------------------------------------------------------------------------
# Local style alignment


@dataclass
class AlignmentResult:
    """Output of :func:`local_style_alignment`.

    Attributes:
        ws: ``(1, L, D)`` (or ``(1, D)``) optimised code, float32 on the generator's device, detached.
        image: ``(1, C, H, W)`` float32 synthetic image ``G(ws)`` in ``[0, 1]`` (clamped).
        initial_loss: Weighted loss at the starting code (the centroid).
        final_loss: Weighted loss at ``ws``.
        history: Per step ``(weighted total, content, style)`` (the two parts unweighted) at the code BEFORE the
            step.
    """

    ws: torch.Tensor
    image: torch.Tensor
    initial_loss: float
    final_loss: float
    history: list = field(default_factory=list)


def _projector_learning_rate(step: int, num_steps: int, peak: float, rampup: float, rampdown: float) -> float:
    """StyleGAN2-ADA projector schedule: linear warm-up over ``rampup`` of the steps, cosine decay over the last
    ``rampdown`` of them (the schedule the authors' alignment uses, without the projector's w noise)."""
    t = step / num_steps
    ramp = min(1.0, (1.0 - t) / rampdown) if rampdown > 0 else 1.0
    ramp = 0.5 - 0.5 * math.cos(ramp * math.pi)
    if rampup > 0:
        ramp *= min(1.0, t / rampup)
    return peak * ramp


def _check_weight(value: float, name: str) -> float:
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{name}: expected a finite number >= 0, observed {value!r}")
    return number


def local_style_alignment(
    generator: Any,
    initial_ws: torch.Tensor,
    content_targets: torch.Tensor,
    feature_taps: FeatureTaps,
    *,
    style_targets: torch.Tensor | None = None,
    num_steps: int = DEFAULT_STEPS,
    learning_rate: float = DEFAULT_LEARNING_RATE,
    lr_rampup: float = 0.05,
    lr_rampdown: float = 0.25,
    content_weight: float = DEFAULT_CONTENT_WEIGHT,
    style_weight: float = DEFAULT_STYLE_WEIGHT,
    patch_grid: int = DEFAULT_PATCH_GRID,
    content_tap: int = -1,
    style_tap: int = 0,
    content_distance: str = "cosine",
) -> AlignmentResult:
    """Local style alignment of one cluster (k-SALSA): optimise the code of one synthetic image, starting from the
    cluster's centroid, to minimise ``content_weight * content + style_weight * style``.

    ``content`` is :func:`content_loss` between tap ``content_tap`` of ``G(w)`` and of each member's
    reconstruction; ``style`` is :func:`local_style_loss` on the :func:`patch_gram_matrices` of tap ``style_tap``
    of ``G(w)`` and of each member's image (the authors take style from the real images and content from the
    encoder's reconstructions). Adam (betas 0.9, 0.999) on the code only, with the projector's learning-rate
    schedule; the generator and the feature network are not modified (gradients are taken with respect to the code
    alone). No randomness: the result is a deterministic function of the inputs on a given device.

    Args:
        generator: :class:`~anonpaper.models.stylegan.StyleGenerator` (``synthesis(ws, noise_mode="const")``) or any
            callable mapping codes ``(1, L, D)`` to images ``(1, C, H, W)`` in ``[-1, 1]``.
        initial_ws: The starting code, ``(1, L, D)`` W+ or ``(1, D)`` W (e.g. ``cluster_centroids(...)[c:c + 1]``);
            not modified.
        content_targets: ``(M, C, H, W)`` members' reconstructions ``G(w_m)`` in ``[0, 1]``.
        feature_taps: Callable mapping ``[0, 1]`` images to a list of ``(N, C_l, H_l, W_l)`` maps, in eval mode
            (a cohort-trained network's taps; the paper uses MoCo ResNet-50 pooled features for content and VGG19
            ``conv1_2`` for style, both ImageNet-pretrained, which we do not have).
        style_targets: ``(M, C, H, W)`` members' images in ``[0, 1]``; None uses ``content_targets``.
        num_steps: Adam steps (100).
        learning_rate: Peak learning rate (0.1).
        lr_rampup: Fraction of steps of the linear warm-up (0.05; the first step has learning rate 0).
        lr_rampdown: Fraction of steps of the final cosine decay (0.25).
        content_weight: Weight of the content loss (1e2).
        style_weight: Weight of the style loss (1e-6, for un-normalised Gram matrices of a 64-channel map on
            64 x 64 patches; rescale for other feature networks and resolutions).
        patch_grid: Patches per side for the style Gram matrices (4).
        content_tap: Index of the content tap (deep: ``-1`` for a classifier's last stage; ``depth - 1``, the
            bottleneck, for a U-Net's ``forward_features``).
        style_tap: Index of the style tap (early: ``0``).
        content_distance: ``"cosine"`` (recipe) or ``"mse"``, see :func:`content_loss`.

    Returns:
        :class:`AlignmentResult`.

    Raises:
        ValueError: On invalid shapes, ranges, taps or hyper-parameters.
    """
    if not isinstance(initial_ws, torch.Tensor) or not initial_ws.is_floating_point() \
            or initial_ws.ndim not in (2, 3) or initial_ws.shape[0] != 1:
        raise ValueError(
            f"initial_ws: expected a float tensor (1, L, D) or (1, D), observed "
            f"{getattr(initial_ws, 'dtype', type(initial_ws).__name__)} {tuple(getattr(initial_ws, 'shape', ()))}"
        )
    if not bool(torch.isfinite(initial_ws.detach()).all()):
        raise ValueError("initial_ws: expected finite values, observed NaN or infinity")
    content_targets = check_images(content_targets, "content_targets")
    style_targets = content_targets if style_targets is None else check_images(style_targets, "style_targets")
    if style_targets.shape != content_targets.shape:
        raise ValueError(
            f"style_targets: expected the shape of content_targets {tuple(content_targets.shape)}, observed "
            f"{tuple(style_targets.shape)}"
        )
    num_steps = check_positive_int(num_steps, "num_steps")
    patch_grid = check_positive_int(patch_grid, "patch_grid")
    learning_rate = _check_weight(learning_rate, "learning_rate")
    content_weight = _check_weight(content_weight, "content_weight")
    style_weight = _check_weight(style_weight, "style_weight")
    for name, value in (("lr_rampup", lr_rampup), ("lr_rampdown", lr_rampdown)):
        if not 0.0 <= float(value) <= 1.0:
            raise ValueError(f"{name}: expected a fraction in [0, 1], observed {value!r}")
    if content_distance not in ("cosine", "mse"):
        raise ValueError(f"content_distance: expected 'cosine' or 'mse', observed {content_distance!r}")
    if not callable(feature_taps):
        raise ValueError(f"feature_taps: expected a callable, observed {type(feature_taps).__name__}")

    device = _generator_device(generator, initial_ws.device)
    w = initial_ws.detach().to(device=device, dtype=torch.float32).clone().requires_grad_(True)
    content_targets, style_targets = content_targets.to(device), style_targets.to(device)
    members = content_targets.shape[0]
    with torch.no_grad():
        member_content = _tap(feature_taps(content_targets), content_tap, members)
        member_grams = patch_gram_matrices(_tap(feature_taps(style_targets), style_tap, members), patch_grid)

    def losses(code: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        image = (_synthesize(generator, code) + 1.0) * 0.5  # unclamped, so that gradients reach every pixel
        if image.shape[1:] != content_targets.shape[1:]:
            raise ValueError(
                f"generator: expected images of the targets' shape (C, H, W) = {tuple(content_targets.shape[1:])}, "
                f"observed {tuple(image.shape[1:])}"
            )
        taps = feature_taps(image)
        content = content_loss(_tap(taps, content_tap, 1), member_content, content_distance)
        style = local_style_loss(patch_gram_matrices(_tap(taps, style_tap, 1), patch_grid)[0], member_grams)
        return content_weight * content + style_weight * style, content, style

    optimizer = torch.optim.Adam([w], lr=learning_rate, betas=(0.9, 0.999))
    history = []
    for step in range(num_steps):
        for group in optimizer.param_groups:
            group["lr"] = _projector_learning_rate(step, num_steps, learning_rate, lr_rampup, lr_rampdown)
        total, content, style = losses(w)
        # Gradient with respect to the code only: the generator's and feature network's .grad stay untouched.
        (w.grad,) = torch.autograd.grad(total, [w])
        optimizer.step()
        history.append((float(total.detach()), float(content.detach()), float(style.detach())))
    with torch.no_grad():
        final_loss = float(losses(w)[0])
        image = ((_synthesize(generator, w) + 1.0) * 0.5).clamp(0.0, 1.0).float()
    return AlignmentResult(ws=w.detach(), image=image, initial_loss=history[0][0], final_loss=final_loss,
                           history=history)


# ----------------------------------------------------------------------------------------------------------------
# Whole pipeline


@dataclass
class KSalsaResult:
    """Output of :func:`k_salsa_synthesize`; row ``c`` of every tensor is cluster ``c``.

    Attributes:
        labels: ``int64 (N,)`` cluster of every private image.
        centroid_ws: ``(C, L, D)`` latent centroids.
        aligned_ws: ``(C, L, D)`` codes after local style alignment.
        centroid_images: ``(C, ch, H, W)`` ``G(centroid)`` in ``[0, 1]`` (the centroid baseline).
        aligned_images: ``(C, ch, H, W)`` k-SALSA synthetic images in ``[0, 1]``.
        initial_losses: ``(C,)`` alignment loss at the centroid.
        final_losses: ``(C,)`` alignment loss at the aligned code.
    """

    labels: np.ndarray
    centroid_ws: torch.Tensor
    aligned_ws: torch.Tensor
    centroid_images: torch.Tensor
    aligned_images: torch.Tensor
    initial_losses: np.ndarray
    final_losses: np.ndarray


def k_salsa_synthesize(
    generator: Any,
    codes: torch.Tensor,
    feature_taps: FeatureTaps,
    *,
    k: int | None = None,
    labels: Any = None,
    groups: Any = None,
    member_images: torch.Tensor | None = None,
    progress: bool = False,
    **alignment: Any,
) -> KSalsaResult:
    """k-SALSA end to end on inverted codes: cluster, take centroids, align each cluster's synthetic image.

    Content targets are the members' reconstructions ``G(w_m)`` (constant noise, clamped to ``[0, 1]``); style
    targets are ``member_images`` (the real private images, as in the authors' code) or the reconstructions.

    Args:
        generator: As in :func:`local_style_alignment`.
        codes: ``(N, L, D)`` W+ (or ``(N, D)`` W) codes of the private images.
        feature_taps: As in :func:`local_style_alignment`.
        k: Cluster size for :func:`same_size_clusters`; give exactly one of ``k`` and ``labels``.
        labels: Precomputed ``(N,)`` cluster labels.
        groups: Optional ``(N,)`` group (patient) of every code: with ``k``, clusters of at least ``k`` groups
            (see :func:`same_size_clusters`).
        member_images: Optional ``(N, C, H, W)`` private images in ``[0, 1]`` (style targets).
        progress: Show a tqdm bar over clusters.
        **alignment: Keyword arguments of :func:`local_style_alignment` (steps, weights, taps, ...).

    Returns:
        :class:`KSalsaResult`.
    """
    if (k is None) == (labels is None):
        raise ValueError(f"expected exactly one of k and labels, observed k={k!r} and labels "
                         f"{'given' if labels is not None else 'None'}")
    codes = _as_float_tensor(codes, "codes")
    if groups is not None and labels is not None:
        raise ValueError("groups: give them with k (the clustering uses them), not with precomputed labels")
    clusters = same_size_clusters(codes, k, groups) if labels is None else _check_cluster_labels(labels,
                                                                                                 codes.shape[0])
    if member_images is not None:
        member_images = check_images(member_images, "member_images")
        if member_images.shape[0] != codes.shape[0]:
            raise ValueError(f"member_images: expected {codes.shape[0]} images (one per code), observed "
                             f"{member_images.shape[0]}")
    centroids = cluster_centroids(codes, clusters)
    device = _generator_device(generator, codes.device)
    groups = cluster_members(clusters)
    if progress:
        from tqdm.auto import tqdm

        groups = tqdm(groups, desc="k-SALSA clusters")
    aligned, aligned_images, initial, final = [], [], [], []
    for cluster, members in enumerate(groups):
        with torch.no_grad():
            member_codes = codes[torch.as_tensor(members)].to(device, torch.float32)
            reconstructions = ((_synthesize(generator, member_codes) + 1.0) * 0.5).clamp(0.0, 1.0)
        style = None if member_images is None else member_images[torch.as_tensor(members)]
        result = local_style_alignment(generator, centroids[cluster:cluster + 1], reconstructions, feature_taps,
                                       style_targets=style, **alignment)
        aligned.append(result.ws)
        aligned_images.append(result.image)
        initial.append(result.initial_loss)
        final.append(result.final_loss)
    return KSalsaResult(labels=clusters, centroid_ws=centroids, aligned_ws=torch.cat(aligned),
                        centroid_images=latent_centroid_images(generator, codes, clusters),
                        aligned_images=torch.cat(aligned_images),
                        initial_losses=np.asarray(initial), final_losses=np.asarray(final))
