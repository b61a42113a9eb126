"""Tests of the U-Net (feature taps) and the FR-UNet-style network."""

import pytest
import torch

from anonpaper.models.frunet import FRUNet
from anonpaper.models.unet import UNet

pytestmark = pytest.mark.unit


def test_unet_output_shape_and_feature_taps():
    torch.manual_seed(0)
    model = UNet(3, 2, base_width=4, depth=4).eval()
    x = torch.rand(2, 3, 64, 48)
    assert model(x).shape == (2, 2, 64, 48)
    taps = model.forward_features(x)
    assert len(taps) == 8
    expected = [(4 * 2**i, 64 // 2**i, 48 // 2**i) for i in (1, 2, 3, 4)] + \
               [(4 * 2**i, 64 // 2**i, 48 // 2**i) for i in (3, 2, 1, 0)]
    assert [tuple(t.shape[1:]) for t in taps] == expected
    assert [t.shape[1] for t in taps] == model.feature_channels
    # The last decoder tap is what the head sees: logits are a 1x1 conv of it.
    assert torch.allclose(model.head(taps[-1]), model(x), atol=1e-6)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_unet_other_depths(depth):
    model = UNet(1, 1, base_width=2, depth=depth)
    x = torch.rand(1, 1, 2**depth * 3, 2**depth * 2)
    assert model(x).shape == (1, 1, 2**depth * 3, 2**depth * 2)
    assert len(model.forward_features(x)) == 2 * depth


def test_unet_gradients_reach_every_parameter():
    torch.manual_seed(0)
    model = UNet(1, 1, base_width=2, depth=2)
    model(torch.rand(2, 1, 16, 16)).square().mean().backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and torch.any(parameter.grad != 0), name


def test_unet_rejects_bad_input():
    model = UNet(3, 1, base_width=2, depth=4)
    with pytest.raises(ValueError, match="divisible by 16"):
        model(torch.rand(1, 3, 40, 32))
    with pytest.raises(ValueError, match=r"\(N, 3, H, W\)"):
        model(torch.rand(1, 1, 32, 32))
    with pytest.raises(ValueError, match="base_width"):
        UNet(3, 1, base_width=0)


def test_frunet_shapes_heads_and_gradients():
    torch.manual_seed(0)
    model = FRUNet(3, 1, widths=(4, 8, 16, 32), heads=5)
    assert model.columns == 7 and model.size_multiple == 8
    x = torch.rand(2, 3, 24, 32)
    y = model(x)
    assert y.shape == (2, 1, 24, 32)
    y.square().mean().backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None, name
    # Every resolution level is used: level 3 blocks exist only in column 3.
    assert "3_3" in model.blocks and "3_2" not in model.blocks and "3_4" not in model.blocks


def test_frunet_output_is_mean_of_heads():
    torch.manual_seed(0)
    model = FRUNet(1, 1, widths=(2, 4), heads=2, dropout=0.0).eval()
    x = torch.rand(1, 1, 8, 8)
    captured = []
    hooks = [head.register_forward_hook(lambda m, i, o: captured.append(o)) for head in model.output_heads]
    out = model(x)
    for hook in hooks:
        hook.remove()
    assert len(captured) == 2
    assert torch.allclose(out, (captured[0] + captured[1]) / 2, atol=1e-6)


def test_frunet_validation():
    with pytest.raises(ValueError, match="heads"):
        FRUNet(1, 1, widths=(4, 8, 16, 32), heads=7)
    with pytest.raises(ValueError, match="divisible by 8"):
        FRUNet(1, 1, widths=(2, 4, 8, 16))(torch.rand(1, 1, 12, 16))
