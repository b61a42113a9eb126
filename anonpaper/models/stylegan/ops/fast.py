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
  is folded into the downsampling taps. A per-sample channel ``scale`` (the demodulation) and the bias are applied
  before the upsampling. Where the upsampled tensor is large (:data:`RECOMPUTE_MIN_ELEMENTS_PER_IMAGE`: every
  layer of sg3t-paper256) and a gradient is wanted, the op runs as :class:`_RecomputingFilteredLReLU`, which keeps
  only its input, scale and bias for backward and recomputes the upsampled tensor there (the plain formulation's
  autograd keeps it, ``up ** 2`` times the input, several times over).
* :func:`scaled_input_conv2d`: ``conv2d(x * scale, weight)`` (the style modulation) keeping ``x`` but not the
  product for backward.
* :func:`bias_act`: bias + leaky ReLU + gain in two passes (the gain is folded into the bias add).

All functions give the reference results up to float rounding (tested in ``tests/test_stylegan_ops.py``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

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
# The filtered leaky ReLU recomputes its upsampled tensor in backward instead of keeping it when that tensor has at
# least this many elements per image (8 MiB in float32): every layer of sg3t-paper256 (3.4 to 81 million), none of
# the CPU configs' (sg3t-tiny@64 at most 0.26, sg3t-cpu64 1.7 million), where keeping it costs little memory and
# recomputing it measured 10-30 % more CPU time for the generator's forward and backward (sg3t-tiny@64, batch 8).
RECOMPUTE_MIN_ELEMENTS_PER_IMAGE = 2 ** 21
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


@dataclass(frozen=True, eq=False)
class FilteredLReLUPlan:
    """What one filtered leaky ReLU call does, apart from the tensors it runs on (shared by forward and backward).

    Attributes:
        up_filter: (taps_up,) low-pass filter of the upsampling (a buffer of the layer; not differentiated).
        down_filter: (taps_down,) low-pass filter of the downsampling.
        up_taps: Correlation taps of the upsampling, its gain ``up ** 2`` inside (:func:`_correlation_taps`).
        down_taps: Correlation taps of the downsampling with the activation gain inside.
        up: Upsampling factor.
        down: Downsampling factor (divides ``up``).
        padding: (x_lo, x_hi, y_lo, y_hi) padding of the upsampling.
        gain: Gain after the leaky ReLU (it rides on ``down_taps``).
        slope: Negative slope of the leaky ReLU.
        clamp: Clamp of the activation after the gain, or None.
    """

    up_filter: torch.Tensor
    down_filter: torch.Tensor
    up_taps: tuple[float, ...]
    down_taps: tuple[float, ...]
    up: int
    down: int
    padding: tuple[int, int, int, int]
    gain: float
    slope: float
    clamp: float | None

    @property
    def activation_clamp(self) -> float | None:
        """Clamp of ``lrelu(u)`` before the gain: ``clamp(g * a, c) = g * clamp(a, c / g)``."""
        return None if self.clamp is None else self.clamp / self.gain


def _scale_and_bias(x: torch.Tensor, scale: torch.Tensor | None, bias: torch.Tensor | None) -> torch.Tensor:
    """``x * scale[:, :, None, None] + bias[None, :, None, None]`` (either may be None), in ``x``'s dtype."""
    if scale is not None and bias is not None:
        return torch.addcmul(bias.to(x.dtype)[None, :, None, None], x, scale.to(x.dtype)[:, :, None, None])
    if scale is not None:
        return x * scale.to(x.dtype)[:, :, None, None]
    if bias is not None:
        return x + bias.to(x.dtype)[None, :, None, None]
    return x


def _filtered_lrelu_forward(x: torch.Tensor, scale: torch.Tensor | None, bias: torch.Tensor | None,
                            plan: FilteredLReLUPlan) -> torch.Tensor:
    """The filtered leaky ReLU as plain differentiable PyTorch: resampling matrices for small images, the reference
    formulation (or, with ``POLYPHASE_FILTERED_LRELU``, the all-polyphase one) otherwise. Saves the upsampled
    tensor when autograd records it; :class:`_RecomputingFilteredLReLU` runs it with autograd off."""
    x = _scale_and_bias(x, scale, bias)
    up, down, slope = plan.up, plan.down, plan.slope
    if not _use_matrices(x, up) and not POLYPHASE_FILTERED_LRELU:
        return reference.filtered_lrelu(x, plan.up_filter, plan.down_filter, None, up, down, plan.padding,
                                        plan.gain, slope, plan.clamp)
    batch, channels, height, width = x.shape
    clamp = plan.activation_clamp
    if _use_matrices(x, up):
        u = _MatrixUpFirDn2d.apply(x, plan.up_taps, up, 1, plan.padding)
        u = F.leaky_relu(u, slope) if torch.is_grad_enabled() else F.leaky_relu_(u, slope)
        if clamp is not None:
            u = u.clamp(-clamp, clamp)
        # Downsampling by strided depthwise convolutions (only the kept outputs are computed).
        u = _resample_axis(u, plan.down_taps, 1, down, 0, 0, axis=3)
        return _resample_axis(u, plan.down_taps, 1, down, 0, 0, axis=2)
    pad_x0, pad_x1, pad_y0, pad_y1 = plan.padding
    plans = []
    for length, pad_lo, pad_hi in ((width, pad_x0, pad_x1), (height, pad_y0, pad_y1)):
        length_up = length * up + pad_lo + pad_hi - len(plan.up_taps) + 1
        down_plan = _down_phase_plan(plan.down_taps, up, down, length_up)
        needed = down_plan[3] + down_plan[4] - 1
        plans.append((pad_lo, pad_hi, down_plan, needed))
    # Upsample: phases stacked in channels, order (c, phase_x, phase_y); nothing interleaved.
    (px0, px1, plan_x, need_x), (py0, py1, plan_y, need_y) = plans
    u = _resample_axis(x, plan.up_taps, up, 1, px0, px1, axis=3, interleave=False, count=need_x)
    u = _resample_axis(u, plan.up_taps, up, 1, py0, py1, axis=2, interleave=False, count=need_y)
    u = u.narrow(2, 0, need_y).narrow(3, 0, need_x)
    u = F.leaky_relu(u, slope) if u.requires_grad or torch.is_grad_enabled() else F.leaky_relu_(u, slope)
    if clamp is not None:
        u = u.clamp(-clamp, clamp)
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


def _linear_upfirdn2d(x: torch.Tensor, taps: tuple[float, ...], up: int, down: int,
                      padding: tuple[int, int, int, int]) -> torch.Tensor:
    """One upfirdn2d with correlation taps outside autograd: matrices for small images, polyphase convs otherwise."""
    if _use_matrices(x, up):
        return _upfirdn2d_matrices(x, taps, up, down, padding)
    return _upfirdn2d_polyphase(x, taps, up, down, padding)


def _pre_activation(z: torch.Tensor, plan: FilteredLReLUPlan) -> torch.Tensor:
    """``up(z)``, the upsampled tensor before the leaky ReLU, by the same formulation as the forward's matrix and
    reference paths (so the recomputed signs are the forward's)."""
    if _use_matrices(z, plan.up):
        return _upfirdn2d_matrices(z, plan.up_taps, plan.up, 1, plan.padding)
    return reference.upfirdn2d(z, plan.up_filter, up=plan.up, padding=plan.padding, gain=plan.up ** 2)


def _times_activation_derivative(tangent: torch.Tensor, u: torch.Tensor, plan: FilteredLReLUPlan) -> torch.Tensor:
    """``tangent * d act(u) / du`` for ``act(u) = clamp(lrelu(u), +-clamp / gain)``: 1 where ``u > 0``, the slope
    elsewhere, 0 where the clamp cut (autograd's rules for leaky ReLU and clamp). Overwrites ``tangent``."""
    if plan.activation_clamp is not None:
        tangent = tangent.masked_fill_(F.leaky_relu(u, plan.slope).abs() > plan.activation_clamp, 0.0)
    return torch.where(u > 0, tangent, tangent * plan.slope)


def _pixel_sum(x: torch.Tensor, dims=(2, 3)) -> torch.Tensor:
    """Sum of (N, C, H, W) over ``dims`` (the gradient of a factor broadcast over them), accumulated and returned
    in at least float32 (a 16-bit sum over a 276 x 276 map loses the small terms)."""
    return x.sum(dim=dims, dtype=torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else None)


def _plain_gradients(plain, inputs: tuple, needs: tuple, grad: torch.Tensor) -> tuple:
    """The ``create_graph`` backward of a recomputing Function: recompute ``plain(*inputs)`` (a formulation autograd
    records) on the saved inputs and differentiate it with the graph kept, so every derivative order is exact.
    Returns a gradient (or None) per input, as ``needs`` asks."""
    with torch.enable_grad():
        wanted = [tensor for tensor, need in zip(inputs, needs) if need]
        grads = iter(torch.autograd.grad(plain(*inputs), wanted, grad, create_graph=True))
    return tuple(next(grads) if need else None for need in needs)


class _RecomputingFilteredLReLU(torch.autograd.Function):
    """The filtered leaky ReLU of ``z = x * scale + bias`` saving only ``x``, ``scale`` and ``bias`` for backward
    (not the ``up ** 2`` times larger upsampled tensor, which the plain formulation's leaky ReLU, clamp and
    downsampling convolutions each save, nor ``z``).

    First-order backward recomputes ``z`` and the pre-activation ``u = up(z)`` and applies the adjoints:
    ``grad_z = up^T(act'(u) * down^T(grad))``, then ``grad_x = grad_z * scale``, ``grad_scale = sum_pixels(grad_z
    * x)``, ``grad_bias = sum(grad_z)``: one upsampling more than autograd of the plain formulation, which keeps it.
    Double backward (``create_graph=True``, a penalty through the generator) differentiates the plain
    formulation, recomputed on the saved inputs, so every derivative order is exact; it holds the upsampled tensor
    of one layer at a time. ``jvp`` (forward-mode AD) recomputes ``u`` too; the vmap rule is generated.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(x, scale, bias, plan):
        return _filtered_lrelu_forward(x, scale, bias, plan)  # autograd is off inside forward: nothing is recorded

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, scale, bias, plan = inputs
        ctx.save_for_backward(x, scale, bias)
        ctx.save_for_forward(x, scale, bias)
        ctx.plan = plan

    @staticmethod
    def backward(ctx, grad):
        x, scale, bias = ctx.saved_tensors
        plan = ctx.plan
        needs = ctx.needs_input_grad[:3]
        if torch.is_grad_enabled():  # create_graph
            return *_plain_gradients(lambda *t: _filtered_lrelu_forward(*t, plan), (x, scale, bias), needs, grad), None
        u = _pre_activation(_scale_and_bias(x, scale, bias), plan)
        grad_u = _linear_upfirdn2d(grad, *adjoint_upfirdn2d(plan.down_taps, 1, plan.down, (0, 0, 0, 0), u.shape[2],
                                                            u.shape[3], grad.shape))
        grad_u = _times_activation_derivative(grad_u, u, plan)
        del u
        grad_z = _linear_upfirdn2d(grad_u, *adjoint_upfirdn2d(plan.up_taps, plan.up, 1, plan.padding, x.shape[2],
                                                              x.shape[3], grad_u.shape))
        del grad_u
        grad_x = grad_z * scale.to(grad_z.dtype)[:, :, None, None] if scale is not None and needs[0] else grad_z
        grad_scale = _pixel_sum(grad_z * x).to(scale.dtype) if needs[1] else None
        grad_bias = _pixel_sum(grad_z, (0, 2, 3)).to(bias.dtype) if needs[2] else None
        return grad_x if needs[0] else None, grad_scale, grad_bias, None

    @staticmethod
    def jvp(ctx, x_tangent, scale_tangent, bias_tangent, _plan):
        x, scale, bias = ctx.saved_tensors
        plan = ctx.plan
        # Tangent of z = x * scale + bias.
        tangent = torch.zeros_like(x) if x_tangent is None else _scale_and_bias(x_tangent, scale, None)
        if scale_tangent is not None:
            tangent = tangent + x * scale_tangent.to(x.dtype)[:, :, None, None]
        if bias_tangent is not None:
            tangent = tangent + bias_tangent.to(x.dtype)[None, :, None, None]
        u = _pre_activation(_scale_and_bias(x, scale, bias), plan)
        tangent_u = _times_activation_derivative(_linear_upfirdn2d(tangent, plan.up_taps, plan.up, 1, plan.padding),
                                                 u, plan)
        return _linear_upfirdn2d(tangent_u, plan.down_taps, 1, plan.down, (0, 0, 0, 0))


def filtered_lrelu(x: torch.Tensor, up_filter: torch.Tensor | None, down_filter: torch.Tensor | None,
                   bias: torch.Tensor | None = None, up: int = 1, down: int = 1,
                   padding: tuple[int, int, int, int] = (0, 0, 0, 0), gain: float = LEAKY_RELU_GAIN,
                   slope: float = LEAKY_RELU_SLOPE, clamp: float | None = None,
                   scale: torch.Tensor | None = None) -> torch.Tensor:
    """StyleGAN3's filtered leaky ReLU; same contract as the reference, without keeping a large upsampled tensor.

    When a gradient will be asked for (``x``, ``scale`` or ``bias`` requires grad) and the upsampled tensor has at
    least :data:`RECOMPUTE_MIN_ELEMENTS_PER_IMAGE` elements per image, runs :class:`_RecomputingFilteredLReLU`,
    which saves only ``x``, ``scale`` and ``bias`` for backward; otherwise the plain formulation (in inference and
    forward-mode AD on constants its upsampled tensor lives only inside the call). Falls back to the reference
    when ``up`` is not a multiple of ``down`` or a filter has a single tap.

    Args: see :func:`anonpaper.models.stylegan.ops.reference.filtered_lrelu`.

    Returns:
        (N, C, H', W') tensor.
    """
    padding = reference.check_padding(padding)
    if (up_filter is None or down_filter is None or up_filter.numel() < 2 or down_filter.numel() < 2
            or up < 2 or up % down):
        return reference.filtered_lrelu(x, up_filter, down_filter, bias, up, down, padding, gain, slope, clamp,
                                        scale)
    # The activation gain is folded into the (linear) downsampling filter: lrelu(v) * g = g * lrelu(v).
    plan = FilteredLReLUPlan(up_filter, down_filter, _correlation_taps(up_filter, up * up),
                             _correlation_taps(down_filter, gain), int(up), int(down), padding, float(gain),
                             float(slope), clamp)
    if (torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, scale, bias))
            and upsampled_elements_per_image(x.shape, up, padding, len(plan.up_taps))
            >= RECOMPUTE_MIN_ELEMENTS_PER_IMAGE):
        return _RecomputingFilteredLReLU.apply(x, scale, bias, plan)
    return _filtered_lrelu_forward(x, scale, bias, plan)


def upsampled_elements_per_image(shape, up: int, padding: tuple[int, int, int, int], taps: int) -> int:
    """Elements per image of the upsampled tensor of a filtered leaky ReLU: input ``shape`` (N, C, H, W), factor
    ``up``, (x_lo, x_hi, y_lo, y_hi) ``padding`` and ``taps`` taps of the upsampling filter."""
    pad_x0, pad_x1, pad_y0, pad_y1 = padding
    height = shape[-2] * up + pad_y0 + pad_y1 - taps + 1
    width = shape[-1] * up + pad_x0 + pad_x1 - taps + 1
    return shape[-3] * max(height, 0) * max(width, 0)


class _RecomputingScaledInputConv2d(torch.autograd.Function):
    """``conv2d(x * scale, weight)`` saving ``x``, ``scale`` and ``weight`` but not the product ``x * scale`` (which
    autograd of the plain formulation keeps beside ``x``); backward recomputes it (one multiply). Double backward
    differentiates the plain formulation on the saved inputs; ``jvp`` is the product rule; vmap rule generated."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, scale, weight, padding):
        return F.conv2d(x * scale[:, :, None, None], weight, padding=padding)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, scale, weight, padding = inputs
        ctx.save_for_backward(x, scale, weight)
        ctx.save_for_forward(x, scale, weight)
        ctx.padding = padding

    @staticmethod
    def backward(ctx, grad):
        x, scale, weight = ctx.saved_tensors
        needs = ctx.needs_input_grad[:3]
        if torch.is_grad_enabled():  # create_graph
            plain = lambda x_, s_, w_: F.conv2d(x_ * s_[:, :, None, None], w_, padding=ctx.padding)  # noqa: E731
            return *_plain_gradients(plain, (x, scale, weight), needs, grad), None
        scaled = x * scale[:, :, None, None]
        grad_scaled, grad_weight, _ = torch.ops.aten.convolution_backward(
            grad, scaled, weight, None, [1, 1], [ctx.padding, ctx.padding], [1, 1], False, [0, 0], 1,
            [needs[0] or needs[1], needs[2], False])
        del scaled
        grad_x = grad_scaled * scale[:, :, None, None] if needs[0] else None
        grad_scale = _pixel_sum(grad_scaled * x).to(scale.dtype) if needs[1] else None
        return grad_x, grad_scale, grad_weight, None

    @staticmethod
    def jvp(ctx, x_tangent, scale_tangent, weight_tangent, _padding):
        x, scale, weight = ctx.saved_tensors
        scaled_tangent = None
        if x_tangent is not None:
            scaled_tangent = x_tangent * scale[:, :, None, None]
        if scale_tangent is not None:
            term = x * scale_tangent[:, :, None, None]
            scaled_tangent = term if scaled_tangent is None else scaled_tangent + term
        out = None if scaled_tangent is None else F.conv2d(scaled_tangent, weight, padding=ctx.padding)
        if weight_tangent is not None:
            term = F.conv2d(x * scale[:, :, None, None], weight_tangent, padding=ctx.padding)
            out = term if out is None else out + term
        return out


def scaled_input_conv2d(x: torch.Tensor, scale: torch.Tensor, weight: torch.Tensor, padding: int = 0) -> torch.Tensor:
    """``conv2d(x * scale[:, :, None, None], weight, padding=padding)``: StyleGAN's style modulation applied to the
    activations (equivalent to modulating the weights per sample).

    When a gradient will be asked for, runs :class:`_RecomputingScaledInputConv2d`, which keeps ``x`` but not the
    product for backward; otherwise the plain formulation.

    Args:
        x: (N, C_in, H, W) activations.
        scale: (N, C_in) per-sample input-channel factors, of ``x``'s dtype.
        weight: (C_out, C_in, k, k) weights, of ``x``'s dtype.
        padding: Zero padding of the convolution.

    Returns:
        (N, C_out, H + 2 padding - k + 1, W + 2 padding - k + 1) tensor.
    """
    if x.ndim != 4 or scale.shape != x.shape[:2] or weight.ndim != 4 or weight.shape[1] != x.shape[1]:
        raise ValueError(f"scaled_input_conv2d expects x (N, C, H, W), scale (N, C) and weight (O, C, k, k); got x "
                         f"{tuple(x.shape)}, scale {tuple(scale.shape)}, weight {tuple(weight.shape)}")
    if torch.is_grad_enabled() and (x.requires_grad or scale.requires_grad or weight.requires_grad):
        return _RecomputingScaledInputConv2d.apply(x, scale, weight, int(padding))
    return F.conv2d(x * scale[:, :, None, None], weight, padding=int(padding))


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
