"""Drawing utilities shared by the chest X-ray and iris phantoms: seeds, smooth noise, smooth random shapes.

Everything here is pure numpy / OpenCV on float32 arrays and takes explicit seeds or ``numpy.random.Generator``
objects, so a phantom image is a deterministic function of its row's seed.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Hashable

import cv2
import numpy as np


def derive_seed(*keys: int | str) -> int:
    """A 63-bit seed derived deterministically from integer or string keys (order matters).

    Strings are hashed byte-wise (not with Python's randomised ``hash``), so results are stable across processes.

    >>> derive_seed(1, "patient", 3) == derive_seed(1, "patient", 3)
    True
    >>> derive_seed(1, 2) != derive_seed(2, 1)
    True
    """
    entropy: list[int] = []
    for key in keys:
        if isinstance(key, str):
            entropy.extend(key.encode("utf-8"))
            entropy.append(0x1F)  # separator so ("ab", "c") differs from ("a", "bc")
        elif isinstance(key, (int, np.integer)):
            if int(key) < 0:
                raise ValueError(f"seed keys must be non-negative integers or strings, got {key}")
            entropy.extend([int(key) & 0xFFFFFFFF, int(key) >> 32, 0x2E])
        else:
            raise ValueError(f"seed keys must be int or str, got {type(key).__name__} ({key!r})")
    return int(np.random.SeedSequence(entropy).generate_state(1, dtype=np.uint64)[0]) >> 1


def smooth_noise(rng: np.random.Generator, shape: tuple[int, int], cells: float,
                 octaves: int = 1, persistence: float = 0.5) -> np.ndarray:
    """Band-limited random field: white noise on a coarse grid, bicubically upsampled, summed over octaves.

    Args:
        rng: Random generator (consumed).
        shape: Output (height, width) in pixels.
        cells: Number of coarse-grid cells along the longer side of the first octave (>= 1); larger = finer.
        octaves: Number of octaves; each doubles ``cells`` and multiplies the amplitude by ``persistence``.
        persistence: Amplitude ratio between successive octaves, in (0, 1].

    Returns:
        float32 (height, width) field with zero mean and unit standard deviation (all zeros if constant).
    """
    height, width = int(shape[0]), int(shape[1])
    if height < 1 or width < 1 or cells < 1 or octaves < 1:
        raise ValueError(f"smooth_noise needs positive shape/cells/octaves, got shape={shape}, cells={cells}, "
                         f"octaves={octaves}")
    field = np.zeros((height, width), np.float32)
    amplitude = 1.0
    longer = max(height, width)
    for octave in range(octaves):
        count = cells * (2 ** octave)
        grid_h = max(2, int(round(count * height / longer)) + 3)
        grid_w = max(2, int(round(count * width / longer)) + 3)
        coarse = rng.standard_normal((grid_h, grid_w)).astype(np.float32)
        # Upsample a grid one cell larger than needed and crop, so the borders are not clamped.
        scale_h = height / max(grid_h - 3, 1)
        scale_w = width / max(grid_w - 3, 1)
        big = cv2.resize(coarse, (int(np.ceil(grid_w * scale_w)), int(np.ceil(grid_h * scale_h))),
                         interpolation=cv2.INTER_CUBIC)
        off_h = int(scale_h)
        off_w = int(scale_w)
        field += amplitude * big[off_h:off_h + height, off_w:off_w + width]
        amplitude *= persistence
    std = float(field.std())
    return (field - field.mean()) / std if std > 0 else field


def fourier_radius(rng: np.random.Generator, harmonics: int, roughness: float) -> tuple[np.ndarray, np.ndarray]:
    """Random Fourier coefficients of a smooth closed curve's radius, r(t) = 1 + sum a_k cos(k t + p_k).

    Amplitudes fall off as 1/k so the curve is smooth; ``roughness`` scales them (0 gives a circle).

    Returns:
        (amplitudes, phases), each float64 (harmonics,), for :func:`evaluate_radius`.
    """
    orders = np.arange(1, harmonics + 1)
    amplitudes = roughness * rng.uniform(0.3, 1.0, harmonics) / orders
    phases = rng.uniform(0, 2 * np.pi, harmonics)
    return amplitudes, phases


def evaluate_radius(coefficients: tuple[np.ndarray, np.ndarray], angles: np.ndarray) -> np.ndarray:
    """Evaluate r(t) = 1 + sum_k a_k cos(k t + p_k) at ``angles`` (radians); returns float64 like ``angles``."""
    amplitudes, phases = coefficients
    orders = np.arange(1, len(amplitudes) + 1)
    angles = np.asarray(angles, np.float64)
    return 1.0 + (amplitudes[:, None] * np.cos(orders[:, None] * angles.reshape(1, -1) + phases[:, None])
                  ).sum(0).reshape(angles.shape)


def blob_polygon(rng: np.random.Generator, center: tuple[float, float], radii: tuple[float, float],
                 angle: float = 0.0, roughness: float = 0.25, harmonics: int = 5, points: int = 48) -> np.ndarray:
    """Vertices of a smooth random blob (an ellipse with Fourier-perturbed radius).

    Args:
        rng: Random generator (consumed).
        center: (x, y) in pixels.
        radii: (rx, ry) semi-axes in pixels before perturbation.
        angle: Rotation of the ellipse in radians.
        roughness: Relative radius perturbation (0 = ellipse).
        harmonics: Number of Fourier harmonics.
        points: Number of vertices.

    Returns:
        float64 (points, 2) array of (x, y) vertices.
    """
    coefficients = fourier_radius(rng, harmonics, roughness)
    t = np.linspace(0, 2 * np.pi, points, endpoint=False)
    radius = np.clip(evaluate_radius(coefficients, t), 0.3, None)
    x = radii[0] * radius * np.cos(t)
    y = radii[1] * radius * np.sin(t)
    cos_a, sin_a = np.cos(angle), np.sin(angle)
    return np.stack([center[0] + cos_a * x - sin_a * y, center[1] + sin_a * x + cos_a * y], axis=1)


_SHIFT = 4  # sub-pixel bits for OpenCV drawing: coordinates are scaled by 2**_SHIFT


def _fixed(points: np.ndarray) -> np.ndarray:
    return np.round(np.asarray(points, np.float64) * (1 << _SHIFT)).astype(np.int32).reshape(-1, 1, 2)


def fill_polygon(shape: tuple[int, int], polygons: list[np.ndarray] | np.ndarray, value: float = 1.0,
                 antialias: bool = False, out: np.ndarray | None = None) -> np.ndarray:
    """Rasterise filled polygons (float (K, 2) arrays of (x, y) pixels) into a float32 (H, W) image.

    With ``out`` the polygons are drawn into it in place (value overwrites); otherwise into zeros.
    """
    canvas = np.zeros(shape, np.float32) if out is None else out
    if isinstance(polygons, np.ndarray):
        polygons = [polygons]
    cv2.fillPoly(canvas, [_fixed(polygon) for polygon in polygons], float(value),
                 lineType=cv2.LINE_AA if antialias else cv2.LINE_8, shift=_SHIFT)
    return canvas


def draw_polyline(canvas: np.ndarray, points: np.ndarray, value: float, thickness: float,
                  closed: bool = False) -> np.ndarray:
    """Draw an anti-aliased polyline of float (K, 2) (x, y) points into ``canvas`` (float32, in place)."""
    cv2.polylines(canvas, [_fixed(points)], closed, float(value), thickness=max(1, int(round(thickness))),
                  lineType=cv2.LINE_AA, shift=_SHIFT)
    return canvas


def gaussian_blur(image: np.ndarray, sigma: float) -> np.ndarray:
    """Gaussian blur with standard deviation ``sigma`` pixels (returns a copy; sigma <= 0.05 returns a copy)."""
    if sigma <= 0.05:
        return image.copy()
    return cv2.GaussianBlur(image, (0, 0), sigmaX=float(sigma), sigmaY=float(sigma),
                            borderType=cv2.BORDER_REFLECT)


def to_uint8(image: np.ndarray) -> np.ndarray:
    """Map float values in [0, 1] to uint8 0..255 (values outside are clipped)."""
    return np.clip(image * 255.0 + 0.5, 0, 255).astype(np.uint8)


class LRUCache:
    """A small least-recently-used cache: ``get(key, compute)`` runs ``compute()`` only on a miss.

    Used so that ``image(i)`` and ``masks(i)`` of the same row render once. Values are returned as stored; callers
    must copy before modifying them.
    """

    def __init__(self, capacity: int):
        if capacity < 0:
            raise ValueError(f"cache capacity must be >= 0, got {capacity}")
        self.capacity = int(capacity)
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        if key in self._items:
            self._items.move_to_end(key)
            self.hits += 1
            return self._items[key]
        self.misses += 1
        value = compute()
        if self.capacity:
            self._items[key] = value
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        return value

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)
