"""Fast pure-PyTorch resampling for CPU (and any device): polyphase filtering, no zero insertion, no upsampled copy.

Every resampling step of StyleGAN is ``upfirdn2d``: zero insertion by ``up``, padding, a separable FIR filter and
keeping every ``down``-th sample. Along one axis, output sample ``j = P i + e`` (``P = up / gcd(up, down)``
phases) only ever meets the taps ``t = t_e, t_e + up, ...`` of the filter, applied to input samples
``M i + c_e + s`` (``M = down / gcd(up, down)``). All phases therefore come out of *one* depthwise convolution of
the input with a channel multiplier of ``P`` (one short sub-filter per phase) and stride ``M``, followed by an
interleave. This multiplies no inserted zeros (``up`` times fewer multiply-adds than zero insertion) and never
materialises the zero-inserted tensor.

* :func:`upfirdn2d`: same contract as :func:`~anonpaper.models.stylegan.ops.reference.upfirdn2d`; wrapped in an
  ``autograd.Function`` whose backward is again ``upfirdn2d`` (the adjoint: flipped filter, ``up`` and ``down``
  swapped), so every derivative order costs one resampling and no depthwise-weight gradient is ever computed.
  Forward-mode AD (``torch.func.jvp``) and ``vmap`` are supported (the op is linear).
* Small images (side after upsampling up to ``MATRIX_MAX_LENGTH`` = 320, every CPU config) use dense
  resampling matrices instead: ``upfirdn2d(x) = M_y @ x @ M_x^T`` with the zero insertion, padding, filter and
  decimation all inside ``M`` (one GEMM per axis), through the same ``autograd.Function`` (adjoint backward, so
  every derivative order; its jvp is one resampling of the tangent, where plain matmul's forward-mode rule under
  ``vmap`` also multiplies the constant matrix's zero tangent and adds it).
* :func:`filtered_lrelu`: matrices up, leaky ReLU, strided depthwise convolutions down, for small images; the
  reference formulation otherwise, or (``POLYPHASE_FILTERED_LRELU``) StyleGAN3's filtered leaky ReLU kept in the
  polyphase domain from end to end: the
  upsampled signal lives as ``up ** 2`` phase images at the input's resolution (the leaky ReLU is pointwise, so it
  applies to the phases directly), and the downsampling filter reads the phases with a grouped convolution that
  sums over them. There is no interleave of the upsampled signal, no padding copy of it, and the activation gain
  is folded into the downsampling taps.
* :func:`bias_act`: bias + leaky ReLU + gain in two passes (the gain is folded into the bias add).

All functions give the reference results up to float rounding (tested in ``tests/test_stylegan_ops.py``).
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from anonpaper.models.stylegan.ops import reference
from anonpaper.models.stylegan.ops.reference import LEAKY_RELU_GAIN, LEAKY_RELU_SLOPE


@functools.lru_cache(maxsize=4096)
def _axis_plan(taps: tuple[float, ...], up: int, down: int, pad_lo: int, pad_hi: int, length: int,
               count: int | None = None):
    """Polyphase plan of one axis of upfirdn2d with *correlation* taps ``taps`` (already flipped and scaled).

    Output ``z[j] = sum_t taps[t] u[down * j + t - pad_lo]`` with ``u`` the zero-inserted input. Returns
    ``(kernel, phases, stride, start, span, out_length, per_phase)``: ``kernel`` is a (phases, S) nested tuple of
    sub-filters aligned to a common offset, the input must be read from index ``start`` over ``span`` samples
    (zeros outside [0, length)), and the convolution gives ``per_phase`` samples of each phase (``count`` forces a
    larger number, e.g. for a following polyphase step).
    """
    size = len(taps)
    out_length = (length * up + pad_lo + pad_hi - size) // down + 1
    common = math.gcd(up, down)
    phases, stride = up // common, down // common
    offsets, subfilters = [], []
    for phase in range(phases):
        first = (pad_lo - down * phase) % up
        offsets.append((down * phase + first - pad_lo) // up)
        subfilters.append(taps[first::up])
    start = min(offsets)
    span_kernel = max(1, max(o - start + len(s) for o, s in zip(offsets, subfilters)))
    kernel = [[0.0] * span_kernel for _ in range(phases)]
    for phase, (offset, sub) in enumerate(zip(offsets, subfilters)):
        for index, value in enumerate(sub):
            kernel[phase][offset - start + index] = value
    per_phase = -(-out_length // phases)
    if count is not None:
        per_phase = max(per_phase, count)
    span = stride * (per_phase - 1) + span_kernel
    return tuple(map(tuple, kernel)), phases, stride, start, span, out_length, per_phase


def _window(x: torch.Tensor, axis: int, start: int, span: int) -> torch.Tensor:
    """``x`` along ``axis`` from ``start`` over ``span`` samples, zeros outside the tensor (a view when inside)."""
    length = x.shape[axis]
    lo, hi = max(start, 0), min(start + span, length)
    pad_lo, pad_hi = lo - start, start + span - hi
    if hi <= lo:
        shape = list(x.shape)
        shape[axis] = span
        return x.new_zeros(shape)
    x = x.narrow(axis, lo, hi - lo)
    if pad_lo or pad_hi:
        x = F.pad(x, [pad_lo, pad_hi, 0, 0] if axis == 3 else [0, 0, pad_lo, pad_hi])
    return x


def _depthwise_weight(kernel, channels: int, axis: int, like: torch.Tensor) -> torch.Tensor:
    """(channels * phases, 1, 1, S) or (channels * phases, 1, S, 1) weight repeating the phase kernels."""
    weight = torch.tensor(kernel, dtype=like.dtype, device=like.device)  # (phases, S)
    phases, span = weight.shape
    weight = weight.repeat(channels, 1)
    return weight.view(channels * phases, 1, 1, span) if axis == 3 else weight.view(channels * phases, 1, span, 1)


def _resample_axis(x: torch.Tensor, taps: tuple[float, ...], up: int, down: int, pad_lo: int, pad_hi: int,
                   axis: int, interleave: bool = True, count: int | None = None) -> torch.Tensor:
    """One axis of upfirdn2d (axis 3: width, 2: height) by a depthwise convolution with phase multiplier."""
    channels = x.shape[1]
    kernel, phases, stride, start, span, out_length, per_phase = _axis_plan(
        taps, up, down, pad_lo, pad_hi, x.shape[axis], count)
    x = _window(x, axis, start, span)
    weight = _depthwise_weight(kernel, channels, axis, x)
    y = F.conv2d(x, weight, groups=channels, stride=(1, stride) if axis == 3 else (stride, 1))
    if not interleave or phases == 1:
        return y.narrow(axis, 0, out_length) if phases == 1 else y
    batch, _, height, width = y.shape
    if axis == 3:
        y = y.view(batch, channels, phases, height, width).permute(0, 1, 3, 4, 2)
        y = y.reshape(batch, channels, height, width * phases)
    else:
        y = y.view(batch, channels, phases, height, width).permute(0, 1, 3, 2, 4)
        y = y.reshape(batch, channels, height * phases, width)
    return y.narrow(axis, 0, out_length)


def _correlation_taps(filter_1d: torch.Tensor, gain: float) -> tuple[float, ...]:
    """Filter flipped (upfirdn2d convolves) and scaled by sqrt(gain) (half of the 2-D gain on each axis)."""
    scale = math.sqrt(gain)
    return tuple(float(v) * scale for v in filter_1d.detach().reshape(-1).flip(0).cpu().tolist())


MATRIX_MAX_LENGTH = 320
# Above MATRIX_MAX_LENGTH the filtered leaky ReLU runs the reference formulation unless this is set: its
# all-polyphase version (grouped convolutions over the phases) is exact but measured 2x slower than the reference
# on CPU (1 thread, sg3t-cpu64 sizes forced through it); it is kept, tested, for GPU measurements.
POLYPHASE_FILTERED_LRELU = False


@functools.lru_cache(maxsize=1024)
def _resampling_matrix_cpu(taps: tuple[float, ...], up: int, down: int, pad_lo: int, pad_hi: int,
                           length: int) -> torch.Tensor:
    """(out_length, length) float64 matrix of one axis of upfirdn2d: ``z = M @ x``.

    ``M[j, n] = taps[up * n - down * j + pad_lo]`` where that index is a valid tap (correlation taps): zero
    insertion, padding, cropping and decimation are all encoded in which taps land where.
    """
    size = len(taps)
    out_length = (length * up + pad_lo + pad_hi - size) // down + 1
    index = up * torch.arange(length)[None, :] - down * torch.arange(out_length)[:, None] + pad_lo
    values = torch.tensor(taps, dtype=torch.float64)
    valid = (index >= 0) & (index < size)
    return torch.where(valid, values[index.clamp(0, size - 1)], torch.zeros((), dtype=torch.float64))


_MATRIX_CACHE: dict = {}


def _resampling_matrix(taps, up, down, pad_lo, pad_hi, length, like: torch.Tensor) -> torch.Tensor:
    """:func:`_resampling_matrix_cpu` in ``like``'s dtype and device (cached per device and dtype)."""
    key = (taps, up, down, pad_lo, pad_hi, length, like.dtype, like.device)
    matrix = _MATRIX_CACHE.get(key)
    if matrix is None:
        if len(_MATRIX_CACHE) > 1024:
            _MATRIX_CACHE.clear()
        matrix = _resampling_matrix_cpu(taps, up, down, pad_lo, pad_hi, length).to(device=like.device,
                                                                                   dtype=like.dtype)
        _MATRIX_CACHE[key] = matrix
    return matrix


def _use_matrices(x: torch.Tensor, up: int) -> bool:
    """Dense resampling matrices for the small images of the CPU configs (a GEMM beats a depthwise conv there)."""
    return max(x.shape[2], x.shape[3]) * max(up, 1) <= MATRIX_MAX_LENGTH


def _upfirdn2d_matrices(x: torch.Tensor, taps: tuple[float, ...], up: int, down: int,
                        padding: tuple[int, int, int, int]) -> torch.Tensor:
    """upfirdn2d as two matrix products, ``M_y @ x @ M_x^T`` (the launcher of ``_MatrixUpFirDn2d``)."""
    pad_x0, pad_x1, pad_y0, pad_y1 = padding
    matrix_x = _resampling_matrix(taps, up, down, pad_x0, pad_x1, x.shape[3], x)
    matrix_y = _resampling_matrix(taps, up, down, pad_y0, pad_y1, x.shape[2], x)
    return torch.matmul(matrix_y, torch.matmul(x, matrix_x.t()))


def _upfirdn2d_polyphase(x: torch.Tensor, taps: tuple[float, ...], up: int, down: int,
                         padding: tuple[int, int, int, int]) -> torch.Tensor:
    pad_x0, pad_x1, pad_y0, pad_y1 = padding
    x = _resample_axis(x, taps, up, down, pad_x0, pad_x1, axis=3)
    return _resample_axis(x, taps, up, down, pad_y0, pad_y1, axis=2)


def adjoint_upfirdn2d(taps: tuple[float, ...], up: int, down: int, padding: tuple[int, int, int, int], height: int,
                      width: int, grad_shape) -> tuple:
    """Arguments ``(taps, up, down, padding)`` of the upfirdn2d that is the adjoint (the backward) of one.

    Along one axis the adjoint zero-inserts by ``down``, correlates with the flipped taps starting at
    ``taps - 1 - pad_lo`` and keeps every ``up``-th sample; ``pad_hi`` makes the output exactly the forward
    input's length (``height`` / ``width``). ``grad_shape`` is the (N, C, H', W') shape of the forward output.
    """
    size = len(taps)
    adj_x0, adj_y0 = size - 1 - padding[0], size - 1 - padding[2]
    adj_x1 = (width - 1) * up + size - grad_shape[3] * down - adj_x0
    adj_y1 = (height - 1) * up + size - grad_shape[2] * down - adj_y0
    return taps[::-1], down, up, (adj_x0, adj_x1, adj_y0, adj_y1)


def linear_upfirdn2d_function(launcher, generate_vmap_rule: bool):
    """An ``autograd.Function`` running ``launcher(x, taps, up, down, padding)`` whose backward is the adjoint
    upfirdn2d and whose jvp is the forward on the tangent (the op is linear in ``x``), both through the same
    Function, so every derivative order stays on ``launcher``."""

    class UpFirDn2dFunction(torch.autograd.Function):
        @staticmethod
        def forward(x, taps, up, down, padding):
            return launcher(x, taps, up, down, padding)

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, taps, up, down, padding = inputs
            ctx.params = (taps, up, down, padding, x.shape[2], x.shape[3])

        @staticmethod
        def backward(ctx, grad):
            adjoint = adjoint_upfirdn2d(*ctx.params, grad.shape)
            return UpFirDn2dFunction.apply(grad, *adjoint), None, None, None, None

        @staticmethod
        def jvp(ctx, x_tangent, *_):
            taps, up, down, padding, _, _ = ctx.params
            return UpFirDn2dFunction.apply(x_tangent, taps, up, down, padding)

    UpFirDn2dFunction.generate_vmap_rule = generate_vmap_rule
    return UpFirDn2dFunction


_UpFirDn2d = linear_upfirdn2d_function(_upfirdn2d_polyphase, generate_vmap_rule=True)
# The matrix form through the same Function: under torch.func's vmap(jvp) (the S-space Jacobian) plain matmul's
# forward-mode rule adds a product with the constant matrix's (zero) tangent; the Function's jvp is one resampling.
_MatrixUpFirDn2d = linear_upfirdn2d_function(_upfirdn2d_matrices, generate_vmap_rule=True)


def upfirdn2d(x: torch.Tensor, filter_1d: torch.Tensor | None, up: int = 1, down: int = 1,
              padding: tuple[int, int, int, int] = (0, 0, 0, 0), gain: float = 1.0) -> torch.Tensor:
    """Polyphase upfirdn2d; same arguments, shapes and result as the reference (up to float rounding).

    Args:
        x: (N, C, H, W) float tensor.
        filter_1d: (taps,) filter or None (identity).
        up: Integer upsampling factor.
        down: Integer downsampling factor.
        padding: (x_lo, x_hi, y_lo, y_hi) after upsampling; negative crops.
        gain: Overall gain of the 2-D filter.

    Returns:
        (N, C, H', W') tensor of the input's dtype.
    """
    padding = reference.check_padding(padding)
    if filter_1d is None:
        filter_1d = torch.ones(1)
    taps = _correlation_taps(filter_1d, gain)
    if _use_matrices(x, up):
        return _MatrixUpFirDn2d.apply(x, taps, int(up), int(down), padding)
    return _UpFirDn2d.apply(x, taps, int(up), int(down), padding)


@functools.lru_cache(maxsize=1024)
def _down_phase_plan(taps: tuple[float, ...], up: int, down: int, length_up: int):
    """Grouped-conv kernel reading ``up`` phases of a signal of length ``length_up`` and downsampling by ``down``.

    ``z[j] = sum_t taps[t] b[down * j + t]`` with ``b[up * q + r]`` stored as phase ``r``. Output phase ``e`` of
    ``k = up / down`` (``j = k i + e``) uses ``b_r[i + o]`` with ``down * e + t = up * o + r``.

    Returns:
        ``(kernel, k, out_length, per_phase, span)``: ``kernel`` is (k, up, span) nested tuples.
    """
    size = len(taps)
    k = up // down
    out_length = (length_up - size) // down + 1
    span = (down * (k - 1) + size - 1) // up + 1
    kernel = [[[0.0] * span for _ in range(up)] for _ in range(k)]
    for phase in range(k):
        for t, value in enumerate(taps):
            n = down * phase + t
            kernel[phase][n % up][n // up] += value
    per_phase = -(-out_length // k)
    return tuple(tuple(map(tuple, rows)) for rows in kernel), k, out_length, per_phase, span


def filtered_lrelu(x: torch.Tensor, up_filter: torch.Tensor | None, down_filter: torch.Tensor | None,
                   bias: torch.Tensor | None = None, up: int = 1, down: int = 1,
                   padding: tuple[int, int, int, int] = (0, 0, 0, 0), gain: float = LEAKY_RELU_GAIN,
                   slope: float = LEAKY_RELU_SLOPE, clamp: float | None = None) -> torch.Tensor:
    """StyleGAN3's filtered leaky ReLU in the polyphase domain; same contract as the reference.

    Falls back to the reference when ``up`` is not a multiple of ``down`` or a filter has a single tap.

    Args: see :func:`anonpaper.models.stylegan.ops.reference.filtered_lrelu`.

    Returns:
        (N, C, H', W') tensor.
    """
    padding = reference.check_padding(padding)
    if (up_filter is None or down_filter is None or up_filter.numel() < 2 or down_filter.numel() < 2
            or up < 2 or up % down or (not _use_matrices(x, up) and not POLYPHASE_FILTERED_LRELU)):
        return reference.filtered_lrelu(x, up_filter, down_filter, bias, up, down, padding, gain, slope, clamp)
    batch, channels, height, width = x.shape
    up_taps = _correlation_taps(up_filter, up * up)
    # The activation gain is folded into the (linear) downsampling filter: lrelu(v) * g = g * lrelu(v).
    down_taps = _correlation_taps(down_filter, gain)
    if _use_matrices(x, up):
        if bias is not None:
            x = x + bias.to(x.dtype)[None, :, None, None]
        u = _MatrixUpFirDn2d.apply(x, up_taps, up, 1, padding)
        u = F.leaky_relu(u, slope) if torch.is_grad_enabled() else F.leaky_relu_(u, slope)
        if clamp is not None:
            u = u.clamp(-clamp / gain, clamp / gain)
        # Downsampling by strided depthwise convolutions (only the kept outputs are computed).
        u = _resample_axis(u, down_taps, 1, down, 0, 0, axis=3)
        return _resample_axis(u, down_taps, 1, down, 0, 0, axis=2)
    pad_x0, pad_x1, pad_y0, pad_y1 = padding
    plans = []
    for length, pad_lo, pad_hi in ((width, pad_x0, pad_x1), (height, pad_y0, pad_y1)):
        length_up = length * up + pad_lo + pad_hi - len(up_taps) + 1
        down_plan = _down_phase_plan(down_taps, up, down, length_up)
        needed = down_plan[3] + down_plan[4] - 1
        plans.append((pad_lo, pad_hi, down_plan, needed))
    if bias is not None:
        x = x + bias.to(x.dtype)[None, :, None, None]
    # Upsample: phases stacked in channels, order (c, phase_x, phase_y); nothing interleaved.
    (px0, px1, plan_x, need_x), (py0, py1, plan_y, need_y) = plans
    u = _resample_axis(x, up_taps, up, 1, px0, px1, axis=3, interleave=False, count=need_x)
    u = _resample_axis(u, up_taps, up, 1, py0, py1, axis=2, interleave=False, count=need_y)
    u = u.narrow(2, 0, need_y).narrow(3, 0, need_x)
    u = F.leaky_relu(u, slope) if u.requires_grad or torch.is_grad_enabled() else F.leaky_relu_(u, slope)
    if clamp is not None:
        u = u.clamp(-clamp / gain, clamp / gain)
    # Downsample along y: groups (c, phase_x), each reading its `up` y-phases.
    kernel_y, k_y, length_y, per_y, span_y = plan_y
    weight = torch.tensor(kernel_y, dtype=u.dtype, device=u.device)  # (k, up, span)
    weight = weight.repeat(channels * up, 1, 1).unsqueeze(3)
    d = F.conv2d(u, weight, groups=channels * up)  # (N, C * up * k_y, per_y, need_x), order (c, phase_x, e_y)
    if k_y > 1:
        d = d.view(batch, channels, up, k_y, per_y, need_x).transpose(2, 3).reshape(
            batch, channels * k_y * up, per_y, need_x)
    kernel_x, k_x, length_x, per_x, span_x = plan_x
    weight = torch.tensor(kernel_x, dtype=u.dtype, device=u.device)
    weight = weight.repeat(channels * k_y, 1, 1).unsqueeze(2)
    d = F.conv2d(d, weight, groups=channels * k_y)  # (N, C * k_y * k_x, per_y, per_x), order (c, e_y, e_x)
    if k_y * k_x > 1:
        d = d.view(batch, channels, k_y, k_x, per_y, per_x).permute(0, 1, 4, 2, 5, 3)
        d = d.reshape(batch, channels, per_y * k_y, per_x * k_x)
    return d[:, :, :length_y, :length_x]


def bias_act(x: torch.Tensor, bias: torch.Tensor | None = None, activation: str = "linear", gain: float = 1.0,
             clamp: float | None = None) -> torch.Tensor:
    """Bias + activation + gain (+ clamp) with the gain folded into the bias add; same contract as the reference."""
    if activation not in reference.ACTIVATIONS:
        raise ValueError(f"activation must be one of {reference.ACTIVATIONS}, got {activation!r}")
    if bias is None:
        return reference.bias_act(x, None, activation, gain, clamp)
    # gain * act(x + b) == act(gain * x + gain * b) for gain > 0 (leaky ReLU is positively homogeneous).
    if gain > 0:
        b = bias.to(x.dtype).reshape([1, -1] + [1] * (x.ndim - 2))
        y = torch.add(b * gain, x, alpha=gain) if gain != 1.0 else x + b
        if activation == "lrelu":
            y = F.leaky_relu_(y, LEAKY_RELU_SLOPE)
        return y.clamp(-clamp, clamp) if clamp is not None else y
    return reference.bias_act(x, bias, activation, gain, clamp)
