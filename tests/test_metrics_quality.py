"""Image-quality metrics against scikit-image, piq, numpy and closed forms."""

import numpy as np
import pytest
import torch
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

import piq
from anonpaper.metrics import (
    PairedImageMetric,
    domain_lpips,
    feature_tap_distance,
    images_from_uint8,
    iw_ssim,
    load_lpips,
    lpips_distance,
    mse,
    psnr,
    ssim,
)

pytestmark = pytest.mark.unit


def _pair(channels=3, size=32, noise=0.1, seed=0, batch=2):
    generator = torch.Generator().manual_seed(seed)
    first = torch.rand(batch, channels, size, size, generator=generator)
    second = (first + noise * torch.randn(first.shape, generator=generator)).clamp(0, 1)
    return first, second


@pytest.mark.parametrize("channels", [1, 3])
def test_ssim_matches_scikit_image(channels):
    first, second = _pair(channels, size=37)
    exact = ssim(first.double(), second.double(), reduction="none")
    fast = ssim(first, second, reduction="none")
    assert exact.dtype == torch.float64 and fast.dtype == torch.float32
    for index in range(first.shape[0]):
        reference = structural_similarity(
            first[index].double().numpy(), second[index].double().numpy(), data_range=1.0, gaussian_weights=True,
            sigma=1.5, use_sample_covariance=False, channel_axis=0,
        )
        assert abs(float(exact[index]) - reference) < 1e-12
        assert abs(float(fast[index]) - reference) < 1e-5


def test_psnr_and_mse_match_references():
    first, second = _pair(3, size=24)
    ours = psnr(first, second, reduction="none")
    errors = mse(first, second, reduction="none")
    for index in range(first.shape[0]):
        a, b = first[index].double().numpy(), second[index].double().numpy()
        assert abs(float(ours[index]) - peak_signal_noise_ratio(a, b, data_range=1.0)) < 1e-4
        assert abs(float(errors[index]) - np.mean((a - b) ** 2)) < 1e-7
    assert torch.isclose(psnr(first, second), ours.mean())


def test_identical_inputs_give_perfect_scores():
    first, _ = _pair(3, size=48, batch=1)
    assert float(mse(first, first)) == 0.0
    assert float(psnr(first, first)) == float("inf")
    assert abs(float(ssim(first, first)) - 1.0) < 1e-6
    grey = first[:, :1]
    assert abs(float(iw_ssim(grey, grey, scales=3)) - 1.0) < 1e-6


def test_metrics_are_symmetric_and_monotone_in_noise():
    first, second = _pair(1, size=48)
    for metric in (mse, psnr, ssim):
        assert torch.allclose(metric(first, second), metric(second, first), atol=1e-6)
    assert abs(float(iw_ssim(first, second, scales=3)) - float(iw_ssim(second, first, scales=3))) < 1e-4
    _, noisier = _pair(1, size=48, noise=0.3)
    assert float(ssim(first, noisier)) < float(ssim(first, second))
    assert float(iw_ssim(first, noisier, scales=3)) < float(iw_ssim(first, second, scales=3))


def test_iw_ssim_matches_piq():
    first, second = _pair(1, size=161, batch=1)
    reference = piq.information_weighted_ssim(first.double(), second.double(), data_range=1.0)
    assert abs(float(iw_ssim(first.double(), second.double())) - float(reference)) < 1e-10
    assert abs(float(iw_ssim(first, second)) - float(reference)) < 1e-3  # float32 path
    small_first, small_second = _pair(3, size=48, batch=1)
    weights = torch.tensor([0.0448, 0.2856, 0.3001])
    reference = piq.information_weighted_ssim(small_first, small_second, scale_weights=weights)
    assert abs(float(iw_ssim(small_first, small_second, scales=3)) - float(reference)) < 1e-6


def test_iw_ssim_rejects_small_and_flat_images():
    first, second = _pair(1, size=64, batch=1)
    with pytest.raises(ValueError, match="161"):
        iw_ssim(first, second)
    flat = torch.full((1, 1, 48, 48), 0.5)
    with pytest.raises(ValueError, match="singular"):
        iw_ssim(flat, flat, scales=3)


@pytest.mark.parametrize(
    "first, second, pattern",
    [
        (torch.rand(2, 3, 16), torch.rand(2, 3, 16), "4 dimensions"),
        (torch.rand(1, 1, 16, 16) * 2, torch.rand(1, 1, 16, 16), r"\[0, 1\]"),
        (torch.randint(0, 2, (1, 1, 16, 16)), torch.rand(1, 1, 16, 16), "floating dtype"),
        (np.zeros((1, 16, 16), np.uint8), torch.rand(1, 1, 16, 16), "images_from_uint8"),
        (torch.rand(1, 1, 16, 16), torch.rand(1, 1, 16, 17), "identical shapes"),
        (torch.full((1, 1, 16, 16), float("nan")), torch.rand(1, 1, 16, 16), "finite"),
    ],
)
def test_bad_inputs_raise_value_error(first, second, pattern):
    for metric in (mse, psnr, ssim):
        with pytest.raises(ValueError, match=pattern):
            metric(first, second)


def test_ssim_rejects_images_smaller_than_window():
    with pytest.raises(ValueError, match=">= 11"):
        ssim(torch.rand(1, 1, 8, 8), torch.rand(1, 1, 8, 8))


def test_images_from_uint8_conversion():
    array = np.arange(2 * 3 * 4 * 3, dtype=np.uint8).reshape(2, 3, 4, 3)
    tensor = images_from_uint8(array)
    assert tensor.shape == (2, 3, 3, 4) and tensor.dtype == torch.float32
    assert float(tensor[1, 2, 0, 1]) == pytest.approx(array[1, 0, 1, 2] / 255)
    assert images_from_uint8(array[..., 0]).shape == (2, 1, 3, 4)
    with pytest.raises(ValueError, match="uint8"):
        images_from_uint8(array.astype(np.float32))
    with pytest.raises(ValueError, match=r"\(N, H, W\)"):
        images_from_uint8(np.zeros((2, 3, 4, 5), np.uint8))


class _TinyTaps(torch.nn.Module):
    """Eight-tap conv stack standing in for the segmentation U-Net's forward_features."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleList(
            [torch.nn.Conv2d(3 if i == 0 else 4, 4, 3, padding=1) for i in range(8)]
        )

    def forward(self, images):
        taps, current = [], images
        for index, layer in enumerate(self.layers):
            current = torch.relu(layer(current)) + 0.01
            if index in (1, 3):
                current = torch.nn.functional.avg_pool2d(current, 2)
            taps.append(current)
        return taps


def test_feature_tap_distance_closed_forms_and_properties():
    # Identity "network": channels (1, 0) vs (0, 1) are orthogonal everywhere -> distance exactly 1.
    first = torch.zeros(1, 2, 4, 4)
    first[:, 0] = 1
    second = torch.zeros(1, 2, 4, 4)
    second[:, 1] = 1
    assert float(feature_tap_distance(first, second, lambda x: [x])) == pytest.approx(1.0)
    # All-zero features (dead ReLU taps) on both sides count as identical, not as orthogonal.
    assert float(feature_tap_distance(first, second, lambda x: [x * 0])) == 0.0
    # Scaling the features does not change the cosine -> distance 0.
    assert float(feature_tap_distance(first, first * 0.5, lambda x: [x])) == pytest.approx(0.0, abs=1e-6)
    network = _TinyTaps().requires_grad_(False)
    a, b = _pair(3, size=16)
    assert float(feature_tap_distance(a, a, network, expected_layers=8)) == pytest.approx(0.0, abs=1e-6)
    distance = feature_tap_distance(a, b, network, reduction="none")
    assert distance.shape == (2,) and bool((distance > 0).all())
    assert torch.allclose(distance, feature_tap_distance(b, a, network, reduction="none"), atol=1e-6)
    with pytest.raises(ValueError, match="expected 7 taps, observed 8"):
        feature_tap_distance(a, b, network, expected_layers=7)
    assert torch.isclose(domain_lpips(a, b, [network, network]), 2 * distance.mean(), atol=1e-6)


def test_feature_tap_distance_with_the_first_images_taps_given_is_the_same():
    network = _TinyTaps().requires_grad_(False)
    a, b = _pair(3, size=16)
    given = feature_tap_distance(a, b, network, reduction="none", taps_first=network(a))
    assert torch.equal(given, feature_tap_distance(a, b, network, reduction="none"))
    assert not torch.equal(feature_tap_distance(a, b, network, reduction="none", taps_first=network(b)), given)


def test_feature_tap_distance_passes_gradients():
    network = _TinyTaps()
    a, b = _pair(3, size=16)
    b = b.clone().requires_grad_(True)
    feature_tap_distance(a, b, network).backward()
    assert b.grad is not None and float(b.grad.abs().sum()) > 0


def test_paired_image_metric_accumulates_like_one_batch():
    a, b = _pair(1, size=16, batch=4)
    accumulator = PairedImageMetric(ssim)
    accumulator.update(a[:3], b[:3])
    accumulator.update(a[3:], b[3:])
    assert accumulator.count == 4
    assert float(accumulator.compute()) == pytest.approx(float(ssim(a, b)), abs=1e-6)


def test_lpips_needs_local_weights(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="missing"):
        load_lpips(tmp_path / "absent.pth")
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    with pytest.raises(ValueError, match="alexnet-owt-7be5be79.pth"):
        load_lpips()


def test_lpips_from_local_backbone_file(tmp_path, monkeypatch):
    import torchvision

    torch.manual_seed(0)
    backbone = torchvision.models.alexnet(weights=None)
    path = tmp_path / "hub" / "checkpoints" / "alexnet-owt-7be5be79.pth"
    path.parent.mkdir(parents=True)
    torch.save({k: v for k, v in backbone.state_dict().items() if k.startswith("features")}, path)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    model = load_lpips(net="alex")  # found in $TORCH_HOME/hub/checkpoints, torchvision's cache layout
    assert torch.equal(model.net.slice1[0].weight, backbone.features[0].weight)
    a, b = _pair(3, size=64)
    assert float(lpips_distance(a, a, model)) == pytest.approx(0.0, abs=1e-6)
    value = lpips_distance(a, b, model, reduction="none")
    assert bool((value > 0).all())
    assert torch.allclose(value, lpips_distance(b, a, model, reduction="none"), atol=1e-6)
    torch.save({"features.0.weight": torch.zeros(1)}, tmp_path / "bad.pth")
    with pytest.raises(ValueError, match="features"):
        load_lpips(tmp_path / "bad.pth")


@pytest.mark.gpu
def test_quality_metrics_on_cuda_match_cpu():
    first, second = _pair(3, size=64)
    network = _TinyTaps().requires_grad_(False)
    for metric in (mse, psnr, ssim):
        assert torch.allclose(metric(first.cuda(), second.cuda()).cpu(), metric(first, second), atol=1e-5)
    assert torch.allclose(
        feature_tap_distance(first.cuda(), second.cuda(), network.cuda()).cpu(),
        feature_tap_distance(first, second, network.cpu()),
        atol=1e-4,
    )


def test_domain_lpips_with_package_unet_taps():
    """Integration with the models helper's U-Net (skipped if that module is not there yet)."""
    unet_module = pytest.importorskip("anonpaper.models.unet")
    if not hasattr(getattr(unet_module, "UNet", None), "forward_features"):
        pytest.skip("anonpaper.models.unet.UNet.forward_features not available")
    torch.manual_seed(0)
    network = unet_module.UNet(in_channels=3, out_channels=1, base_width=4, depth=4).eval()
    a, b = _pair(3, size=32)
    with torch.no_grad():
        assert float(domain_lpips(a, a, network.forward_features)) == pytest.approx(0.0, abs=1e-5)
        value = feature_tap_distance(a, b, network.forward_features, expected_layers=8, reduction="none")
    assert value.shape == (2,) and bool((value > 0).all())
