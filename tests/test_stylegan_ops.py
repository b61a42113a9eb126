"""StyleGAN ops: the polyphase "fast" path against the step-by-step reference (forward, gradients, second order,
forward-mode AD), the generator on each path, mixed precision, dispatch rules."""

from __future__ import annotations

import pytest
import torch

from anonpaper.models.stylegan import StyleGenerator, get_config, ops
from anonpaper.models.stylegan.ops import fast, reference
from anonpaper.models.stylegan.ops.saved_memory import SavedTensorMeter

pytestmark = pytest.mark.unit

TINY = ["sg2-tiny", "sg3t-tiny"]
# (up, down, (pad_lo, pad_hi), taps): SG2 up/down/blur, SG3 up x2 / x4 with Kaiser-length filters, crops.
RESAMPLING_CASES = [(2, 1, (2, 1), 4), (2, 1, (3, 2), 4), (1, 2, (1, 1), 4), (1, 1, (2, 1), 4), (2, 1, (9, 8), 12),
                    (4, 1, (2, -1), 24), (1, 2, (6, 5), 12), (2, 2, (3, -1), 4), (4, 2, (5, 4), 8), (3, 2, (2, 2), 5)]


@pytest.fixture(params=["matrices", "polyphase"])
def fast_path(request, monkeypatch):
    """Run a test on both fast formulations: dense resampling matrices (small images) and polyphase convs."""
    if request.param == "polyphase":
        monkeypatch.setattr(fast, "MATRIX_MAX_LENGTH", 0)
        monkeypatch.setattr(fast, "POLYPHASE_FILTERED_LRELU", True)
    return request.param


def _random(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.mark.parametrize("up,down,pad,taps", RESAMPLING_CASES)
def test_fast_upfirdn2d_matches_reference_with_gradients(up, down, pad, taps, fast_path):
    x = _random(2, 3, 13, 11).requires_grad_(True)
    f = torch.rand(taps, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    padding = (pad[0], pad[1], pad[1], pad[0])  # asymmetric on purpose: x and y paddings differ
    expected = reference.upfirdn2d(x, f, up, down, padding, gain=up * up)
    got = fast.upfirdn2d(x, f, up, down, padding, gain=up * up)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    cotangent = _random(*expected.shape, seed=2)
    (grad_expected,) = torch.autograd.grad(expected, x, cotangent)
    (grad_got,) = torch.autograd.grad(got, x, cotangent)
    torch.testing.assert_close(grad_got, grad_expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("up,down,pad,taps", [(2, 1, (2, 1), 4), (1, 2, (1, 1), 4), (4, 2, (5, 4), 8)])
def test_fast_upfirdn2d_second_order_and_jvp(up, down, pad, taps, fast_path):
    """The adjoint backward is itself differentiable (R1 / path length) and forward-mode AD runs the op."""
    x = _random(1, 2, 6, 7).requires_grad_(True)
    f = torch.rand(taps, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    padding = (pad[0], pad[1], pad[0], pad[1])
    function = lambda t: fast.upfirdn2d(t, f, up, down, padding, gain=up * up)  # noqa: E731
    assert torch.autograd.gradcheck(function, (x,))
    assert torch.autograd.gradgradcheck(function, (x,))
    tangent = _random(*x.shape, seed=4)
    _, jvp_out = torch.func.jvp(function, (x.detach(),), (tangent,))
    torch.testing.assert_close(jvp_out, reference.upfirdn2d(tangent, f, up, down, padding, gain=up * up))


def _alias_free_layers(name):
    generator = StyleGenerator(get_config(name), seed=0).double()
    return [(layer_name, layer) for layer_name, layer in generator.synthesis_network.layers.items()
            if not layer.is_torgb]


@pytest.fixture(params=["matrices", "polyphase", "reference-formulation"])
def filtered_lrelu_path(request, monkeypatch):
    """The three forward formulations of the fast filtered leaky ReLU: resampling matrices (small images), all
    polyphase (``POLYPHASE_FILTERED_LRELU``) and the reference steps (large images, the default above
    ``MATRIX_MAX_LENGTH``); the recomputing backward's adjoints run on matrices or polyphase convolutions alike."""
    if request.param != "matrices":
        monkeypatch.setattr(fast, "MATRIX_MAX_LENGTH", 0)
        monkeypatch.setattr(fast, "POLYPHASE_FILTERED_LRELU", request.param == "polyphase")
    return request.param


@pytest.fixture
def recompute_always(monkeypatch):
    """The recomputing backward for every size (by default only upsampled tensors of paper-size layers take it)."""
    monkeypatch.setattr(fast, "RECOMPUTE_MIN_ELEMENTS_PER_IMAGE", 0)


@pytest.mark.parametrize("name", ["sg3t-tiny", "sg3t-cpu64"])
@pytest.mark.parametrize("clamp", [None, 0.3])
@pytest.mark.parametrize("recompute", [True, False])
def test_fast_filtered_lrelu_matches_reference_on_config_layers(name, clamp, recompute, filtered_lrelu_path,
                                                                monkeypatch):
    """Every alias-free layer's (up, down, filters, padding) of the config, small batch, random inputs: values and
    the gradients of the input, the per-sample channel scale (the demodulation) and the bias, with the recomputing
    backward and with autograd of the plain formulation."""
    monkeypatch.setattr(fast, "RECOMPUTE_MIN_ELEMENTS_PER_IMAGE", 0 if recompute else 2 ** 62)
    for index, (layer_name, layer) in enumerate(_alias_free_layers(name)):
        channels = 3
        x = _random(2, channels, layer.in_size + 2, layer.in_size + 2, seed=index).requires_grad_(True)
        bias = _random(channels, seed=100 + index).requires_grad_(True)
        scale = (_random(2, channels, seed=300 + index).abs() + 0.5).requires_grad_(True)
        args = (layer.up_filter, layer.down_filter, bias, layer.up_factor, layer.down_factor, layer.padding)
        expected = reference.filtered_lrelu(x, *args, clamp=clamp, scale=scale)
        got = fast.filtered_lrelu(x, *args, clamp=clamp, scale=scale)
        assert (type(got.grad_fn).__name__ == "_RecomputingFilteredLReLUBackward") == recompute
        assert got.shape == expected.shape == (2, channels, layer.out_size, layer.out_size), layer_name
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12, msg=layer_name)
        cotangent = _random(*expected.shape, seed=200 + index)
        grads_expected = torch.autograd.grad(expected, (x, scale, bias), cotangent)
        grads_got = torch.autograd.grad(got, (x, scale, bias), cotangent)
        for a, b in zip(grads_got, grads_expected):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-11, msg=layer_name)


# (up, down, padding, up taps, down taps, clamp): StyleGAN3-T's two layer kinds in miniature and a crop.
RECOMPUTE_CASES = [(2, 2, (9, 8, 9, 8), 12, 12, None), (4, 2, (5, 4, 3, 6), 16, 8, 0.4),
                   (2, 2, (-1, -2, -2, -1), 6, 4, 0.4)]


@pytest.mark.parametrize("up,down,padding,taps_up,taps_down,clamp", RECOMPUTE_CASES)
def test_recomputing_filtered_lrelu_gradcheck_and_second_order(up, down, padding, taps_up, taps_down, clamp,
                                                                filtered_lrelu_path, recompute_always):
    """float64 gradcheck of the recomputing backward for x, scale and bias (first order, and second order through
    its create_graph branch), with and without the clamp."""
    up_filter = torch.rand(taps_up, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    down_filter = torch.rand(taps_down, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    x = (_random(1, 2, 9, 10) * 0.3).requires_grad_(True)
    scale = (_random(1, 2, seed=3).abs() + 0.5).requires_grad_(True)
    bias = (_random(2, seed=4) * 0.1).requires_grad_(True)
    function = lambda x_, s_, b_: fast.filtered_lrelu(x_, up_filter, down_filter, b_, up, down, padding,  # noqa: E731
                                                     clamp=clamp, scale=s_)
    if clamp is not None:  # the clamp must cut somewhere, or this case tests nothing more than the other
        with torch.no_grad():
            plain = fast.filtered_lrelu(x, up_filter, down_filter, bias, up, down, padding, scale=scale)
        assert not torch.allclose(function(x, scale, bias).detach(), plain)
    assert torch.autograd.gradcheck(function, (x, scale, bias))
    assert torch.autograd.gradgradcheck(function, (x, scale, bias))


def test_recomputing_filtered_lrelu_keeps_only_its_inputs(recompute_always):
    """What autograd keeps for backward: x, scale and bias on the fast path (the bytes of exactly those three), the
    upsampled tensor (``up ** 2`` times x at least) on the reference path."""
    (_, layer) = _alias_free_layers("sg3t-cpu64")[-2]
    x = _random(2, 3, layer.in_size + 2, layer.in_size + 2).requires_grad_(True)
    scale = (_random(2, 3, seed=1).abs() + 0.5).requires_grad_(True)
    bias = _random(3, seed=2).requires_grad_(True)
    args = (layer.up_filter, layer.down_filter, bias, layer.up_factor, layer.down_factor, layer.padding)
    with SavedTensorMeter() as fast_meter:
        fast.filtered_lrelu(x, *args, scale=scale)
    with SavedTensorMeter() as reference_meter:
        reference.filtered_lrelu(x, *args, scale=scale)
    assert fast_meter.bytes == 8 * (x.numel() + scale.numel() + bias.numel())
    assert reference_meter.largest[0] >= 8 * x.numel() * layer.up_factor ** 2


def test_recomputing_filtered_lrelu_forward_mode_matches_reference(filtered_lrelu_path, recompute_always):
    """jvp of the recomputing Function (taken when its inputs require grad), alone and under vmap."""
    from torch.autograd import forward_ad

    (_, layer) = _alias_free_layers("sg3t-tiny")[1]
    shape = (2, 3, layer.in_size + 2, layer.in_size + 2)
    x = _random(*shape).requires_grad_(True)
    scale = (_random(2, 3, seed=1).abs() + 0.5).requires_grad_(True)
    bias = _random(3, seed=2).requires_grad_(True)
    tangents = (_random(*shape, seed=3), _random(2, 3, seed=4), _random(3, seed=5))

    def run(module, x_, s_, b_):
        return module.filtered_lrelu(x_, layer.up_filter, layer.down_filter, b_, layer.up_factor, layer.down_factor,
                                     layer.padding, clamp=0.5, scale=s_)

    results = {}
    for module in (reference, fast):
        with forward_ad.dual_level():
            duals = [forward_ad.make_dual(p, t) for p, t in zip((x, scale, bias), tangents)]
            out = run(module, *duals)
            if module is fast:
                assert type(out.grad_fn).__name__ == "_RecomputingFilteredLReLUBackward"
            results[module.__name__] = forward_ad.unpack_dual(out).tangent
    torch.testing.assert_close(results[fast.__name__], results[reference.__name__], rtol=1e-10, atol=1e-12)
    # Under vmap over tangents of x (bias requires grad, so the Function and its generated vmap rule run).
    batch = torch.stack([tangents[0], 2 * tangents[0]])
    columns = torch.func.vmap(lambda t: torch.func.jvp(lambda v: run(fast, v, scale, bias), (x.detach(),), (t,))[1])(
        batch)
    expected = torch.func.jvp(lambda v: run(reference, v, scale, bias), (x.detach(),), (tangents[0],))[1]
    torch.testing.assert_close(columns[0], expected, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(columns[1], 2 * expected, rtol=1e-10, atol=1e-12)


def test_scaled_input_conv2d_matches_plain_formulation_and_keeps_only_x():
    x = _random(2, 3, 6, 5).requires_grad_(True)
    scale = _random(2, 3, seed=1).requires_grad_(True)
    weight = _random(4, 3, 3, 3, seed=2).requires_grad_(True)
    got = ops.scaled_input_conv2d(x, scale, weight, padding=2)
    expected = torch.nn.functional.conv2d(x * scale[:, :, None, None], weight, padding=2)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    cotangent = _random(*expected.shape, seed=3)
    for a, b in zip(torch.autograd.grad(got, (x, scale, weight), cotangent),
                    torch.autograd.grad(expected, (x, scale, weight), cotangent)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    function = lambda x_, s_, w_: ops.scaled_input_conv2d(x_, s_, w_, padding=1)  # noqa: E731
    assert torch.autograd.gradcheck(function, (x, scale, weight))
    assert torch.autograd.gradgradcheck(function, (x, scale, weight))
    tangents = (_random(2, 3, 6, 5, seed=4), _random(2, 3, seed=5), _random(4, 3, 3, 3, seed=6))
    plain = lambda x_, s_, w_: torch.nn.functional.conv2d(x_ * s_[:, :, None, None], w_, padding=1)  # noqa: E731
    from torch.autograd import forward_ad

    with forward_ad.dual_level():
        out = function(*[forward_ad.make_dual(p, t) for p, t in zip((x, scale, weight), tangents)])
        got_tangent = forward_ad.unpack_dual(out).tangent
    _, expected_tangent = torch.func.jvp(plain, (x.detach(), scale.detach(), weight.detach()), tangents)
    torch.testing.assert_close(got_tangent, expected_tangent, rtol=1e-12, atol=1e-12)
    with SavedTensorMeter() as meter:
        function(x, scale, weight)
    assert meter.bytes == 8 * (x.numel() + scale.numel() + weight.numel())
    with pytest.raises(ValueError, match="scaled_input_conv2d expects"):
        ops.scaled_input_conv2d(x, scale[:, :2], weight)


def test_paper_size_layers_take_the_recomputing_backward_and_cpu_configs_do_not():
    """The default size rule: every filtered leaky ReLU of sg3t-paper256 recomputes its upsampled tensor in backward
    (what bounds its batch on a GPU), none of the CPU configs' layers (where recomputing only costs time); and the
    rule is what filtered_lrelu applies, shown on sg3t-paper256's first layer (512 channels, 38 px)."""
    def per_image(name, **overrides):
        generator = StyleGenerator(get_config(name, **overrides), seed=0)
        return {layer_name: fast.upsampled_elements_per_image((1, layer.out_channels, layer.in_size + 2,
                                                               layer.in_size + 2), layer.up_factor, layer.padding,
                                                              layer.up_filter.numel())
                for layer_name, layer in generator.synthesis_network.layers.items() if not layer.is_torgb}, generator

    paper, paper_generator = per_image("sg3t-paper256")
    assert len(paper) == 14 and min(paper.values()) >= fast.RECOMPUTE_MIN_ELEMENTS_PER_IMAGE
    for name, overrides in (("sg3t-tiny", {"resolution": 64}), ("sg3t-cpu64", {})):
        assert max(per_image(name, **overrides)[0].values()) < fast.RECOMPUTE_MIN_ELEMENTS_PER_IMAGE, name
    layer = paper_generator.synthesis_network.layers["L0"]
    x = torch.randn(1, layer.out_channels, layer.in_size + 2, layer.in_size + 2, requires_grad=True)
    y = fast.filtered_lrelu(x, layer.up_filter, layer.down_filter, layer.bias, layer.up_factor, layer.down_factor,
                            layer.padding)
    assert type(y.grad_fn).__name__ == "_RecomputingFilteredLReLUBackward"


@pytest.mark.parametrize("mixed_precision", [None, "bf16"])
def test_fast_sg3_generator_keeps_no_upsampled_tensor_for_backward(mixed_precision, recompute_always):
    """A training forward of sg3t-tiny on the fast path keeps no tensor of an upsampled shape (which the reference
    path keeps in every layer) and under half the reference path's activation bytes."""
    saved = {}
    for implementation in ("reference", "fast"):
        g = StyleGenerator(get_config("sg3t-tiny"), seed=0, implementation=implementation,
                           mixed_precision=mixed_precision, mixed_precision_resolutions=1)
        z = g.sample_latents(2, seed=1)
        with SavedTensorMeter(exclude=list(g.parameters()) + list(g.buffers())) as meter:
            image = g(z)
        image.square().mean().backward()  # the recomputing backward runs (also in bf16)
        assert all(torch.isfinite(p.grad).all() for p in g.parameters() if p.grad is not None)
        saved[implementation] = meter
    upsampled = set()
    for layer in g.synthesis_network.layers.values():
        if not layer.is_torgb:
            side = ((layer.in_size + 2) * layer.up_factor + layer.padding[0] + layer.padding[1]
                    - layer.up_filter.numel() + 1)
            upsampled.add((2, layer.out_channels, side, side))
    assert upsampled & set(saved["reference"].shapes)
    assert not upsampled & set(saved["fast"].shapes)
    assert saved["fast"].bytes < 0.5 * saved["reference"].bytes


def test_filtered_lrelu_clamp_changes_result():
    """The clamp is not a no-op (so the clamp comparison above can fail)."""
    (_, layer) = _alias_free_layers("sg3t-tiny")[0]
    x = _random(1, 2, layer.in_size + 2, layer.in_size + 2) * 5
    args = (layer.up_filter, layer.down_filter, None, layer.up_factor, layer.down_factor, layer.padding)
    assert not torch.allclose(fast.filtered_lrelu(x, *args), fast.filtered_lrelu(x, *args, clamp=0.3))


@pytest.mark.parametrize("activation,gain,clamp", [("lrelu", 2 ** 0.5, None), ("lrelu", 2 ** 0.5, 0.5),
                                                   ("linear", 1.0, None), ("linear", 3.0, 1.0)])
def test_fast_bias_act_matches_reference(activation, gain, clamp):
    x = _random(2, 4, 5, 5).requires_grad_(True)
    bias = _random(4, seed=1).requires_grad_(True)
    expected = reference.bias_act(x, bias, activation, gain, clamp)
    got = fast.bias_act(x, bias, activation, gain, clamp)
    torch.testing.assert_close(got, expected)
    cotangent = _random(*x.shape, seed=2)
    for a, b in zip(torch.autograd.grad(got, (x, bias), cotangent),
                    torch.autograd.grad(expected, (x, bias), cotangent)):
        torch.testing.assert_close(a, b)


def _generator(name, implementation):
    return StyleGenerator(get_config(name), seed=0, implementation=implementation)


@pytest.mark.parametrize("name", TINY)
def test_generator_fast_path_matches_reference_forward_and_gradients(name):
    """Compared in float64: in float32 the two paths differ by ~3e-7 before the leaky ReLU, enough to flip a
    pre-activation sitting near zero to the other slope on some CPUs (a 3e-3 gradient difference on AVX-512 in
    sg3t-tiny), which says nothing about the implementations; in float64 they agree to ~1e-15."""
    reference_g, fast_g = _generator(name, "reference").double(), _generator(name, "fast").double()
    ws = reference_g.mapping(reference_g.sample_latents(3, seed=1).double()).detach()
    noise = {"noise_mode": "random"} if name.startswith("sg2") else {}
    with torch.no_grad():  # non-zero noise strengths so that the noise path is compared too
        for g in (reference_g, fast_g):
            for parameter_name, parameter in g.named_parameters():
                if parameter_name.endswith("noise_strength") or parameter_name.endswith(".bias"):
                    parameter.copy_(torch.full_like(parameter, 0.1))
    outputs, grads = {}, {}
    for tag, g in (("reference", reference_g), ("fast", fast_g)):
        ws_ = ws.clone().requires_grad_(True)
        image = g.synthesis(ws_, noise_generator=torch.Generator().manual_seed(5), **noise)
        cotangent = _random(*image.shape, seed=7, dtype=image.dtype)
        params = [p for _, p in sorted(g.synthesis_network.named_parameters())]
        grads[tag] = torch.autograd.grad(image, [ws_] + params, cotangent)
        outputs[tag] = image.detach()
    scale = float(outputs["reference"].abs().max())
    torch.testing.assert_close(outputs["fast"], outputs["reference"], rtol=1e-10, atol=1e-11 * scale)
    for a, b in zip(grads["fast"], grads["reference"]):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10 * float(b.abs().max()) + 1e-13)


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("implementation", ["reference", "fast"])
def test_sspace_round_trip_is_bit_identical_on_each_path(name, implementation):
    g = _generator(name, implementation)
    ws = g.mapping(g.sample_latents(2, seed=3))
    assert torch.equal(g.synthesis(ws), g.synthesis_from_styles(g.styles(ws)))


@pytest.mark.parametrize("name", TINY)
def test_path_length_double_backward_runs_on_fast_path(name):
    """R1 / path-length style second-order gradients through the generator agree between paths."""
    results = []
    for implementation in ("reference", "fast"):
        g = _generator(name, implementation).double()
        ws = g.mapping(g.sample_latents(2, seed=1).double()).detach().requires_grad_(True)
        image = g.synthesis(ws)
        (grad_ws,) = torch.autograd.grad((image * _random(*image.shape, seed=2)).sum(), ws, create_graph=True)
        penalty = grad_ws.square().sum()
        results.append(torch.autograd.grad(penalty, [p for _, p in sorted(g.named_parameters())],
                                           allow_unused=True))
    for a, b in zip(*results):
        if b is None:
            assert a is None
            continue
        torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-9 * float(b.abs().max()) + 1e-12)


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("trainable", [False, True])
def test_vmap_jvp_through_fast_generator_matches_reference(name, trainable):
    """Jacobian columns d image / d s_k (paper 1's contribution scores) by vmap(jvp) on the fast path; with
    parameters that require grad the recomputing Functions' own jvp and generated vmap rules run."""
    from torch.func import jvp, vmap

    columns = {}
    for implementation in ("reference", "fast"):
        g = _generator(name, implementation).double().requires_grad_(trainable)
        codes = g.styles(g.mapping(g.sample_latents(1, seed=0).double())).detach()
        flat = codes.flatten()
        channels = torch.tensor([0, flat.shape[1] // 2, flat.shape[1] - 1])
        tangents = torch.zeros(len(channels), 1, flat.shape[1], dtype=torch.float64)
        tangents[torch.arange(len(channels)), 0, channels] = 1.0
        columns[implementation] = vmap(
            lambda t: jvp(lambda v: g.synthesis_from_styles(codes.with_flat(v)), (flat,), (t,))[1])(tangents)
    assert columns["fast"].abs().max() > 0
    torch.testing.assert_close(columns["fast"], columns["reference"], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", TINY)
def test_mixed_precision_bf16_stays_close_and_returns_float32(name):
    full = _generator(name, "fast")
    mixed = StyleGenerator(get_config(name), seed=0, mixed_precision="bf16", mixed_precision_resolutions=1)
    reduced = [n for n, layer in mixed.synthesis_network.layers.items() if layer.compute_dtype is not None]
    assert reduced and len(reduced) < len(mixed.synthesis_network.layers)  # only the highest resolutions
    with torch.no_grad():
        ws = full.mapping(full.sample_latents(2, seed=1))
        a, b = full.synthesis(ws), mixed.synthesis(ws)
    assert b.dtype == torch.float32 and torch.isfinite(b).all()
    # bf16 keeps 8 bits of mantissa: about 1 % relative error per layer.
    assert float((a - b).abs().max()) < 0.1 * float(a.abs().max())
    assert not torch.equal(a, b)


def test_dispatch_rules_and_input_validation(monkeypatch):
    x = torch.zeros(1, 1, 4, 4)
    assert ops.resolve_implementation("auto", x) == "fast"
    assert ops.resolve_implementation("triton", x) == "fast"  # CPU tensors never go to Triton
    assert ops.resolve_implementation("reference", x) == "reference"
    monkeypatch.setenv(ops.ENVIRONMENT_VARIABLE, "reference")
    assert ops.resolve_implementation("auto", x) == "reference"
    monkeypatch.setenv(ops.ENVIRONMENT_VARIABLE, "cuda-please")
    with pytest.raises(ValueError, match="ANONPAPER_STYLEGAN_IMPL"):
        ops.resolve_implementation("auto", x)
    monkeypatch.delenv(ops.ENVIRONMENT_VARIABLE)
    with pytest.raises(ValueError, match="implementation must be one of"):
        StyleGenerator(get_config("sg2-tiny"), implementation="cuda")
    with pytest.raises(ValueError, match="mixed_precision must be one of"):
        StyleGenerator(get_config("sg2-tiny"), mixed_precision="fp8")
    with pytest.raises(ValueError, match="padding must be"):
        ops.upfirdn2d(x, torch.ones(2), padding=(1, 1))
    with pytest.raises(ValueError, match="activation must be one of"):
        ops.bias_act(x, None, activation="relu")


def test_set_implementation_switches_every_layer():
    g = _generator("sg3t-tiny", "fast")
    g.set_implementation("reference")
    assert g.implementation == "reference"
    assert all(layer.implementation == "reference" for layer in g.synthesis_network.layers.values())
