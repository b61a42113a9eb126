"""StyleGAN2 / StyleGAN3-T building blocks and networks: shapes, S dimensions, references, determinism, gradients."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.signal
import torch
import torch.nn.functional as F

from anonpaper.models.stylegan import ResidualDiscriminator, StyleGenerator, get_config, list_configs
from anonpaper.models.stylegan.layers import minibatch_std, modulated_conv2d, upfirdn2d, upsample2d
from anonpaper.models.stylegan.synthesis_sg3 import sg3_layer_schedule


TINY = ["sg2-tiny", "sg3t-tiny"]


def _reference_upfirdn2d(x: np.ndarray, taps: np.ndarray, up: int, down: int, pad: tuple[int, int], gain: float):
    """Literal definition: zero insertion, pad, full 2-D convolution with the outer-product filter, decimate."""
    n, c, h, w = x.shape
    upsampled = np.zeros((n, c, h * up, w * up))
    upsampled[:, :, ::up, ::up] = x
    lo, hi = pad
    padded = np.pad(upsampled, ((0, 0), (0, 0), (max(lo, 0), max(hi, 0)), (max(lo, 0), max(hi, 0))))
    if lo < 0 or hi < 0:
        end = padded.shape[2] - max(-hi, 0)
        padded = padded[:, :, max(-lo, 0):end, max(-lo, 0):end]
    kernel = np.outer(taps, taps) * gain
    out = np.stack([np.stack([scipy.signal.convolve2d(padded[i, j], kernel, mode="valid") for j in range(c)])
                    for i in range(n)])
    return out[:, :, ::down, ::down]


@pytest.mark.unit
@pytest.mark.parametrize("up,down,pad,taps", [(1, 1, (1, 2), [1, 3, 3, 1]), (2, 1, (2, 1), [1, 3, 3, 1]),
                                               (1, 2, (1, 1), [1, 2, 1]), (2, 2, (3, -1), [0.1, 0.5, 0.2, 0.7]),
                                               (4, 2, (5, 4), [1, 4, 6, 4, 1, 2, 3, 1]), (2, 1, (6, 5), [1, 3, 3, 1]),
                                               (2, 2, (-2, -3), [1, 2, 3, 4, 5, 6])])
@pytest.mark.parametrize("implementation", ["reference", "fast"])
def test_upfirdn2d_matches_literal_definition(up, down, pad, taps, implementation):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 7, 7))
    taps = np.asarray(taps, dtype=np.float64)
    expected = _reference_upfirdn2d(x, taps, up, down, pad, gain=up * up)
    got = upfirdn2d(torch.from_numpy(x).float(), torch.from_numpy(taps).float(), up=up, down=down,
                    padding=(pad[0], pad[1], pad[0], pad[1]), gain=up * up, implementation=implementation)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.unit
def test_upsample2d_preserves_constant_images():
    x = torch.full((1, 2, 6, 6), 0.7)
    y = upsample2d(x, torch.tensor([1.0, 3, 3, 1]) / 8)
    assert y.shape == (1, 2, 12, 12)
    # Interior pixels (away from the zero padding) keep the value: the filter has unit DC gain after upsampling.
    torch.testing.assert_close(y[:, :, 2:-2, 2:-2], torch.full_like(y[:, :, 2:-2, 2:-2], 0.7))


@pytest.mark.unit
@pytest.mark.parametrize("demodulate", [True, False])
def test_modulated_conv2d_matches_per_sample_weights(demodulate):
    """Reference: StyleGAN2 Eq. 1-3 with an explicit per-sample weight tensor and one conv per sample."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, 8, 8, generator=generator)
    weight = torch.randn(5, 4, 3, 3, generator=generator)
    styles = torch.randn(3, 4, generator=generator)
    got = modulated_conv2d(x, weight, styles, demodulate=demodulate, padding=1)
    for i in range(3):
        w = weight * styles[i][None, :, None, None]
        if demodulate:
            w = w / (w.square().sum(dim=[1, 2, 3], keepdim=True) + 1e-8).sqrt()
        torch.testing.assert_close(got[i:i + 1], F.conv2d(x[i:i + 1], w, padding=1), rtol=1e-4, atol=1e-5)


@pytest.mark.unit
def test_minibatch_std_matches_formula():
    x = torch.randn(8, 4, 3, 3, generator=torch.Generator().manual_seed(1))
    y = minibatch_std(x, group_size=4, num_channels=1)
    assert y.shape == (8, 5, 3, 3)
    torch.testing.assert_close(y[:, :4], x)
    groups = x.reshape(4, 2, 4, 3, 3)  # sample i belongs to group member i // 2, group i % 2
    std = (groups.var(dim=0, unbiased=False) + 1e-8).sqrt().mean(dim=[1, 2, 3])
    for i in range(8):
        torch.testing.assert_close(y[i, 4], torch.full((3, 3), float(std[i % 2])))


@pytest.mark.unit
def test_named_configs_exist_and_validate():
    names = list_configs()
    for required in ("sg2-tiny", "sg3t-tiny", "sg2-cpu64", "sg3t-cpu64", "sg2-paper256", "sg3t-paper256"):
        assert required in names
    with pytest.raises(ValueError, match="unknown StyleGAN config"):
        get_config("sg4")
    with pytest.raises(ValueError, match="resolution"):
        get_config("sg2-tiny", resolution=48)
    with pytest.raises(ValueError, match="image_channels"):
        get_config("sg2-tiny", image_channels=2)
    with pytest.raises(ValueError, match="unknown StyleGANConfig fields"):
        get_config("sg2-tiny", colour=True)


@pytest.mark.unit
@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("channels", [1, 3])
def test_generator_and_discriminator_shapes(name, channels):
    config = get_config(name, image_channels=channels)
    G, D = StyleGenerator(config, seed=0), ResidualDiscriminator(config, seed=0)
    z = G.sample_latents(3, seed=1)
    ws = G.mapping(z)
    assert ws.shape == (3, G.num_ws, config.w_dim)
    images = G.synthesis(ws)
    assert images.shape == (3, channels, 32, 32) and images.dtype == torch.float32
    assert torch.isfinite(images).all()
    codes = G.styles(ws)
    assert codes.flatten().shape == (3, G.style_layout.total_channels)
    assert D(images).shape == (3,)
    assert D.trunk(images).shape == (3, D.trunk_channels, 4, 4)
    with pytest.raises(ValueError, match="ws must have shape"):
        G.synthesis(ws[:, :-1])
    with pytest.raises(ValueError, match="discriminator expects"):
        D(images[:, :, :16, :16])


@pytest.mark.unit
def test_style_dimensions_per_config():
    # SG2: styles per block = conv0 in-channels + conv1 in-channels + ToRGB in-channels (4 px: conv1 + ToRGB).
    tiny2 = StyleGenerator(get_config("sg2-tiny"))
    widths = {4: 32, 8: 32, 16: 32, 32: 16}
    expected = widths[4] * 2 + sum(widths[r // 2] + 2 * widths[r] for r in (8, 16, 32))
    assert tiny2.style_layout.total_channels == expected
    assert tiny2.num_ws == 8 and tiny2.style_layout.names[:3] == ("b4_conv1", "b4_torgb", "b8_conv0")
    # SG3-T: layer i has the in-channels of layer i - 1 (layer 0: the input's), ToRGB the last layer's.
    tiny3 = StyleGenerator(get_config("sg3t-tiny"))
    channels = sg3_layer_schedule(tiny3.config)["channels"].astype(int)
    expected3 = channels[0] + sum(channels[i - 1] for i in range(1, len(channels)))
    assert tiny3.style_layout.total_channels == expected3
    assert tiny3.num_ws == tiny3.config.sg3_num_layers + 2
    assert tiny3.style_layout.names[-1] == "torgb"


@pytest.mark.unit
def test_paper_configs_have_published_style_dimensions():
    """Paper 1 (Zhao et al. 2023) and the official configs: S has 7,424 channels for SG2 (channel base 16384) and 6,175 for SG3-T at 256 px."""
    sg2 = StyleGenerator(get_config("sg2-paper256"), seed=0)
    assert sg2.style_layout.total_channels == 7424 and sg2.num_ws == 14
    sg3 = StyleGenerator(get_config("sg3t-paper256"), seed=0)
    assert sg3.style_layout.total_channels == 6175 and sg3.num_ws == 16
    schedule = sg3_layer_schedule(sg3.config)
    # Appendix F: sizes 36 px at the first layer (16 + 2 * 10 margin), critically sampled 256 px at the end.
    assert schedule["sizes"][0] == 36 and list(schedule["sizes"][-3:]) == [276, 256, 256]


@pytest.mark.unit
@pytest.mark.parametrize("name", TINY)
def test_determinism(name):
    config = get_config(name)
    a, b, c = StyleGenerator(config, seed=3), StyleGenerator(config, seed=3), StyleGenerator(config, seed=4)
    z = a.sample_latents(2, seed=5)
    assert torch.equal(a(z), b(z))
    assert not torch.equal(a(z), c(z))
    noise_a = a(z, noise_mode="random", noise_generator=torch.Generator().manual_seed(9))
    noise_b = a(z, noise_mode="random", noise_generator=torch.Generator().manual_seed(9))
    assert torch.equal(noise_a, noise_b)
    # Construction with a seed leaves the global generator untouched.
    state = torch.get_rng_state()
    StyleGenerator(config, seed=1)
    assert torch.equal(state, torch.get_rng_state())


@pytest.mark.unit
@pytest.mark.parametrize("name", TINY)
def test_gradients_reach_every_parameter(name):
    config = get_config(name)
    G, D = StyleGenerator(config, seed=0), ResidualDiscriminator(config, seed=0)
    z = G.sample_latents(4, seed=2)
    images = G(z, noise_mode="random", noise_generator=torch.Generator().manual_seed(0))
    (D(images).sum() + images.square().mean()).backward()
    for module in (G, D):
        for parameter_name, parameter in module.named_parameters():
            assert parameter.grad is not None, parameter_name
            assert torch.isfinite(parameter.grad).all(), parameter_name
            assert parameter.grad.abs().sum() > 0, f"zero gradient for {parameter_name}"


@pytest.mark.unit
def test_sg2_noise_changes_image_only_when_strength_nonzero():
    G = StyleGenerator(get_config("sg2-tiny"), seed=0)
    ws = G.mapping(G.sample_latents(1, seed=0))
    assert torch.equal(G.synthesis(ws, noise_mode="const"), G.synthesis(ws, noise_mode="none"))  # strength 0
    with torch.no_grad():
        for layer in G.synthesis_network.layers.values():
            if hasattr(layer, "noise_strength"):
                layer.noise_strength.fill_(0.5)
    assert not torch.equal(G.synthesis(ws, noise_mode="const"), G.synthesis(ws, noise_mode="none"))


@pytest.mark.unit
def test_sg3_input_translation_shifts_features():
    """The Fourier input is a continuous signal: translating by t shifts sampled features by t * sampling rate."""
    G = StyleGenerator(get_config("sg3t-tiny"), seed=0)
    layer = G.synthesis_network.input
    identity = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    pixels = 3
    shift = pixels / layer.sampling_rate
    shifted = torch.tensor([[1.0, 0.0, shift, 0.0]])
    a, b = layer.forward_from_transform(identity), layer.forward_from_transform(shifted)
    # A translation by +t moves content toward negative x in the official convention: b[x] = a[x - pixels].
    torch.testing.assert_close(b[..., pixels:], a[..., :-pixels], rtol=1e-4, atol=1e-4)


@pytest.mark.unit
def test_sg3_generator_is_translation_equivariant():
    """EQ-T (StyleGAN3 Sec. 4): translating the input by an integer number of output pixels shifts the image.

    PSNR is taken relative to the image's own range (2 * max |x|) over the overlap. Measured on sg3t-tiny: about
    52 dB for the correct shift direction vs about 22 dB for the opposite one (which shows the check can fail).
    """
    G = StyleGenerator(get_config("sg3t-tiny"), seed=0)
    ws = G.mapping(G.sample_latents(4, seed=1))
    pixels = 2
    with torch.no_grad():
        reference = G.synthesis(ws)
        translation = torch.eye(3)
        translation[0, 2] = -pixels / G.resolution
        G.synthesis_network.input.user_transform.copy_(torch.linalg.inv(translation))
        shifted = G.synthesis(ws)
        G.synthesis_network.input.user_transform.copy_(torch.eye(3))
    peak = 2 * float(reference.abs().max())

    def psnr(a, b):
        return 10 * np.log10(peak ** 2 / float((a - b).square().mean()))

    # Translating the coordinate frame by +t moves content by -t: shifted[x] = reference[x + pixels].
    assert psnr(shifted[..., :-pixels], reference[..., pixels:]) > 45
    assert psnr(shifted[..., pixels:], reference[..., :-pixels]) < 35


@pytest.mark.unit
@pytest.mark.parametrize("implementation", ["reference", "fast"])
def test_sg2_upsampling_conv_matches_nvidia_formulation_including_border(implementation):
    """Issue #20: NVIDIA's up-conv is a stride-2 transposed conv (2L + 1 samples) then the [1, 3, 3, 1] FIR with
    padding 1 and gain 4 (up = 2, 4 taps, 3x3 kernel). Every pixel, the border included, must match; the previous
    formulation (FIR to 2L samples, then a zero-padded 3x3 conv) differed on the outermost rows/columns."""
    config = get_config("sg2-tiny")
    G = StyleGenerator(config, seed=0, implementation=implementation)
    layer = G.synthesis_network.layers["b8_conv0"]
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, layer.in_channels, 4, 4, generator=generator, dtype=torch.float64)
    style = torch.rand(2, layer.in_channels, generator=generator, dtype=torch.float64) + 0.5
    layer = layer.double()
    got = layer.forward_from_style(x, style, noise_mode="none")
    weight = (layer.weight * layer.weight_gain).detach()
    # Official: transposed conv (weight (in, out, k, k)) of the modulated input; it convolves where our layer
    # correlates, so the official kernel is the flipped one.
    transposed = F.conv_transpose2d(x * style[:, :, None, None], weight.flip([2, 3]).transpose(0, 1), stride=2)
    assert transposed.shape[-1] == 2 * 4 + 1
    official = _reference_upfirdn2d(transposed.numpy(), np.array([1, 3, 3, 1]) / 8.0, 1, 1, (1, 1), gain=4)
    demodulation = ((weight[None] * style[:, None, :, None, None]).square().sum(dim=[2, 3, 4]) + 1e-8).rsqrt()
    expected = F.leaky_relu(torch.from_numpy(official) * demodulation[:, :, None, None], 0.2) * np.sqrt(2)
    assert got.shape == expected.shape == (2, layer.out_channels, 8, 8)
    torch.testing.assert_close(got.detach(), expected, rtol=1e-9, atol=1e-12)
    # The border is where the old formulation differed: check it carries signal from the filter tails.
    assert expected[..., 0, :].abs().max() > 0 and expected[..., :, -1].abs().max() > 0
