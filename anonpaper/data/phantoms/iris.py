"""Phantom near-infrared iris images (``phantom-iris``): strong identity, eyelid/lash variation, a disease label.

Stands in for the Warsaw-BioBase-Disease-Iris set of paper 5 (disentanglement for case-based explanations). Each
identity (one eye of one subject) has a fixed iris texture drawn from its seed and stored in polar (rubber-sheet)
coordinates: base reflectance, radial fibres, crypts, concentric contraction furrows, a wavy collarette separating
the pupillary and ciliary zones, pigment spots, a pupillary ruff and a darker limbus; plus fixed iris and pupil
radii, pupil decentration and periocular skin texture. The texture is mapped with the pupil radius of the image,
so dilation stretches it like a real iris.

Per image: pupil dilation, gaze offset (translation and horizontal foreshortening), cyclotorsion (rotation of the
texture), camera distance (scale), eyelid aperture and shape, eyelashes, specular highlights of the illuminators,
focus blur, illumination gain and gradient, sensor noise.

Disease (``disease`` 1, about 1 in 4 identities as in the Warsaw set, fixed per identity; ``disease_type``):
``cataract`` (a cloudy, brighter pupil), ``iridectomy`` (a keyhole-shaped dark notch from the pupil into the iris
at a fixed angle, usually superior), ``synechia`` (an irregular, tethered pupil margin). The ``lesion`` mask marks
the changed region (also where a lid covers it); ``severity`` controls how visible it is.

Masks: ``iris`` (visible iris: the annulus between pupil margin and limbus minus lids, lashes and highlights; an
iridectomy notch stays inside it and is marked by ``lesion``), ``pupil`` (visible pupil),
``occlusion`` (the parts of the iris annulus hidden by lids, lashes or highlights), ``lesion``.

Splits: the ``split`` column is a SUBJECT-level 70/10/20 split (``patient_split``, stratified by disease), as the
Cohort validator requires. Paper 5 evaluates identity recognition of KNOWN subjects, so the column
``split_within_subject`` holds an IMAGE-level split inside every identity (about 70/10/20 of each identity's images;
every identity keeps >= 1 training image and, with >= 3 images, >= 1 test image); since the disease is fixed per
identity this keeps the class ratio in every part. Use ``cohort.table["split_within_subject"]`` for that protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pandas as pd

from anonpaper.data.cohort import Cohort
from anonpaper.data.phantoms.drawing import (LRUCache, derive_seed, draw_polyline, gaussian_blur, smooth_noise,
                                             to_uint8)
from anonpaper.data.phantoms.base import RenderedPhantomCohort, load_phantom
from anonpaper.data.splits import patient_split

MASK_NAMES = ("iris", "pupil", "occlusion", "lesion")
DISEASE_TYPES = ("cataract", "iridectomy", "synechia")
_RHO, _THETA = 96, 512  # polar texture resolution (radial x angular samples)


@dataclass
class IrisPhantomConfig:
    """Options of the iris phantom (all are ``load_phantom_iris`` keyword options).

    Attributes:
        n_subjects: Number of subjects (>= 1).
        images_per_eye: Images of each eye (>= 1).
        both_eyes: If True each subject contributes both eyes (two identities); otherwise one eye at random.
        image_size: Square image side in pixels, 64..256.
        seed: Master seed; the same config gives the same table and pixels.
        disease_fraction: Fraction of diseased identities (0.25 is about the Warsaw set's 1:3).
        disease_types: Allowed disease types (subset of ``DISEASE_TYPES``), drawn uniformly.
        variation: Multiplier (>= 0) of per-image acquisition variation; 1 is the realistic default.
        split_fractions: Train/val/test fractions, used for both the subject-level ``split`` and
            ``split_within_subject``.
        cache_size: Rows whose rendering is kept (so image() and masks() of a row render once).
    """

    n_subjects: int = 60
    images_per_eye: int = 10
    both_eyes: bool = False
    image_size: int = 128
    seed: int = 0
    disease_fraction: float = 0.25
    disease_types: tuple[str, ...] = DISEASE_TYPES
    variation: float = 1.0
    split_fractions: tuple[float, float, float] = (0.7, 0.1, 0.2)
    cache_size: int = 64

    def __post_init__(self) -> None:
        if int(self.n_subjects) < 1:
            raise ValueError(f"n_subjects must be >= 1, got {self.n_subjects}")
        if int(self.images_per_eye) < 1:
            raise ValueError(f"images_per_eye must be >= 1, got {self.images_per_eye}")
        if not 64 <= int(self.image_size) <= 256:
            raise ValueError(f"image_size must lie in 64..256 pixels, got {self.image_size}")
        if not 0.0 <= self.disease_fraction <= 1.0:
            raise ValueError(f"disease_fraction must lie in [0, 1], got {self.disease_fraction}")
        self.disease_types = tuple(self.disease_types)
        unknown = set(self.disease_types) - set(DISEASE_TYPES)
        if unknown or not self.disease_types:
            raise ValueError(f"disease_types must be a non-empty subset of {DISEASE_TYPES}, got "
                             f"{self.disease_types}")
        if self.variation < 0:
            raise ValueError(f"variation must be >= 0, got {self.variation}")
        self.split_fractions = tuple(float(value) for value in self.split_fractions)
        self.n_subjects = int(self.n_subjects)
        self.images_per_eye = int(self.images_per_eye)
        self.image_size = int(self.image_size)


# ----------------------------------------------------------------------------------------------------------------
# Identity: parameters and polar texture
# ----------------------------------------------------------------------------------------------------------------


def _identity_parameters(identity_seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(identity_seed)
    return {
        "iris_radius": rng.uniform(0.29, 0.36),  # of the image side
        "pupil_ratio": rng.uniform(0.3, 0.42),  # pupil / iris radius at rest
        "pupil_offset": (rng.uniform(0.0, 0.06), rng.uniform(-0.04, 0.02)),  # of the iris radius (nasal, vertical)
        "sclera": rng.uniform(0.55, 0.72),
        "skin": rng.uniform(0.45, 0.65),
        "lid_tilt": rng.uniform(-0.08, 0.08),
        "lid_shape": rng.uniform(0.9, 1.25),
        "texture_seed": int(rng.integers(0, 2 ** 62)),
        "skin_seed": int(rng.integers(0, 2 ** 62)),
        "lesion_angle": rng.normal(-np.pi / 2, 0.5),  # iridectomies are usually placed superiorly
        "lesion_width": rng.uniform(0.25, 0.45),  # radians
        "lesion_seed": int(rng.integers(0, 2 ** 62)),
    }


def iris_polar_texture(texture_seed: int) -> np.ndarray:
    """The identity's iris reflectance in polar coordinates.

    Args:
        texture_seed: Identity texture seed.

    Returns:
        float32 (96, 512) array, rows = normalised radius rho from the pupil margin (0) to the limbus (1),
        columns = angle 0..2 pi; values roughly in [0.1, 0.8] (NIR reflectance).
    """
    rng = np.random.default_rng(texture_seed)
    rho = np.linspace(0.0, 1.0, _RHO, dtype=np.float32)[:, None]
    theta = np.linspace(0.0, 2 * np.pi, _THETA, endpoint=False, dtype=np.float32)[None, :]
    base = rng.uniform(0.28, 0.58)
    # Radial fibres: fine along the angle, coarse along the radius. Tile three copies so the angle wraps smoothly.
    fibres = smooth_noise(rng, (_RHO, 3 * _THETA), rng.uniform(200, 360), octaves=2)[:, _THETA:2 * _THETA]
    blend = np.linspace(0, 1, 32, dtype=np.float32)
    fibres[:, :32] = fibres[:, :32] * blend + fibres[:, -32:][:, ::-1] * (1 - blend)  # soften the seam
    coarse = smooth_noise(rng, (_RHO, _THETA), 10, octaves=2)
    texture = base + 0.07 * fibres + 0.07 * coarse
    # Collarette: wavy ring separating the pupillary zone (darker or lighter) from the ciliary zone.
    harmonics = np.arange(1, 9, dtype=np.float32)[:, None]
    wave = (rng.normal(0, 0.03, (8, 1)) / np.sqrt(harmonics) * np.cos(harmonics * theta + rng.uniform(
        0, 2 * np.pi, (8, 1)))).sum(0, keepdims=True)
    collarette = rng.uniform(0.25, 0.4) + wave
    texture += rng.uniform(-0.08, 0.08) * (rho < collarette)
    texture += 0.12 * np.exp(-((rho - collarette) / 0.025) ** 2)
    # Contraction furrows: broken concentric dark rings in the ciliary zone.
    for _ in range(int(rng.integers(2, 5))):
        radius = rng.uniform(0.55, 0.92)
        strength = np.clip(smooth_noise(rng, (1, _THETA), 6), 0, None)
        texture -= 0.1 * strength * np.exp(-((rho - radius) / 0.012) ** 2)
    # Crypts (dark lacunae) and pigment spots drawn in a tiled canvas so blobs wrap around the angle.
    tiled = np.zeros((_RHO, 3 * _THETA), np.float32)
    for _ in range(int(rng.integers(8, 26))):
        center = (int(_THETA + rng.uniform(0, _THETA)), int(rng.uniform(0.2, 0.85) * _RHO))
        axes = (int(rng.uniform(6, 26)), int(rng.uniform(4, 12)))
        cv2.ellipse(tiled, center, axes, float(rng.uniform(-20, 20)), 0, 360, float(rng.uniform(0.14, 0.3)), -1)
    spots = np.zeros_like(tiled)
    for _ in range(int(rng.integers(0, 6))):
        center = (int(_THETA + rng.uniform(0, _THETA)), int(rng.uniform(0.3, 0.95) * _RHO))
        cv2.circle(spots, center, int(rng.uniform(2, 5)), float(rng.uniform(0.12, 0.22)), -1)
    holes = gaussian_blur(tiled + spots, 1.2)
    holes = holes[:, _THETA:2 * _THETA] + holes[:, :_THETA] + holes[:, 2 * _THETA:]
    texture -= holes
    texture -= 0.2 * np.exp(-rho / 0.03)  # pupillary ruff
    texture -= 0.12 * np.clip((rho - 0.85) / 0.15, 0, 1) ** 2  # darker limbus
    return np.clip(texture, 0.05, 0.9).astype(np.float32)


# ----------------------------------------------------------------------------------------------------------------
# Rendering
# ----------------------------------------------------------------------------------------------------------------


def _wrap(angles: np.ndarray) -> np.ndarray:
    """Wrap angle differences (radians) to [-pi, pi), keeping the dtype."""
    two_pi = np.asarray(2 * np.pi, angles.dtype)
    return np.mod(angles + two_pi / 2, two_pi) - two_pi / 2


def render_iris(identity: dict[str, Any], texture: np.ndarray, skin: np.ndarray, row: dict[str, Any], size: int
                ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Render one NIR iris image and its masks.

    Returns:
        (image uint8 (size, size), masks {name: bool (size, size)} for ``MASK_NAMES``).
    """
    rng = np.random.default_rng(int(row["image_seed"]))
    mirror = -1.0 if row["eye"] == "L" else 1.0  # nasal side flips between eyes
    iris_radius = identity["iris_radius"] * float(row["scale"]) * size
    center_x = (0.5 + float(row["gaze_x"])) * size
    center_y = (0.5 + float(row["gaze_y"])) * size
    squash = float(row["foreshortening"])
    pupil_radius = iris_radius * float(row["pupil_ratio"])
    offset_x = mirror * identity["pupil_offset"][0] * iris_radius
    offset_y = identity["pupil_offset"][1] * iris_radius
    coordinates = np.arange(size, dtype=np.float32) + 0.5
    dx = np.ascontiguousarray(np.broadcast_to((coordinates[None, :] - center_x) / squash, (size, size)))
    dy = np.ascontiguousarray(np.broadcast_to(coordinates[:, None] - center_y, (size, size)))
    radius, angle = cv2.cartToPolar(dx, dy)  # float32, angle in [0, 2 pi) measured with y pointing down
    safe_radius = np.maximum(radius, 1e-3)
    cos_a, sin_a = dx / safe_radius, dy / safe_radius
    # Pupil margin along each ray from the iris centre (first order in the small decentration).
    pupil_edge = pupil_radius + offset_x * cos_a + offset_y * sin_a
    if row["disease_type"] == "synechia":
        # Tethered margin: the pupil is pulled out towards a few anchor points.
        lesion_rng = np.random.default_rng(identity["lesion_seed"])
        pull = np.zeros_like(angle)
        for _ in range(int(lesion_rng.integers(1, 4))):
            anchor = lesion_rng.uniform(-np.pi, np.pi)
            difference = _wrap(angle - np.float32(anchor))
            pull += np.exp(-(difference / lesion_rng.uniform(0.15, 0.35)) ** 2)
        circular_pupil = radius < pupil_edge
        pupil_edge = pupil_edge + float(row["severity"]) * 0.35 * pupil_radius * np.minimum(pull, 1.0)
    rho = (radius - pupil_edge) / np.maximum(iris_radius - pupil_edge, 1e-3)
    annulus = (rho >= 0) & (rho <= 1)
    pupil = rho < 0
    # Sample the polar texture (rotation = cyclotorsion; left eyes mirrored).
    mirrored_angle = angle if mirror > 0 else np.float32(np.pi) - angle  # horizontal mirror for left eyes
    theta = np.mod(mirrored_angle - np.float32(np.deg2rad(float(row["rotation_deg"]))), np.float32(2 * np.pi))
    map_x = (theta * (_THETA / (2 * np.pi))).astype(np.float32)
    map_y = (np.clip(rho, 0, 1) * (_RHO - 1)).astype(np.float32)
    iris_values = cv2.remap(texture, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_WRAP)

    lesion = np.zeros((size, size), bool)
    severity = float(row["severity"])
    image = np.where(radius > iris_radius, identity["sclera"] * (1 - 0.25 * np.clip(
        (radius - iris_radius) / iris_radius, 0, 1)), iris_values).astype(np.float32)
    pupil_value = np.full((size, size), 0.04, np.float32)
    if row["disease_type"] == "cataract":
        haze = 0.55 + 0.45 * smooth_noise(np.random.default_rng(identity["lesion_seed"]), (size, size), 6)
        pupil_value = pupil_value + severity * 0.45 * np.clip(haze, 0.1, 1.5) * np.clip(
            1 - radius / np.maximum(pupil_edge, 1), 0.2, 1) ** 0.3
        lesion = pupil.copy()
    elif row["disease_type"] == "iridectomy":
        difference = _wrap(theta - np.float32(identity["lesion_angle"]))
        half_width = identity["lesion_width"] * (0.5 + 0.5 * severity) * (1 - 0.5 * np.clip(rho, 0, 1))
        lesion = annulus & (np.abs(difference) < half_width) & (rho < 0.55 + 0.4 * severity)
        image = np.where(lesion, 0.06, image)
    elif row["disease_type"] == "synechia":
        lesion = pupil ^ circular_pupil
    image = np.where(pupil, pupil_value, image)

    # Periocular skin and eyelids: the eye opening lies between two parabolas.
    half_opening = 1.35 * iris_radius
    x_rel = (coordinates[None, :] - center_x) / half_opening
    upper = center_y - iris_radius * float(row["upper_lid"]) * (1 - identity["lid_shape"] * 0.6 * x_rel ** 2) \
        + identity["lid_tilt"] * iris_radius * x_rel * mirror
    lower = center_y + iris_radius * float(row["lower_lid"]) * (1 - 0.55 * x_rel ** 2)
    rows = coordinates[:, None]
    opening = (rows > upper) & (rows < lower) & (np.abs(x_rel) < 1.15)
    image = np.where(opening, image, skin)
    margin = np.exp(-((rows - upper) / (0.04 * iris_radius)) ** 2) + 0.6 * np.exp(
        -((rows - lower) / (0.04 * iris_radius)) ** 2)
    image = image * (1 - 0.5 * np.clip(margin, 0, 1) * (np.abs(x_rel) < 1.2))
    # Eyelashes: dark curved strokes hanging from the upper lid.
    lashes = np.zeros((size, size), np.float32)
    for _ in range(int(row["n_lashes"])):
        x0 = rng.uniform(-0.9, 0.9)
        root = np.array([center_x + x0 * half_opening,
                         float(np.interp(center_x + x0 * half_opening, coordinates, upper[0]))])
        length = rng.uniform(0.15, 0.45) * iris_radius
        direction = np.array([rng.normal(0.5 * x0, 0.25), 1.0])
        curl = np.array([rng.normal(0, 0.2), -0.3])
        s = np.linspace(0, 1, 6)[:, None]
        points = root + length * (s * direction + s ** 2 * curl)
        draw_polyline(lashes, points, 1.0, max(1.0, 0.008 * size))
    lash_mask = lashes > 0.4
    image = image * (1 - 0.8 * np.clip(lashes, 0, 1))
    # Specular highlights of the illuminators (saturating).
    highlights = np.zeros((size, size), np.float32)
    for index in range(int(row["n_highlights"])):
        hx = center_x + offset_x + rng.normal(0, 0.25) * pupil_radius + (index - 0.5) * 0.4 * pupil_radius
        hy = center_y + offset_y + rng.normal(0, 0.25) * pupil_radius
        cv2.circle(highlights, (int(hx), int(hy)), max(1, int(rng.uniform(0.02, 0.04) * size)), 1.0, -1)
    highlight_mask = highlights > 0.5
    image = np.where(highlight_mask, 1.0, image)

    # Camera: illumination gain/gradient, focus, noise.
    gradient = 1 + float(row["illumination_slope"]) * (coordinates[None, :] / size - 0.5)
    image = image * float(row["gain"]) * gradient
    image = gaussian_blur(image.astype(np.float32), float(row["blur_px"]) * size / 128.0)
    image = image + float(row["noise_sigma"]) * rng.standard_normal((size, size), dtype=np.float32)

    occluders = ~opening | lash_mask | highlight_mask
    masks = {
        "iris": annulus & ~occluders,
        "pupil": pupil & ~occluders,
        "occlusion": annulus & occluders,
        "lesion": lesion,
    }
    return to_uint8(image), masks


# ----------------------------------------------------------------------------------------------------------------
# Table and cohort
# ----------------------------------------------------------------------------------------------------------------


def _split_within_subject(table: pd.DataFrame, fractions: tuple[float, float, float], seed: int) -> pd.Series:
    """Image-level split inside each identity (see the module docstring)."""
    result = pd.Series("train", index=table.index, name="split_within_subject")
    rng = np.random.default_rng(derive_seed(seed, "iris-within"))
    for _, index in sorted(table.groupby("identity").groups.items()):
        order = np.array(sorted(index))
        rng.shuffle(order)
        count = len(order)
        n_test = int(round(fractions[2] * count))
        n_val = int(round(fractions[1] * count))
        if count >= 3:
            n_test = max(n_test, 1)
        n_test = min(n_test, count - 1)
        n_val = min(n_val, count - 1 - n_test)
        result.loc[order[:n_test]] = "test"
        result.loc[order[n_test:n_test + n_val]] = "val"
    return result


def build_iris_table(config: IrisPhantomConfig) -> pd.DataFrame:
    """The phantom's table (one row per image). Deterministic in ``config``."""
    rows: list[dict[str, Any]] = []
    variation = config.variation
    for subject in range(config.n_subjects):
        subject_seed = derive_seed(config.seed, "iris-subject", subject)
        rng = np.random.default_rng(derive_seed(subject_seed, "table"))
        sex = "M" if rng.random() < 0.5 else "F"
        age = float(np.clip(rng.normal(55, 18), 12, 90))
        eyes = ("L", "R") if config.both_eyes else (str(rng.choice(["L", "R"])),)
        for eye in eyes:
            identity_seed = derive_seed(subject_seed, "eye", eye)
            erng = np.random.default_rng(derive_seed(identity_seed, "disease"))
            diseased = bool(erng.random() < config.disease_fraction)
            disease_type = str(erng.choice(list(config.disease_types))) if diseased else ""
            identity_parameters = _identity_parameters(identity_seed)
            resting_ratio = identity_parameters["pupil_ratio"]
            severity = float(erng.uniform(0.3, 1.0)) if diseased else 0.0
            for index in range(config.images_per_eye):
                image_seed = derive_seed(identity_seed, "image", index)
                irng = np.random.default_rng(derive_seed(image_seed, "table"))
                rows.append({
                    "image_id": f"iris-s{subject:05d}-{eye}-{index:03d}",
                    "patient_id": f"iris-s{subject:05d}",
                    "identity": f"iris-s{subject:05d}-{eye}",
                    "eye": eye,
                    "source": "phantom-iris",
                    "sex": sex,
                    "age": round(age, 1),
                    "disease": int(diseased),
                    "disease_type": disease_type,
                    "severity": round(float(np.clip(severity + 0.05 * irng.normal(), 0.2, 1.0)), 4)
                    if diseased else 0.0,
                    "image_size": config.image_size,
                    "image_seed": image_seed,
                    "identity_seed": identity_seed,
                    "dilation": (dilation := float(np.clip(np.exp(0.18 * variation * irng.normal()), 0.7, 1.5))),
                    "pupil_ratio": float(np.clip(resting_ratio * dilation, 0.18, 0.65)),
                    "gaze_x": float(0.05 * variation * irng.uniform(-1, 1)),
                    "gaze_y": float(0.04 * variation * irng.uniform(-1, 1)),
                    "foreshortening": float(1 - 0.06 * variation * irng.random()),
                    "rotation_deg": float(8.0 * variation * irng.uniform(-1, 1)),
                    "scale": (scale := float(1 + 0.05 * variation * irng.uniform(-1, 1))),
                    "iris_radius_px": identity_parameters["iris_radius"] * scale * config.image_size,
                    "upper_lid": float(np.clip(1.05 - 0.45 * variation * irng.random(), 0.45, 1.3)),
                    "lower_lid": float(np.clip(1.15 - 0.3 * variation * irng.random(), 0.7, 1.3)),
                    "n_lashes": int(irng.integers(5, 5 + int(35 * variation) + 1)),
                    "n_highlights": int(irng.integers(1, 3)),
                    "gain": float(np.exp(0.15 * variation * irng.uniform(-1, 1))),
                    "illumination_slope": float(0.2 * variation * irng.uniform(-1, 1)),
                    "blur_px": float(0.3 + 1.0 * variation * irng.random() ** 2),
                    "noise_sigma": float(0.01 + 0.02 * variation * irng.random()),
                })
    table = pd.DataFrame(rows)
    table["split"] = patient_split(table, config.split_fractions, stratify="disease", seed=config.seed)
    table["split_within_subject"] = _split_within_subject(table, config.split_fractions, config.seed)
    leading = ["image_id", "patient_id", "identity", "eye", "split", "split_within_subject", "source", "disease"]
    return table[leading + [column for column in table.columns if column not in leading]]


class IrisPhantomCohort(RenderedPhantomCohort):
    """Phantom NIR iris images: uint8 (H, W) grayscale rendered on demand, masks in ``MASK_NAMES``.

    ``split`` is subject-level (no subject in two splits); ``split_within_subject`` is the image-level split of
    paper 5's known-subject protocol. ``identity`` names the eye (equal to ``patient_id`` + eye).
    """

    modality = "iris"
    channels = 1
    mask_names = MASK_NAMES

    def __init__(self, config: IrisPhantomConfig | None = None, name: str = "phantom-iris"):
        self.config = config or IrisPhantomConfig()
        super().__init__(name, build_iris_table(self.config))
        self._render_cache = LRUCache(self.config.cache_size)
        self._patient_cache = LRUCache(max(4, min(64, self.config.cache_size)))

    def _identity(self, row: pd.Series) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
        identity_seed = int(row["identity_seed"])
        size = self.config.image_size

        def compute():
            identity = _identity_parameters(identity_seed)
            texture = iris_polar_texture(identity["texture_seed"])
            skin_rng = np.random.default_rng(identity["skin_seed"])
            skin = (identity["skin"] + 0.07 * smooth_noise(skin_rng, (size, size), 5, octaves=3)).astype(np.float32)
            return identity, texture, skin

        return self._patient_cache.get((identity_seed, size), compute)

    def _render(self, row: pd.Series) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        def compute():
            identity, texture, skin = self._identity(row)
            return render_iris(identity, texture, skin, row.to_dict(), self.config.image_size)

        return self._render_cache.get(str(row["image_id"]), compute)


def load_phantom_iris(root: str | Path | None = None, **options: Any) -> Cohort:
    """Registry loader of ``phantom-iris``: ``options`` are :class:`IrisPhantomConfig` fields; a ``root`` written by
    :func:`anonpaper.data.export.write_cohort` is read instead.

    Raises:
        ValueError: For an unknown option (listing the known ones) or an invalid value.
    """
    return load_phantom("phantom-iris", IrisPhantomConfig, IrisPhantomCohort, root, options)


# ----------------------------------------------------------------------------------------------------------------
# Cohort-chapter helpers
# ----------------------------------------------------------------------------------------------------------------
