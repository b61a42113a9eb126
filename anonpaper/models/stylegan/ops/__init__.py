"""Resampling and activation primitives of StyleGAN2/3 with selectable implementations.

Three implementations of the same three operations (:func:`upfirdn2d`, :func:`bias_act`, :func:`filtered_lrelu`),
plus :func:`scaled_input_conv2d` (style modulation + convolution keeping only its input for backward):

* ``"reference"`` (:mod:`.reference`): plain PyTorch, each step explicit; the ground truth of the tests.
* ``"fast"`` (:mod:`.fast`): PyTorch without zero insertion (dense resampling matrices for small images,
  polyphase depthwise convolutions otherwise), gains folded into filters, fused demodulation/bias; the default.
* ``"triton"`` (:mod:`.triton_ops`): Triton GPU kernels, used only for CUDA tensors and only when asked for
  (``implementation="triton"`` or the environment variable ``ANONPAPER_STYLEGAN_IMPL=triton``); other tensors
  go to ``"fast"``. Double backward through a Triton op falls back to the reference computation.

``resolve_implementation(name, tensor)`` maps ``"auto"`` (the default) to the environment's choice and
``"triton"`` on a non-CUDA tensor to ``"fast"``. The module imports without CUDA or Triton.

Example:
    >>> import torch
    >>> from anonpaper.models.stylegan import ops
    >>> x = torch.randn(1, 2, 8, 8)
    >>> f = torch.tensor([1.0, 3.0, 3.0, 1.0]) / 8
    >>> fast = ops.upfirdn2d(x, f, up=2, padding=(2, 1, 2, 1), gain=4, implementation="fast")
    >>> ref = ops.upfirdn2d(x, f, up=2, padding=(2, 1, 2, 1), gain=4, implementation="reference")
    >>> fast.shape, bool(torch.allclose(fast, ref, atol=1e-5))
    (torch.Size([1, 2, 16, 16]), True)
"""

from __future__ import annotations

import os

import torch

from anonpaper.models.stylegan.ops import fast, reference
from anonpaper.models.stylegan.ops.reference import LEAKY_RELU_GAIN, LEAKY_RELU_SLOPE, upfirdn2d_output_size

IMPLEMENTATIONS = ("auto", "reference", "fast", "triton")
ENVIRONMENT_VARIABLE = "ANONPAPER_STYLEGAN_IMPL"


def check_implementation(name: str) -> str:
    """Validate an implementation name; returns it."""
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"StyleGAN op implementation must be one of {IMPLEMENTATIONS}, got {name!r}")
    return name


def default_implementation() -> str:
    """The implementation ``"auto"`` stands for: ``$ANONPAPER_STYLEGAN_IMPL`` if set, else ``"fast"``."""
    name = os.environ.get(ENVIRONMENT_VARIABLE, "fast").strip() or "fast"
    if name == "auto" or name not in IMPLEMENTATIONS:
        raise ValueError(f"{ENVIRONMENT_VARIABLE} must be one of {IMPLEMENTATIONS[1:]}, got {name!r}")
    return name


def resolve_implementation(name: str, x: torch.Tensor) -> str:
    """The implementation that runs for tensor ``x``: Triton only for CUDA tensors, ``"fast"`` otherwise."""
    name = check_implementation(name)
    if name == "auto":
        name = default_implementation()
    if name == "triton" and not x.is_cuda:
        return "fast"
    return name


def _module(name: str):
    if name == "triton":
        from anonpaper.models.stylegan.ops import triton_ops

        return triton_ops
    return fast if name == "fast" else reference


def upfirdn2d(x: torch.Tensor, filter_1d: torch.Tensor | None, up: int = 1, down: int = 1,
              padding: tuple[int, int, int, int] = (0, 0, 0, 0), gain: float = 1.0,
              implementation: str = "auto") -> torch.Tensor:
    """Upsample, pad, separable FIR, downsample: see :func:`.reference.upfirdn2d` (same arguments)."""
    return _module(resolve_implementation(implementation, x)).upfirdn2d(x, filter_1d, up, down, padding, gain)


def bias_act(x: torch.Tensor, bias: torch.Tensor | None = None, activation: str = "linear", gain: float = 1.0,
             clamp: float | None = None, implementation: str = "auto") -> torch.Tensor:
    """Bias + activation + gain + clamp: see :func:`.reference.bias_act`."""
    return _module(resolve_implementation(implementation, x)).bias_act(x, bias, activation, gain, clamp)


def filtered_lrelu(x: torch.Tensor, up_filter: torch.Tensor | None, down_filter: torch.Tensor | None,
                   bias: torch.Tensor | None = None, up: int = 1, down: int = 1,
                   padding: tuple[int, int, int, int] = (0, 0, 0, 0), gain: float = LEAKY_RELU_GAIN,
                   slope: float = LEAKY_RELU_SLOPE, clamp: float | None = None, scale: torch.Tensor | None = None,
                   implementation: str = "auto") -> torch.Tensor:
    """StyleGAN3's filtered leaky ReLU: see :func:`.reference.filtered_lrelu`. The ``fast`` and ``triton`` versions
    keep only the input (and the small ``scale`` and ``bias``) for backward, not the upsampled tensor."""
    return _module(resolve_implementation(implementation, x)).filtered_lrelu(
        x, up_filter, down_filter, bias, up, down, padding, gain, slope, clamp, scale)


def scaled_input_conv2d(x: torch.Tensor, scale: torch.Tensor, weight: torch.Tensor, padding: int = 0) -> torch.Tensor:
    """``conv2d(x * scale[:, :, None, None], weight)``, StyleGAN's style modulation, keeping only ``x`` (and the
    small ``scale`` and ``weight``) for backward: see :func:`.fast.scaled_input_conv2d`. Pure PyTorch (any
    device); the reference formulation is :func:`anonpaper.models.stylegan.layers.modulated_conv2d`."""
    return fast.scaled_input_conv2d(x, scale, weight, padding)


__all__ = ["ENVIRONMENT_VARIABLE", "IMPLEMENTATIONS", "LEAKY_RELU_GAIN", "LEAKY_RELU_SLOPE", "bias_act",
           "check_implementation", "default_implementation", "filtered_lrelu", "resolve_implementation",
           "scaled_input_conv2d", "upfirdn2d", "upfirdn2d_output_size"]
