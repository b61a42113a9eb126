"""One registry of image anonymization methods and one image adapter for the CLI, the folder writer and chapters.

``get(name, **options)`` returns an :class:`ImageAnonymizer`: the method with validated options, callable on a
uint8 batch ``(N, H, W, C)`` (the Cohort's NumPy layout) or, with :meth:`ImageAnonymizer.one`, on one image
``(H, W)`` / ``(H, W, C)``. Every caller goes through it, so options, aliases, validation and the array <-> tensor
conversion exist once.

Methods whose options come from the whole dataset (Snow's per-channel means, the constant image's value) leave them
``None`` until :meth:`ImageAnonymizer.fit` computes them from images (one pass, streamed), as the paper does over its
dataset. Methods that mix patients (k-same pixel averaging) anonymize a whole set at once and need the patient of
every image (``needs_patients``); they have no per-image :meth:`ImageAnonymizer.one`.

Registered: ``snow`` and ``vs-snow`` (paper 2); the trivial baselines ``blur`` (Gaussian, ``sigma`` pixels),
``pixelate`` (``block_size`` pixels), ``gaussian-noise`` (``sigma`` in [0, 1] intensity units), ``constant`` (one
constant image: the zero-information release) and ``k-same-pixel`` (k-same pixel averaging over clusters of ``k``
patients, Newton et al. 2005).

Example:
    >>> import numpy as np
    >>> snow = get("snow", p=0.5, channel_mean=[10.0, 20.0, 30.0])
    >>> images = np.full((2, 8, 8, 3), 200, dtype=np.uint8)
    >>> out = snow(images, seed=0)
    >>> out.shape, out.dtype, sorted(np.unique(out[..., 0]).tolist())
    ((2, 8, 8, 3), dtype('uint8'), [10, 200])
    >>> sorted(available())
    ['blur', 'constant', 'gaussian-noise', 'k-same-pixel', 'pixelate', 'snow', 'vs-snow']
    >>> ksame = get("k-same-pixel", k=2)
    >>> ksame(np.array([[[[0]]], [[[10]]], [[[100]]], [[[110]]]], dtype=np.uint8), seed=0,
    ...       patients=["a", "b", "c", "d"]).ravel().tolist()
    [5, 5, 105, 105]
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np

if TYPE_CHECKING:  # torch is imported where a method runs: `anonpaper anonymize --help` reads this without it
    import torch


@dataclass(frozen=True)
class MethodSpec:
    """A registered method.

    Attributes:
        name: Registry name (``"snow"``, ``"vs-snow"``); ``get`` also accepts underscores for hyphens.
        summary: One line for ``--help`` and listings.
        defaults: Accepted option names and defaults (``None``: no default; see ``dataset_options``).
        apply: ``apply(images, masks, seed, options) -> images``: uint8 tensors ``(N, C, H, W)`` in and out,
            ``masks`` bool ``(N, H, W)`` or None; a method with ``needs_patients`` also gets ``patients=`` (an
            ``(N,)`` array of patient ids).
        validate: Raises ValueError on bad option values (called by :func:`get`).
        aliases: Short option names (``{"p": "replace_fraction"}``).
        needs_masks: Whether ``apply`` needs region masks (e.g. vessels).
        needs_patients: Whether ``apply`` anonymizes a whole set at once and needs each image's patient (methods
            that mix patients, e.g. k-same); such a method has no per-image :meth:`ImageAnonymizer.one`.
        whole_set: Whether ``apply`` takes the whole set at once without needing patients (a method that learns
            something from the set first, e.g. the vessel edit's channel ranking); no per-image
            :meth:`ImageAnonymizer.one` either. Implied by ``needs_patients``.
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
    needs_patients: bool = False
    whole_set: bool = False
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
    def takes_whole_set(self) -> bool:
        """Whether the method anonymizes a whole set in one call (``needs_patients`` or ``whole_set``)."""
        return self.method.needs_patients or self.method.whole_set

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

    def __call__(self, images: np.ndarray, *, seed: int, masks: np.ndarray | None = None,
                 patients: Any = None) -> np.ndarray:
        """Anonymize a batch.

        Args:
            images: uint8 ``(N, H, W, C)``. Not modified.
            seed: Seed of the method's random draws for this batch.
            masks: bool ``(N, H, W)`` region masks for methods that need them.
            patients: ``(N,)`` patient id of each image, for methods that need them (``needs_patients``): the
                whole set goes in one call.

        Returns:
            uint8 ``(N, H, W, C)``, a new array.
        """
        if not isinstance(images, np.ndarray) or images.dtype != np.uint8 or images.ndim != 4:
            raise ValueError(f"{self.name}: images must be a uint8 array (N, H, W, C), got "
                             f"{getattr(images, 'dtype', type(images).__name__)} {getattr(images, 'shape', '')}")
        if self.needs_fit:
            raise ValueError(f"{self.name}: dataset options are missing; call .fit(images) or pass them")
        import torch

        if self.method.needs_masks:
            if masks is None or np.shape(masks) != images.shape[:3]:
                raise ValueError(f"{self.name} needs masks of shape {images.shape[:3]}, got "
                                 f"{None if masks is None else np.shape(masks)}")
            masks = torch.from_numpy(np.ascontiguousarray(masks))
        extra = {}
        if self.method.needs_patients:
            ids = np.asarray(patients if patients is not None else [], dtype=object)
            if ids.shape != images.shape[:1]:
                raise ValueError(f"{self.name} needs the patient of every image: patients of shape {images.shape[:1]}, "
                                 f"got {None if patients is None else ids.shape}")
            if any(value is None or str(value).strip() in ("", "nan") for value in ids):
                raise ValueError(f"{self.name}: every image needs a patient id (a missing one was given)")
            extra["patients"] = ids.astype(str)
        batch = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2)))
        result = self.method.apply(batch, masks, int(seed), self.options, **extra)
        return result.numpy().transpose(0, 2, 3, 1)

    def one(self, image: np.ndarray, *, seed: int, mask: np.ndarray | None = None) -> np.ndarray:
        """Anonymize one uint8 image ``(H, W)`` or ``(H, W, C)``; returns the same shape."""
        if self.takes_whole_set:
            raise ValueError(f"{self.name} anonymizes a whole set at once: call it on the batch"
                             + (" with patients=" if self.method.needs_patients else ""))
        if not isinstance(image, np.ndarray) or image.ndim not in (2, 3):
            raise ValueError(f"{self.name}: image must be an array (H, W) or (H, W, C), got "
                             f"{getattr(image, 'shape', type(image).__name__)}")
        batch = (image[:, :, None] if image.ndim == 2 else image)[None]
        result = self(batch, seed=seed, masks=None if mask is None else np.asarray(mask)[None])
        return np.ascontiguousarray(result[0, :, :, 0] if image.ndim == 2 else result[0])


def get(name: str | MethodSpec, **options: Any) -> ImageAnonymizer:
    """The method ``name`` with ``options`` (aliases allowed), validated: a callable :class:`ImageAnonymizer`.

    ``name`` may also be a :class:`MethodSpec` that is not registered: a method built at a higher layer around
    trained networks (e.g. :func:`anonpaper.experiments.k_salsa.release.k_salsa_method`)."""
    method = name if isinstance(name, MethodSpec) else spec(name)
    resolved = resolve_options(method, options)
    method.validate(resolved)
    return ImageAnonymizer(method, resolved)


# ---------------------------------------------------------------------------------------------------------------
# Snow and VS-Snow (paper 2)
# ---------------------------------------------------------------------------------------------------------------
def _channel_values(values: Any, option: str) -> list[float] | None:
    """A per-channel option (a list of numbers, RGB order, 0-255) as a list, or None; ValueError otherwise."""
    if values is None:
        return None
    if hasattr(values, "tolist"):  # numpy arrays and torch tensors
        values = values.tolist()
    if (not isinstance(values, (list, tuple)) or not values
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)):
        raise ValueError(f"option {option} must be a list of numbers (RGB order, 0-255), got {values!r}")
    return [float(v) for v in values]


def _dataset_channel_mean(images: Iterable[np.ndarray]) -> list[float]:
    from anonpaper.methods.snow import channel_mean

    return channel_mean(images, channels_last=True).tolist()


def _snow_validate(options: dict[str, Any]) -> None:
    from anonpaper.methods.snow import Snow

    means = _channel_values(options["channel_mean"], "channel_mean")
    Snow(options["replace_fraction"], tuple(means or (0.0,)), options["mask_mode"], options["sampling"])


def _snow_apply(images: torch.Tensor, masks, seed: int, options: dict[str, Any]) -> torch.Tensor:
    from anonpaper.methods.snow import snow

    return snow(images, options["replace_fraction"], options["channel_mean"], mask_mode=options["mask_mode"],
                sampling=options["sampling"], seed=seed)


def _snow_dataset_options(images: Iterable[np.ndarray]) -> dict[str, Any]:
    return {"channel_mean": _dataset_channel_mean(images)}


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


# ---------------------------------------------------------------------------------------------------------------
# Trivial baselines: blur, pixelation, noise, a constant image, k-same pixel averaging
# ---------------------------------------------------------------------------------------------------------------
def _number(options: dict[str, Any], name: str, minimum: float, *, whole: bool = False, unit: str = "") -> None:
    value = options[name]
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value) and value >= minimum
    if ok and whole:
        ok = float(value) == int(value)
    if not ok:
        kind = "a whole number" if whole else "a finite number"
        raise ValueError(f"option {name} must be {kind} >= {minimum:g}{unit}, got {value!r}")


def _to_unit(images: torch.Tensor) -> torch.Tensor:
    """uint8 (N, C, H, W) -> float32 in [0, 1] (the methods' convention)."""
    import torch

    return images.to(torch.float32) / 255.0


def _to_uint8(images: torch.Tensor) -> torch.Tensor:
    import torch

    return (images * 255.0).round().clamp(0, 255).to(torch.uint8)


def _blur_apply(images: torch.Tensor, masks, seed: int, options: dict[str, Any]) -> torch.Tensor:
    from anonpaper.methods.baselines import gaussian_blur

    return _to_uint8(gaussian_blur(_to_unit(images), float(options["sigma"])))


def _pixelate_apply(images: torch.Tensor, masks, seed: int, options: dict[str, Any]) -> torch.Tensor:
    from anonpaper.methods.baselines import pixelate

    return _to_uint8(pixelate(_to_unit(images), int(options["block_size"])))


def _noise_apply(images: torch.Tensor, masks, seed: int, options: dict[str, Any]) -> torch.Tensor:
    from anonpaper.methods.baselines import gaussian_noise

    return _to_uint8(gaussian_noise(_to_unit(images), float(options["sigma"]), seed))


def _constant_validate(options: dict[str, Any]) -> None:
    values = _channel_values(options["value"], "value")
    if values is not None and not all(0.0 <= v <= 255.0 for v in values):
        raise ValueError(f"option value must hold numbers in [0, 255], got {values!r}")


def _constant_apply(images: torch.Tensor, masks, seed: int, options: dict[str, Any]) -> torch.Tensor:
    from anonpaper.methods.baselines import constant_images

    values = _channel_values(options["value"], "value")
    if len(values) not in (1, images.shape[1]):
        raise ValueError(f"value must hold one value per channel ({images.shape[1]}), got {len(values)}")
    return _to_uint8(constant_images(_to_unit(images), [v / 255.0 for v in values]))


def _k_same_apply(images: torch.Tensor, masks, seed: int, options: dict[str, Any], *,
                  patients: np.ndarray) -> torch.Tensor:
    from anonpaper.methods.ksalsa import k_same_pixel_average, same_size_clusters

    k = int(options["k"])
    pixels = _to_unit(images).double()
    # Clusters of at least k patients in pixel space (each patient's images stay in one cluster); every image is
    # released as the mean of all images of its cluster.
    labels = same_size_clusters(pixels.flatten(1).numpy(), k, groups=patients)
    return _to_uint8(k_same_pixel_average(pixels, labels)[labels])


register(MethodSpec(
    name="blur", summary="Gaussian blur of standard deviation sigma pixels (a trivial baseline)",
    apply=_blur_apply, validate=lambda options: _number(options, "sigma", 0, unit=" (pixels)"),
    defaults={"sigma": 2.0}))
register(MethodSpec(
    name="pixelate", summary="every block_size x block_size block replaced by its mean (a trivial baseline)",
    apply=_pixelate_apply, validate=lambda options: _number(options, "block_size", 1, whole=True),
    aliases={"block": "block_size"}, defaults={"block_size": 4}))
register(MethodSpec(
    name="gaussian-noise", summary="additive Gaussian noise of standard deviation sigma (0-1 intensity units; a "
                                   "trivial baseline)",
    apply=_noise_apply, validate=lambda options: _number(options, "sigma", 0, unit=" (intensity units, 1 = full "
                                                                                    "range)"),
    defaults={"sigma": 0.1}))
register(MethodSpec(
    name="constant", summary="one constant image for every image, the dataset's channel mean unless value is given "
                             "(the zero-information release)",
    apply=_constant_apply, validate=_constant_validate,
    dataset_options=lambda images: {"value": _dataset_channel_mean(images)}, defaults={"value": None}))
register(MethodSpec(
    name="k-same-pixel", summary="k-same pixel averaging: every image replaced by the mean image of its cluster of "
                                 "at least k patients (Newton et al. 2005)",
    apply=_k_same_apply, validate=lambda options: _number(options, "k", 1, whole=True), needs_patients=True,
    defaults={"k": 5}))
