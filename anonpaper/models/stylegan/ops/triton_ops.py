"""Triton GPU kernels for upfirdn2d, bias + activation and StyleGAN3's fused filtered leaky ReLU.

Importable without CUDA and without Triton (:data:`TRITON_AVAILABLE` tells); the kernels are only launched on
CUDA tensors by :mod:`anonpaper.models.stylegan.ops`, or on CPU tensors under Triton's interpreter
(``TRITON_INTERPRET=1`` set before this module is imported), which is how the CPU tests check their numerics.

* :func:`upfirdn2d`: one program per block of output pixels; each output sums ``taps ** 2`` filter taps over the
  (virtually) zero-inserted, padded input, with masked loads instead of zero insertion. Linear, so its backward is
  the same kernel with the flipped filter and ``up``/``down`` swapped (the adjoint): every derivative order and
  ``jvp`` stay on the kernel.
* :func:`bias_act`: elementwise; backward is elementwise too (the sign of the output gives the leaky ReLU's
  slope, ``|y| == clamp`` marks clamped values). Second order (R1 / path length through it) falls back to the
  reference computation on the saved input.
* :func:`filtered_lrelu`: for every output pixel, the ``down_taps ** 2`` upsampled samples it reads are computed
  on the fly, each from the ``(up_taps / up) ** 2`` input samples of its polyphase component, activated, and
  accumulated; the upsampled tensor never exists in memory. Backward recomputes the forward through the
  fast PyTorch path in chunks of channels (so only one chunk's upsampled tensor exists at a time) and
  differentiates it; with ``create_graph`` (double backward) that recomputation keeps its graph.

Performance on GPU has not been measured yet (no GPU in the development session); the per-output formulation
reads each input sample many times from cache instead of staging tiles in shared memory as NVIDIA's CUDA kernels
do, so expect it to be memory-light rather than fastest.
"""

from __future__ import annotations

import torch

from anonpaper.models.stylegan.ops import fast, reference
from anonpaper.models.stylegan.ops.reference import LEAKY_RELU_GAIN, LEAKY_RELU_SLOPE

try:  # Triton is optional: CPU-only installs import this module and never launch a kernel.
    import triton
    import triton.language as tl

    TRITON_AVAILABLE = True
except ImportError:  # pragma: no cover - depends on the environment
    triton, tl = None, None
    TRITON_AVAILABLE = False

BLOCK = 256
FILTERED_LRELU_CHANNEL_CHUNK = 64


def _require(x: torch.Tensor) -> None:
    import os

    if not TRITON_AVAILABLE:
        raise RuntimeError("the 'triton' StyleGAN ops need the triton package; use implementation='fast'")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"Triton StyleGAN ops support float32/float16/bfloat16, got {x.dtype}")
    if not x.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(f"Triton kernels run on CUDA tensors (or under TRITON_INTERPRET=1); got device {x.device}")
    if x.ndim != 4:
        raise ValueError(f"expected an (N, C, H, W) tensor, got shape {tuple(x.shape)}")


if TRITON_AVAILABLE:

    @triton.jit
    def _output_pixels(total, height, width, out_height, out_width, BLOCK_SIZE: tl.constexpr):
        """This program's flat output indices, their mask, (x, y), plane and the plane's input offset."""
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        out_x = offsets % out_width
        out_y = (offsets // out_width) % out_height
        plane = offsets // (out_width * out_height)
        return offsets, offsets < total, out_x, out_y, plane, plane * height * width

    @triton.jit
    def _upfirdn2d_kernel(x_ptr, f_ptr, y_ptr, height, width, out_height, out_width, total, pad_x0, pad_y0,
                          UP: tl.constexpr, DOWN: tl.constexpr, TAPS: tl.constexpr, BLOCK_SIZE: tl.constexpr):
        offsets, active, out_x, out_y, plane, base = _output_pixels(total, height, width, out_height, out_width,
                                                                    BLOCK_SIZE)
        acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
        for ty in tl.static_range(TAPS):
            up_y = out_y * DOWN + ty - pad_y0
            in_y = up_y // UP
            ok_y = (up_y >= 0) & (up_y % UP == 0) & (in_y < height)
            weight_y = tl.load(f_ptr + ty)
            for tx in tl.static_range(TAPS):
                up_x = out_x * DOWN + tx - pad_x0
                in_x = up_x // UP
                ok = active & ok_y & (up_x >= 0) & (up_x % UP == 0) & (in_x < width)
                value = tl.load(x_ptr + base + in_y * width + in_x, mask=ok, other=0.0).to(tl.float32)
                acc += value * (weight_y * tl.load(f_ptr + tx))
        tl.store(y_ptr + offsets, acc.to(y_ptr.dtype.element_ty), mask=active)

    @triton.jit
    def _bias_act_kernel(x_ptr, b_ptr, y_ptr, total, channels, plane_size, gain, slope, clamp,
                         HAS_BIAS: tl.constexpr, LRELU: tl.constexpr, HAS_CLAMP: tl.constexpr,
                         BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        active = offsets < total
        value = tl.load(x_ptr + offsets, mask=active, other=0.0).to(tl.float32)
        if HAS_BIAS:
            value += tl.load(b_ptr + (offsets // plane_size) % channels, mask=active, other=0.0).to(tl.float32)
        if LRELU:
            value = tl.where(value > 0, value, value * slope)
        value = value * gain
        if HAS_CLAMP:
            value = tl.minimum(tl.maximum(value, -clamp), clamp)
        tl.store(y_ptr + offsets, value.to(y_ptr.dtype.element_ty), mask=active)

    @triton.jit
    def _bias_act_grad_kernel(g_ptr, y_ptr, dx_ptr, total, gain, slope, clamp, LRELU: tl.constexpr,
                              HAS_CLAMP: tl.constexpr, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        active = offsets < total
        grad = tl.load(g_ptr + offsets, mask=active, other=0.0).to(tl.float32)
        out = tl.load(y_ptr + offsets, mask=active, other=0.0).to(tl.float32)
        scale = gain
        if LRELU:
            # gain > 0, so the output's sign is the pre-activation's.
            scale = tl.where(out > 0, gain, gain * slope)
        grad = grad * scale
        if HAS_CLAMP:
            grad = tl.where(tl.abs(out) >= clamp, 0.0, grad)
        tl.store(dx_ptr + offsets, grad.to(dx_ptr.dtype.element_ty), mask=active)

    @triton.jit
    def _filtered_lrelu_kernel(x_ptr, b_ptr, fu_ptr, fd_ptr, y_ptr, channels, height, width, out_height,
                               out_width, total, pad_x0, pad_y0, slope, clamp, HAS_BIAS: tl.constexpr,
                               HAS_CLAMP: tl.constexpr, UP: tl.constexpr, DOWN: tl.constexpr,
                               UP_TAPS: tl.constexpr, DOWN_TAPS: tl.constexpr, BLOCK_SIZE: tl.constexpr):
        offsets, active, out_x, out_y, plane, base = _output_pixels(total, height, width, out_height, out_width,
                                                                    BLOCK_SIZE)
        bias = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
        if HAS_BIAS:
            bias = tl.load(b_ptr + plane % channels, mask=active, other=0.0).to(tl.float32)
        acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
        for dy in tl.static_range(DOWN_TAPS):
            sample_y = out_y * DOWN + dy  # row of the upsampled, filtered signal
            first_y = ((pad_y0 - sample_y) % UP + UP) % UP  # first up tap meeting an input row (polyphase)
            for dx in tl.static_range(DOWN_TAPS):
                sample_x = out_x * DOWN + dx
                first_x = ((pad_x0 - sample_x) % UP + UP) % UP
                upsampled = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
                for sy in tl.static_range((UP_TAPS + UP - 1) // UP):
                    ty = first_y + sy * UP
                    in_y = (sample_y + ty - pad_y0) // UP
                    ok_y = (ty < UP_TAPS) & (sample_y + ty - pad_y0 >= 0) & (in_y < height)
                    weight_y = tl.load(fu_ptr + ty, mask=active & (ty < UP_TAPS), other=0.0)
                    for sx in tl.static_range((UP_TAPS + UP - 1) // UP):
                        tx = first_x + sx * UP
                        in_x = (sample_x + tx - pad_x0) // UP
                        ok = active & ok_y & (tx < UP_TAPS) & (sample_x + tx - pad_x0 >= 0) & (in_x < width)
                        value = tl.load(x_ptr + base + in_y * width + in_x, mask=ok, other=0.0).to(tl.float32)
                        value = tl.where(ok, value + bias, 0.0)
                        weight_x = tl.load(fu_ptr + tx, mask=active & (tx < UP_TAPS), other=0.0)
                        upsampled += value * weight_y * weight_x
                activated = tl.where(upsampled > 0, upsampled, upsampled * slope)
                if HAS_CLAMP:
                    activated = tl.minimum(tl.maximum(activated, -clamp), clamp)
                acc += activated * (tl.load(fd_ptr + dy) * tl.load(fd_ptr + dx))
        tl.store(y_ptr + offsets, acc.to(y_ptr.dtype.element_ty), mask=active)


def _grid(total: int):
    return (triton.cdiv(total, BLOCK),)


def _taps_tensor(taps: tuple[float, ...], like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(taps, dtype=torch.float32, device=like.device)


def _launch_upfirdn2d(x: torch.Tensor, taps: tuple[float, ...], up: int, down: int,
                      padding: tuple[int, int, int, int]) -> torch.Tensor:
    _require(x)
    x = x.contiguous()
    batch, channels, height, width = x.shape
    pad_x0, pad_x1, pad_y0, pad_y1 = padding
    out_height = reference.upfirdn2d_output_size(height, len(taps), up, down, pad_y0, pad_y1)
    out_width = reference.upfirdn2d_output_size(width, len(taps), up, down, pad_x0, pad_x1)
    if out_height < 1 or out_width < 1:
        raise ValueError(f"upfirdn2d output would be empty: input {height}x{width}, taps {len(taps)}, up {up}, "
                         f"down {down}, padding {padding}")
    y = x.new_empty(batch, channels, out_height, out_width)
    total = y.numel()
    _upfirdn2d_kernel[_grid(total)](x, _taps_tensor(taps, x), y, height, width, out_height, out_width, total,
                                    pad_x0, pad_y0, UP=up, DOWN=down, TAPS=len(taps), BLOCK_SIZE=BLOCK)
    return y


# Kernels cannot take vmap's batched tensors: no generated vmap rule.
_TritonUpFirDn2d = fast.linear_upfirdn2d_function(_launch_upfirdn2d, generate_vmap_rule=False)


def upfirdn2d(x: torch.Tensor, filter_1d: torch.Tensor | None, up: int = 1, down: int = 1,
              padding: tuple[int, int, int, int] = (0, 0, 0, 0), gain: float = 1.0) -> torch.Tensor:
    """Triton upfirdn2d; same contract as :func:`.reference.upfirdn2d`."""
    padding = reference.check_padding(padding)
    if filter_1d is None:
        filter_1d = torch.ones(1)
    return _TritonUpFirDn2d.apply(x, fast._correlation_taps(filter_1d, gain), int(up), int(down), padding)


def _launch_bias_act(x: torch.Tensor, bias: torch.Tensor | None, activation: str, gain: float,
                     clamp: float | None) -> torch.Tensor:
    _require(x)
    x = x.contiguous()
    y = torch.empty_like(x)
    total = x.numel()
    plane = x[0, 0].numel() if x.shape[1] else 1
    b = bias.contiguous() if bias is not None else x.new_zeros(1)
    _bias_act_kernel[_grid(total)](x, b, y, total, x.shape[1], plane, float(gain), LEAKY_RELU_SLOPE,
                                   float(clamp if clamp is not None else 0.0), HAS_BIAS=bias is not None,
                                   LRELU=activation == "lrelu", HAS_CLAMP=clamp is not None, BLOCK_SIZE=BLOCK)
    return y


class _TritonBiasAct(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias, activation, gain, clamp):
        y = _launch_bias_act(x, bias, activation, gain, clamp)
        ctx.save_for_backward(x, bias, y)
        ctx.params = (activation, gain, clamp)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, bias, y = ctx.saved_tensors
        activation, gain, clamp = ctx.params
        if torch.is_grad_enabled():
            # Double backward requested (create_graph=True): recompute through the differentiable reference.
            with torch.enable_grad():
                x_ = x.detach().requires_grad_(True)
                b_ = bias.detach().requires_grad_(True) if bias is not None else None
                out = reference.bias_act(x_, b_, activation, gain, clamp)
                inputs = (x_,) if b_ is None else (x_, b_)
                grads = torch.autograd.grad(out, inputs, grad, create_graph=True)
            return grads[0], (grads[1] if b_ is not None else None), None, None, None
        grad = grad.contiguous()
        grad_x = torch.empty_like(grad)
        total = grad.numel()
        _bias_act_grad_kernel[_grid(total)](grad, y, grad_x, total, float(gain), LEAKY_RELU_SLOPE,
                                            float(clamp if clamp is not None else 0.0),
                                            LRELU=activation == "lrelu", HAS_CLAMP=clamp is not None,
                                            BLOCK_SIZE=BLOCK)
        grad_bias = None
        if bias is not None and ctx.needs_input_grad[1]:
            grad_bias = grad_x.sum(dim=[0] + list(range(2, grad_x.ndim))).to(bias.dtype)
        return grad_x, grad_bias, None, None, None


def bias_act(x: torch.Tensor, bias: torch.Tensor | None = None, activation: str = "linear", gain: float = 1.0,
             clamp: float | None = None) -> torch.Tensor:
    """Triton bias + activation; same contract as :func:`.reference.bias_act` (gain must be positive)."""
    if activation not in reference.ACTIVATIONS:
        raise ValueError(f"activation must be one of {reference.ACTIVATIONS}, got {activation!r}")
    if gain <= 0:
        raise ValueError(f"the Triton bias_act needs a positive gain, got {gain}")
    return _TritonBiasAct.apply(x, bias, activation, float(gain), clamp)


def _launch_filtered_lrelu(x, bias, up_taps, down_taps, up, down, padding, slope, clamp_scaled):
    _require(x)
    x = x.contiguous()
    batch, channels, height, width = x.shape
    pad_x0, pad_x1, pad_y0, pad_y1 = padding
    up_height = height * up + pad_y0 + pad_y1 - len(up_taps) + 1
    up_width = width * up + pad_x0 + pad_x1 - len(up_taps) + 1
    out_height = (up_height - len(down_taps)) // down + 1
    out_width = (up_width - len(down_taps)) // down + 1
    y = x.new_empty(batch, channels, out_height, out_width)
    total = y.numel()
    b = bias.contiguous() if bias is not None else x.new_zeros(1)
    _filtered_lrelu_kernel[_grid(total)](
        x, b, _taps_tensor(up_taps, x), _taps_tensor(down_taps, x), y, channels, height, width, out_height,
        out_width, total, pad_x0, pad_y0, float(slope), float(clamp_scaled if clamp_scaled is not None else 0.0),
        HAS_BIAS=bias is not None, HAS_CLAMP=clamp_scaled is not None, UP=up, DOWN=down, UP_TAPS=len(up_taps),
        DOWN_TAPS=len(down_taps), BLOCK_SIZE=BLOCK)
    return y


class _TritonFilteredLReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias, up_filter, down_filter, up, down, padding, gain, slope, clamp):
        up_taps = fast._correlation_taps(up_filter, up * up)
        down_taps = fast._correlation_taps(down_filter, gain)  # the activation gain rides on the down filter
        y = _launch_filtered_lrelu(x, bias, up_taps, down_taps, up, down, padding, slope,
                                   None if clamp is None else clamp / gain)
        ctx.save_for_backward(x, bias, up_filter, down_filter)
        ctx.params = (up, down, padding, gain, slope, clamp)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, bias, up_filter, down_filter = ctx.saved_tensors
        up, down, padding, gain, slope, clamp = ctx.params
        create_graph = torch.is_grad_enabled()
        grad_x_chunks, grad_bias_chunks = [], []
        # Recompute per chunk of channels so that only one chunk's upsampled tensor is in memory.
        for start in range(0, x.shape[1], FILTERED_LRELU_CHANNEL_CHUNK):
            stop = min(start + FILTERED_LRELU_CHANNEL_CHUNK, x.shape[1])
            with torch.enable_grad():
                x_ = x[:, start:stop].detach().requires_grad_(True)
                b_ = bias[start:stop].detach().requires_grad_(True) if bias is not None else None
                out = fast.filtered_lrelu(x_, up_filter, down_filter, b_, up, down, padding, gain, slope, clamp)
                inputs = (x_,) if b_ is None else (x_, b_)
                grads = torch.autograd.grad(out, inputs, grad[:, start:stop], create_graph=create_graph)
            grad_x_chunks.append(grads[0])
            if b_ is not None:
                grad_bias_chunks.append(grads[1])
        grad_bias = torch.cat(grad_bias_chunks) if grad_bias_chunks else None
        return torch.cat(grad_x_chunks, dim=1), grad_bias, None, None, None, None, None, None, None, None


def filtered_lrelu(x: torch.Tensor, up_filter: torch.Tensor | None, down_filter: torch.Tensor | None,
                   bias: torch.Tensor | None = None, up: int = 1, down: int = 1,
                   padding: tuple[int, int, int, int] = (0, 0, 0, 0), gain: float = LEAKY_RELU_GAIN,
                   slope: float = LEAKY_RELU_SLOPE, clamp: float | None = None) -> torch.Tensor:
    """Fused Triton filtered leaky ReLU; same contract as :func:`.reference.filtered_lrelu` (gain > 0)."""
    padding = reference.check_padding(padding)
    if up_filter is None or down_filter is None or gain <= 0:
        return reference.filtered_lrelu(x, up_filter, down_filter, bias, up, down, padding, gain, slope, clamp)
    return _TritonFilteredLReLU.apply(x, bias, up_filter, down_filter, int(up), int(down), padding, float(gain),
                                      float(slope), clamp)
