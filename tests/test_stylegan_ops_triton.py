"""Triton kernels of the StyleGAN ops against the reference: on CPU under Triton's interpreter (small shapes), and
on CUDA when a GPU is present (``gpu`` marker)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from anonpaper.models.stylegan import StyleGenerator, get_config

pytestmark = pytest.mark.unit


# Runs in a fresh interpreter: Triton decides between compiled and interpreted kernels when it is imported, so
# TRITON_INTERPRET=1 must be set before anything imports it. Prints one JSON dict of max abs errors.
_INTERPRETER_SCRIPT = r"""
import json, os, torch
from anonpaper.models.stylegan.ops import reference, triton_ops as T

DEVICE = os.environ.get("OPS_TEST_DEVICE", "cpu")
if DEVICE == "cuda":  # fp32 means fp32: no TF32 in the reference's convolutions
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False

def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(DEVICE)

def err(a, b):
    return float((a - b).detach().abs().max())

out = {}
for up, down, pad, taps in [(2, 1, (2, 1), 4), (1, 2, (1, 1), 4), (2, 2, (3, -1), 4), (4, 2, (5, 4), 8),
                            (1, 1, (2, 1), 4)]:
    x = rand(2, 3, 7, 9).requires_grad_(True)
    f = torch.rand(taps, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    padding = (pad[0], pad[1], pad[1], pad[0])
    a = reference.upfirdn2d(x, f, up, down, padding, gain=up * up)
    b = T.upfirdn2d(x, f, up, down, padding, gain=up * up)
    g = rand(*a.shape, seed=2)
    key = f"upfirdn2d up{up} down{down} pad{pad} taps{taps}"
    out[key] = [list(a.shape) == list(b.shape), err(a, b),
                err(torch.autograd.grad(a, x, g)[0], torch.autograd.grad(b, x, g)[0])]
for activation, gain, clamp in [("lrelu", 2 ** 0.5, None), ("lrelu", 2 ** 0.5, 0.7), ("linear", 2.0, None)]:
    x = rand(2, 3, 5, 4).requires_grad_(True)
    bias = rand(3, seed=1).requires_grad_(True)
    a = reference.bias_act(x, bias, activation, gain, clamp)
    b = T.bias_act(x, bias, activation, gain, clamp)
    g = rand(*x.shape, seed=2).requires_grad_(True)
    ga = torch.autograd.grad(a, (x, bias), g, create_graph=True)
    gb = torch.autograd.grad(b, (x, bias), g, create_graph=True)
    # Second order (the documented reference fallback), as R1 needs it: differentiate a weighted gradient norm
    # with respect to the cotangent that produced it.
    w = rand(*x.shape, seed=3)
    sa = torch.autograd.grad((ga[0].square() * w).sum() + ga[1].square().sum(), g)[0]
    sb = torch.autograd.grad((gb[0].square() * w).sum() + gb[1].square().sum(), g)[0]
    out[f"bias_act {activation} clamp{clamp}"] = [True, err(a, b), max(err(ga[0], gb[0]), err(ga[1], gb[1])),
                                                  err(sa, sb)]
# filtered_lrelu: the StyleGAN3-T layer shapes in miniature (12-tap up 2 / down 2, 24-tap up 4 critically
# sampled, their paddings) plus other factors, odd sizes, asymmetric and negative padding, clamp on/off.
# (N, C, H, W, up, down, up taps, down taps, padding, clamp, bias, gain)
FLRELU_CASES = [
    (1, 2, 10, 10, 2, 2, 12, 12, (9, 8, 9, 8), None, True, 2 ** 0.5),
    (1, 2, 11, 9, 2, 2, 12, 12, (9, 8, 9, 8), 0.3, True, 2 ** 0.5),
    (1, 2, 14, 13, 4, 2, 24, 12, (-6, -9, -6, -9), None, True, 2 ** 0.5),
    (1, 2, 9, 9, 4, 2, 24, 12, (6, 3, 6, 3), 0.5, True, 2 ** 0.5),
    (1, 2, 12, 13, 2, 2, 12, 12, (1, 0, 1, 0), None, False, 2 ** 0.5),
    (1, 1, 26, 27, 2, 2, 12, 12, (-11, -12, -11, -12), None, True, 2 ** 0.5),
    (2, 2, 7, 8, 1, 1, 4, 4, (2, 1, 2, 1), None, True, 2 ** 0.5),
    (1, 2, 7, 9, 2, 1, 6, 4, (3, 2, 1, 2), 0.4, False, 1.0),
    (1, 2, 9, 8, 1, 2, 4, 6, (1, 1, 2, 0), None, True, 2 ** 0.5),
    (1, 2, 8, 7, 4, 4, 8, 8, (5, 4, 3, 2), 0.2, True, 2.0),
    (1, 2, 20, 19, 1, 4, 4, 16, (0, 0, 1, 2), None, True, 2 ** 0.5),
    (1, 2, 6, 7, 4, 1, 16, 3, (7, 8, 8, 7), None, True, 2 ** 0.5),
    (1, 1, 70, 12, 2, 2, 4, 4, (3, 2, 3, 2), 0.6, True, 2 ** 0.5),  # several tiles along y
]
for n, c, h, w, up, down, ku, kd, padding, clamp, has_bias, gain in FLRELU_CASES:
    x = rand(n, c, h, w).requires_grad_(True)
    bias = rand(c, seed=1).requires_grad_(True) if has_bias else None
    up_filter, down_filter = rand(ku, seed=4).abs() + 0.1, rand(kd, seed=5).abs() + 0.1
    up_filter, down_filter = up_filter / up_filter.sum(), down_filter / down_filter.sum()
    args = (up_filter, down_filter, bias, up, down, padding, gain)
    a = reference.filtered_lrelu(x, *args, clamp=clamp)
    b = T.filtered_lrelu(x, *args, clamp=clamp)
    g = rand(*a.shape, seed=2)
    inputs = (x, bias) if has_bias else (x,)
    ga, gb = torch.autograd.grad(a, inputs, g), torch.autograd.grad(b, inputs, g)
    key = f"filtered_lrelu {n}x{c}x{h}x{w} up{up} down{down} taps{ku}/{kd} pad{padding} clamp{clamp} gain{gain:.2f}"
    fits = T.filtered_lrelu_fits_tiles(x.shape, up_filter, down_filter, up, down, padding, gain)
    out[key] = [list(a.shape) == list(b.shape), err(a, b), err(ga[0], gb[0]),
                err(ga[1], gb[1]) if has_bias else 0.0, fits,
                max(float(a.abs().max()), float(ga[0].abs().max()), 1.0)]
# Half precision in, fp32 accumulation: against the fp32 reference on the same (rounded) input.
x = rand(1, 2, 10, 11).half()
up_filter, down_filter = torch.full((12,), 1 / 12, device=DEVICE), torch.full((12,), 1 / 12, device=DEVICE)
a = reference.filtered_lrelu(x.float(), up_filter, down_filter, None, 2, 2, (9, 8, 9, 8))
b = T.filtered_lrelu(x, up_filter, down_filter, None, 2, 2, (9, 8, 9, 8))
out["filtered_lrelu_fp16"] = [b.dtype == torch.float16, err(a, b.float())]
# A per-sample channel scale (the demodulation) before the kernels: gradients of x, scale and bias.
x = rand(2, 2, 10, 10).requires_grad_(True)
scale = (rand(2, 2, seed=6).abs() + 0.5).requires_grad_(True)
bias = rand(2, seed=1).requires_grad_(True)
up_filter, down_filter = torch.full((12,), 1 / 12, device=DEVICE), torch.full((12,), 1 / 12, device=DEVICE)
a = reference.filtered_lrelu(x, up_filter, down_filter, bias, 2, 2, (9, 8, 9, 8), scale=scale)
b = T.filtered_lrelu(x, up_filter, down_filter, bias, 2, 2, (9, 8, 9, 8), scale=scale)
g = rand(*a.shape, seed=2)
ga, gb = torch.autograd.grad(a, (x, scale, bias), g), torch.autograd.grad(b, (x, scale, bias), g)
out["filtered_lrelu_scale"] = [err(a, b), max(err(p, q) for p, q in zip(ga, gb)),
                               max(float(t.abs().max()) for t in (a,) + ga)]
# Double backward (create_graph, as a penalty through the generator needs it): the chunked fast-path fallback.
x = rand(1, 2, 10, 10).requires_grad_(True)
bias = rand(2, seed=1).requires_grad_(True)
up_filter, down_filter = torch.full((12,), 1 / 12, device=DEVICE), torch.full((12,), 1 / 12, device=DEVICE)
second = []
T.FILTERED_LRELU_CHUNK_ELEMENTS = 1500  # one channel per chunk here: the recomputation runs in two chunks
for module in (reference, T):
    y = module.filtered_lrelu(x, up_filter, down_filter, bias, 2, 2, (9, 8, 9, 8), clamp=0.5)
    g = rand(*y.shape, seed=2).requires_grad_(True)
    gx, gbias = torch.autograd.grad(y, (x, bias), g, create_graph=True)
    w = rand(*x.shape, seed=3)
    second.append(torch.autograd.grad((gx.square() * w).sum() + gbias.square().sum(), (g, x), allow_unused=True))
out["filtered_lrelu_double_backward"] = [err(second[0][0], second[1][0])]
# A filter too long for the tiles takes the fast-path fallback, with the same results.
x = rand(1, 2, 6, 6).requires_grad_(True)
long_filter = torch.full((301,), 1 / 301, device=DEVICE)
short_filter = torch.full((4,), 0.25, device=DEVICE)
a = reference.filtered_lrelu(x, long_filter, short_filter, None, 2, 1, (150, 150, 150, 150))
b = T.filtered_lrelu(x, long_filter, short_filter, None, 2, 1, (150, 150, 150, 150))
g = rand(*a.shape, seed=2)
out["filtered_lrelu_long_filter"] = [
    T.filtered_lrelu_fits_tiles(x.shape, long_filter, short_filter, 2, 1, (150, 150, 150, 150)), err(a, b),
    err(torch.autograd.grad(a, x, g)[0], torch.autograd.grad(b, x, g)[0])]
print("RESULT" + json.dumps(out))
"""


def _op_errors(device: str) -> dict:
    """Max abs errors of every Triton op vs the reference, from a fresh interpreter: on ``cpu`` the kernels run
    under TRITON_INTERPRET=1, on ``cuda`` compiled for the GPU."""
    pytest.importorskip("triton")
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, OPS_TEST_DEVICE=device, PYTHONPATH=os.pathsep.join(
        [str(root)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    run = subprocess.run([sys.executable, "-c", _INTERPRETER_SCRIPT], env=env, capture_output=True, text=True,
                         timeout=600)
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT")]
    if run.returncode != 0 or not lines:
        message = (run.stderr or run.stdout).strip().splitlines()[-1:] or ["no output"]
        if "Traceback" in run.stderr and "triton" in run.stderr.lower() and "interpret" in run.stderr.lower():
            pytest.skip(f"Triton interpreter unavailable here: {message[0]}")
        raise AssertionError(f"interpreter run failed: {run.stderr[-3000:]}")
    return json.loads(lines[0][len("RESULT"):])


@pytest.fixture(scope="module", params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def interpreter_errors(request):
    """The op errors under the interpreter (CPU) and, where a GPU is present, as compiled CUDA kernels."""
    # A module-scoped fixture is set up before the function-scoped autouse GPU skip in conftest, so it skips itself.
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    return _op_errors(request.param)


def test_triton_upfirdn2d_matches_reference_forward_and_backward(interpreter_errors):
    cases = {k: v for k, v in interpreter_errors.items() if k.startswith("upfirdn2d")}
    assert len(cases) == 5
    for key, (same_shape, forward, backward) in cases.items():
        assert same_shape, key
        assert forward < 5e-5 and backward < 5e-5, (key, forward, backward)  # fp32, gains up to 16


def test_triton_bias_act_matches_reference_first_and_second_order(interpreter_errors):
    cases = {k: v for k, v in interpreter_errors.items() if k.startswith("bias_act")}
    assert len(cases) == 3
    for key, (_, forward, backward, second) in cases.items():
        assert forward < 1e-6 and backward < 1e-5 and second < 1e-4, (key, forward, backward, second)


def test_triton_filtered_lrelu_matches_reference(interpreter_errors):
    """Tile kernels (no upsampled tensor in memory) on StyleGAN3-T layer shapes in miniature: forward, gradients of
    the input and the bias; fp32 errors below 5e-5 relative to the largest value (filters sum to one)."""
    cases = {k: v for k, v in interpreter_errors.items() if k.startswith("filtered_lrelu ")}
    assert len(cases) >= 12
    for key, (same_shape, forward, grad_x, grad_bias, fits, scale) in cases.items():
        assert same_shape and fits, key
        assert max(forward, grad_x, grad_bias) < 5e-5 * scale, (key, forward, grad_x, grad_bias, scale)


def test_triton_filtered_lrelu_with_channel_scale(interpreter_errors):
    forward, gradients, magnitude = interpreter_errors["filtered_lrelu_scale"]
    assert max(forward, gradients) < 5e-5 * max(magnitude, 1.0), (forward, gradients, magnitude)


def test_triton_filtered_lrelu_half_precision_double_backward_and_fallback(interpreter_errors):
    is_half, error = interpreter_errors["filtered_lrelu_fp16"]
    assert is_half and error < 2e-2, error  # fp16 output rounding of values of order one
    assert interpreter_errors["filtered_lrelu_double_backward"][0] < 1e-4
    fits, forward, backward = interpreter_errors["filtered_lrelu_long_filter"]
    assert not fits  # a 301-tap filter needs a 160-sample input window (> 128): the fast path runs
    assert forward < 1e-5 and backward < 1e-5, (forward, backward)


def test_tile_matrices_reproduce_upfirdn2d_on_impulses():
    """Tiles of ``D @ A @ window`` (and ``A @ window``) put together give the reference upfirdn2d of 1-D impulses,
    for the SG3 shapes and odd ones (pure PyTorch: no kernel launch)."""
    pytest.importorskip("triton")
    from anonpaper.models.stylegan.ops import fast, reference
    from anonpaper.models.stylegan.ops import triton_ops as T

    for up, down, ku, kd, pad_lo, pad_hi, length in [(2, 2, 12, 12, 9, 8, 13), (4, 2, 24, 12, -6, -9, 17),
                                                    (2, 1, 5, 3, 3, 0, 9), (1, 4, 4, 16, 2, 1, 40)]:
        fu = torch.rand(ku, generator=torch.Generator().manual_seed(ku), dtype=torch.float64)
        fd = torch.rand(kd, generator=torch.Generator().manual_seed(kd), dtype=torch.float64)
        up_taps, down_taps = fast._correlation_taps(fu, up * up), fast._correlation_taps(fd, 2.0)
        for tile in T.TILE_SIZES:
            matrix_a, matrix_d, start, step, _, n_pad = T.axis_tile_plan(up_taps, down_taps, up, down, pad_lo, tile)
            for k in range(length):
                # A 2-D impulse at (k, k): the reference output is the outer product of the 1-D responses.
                impulse = torch.zeros(1, 1, length, length, dtype=torch.float64)
                impulse[..., k, k] = 1
                u_ref = reference.upfirdn2d(impulse, fu, up=up, padding=(pad_lo, pad_hi) * 2, gain=up * up)[0, 0]
                y_ref = reference.upfirdn2d(u_ref[None, None], fd, down=down, gain=2.0)[0, 0]
                u_parts, y_parts = [], []
                for t in range(-(-y_ref.shape[-1] // tile)):
                    index = start + t * step + torch.arange(n_pad)
                    window = (index == k).to(torch.float64)  # the impulse seen through this tile's input window
                    u = matrix_a @ window
                    count = min(down * (tile - 1) + kd, u_ref.shape[-1] - down * tile * t)
                    u_parts.append((down * tile * t, u[:count]))
                    y_parts.append(matrix_d @ u)
                y = torch.cat(y_parts)[:y_ref.shape[-1]]
                torch.testing.assert_close(torch.outer(y, y), y_ref, rtol=1e-12, atol=1e-12)
                for m0, u in u_parts:
                    torch.testing.assert_close(torch.outer(u, u), u_ref[m0:m0 + u.numel(), m0:m0 + u.numel()],
                                               rtol=1e-12, atol=1e-12)


def test_sg3t_paper256_layers_fit_16px_tiles():
    """Every filtered_lrelu layer of sg3t-paper256 (input side with the conv's 2 px, up/down, taps, padding) runs on
    the tile kernels with 16 x 16 output tiles and windows of at most 64 x 64 (no fallback, no register blow-up)."""
    pytest.importorskip("triton")
    from anonpaper.models.stylegan.ops import fast
    from anonpaper.models.stylegan.ops import triton_ops as T

    for size, up, down, taps_up, taps_down, (pad_lo, pad_hi), out in [
            (38, 2, 2, 12, 12, (9, 8), 36), (38, 4, 2, 24, 12, (-6, -9), 52), (150, 4, 2, 24, 12, (-6, -9), 276),
            (278, 2, 2, 12, 12, (9, 8), 276), (278, 2, 2, 12, 12, (-11, -12), 256)]:
        up_filter, down_filter = torch.full((taps_up,), 1 / taps_up), torch.full((taps_down,), 1 / taps_down)
        padding = (pad_lo, pad_hi, pad_lo, pad_hi)
        assert T.filtered_lrelu_fits_tiles((1, 1, size, size), up_filter, down_filter, up, down, padding)
        choice = T.choose_tiles(fast._correlation_taps(up_filter, up * up), fast._correlation_taps(down_filter, 2.0),
                                up, down, pad_lo, pad_lo, out, out)
        tile_y, tile_x, plan_y, plan_x = choice
        assert (tile_y, tile_x) == (16, 16) and max(plan_y[4], plan_y[5], plan_x[4], plan_x[5]) <= 64


def test_triton_ops_refuse_cpu_tensors_without_interpreter():
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("interpreter enabled globally")
    from anonpaper.models.stylegan.ops import triton_ops

    with pytest.raises(ValueError, match="CUDA tensors"):
        triton_ops.bias_act(torch.zeros(1, 1, 2, 2), None, "lrelu", 1.0)
    with pytest.raises(ValueError, match="float32/float16/bfloat16"):
        triton_ops._require(torch.zeros(1, 1, 2, 2, dtype=torch.float64).to("meta"))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["sg2-tiny", "sg3t-tiny"])
def test_triton_generator_matches_fast_path_on_cuda(name):
    fast_g = StyleGenerator(get_config(name), seed=0, implementation="fast").cuda()
    triton_g = StyleGenerator(get_config(name), seed=0, implementation="triton").cuda()
    ws = fast_g.mapping(fast_g.sample_latents(4, seed=1, device="cuda")).detach()
    ws_a, ws_b = ws.clone().requires_grad_(True), ws.clone().requires_grad_(True)
    a, b = fast_g.synthesis(ws_a), triton_g.synthesis(ws_b)
    torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)
    cotangent = torch.randn_like(a)
    torch.testing.assert_close(torch.autograd.grad(b, ws_b, cotangent)[0],
                               torch.autograd.grad(a, ws_a, cotangent)[0], rtol=1e-3, atol=1e-4)
