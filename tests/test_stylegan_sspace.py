"""S-space API: exact round trip, layout indexing, flattening, single-channel edits, statistics."""

from __future__ import annotations

import pytest
import torch

from anonpaper.models.stylegan import (StyleGenerator, StyleLayout, codes_statistics, concatenate_codes, get_config,
                                       style_statistics)


TINY = ["sg2-tiny", "sg3t-tiny"]


@pytest.fixture(scope="module", params=TINY)
def generator(request):
    G = StyleGenerator(get_config(request.param), seed=0)
    with torch.no_grad():  # give SG2 noise a non-zero strength so noise paths are exercised too
        for layer in G.synthesis_network.layers.values():
            if hasattr(layer, "noise_strength"):
                layer.noise_strength.fill_(0.3)
    return G


@pytest.mark.unit
def test_round_trip_is_exact(generator):
    ws = generator.mapping(generator.sample_latents(3, seed=1))
    # W+ (distinct rows) as well as W.
    ws_plus = ws + 0.1 * torch.randn(ws.shape, generator=torch.Generator().manual_seed(2))
    for latents in (ws, ws_plus):
        direct = generator.synthesis(latents)
        via_styles = generator.synthesis_from_styles(generator.styles(latents))
        assert torch.equal(direct, via_styles)
        codes = generator.styles(latents)
        assert torch.equal(generator.synthesis_from_styles(codes.with_flat(codes.flatten())), direct)


@pytest.mark.unit
def test_layout_index_and_locate_are_inverse(generator):
    layout = generator.style_layout
    assert layout.total_channels == sum(layout.sizes)
    for k in range(layout.total_channels):
        name, channel = layout.locate(k)
        assert layout.index(name, channel) == k
    codes = generator.styles(generator.mapping(generator.sample_latents(2, seed=0)))
    flat = codes.flatten()
    for name in layout.names:
        assert torch.equal(flat[:, layout.layer_slice(name)], codes[name])
    with pytest.raises(ValueError, match="out of range"):
        layout.locate(layout.total_channels)
    with pytest.raises(ValueError, match="unknown style layer"):
        layout.index("nope", 0)
    with pytest.raises(ValueError, match="flat styles must be"):
        codes.with_flat(flat[:, :-1])


@pytest.mark.unit
def test_layout_rejects_duplicates():
    with pytest.raises(ValueError, match="unique"):
        StyleLayout(("a", "a"), (1, 2))


@pytest.mark.unit
def test_one_channel_edit_acts_only_through_its_layer(generator):
    codes = generator.styles(generator.mapping(generator.sample_latents(2, seed=4)))
    image, features = generator.synthesis_from_styles(codes, return_features=True)
    names = [name for name, _ in features]
    layout = generator.style_layout
    edited_layers = [layout.names[len(layout.names) // 2], layout.names[-1]]
    if generator.config.architecture == "sg2":
        edited_layers.append("b8_torgb")
    for layer in edited_layers:
        channel = layout.sizes[layout.names.index(layer)] // 2
        k = layout.index(layer, channel)
        original = codes.flatten().clone()
        flat = codes.flatten().clone()
        flat[:, k] += 1.0  # one-hot change of one S channel
        edited = codes.with_flat(flat)
        assert torch.equal(codes.flatten(), original)  # the original is untouched
        assert torch.equal((edited.flatten() != original).nonzero()[:, 1].unique(), torch.tensor([k]))
        new_image, new_features = generator.synthesis_from_styles(edited, return_features=True)
        assert not torch.equal(new_image, image)
        position = names.index(layer)
        for (name, before), (_, after) in zip(features, new_features):
            index = names.index(name)
            if index < position or (name.endswith("conv0") or name.endswith("conv1")) and layer.endswith("torgb"):
                # Everything computed before the layer, and (SG2) every conv feature when a ToRGB is edited.
                assert torch.equal(before, after), f"{name} changed after editing {layer}"
            elif index == position:
                assert not torch.equal(before, after), f"{layer} output did not change"


@pytest.mark.unit
def test_with_channel_and_concatenate(generator):
    codes = generator.styles(generator.mapping(generator.sample_latents(2, seed=5)))
    layer = generator.style_layout.names[0]
    edited = codes.with_channel(layer, 1, 7.0)
    assert torch.all(edited[layer][:, 1] == 7.0) and not torch.any(codes[layer][:, 1] == 7.0)
    both = concatenate_codes([codes, edited])
    assert both.batch_size == 4 and torch.equal(both.select(slice(2, 4)).flatten(), edited.flatten())
    if generator.config.architecture == "sg3t":
        assert both.input_transform.shape == (4, 4)


@pytest.mark.unit
def test_style_statistics_match_direct_computation(generator):
    stats = style_statistics(generator, num_samples=40, batch_size=16, seed=11)
    layout = generator.style_layout
    assert stats["mean"].shape == (layout.total_channels,) and stats["num_samples"] == 40
    z = torch.randn(40, generator.z_dim, generator=torch.Generator().manual_seed(11))
    # Same draws as the function (three batches of 16, 16, 8 from one generator are the first 40 normals).
    flat = generator.styles(generator.mapping(z)).flatten().double()
    torch.testing.assert_close(stats["mean"], flat.mean(0).float(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(stats["std"], flat.std(0).float(), rtol=1e-4, atol=1e-5)
    assert stats["mean_codes"].layout == layout
    # Statistics of given codes (e.g. projected real images) agree with the sampled ones for the same codes.
    from_codes = codes_statistics(generator.styles(generator.mapping(z)))
    torch.testing.assert_close(from_codes["mean"], stats["mean"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(from_codes["std"], stats["std"], rtol=1e-4, atol=1e-5)
    # Edit of paper 1 (Eq. 11) with alpha = 1 puts the channel exactly at its mean.
    codes = generator.styles(generator.mapping(generator.sample_latents(1, seed=3)))
    name, channel = layout.locate(5)
    edited = codes.with_channel(name, channel, stats["mean_codes"][name][:, channel])
    assert torch.equal(edited.flatten()[0, 5], stats["mean"][5])


@pytest.mark.unit
@pytest.mark.parametrize("name", TINY)
def test_forward_mode_jacobian_columns_match_finite_differences(name):
    """Paper 1 scores channels with d image / d s_k; vmap(jvp) over one-hot tangents must give those columns."""
    from torch.func import jvp, vmap

    G = StyleGenerator(get_config(name), seed=0).double().requires_grad_(False)
    codes = G.styles(G.mapping(G.sample_latents(1, seed=0).double())).detach()
    flat = codes.flatten()

    def image_of(vector):
        return G.synthesis_from_styles(codes.with_flat(vector))

    channels = torch.tensor([0, 7, flat.shape[1] // 2, flat.shape[1] - 1])
    tangents = torch.zeros(len(channels), 1, flat.shape[1], dtype=torch.float64)
    tangents[torch.arange(len(channels)), 0, channels] = 1.0
    columns = vmap(lambda tangent: jvp(image_of, (flat,), (tangent,))[1])(tangents)
    step = 1e-5
    for i in range(len(channels)):
        finite = (image_of(flat + step * tangents[i]) - image_of(flat - step * tangents[i])) / (2 * step)
        torch.testing.assert_close(columns[i], finite, rtol=1e-5, atol=1e-7)
        assert finite.abs().max() > 0
