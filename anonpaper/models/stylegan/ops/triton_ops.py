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
* :func:`filtered_lrelu`: one program per (image, channel, output tile of TY x TX pixels). Along each axis the
  input window a tile needs has a fixed length, and the resampling is a small dense matrix built on the host
  (:func:`axis_tile_plan`): ``A`` (input window -> upsampled window: zero insertion, padding, up filter and its
  gain) and ``D`` (upsampled window -> output tile: down filter, the activation gain and the decimation). Since
  ``up`` divides ``down * TY``, every tile has the same phase, so one pair per axis serves all tiles; the
  matrices depend only on (filters, up, down, low padding, tile) and are cached. The kernel loads the input
  window ``X`` (bias added inside the image, zeros outside), computes ``U = A_y @ X @ A_x^T``, the leaky ReLU and
  the clamp (``clamp / gain``: the gain rides on ``D``), and ``Y = D_y @ U @ D_x^T``: four ``tl.dot`` per tile,
  in fp32 with ``input_precision="ieee"`` (fp16/bf16 inputs are converted on load; results are stored in the
  input's dtype). The upsampled tensor never exists in memory. Tile sides are chosen from 16/32/64 by a
  multiply-add count (:func:`choose_tiles`), windows padded to powers of two of at least 16 (``tl.dot``).

  Backward (first order) is the adjoint of the same structure on the same tiles: recompute ``U``
  (pre-activation), ``G = D_y^T @ dY @ D_x``, multiply by the leaky ReLU slope and the clamp mask, and
  ``dX = A_y^T @ G @ A_x``, added with ``tl.atomic_add`` into an fp32 buffer because neighbouring tiles' input
  windows overlap. Float atomics make the backward **not bitwise deterministic on GPU** (the summation order
  varies; the forward is deterministic). The bias gradient is the sum of ``dX`` over batch and pixels.

  Fallbacks, both through :func:`.fast.filtered_lrelu` (which keeps only its inputs for large layers' backward):
  double backward (``create_graph=True``: a penalty differentiating through the generator; StyleGAN3 training
  disables the path-length penalty and R1 only differentiates the discriminator) recomputes in chunks of
  channels of at most :data:`FILTERED_LRELU_CHUNK_ELEMENTS` upsampled elements; and filters too long for the
  tiles (a window above :data:`MAX_WINDOW` = 128 samples at every tile size, or ``up`` dividing no
  ``tile * down``) run the fast path directly (:func:`filtered_lrelu_fits_tiles` tells which). StyleGAN3-T's layers
  (12 taps up 2 / down 2, 24 taps up 4 / 12 taps down 2) fit 16 x 16 tiles.

Tested (``tests/test_stylegan_ops_triton.py``) against the reference under the interpreter on CPU, to ~1e-7
absolute in fp32, and by the same script compiled on CUDA when a GPU is present. Speed and memory of this
tile kernel have not been measured in this repository yet (written in a session without GPU): measure with
``benchmarks/probe_filtered_lrelu.py`` and ``benchmarks/bench_stylegan.py``. An earlier kernel of the same
design was reported, on one H100 for sg3t-paper256, at 0.27 s and 5.6 GiB for a batch-4 synthesis forward +
backward and 1.77 s / 42 GiB at batch 32 (fp32); these numbers are not from this code. The ``fast`` path then
needed more than 78 GiB at batch 32 (it kept the upsampled tensors for backward); it now recomputes them.
"""

from __future__ import annotations

import functools

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



# --------------------------------------------------------------------------------------------------------------
# Filtered leaky ReLU: separable resampling matrices per output tile, 4 tl.dot per tile forward, 6 backward.
# --------------------------------------------------------------------------------------------------------------

TILE_SIZES = (16, 32, 64)  # candidate output tile sides (powers of two, >= tl.dot's minimum of 16)
MAX_TILE_ELEMENTS = 128 * 128  # largest upsampled (or input) window per tile, in elements (register budget)
MAX_WINDOW = 128  # largest upsampled / input window side; longer filters take the fallback
DOT_PRECISION = "ieee"  # fp32 products in fp32 (no TF32): results match the reference to ~1e-5
# The fallback (double backward, filters too long for the tiles) recomputes through the fast PyTorch path in chunks
# of channels holding at most this many upsampled elements each.
FILTERED_LRELU_CHUNK_ELEMENTS = 2 ** 26


def _next_power_of_two(n: int) -> int:
    return 1 << max(4, (int(n) - 1).bit_length())  # at least 16


@functools.lru_cache(maxsize=512)
def axis_tile_plan(up_taps: tuple[float, ...], down_taps: tuple[float, ...], up: int, down: int, pad_lo: int,
                   tile: int):
    """Per-axis matrices of the tiled filtered leaky ReLU (correlation taps, gains already inside the taps).

    Along one axis the upsampled signal is ``u[m] = sum_n x[n] fu[up * n - m + pad_lo]`` and the output
    ``y[j] = sum_t fd[t] u[down * j + t]``. Output tile ``k`` (samples ``tile * k + [0, tile)``) needs
    ``mu = down * (tile - 1) + len(fd)`` upsampled samples from ``m0 = down * tile * k``, which need the input
    samples from ``start + k * step`` (``step = down * tile / up``, ``start = -floor(pad_lo / up)``). Because
    ``up`` divides ``down * tile``, every tile sees the same phase, so one pair of matrices serves all tiles:

    * ``A`` (M, N): ``A[m, n] = fu[phase + up * n - m]`` (``phase = pad_lo mod up``): input window -> upsampled
      window, zero insertion, padding and the up gain included;
    * ``D`` (tile, M): ``D[j, m] = fd[m - down * j]``: upsampled window -> output tile.

    M and N are the window lengths padded to powers of two (>= 16); padded rows/columns are zero.

    Returns:
        ``(A, D, start, step, M, N)`` with ``A`` and ``D`` float64 CPU tensors, or None if ``up`` does not divide
        ``down * tile``.
    """
    if (down * tile) % up:
        return None
    ku, kd = len(up_taps), len(down_taps)
    mu = down * (tile - 1) + kd
    phase = pad_lo % up
    nx = (mu + ku - 2 - phase) // up + 1
    m_pad, n_pad = _next_power_of_two(mu), _next_power_of_two(nx)
    fu = torch.tensor(up_taps, dtype=torch.float64)
    fd = torch.tensor(down_taps, dtype=torch.float64)
    m = torch.arange(m_pad)[:, None]
    index = phase + up * torch.arange(n_pad)[None, :] - m
    valid = (index >= 0) & (index < ku) & (m < mu) & (torch.arange(n_pad)[None, :] < nx)
    matrix_a = torch.where(valid, fu[index.clamp(0, ku - 1)], torch.zeros((), dtype=torch.float64))
    index = torch.arange(m_pad)[None, :] - down * torch.arange(tile)[:, None]
    valid = (index >= 0) & (index < kd)
    matrix_d = torch.where(valid, fd[index.clamp(0, kd - 1)], torch.zeros((), dtype=torch.float64))
    return matrix_a, matrix_d, -(pad_lo // up), down * tile // up, m_pad, n_pad


def _tile_cost(plan_y, plan_x, tile_y: int, tile_x: int, out_height: int, out_width: int) -> float:
    """Multiply-adds of the four products over all tiles of a plane, plus a fixed per-tile overhead."""
    m_y, n_y, m_x, n_x = plan_y[4], plan_y[5], plan_x[4], plan_x[5]
    tiles = -(-out_height // tile_y) * -(-out_width // tile_x)
    per_tile = m_y * n_y * n_x + m_y * n_x * m_x + tile_y * m_y * m_x + tile_y * m_x * tile_x
    return tiles * (per_tile + 4096)


@functools.lru_cache(maxsize=512)
def choose_tiles(up_taps: tuple[float, ...], down_taps: tuple[float, ...], up: int, down: int, pad_y0: int,
                 pad_x0: int, out_height: int, out_width: int):
    """The cheapest (by :func:`_tile_cost`) pair of per-axis plans that fits the register budget, or None (the
    filters are too long for the tile scheme: the caller falls back)."""
    best, best_cost = None, None
    for tile_y in TILE_SIZES:
        plan_y = axis_tile_plan(up_taps, down_taps, up, down, pad_y0, tile_y)
        if plan_y is None or max(plan_y[4], plan_y[5]) > MAX_WINDOW:
            continue
        for tile_x in TILE_SIZES:
            plan_x = axis_tile_plan(up_taps, down_taps, up, down, pad_x0, tile_x)
            if plan_x is None or max(plan_x[4], plan_x[5]) > MAX_WINDOW:
                continue
            if plan_y[4] * plan_x[4] > MAX_TILE_ELEMENTS or plan_y[5] * plan_x[5] > MAX_TILE_ELEMENTS:
                continue
            cost = _tile_cost(plan_y, plan_x, tile_y, tile_x, out_height, out_width)
            if best_cost is None or cost < best_cost:
                best, best_cost = (tile_y, tile_x, plan_y, plan_x), cost
    return best


_TILE_MATRIX_CACHE: dict = {}


def _device_matrices(plan, tile: int, device: torch.device):
    """``(A, D)`` of a plan as contiguous float32 tensors on ``device`` (cached)."""
    key = (id(plan), tile, device)
    hit = _TILE_MATRIX_CACHE.get(key)
    if hit is None or hit[0] is not plan:
        if len(_TILE_MATRIX_CACHE) > 256:
            _TILE_MATRIX_CACHE.clear()
        hit = (plan, plan[0].to(device=device, dtype=torch.float32).contiguous(),
               plan[1].to(device=device, dtype=torch.float32).contiguous())
        _TILE_MATRIX_CACHE[key] = hit
    return hit[1], hit[2]


if TRITON_AVAILABLE:

    @triton.jit
    def _input_window(x_ptr, b_ptr, channels, height, width, base_y, base_x, step_y, step_x,
                      HAS_BIAS: tl.constexpr, NY: tl.constexpr, NX: tl.constexpr):
        """This tile's input window (+ bias inside the image, zeros outside) in fp32, with its addresses/mask."""
        plane = tl.program_id(0)
        rows = base_y + tl.program_id(1) * step_y + tl.arange(0, NY)
        cols = base_x + tl.program_id(2) * step_x + tl.arange(0, NX)
        inside = ((rows >= 0) & (rows < height))[:, None] & ((cols >= 0) & (cols < width))[None, :]
        offsets = plane.to(tl.int64) * height * width + rows[:, None] * width + cols[None, :]
        window = tl.load(x_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
        if HAS_BIAS:
            window = tl.where(inside, window + tl.load(b_ptr + plane % channels).to(tl.float32), 0.0)
        return window, offsets, inside

    @triton.jit
    def _upsampled_window(window, ay_ptr, ax_ptr, NY: tl.constexpr, NX: tl.constexpr, MY: tl.constexpr,
                          MX: tl.constexpr, PRECISION: tl.constexpr):
        """``A_y @ window @ A_x^T``: the (pre-activation) upsampled, filtered window of this tile."""
        a_y = tl.load(ay_ptr + tl.arange(0, MY)[:, None] * NY + tl.arange(0, NY)[None, :])  # (MY, NY)
        a_x_t = tl.load(ax_ptr + tl.arange(0, MX)[None, :] * NX + tl.arange(0, NX)[:, None])  # (NX, MX)
        rows = tl.dot(a_y, window, input_precision=PRECISION)
        return tl.dot(rows, a_x_t, input_precision=PRECISION)

    @triton.jit
    def _filtered_lrelu_tile_kernel(x_ptr, b_ptr, ay_ptr, ax_ptr, dy_ptr, dx_ptr, y_ptr, channels, height, width,
                                    out_height, out_width, base_y, base_x, step_y, step_x, slope, clamp,
                                    HAS_BIAS: tl.constexpr, HAS_CLAMP: tl.constexpr, TY: tl.constexpr,
                                    TX: tl.constexpr, MY: tl.constexpr, MX: tl.constexpr, NY: tl.constexpr,
                                    NX: tl.constexpr, PRECISION: tl.constexpr):
        window, _, _ = _input_window(x_ptr, b_ptr, channels, height, width, base_y, base_x, step_y, step_x,
                                     HAS_BIAS, NY, NX)
        value = _upsampled_window(window, ay_ptr, ax_ptr, NY, NX, MY, MX, PRECISION)
        value = tl.where(value > 0, value, value * slope)
        if HAS_CLAMP:
            value = tl.minimum(tl.maximum(value, -clamp), clamp)
        d_y = tl.load(dy_ptr + tl.arange(0, TY)[:, None] * MY + tl.arange(0, MY)[None, :])  # (TY, MY)
        d_x_t = tl.load(dx_ptr + tl.arange(0, MX)[:, None] + tl.arange(0, TX)[None, :] * MX)  # (MX, TX)
        out = tl.dot(tl.dot(d_y, value, input_precision=PRECISION), d_x_t, input_precision=PRECISION)
        out_rows = tl.program_id(1) * TY + tl.arange(0, TY)
        out_cols = tl.program_id(2) * TX + tl.arange(0, TX)
        keep = (out_rows < out_height)[:, None] & (out_cols < out_width)[None, :]
        offsets = (tl.program_id(0).to(tl.int64) * out_height * out_width + out_rows[:, None] * out_width
                   + out_cols[None, :])
        tl.store(y_ptr + offsets, out.to(y_ptr.dtype.element_ty), mask=keep)

    @triton.jit
    def _filtered_lrelu_tile_grad_kernel(x_ptr, b_ptr, ay_ptr, ax_ptr, dy_ptr, dx_ptr, g_ptr, gx_ptr, channels,
                                         height, width, out_height, out_width, base_y, base_x, step_y, step_x,
                                         slope, clamp, HAS_BIAS: tl.constexpr, HAS_CLAMP: tl.constexpr,
                                         TY: tl.constexpr, TX: tl.constexpr, MY: tl.constexpr, MX: tl.constexpr,
                                         NY: tl.constexpr, NX: tl.constexpr, PRECISION: tl.constexpr):
        window, offsets, inside = _input_window(x_ptr, b_ptr, channels, height, width, base_y, base_x, step_y,
                                                step_x, HAS_BIAS, NY, NX)
        value = _upsampled_window(window, ay_ptr, ax_ptr, NY, NX, MY, MX, PRECISION)  # recomputed pre-activation
        out_rows = tl.program_id(1) * TY + tl.arange(0, TY)
        out_cols = tl.program_id(2) * TX + tl.arange(0, TX)
        keep = (out_rows < out_height)[:, None] & (out_cols < out_width)[None, :]
        grad = tl.load(g_ptr + tl.program_id(0).to(tl.int64) * out_height * out_width
                       + out_rows[:, None] * out_width + out_cols[None, :], mask=keep, other=0.0).to(tl.float32)
        d_y_t = tl.load(dy_ptr + tl.arange(0, MY)[:, None] + tl.arange(0, TY)[None, :] * MY)  # (MY, TY)
        d_x = tl.load(dx_ptr + tl.arange(0, TX)[:, None] * MX + tl.arange(0, MX)[None, :])  # (TX, MX)
        grad = tl.dot(tl.dot(d_y_t, grad, input_precision=PRECISION), d_x, input_precision=PRECISION)  # (MY, MX)
        scale = tl.where(value > 0, 1.0, slope)
        if HAS_CLAMP:
            scale = tl.where(tl.abs(value * scale) <= clamp, scale, 0.0)
        grad = grad * scale
        a_y_t = tl.load(ay_ptr + tl.arange(0, MY)[None, :] * NY + tl.arange(0, NY)[:, None])  # (NY, MY)
        a_x = tl.load(ax_ptr + tl.arange(0, MX)[:, None] * NX + tl.arange(0, NX)[None, :])  # (MX, NX)
        grad = tl.dot(tl.dot(a_y_t, grad, input_precision=PRECISION), a_x, input_precision=PRECISION)  # (NY, NX)
        tl.atomic_add(gx_ptr + offsets, grad, mask=inside)


def _tile_launch_arguments(x, up_taps, down_taps, up, down, padding):
    """Output size, grid and the matrices/constants of the tile kernels, or None when the filters do not fit."""
    batch, channels, height, width = x.shape
    pad_x0, pad_x1, pad_y0, pad_y1 = padding
    up_height = height * up + pad_y0 + pad_y1 - len(up_taps) + 1
    up_width = width * up + pad_x0 + pad_x1 - len(up_taps) + 1
    out_height = (up_height - len(down_taps)) // down + 1
    out_width = (up_width - len(down_taps)) // down + 1
    if out_height < 1 or out_width < 1:
        raise ValueError(f"filtered_lrelu output would be empty: input {height}x{width}, padding {padding}")
    choice = choose_tiles(up_taps, down_taps, up, down, pad_y0, pad_x0, out_height, out_width)
    if choice is None:
        return None
    tile_y, tile_x, plan_y, plan_x = choice
    a_y, d_y = _device_matrices(plan_y, tile_y, x.device)
    a_x, d_x = _device_matrices(plan_x, tile_x, x.device)
    grid = (batch * channels, -(-out_height // tile_y), -(-out_width // tile_x))
    sizes = dict(TY=tile_y, TX=tile_x, MY=plan_y[4], MX=plan_x[4], NY=plan_y[5], NX=plan_x[5],
                 PRECISION=DOT_PRECISION, num_warps=8 if plan_y[4] * plan_x[4] >= 64 * 64 else 4)
    scalars = (channels, height, width, out_height, out_width, plan_y[2], plan_x[2], plan_y[3], plan_x[3])
    return (out_height, out_width), grid, (a_y, a_x, d_y, d_x), scalars, sizes


def filtered_lrelu_fits_tiles(x_shape, up_filter: torch.Tensor, down_filter: torch.Tensor, up: int, down: int,
                              padding: tuple[int, int, int, int], gain: float = LEAKY_RELU_GAIN) -> bool:
    """Whether :func:`filtered_lrelu` runs the tile kernels for these arguments (False: it falls back)."""
    up_taps = fast._correlation_taps(up_filter, up * up)
    down_taps = fast._correlation_taps(down_filter, gain)
    _, _, height, width = x_shape
    pad_x0, pad_x1, pad_y0, pad_y1 = padding
    out_height = (height * up + pad_y0 + pad_y1 - len(up_taps) + 1 - len(down_taps)) // down + 1
    out_width = (width * up + pad_x0 + pad_x1 - len(up_taps) + 1 - len(down_taps)) // down + 1
    return choose_tiles(up_taps, down_taps, up, down, pad_y0, pad_x0, out_height, out_width) is not None


def _chunked_fallback_grads(x, bias, grad, args, create_graph: bool):
    """Gradients (x, bias) by recomputing through :func:`.fast.filtered_lrelu` per chunk of channels (at most
    :data:`FILTERED_LRELU_CHUNK_ELEMENTS` upsampled elements each); keeps the graph when ``create_graph``."""
    up_filter, down_filter, up, down, padding, gain, slope, clamp = args
    batch, channels, height, width = x.shape
    upsampled = batch * (height * up + padding[2] + padding[3]) * (width * up + padding[0] + padding[1])
    chunk = max(1, FILTERED_LRELU_CHUNK_ELEMENTS // max(1, upsampled))
    grad_x_chunks, grad_bias_chunks = [], []
    for start in range(0, channels, chunk):
        stop = min(start + chunk, channels)
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
    return torch.cat(grad_x_chunks, dim=1), grad_bias


class _TritonFilteredLReLU(torch.autograd.Function):
    """Forward and first-order backward on the tile kernels; double backward through the chunked fallback."""

    @staticmethod
    def forward(ctx, x, bias, up_filter, down_filter, up, down, padding, gain, slope, clamp, launch):
        x = x.contiguous()
        bias_ = bias.contiguous() if bias is not None else x.new_zeros(1)
        (out_height, out_width), grid, matrices, scalars, sizes = launch
        y = x.new_empty(x.shape[0], x.shape[1], out_height, out_width)
        clamp_scaled = float(clamp / gain) if clamp is not None else 0.0  # clamp(g * a, c) = g * clamp(a, c / g)
        _filtered_lrelu_tile_kernel[grid](x, bias_, *matrices, y, *scalars, float(slope), clamp_scaled,
                                          HAS_BIAS=bias is not None, HAS_CLAMP=clamp is not None, **sizes)
        ctx.save_for_backward(x, bias, up_filter, down_filter)
        ctx.params = (up, down, padding, gain, slope, clamp, launch)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, bias, up_filter, down_filter = ctx.saved_tensors
        up, down, padding, gain, slope, clamp, launch = ctx.params
        if torch.is_grad_enabled():  # create_graph: second order through the differentiable fallback
            grad_x, grad_bias = _chunked_fallback_grads(
                x, bias, grad, (up_filter, down_filter, up, down, padding, gain, slope, clamp), True)
            return grad_x, grad_bias, *([None] * 9)
        grad = grad.contiguous()
        _, grid, matrices, scalars, sizes = launch
        grad_x = torch.zeros(x.shape, dtype=torch.float32, device=x.device)  # atomically accumulated
        bias_ = bias.contiguous() if bias is not None else x.new_zeros(1)
        clamp_scaled = float(clamp / gain) if clamp is not None else 0.0
        _filtered_lrelu_tile_grad_kernel[grid](x, bias_, *matrices, grad, grad_x, *scalars, float(slope),
                                               clamp_scaled, HAS_BIAS=bias is not None,
                                               HAS_CLAMP=clamp is not None, **sizes)
        grad_bias = None
        if bias is not None and ctx.needs_input_grad[1]:
            grad_bias = grad_x.sum(dim=(0, 2, 3)).to(bias.dtype)  # bias is added at every in-image input sample
        return grad_x.to(x.dtype), grad_bias, *([None] * 9)


def filtered_lrelu(x: torch.Tensor, up_filter: torch.Tensor | None, down_filter: torch.Tensor | None,
                   bias: torch.Tensor | None = None, up: int = 1, down: int = 1,
                   padding: tuple[int, int, int, int] = (0, 0, 0, 0), gain: float = LEAKY_RELU_GAIN,
                   slope: float = LEAKY_RELU_SLOPE, clamp: float | None = None,
                   scale: torch.Tensor | None = None) -> torch.Tensor:
    """Fused Triton filtered leaky ReLU; same contract as :func:`.reference.filtered_lrelu`.

    Runs the tile kernels when the filters fit (:func:`filtered_lrelu_fits_tiles`); otherwise (filters too long
    for a 128-sample window at every tile size, ``up`` dividing no ``tile * down``) it computes
    :func:`.fast.filtered_lrelu`, which keeps only its inputs for large layers' backward too; a missing filter or a
    non-positive gain runs the reference. A ``scale`` is applied by a separate multiply before the kernels (which
    then keep the scaled input: one input-sized tensor more than the ``fast`` path keeps).
    """
    padding = reference.check_padding(padding)
    up, down = int(up), int(down)
    if up_filter is None or down_filter is None or gain <= 0 or up < 1 or down < 1:
        return reference.filtered_lrelu(x, up_filter, down_filter, bias, up, down, padding, gain, slope, clamp,
                                        scale)
    _require(x)
    launch = _tile_launch_arguments(x, fast._correlation_taps(up_filter, up * up),
                                    fast._correlation_taps(down_filter, gain), up, down, padding)
    if launch is None:
        return fast.filtered_lrelu(x, up_filter, down_filter, bias, up, down, padding, gain, slope, clamp, scale)
    if scale is not None:
        x = x * scale.to(x.dtype)[:, :, None, None]
    return _TritonFilteredLReLU.apply(x, bias, up_filter, down_filter, up, down, padding, float(gain),
                                      float(slope), clamp, launch)
