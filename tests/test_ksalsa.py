"""k-SALSA method layer (anonpaper.methods.ksalsa) and its membership-inference glue (anonpaper.metrics.privacy)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from anonpaper.methods.ksalsa import (cluster_centroids, cluster_members, content_loss, k_salsa_synthesize,
                                      k_same_pixel_average, latent_centroid_images, local_style_alignment,
                                      local_style_loss, patch_gram_matrices, same_size_clusters)
from anonpaper.metrics.privacy import (cluster_membership, cluster_membership_top_k_precision,
                                       membership_top_k_precision)
from anonpaper.models.stylegan import StyleGenerator, get_config

pytestmark = pytest.mark.unit


# ---------------------------------------------------------------------------------------------------------------
# References written from the method's description, loop by loop


def reference_clusters(points: np.ndarray, k: int) -> np.ndarray:
    """The greedy grouping recomputed from scratch at every step (no incremental sums), remainder to the nearest
    founding centroid."""
    count = len(points)
    distances = np.sqrt(((points[:, None, :] - points[None, :, :]) ** 2).sum(-1))
    labels = np.full(count, -1)
    for cluster in range(count // k):
        free = [i for i in range(count) if labels[i] < 0]
        sums = [sum(distances[i, j] for j in free) for i in free]
        seed = free[int(np.argmax(sums))]
        others = sorted((distances[seed, j], j) for j in free if j != seed)
        for _, j in others[: k - 1]:
            labels[j] = cluster
        labels[seed] = cluster
    centroids = [points[labels == c].mean(0) for c in range(count // k)]
    for i in [i for i in range(count) if labels[i] < 0]:
        labels[i] = int(np.argmin([((points[i] - c) ** 2).sum() for c in centroids]))
    return labels


def reference_patch_grams(features: np.ndarray, grid: int) -> np.ndarray:
    batch, channels, height, width = features.shape
    ph, pw = height // grid, width // grid
    grams = np.zeros((batch, grid * grid, channels, channels))
    for n in range(batch):
        for i in range(grid):
            for j in range(grid):
                for y in range(i * ph, (i + 1) * ph):
                    for x in range(j * pw, (j + 1) * pw):
                        vector = features[n, :, y, x]
                        grams[n, i * grid + j] += np.outer(vector, vector)
    return grams


def reference_style_loss(synthetic: np.ndarray, members: np.ndarray) -> float:
    """Per member patch: the most cosine-similar synthetic patch, squared Frobenius distance; mean, mean."""
    per_member = []
    for member in members:
        per_patch = []
        for target in member:
            cosines = [float((s * target).sum() / (np.linalg.norm(s) * np.linalg.norm(target))) for s in synthetic]
            best = synthetic[int(np.argmax(cosines))]
            per_patch.append(((best - target) ** 2).sum())
        per_member.append(np.mean(per_patch))
    return float(np.mean(per_member))


class TinyTaps(nn.Module):
    """A fixed random three-stage conv net standing in for a cohort-trained network's feature taps."""

    def __init__(self, channels: int = 3, seed: int = 0):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.stages = nn.ModuleList([nn.Conv2d(channels, 8, 3, padding=1), nn.Conv2d(8, 16, 3, stride=2, padding=1),
                                     nn.Conv2d(16, 16, 3, stride=2, padding=1)])
        with torch.no_grad():
            for stage in self.stages:
                stage.weight.copy_(torch.randn(stage.weight.shape, generator=generator) * 0.3)
                stage.bias.zero_()

    def forward(self, images):
        taps, x = [], images
        for stage in self.stages:
            x = torch.relu(stage(x))
            taps.append(x)
        return taps


@pytest.fixture(scope="module")
def generator():
    return StyleGenerator(get_config("sg2-tiny"), seed=0).eval()


@pytest.fixture(scope="module")
def feature_taps():
    return TinyTaps().eval()


def member_codes(generator, count: int, seed: int) -> torch.Tensor:
    with torch.no_grad():
        return generator.mapping(generator.sample_latents(count, seed=seed))


# ---------------------------------------------------------------------------------------------------------------
# Clustering


@pytest.mark.parametrize("count,k", [(k, k) for k in (1, 2, 3, 5)] + [(n, k) for k in (2, 3, 5) for n in
                                                                      range(k + 1, 2 * k)]
                         + [(10, 3), (12, 5), (13, 5), (23, 5), (40, 7), (41, 4), (57, 10)])
def test_same_size_clusters_keeps_every_point_and_every_cluster_at_least_k(count, k):
    rng = np.random.default_rng(count * 100 + k)
    codes = rng.normal(size=(count, 3, 4))  # W+ shaped (N, L, D)
    labels = same_size_clusters(codes, k)
    assert labels.shape == (count,) and labels.dtype == np.int64
    sizes = np.bincount(labels)
    assert len(sizes) == count // k  # indices 0..C-1, all used
    assert sizes.min() >= k and sizes.sum() == count
    assert sizes.max() <= k + count % k
    np.testing.assert_array_equal(labels, reference_clusters(codes.reshape(count, -1), k))


def test_same_size_clusters_deterministic_and_input_type_independent():
    codes = torch.randn(23, 4, 6, generator=torch.Generator().manual_seed(3))
    first = same_size_clusters(codes, 5)
    np.testing.assert_array_equal(first, same_size_clusters(codes.clone(), 5))
    np.testing.assert_array_equal(first, same_size_clusters(codes.numpy().astype(np.float64), 5))
    np.testing.assert_array_equal(first, same_size_clusters(codes.flatten(1), 5))  # (N, D) == flattened (N, L, D)


def test_remainder_joins_its_own_blob():
    # Three far-apart blobs of 3, 3 and 4 points with k = 3: the fourth point of the last blob must join that blob,
    # not be dropped and not be put with a far cluster.
    rng = np.random.default_rng(0)
    centres = np.array([[0.0, 0.0], [100.0, 0.0], [0.0, 100.0]])
    blob = np.repeat([0, 1, 2], [3, 3, 4])
    codes = centres[blob] + rng.normal(scale=0.5, size=(10, 2))
    labels = same_size_clusters(codes, 3)
    for b in range(3):
        assert len(set(labels[blob == b].tolist())) == 1  # each blob is exactly one cluster
    assert len(set(labels.tolist())) == 3


@pytest.mark.parametrize("patients, per_patient, k", [(10, 2, 2), (13, 3, 5), (7, 1, 3), (20, 4, 2)])
def test_patient_clusters_hold_k_distinct_patients_and_never_split_a_patient(patients, per_patient, k):
    # Each patient's photographs have nearly the same code (two photographs of one eye), so image-level clustering
    # pairs them with each other: a k = 2 cluster of one patient.
    rng = np.random.default_rng(patients * 10 + k)
    owner = np.repeat(np.arange(patients), per_patient)
    codes = rng.normal(size=(patients, 3, 4))[owner] + 1e-3 * rng.normal(size=(len(owner), 3, 4))
    names = np.array([f"patient-{index}" for index in owner])
    labels = same_size_clusters(codes, k, groups=names)
    assert labels.shape == owner.shape and len(np.unique(labels)) == patients // k
    for cluster in np.unique(labels):
        assert len(np.unique(owner[labels == cluster])) >= k  # at least k distinct patients
    for patient in range(patients):
        assert len(np.unique(labels[owner == patient])) == 1  # a patient's images never mixed into two clusters
    if per_patient >= k:  # the image-level clustering does put one patient's photographs together
        image_level = same_size_clusters(codes, k)
        assert min(len(np.unique(owner[image_level == cluster])) for cluster in np.unique(image_level)) < k


def test_patient_clusters_validation():
    with pytest.raises(ValueError, match="at least k = 3 distinct groups"):
        same_size_clusters(np.zeros((6, 2)), 3, groups=["a", "a", "b", "b", "b", "b"])
    with pytest.raises(ValueError, match="one group per code"):
        same_size_clusters(np.zeros((6, 2)), 2, groups=["a", "b"])


def test_same_size_clusters_validation():
    with pytest.raises(ValueError, match="at least k = 4"):
        same_size_clusters(np.zeros((3, 2)), 4)
    with pytest.raises(ValueError, match="k: expected an integer >= 1"):
        same_size_clusters(np.zeros((3, 2)), 0)
    with pytest.raises(ValueError, match=r"\(N, L, D\) or \(N, D\)"):
        same_size_clusters(np.zeros(3), 1)
    with pytest.raises(ValueError, match="finite"):
        same_size_clusters(np.array([[0.0], [np.nan]]), 1)


def test_cluster_members_partition():
    labels = same_size_clusters(np.random.default_rng(1).normal(size=(17, 3)), 4)
    members = cluster_members(labels)
    assert sorted(np.concatenate(members).tolist()) == list(range(17))
    assert all((labels[group] == index).all() for index, group in enumerate(members))
    with pytest.raises(ValueError, match="every cluster index"):
        cluster_members([0, 2, 2])


# ---------------------------------------------------------------------------------------------------------------
# Centroids and baselines


def test_cluster_centroids_and_k_same_average_are_exact():
    rng = np.random.default_rng(2)
    labels = np.array([2, 0, 1, 0, 2, 1, 0, 2, 1, 1])
    # Integer-valued float64 data: sums are exact, so the only rounding is the final division, as in the reference.
    codes = torch.from_numpy(rng.integers(-50, 50, size=(10, 3, 4)).astype(np.float64))
    images = torch.from_numpy(rng.integers(0, 255, size=(10, 3, 5, 6)).astype(np.float64))
    for function, values in ((cluster_centroids, codes), (k_same_pixel_average, images)):
        result = function(values, labels)
        assert result.dtype == values.dtype and result.shape == (3,) + values.shape[1:]
        for cluster in range(3):
            rows = values[torch.from_numpy(labels == cluster)]
            assert torch.equal(result[cluster], rows.sum(0) / rows.shape[0])
    # float32 input: computed in float64, returned in float32, equal to numpy's float64 mean rounded once.
    images32 = torch.rand(10, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    average = k_same_pixel_average(images32, labels)
    assert average.dtype == torch.float32
    expected = np.stack([images32.double().numpy()[labels == c].mean(0) for c in range(3)]).astype(np.float32)
    np.testing.assert_array_equal(average.numpy(), expected)
    with pytest.raises(ValueError, match="floating"):
        k_same_pixel_average(torch.zeros(10, 1, 2, 2, dtype=torch.uint8), labels)
    with pytest.raises(ValueError, match="length 10"):
        cluster_centroids(codes, labels[:-1])


def test_latent_centroid_images_are_generator_of_mean(generator):
    codes = member_codes(generator, 7, seed=4)
    labels = same_size_clusters(codes, 3)
    images = latent_centroid_images(generator, codes, labels, batch_size=1)
    assert images.shape == (2, 3, 32, 32) and images.min() >= 0 and images.max() <= 1
    with torch.no_grad():
        expected = ((generator.synthesis(codes[torch.from_numpy(labels == 1)].mean(0, keepdim=True)) + 1) / 2)
    torch.testing.assert_close(images[1:2], expected.clamp(0, 1), rtol=0, atol=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# Losses


@pytest.mark.parametrize("height,width,grid", [(8, 8, 4), (9, 10, 4), (6, 6, 1), (5, 7, 2)])
def test_patch_gram_matrices_equal_brute_force(height, width, grid):
    features = torch.randn(2, 3, height, width, generator=torch.Generator().manual_seed(height * width),
                           dtype=torch.float64)
    grams = patch_gram_matrices(features, grid)
    assert grams.shape == (2, grid * grid, 3, 3)
    np.testing.assert_allclose(grams.numpy(), reference_patch_grams(features.numpy(), grid), rtol=1e-12,
                               atol=1e-12)
    with pytest.raises(ValueError, match="height and width >= grid"):
        patch_gram_matrices(features, max(height, width) + 1)


def test_local_style_loss_equals_brute_force_and_is_zero_on_copies():
    rng = torch.Generator().manual_seed(5)
    synthetic = patch_gram_matrices(torch.randn(1, 4, 8, 8, generator=rng, dtype=torch.float64), 4)[0]
    members = patch_gram_matrices(torch.randn(3, 4, 8, 8, generator=rng, dtype=torch.float64), 4)
    loss = local_style_loss(synthetic, members)
    assert float(loss) == pytest.approx(reference_style_loss(synthetic.numpy(), members.numpy()), rel=1e-12)
    # A member made of (permuted) synthetic patches matches each patch to itself: zero loss.
    shuffled = synthetic[torch.randperm(16, generator=rng)][None]
    assert float(local_style_loss(synthetic, shuffled)) == 0.0
    # Gradients reach the synthetic Gram matrices.
    synthetic.requires_grad_(True)
    local_style_loss(synthetic, members).backward()
    assert synthetic.grad is not None and synthetic.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="grams"):
        local_style_loss(synthetic, members[:, :4])


def test_local_style_loss_gradient_is_identical_on_every_call_with_many_members():
    # 40 members x 16 patches all matched to a few synthetic patches: advanced indexing's backward accumulated these
    # repeats in a thread-dependent order and gave a different gradient on some calls.
    rng = torch.Generator().manual_seed(7)
    synthetic = patch_gram_matrices(torch.randn(1, 8, 16, 16, generator=rng), 4)[0]
    members = patch_gram_matrices(torch.randn(40, 8, 16, 16, generator=rng), 4)
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        gradients = []
        for _ in range(30):
            copy = synthetic.clone().requires_grad_(True)
            local_style_loss(copy, members).backward()
            gradients.append(copy.grad)
    finally:
        torch.set_num_threads(previous)
    assert all(torch.equal(gradients[0], gradient) for gradient in gradients[1:])


def test_content_loss_matches_closed_forms():
    rng = torch.Generator().manual_seed(6)
    synthetic = torch.randn(1, 5, 3, 3, generator=rng, dtype=torch.float64)
    members = torch.randn(4, 5, 3, 3, generator=rng, dtype=torch.float64)
    pooled_s, pooled_m = synthetic.mean((2, 3))[0].numpy(), members.mean((2, 3)).numpy()
    cosines = pooled_m @ pooled_s / (np.linalg.norm(pooled_m, axis=1) * np.linalg.norm(pooled_s))
    assert float(content_loss(synthetic, members)) == pytest.approx(float(np.mean(1 - cosines)), rel=1e-12)
    expected_mse = float(np.mean((members.numpy() - synthetic.numpy()) ** 2))
    assert float(content_loss(synthetic, members, "mse")) == pytest.approx(expected_mse, rel=1e-12)
    assert float(content_loss(synthetic, synthetic.repeat(3, 1, 1, 1))) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="'cosine' or 'mse'"):
        content_loss(synthetic, members, "l1")


# ---------------------------------------------------------------------------------------------------------------
# Local style alignment


def alignment_setup(generator, count: int = 3, seed: int = 11):
    codes = member_codes(generator, count, seed)
    with torch.no_grad():
        reconstructions = ((generator.synthesis(codes) + 1) / 2).clamp(0, 1)
    return codes.mean(0, keepdim=True), reconstructions


def test_alignment_lowers_its_loss_from_the_centroid(generator, feature_taps):
    centroid, reconstructions = alignment_setup(generator)
    before = {name: p.detach().clone() for name, p in generator.named_parameters()}
    result = local_style_alignment(generator, centroid, reconstructions, feature_taps, num_steps=8,
                                   learning_rate=0.05, lr_rampup=0.0, content_weight=1.0, style_weight=1e-3,
                                   patch_grid=4, content_tap=-1, style_tap=0)
    assert result.ws.shape == centroid.shape and result.image.shape == (1, 3, 32, 32)
    assert len(result.history) == 8 and result.initial_loss == result.history[0][0]
    assert result.final_loss < 0.9 * result.initial_loss
    # The starting loss is the loss at the centroid, with both terms active.
    _, content, style = result.history[0]
    assert content > 0 and style > 0
    # Generator untouched: same parameters, no gradients accumulated; the centroid is not modified.
    for name, parameter in generator.named_parameters():
        assert torch.equal(parameter, before[name]) and parameter.grad is None
    assert not centroid.requires_grad


def test_alignment_is_deterministic_and_zero_steps_of_learning_rate_keep_the_centroid(generator, feature_taps):
    centroid, reconstructions = alignment_setup(generator, seed=12)
    options = dict(num_steps=3, content_weight=1.0, style_weight=1e-3, content_distance="mse", style_tap=1,
                   content_tap=2, patch_grid=2)
    first = local_style_alignment(generator, centroid, reconstructions, feature_taps, **options)
    second = local_style_alignment(generator, centroid, reconstructions, feature_taps, **options)
    assert torch.equal(first.ws, second.ws) and first.history == second.history
    frozen = local_style_alignment(generator, centroid, reconstructions, feature_taps,
                                   **{**options, "learning_rate": 0.0})
    assert torch.equal(frozen.ws, centroid) and frozen.final_loss == pytest.approx(frozen.initial_loss, rel=1e-6)


def test_alignment_validation(generator, feature_taps):
    centroid, reconstructions = alignment_setup(generator)
    with pytest.raises(ValueError, match=r"initial_ws: expected a float tensor \(1, L, D\)"):
        local_style_alignment(generator, centroid[0], reconstructions, feature_taps, num_steps=1)
    with pytest.raises(ValueError, match=r"values in \[0, 1\]"):
        local_style_alignment(generator, centroid, reconstructions * 3, feature_taps, num_steps=1)
    with pytest.raises(ValueError, match="tap index"):
        local_style_alignment(generator, centroid, reconstructions, feature_taps, num_steps=1, content_tap=3)
    with pytest.raises(ValueError, match="style_targets"):
        local_style_alignment(generator, centroid, reconstructions, feature_taps, num_steps=1,
                              style_targets=reconstructions[:2])
    with pytest.raises(ValueError, match="style_weight"):
        local_style_alignment(generator, centroid, reconstructions, feature_taps, num_steps=1, style_weight=-1.0)


def test_k_salsa_synthesize_end_to_end(generator, feature_taps):
    codes = member_codes(generator, 7, seed=21)
    result = k_salsa_synthesize(generator, codes, feature_taps, k=3, num_steps=2, content_weight=1.0,
                                style_weight=1e-3)
    np.testing.assert_array_equal(result.labels, same_size_clusters(codes, 3))
    assert result.aligned_ws.shape == (2, generator.num_ws, generator.w_dim)
    assert result.aligned_images.shape == result.centroid_images.shape == (2, 3, 32, 32)
    torch.testing.assert_close(result.centroid_ws, cluster_centroids(codes, result.labels))
    assert torch.equal(result.centroid_images, latent_centroid_images(generator, codes, result.labels))
    assert result.initial_losses.shape == result.final_losses.shape == (2,)
    # Style from other images (the real ones, in the authors' code) changes the style term, not the clusters.
    real = torch.rand(7, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with_real = k_salsa_synthesize(generator, codes, feature_taps, labels=result.labels, member_images=real,
                                   num_steps=2, content_weight=1.0, style_weight=1e-3)
    assert not np.allclose(with_real.initial_losses, result.initial_losses)
    with pytest.raises(ValueError, match="exactly one of k and labels"):
        k_salsa_synthesize(generator, codes, feature_taps)
    with pytest.raises(ValueError, match="member_images"):
        k_salsa_synthesize(generator, codes, feature_taps, k=3, member_images=torch.zeros(6, 3, 32, 32))
    # Patients as the unit: 7 images of 4 patients, k = 2 -> 2 clusters of 2 patients each.
    patients = np.array(["a", "a", "b", "c", "c", "d", "d"])
    grouped = k_salsa_synthesize(generator, codes, feature_taps, k=2, groups=patients, num_steps=1)
    np.testing.assert_array_equal(grouped.labels, same_size_clusters(codes, 2, groups=patients))
    assert grouped.aligned_images.shape[0] == 2
    with pytest.raises(ValueError, match="groups"):
        k_salsa_synthesize(generator, codes, feature_taps, labels=result.labels, groups=patients)


# ---------------------------------------------------------------------------------------------------------------
# Membership-inference glue


def test_cluster_membership_matrix():
    pool = np.array([0, 1, 0, 2, 1, 2, 3])
    membership = cluster_membership(pool, [2, 0])
    assert membership.tolist() == [[0, 0, 0, 1, 0, 1, 0], [1, 0, 1, 0, 0, 0, 0]]
    with pytest.raises(ValueError, match="absent"):
        cluster_membership(pool, [5])


def test_cluster_membership_precision_on_planted_scores():
    rng = np.random.default_rng(0)
    pool = np.repeat(np.arange(6), [3, 3, 4, 3, 5, 3])  # clusters of k = 3 to 5 members (21 candidates)
    queries = np.array([1, 2, 4])
    truth = cluster_membership(pool, queries)
    noise = rng.uniform(0, 0.1, truth.shape)
    perfect = cluster_membership_top_k_precision(truth + noise, pool, queries)
    assert perfect["precision_at_k"] == 1.0 and perfect["k"].tolist() == [3, 4, 5]
    assert perfect["chance"] == pytest.approx(np.mean([3 / 21, 4 / 21, 5 / 21]))
    inverted = cluster_membership_top_k_precision(-truth + noise, pool, queries)
    assert inverted["precision_at_k"] == 0.0
    # One planted miss in row 1 (cluster 2, 4 members): the top-4 then holds 3 members.
    scores = truth + noise
    member_columns = np.flatnonzero(truth[1])
    scores[1, member_columns[0]] = -1.0
    partial = cluster_membership_top_k_precision(scores, pool, queries)
    assert partial["per_cluster"].tolist() == [1.0, 0.75, 1.0]
    # Fixed k: equals the existing top-k precision on the same membership matrix.
    fixed = cluster_membership_top_k_precision(scores, pool, queries, k=3)
    assert fixed["precision_at_k"] == membership_top_k_precision(scores, truth, 3)["precision_at_k"]
    # Random scores: about chance on many queries.
    many = np.repeat(np.arange(200), 3)
    random = cluster_membership_top_k_precision(rng.uniform(size=(200, 600)), many, np.arange(200))
    assert random["chance"] == pytest.approx(3 / 600)
    assert random["precision_at_k"] < 0.03
    with pytest.raises(ValueError, match=r"scores: expected shape \(S, R\)"):
        cluster_membership_top_k_precision(scores[:, :-1], pool, queries)
