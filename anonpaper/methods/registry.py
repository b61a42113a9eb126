"""One registry of image anonymization methods and one image adapter for the CLI, the folder writer and chapters.

``get(name, **options)`` returns an :class:`ImageAnonymizer`: the method with validated options, callable on a
uint8 batch ``(N, H, W, C)`` (the Cohort's NumPy layout) or, with :meth:`ImageAnonymizer.one`, on one image
``(H, W)`` / ``(H, W, C)``. Every caller goes through it, so options, aliases, validation and the array <-> tensor
conversion exist once.

Methods whose options come from the whole dataset (Snow's per-channel means) leave them ``None`` until
:meth:`ImageAnonymizer.fit` computes them from images (one pass, streamed), as the paper does over its dataset.

Example:
    >>> import numpy as np
    >>> snow = get("snow", p=0.5, channel_mean=[10.0, 20.0, 30.0])
    >>> images = np.full((2, 8, 8, 3), 200, dtype=np.uint8)
    >>> out = snow(images, seed=0)
    >>> out.shape, out.dtype, sorted(np.unique(out[..., 0]).tolist())
    ((2, 8, 8, 3), dtype('uint8'), [10, 200])
    >>> sorted(available())
    ['snow', 'vs-snow']
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np
import torch


@dataclass(frozen=True)
class MethodSpec:
    """A registered method.

    Attributes:
        name: Registry name (``"snow"``, ``"vs-snow"``); ``get`` also accepts underscores for hyphens.
        summary: One line for ``--help`` and listings.
        defaults: Accepted option names and defaults (``None``: no default; see ``dataset_options``).
        apply: ``apply(images, masks, seed, options) -> images``: uint8 tensors ``(N, C, H, W)`` in and out,
            ``masks`` bool ``(N, H, W)`` or None.
        validate: Raises ValueError on bad option values (called by :func:`get`).
        aliases: Short option names (``{"p": "replace_fraction"}``).
        needs_masks: Whether ``apply`` needs region masks (e.g. vessels).
        dataset_options: ``dataset_options(images) -> options`` for the options left ``None`` that the method
            computes over a dataset; ``images`` is an iterable of uint8 ``(H, W, C)`` images of one channel count.
    """

    name: str
    summary: str
    defaults: dict[str, Any]
    apply: Callable[[torch.Tensor, torch.Tensor | None, int, dict[str, Any]], torch.Tensor]
    validate: Callable[[dict[str, Any]], None] = lambda options: None
    aliases: dict[str, str] = field(default_factory=dict)
    needs_masks: bool = False
    dataset_options: Callable[[Iterable[np.ndarray]], dict[str, Any]] | None = None


_REGISTRY: dict[str, MethodSpec] = {}


def register(spec: MethodSpec) -> MethodSpec:
    """Add (or replace) a method under ``spec.name``."""
    _REGISTRY[spec.name] = spec
    return spec


def available() -> list[str]:
    """Registered method names."""
    return list(_REGISTRY)


def spec(name: str) -> MethodSpec:
    """The registered method ``name`` (underscores read as hyphens); ValueError lists the valid names."""
    key = name.replace("_", "-")
    if key not in _REGISTRY:
        raise ValueError(f"unknown method {name!r}; available: {sorted(_REGISTRY)}")
    return _REGISTRY[key]


def _coerce(method: str, name: str, value: Any, default: Any) -> Any:
    if isinstance(value, str) and isinstance(default, (int, float)) and not isinstance(default, bool):
        # The command line and YAML give numbers as text ("1e-1"); accept any number spelling for numeric options.
        try:
            return type(default)(value)
        except ValueError:
            raise ValueError(f"method {method!r}: option {name!r} must be a number, got {value!r}") from None
    return value


def resolve_options(method: MethodSpec, options: dict[str, Any]) -> dict[str, Any]:
    """Defaults overridden by ``options`` (aliases resolved, numbers parsed); ValueError on unknown/duplicate."""
    resolved = dict(method.defaults)
    given: dict[str, str] = {}
    for name, value in options.items():
        target = method.aliases.get(name, name)
        if target not in method.defaults:
            accepted = sorted(set(method.defaults) | set(method.aliases))
            raise ValueError(f"method {method.name!r} has no option {name!r}; accepted options: {accepted}")
        if target in given:
            raise ValueError(f"method {method.name!r}: option {target!r} given twice (as {given[target]!r} and "
                             f"{name!r})")
        given[target] = name
        resolved[target] = _coerce(method.name, name, value, method.defaults[target])
    return resolved


@dataclass(frozen=True)
class ImageAnonymizer:
    """A method with resolved options, applied to uint8 NumPy images (see the module docstring)."""

    method: MethodSpec
    options: dict[str, Any]

    @property
    def name(self) -> str:
        return self.method.name

    @property
    def needs_fit(self) -> bool:
        """Whether dataset-level options are still missing (call :meth:`fit` first)."""
        # Options whose default is None are the ones dataset_options computes.
        return self.method.dataset_options is not None and any(
            self.options[name] is None for name, default in self.method.defaults.items() if default is None)

    def with_options(self, **options: Any) -> "ImageAnonymizer":
        """A copy with some options changed (validated again)."""
        merged = resolve_options(self.method, {**self.options, **options})
        self.method.validate(merged)
        return dataclasses.replace(self, options=merged)

    def fit(self, images: Iterable[np.ndarray]) -> "ImageAnonymizer":
        """A copy with the dataset-level options computed from ``images`` (uint8 (H, W, C), one channel count)."""
        if self.method.dataset_options is None:
            return self
        computed = self.method.dataset_options(images)
        return self.with_options(**{name: value for name, value in computed.items() if self.options[name] is None})

    def __call__(self, images: np.ndarray, *, seed: int, masks: np.ndarray | None = None) -> np.ndarray:
        """Anonymize a batch.

        Args:
            images: uint8 ``(N, H, W, C)``. Not modified.
            seed: Seed of the method's random draws for this batch.
            masks: bool ``(N, H, W)`` region masks for methods that need them.

        Returns:
            uint8 ``(N, H, W, C)``, a new array.
        """
        if not isinstance(images, np.ndarray) or images.dtype != np.uint8 or images.ndim != 4:
            raise ValueError(f"{self.name}: images must be a uint8 array (N, H, W, C), got "
                             f"{getattr(images, 'dtype', type(images).__name__)} {getattr(images, 'shape', '')}")
        if self.needs_fit:
            raise ValueError(f"{self.name}: dataset options are missing; call .fit(images) or pass them")
        if self.method.needs_masks:
            if masks is None or np.shape(masks) != images.shape[:3]:
                raise ValueError(f"{self.name} needs masks of shape {images.shape[:3]}, got "
                                 f"{None if masks is None else np.shape(masks)}")
            masks = torch.from_numpy(np.ascontiguousarray(masks))
        batch = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2)))
        result = self.method.apply(batch, masks, int(seed), self.options)
        return result.numpy().transpose(0, 2, 3, 1)

    def one(self, image: np.ndarray, *, seed: int, mask: np.ndarray | None = None) -> np.ndarray:
        """Anonymize one uint8 image ``(H, W)`` or ``(H, W, C)``; returns the same shape."""
        if not isinstance(image, np.ndarray) or image.ndim not in (2, 3):
            raise ValueError(f"{self.name}: image must be an array (H, W) or (H, W, C), got "
                             f"{getattr(image, 'shape', type(image).__name__)}")
        batch = (image[:, :, None] if image.ndim == 2 else image)[None]
        result = self(batch, seed=seed, masks=None if mask is None else np.asarray(mask)[None])
        return np.ascontiguousarray(result[0, :, :, 0] if image.ndim == 2 else result[0])


def get(name: str, **options: Any) -> ImageAnonymizer:
    """The method ``name`` with ``options`` (aliases allowed), validated: a callable :class:`ImageAnonymizer`."""
    method = spec(name)
    resolved = resolve_options(method, options)
    method.validate(resolved)
    return ImageAnonymizer(method, resolved)


# ---------------------------------------------------------------------------------------------------------------
# Snow and VS-Snow (paper 2)
# ---------------------------------------------------------------------------------------------------------------
def _snow_validate(options: dict[str, Any]) -> None:
    from anonpaper.methods.snow import Snow

    means = options["channel_mean"]
    if means is not None:
        if isinstance(means, (np.ndarray, torch.Tensor)):
            means = means.tolist()
        if (not isinstance(means, (list, tuple)) or not means
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in means)):
            raise ValueError(f"option channel_mean must be a list of numbers (RGB order, 0-255), got {means!r}")
    Snow(options["replace_fraction"], tuple(means or (0.0,)), options["mask_mode"], options["sampling"])


def _snow_apply(images: torch.Tensor, masks, seed: int, options: dict[str, Any]) -> torch.Tensor:
    from anonpaper.methods.snow import snow

    return snow(images, options["replace_fraction"], options["channel_mean"], mask_mode=options["mask_mode"],
                sampling=options["sampling"], seed=seed)


def _snow_dataset_options(images: Iterable[np.ndarray]) -> dict[str, Any]:
    from anonpaper.methods.snow import channel_mean

    return {"channel_mean": channel_mean(images, channels_last=True).tolist()}


def _vs_snow_validate(options: dict[str, Any]) -> None:
    from anonpaper.methods.snow import VSSnow

    VSSnow(options["replace_fraction"], options["window_size"], options["sampling"])


def _vs_snow_apply(images: torch.Tensor, masks, seed: int, options: dict[str, Any]) -> torch.Tensor:
    from anonpaper.methods.snow import vs_snow

    return vs_snow(images, masks, options["replace_fraction"], window_size=options["window_size"],
                   sampling=options["sampling"], seed=seed)


register(MethodSpec(
    name="snow", summary="Snow (paper 2): a fraction p of each channel's values set to the dataset channel mean",
    apply=_snow_apply, validate=_snow_validate, dataset_options=_snow_dataset_options,
    aliases={"p": "replace_fraction"},
    defaults={"replace_fraction": 0.3, "mask_mode": "per_channel", "sampling": "bernoulli", "channel_mean": None}))
register(MethodSpec(
    name="vs-snow", summary="VS-Snow (paper 2): a fraction p of vessel pixels set to the mean of kept vessel "
                            "neighbours", apply=_vs_snow_apply, validate=_vs_snow_validate,
    aliases={"p": "replace_fraction"}, needs_masks=True,
    defaults={"replace_fraction": 0.3, "window_size": 5, "sampling": "bernoulli"}))
