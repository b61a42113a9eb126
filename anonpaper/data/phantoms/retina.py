"""The procedural retina (fundus) phantom cohort ``phantom-retina``: patients, vessel trees, DR lesions, masks.

Each patient has one eye with a fixed anatomy (vessel tree of arteries and veins grown from the optic disc, disc
and fovea geometry, pigmentation and tessellation, DR lesions for the patient's grade); each of the patient's
images shows that anatomy under its own pose and photometric acquisition. Images and masks are rendered on demand
from per-row parameters stored in the table, so the cohort is a deterministic function of its config.

Sex signal (papers 1-2). Sex acts on latent traits as standardised mean shifts, ``shift = sex_effect * weight *
base`` (women positive), with ``base`` from ``SEX_SHIFT_SD``: arteriolar calibre (0.9 SD; women wider arterioles,
hence a higher artery/vein ratio), arteriolar bifurcation angle (0.7 SD; women larger) and the radius of the
temporal arcades around the macula (1.5 SD; women wider arcades, men narrower, as in longer eyes: men's eyes are
longer on average), scaled by ``vascular_sex_weight``; disc size (-0.3 SD; men about 3 % larger) and choroidal
tessellation (-0.5 SD; men more), scaled by ``nonvascular_sex_weight``.

Why these sizes: real deep networks find sex in fundus photographs from many subtle cues with 10^5 images at
~600 px; this study's CPU attackers see a few hundred images at 128 px. With the effects at the sizes reported
for real eyes (``LITERATURE_SEX_SHIFT_SD``: calibre 0.45 SD, angle 0.35 SD, disc 0.15 SD, tessellation 0.25 SD)
a ResNet-10-T from scratch stayed at chance; scaling every trait six-fold let it reach ~79 % but mostly from the
disc and tessellation (79 % with the vessels inpainted away, too). The default therefore doubles the literature
shifts and adds one large-scale vascular cue, the arcade course, that a small network sees at 128 px: measured at
128 px, 300 patients, 12 epochs, a ResNet-10-T reached 65 % with the arcade at 1.0 SD, 90 % at 2.0 SD and about
the middle of the papers' 75-83 % band at the default 1.5 SD (see the cohort chapter for the current numbers,
with and without vessels). The latent traits alone separate the sexes almost perfectly
(:func:`sex_signal_auc`); the images carry far less, which is what the chapter measures. ``sex_effect = 0``
removes the signal.

Example:
    >>> cohort = load_phantom_retina(n_patients=4, image_size=64, seed=1)
    >>> image = cohort.image(0)
    >>> image.shape, image.dtype.name
    ((64, 64, 3), 'uint8')
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from anonpaper.data.cohort import Cohort, dr_grade_to_3class
from anonpaper.data.phantoms.base import load_phantom
from anonpaper.data.phantoms.drawing import LRUCache, derive_seed
from anonpaper.data.phantoms.retina_anatomy import (
    LESION_TYPES, PatientAnatomy, PatientTraits, lesion_counts_for_grade, make_anatomy)
from anonpaper.data.phantoms.retina_render import MASK_NAMES, Acquisition, RenderedFundus, render_fundus
from anonpaper.data.splits import patient_split

NAME = "phantom-retina"
# Standardised (SD-unit) sex shifts of the latent traits at sex_effect = 1, weight = 1 (women +, men -).
SEX_SHIFT_SD = {"artery_calibre": 0.9, "bifurcation_angle": 0.7, "arcade_radius": 1.5, "disc_scale": -0.3,
                "tessellation": -0.5}
# The shifts at the sizes reported for real eyes (population studies of retinal vessel calibre and disc size). The
# arcade course has no published sex effect (it follows axial length) and is 0 here. ``sex_effect = 0.5`` gives
# these sizes for the four published traits (with the arcade at 0.75 SD).
LITERATURE_SEX_SHIFT_SD = {"artery_calibre": 0.45, "bifurcation_angle": 0.35, "arcade_radius": 0.0,
                           "disc_scale": -0.15, "tessellation": -0.25}
TRAIT_SD = {"artery_calibre": 0.05, "bifurcation_angle": 5.0, "arcade_radius": 0.03, "disc_scale": 0.1,
            "tessellation": 0.25}
TRAIT_MEAN = {"artery_calibre": 1.0, "bifurcation_angle": 75.0, "arcade_radius": 0.56, "disc_scale": 1.0,
              "tessellation": 0.45}
VASCULAR_TRAITS = ("artery_calibre", "bifurcation_angle", "arcade_radius")

# ICDR grade 0-4 probabilities per patient (every image of a patient has the patient's grade, and the image count
# does not depend on the grade, so the expected image-level frequencies are the same).
PHANTOM_DEFAULT_DR_GRADES = (0.4, 0.15, 0.2, 0.1, 0.15)


def _spread_positive_fraction(positive: float) -> tuple[float, float, float, float, float]:
    """Grade probabilities with ``P(grade >= 1) = positive``, split over grades 1-4 in the phantom default's
    proportions among diseased grades (0.15 : 0.2 : 0.1 : 0.15), because the sources give only the positive
    fraction."""
    diseased = PHANTOM_DEFAULT_DR_GRADES[1:]
    total = sum(diseased)
    return (1.0 - positive,) + tuple(positive * share / total for share in diseased)


DR_GRADE_PRESETS: dict[str, tuple[float, float, float, float, float]] = {
    # The phantom's own mix (60 % diseased, 15 % PDR): enough of every grade for small cohorts to learn from.
    "phantom-default": PHANTOM_DEFAULT_DR_GRADES,
    # BRSET: "Only 4.2% of the images have positive DR" (Snow / VS-Snow, paper 2, data section); positive taken as
    # ICDR grade >= 1, spread over grades 1-4 by _spread_positive_fraction.
    "brset": _spread_positive_fraction(0.042),
    # Diabetes Center (private, paper 2): "21% of the images have positive DR"; spread the same way.
    "diabetes-center": _spread_positive_fraction(0.21),
}


def resolve_dr_grade_probabilities(value: Any) -> tuple[float, float, float, float, float]:
    """A DR grade distribution from a preset name (:data:`DR_GRADE_PRESETS`) or five probabilities.

    Args:
        value: A preset name (``"phantom-default"``, ``"brset"``, ``"diabetes-center"``) or a sequence of five
            finite, non-negative probabilities of ICDR grades 0-4 summing to 1 (within 1e-6).

    Returns:
        The five probabilities as floats.

    Raises:
        ValueError: For an unknown preset name or an invalid sequence, naming expected and observed.

    Example:
        >>> [round(p, 4) for p in resolve_dr_grade_probabilities("brset")]
        [0.958, 0.0105, 0.014, 0.007, 0.0105]
    """
    if isinstance(value, str):
        if value not in DR_GRADE_PRESETS:
            raise ValueError(f"dr_grade_probabilities: expected a preset in {sorted(DR_GRADE_PRESETS)} or five "
                             f"probabilities, observed {value!r}")
        return DR_GRADE_PRESETS[value]
    try:
        probabilities = tuple(float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"dr_grade_probabilities: expected five probabilities or a preset name, observed "
                         f"{value!r}") from None
    if len(probabilities) != 5 or not all(math.isfinite(p) and p >= 0 for p in probabilities) \
            or abs(sum(probabilities) - 1) >= 1e-6:
        raise ValueError(f"dr_grade_probabilities must be 5 non-negative numbers summing to 1, got {probabilities}")
    return probabilities
ACQUISITION_FIELDS = tuple(f.name for f in dataclasses.fields(Acquisition))


@dataclass
class RetinaPhantomConfig:
    """Parameters of the retina phantom cohort.

    Attributes:
        n_patients: Number of patients (>= 1).
        images_per_patient: Inclusive (low, high) range; each patient gets a uniform count in it.
        image_size: Square image side in pixels, 64-1024.
        seed: Master seed; patient i's anatomy and image j's acquisition depend only on (seed, i, j).
        female_fraction: Probability that a patient is female, in [0, 1].
        dr_grade_probabilities: Probabilities of ICDR grades 0-4 per patient (five non-negative numbers summing
            to 1), or a preset name from :data:`DR_GRADE_PRESETS` (``"phantom-default"``, the default: 60 %
            diseased, 15 % PDR; ``"brset"``: 4.2 % positive; ``"diabetes-center"``: 21 % positive, both paper 2).
            Stored resolved, as the five numbers.
        sex_effect: Global strength of the sex effect on the latent traits (0 = none, 1 = default).
        vascular_sex_weight: Multiplier of the vascular sex effects (arteriolar calibre, bifurcation angle,
            arcade radius).
        nonvascular_sex_weight: Multiplier of the non-vascular sex effects (disc size, tessellation).
        acquisition_variability: Multiplier of all per-image pose and photometric ranges (0 = identical
            acquisitions; 1 = rotation about +-10 degrees, scale +-5 %, shifts, illumination, colour, blur, noise).
        age_mean: Mean age in years.
        age_std: Age standard deviation in years (ages are clipped to 20-90).
        split_fractions: Patient-level train/val/test fractions (split stratified by sex).
        vessel_length_ratio: Range of branch length / diameter ratios (controls vessel density).
        cache_size: Number of rendered rows kept in the LRU cache (image and masks of a row render once).
    """

    n_patients: int = 40
    images_per_patient: tuple[int, int] = (1, 4)
    image_size: int = 256
    seed: int = 0
    female_fraction: float = 0.5
    dr_grade_probabilities: tuple[float, float, float, float, float] | str = PHANTOM_DEFAULT_DR_GRADES
    sex_effect: float = 1.0
    vascular_sex_weight: float = 1.0
    nonvascular_sex_weight: float = 1.0
    acquisition_variability: float = 1.0
    age_mean: float = 55.0
    age_std: float = 12.0
    split_fractions: tuple[float, float, float] = (0.7, 0.1, 0.2)
    vessel_length_ratio: tuple[float, float] = (16.0, 32.0)
    cache_size: int = 8

    def __post_init__(self) -> None:
        self.images_per_patient = tuple(int(v) for v in np.atleast_1d(self.images_per_patient))
        if len(self.images_per_patient) == 1:
            self.images_per_patient = self.images_per_patient * 2
        self.dr_grade_probabilities = resolve_dr_grade_probabilities(self.dr_grade_probabilities)
        self.split_fractions = tuple(float(v) for v in self.split_fractions)
        self.vessel_length_ratio = tuple(float(v) for v in self.vessel_length_ratio)
        checks = [
            (isinstance(self.n_patients, (int, np.integer)) and self.n_patients >= 1,
             f"n_patients must be an integer >= 1, got {self.n_patients!r}"),
            (len(self.images_per_patient) == 2 and 1 <= self.images_per_patient[0] <= self.images_per_patient[1],
             f"images_per_patient must be (low, high) with 1 <= low <= high, got {self.images_per_patient}"),
            (isinstance(self.image_size, (int, np.integer)) and 64 <= self.image_size <= 1024,
             f"image_size must be an integer in 64..1024, got {self.image_size!r}"),
            (isinstance(self.seed, (int, np.integer)) and self.seed >= 0,
             f"seed must be a non-negative integer, got {self.seed!r}"),
            (0.0 <= self.female_fraction <= 1.0, f"female_fraction must lie in [0, 1], got {self.female_fraction}"),
            (self.sex_effect >= 0 and self.vascular_sex_weight >= 0 and self.nonvascular_sex_weight >= 0,
             "sex_effect, vascular_sex_weight and nonvascular_sex_weight must be >= 0, got "
             f"{self.sex_effect}, {self.vascular_sex_weight}, {self.nonvascular_sex_weight}"),
            (0.0 <= self.acquisition_variability <= 3.0,
             f"acquisition_variability must lie in [0, 3], got {self.acquisition_variability}"),
            (self.age_std >= 0, f"age_std must be >= 0, got {self.age_std}"),
            (len(self.vessel_length_ratio) == 2 and 0 < self.vessel_length_ratio[0] <= self.vessel_length_ratio[1],
             f"vessel_length_ratio must be (low, high) with 0 < low <= high, got {self.vessel_length_ratio}"),
            (self.cache_size >= 0, f"cache_size must be >= 0, got {self.cache_size}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


def sex_signal_auc(config: RetinaPhantomConfig, traits: tuple[str, ...] | None = None) -> float:
    """Bayes-optimal patient-level AUC of sex from the latent traits (equal-variance Gaussian classes).

    Each trait's class separation is ``d_i = 2 * shift_i`` SD units; independent traits add as ``D = sqrt(sum
    d_i^2)`` and ``AUC = Phi(D / sqrt(2))``. This is an upper bound for any classifier of the images.

    Args:
        config: The cohort config.
        traits: Which of ``SEX_SHIFT_SD`` to use (default all).

    Returns:
        AUC in [0.5, 1]; higher means a stronger sex signal.
    """
    names = tuple(SEX_SHIFT_SD) if traits is None else traits
    unknown = set(names) - set(SEX_SHIFT_SD)
    if unknown:
        raise ValueError(f"unknown traits {sorted(unknown)}; known: {sorted(SEX_SHIFT_SD)}")
    total = 0.0
    for name in names:
        weight = config.vascular_sex_weight if name in VASCULAR_TRAITS else config.nonvascular_sex_weight
        total += (2 * config.sex_effect * weight * SEX_SHIFT_SD[name]) ** 2
    return float(0.5 * (1 + math.erf(math.sqrt(total) / 2)))


def _patient_rows(config: RetinaPhantomConfig, index: int) -> list[dict[str, Any]]:
    """Table rows (one per image) of patient ``index``; depends only on (config, index)."""
    rng = np.random.default_rng(derive_seed(config.seed, "retina-patient", index))
    sex = "F" if rng.random() < config.female_fraction else "M"
    sign = 1.0 if sex == "F" else -1.0
    grade = int(rng.choice(5, p=np.asarray(config.dr_grade_probabilities)))
    traits = {}

    def draw_trait(name: str) -> float:
        weight = config.vascular_sex_weight if name in VASCULAR_TRAITS else config.nonvascular_sex_weight
        shift = config.sex_effect * weight * SEX_SHIFT_SD[name] * sign
        return TRAIT_MEAN[name] + TRAIT_SD[name] * (rng.standard_normal() + shift)

    for name in ("artery_calibre", "bifurcation_angle", "disc_scale", "tessellation"):
        traits[name] = draw_trait(name)
    traits["tessellation"] = max(traits["tessellation"], 0.0)
    traits["vein_calibre"] = 1.0 + 0.05 * rng.standard_normal()
    traits["pigmentation"] = rng.uniform(0.05, 0.7)
    counts = lesion_counts_for_grade(rng, grade)
    patient = {
        "patient_id": f"R{config.seed}-{index:05d}", "source": NAME, "eye": "R" if rng.random() < 0.5 else "L",
        "sex": sex, "age": float(np.clip(rng.normal(config.age_mean, config.age_std), 20, 90)).__round__(1),
        "dr_grade": grade, "dr_3class": int(dr_grade_to_3class(grade)),
        **{f"trait_{name}": float(value) for name, value in traits.items()},
        **{f"n_{name}": int(count) for name, count in counts.items()},
        "anatomy_seed": derive_seed(config.seed, "retina-anatomy", index),
    }
    low, high = config.images_per_patient
    image_count = int(rng.integers(low, high + 1))
    # Drawn last, so that adding this trait left every earlier draw (labels, traits, image counts) unchanged.
    patient["trait_arcade_radius"] = float(draw_trait("arcade_radius"))
    rows = []
    v = config.acquisition_variability
    for image in range(image_count):
        irng = np.random.default_rng(derive_seed(config.seed, "retina-image", index, image))
        acquisition = Acquisition(
            rotation_deg=float(np.clip(irng.normal(0, 5), -10, 10) * v),
            scale=float(1 + irng.uniform(-0.05, 0.05) * v),
            shift_x=float(irng.uniform(-0.03, 0.03) * v), shift_y=float(irng.uniform(-0.03, 0.03) * v),
            brightness=float(np.clip(1 + irng.normal(0, 0.1) * v, 0.5, 1.5)),
            gradient_x=float(irng.normal(0, 0.08) * v), gradient_y=float(irng.normal(0, 0.08) * v),
            colour_r=float(1 + irng.normal(0, 0.05) * v), colour_g=float(1 + irng.normal(0, 0.05) * v),
            colour_b=float(1 + irng.normal(0, 0.05) * v),
            gamma=float(np.exp(irng.normal(0, 0.1) * v)),
            blur_sigma=float(0.4 + irng.uniform(0, 0.8) * v),
            noise_std=float(0.006 + irng.uniform(0, 0.012) * v),
            vignetting=float(0.12 + irng.uniform(0, 0.2) * v),
            noise_seed=derive_seed(config.seed, "retina-noise", index, image))
        rows.append({"image_id": f"{patient['patient_id']}-{image:02d}", **patient, "image_index": image,
                     "image_size": config.image_size, **dataclasses.asdict(acquisition)})
    return rows


def make_retina_table(config: RetinaPhantomConfig) -> pd.DataFrame:
    """The cohort table: one row per image with patient labels, latent traits, lesion counts and acquisition.

    Columns: image_id, patient_id, split, source, eye, sex, age, dr_grade, dr_3class, trait_* (latent traits),
    n_* (lesion counts per type), anatomy_seed, image_index, image_size, and the Acquisition fields.
    """
    rows = [row for index in range(config.n_patients) for row in _patient_rows(config, index)]
    table = pd.DataFrame(rows)
    table["split"] = patient_split(table, config.split_fractions, stratify="sex", seed=config.seed).to_numpy()
    first = ["image_id", "patient_id", "split", "source", "eye", "sex", "age", "dr_grade", "dr_3class"]
    return table[first + [c for c in table.columns if c not in first]]


def _traits_from_row(row: pd.Series) -> PatientTraits:
    return PatientTraits(
        sex=str(row["sex"]), eye=str(row["eye"]), age=float(row["age"]), dr_grade=int(row["dr_grade"]),
        artery_calibre=float(row["trait_artery_calibre"]), vein_calibre=float(row["trait_vein_calibre"]),
        bifurcation_angle=float(row["trait_bifurcation_angle"]), disc_scale=float(row["trait_disc_scale"]),
        tessellation=float(row["trait_tessellation"]), pigmentation=float(row["trait_pigmentation"]),
        arcade_radius=float(row["trait_arcade_radius"]),
        lesion_counts={name: int(row[f"n_{name}"]) for name in LESION_TYPES})


class RetinaPhantomCohort(Cohort):
    """The procedural fundus cohort (modality "fundus", RGB, masks ``MASK_NAMES``).

    Images are rendered on demand from the row's parameters; a row's image, masks and keypoints come from one
    render, kept in a small LRU cache; patients' anatomies are cached too.

    Attributes:
        config: The RetinaPhantomConfig.
    """

    modality = "fundus"
    channels = 3
    mask_names = MASK_NAMES

    def __init__(self, config: RetinaPhantomConfig | None = None, table: pd.DataFrame | None = None):
        self.config = config or RetinaPhantomConfig()
        super().__init__(NAME, make_retina_table(self.config) if table is None else table)
        self._renders = LRUCache(self.config.cache_size)
        self._anatomies = LRUCache(max(4, self.config.cache_size))

    def anatomy(self, index: int) -> PatientAnatomy:
        """The (cached) anatomy of row ``index``'s patient, canonical right-eye frame. Do not modify it."""
        return self._anatomy_of(self._row(index))

    def _anatomy_of(self, row: pd.Series) -> PatientAnatomy:
        return self._anatomies.get(
            str(row["patient_id"]),
            lambda: make_anatomy(int(row["anatomy_seed"]), _traits_from_row(row), self.config.vessel_length_ratio))

    def _render_row(self, row: pd.Series) -> RenderedFundus:
        def compute() -> RenderedFundus:
            acquisition = Acquisition(**{name: row[name] for name in ACQUISITION_FIELDS})
            acquisition.noise_seed = int(acquisition.noise_seed)
            return render_fundus(self._anatomy_of(row), acquisition, int(row["image_size"]))

        return self._renders.get(str(row["image_id"]), compute)

    def rendered(self, index: int) -> RenderedFundus:
        """The full render of row ``index`` (image, masks, keypoints, pose affine); cached, do not modify."""
        return self._render_row(self._row(index))

    def _read_image(self, row: pd.Series) -> np.ndarray:
        return self._render_row(row).image.copy()

    def _read_masks(self, row: pd.Series) -> dict[str, np.ndarray]:
        return {name: mask.copy() for name, mask in self._render_row(row).masks.items()}

    def keypoints(self, index: int) -> dict[str, np.ndarray]:
        """Vessel keypoints of row ``index`` in pixel coordinates.

        Returns:
            {"bifurcation": float32 (N, 2) (x = column, y = row), "bifurcation_kind": int8 (N,) 0 artery /
            1 vein, "crossing": float32 (M, 2)}: visible bifurcations (parent >= 1 px wide, smaller child >= 0.6
            px) and artery/vein crossings of vessels >= 50 um, inside the field of view.
        """
        return {name: value.copy() for name, value in self.rendered(index).keypoints.items()}


def load_phantom_retina(root: str | Path | None = None, **options: Any) -> Cohort:
    """Registry loader of ``phantom-retina``.

    Args:
        root: None to generate on the fly; or a folder written by :func:`anonpaper.data.export.write_cohort`,
            which is then read instead (options must be empty).
        **options: RetinaPhantomConfig fields (n_patients, image_size, seed, ...).

    Returns:
        A RetinaPhantomCohort, or a DiskCohort when ``root`` is given.

    Raises:
        ValueError: For unknown options (listing the valid ones) or options together with a written ``root``.
    """
    return load_phantom(NAME, RetinaPhantomConfig, RetinaPhantomCohort, root, options)


# -- statistics for the cohort chapter ---------------------------------------------------------------------------
