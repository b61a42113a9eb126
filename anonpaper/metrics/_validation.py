"""Shared input checks and the one image conversion helper of the metric suite.

Image convention for every image metric in :mod:`anonpaper.metrics`: a ``torch`` floating tensor of shape
``(N, C, H, W)`` with values in ``[0, 1]``. Numpy ``uint8`` arrays of shape ``(N, H, W)`` or ``(N, H, W, C)`` enter
through :func:`images_from_uint8`, the single documented conversion (divide by 255, move channels first).

Every check raises ``ValueError`` with a message that names the argument, what was expected and what was observed.
No check modifies its input; conversions return new tensors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

# Slack for values that should lie in [0, 1] but went through float arithmetic (e.g. 0.1 + 0.2 - 0.3).
RANGE_TOLERANCE = 1e-6


def images_from_uint8(array: np.ndarray) -> torch.Tensor:
    """Convert a numpy ``uint8`` image batch to the metric convention.

    Args:
        array: ``uint8`` array, shape ``(N, H, W)`` (grey) or ``(N, H, W, C)`` with ``C`` in {1, 3, 4}.

    Returns:
        ``torch.float32`` tensor ``(N, C, H, W)`` with values ``array / 255`` in ``[0, 1]`` (a new tensor).

    Raises:
        ValueError: If ``array`` is not a numpy ``uint8`` array of a supported shape.

    Example:
        >>> batch = np.full((2, 4, 5, 3), 255, dtype=np.uint8)
        >>> tuple(images_from_uint8(batch).shape), float(images_from_uint8(batch).max())
        ((2, 3, 4, 5), 1.0)
    """
    if not isinstance(array, np.ndarray):
        raise ValueError(f"images_from_uint8: expected a numpy.ndarray, observed {type(array).__name__}")
    if array.dtype != np.uint8:
        raise ValueError(f"images_from_uint8: expected dtype uint8, observed {array.dtype}")
    if array.ndim == 3:
        array = array[..., None]
    if array.ndim != 4 or array.shape[-1] not in (1, 3, 4):
        raise ValueError(
            f"images_from_uint8: expected shape (N, H, W) or (N, H, W, C) with C in {{1, 3, 4}}, "
            f"observed {tuple(array.shape)}"
        )
    tensor = torch.from_numpy(np.ascontiguousarray(array)).permute(0, 3, 1, 2).to(torch.float32) / 255.0
    return tensor.contiguous()


def check_images(
    images: Any,
    name: str = "images",
    *,
    channels: Sequence[int] | None = None,
    min_size: int | None = None,
) -> torch.Tensor:
    """Validate an image batch in the metric convention and return it unchanged.

    Args:
        images: ``torch`` floating tensor ``(N, C, H, W)`` with values in ``[0, 1]`` and ``N >= 1``.
        name: Argument name used in error messages.
        channels: Allowed channel counts (``None``: any).
        min_size: Minimum height and width in pixels (``None``: no minimum).

    Returns:
        The same tensor (not copied).

    Raises:
        ValueError: On a wrong type, dtype, dimensionality, channel count, size, non-finite values or values
            outside ``[0, 1]``.
    """
    if isinstance(images, np.ndarray):
        raise ValueError(
            f"{name}: expected a torch float tensor (N, C, H, W) in [0, 1], observed numpy array "
            f"{images.dtype} {tuple(images.shape)}; convert uint8 arrays with images_from_uint8"
        )
    if not isinstance(images, torch.Tensor):
        raise ValueError(f"{name}: expected a torch float tensor (N, C, H, W), observed {type(images).__name__}")
    if not images.is_floating_point():
        raise ValueError(f"{name}: expected a floating dtype, observed {images.dtype}")
    if images.ndim != 4:
        raise ValueError(f"{name}: expected 4 dimensions (N, C, H, W), observed shape {tuple(images.shape)}")
    if images.shape[0] < 1:
        raise ValueError(f"{name}: expected at least one image, observed shape {tuple(images.shape)}")
    if channels is not None and images.shape[1] not in channels:
        raise ValueError(f"{name}: expected channels in {tuple(channels)}, observed shape {tuple(images.shape)}")
    if min_size is not None and min(images.shape[2], images.shape[3]) < min_size:
        raise ValueError(
            f"{name}: expected height and width >= {min_size}, observed {images.shape[2]}x{images.shape[3]}"
        )
    values = images.detach()  # checks must not touch autograd (inputs may require gradients)
    if not bool(torch.isfinite(values).all()):
        raise ValueError(f"{name}: expected finite values, observed NaN or infinity")
    low, high = float(values.min()), float(values.max())
    if low < -RANGE_TOLERANCE or high > 1.0 + RANGE_TOLERANCE:
        raise ValueError(f"{name}: expected values in [0, 1], observed range [{low:.4g}, {high:.4g}]")
    return images


def check_image_pair(
    first: Any,
    second: Any,
    names: tuple[str, str] = ("first", "second"),
    *,
    channels: Sequence[int] | None = None,
    min_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate two image batches that are compared image by image (same shape required).

    Returns:
        ``(first, second)`` with ``second`` cast to ``first``'s dtype and device when they differ (new tensor).

    Raises:
        ValueError: If either batch is invalid (see :func:`check_images`) or the shapes differ.
    """
    first = check_images(first, names[0], channels=channels, min_size=min_size)
    second = check_images(second, names[1], channels=channels, min_size=min_size)
    if first.shape != second.shape:
        raise ValueError(
            f"{names[0]} and {names[1]}: expected identical shapes, observed {tuple(first.shape)} "
            f"and {tuple(second.shape)}"
        )
    if second.dtype != first.dtype or second.device != first.device:
        second = second.to(dtype=first.dtype, device=first.device)
    return first, second


def to_numpy(values: Any, name: str) -> np.ndarray:
    """Turn a tensor, array or sequence into a numpy array without modifying the input."""
    if isinstance(values, torch.Tensor):
        return values.detach().cpu().numpy()
    try:
        return np.asarray(values)
    except Exception as error:  # pragma: no cover - message path only
        raise ValueError(f"{name}: expected array-like values, observed {type(values).__name__} ({error})") from None


def check_features(features: Any, name: str = "features", *, min_rows: int = 1) -> np.ndarray:
    """Validate a feature matrix and return it as a new ``float64`` numpy array.

    Args:
        features: Array-like ``(N, D)`` of finite real numbers.
        name: Argument name for error messages.
        min_rows: Minimum ``N``.

    Raises:
        ValueError: On wrong dimensionality, too few rows, non-numeric or non-finite values.
    """
    array = to_numpy(features, name)
    if array.dtype.kind not in "fiub":
        raise ValueError(f"{name}: expected a real numeric dtype, observed {array.dtype}")
    if array.ndim != 2:
        raise ValueError(f"{name}: expected shape (N, D), observed {tuple(array.shape)}")
    if array.shape[0] < min_rows or array.shape[1] < 1:
        raise ValueError(f"{name}: expected at least {min_rows} rows and 1 column, observed {tuple(array.shape)}")
    array = array.astype(np.float64, copy=True)
    if not np.isfinite(array).all():
        raise ValueError(f"{name}: expected finite values, observed NaN or infinity")
    return array


def check_vector(values: Any, name: str, *, length: int | None = None, min_length: int = 1) -> np.ndarray:
    """Validate a 1-D array of finite real numbers; returns a new ``float64`` array."""
    array = to_numpy(values, name)
    if array.dtype.kind not in "fiub":
        raise ValueError(f"{name}: expected a real numeric dtype, observed {array.dtype}")
    if array.ndim != 1:
        raise ValueError(f"{name}: expected shape (N,), observed {tuple(array.shape)}")
    if length is not None and array.shape[0] != length:
        raise ValueError(f"{name}: expected length {length}, observed {array.shape[0]}")
    if array.shape[0] < min_length:
        raise ValueError(f"{name}: expected at least {min_length} values, observed {array.shape[0]}")
    array = array.astype(np.float64, copy=True)
    if not np.isfinite(array).all():
        raise ValueError(f"{name}: expected finite values, observed NaN or infinity")
    return array


def check_labels(values: Any, name: str, *, length: int | None = None) -> np.ndarray:
    """Validate a 1-D array of integer (or boolean) class labels; returns a new ``int64`` array."""
    array = to_numpy(values, name)
    if array.ndim != 1:
        raise ValueError(f"{name}: expected shape (N,), observed {tuple(array.shape)}")
    if length is not None and array.shape[0] != length:
        raise ValueError(f"{name}: expected length {length}, observed {array.shape[0]}")
    if array.shape[0] < 1:
        raise ValueError(f"{name}: expected at least one label, observed none")
    if array.dtype.kind == "b":
        return array.astype(np.int64)
    if array.dtype.kind in "iu":
        return array.astype(np.int64)
    if array.dtype.kind == "f" and np.isfinite(array).all() and np.all(array == np.round(array)):
        return array.astype(np.int64)
    raise ValueError(f"{name}: expected integer or boolean labels, observed dtype {array.dtype}")


def check_binary(values: Any, name: str, *, length: int | None = None) -> np.ndarray:
    """Validate binary labels in {0, 1} (or booleans); returns a new ``int64`` array."""
    array = check_labels(values, name, length=length)
    observed = set(np.unique(array).tolist())
    if not observed <= {0, 1}:
        raise ValueError(f"{name}: expected binary labels in {{0, 1}}, observed values {sorted(observed)[:10]}")
    return array


def check_probability(value: float, name: str, *, low: float = 0.0, high: float = 1.0) -> float:
    """Validate a scalar in ``[low, high]``; returns it as ``float``."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a number in [{low}, {high}], observed {value!r}") from None
    if not np.isfinite(number) or number < low or number > high:
        raise ValueError(f"{name}: expected a number in [{low}, {high}], observed {value!r}")
    return number


def check_positive_int(value: Any, name: str, *, minimum: int = 1) -> int:
    """Validate an integer ``>= minimum`` (booleans rejected); returns ``int``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, observed {value!r}")
    return int(value)


def check_reduction(reduction: str) -> str:
    """Validate a reduction name: ``"mean"`` (scalar) or ``"none"`` (one value per image)."""
    if reduction not in ("mean", "none"):
        raise ValueError(f"reduction: expected 'mean' or 'none', observed {reduction!r}")
    return reduction


def resolve_local_weights(weights_path: str | Path | None, torchvision_filename: str, what: str) -> Path:
    """Find a local weights file: ``weights_path`` if given, else torchvision's cache file
    ``$TORCH_HOME/hub/checkpoints/<torchvision_filename>`` (where a previous online run would have stored it).
    Never downloads.

    Raises:
        ValueError: If no such file exists, naming the paths that were tried.
    """
    import torch.hub

    candidates = [Path(weights_path).expanduser()] if weights_path is not None else [
        Path(torch.hub.get_dir()) / "checkpoints" / torchvision_filename
    ]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise ValueError(
        f"{what}: expected an existing local weights file, observed missing {', '.join(map(str, candidates))} "
        "(weights are never downloaded)"
    )
