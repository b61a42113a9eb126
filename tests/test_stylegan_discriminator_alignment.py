"""Discriminator downsampling: the main (3x3 conv, down) and skip (1x1, down) paths of a residual block sample the
input at the same positions, and the strided conv equals FIR-then-unpadded-strided-conv with the reference padding."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.signal
import torch

from anonpaper.models.stylegan.discriminator import EqualizedConv2d, downsampling_conv_padding

pytestmark = pytest.mark.unit


def _centre_of_mass(response: np.ndarray) -> tuple[float, float]:
    """Row and column centre of mass of a non-negative 2-D response."""
    rows, columns = np.indices(response.shape)
    total = response.sum()
    return float((rows * response).sum() / total), float((columns * response).sum() / total)


def _impulse(size: int, row: int, column: int) -> torch.Tensor:
    image = torch.zeros(1, 1, size, size)
    image[0, 0, row, column] = 1.0
    return image


def _linear_conv(kernel_size: int, weight: torch.Tensor | None = None) -> EqualizedConv2d:
    layer = EqualizedConv2d(1, 1, kernel_size, bias=False, activation="linear", down=True)
    with torch.no_grad():
        if weight is None:
            # A centred delta kernel: the conv only picks samples, so the response shows where the path samples.
            layer.weight.zero_()
            layer.weight[0, 0, kernel_size // 2, kernel_size // 2] = 1.0 / layer.weight_gain
        else:
            layer.weight.copy_(weight / layer.weight_gain)
    return layer


@pytest.mark.parametrize("row,column", [(9, 12), (10, 13), (16, 16), (7, 20)])
def test_main_and_skip_paths_put_an_impulse_at_the_same_place(row, column):
    image = _impulse(32, row, column)
    with torch.no_grad():
        main = _linear_conv(3)(image)[0, 0].numpy()
        skip = _linear_conv(1)(image)[0, 0].numpy()
    assert main.shape == skip.shape == (16, 16)
    np.testing.assert_allclose(_centre_of_mass(main), _centre_of_mass(skip), atol=1e-9)
    # Both sample the input at 2 i + 0.5: an impulse at p lands at output (p - 0.5) / 2.
    np.testing.assert_allclose(_centre_of_mass(main), ((row - 0.5) / 2, (column - 0.5) / 2), atol=1e-9)
    # With a delta kernel the two paths are the same operation.
    np.testing.assert_allclose(main, skip, atol=1e-7)


def test_reference_padding_for_the_stylegan2_downsampling_conv():
    assert downsampling_conv_padding(4, 3) == (2, 2, 2, 2)
    assert downsampling_conv_padding(4, 1) == (1, 1, 1, 1)


def test_downsampling_conv_equals_fir_then_unpadded_strided_conv():
    generator = torch.Generator().manual_seed(0)
    image = torch.rand(2, 3, 16, 16, generator=generator, dtype=torch.float64)
    weight = torch.randn(4, 3, 3, 3, generator=generator, dtype=torch.float64)
    layer = EqualizedConv2d(3, 4, 3, bias=False, activation="linear", down=True).double()
    with torch.no_grad():
        layer.weight.copy_(weight / layer.weight_gain)
        observed = layer(image).numpy()
    taps = np.array([1.0, 3.0, 3.0, 1.0]) / 8.0
    fir = np.outer(taps, taps)
    expected = np.zeros((2, 4, 8, 8))
    for n in range(2):
        # Closed form: zero-pad 2 on every side, low-pass (symmetric filter: convolution = correlation), then the
        # 3x3 cross-correlation evaluated at every second position without padding.
        filtered = np.stack([scipy.signal.convolve2d(np.pad(image[n, c].numpy(), 2), fir, mode="valid")
                             for c in range(3)])  # (3, 17, 17)
        for o in range(4):
            for i in range(8):
                for j in range(8):
                    window = filtered[:, 2 * i:2 * i + 3, 2 * j:2 * j + 3]
                    expected[n, o, i, j] = (window * weight[o].numpy()).sum()
    np.testing.assert_allclose(observed, expected, rtol=1e-10, atol=1e-12)
