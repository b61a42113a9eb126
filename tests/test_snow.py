"""Snow and VS-Snow (anonpaper.methods.snow): invariants, references and input validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from anonpaper.methods.snow import (VSSnow, Snow, channel_mean, effective_fraction, snow, snow_mask, vs_snow,
                                    vs_snow_mask)

pytestmark = pytest.mark.unit

MEANS = [200.4, 150.6, 120.0]


def low_images(batch=4, channels=3, height=32, width=48, seed=0):
    """uint8 images with values 0..99, so no value equals a Snow constant (>= 120) and 'replaced' == 'changed'."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 100, (batch, channels, height, width), dtype=torch.uint8, generator=generator)


def line_vessels(batch=3, height=40, width=40):
    """bool (B, H, W) vessel masks: a horizontal 2-px band, a vertical 1-px line and a diagonal per image."""
    masks = torch.zeros(batch, height, width, dtype=torch.bool)
    for index in range(batch):
        masks[index, 10 + index:12 + index, 3:width - 3] = True
        masks[index, 5:height - 5, 20 + index] = True
        for step in range(min(height, width) - 10):
            masks[index, 5 + step, 5 + step] = True
    return masks


def within_binomial(count: int, trials: int, probability: float, sigmas: float = 5.0) -> bool:
    spread = math.sqrt(trials * probability * (1 - probability))
    return abs(count - trials * probability) <= sigmas * spread + 1


# ---------------------------------------------------------------------------------------------------------------
# Snow
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.9])
def test_snow_changes_about_p_and_leaves_rest_identical(p):
    images = low_images()
    original = images.clone()
    output, mask = snow(images, p, MEANS, seed=3, return_mask=True)
    changed = output != images
    # Every change is a replacement and vice versa (inputs never equal the constants).
    assert torch.equal(changed, mask)
    assert within_binomial(int(changed.sum()), images.numel(), effective_fraction(p))
    assert torch.equal(output[~mask], images[~mask])
    constants = torch.tensor([round(value) for value in MEANS], dtype=torch.uint8)
    for channel in range(3):
        assert bool((output[:, channel][mask[:, channel]] == constants[channel]).all())
    assert torch.equal(images, original)  # input untouched
    assert output.dtype == torch.uint8 and output.shape == images.shape


def test_snow_mask_is_spatially_uniform():
    mask = snow_mask((8, 3, 64, 64), 0.3, seed=0)
    halves = [mask[..., :32, :], mask[..., 32:, :], mask[..., :, :32], mask[..., :, 32:]]
    for half in halves:
        assert within_binomial(int(half.sum()), half.numel(), effective_fraction(0.3))


def test_snow_per_channel_masks_are_independent():
    # The paper draws a subset per RGB channel: all three channels of a location are replaced with p^3.
    p = 0.5
    mask = snow_mask((16, 3, 64, 64), p, seed=1)
    locations = 16 * 64 * 64
    all_three = int(mask.all(dim=1).sum())
    assert within_binomial(all_three, locations, effective_fraction(p) ** 3)
    assert not torch.equal(mask[:, 0], mask[:, 1])


def test_snow_per_location_replaces_all_channels_together():
    images = low_images()
    output, mask = snow(images, 0.4, MEANS, mask_mode="per_location", seed=2, return_mask=True)
    assert mask.shape == (4, 1, 32, 48)
    changed = output != images
    assert torch.equal(changed, mask.expand_as(changed))
    assert within_binomial(int(mask.sum()), mask.numel(), effective_fraction(0.4))


@pytest.mark.parametrize("mask_mode", ["per_channel", "per_location"])
def test_snow_exact_sampling_replaces_exactly_round_p_n(mask_mode):
    images = low_images(batch=3, height=17, width=23)
    p = 0.37
    output, mask = snow(images, p, MEANS, sampling="exact", mask_mode=mask_mode, seed=5, return_mask=True)
    expected = round(p * 17 * 23)
    assert mask.flatten(2).sum(dim=2).eq(expected).all()
    assert torch.equal((output != images), mask.expand_as(images))


def test_snow_same_seed_same_output_and_different_seed_differs():
    images = low_images()
    first = snow(images, 0.3, MEANS, seed=11)
    assert torch.equal(first, snow(images, 0.3, MEANS, seed=11))
    assert not torch.equal(first, snow(images, 0.3, MEANS, seed=12))
    from_torch = [snow(images, 0.3, MEANS, generator=torch.Generator().manual_seed(4)) for _ in range(2)]
    assert torch.equal(*from_torch)
    from_numpy = [snow(images, 0.3, MEANS, generator=np.random.default_rng(4)) for _ in range(2)]
    assert torch.equal(*from_numpy)


@pytest.mark.parametrize("sampling", ["bernoulli", "exact"])
def test_p_zero_is_identity_and_p_one_replaces_everything(sampling):
    images = low_images()
    identity = snow(images, 0.0, MEANS, sampling=sampling, seed=0)
    assert torch.equal(identity, images) and identity.data_ptr() != images.data_ptr()
    full = snow(images, 1.0, MEANS, sampling=sampling, seed=0)
    expected = torch.tensor([200, 151, 120], dtype=torch.uint8).view(1, 3, 1, 1).expand_as(images)
    assert torch.equal(full, expected)


def test_snow_float_images_and_any_size():
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(2, 1, 13, 29, generator=generator, dtype=torch.float64)
    output, mask = snow(images, 0.5, [2.0], seed=0, return_mask=True)
    assert output.dtype == torch.float64 and output.shape == (2, 1, 13, 29)
    assert bool((output[mask] == 2.0).all()) and torch.equal(output[~mask], images[~mask])


def test_snow_privacy_statement():
    method = Snow(0.3, (120.0, 60.0, 30.0))
    assert method.epsilon == 0.0 and method.delta == pytest.approx(0.7)
    assert method.location_delta == pytest.approx(1 - 0.3 ** 3)
    assert Snow(0.3, (1.0, 2.0, 3.0), mask_mode="per_location").location_delta == pytest.approx(0.7)
    images = low_images()
    assert torch.equal(method(images, seed=1), snow(images, 0.3, (120.0, 60.0, 30.0), seed=1))
    assert effective_fraction(0.3) == round(0.3 * 65536) / 65536
    assert effective_fraction(0.3, "exact", count=10) == 0.3


def test_channel_mean_is_pixel_weighted_over_images_of_any_size():
    generator = np.random.default_rng(0)
    small = generator.integers(0, 256, (10, 12, 3), dtype=np.uint8)
    large = generator.integers(0, 256, (30, 20, 3), dtype=np.uint8)
    expected = np.concatenate([small.reshape(-1, 3), large.reshape(-1, 3)]).astype(np.float64).mean(axis=0)
    observed = channel_mean([small, large], channels_last=True)
    assert observed.dtype == torch.float64
    np.testing.assert_allclose(observed.numpy(), expected, rtol=1e-12)
    batch = torch.from_numpy(np.stack([small, small])).permute(0, 3, 1, 2)
    np.testing.assert_allclose(channel_mean(batch).numpy(), small.reshape(-1, 3).mean(axis=0), rtol=1e-12)


@pytest.mark.parametrize("call, message", [
    (lambda x: snow(x[0], 0.3, MEANS, seed=0), "shape"),
    (lambda x: snow(x.to(torch.int32), 0.3, MEANS, seed=0), "dtype"),
    (lambda x: snow(x, 1.5, MEANS, seed=0), r"\[0, 1\]"),
    (lambda x: snow(x, 0.3, [1.0, 2.0], seed=0), "one value per channel"),
    (lambda x: snow(x, 0.3, [1.0, 2.0, 300.0], seed=0), "0, 255"),
    (lambda x: snow(x, 0.3, MEANS), "exactly one of seed"),
    (lambda x: snow(x, 0.3, MEANS, seed=1, generator=torch.Generator()), "exactly one of seed"),
    (lambda x: snow(x, 0.3, MEANS, seed=-1), "non-negative"),
    (lambda x: snow(x, 0.3, MEANS, seed=0, mask_mode="per_pixel"), "mask_mode"),
    (lambda x: snow(x, 0.3, MEANS, seed=0, sampling="poisson"), "sampling"),
    (lambda x: snow(x.float() * float("nan"), 0.3, MEANS, seed=0), "NaN"),
])
def test_snow_rejects_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call(low_images())


# ---------------------------------------------------------------------------------------------------------------
# VS-Snow
# ---------------------------------------------------------------------------------------------------------------
def masked_convolution_reference(images, vessels, selected, window_size):
    """sum(window * keep * I) / sum(window * keep) by dense conv2d (float64), NaN where no kept neighbour."""
    keep = (vessels & ~selected).unsqueeze(1).to(torch.float64)
    kernel = torch.ones(1, 1, window_size, window_size, dtype=torch.float64)
    pad = window_size // 2
    counts = F.conv2d(keep, kernel, padding=pad)
    channels = images.shape[1]
    sums = F.conv2d(images.to(torch.float64) * keep, kernel.expand(channels, 1, -1, -1).contiguous(), padding=pad,
                    groups=channels)
    return torch.where(counts > 0, sums / counts.clamp(min=1), torch.full_like(sums, float("nan")))


def vessel_test_batch():
    vessels = line_vessels()
    images = low_images(batch=3, height=40, width=40, seed=7)
    return images, vessels


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_vs_snow_changes_only_vessel_pixels(p):
    images, vessels = vessel_test_batch()
    original = images.clone()
    output, selected = vs_snow(images, vessels, p, seed=0, return_mask=True)
    changed = (output != images).any(dim=1)
    assert not bool((changed & ~vessels).any())
    assert not bool((selected[:, 0] & ~vessels).any())
    assert not bool((changed & ~selected[:, 0]).any())
    assert torch.equal(output.permute(0, 2, 3, 1)[~selected[:, 0]], images.permute(0, 2, 3, 1)[~selected[:, 0]])
    assert torch.equal(images, original)


def test_vs_snow_selects_about_p_of_vessel_pixels():
    vessels = line_vessels(batch=8, height=64, width=64)
    selected = vs_snow_mask(vessels, 0.3, seed=1)
    assert within_binomial(int(selected.sum()), int(vessels.sum()), effective_fraction(0.3))
    exact = vs_snow_mask(vessels, 0.3, sampling="exact", seed=1)
    expected = torch.round(vessels.flatten(1).sum(dim=1) * 0.3)
    assert torch.equal(exact.flatten(1).sum(dim=1).to(expected.dtype), expected)
    assert not bool((exact & ~vessels).any())


@pytest.mark.parametrize("window_size", [3, 5, 17])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.float64])
def test_vs_snow_matches_masked_convolution_reference(window_size, dtype):
    # window 17 makes uint8 take the general (unpacked) path: 17^2 * 255 >= 2^16.
    images, vessels = vessel_test_batch()
    images = images if dtype == torch.uint8 else images.to(dtype) / 7
    output, selected = vs_snow(images, vessels, 0.4, window_size=window_size, seed=2, return_mask=True)
    reference = masked_convolution_reference(images, vessels, selected[:, 0], window_size)
    where = selected[:, 0].unsqueeze(1).expand_as(images) & ~torch.isnan(reference)
    assert int(where.sum()) > 100
    expected = reference[where]
    if dtype == torch.uint8:
        expected = torch.round(expected).to(torch.uint8)
        assert torch.equal(output[where], expected)
    else:
        torch.testing.assert_close(output[where].to(torch.float64), expected, rtol=1e-5, atol=1e-6)


def test_vs_snow_uint8_fast_path_equals_rounded_float_path():
    images, vessels = vessel_test_batch()
    as_uint8 = vs_snow(images, vessels, 0.5, seed=9)
    as_float = vs_snow(images.to(torch.float64), vessels, 0.5, seed=9)
    assert torch.equal(as_uint8, torch.round(as_float).to(torch.uint8))


def test_vs_snow_fallback_to_image_vessel_mean_for_isolated_pixel():
    # One isolated vessel pixel far from a long line: when it is selected its 5x5 window has no kept vessel pixel,
    # so it takes the mean of the image's kept vessel pixels.
    images = low_images(batch=1, height=40, width=40, seed=3)
    vessels = torch.zeros(1, 40, 40, dtype=torch.bool)
    vessels[0, 5, 2:38] = True
    vessels[0, 30, 30] = True
    for seed in range(100):
        output, selected = vs_snow(images, vessels, 0.5, seed=seed, return_mask=True)
        if bool(selected[0, 0, 30, 30]):
            break
    else:
        pytest.fail("the isolated pixel was never selected")
    keep = vessels[0] & ~selected[0, 0]
    expected = torch.round(images[0].to(torch.float64)[:, keep].mean(dim=1)).to(torch.uint8)
    assert torch.equal(output[0, :, 30, 30], expected)


def test_vs_snow_fallbacks_when_all_vessel_pixels_are_replaced():
    images = low_images(batch=2, height=20, width=20, seed=4)
    vessels = torch.zeros(2, 20, 20, dtype=torch.bool)
    vessels[0, 8:10, :] = True  # image 0: no kept vessel pixel at p = 1 -> mean of unselected (non-vessel) pixels
    vessels[1] = True           # image 1: every pixel selected -> mean of the whole image
    output = vs_snow(images, vessels, 1.0, seed=0)
    non_vessel = images[0].to(torch.float64)[:, ~vessels[0]].mean(dim=1)
    assert torch.equal(output[0, :, 8], torch.round(non_vessel).to(torch.uint8).unsqueeze(1).expand(3, 20))
    whole = torch.round(images[1].to(torch.float64).mean(dim=(1, 2))).to(torch.uint8)
    assert torch.equal(output[1], whole.view(3, 1, 1).expand(3, 20, 20))
    assert torch.equal(output[0][:, ~vessels[0]], images[0][:, ~vessels[0]])


@pytest.mark.parametrize("sampling", ["bernoulli", "exact"])
def test_vs_snow_seed_determinism_and_identity(sampling):
    images, vessels = vessel_test_batch()
    first = vs_snow(images, vessels, 0.3, sampling=sampling, seed=5)
    assert torch.equal(first, vs_snow(images, vessels, 0.3, sampling=sampling, seed=5))
    assert not torch.equal(first, vs_snow(images, vessels, 0.3, sampling=sampling, seed=6))
    # (B, 1, H, W) and 0/1 integer masks are the same masks.
    assert torch.equal(first, vs_snow(images, vessels.unsqueeze(1).to(torch.uint8), 0.3, sampling=sampling, seed=5))
    assert torch.equal(vs_snow(images, vessels, 0.0, sampling=sampling, seed=5), images)


def test_vs_snow_any_size_and_grayscale():
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (2, 1, 13, 29), dtype=torch.uint8, generator=generator)
    vessels = torch.rand(2, 13, 29, generator=generator) < 0.4
    output, selected = vs_snow(images, vessels, 0.5, window_size=3, seed=1, return_mask=True)
    reference = masked_convolution_reference(images, vessels, selected[:, 0], 3)
    where = selected & ~torch.isnan(reference)
    assert torch.equal(output[where], torch.round(reference[where]).to(torch.uint8))


def test_layouts_and_empty_batches():
    images, vessels = vessel_test_batch()
    expected = vs_snow(images, vessels, 0.5, seed=1)
    channels_last = images.contiguous(memory_format=torch.channels_last)
    assert torch.equal(vs_snow(channels_last, vessels, 0.5, seed=1), expected)
    permuted = images.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)  # a non-contiguous (B, C, H, W) view
    assert torch.equal(vs_snow(permuted, vessels, 0.5, seed=1), expected)
    assert torch.equal(snow(permuted, 0.5, MEANS, seed=1), snow(images, 0.5, MEANS, seed=1))
    empty = images[:0]
    assert vs_snow(empty, vessels[:0], 0.5, seed=1).shape == (0, 3, 40, 40)
    assert snow(empty, 0.5, MEANS, seed=1, sampling="exact").shape == (0, 3, 40, 40)


def test_replaced_values_never_influence_the_output():
    # The DP argument: when a value is replaced, the whole output is independent of it (same seed = same selection).
    images, vessels = vessel_test_batch()
    output, selected = vs_snow(images, vessels, 0.5, seed=4, return_mask=True)
    altered = images.clone()
    altered[:, :, selected[:, 0].any(dim=0)] = 255  # overwrite every selected location of every image
    altered = torch.where(selected, altered, images)
    assert not torch.equal(altered, images)
    assert torch.equal(vs_snow(altered, vessels, 0.5, seed=4), output)
    snowed, mask = snow(images, 0.5, MEANS, seed=4, return_mask=True)
    assert torch.equal(snow(torch.where(mask, torch.full_like(images, 7), images), 0.5, MEANS, seed=4), snowed)


def test_vs_snow_privacy_statement():
    method = VSSnow(0.3)
    assert method.epsilon == 0.0 and method.delta == pytest.approx(0.7) and method.window_size == 5
    images, vessels = vessel_test_batch()
    assert torch.equal(method(images, vessels, seed=3), vs_snow(images, vessels, 0.3, seed=3))


@pytest.mark.parametrize("call, message", [
    (lambda x, v: vs_snow(x, v[:, :20], 0.3, seed=0), "vessel_masks must have shape"),
    (lambda x, v: vs_snow(x, v.to(torch.uint8) * 2, 0.3, seed=0), "only 0 and 1"),
    (lambda x, v: vs_snow(x, v, 0.3, window_size=4, seed=0), "odd integer"),
    (lambda x, v: vs_snow(x, v, -0.1, seed=0), r"\[0, 1\]"),
    (lambda x, v: vs_snow(x, v, 0.3), "exactly one of seed"),
    (lambda x, v: vs_snow(x, v.numpy(), 0.3, seed=0), "torch.Tensor"),
])
def test_vs_snow_rejects_bad_input(call, message):
    images, vessels = vessel_test_batch()
    with pytest.raises(ValueError, match=message):
        call(images, vessels)
